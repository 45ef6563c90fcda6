"""How a dma_copy is cut into pieces for the 16 DMA engines, and what each piece costs (docs/hardware.md#dma).

A transfer moves its elements in iteration order (see `ncsim.engines.dma`). The timing model gives
each DMA engine a contiguous run of that order, its *piece*:

- A transfer that touches SBUF is split along the partitions of its SBUF side (the destination's
  when both are in SBUF): P >= dma_engines partitions go to the engines as evenly as possible in
  consecutive blocks, so 128 partitions give 8 partitions to each of the 16 engines (DMA: "the
  natural mapping") and 64 partitions 4 to each. Fewer partitions than engines would leave engines
  idle, so each partition's elements are cut into min(dma_engines // P, elements) equal runs:
  one partition of 64 KiB becomes 16 pieces of 4 KiB.
- An HBM-to-HBM transfer has no partitions: its elements are split evenly over min(elements,
  dma_engines) engines in consecutive runs, as a large copy would be.

Piece i goes to DMA engine i, on the queue the instruction names. A piece moves
`elements x max(src, dst itemsize)` bytes at `dma_engine_bandwidth x efficiency`, where the
efficiency comes from `Config.dma_efficiency` of its contiguous chunk: the longest run of
consecutive elements that is contiguous in both the source and the destination (counted inside a
partition on chip, where the partition dimension always breaks a run), times the itemsize, and no
more than the piece itself. Its HBM traffic is its elements times the itemsize of each side that is
in HBM (an HBM-to-HBM piece reads and writes HBM, so it counts twice against the HBM cap).
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
    chunk_bytes: int  # contiguous bytes per descriptor: what sets the efficiency
    efficiency: float  # fraction of dma_engine_bandwidth (Config.dma_efficiency of chunk_bytes)
    hbm_bytes: int  # bytes of HBM traffic (reads plus writes)


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
        same = all((p.nbytes, p.efficiency) == (first.nbytes, first.efficiency) for p in self.pieces)
        bw = config.dma_engine_bandwidth / 1e9
        engines = (f"DMA engine {first.engine}" if len(self.pieces) == 1
                   else f"DMA engines {self.pieces[0].engine}-{self.pieces[-1].engine}")
        head = (f"{self.src.label}->{self.dst.label} {self.nbytes} B on queue {self.queue}: {len(self.pieces)}"
                f" piece{'s' if len(self.pieces) != 1 else ''} on {engines}")
        if same:
            each = _piece_ns(first, config)
            body = (f"latency {config.dma_latency_ns} ns + {first.nbytes} B / ({bw:g} B/ns x"
                    f" {first.efficiency:.3g} at {first.chunk_bytes} B chunks) = {config.dma_latency_ns + each:.1f} ns"
                    f"{' each' if len(self.pieces) > 1 else ''}")
        else:
            slowest = max(self.pieces, key=lambda p: _piece_ns(p, config))
            body = (f"latency {config.dma_latency_ns} ns + the slowest piece {slowest.nbytes} B / ({bw:g} B/ns x"
                    f" {slowest.efficiency:.3g} at {slowest.chunk_bytes} B chunks)"
                    f" = {config.dma_latency_ns + _piece_ns(slowest, config):.1f} ns")
        hbm = sum(p.hbm_bytes for p in self.pieces)
        cap = f"; {hbm} B of HBM traffic shares {config.hbm_bandwidth / 1e9:g} GB/s" if hbm else ""
        return f"{head}; {body}{cap}"


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
    if on_chip is None:  # HBM to HBM: equal runs of the elements
        n = min(total, engines)
        sizes = [total * (i + 1) // n - total * i // n for i in range(n)]
    elif on_chip.partitions >= engines:  # blocks of whole partitions
        rows, per_row = on_chip.partitions, total // on_chip.partitions
        sizes = [(rows * (i + 1) // engines - rows * i // engines) * per_row for i in range(engines)]
    else:  # runs inside each partition
        rows, per_row = on_chip.partitions, total // on_chip.partitions
        split = min(engines // rows, per_row)
        sizes = [per_row * (j + 1) // split - per_row * j // split for _ in range(rows) for j in range(split)]
    pieces = []
    for i, elements in enumerate(sizes):
        chunk = min(run, elements) * width
        pieces.append(Piece(i, elements, elements * width, chunk, config.dma_efficiency(chunk), elements * hbm_width))
    return TransferPlan(queue, src.memory, dst.memory, tuple(pieces))
