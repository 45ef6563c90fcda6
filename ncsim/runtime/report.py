"""The report printed after every run: where the time went, and what bounds the kernel.

`report(result)` turns a TimingResult into a `Report` (numbers, for the Python API and tests);
`Report.format()` is the text the CLI prints. Times are ticks of `config.tick_hz` in the data and
µs in the text.

Per engine (Tensor, Vector, Scalar, GpSimd, Sync) the run's total time T splits exactly into
- busy: its instructions' busy time (end - start; a dma_copy or a semaphore instruction takes none);
- sem wait: ready - avail, waiting for semaphores; `sem_wait_dma` is the part spent waiting for DMA,
  the rest waited for engines' work. What a wait waited for is its releaser (the instruction whose
  update, the last one it needed, let it go) if that is a DMA transfer, or an engine instruction
  that did not itself wait on a semaphore at least as long as it was busy; such an instruction
  passes on what it waited for, and so on back (a store that waits for a copy that waited for a
  load waited for the DMA);
- port wait: start - ready, waiting for the SBUF or PSUM port (docs/hardware.md#ports);
- idle: the rest (before its first instruction could start, after its last one, or no work).

DMA: bytes moved and transfers per direction (hbm->sbuf, sbuf->hbm, sbuf->sbuf, hbm->hbm, ...), with
the achieved bandwidth both over the whole run (bytes / T) and while moving (bytes / the time during
which some piece of that direction moved data); the DMA engines' busy share (the sum of the pieces'
durations / (dma_engines x T)) and their bytes-weighted chunk efficiency; HBM traffic against
`config.hbm_bandwidth` x T, and the time HBM ran at its cap. The GpSimd cores' TCM accessor blocks
from and to HBM (tcm_load/tcm_store of an HBM operand, timed by the cores through the DMA model's
latency and bandwidth) are transfers of directions hbm->tcm and tcm->hbm and HBM traffic, but no DMA
engine's pieces: they add nothing to the busy share, the chunk efficiency or the timeline. Tensor: flops (2 K M N per nc_matmul)
against `config.tensor_peak_flops` x T; fp32 matmuls run at a quarter of that peak.

Timeline: every instant of the run has an engine busy (C), or else DMA data moving (M), or else a
transfer waiting out its fixed latency (L): when nothing runs, moves or waits for latency the
scheduler has nothing left to do, so C + M + L = T.

The verdict, with U(e) = busy(e) / T for the four compute engines, U(dma) = the larger of the DMA
engines' busy share and the HBM utilisation, and THRESHOLD = 60% ("most of the time"):
1. Compute-bound, by engine E, if U(E) is the largest of all these and U(E) >= THRESHOLD.
2. Bandwidth-bound if U(dma) is the largest and U(dma) >= THRESHOLD: "HBM bandwidth" if HBM ran at
   its cap for at least half the time that DMA data moved (the cap slowed the DMA engines down, so
   their busy share measures HBM), else "DMA bandwidth" (the DMA engines themselves; their chunk
   efficiency says whether small chunks are why).
3. Otherwise nothing is busy most of the time: the time goes to a dependency chain, the critical
   path. It is walked back from what ends last (the instruction with the latest end, the first of
   equals; or a DMA piece, if one ends later) to time 0; every tick of the run lies on it once:
   - an engine instruction: [start, end) is its engine's busy time, [ready, start) port wait; then
     if ready > avail, its semaphore wait: the path goes on to its releaser (the update it needed
     last, as above), at its done; for a dma_copy releaser, to its piece that ended last. Else
     program order on its engine: the previous instruction of its stream, whose end is avail (the
     first of a stream starts the run, at 0);
   - a DMA piece: [piece_start, piece_end) is DMA data moving; then, if its DMA engine's previous
     piece ended after the piece's latency did, that piece; else [start, start + latency) of its
     dma_copy is DMA latency, and the path goes on to the dma_copy.
   critical_path gives the ticks of each PATH_KINDS kind on the path (each engine's busy time, "dma
   data", "dma latency", "port wait", and "other" for gaps the walk cannot explain: none in a run
   that finished); they add up to T. If one kind holds >= THRESHOLD of the path: "DMA latency",
   "DMA data movement" or "port waits" (an engine cannot: it would be busy >= THRESHOLD of the run
   and rule 1 or 2 would hold). Else a dependency chain, listing the kinds, largest first (ties in
   PATH_KINDS order), that hold at least 1% (rounded) of the path.
Ties go to the earlier candidate: engines in Tensor, Vector, Scalar, GpSimd order, then the DMA.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, replace

import numba
import numpy as np

from ncsim import dtypes, isa
from ncsim.config import Config
from ncsim.memory.access import AccessPattern, Memory
from ncsim.runtime.timing import ENGINES, TimingResult, dma_latency_ticks

__all__ = ["PATH_KINDS", "THRESHOLD", "DirectionStats", "EngineStats", "Report", "Verdict", "report"]

THRESHOLD = 0.6  # "most of the time": the share of the run from which a resource bounds the kernel
COMPUTE = ("tensor", "vector", "scalar", "gpsimd")
_DMA_COPY = isa.BY_MNEMONIC["dma_copy"].opcode
_NC_MATMUL = isa.BY_MNEMONIC["nc_matmul"].opcode
_WIDTH = 100  # columns of the text report
# What the critical path is made of: each engine's busy time, DMA data moving, DMA latency, port waits,
# and anything else (gaps the walk cannot explain: none in a run that finished).
PATH_KINDS = (*ENGINES, "dma data", "dma latency", "port wait", "other")


@dataclass(frozen=True)
class EngineStats:
    """One engine's share of the run, in ticks: busy + sem_wait + port_wait + idle = the total."""

    name: str
    instructions: int
    busy: int
    sem_wait: int
    sem_wait_dma: int  # the part of sem_wait released by a DMA transfer's update
    port_wait: int
    idle: int


