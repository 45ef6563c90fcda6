"""How a dma_copy is cut into pieces for the 16 DMA engines, and what each piece costs (docs/hardware.md#dma).

A transfer moves its elements in iteration order (see `ncsim.engines.dma`). The timing model gives
each DMA engine a contiguous run of that order, its *piece*:

- A transfer that touches SBUF is split along the partitions of its SBUF side (the destination's
  when both are in SBUF) into blocks of pmax / dma_engines = 8 consecutive partitions, block k on
  DMA engine k: 128 partitions give 8 partitions to each of the 16 engines, 64 partitions 8 to
  each of engines 0-7, and 1 to 8 partitions make one piece on engine 0. The DMA overview says
  each engine corresponds to 8 partition lanes and shows it: A[4, 4096] bf16 into 4 partitions is
  one 32 KiB transfer on the first DMA engine (its Example 1), A[128, 128] one 2 KiB transfer on
  each of the 16 (Example 2); the bandwidth guide: "Fewer partitions means fewer engines
  utilized". (Until issue 15's DMA session ncsim cut fewer than 16 partitions into runs over all 16
  engines, which the examples contradict.) The blocks start at the transfer's first partition:
  the examples start at partition 0 and cannot tell this from a fixed partition-to-engine wiring.
- An HBM-to-HBM transfer has no partitions: its elements are split evenly over min(elements,
  dma_engines) engines in consecutive runs, as a large copy would be.

Piece i goes to DMA engine i, on the queue the instruction names. A piece moves
`elements x max(src, dst itemsize)` bytes at `dma_engine_bandwidth x efficiency`, the efficiency
the lower of two, one per level at which the architecture guide says a DMA pays overhead ("There is
some performance overhead at both DMA buffer and transfer levels"):

- the buffer level: each contiguous chunk of the piece (the longest run of consecutive elements
  that is contiguous in both the source and the destination, counted inside a partition on chip,
  where the partition dimension always breaks a run) costs `dma_chunk_ns` = 7.45 ns besides its
  bytes, so the piece moves at data / (data + chunks x 7.45 ns) of the engine's rate. The constant
  is the DMA overview's figure at 4 KiB per partition (97%), where the transfer level below costs
  nothing more;
- the transfer level: `Config.dma_efficiency` (the DMA overview's figure of throughput by bytes per
  partition for 128-partition transfers, i.e. transfers of 8 partition lanes per engine) at the
  piece's bytes per partition lane, its bytes / 8 (pmax / dma_engines): the figure's point at F
  bytes per partition is a transfer of 8 x F bytes on each engine, and the performance guide states
  the condition per transfer ("the transfer size on Trainium/Inferentia2 should be larger than 32KiB
  to achieve ideal bandwidth", 8 x 4 KiB). A one-partition load of a 2 KiB row is a 2 KiB
  transfer, which the figure puts at 10% (256 B per lane), not the 81% of its 2 KiB row.

For the figure's own transfers (8 partitions of one row per engine) the transfer level binds at
every point up to 4 KiB, so the figure is read as it is there; from 8 KiB rows the buffer level
gives 98.5% and more (the figure: 98-100%). The buffer level binds for large pieces of short rows (a
32 x 32 window of fp32 rows from a larger image: 256 chunks of 128 B per engine, about 50%).
(Until issue 15's calibration the buffer level was the figure read at the chunk's bytes, 1.5% for
32 B chunks whatever the transfer's size: the figure's small points are a transfer's cost, which
the transfer level already counts, not a chunk's.)

The transfer level's excess over the buffer level is the piece's *fixed part* (`Piece.fixed_ns`):
the figure's small points come to a constant 1.0-1.2 us per transfer up to 2 KiB per engine (8 x F
/ (17 B/ns x efficiency) at F = 32 B ... 256 B per partition), work done once per transfer, like
the descriptor setup the bandwidth guide lists among what its ~1300 ns "semaphore-to-start latency"
covers. A piece whose DMA engine is idle does that work while its latency runs, so it becomes
eligible `lead_ns` = latency - min(fixed part, latency) after its dma_copy issued and a lone
transfer takes latency + its time at the buffer level; a piece that waits for its engine pays its
whole time there, as a stream of transfers does (the figure). (Until issue 15's latency session a
piece became eligible the whole latency after issue, so a lone small transfer paid the per-transfer
work twice: 1300 ns, then the transfer level's 1.0-1.2 us.)

Its HBM traffic is its elements times the itemsize of each side that is in HBM (an HBM-to-HBM
piece reads and writes HBM, so it counts twice against the HBM cap).
"""

from __future__ import annotations

from dataclasses import dataclass

from ncsim.config import Config
from ncsim.memory.access import AccessPattern, Memory


@dataclass(frozen=True)
class Piece:
    """The part of one transfer that one DMA engine moves."""

    engine: int  # DMA engine 0..dma_engines-1
    elements: int
    nbytes: int  # bytes moved: elements x the wider itemsize
    chunk_bytes: int  # contiguous bytes per DMA buffer (chunk)
    efficiency: float  # fraction of dma_engine_bandwidth: the lower of the buffer and transfer levels
    hbm_bytes: int  # bytes of HBM traffic (reads plus writes)
    chunks: int  # contiguous chunks: the buffer level
    fixed_ns: float  # the transfer level's time over the buffer level's (0 when the buffer level binds)