@dataclass(frozen=True)
class DirectionStats:
    """The transfers of one direction (source memory -> destination memory)."""

    direction: str  # e.g. "hbm->sbuf"
    transfers: int
    bytes: int
    moving: int  # ticks during which some piece of this direction moved data


@dataclass(frozen=True)
class Verdict:
    """What bounds the kernel: `kind` is "engine", "dma-bandwidth", "hbm-bandwidth" (rules 1 and 2),
    "dma-latency", "dma-data", "ports", "chain" (rule 3) or "empty"; `engine` names the engine for
    "engine"; `text` is the line."""

    kind: str
    engine: str | None
    text: str


@dataclass(frozen=True)
class Report:
    """Where the time of one run went. Times are ticks of config.tick_hz (`ns()` converts)."""

    config: Config
    total: int
    engines: tuple[EngineStats, ...]  # in ENGINES order
    directions: tuple[DirectionStats, ...]
    transfers: int
    queues: tuple[int, ...]  # DMA queue numbers used
    dma_engines_used: int
    dma_bytes: int
    dma_piece_ticks: int  # the pieces' durations summed (DMA engine time used)
    dma_active: int  # ticks during which some piece moved data
    chunk_efficiency: float  # bytes-weighted efficiency of the pieces (1.0 with no DMA)
    hbm_bytes: int  # HBM traffic, reads plus writes
    hbm_capped: int  # ticks during which HBM ran at its cap
    flops: int
    fp32_matmuls: int  # nc_matmul instructions with an fp32 operand (4x slower)
    computing: int  # ticks with some engine busy (C)
    moving: int  # ticks with no engine busy and DMA data moving (M)
    latency: int  # ticks with neither: transfers waiting out their latency (L)
    critical_path: tuple[tuple[str, int], ...]  # (PATH_KINDS name, ticks on the critical path): sums to total
    verdict: Verdict
    # Each GpSimd core's busy ticks over the run's gpsimd_calls (empty without any): the engine is busy
    # for a call until its slowest core ends; a faster core is done earlier (docs/gpsimd.md#cycles).
    gpsimd_cores: tuple[int, ...] = ()
    # Of `transfers`, the GpSimd cores' TCM accessor blocks from and to HBM (tcm_load / tcm_store of an
    # HBM operand): timed by the cores through the DMA model's latency and bandwidth, counted in the
    # DMA bytes and the HBM traffic, not in the DMA engines' busy share (they are no queue's pieces).
    tcm_blocks: int = 0

    # ------------------------------------------------------------------ units and shares
    def ns(self, ticks: float) -> float:
        return ticks * 1e9 / self.config.tick_hz

    @property
    def total_ns(self) -> float:
        return self.ns(self.total)

    @property
    def total_us(self) -> float:
        return self.total_ns / 1000

    def share(self, ticks: float) -> float:
        """ticks as a fraction of the run (0 for an empty run)."""
        return ticks / self.total if self.total else 0.0

    def path(self, kind: str) -> int:
        """Ticks of the critical path spent in `kind` (one of PATH_KINDS)."""
        return dict(self.critical_path)[kind]

    def cycles(self, engine: str) -> float:
        """The run's length in cycles of an engine's clock ("tensor", "vector", "scalar", "gpsimd")."""
        return self.total / self.config.ticks_per_cycle(engine)

    def engine(self, name: str) -> EngineStats:
        return self.engines[ENGINES.index(name)]

    @property
    def dma_busy(self) -> float:
        """The DMA engines' busy share: piece time / (dma_engines x T)."""
        return self.share(self.dma_piece_ticks / self.config.dma_engines)

    @property
    def hbm_utilisation(self) -> float:
        """HBM traffic / (hbm_bandwidth x T)."""
        seconds = self.total / self.config.tick_hz
        return self.hbm_bytes / (self.config.hbm_bandwidth * seconds) if self.total else 0.0

    @property
    def tensor_utilisation(self) -> float:
        """flops / (T x tensor_peak_flops): against the bf16/fp16/fp8 peak."""
        seconds = self.total / self.config.tick_hz
        return self.flops / (self.config.tensor_peak_flops * seconds) if self.total else 0.0

    def bandwidth(self, d: DirectionStats, while_moving: bool = False) -> float:
        """Achieved bytes per second of a direction, over the run or while it moved data."""
        ticks = d.moving if while_moving else self.total
        return d.bytes * self.config.tick_hz / ticks if ticks else 0.0

    # ------------------------------------------------------------------ text
    def format(self, title: str | None = None) -> str:
        cfg = self.config
        lines = [f"timing report{f': {title}' if title else ''}"]
        lines.append(f"total    {self.total_ns:.1f} ns = {self.total_us:.3f} µs = {self.total} ticks of"
                     f" {_hz(cfg.tick_hz)}")
        clocks: dict[int, list[str]] = {}
        for e in COMPUTE:
            clocks.setdefault(getattr(cfg, f"{e}_clock_hz"), []).append(e)
        parts = [f"{' and '.join(names)} {self.cycles(names[0]):,.0f} at {_hz(hz)}" for hz, names in clocks.items()]
        lines.append(f"cycles   {'; '.join(parts)}")
        lines.append("")
        lines += self.table()
        if self.gpsimd_cores:
            lines.append("cores    GpSimd cores busy: " + ", ".join(
                f"{c} {self.ns(t) / 1000:.3f} µs {100 * self.share(t):.0f}%" for c, t in enumerate(self.gpsimd_cores)))
        lines.append("")
        lines += self._dma_lines()
        peak = cfg.tensor_peak_flops
        caveat = (f"; {self.fp32_matmuls} fp32 matmul{'s' if self.fp32_matmuls != 1 else ''} count against it"
                  f" but run at a quarter of it ({peak / cfg.fp32_matmul_slowdown / 1e12:.2f} TFLOPS)"
                  if self.fp32_matmuls else "")
        lines.append(f"tensor   {self.flops:,} flops = {100 * self.tensor_utilisation:.1f}% of the"
                     f" {peak / 1e12:.2f} TFLOPS bf16 peak{caveat}")
        lines.append(f"verdict  {self.verdict.text}")
        return "\n".join(_wrap(line) for line in lines)

    def table(self) -> list[str]:
        """The per-engine table: instructions, then busy, semaphore, port waits and idle as µs and %."""
        head = (f"{'engine':<7}{'instrs':>8}{'busy':>17}{'sem wait':>17}{'on DMA':>8}{'port wait':>17}"
                f"{'idle':>17}")
        rows = [head]
        for s in self.engines:
            cells = [self._cell(s.busy), self._cell(s.sem_wait), f"{100 * self.share(s.sem_wait_dma):>7.1f}%",
                     self._cell(s.port_wait), self._cell(s.idle)]
            rows.append(f"{s.name:<7}{s.instructions:>8}" + "".join(cells))
        return rows

    def _cell(self, ticks: int) -> str:
        return f"{self.ns(ticks) / 1000:>10.3f} µs{100 * self.share(ticks):>4.0f}%"

    def _dma_lines(self) -> list[str]:
        cfg = self.config
        if not self.transfers:
            return ["dma      no transfers"]
        queues = ", ".join(str(q) for q in self.queues)
        where = (f" on queue{'s' if len(self.queues) != 1 else ''} {queues} ({self.dma_engines_used} of"
                 f" {cfg.dma_engines} DMA engines)" if self.queues else "")
        blocks = f" ({self.tcm_blocks} of them GpSimd TCM blocks)" if self.tcm_blocks else ""
        lines = [(f"dma      {self.transfers} transfer{'s' if self.transfers != 1 else ''}{where}{blocks},"
                  f" {_size(self.dma_bytes)}; DMA engines busy {100 * self.dma_busy:.1f}%,"
                  f" chunk efficiency {100 * self.chunk_efficiency:.0f}%")]
        for d in self.directions:
            moving = (f" {self.bandwidth(d, True) / 1e9:>6.1f} GB/s while moving" if d.direction not in _TCM_DIRECTIONS
                      else " timed by the GpSimd cores")
            lines.append(f"  {d.direction:<11}{_size(d.bytes):>11} in {d.transfers:>5} transfers"
                         f"  {self.bandwidth(d) / 1e9:>7.1f} GB/s over the run,{moving}")
        lines.append(f"  hbm        {_size(self.hbm_bytes):>11} of traffic = {100 * self.hbm_utilisation:.1f}% of"
                     f" {cfg.hbm_bandwidth / 1e9:g} GB/s over the run; at the cap"
                     f" {100 * self.share(self.hbm_capped):.1f}% of the time")
        return lines


def _wrap(line: str) -> str:
    """A line of the report in lines of at most _WIDTH columns, broken after "; " where it can be,
    continuations indented under its text."""
    if len(line) <= _WIDTH:
        return line
    indent = " " * 11
    parts = [p + ";" for p in line.split("; ")]
    parts[-1] = parts[-1][:-1]
    out, current = [], parts[0]
    for part in parts[1:]:
        if len(current) + 1 + len(part) <= _WIDTH:
            current += " " + part
        else:
            out.append(current)
            current = indent + part
    out.append(current)
    return "\n".join(textwrap.fill(p, _WIDTH, subsequent_indent=indent, break_on_hyphens=False) for p in out)


def _hz(hz: float) -> str:
    return f"{hz / 1e9:g} GHz"


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


# --------------------------------------------------------------------------- building it
#
# Speed: everything per instruction or per DMA piece is one pass of a numba kernel over the
# result's arrays, and everything the same for a body (bytes, engines, directions, efficiency,
# flops) is counted once per body and multiplied by its instructions. Lengths of unions of
# intervals are sweeps over sorted starts and sorted ends: an engine's instructions are in time
# order already, and the pieces in order of index nearly are, so stable sorts (timsort, which
# follows runs) cost little. On tools/bench_timing.py --million (1 000 544 instructions, 1 947 904
# pieces) the report took 1.0 s, 0.5 s of it in a Python set over every piece and 0.3 s in full
# sorts; it now takes 0.12-0.16 s of CPU (0.035 s at the default 303 168 instructions).