@dataclass(frozen=True)
class TransferPlan:
    """A dma_copy as the DMA engines see it."""

    queue: int
    src: Memory
    dst: Memory
    pieces: tuple[Piece, ...]

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.pieces)

    def formula(self, config: Config) -> str:
        """The cost of the transfer in words, with its numbers, as if it ran alone."""
        first = self.pieces[0]
        same = all((p.nbytes, p.efficiency, p.fixed_ns) == (first.nbytes, first.efficiency, first.fixed_ns)
                   for p in self.pieces)
        engines = (f"DMA engine {first.engine}" if len(self.pieces) == 1
                   else f"DMA engines {self.pieces[0].engine}-{self.pieces[-1].engine}")
        head = (f"{self.src.label}->{self.dst.label} {self.nbytes} B on queue {self.queue}: {len(self.pieces)}"
                f" piece{'s' if len(self.pieces) != 1 else ''} on {engines}")
        if same:
            body = _alone_text(first, config) + (" each" if len(self.pieces) > 1 else "")
        else:
            slowest = max(self.pieces, key=lambda p: alone_ns(p, config))
            body = "the slowest piece: " + _alone_text(slowest, config)
        hbm = sum(p.hbm_bytes for p in self.pieces)
        cap = f"; {hbm} B of HBM traffic shares {config.hbm_bandwidth / 1e9:g} GB/s" if hbm else ""
        return f"{head}; {body}{cap}"


def lead_ns(piece: Piece, config: Config) -> float:
    """From its dma_copy's issue until the piece is eligible: the fixed latency, less the part of it
    that the piece's own fixed part (done while the latency runs) overlaps."""
    return config.dma_latency_ns - min(piece.fixed_ns, config.dma_latency_ns)


def alone_ns(piece: Piece, config: Config) -> float:
    """A piece's time from its dma_copy's issue to its end when its DMA engine is idle."""
    return lead_ns(piece, config) + _piece_ns(piece, config)


def _alone_text(piece: Piece, config: Config) -> str:
    """alone_ns in words, with its numbers."""
    bw = config.dma_engine_bandwidth / 1e9
    text = (f"latency {config.dma_latency_ns} ns + {piece.nbytes} B / ({bw:g} B/ns x {piece.efficiency:.3g} at"
            f" {_at(piece, config)})")
    overlap = config.dma_latency_ns - lead_ns(piece, config)
    if overlap > 0:
        text += f" - {overlap:.1f} ns of its per-transfer work done during the latency"
    return f"{text} = {alone_ns(piece, config):.1f} ns"


def _lanes(config: Config) -> int:
    """Partition lanes per DMA engine: pmax / dma_engines, 8 (DMA overview)."""
    return -(-config.pmax // config.dma_engines)


def _at(piece: Piece, config: Config) -> str:
    """What set a piece's efficiency: its chunks (buffer level) or its bytes per lane (transfer level)."""
    lanes = _lanes(config)
    if config.dma_efficiency(piece.nbytes / lanes) <= piece.efficiency:
        return f"{piece.nbytes / lanes:g} B per lane of a {piece.nbytes} B transfer"
    return f"{piece.chunks} chunks of {piece.chunk_bytes} B, {config.dma_chunk_ns:g} ns each"


def chunk_efficiency(nbytes: int, chunks: int, config: Config) -> float:
    """The buffer level: the fraction of the engine's rate left to `nbytes` moved in `chunks`
    contiguous chunks, each costing dma_chunk_ns besides its bytes."""
    data_ns = nbytes / config.dma_engine_bandwidth * 1e9
    overhead = chunks * config.dma_chunk_ns
    return data_ns / (data_ns + overhead) if overhead > 0 else 1.0


def _piece_ns(piece: Piece, config: Config) -> float:
    return piece.nbytes / (config.dma_engine_bandwidth * piece.efficiency) * 1e9


def contiguous_run(ap: AccessPattern) -> int:
    """The number of consecutive elements, in iteration order, that lie at consecutive addresses
    (within one partition on chip)."""
    run = 1
    for step, count in reversed(ap.dims):
        if count == 1:
            continue
        if step != run:
            break
        run *= count
    return run


def plan_transfer(dst: AccessPattern, src: AccessPattern, queue: int, config: Config) -> TransferPlan:
    """The pieces of a dma_copy from `src` to `dst` (the same number of elements) on DMA queue `queue`."""
    total = src.num_elements
    width = max(src.dtype.itemsize, dst.dtype.itemsize)
    hbm_width = (src.dtype.itemsize if src.memory == Memory.HBM else 0) + \
                (dst.dtype.itemsize if dst.memory == Memory.HBM else 0)
    run = min(contiguous_run(src), contiguous_run(dst))
    on_chip = dst if dst.on_chip else src if src.on_chip else None
    engines = config.dma_engines
    lanes = _lanes(config)  # partition lanes per DMA engine, as in a 128-partition transfer
    if on_chip is None:  # HBM to HBM: equal runs of the elements
        n = min(total, engines)
        sizes = [total * (i + 1) // n - total * i // n for i in range(n)]
    else:  # blocks of `lanes` consecutive partitions, block k on DMA engine k
        rows, per_row = on_chip.partitions, total // on_chip.partitions
        sizes = [min(lanes, rows - b) * per_row for b in range(0, rows, lanes)]
    pieces = []
    for i, elements in enumerate(sizes):
        per_chunk = min(run, elements)
        chunks = -(-elements // per_chunk)
        # the lower of the buffer level (the chunks) and the transfer level (the piece per lane)
        buffer = chunk_efficiency(elements * width, chunks, config)
        efficiency = min(buffer, config.dma_efficiency(elements * width / lanes))
        fixed = elements * width / config.dma_engine_bandwidth * 1e9 * (1 / efficiency - 1 / buffer)
        pieces.append(Piece(i, elements, elements * width, per_chunk * width, efficiency, elements * hbm_width,
                            chunks, max(fixed, 0.0)))
    return TransferPlan(queue, src.memory, dst.memory, tuple(pieces))