def report(result: TimingResult) -> Report:
    """The report of a timed run (see the module docstring for every number and the verdict)."""
    r, cfg = result, result.config
    total = int(r.total_ticks)
    n = r.count
    costs = r.body_cost
    counts = np.bincount(r.body, minlength=len(costs)) if n else np.zeros(len(costs), np.int64)
    used = np.flatnonzero(counts)  # the bodies of the run, in order of body
    body_dma = r.body_opcode == _DMA_COPY

    # Per instruction: what each semaphore wait was for (its releaser that finished last, followed
    # back, see above), and each engine's busy, semaphore and port times.
    releaser, is_dma, first_of_body, sums = _instructions(r.first, r.body, body_dma, r.avail, r.ready, r.start,
                                                          r.end, r.done, r.edge_wait, r.edge_signal)
    engines = []
    for e, name in enumerate(ENGINES):
        b, s, p, s_dma = (int(x) for x in sums[e])
        engines.append(EngineStats(name, int(r.first[e + 1] - r.first[e]), b, s, s_dma, p, total - b - s - p))

    # DMA, per body: directions, queues, DMA engines, bytes and chunk efficiency.
    moving = [int(b) for b in used if costs[b].transfer is not None and costs[b].transfer.pieces]
    pairs = sorted({(int(costs[b].transfer.src), int(costs[b].transfer.dst)) for b in moving},
                   key=lambda p: (p[0] != Memory.HBM, p))
    dir_of_body = np.full(len(costs), -1, np.int64)
    for b in moving:
        dir_of_body[b] = pairs.index((int(costs[b].transfer.src), int(costs[b].transfer.dst)))
    transfers, nbytes = [0] * len(pairs), [0] * len(pairs)
    dma_bytes = hbm_bytes = 0
    for b in moving:
        count, pieces = int(counts[b]), costs[b].transfer.pieces
        transfers[dir_of_body[b]] += count
        nbytes[dir_of_body[b]] += count * sum(p.nbytes for p in pieces)
        dma_bytes += count * sum(p.nbytes for p in pieces)
        hbm_bytes += count * sum(p.hbm_bytes for p in pieces)
    queues = tuple(sorted({costs[b].transfer.queue for b in used if costs[b].transfer is not None}))
    dma_engines_used = len({p.engine for b in moving for p in costs[b].transfer.pieces})
    eff_num = eff_den = 0.0
    for b in used:
        c, count = costs[b], int(counts[b])
        if c.transfer is not None:
            eff_num += count * sum(p.nbytes * p.efficiency for p in c.transfer.pieces)
            eff_den += count * sum(p.nbytes for p in c.transfer.pieces)

    # Per piece: the time some piece of each direction moved, the DMA engines' time, and for the
    # critical path each dma_copy's piece that ended last and each piece's predecessor on its engine.
    by_start = np.argsort(r.piece_start, kind="stable")
    by_end = np.argsort(r.piece_end, kind="stable")
    piece_ticks, last_piece, prev_piece, p_ptr, p_start, p_end = _pieces(
        r.piece_ptr, r.body, dir_of_body, len(pairs), r.piece_engine, r.piece_start, r.piece_end, by_start, by_end)
    directions = []
    for d, (a, b) in enumerate(pairs):
        lo, hi = p_ptr[d], p_ptr[d + 1]
        moved = _sweep(p_start[lo:hi], p_end[lo:hi], _EMPTY, _EMPTY)[0]
        directions.append(DirectionStats(f"{Memory(a).label}->{Memory(b).label}", transfers[d], nbytes[d], moved))
    # The GpSimd cores' TCM accessor blocks from and to HBM: through the DMA model, so DMA traffic too.
    gpsimd_cores, blocks = _gpsimd(r)
    for name, n, size in ((_TCM_DIRECTIONS[0], blocks[0], blocks[1]), (_TCM_DIRECTIONS[1], blocks[2], blocks[3])):
        if n:
            directions.append(DirectionStats(name, int(n), int(size), 0))
    dma_bytes += int(blocks[1] + blocks[3])
    hbm_bytes += int(blocks[1] + blocks[3])
    cap = cfg.hbm_bandwidth / cfg.tick_hz
    capped = _capped(r.hbm_time, r.hbm_rate, total, cap * (1 - 1e-9))

    # Tensor: flops, and how many matmuls are fp32 (their own peak is a quarter).
    flops = fp32 = 0
    for b in used:
        flops += int(counts[b]) * costs[b].flops
        if r.body_opcode[b] == _NC_MATMUL:
            ops = r.instruction(int(first_of_body[b])).operands
            if any(isinstance(ops.get(x), AccessPattern) and ops[x].dtype == dtypes.FLOAT32
                   for x in ("stationary", "moving")):
                fp32 += int(counts[b])

    # Timeline: some engine busy; else data moving; else latency.
    work = r.end > r.start
    every = slice(p_ptr[-2], p_ptr[-1])  # every piece that moved (the last block of _pieces)
    computing, dma_active, both = _sweep(np.sort(r.start[work], kind="stable"), np.sort(r.end[work], kind="stable"),
                                         p_start[every], p_end[every])
    rep = Report(
        config=cfg, total=total, engines=tuple(engines), directions=tuple(directions),
        transfers=int(counts[body_dma].sum()) + int(blocks[0] + blocks[2]),
        queues=queues, dma_engines_used=dma_engines_used, dma_bytes=dma_bytes, dma_piece_ticks=piece_ticks,
        dma_active=dma_active, chunk_efficiency=eff_num / eff_den if eff_den else 1.0, hbm_bytes=hbm_bytes,
        hbm_capped=capped, flops=flops, fp32_matmuls=fp32, computing=computing, moving=both - computing,
        latency=total - both, critical_path=_critical_path(r, releaser, is_dma, last_piece, prev_piece),
        verdict=Verdict("empty", None, ""), gpsimd_cores=gpsimd_cores, tcm_blocks=int(blocks[0] + blocks[2]))
    return replace(rep, verdict=verdict(rep))


_TCM_DIRECTIONS = ("hbm->tcm", "tcm->hbm")


def _gpsimd(r: TimingResult) -> tuple[tuple[int, ...], np.ndarray]:
    """Each GpSimd core's busy ticks over the run's calls (empty without any), and the calls' TCM
    accessor blocks from and to HBM: [loads, their bytes, stores, their bytes]."""
    from ncsim.engines.cores import call_runs

    ks, ticks, blocks = call_runs(r)
    return (tuple(int(t) for t in ticks.sum(axis=0)) if len(ks) else ()), blocks.sum(axis=0)


_DMA_CAUSE, _ENGINE_CAUSE = 1, 2
_DATA, _LATENCY, _PORT, _OTHER = len(ENGINES), len(ENGINES) + 1, len(ENGINES) + 2, len(ENGINES) + 3
_EMPTY = np.zeros(0, np.int64)


@numba.njit(cache=True)
def _instructions(first, body, body_dma, avail, ready, start, end, done, edge_wait, edge_signal):
    """(releaser, is_dma, first_of_body, sums): releaser[k] is the releaser of instruction k's
    semaphore wait that finished last (the last such edge of equals; -1 if none); is_dma[k]; the
    first instruction of each body (-1: none); sums[e] = (busy, sem wait, port wait, sem wait for
    DMA) of engine e's instructions."""
    n = body.shape[0]
    is_dma = np.empty(n, np.bool_)
    first_of_body = np.full(body_dma.shape[0], -1, np.int64)
    for k in range(n):
        is_dma[k] = body_dma[body[k]]
        if first_of_body[body[k]] < 0:
            first_of_body[body[k]] = k
    releaser = np.full(n, -1, np.int64)
    when = np.empty(n, np.int64)
    for i in range(edge_wait.shape[0]):
        w = edge_wait[i]
        s = edge_signal[i]
        if releaser[w] < 0 or done[s] >= when[w]:
            releaser[w] = s
            when[w] = done[s]
    passes_on = np.empty(n, np.bool_)
    for k in range(n):
        sem = ready[k] - avail[k]
        passes_on[k] = sem > 0 and sem >= end[k] - start[k]
    cause = _causes(releaser, is_dma, passes_on)
    sums = np.zeros((first.shape[0] - 1, 4), np.int64)
    for e in range(first.shape[0] - 1):
        for k in range(first[e], first[e + 1]):
            sums[e, 0] += end[k] - start[k]
            sums[e, 1] += ready[k] - avail[k]
            sums[e, 2] += start[k] - ready[k]
            if cause[k] == _DMA_CAUSE:
                sums[e, 3] += ready[k] - avail[k]
    return releaser, is_dma, first_of_body, sums


@numba.njit(cache=True)
def _pieces(piece_ptr, body, dir_of_body, n_dir, piece_engine, piece_start, piece_end, by_start, by_end):
    """(piece_ticks, last_piece, prev_piece, ptr, starts, ends): the pieces' durations summed; the
    piece of each dma_copy that ended last (the last of equals); the piece each piece's DMA engine
    took before it; and the pieces that moved data (piece_end > piece_start) of each direction d, then
    all of them, as block d of `starts` (sorted) and of `ends` (sorted): rows ptr[d]..ptr[d + 1]."""
    n = body.shape[0]
    m = piece_start.shape[0]
    ticks = 0
    last_piece = np.full(n, -1, np.int64)
    direction = np.full(m, -1, np.int64)  # -1: it moved nothing
    ptr = np.zeros(n_dir + 2, np.int64)
    for k in range(n):
        for h in range(piece_ptr[k], piece_ptr[k + 1]):
            ticks += piece_end[h] - piece_start[h]
            if last_piece[k] < 0 or piece_end[h] >= piece_end[last_piece[k]]:
                last_piece[k] = h
            if piece_end[h] > piece_start[h]:
                direction[h] = dir_of_body[body[k]]
                ptr[direction[h] + 1] += 1
    for d in range(n_dir):
        ptr[d + 1] += ptr[d]
    ptr[n_dir + 1] = 2 * ptr[n_dir]
    prev_piece = np.full(m, -1, np.int64)
    last_on = np.full(np.int64(piece_engine.max()) + 1 if m else 1, -1, np.int64)
    starts = np.empty(ptr[n_dir + 1], np.int64)
    ends = np.empty(ptr[n_dir + 1], np.int64)
    fill = ptr[:-1].copy()
    for i in range(m):
        h = by_start[i]
        prev_piece[h] = last_on[piece_engine[h]]  # each DMA engine moves one piece at a time: no ties
        last_on[piece_engine[h]] = h
        if direction[h] >= 0:
            starts[fill[direction[h]]] = piece_start[h]
            fill[direction[h]] += 1
            starts[fill[n_dir]] = piece_start[h]
            fill[n_dir] += 1
    fill = ptr[:-1].copy()
    for i in range(m):
        h = by_end[i]
        if direction[h] >= 0:
            ends[fill[direction[h]]] = piece_end[h]
            fill[direction[h]] += 1
            ends[fill[n_dir]] = piece_end[h]
            fill[n_dir] += 1
    return ticks, last_piece, prev_piece, ptr, starts, ends


@numba.njit(cache=True)
def _sweep(a_start, a_end, b_start, b_end):
    """(|A|, |B|, |A u B|): the lengths of the unions of two sets of intervals, A given as its
    starts and its ends, each sorted ascending, B likewise."""
    na, nb = a_start.shape[0], b_start.shape[0]
    i = j = x = y = 0  # next start and end of A, of B
    in_a = in_b = 0
    len_a = len_b = len_ab = 0
    t = 0
    while x < na or y < nb:
        # the next event: ends before starts at one instant (the measure is the same either way)
        tn = a_end[x] if x < na else _BIG
        kind = 0
        if y < nb and b_end[y] < tn:
            tn, kind = b_end[y], 1
        if i < na and a_start[i] < tn:
            tn, kind = a_start[i], 2
        if j < nb and b_start[j] < tn:
            tn, kind = b_start[j], 3
        if in_a > 0:
            len_a += tn - t
        if in_b > 0:
            len_b += tn - t
        if in_a > 0 or in_b > 0:
            len_ab += tn - t
        t = tn
        if kind == 0:
            in_a -= 1
            x += 1
        elif kind == 1:
            in_b -= 1
            y += 1
        elif kind == 2:
            in_a += 1
            i += 1
        else:
            in_b += 1
            j += 1
    return len_a, len_b, len_ab


_BIG = 2**62


@numba.njit(cache=True)
def _capped(hbm_time, hbm_rate, total, at_cap):
    """Ticks during which HBM ran at its cap: hbm_rate[i] holds from hbm_time[i] to the next time (or
    the end of the run)."""
    out = 0
    for i in range(hbm_time.shape[0]):
        if hbm_rate[i] >= at_cap:
            out += (hbm_time[i + 1] if i + 1 < hbm_time.shape[0] else total) - hbm_time[i]
    return out


def _critical_path(r: TimingResult, releaser: np.ndarray, is_dma: np.ndarray, last_piece: np.ndarray,
                   prev_piece: np.ndarray) -> tuple[tuple[str, int], ...]:
    """The critical path's ticks by PATH_KINDS (see the module docstring), summing to the total."""
    acc = np.zeros(len(PATH_KINDS), np.int64)
    total = int(r.total_ticks)
    if r.count == 0 or total == 0:
        acc[_OTHER] = total
        return tuple(zip(PATH_KINDS, (int(x) for x in acc)))
    k_last = int(np.argmax(r.end))  # the instruction that ends last (the first of equals)
    p_last = int(np.argmax(r.piece_end)) if r.pieces else -1
    if p_last >= 0 and r.piece_end[p_last] > r.end[k_last]:
        k_last = -1
    else:
        p_last = -1
    _walk(acc, total, k_last, p_last, r.avail, r.ready, r.start, r.end, r.first, releaser, is_dma, last_piece,
          r.piece_instr, r.piece_start, r.piece_end, prev_piece, dma_latency_ticks(r.config))
    return tuple(zip(PATH_KINDS, (int(x) for x in acc)))


@numba.njit(cache=True)
def _walk(acc, t, k, p, avail, ready, start, end, first, releaser, is_dma, last_piece, piece_instr,
          piece_start, piece_end, prev_piece, latency):
    """Walk the critical path back from instruction k (or piece p, k = -1) ending at t, adding each
    stretch to acc by kind. Every step goes to an item that finished no later, none twice: at most
    n + m steps."""
    for _ in range(avail.shape[0] + piece_start.shape[0] + 1):
        if p >= 0:  # a piece: it moved data, after its DMA engine's previous piece or its latency
            acc[_OTHER] += t - piece_end[p]
            acc[_DATA] += piece_end[p] - piece_start[p]
            t = piece_start[p]
            k = piece_instr[p]
            q = prev_piece[p]
            if t > start[k] + latency and q >= 0 and piece_end[q] > start[k] + latency:
                p = q
                continue
            acc[_OTHER] += max(t - (start[k] + latency), 0)
            acc[_LATENCY] += min(t, start[k] + latency) - start[k]
            t = start[k]
            p = -1
        else:
            acc[_OTHER] += t - end[k]
            e = 0
            while first[e + 1] <= k:
                e += 1
            acc[e] += end[k] - start[k]
            t = start[k]
        acc[_PORT] += t - ready[k]
        t = ready[k]
        r = releaser[k]
        if t > avail[k] and r >= 0:  # released by a semaphore update
            if is_dma[r] and last_piece[r] >= 0:
                p = last_piece[r]
            else:
                k = r
            continue
        acc[_OTHER] += t - avail[k]  # (a wait with no releaser: none in a finished run)
        t = avail[k]
        e = 0
        while first[e + 1] <= k:
            e += 1
        if k == first[e]:
            acc[_OTHER] += t  # the start of the run
            return
        k -= 1  # program order: the previous instruction of its engine


@numba.njit(cache=True)
def _causes(releaser, is_dma, passes_on):
    """cause[k] of instruction k's semaphore wait: _DMA_CAUSE or _ENGINE_CAUSE (0: it has none).
    releaser[k] released it; a releaser that is an engine instruction which itself waited at least
    as long as it was busy (passes_on) passes on its own cause. Memoised along each chain: O(n)."""
    n = releaser.shape[0]
    cause = np.zeros(n, np.int8)
    path = np.empty(n, np.int64)
    for k in range(n):
        if releaser[k] < 0 or cause[k] != 0:
            continue
        depth = 0
        cur = k
        while True:
            path[depth] = cur
            depth += 1
            r = releaser[cur]
            if is_dma[r]:
                value = _DMA_CAUSE
                break
            if not passes_on[r] or releaser[r] < 0 or depth == n:
                value = _ENGINE_CAUSE
                break
            if cause[r] != 0:
                value = cause[r]
                break
            cur = r
        for i in range(depth):
            cause[path[i]] = value
    return cause


# --------------------------------------------------------------------------- the verdict

def verdict(rep: Report) -> Verdict:
    """The one-line verdict of the module docstring's rule, with its evidence."""
    if rep.total == 0:
        return Verdict("empty", None, "nothing ran: the program takes no time")
    T = f"{rep.total_us:.1f} µs"
    pct = lambda x: f"{100 * x:.0f}%"
    busy = {e: rep.share(rep.engine(e).busy) for e in COMPUTE}
    top = max(COMPUTE, key=lambda e: busy[e])  # the first of equals: Tensor, Vector, Scalar, GpSimd
    dma, hbm = rep.dma_busy, rep.hbm_utilisation
    u_dma = max(dma, hbm)
    hbm_text = f"HBM {pct(hbm)} of {rep.config.hbm_bandwidth / 1e9:g} GB/s"
    dma_text = f"DMA engines busy {pct(dma)}"
    if busy[top] >= THRESHOLD and busy[top] >= u_dma:
        return Verdict("engine", top, f"bound by the {_name(top)} engine: busy {pct(busy[top])} of {T};"
                                      f" {dma_text}, {hbm_text}")
    others = f"busiest engine {_name(top)} {pct(busy[top])}"
    if u_dma >= THRESHOLD:
        if 2 * rep.hbm_capped >= rep.dma_active:
            return Verdict("hbm-bandwidth", None,
                           f"bound by HBM bandwidth: {hbm_text} over {T} (at the cap {pct(rep.share(rep.hbm_capped))}"
                           f" of the time); {dma_text}; {others}")
        return Verdict("dma-bandwidth", None,
                       f"bound by DMA bandwidth: {dma_text} of {T} at {pct(rep.chunk_efficiency)} chunk"
                       f" efficiency; {hbm_text}; {others}")
    # 3. Nothing is busy most of the time: what the critical path is made of.
    path = dict(rep.critical_path)
    ranked = sorted((k for k in PATH_KINDS if path[k]), key=lambda k: -path[k])  # stable: PATH_KINDS order
    listing = ", ".join(f"{_path_label(k)} {pct(rep.share(path[k]))}" for k in ranked
                        if round(100 * rep.share(path[k])) >= 1)
    evidence = f"the critical path is {listing} of {T}"
    top_kind = ranked[0] if ranked else "other"
    top_share = pct(rep.share(path[top_kind]))
    if rep.share(path[top_kind]) >= THRESHOLD:
        if top_kind == "dma latency":
            mean = rep.dma_bytes / rep.transfers if rep.transfers else 0
            return Verdict("dma-latency", None,
                           f"bound by DMA latency: {top_share} of the critical path waits out the"
                           f" {rep.config.dma_latency_ns} ns fixed cost of transfers (mean {_size(int(mean))});"
                           f" {evidence}; {dma_text}, {others}")
        if top_kind == "dma data":
            return Verdict("dma-data", None,
                           f"bound by DMA data movement: {top_share} of the critical path moves DMA data that"
                           f" nothing overlaps; {evidence}; {dma_text} at {pct(rep.chunk_efficiency)} chunk"
                           f" efficiency, {hbm_text}; {others}")
        if top_kind == "port wait":
            return Verdict("ports", None,
                           f"bound by port waits: {top_share} of the critical path waits for the SBUF or PSUM"
                           f" port; {evidence}; {others}")
    return Verdict("chain", None,
                   f"bound by a dependency chain: {evidence}; no engine is busy most of the time ({others});"
                   f" {dma_text}")


def _path_label(kind: str) -> str:
    return {"dma data": "DMA data", "dma latency": "DMA latency", "port wait": "port waits"}.get(kind) or _name(kind)


def _name(engine: str) -> str:
    return {"gpsimd": "GpSimd"}.get(engine, engine.capitalize())
