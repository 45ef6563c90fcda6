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

The verdict, with U(e) = busy(e) / T for the four compute engines, U(dma) = the larger of the
busiest DMA engine's busy share (its pieces' durations / T: a transfer of few partitions keeps few
engines busy, so their mean can hide one engine busy all the run) and the HBM utilisation, and
THRESHOLD = 60% ("most of the time"):
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
   - a DMA piece: [piece_start, piece_end) is DMA data moving (its per-transfer work included); then,
     if its DMA engine's previous piece ended after the piece became eligible, that piece; else
     [start, start + lead) of its dma_copy is DMA latency (lead: the fixed latency less what the
     piece's per-transfer work overlaps, ncsim.memory.dma.lead_ns), and the path goes on to the
     dma_copy.
   critical_path gives the ticks of each PATH_KINDS kind on the path (each engine's busy time, "dma
   data", "dma latency", "port wait", and "other" for gaps the walk cannot explain: none in a run
   that finished); they add up to T. If one kind holds >= THRESHOLD of the path: "DMA latency",
   "DMA data movement" or "port waits" (an engine cannot: it would be busy >= THRESHOLD of the run
   and rule 1 or 2 would hold). Else a dependency chain, listing the kinds, largest first (ties in
   PATH_KINDS order), that hold at least 1% (rounded) of the path.
Ties go to the earlier candidate: engines in Tensor, Vector, Scalar, GpSimd order, then the DMA.

A caveat line follows the verdict when the verdict rests on a rule the published measurements
contradict (`Report.caveat`): bound by DMA bandwidth with the busiest DMA engine busy at least twice
the engines' mean, i.e. transfers of few partitions on few engines (docs/timing.md#resize).
"""

from __future__ import annotations

import textwrap
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numba
import numpy as np

from ncsim import dtypes, isa
from ncsim.config import Config
from ncsim.memory.access import AccessPattern, Memory
from ncsim.runtime.timing import ENGINES, TimingResult

__all__ = ["PATH_KINDS", "THRESHOLD", "DirectionStats", "EngineStats", "Report", "Verdict", "report"]

THRESHOLD = 0.6  # "most of the time": the share of the run from which a resource bounds the kernel
COMPUTE = ("tensor", "vector", "scalar", "gpsimd")
_DMA_COPY = isa.BY_MNEMONIC["dma_copy"].opcode
_NC_MATMUL = isa.BY_MNEMONIC["nc_matmul"].opcode
_GPSIMD_CALL = isa.BY_MNEMONIC["gpsimd_call"].opcode
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
    dma_engine_ticks: tuple[int, ...]  # the same per DMA engine
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
    def dma_busiest(self) -> tuple[int, float]:
        """The busiest DMA engine (the first of equals) and its busy share: its pieces' time / T. A
        transfer of few partitions runs on few engines (8 partitions per engine), so one engine can
        be busy all the run while the DMA engines' mean share is low."""
        if not self.dma_engine_ticks:
            return 0, 0.0
        e = int(np.argmax(self.dma_engine_ticks))
        return e, self.share(self.dma_engine_ticks[e])

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
        if (caveat := self.caveat) is not None:
            lines.append(f"caveat   {caveat}")
        return "\n".join(_wrap(line) for line in lines)

    @property
    def caveat(self) -> str | None:
        """What the verdict rests on that the published measurements contradict, or None: a run bound by
        DMA bandwidth whose busiest DMA engine is busy at least twice the engines' mean rests on ncsim's
        rule that a piece of few partitions runs on few engines (8 partitions each, one partition on
        engine 0), which nki-samples' resize bounds contradict (docs/timing.md#resize)."""
        busiest, top = self.dma_busiest
        if self.verdict.kind != "dma-bandwidth" or top < THRESHOLD or top < 2 * self.dma_busy:
            return None
        return (f"DMA engine {busiest} carries {100 * top:.0f}% of the run against the engines' mean"
                f" {100 * self.dma_busy:.0f}%: ncsim runs a transfer of few partitions on few engines (8"
                f" partitions each, one partition on engine 0), a rule the chip's resize bounds contradict"
                f" (docs/timing.md#resize); for transfers of few partitions this time may be an upper bound")

    def table(self) -> list[str]:
        """The per-engine table: instructions, then busy, semaphore, port waits and idle as µs and %. The
        µs columns are 10 characters wide, wider when a time needs it (a run of a second or more), so
        that columns never run together."""
        times = [t for s in self.engines for t in (s.busy, s.sem_wait, s.port_wait, s.idle)]
        w = max([10] + [len(f"{self.ns(t) / 1000:.3f}") + 1 for t in times])
        head = (f"{'engine':<7}{'instrs':>8}{'busy':>{w + 7}}{'sem wait':>{w + 7}}{'on DMA':>8}"
                f"{'port wait':>{w + 7}}{'idle':>{w + 7}}")
        rows = [head]
        for s in self.engines:
            cells = [self._cell(s.busy, w), self._cell(s.sem_wait, w), f"{100 * self.share(s.sem_wait_dma):>7.1f}%",
                     self._cell(s.port_wait, w), self._cell(s.idle, w)]
            rows.append(f"{s.name:<7}{s.instructions:>8}" + "".join(cells))
        return rows

    def _cell(self, ticks: int, width: int = 10) -> str:
        return f"{self.ns(ticks) / 1000:>{width}.3f} µs{100 * self.share(ticks):>4.0f}%"

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
# flops, each piece's DMA engine) is counted once per body and multiplied by its instructions.
# Nothing as long as the pieces is sorted, gathered or kept but the piece each piece waited for
# (int32, for the critical path). Listed by instruction, the pieces are a few runs each in order of
# start, so one pass that merges those runs visits them in order of start (_by_start), finds each
# piece's predecessor on its DMA engine and measures the unions of intervals as it goes. The runs
# tried first are the streams' (the pieces of each engine's dma_copy instructions: one run each in
# tools/bench_pipeline.py's program and the NKI matmul tutorial's kernels); if one is out of order,
# the ascending runs of piece_start (_runs); past _MERGE_RUNS of those, a stable argsort. The
# engines' busy intervals are one run per engine already (_busy). The piece of a dma_copy that ended
# last is looked for by the critical path's walk, its one reader. On tools/bench_pipeline.py's
# 10^6-instruction object (999,616 instructions, 6,585,856 pieces), old and new side by side in one
# process, each after malloc_trim as bench_pipeline measures, best of 5: report().format() took
# 0.467 s and 469 MiB at its peak (492 B/instr), sorting the pieces by start and by end and keeping
# five arrays as long as the pieces; now 0.069 s (0.088 s of CPU in two threads) and 31 MiB (32
# B/instr). Of that, _by_start ~35 ms (bound by memory traffic: piece_start and piece_end are 105
# MB), the walk ~24 ms (a chain of dependent loads), _instructions ~12 ms (in the second thread).
# Since then the pieces visited are the class pieces (TimingResult: one per class of DMA engines in
# lockstep, 411,616 there), each counted for the engines it stands for; the per-piece times are
# never written out for the report. load + timing + races + report of that object in a fresh
# process, side by side with the commit before, three runs each: the report 0.14-0.19 -> 0.054-0.060
# s (14,000 -> 1,000 page faults), time_program 0.51-0.53 -> 0.42-0.48 s, the four 1.12-1.27 ->
# 0.94-1.05 s.

_MERGE_RUNS = 16  # at most this many runs are merged; more are sorted
# From this many instructions and pieces, the per-instruction passes (_instructions, _busy) run in a
# second thread while this one visits the pieces (their kernels release the GIL): with two cores free,
# 0.047 -> 0.036 s of the 10^6 object's report. Below it a thread costs more than it saves.
_THREAD_FROM = 100_000


def report(result: TimingResult) -> Report:
    """The report of a timed run (see the module docstring for every number and the verdict)."""
    if result.count + result.pieces < _THREAD_FROM:
        return _report(result, None)
    with ThreadPoolExecutor(1) as pool:
        return _report(result, pool)


def _report(r: TimingResult, pool: ThreadPoolExecutor | None) -> Report:
    cfg = r.config
    total = int(r.total_ticks)
    costs = r.body_cost
    body_dma = r.body_opcode == _DMA_COPY

    # Per instruction (in `pool`'s thread if given): the instructions of each body; what each
    # semaphore wait was for (its releaser that finished last, followed back, see above); each
    # engine's busy, semaphore and port times; the union of the engines' busy intervals (for the
    # timeline, below).
    def per_instruction() -> tuple:
        return (_instructions(r.first, r.body, body_dma, r.avail, r.ready, r.start, r.end, r.done, r.edge_wait,
                              r.edge_signal),
                _busy(*_order(r.start), r.start, r.end))  # a run per engine: each engine's are in order

    later = pool.submit(per_instruction) if pool is not None else None

    # DMA directions, and the DMA engine of each piece of each body's transfer (CSR): piece h of
    # dma_copy k is piece h - piece_ptr[k] of its body's (as the timing model lays them out). Every
    # body is some instruction's (Program.body_first).
    moving = [b for b, c in enumerate(costs) if c.transfer is not None and c.transfer.pieces]
    pairs = sorted({(int(costs[b].transfer.src), int(costs[b].transfer.dst)) for b in moving},
                   key=lambda p: (p[0] != Memory.HBM, p))
    dir_of_body = np.full(len(costs), -1, np.int64)
    for b in moving:
        dir_of_body[b] = pairs.index((int(costs[b].transfer.src), int(costs[b].transfer.dst)))
    # The class pieces (TimingResult): each stands for the pieces of `mult` DMA engines in lockstep,
    # from its engine on, which move at the same times, take their pieces in the same order and wait
    # for the same pieces' ends, so a visit of the class pieces counts each `mult` times and finds the
    # same critical path.
    body_ptr, body_engine = r.class_body_pieces("engine")
    _, body_lead = r.class_body_pieces("lead")
    _, body_mult = r.class_body_pieces("mult")

    # Per class piece, in order of start: the time some piece of each direction moved, all of them
    # did, the DMA engines' time, and the piece each piece waited for (the critical path's).
    n_class = len(r.class_start)
    waited_for = np.empty(n_class, np.int32 if n_class < 2**31 else np.int64)
    args = (r.class_ptr, r.class_instr, r.body, dir_of_body, len(pairs), body_ptr, body_engine, body_mult,
            r.class_start, r.class_end, r.start, body_lead, waited_for)
    top = int((body_engine + body_mult).max()) if body_engine.size else 0
    busy_on = np.zeros(max(cfg.dma_engines, top), np.int64)
    ok, piece_ticks, p_last, moved, b_start, b_end = _by_start(r.class_ptr[r.first], _EMPTY, *args, busy_on)
    if not ok:  # the pieces of some stream's dma_copy instructions are not in order of start
        busy_on[:] = 0
        ok, piece_ticks, p_last, moved, b_start, b_end = _by_start(*_order(r.class_start), *args, busy_on)

    (counts, releaser, sums, k_last), (a_start, a_end) = later.result() if later is not None else per_instruction()
    used = np.flatnonzero(counts)  # the bodies of the run, in order of body
    engines = []
    for e, name in enumerate(ENGINES):
        b, s, p, s_dma = (int(x) for x in sums[e])
        engines.append(EngineStats(name, int(r.first[e + 1] - r.first[e]), b, s, s_dma, p, total - b - s - p))

    # DMA, per body: transfers, bytes, queues, DMA engines and chunk efficiency.
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
    directions = [DirectionStats(f"{Memory(a).label}->{Memory(b).label}", transfers[d], nbytes[d], int(moved[d]))
                  for d, (a, b) in enumerate(pairs)]
    # The GpSimd cores' TCM accessor blocks from and to HBM: through the DMA model, so DMA traffic too.
    gpsimd_cores, blocks = _gpsimd(r) if (r.body_opcode[used] == _GPSIMD_CALL).any() else ((), np.zeros(4, np.int64))
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
            ops = r.instruction(int(r.program.body_first[b])).operands
            if any(isinstance(ops.get(x), AccessPattern) and ops[x].dtype == dtypes.FLOAT32
                   for x in ("stationary", "moving")):
                fp32 += int(counts[b])

    # Timeline: some engine busy; else data moving; else latency.
    computing, dma_active = int((a_end - a_start).sum()), int((b_end - b_start).sum())
    both = _union_length(a_start, a_end, b_start, b_end)
    rep = Report(
        config=cfg, total=total, engines=tuple(engines), directions=tuple(directions),
        transfers=int(counts[body_dma].sum()) + int(blocks[0] + blocks[2]),
        queues=queues, dma_engines_used=dma_engines_used, dma_bytes=dma_bytes, dma_piece_ticks=int(piece_ticks),
        dma_engine_ticks=tuple(int(t) for t in busy_on),
        dma_active=dma_active, chunk_efficiency=eff_num / eff_den if eff_den else 1.0, hbm_bytes=hbm_bytes,
        hbm_capped=capped, flops=flops, fp32_matmuls=fp32, computing=computing, moving=both - computing,
        latency=total - both, critical_path=_critical_path(r, releaser, waited_for, k_last, p_last, body_ptr, body_lead),
        verdict=Verdict("empty", None, ""), gpsimd_cores=gpsimd_cores, tcm_blocks=int(blocks[0] + blocks[2]))
    return replace(rep, verdict=verdict(rep))


_TCM_DIRECTIONS = ("hbm->tcm", "tcm->hbm")


def _gpsimd(r: TimingResult) -> tuple[tuple[int, ...], np.ndarray]:
    """Each GpSimd core's busy ticks over the run's calls (empty without any), and the calls' TCM
    accessor blocks from and to HBM: [loads, their bytes, stores, their bytes]."""
    from ncsim.engines.cores import call_runs

    ks, ticks, blocks = call_runs(r)
    return (tuple(int(t) for t in ticks.sum(axis=0)) if len(ks) else ()), blocks.sum(axis=0)


def _order(starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(runs, order) for visiting intervals in order of (start, index): the ascending runs of
    `starts` (run j is positions runs[j]..runs[j + 1]), to be merged; or, past _MERGE_RUNS of them,
    one run over `order`, a stable argsort (else `order` is empty: positions are indices)."""
    runs = _runs(starts, _MERGE_RUNS)
    if len(runs):
        return runs, _EMPTY
    return np.array([0, len(starts)], np.int64), np.argsort(starts, kind="stable")


_DMA_CAUSE, _ENGINE_CAUSE = 1, 2
_DATA, _LATENCY, _PORT, _OTHER = len(ENGINES), len(ENGINES) + 1, len(ENGINES) + 2, len(ENGINES) + 3
_EMPTY = np.zeros(0, np.int64)
_BIG = 2**62


@numba.njit(cache=True, nogil=True)
def _instructions(first, body, body_dma, avail, ready, start, end, done, edge_wait, edge_signal):
    """(counts, releaser, sums, k_last): counts[b] instructions of body b; releaser[k] is the
    releaser of instruction k's semaphore wait that finished last (the last such edge of equals; -1
    if none); sums[e] = (busy, sem wait, port wait, sem wait for DMA) of engine e's instructions;
    k_last the instruction that ends last (the first of equals; -1 if none)."""
    n = body.shape[0]
    counts = np.zeros(body_dma.shape[0], np.int64)
    is_dma = np.empty(n, np.bool_)
    passes_on = np.empty(n, np.bool_)
    releaser = np.full(n, -1, np.int32)  # instruction numbers fit (so do races' vector clocks)
    sums = np.zeros((first.shape[0] - 1, 4), np.int64)
    k_last = -1
    for e in range(first.shape[0] - 1):
        for k in range(first[e], first[e + 1]):
            counts[body[k]] += 1
            is_dma[k] = body_dma[body[k]]
            if k_last < 0 or end[k] > end[k_last]:
                k_last = k
            busy, sem = end[k] - start[k], ready[k] - avail[k]
            passes_on[k] = sem > 0 and sem >= busy
            sums[e, 0] += busy
            sums[e, 1] += sem
            sums[e, 2] += start[k] - ready[k]
    for i in range(edge_wait.shape[0]):
        w = edge_wait[i]
        s = edge_signal[i]
        if releaser[w] < 0 or done[s] >= done[releaser[w]]:
            releaser[w] = s
    cause = _causes(releaser, is_dma, passes_on)
    for e in range(first.shape[0] - 1):
        for k in range(first[e], first[e + 1]):
            if cause[k] == _DMA_CAUSE:
                sums[e, 3] += ready[k] - avail[k]
    return counts, releaser, sums, k_last


@numba.njit(cache=True)
def _runs(keys, limit):
    """Where the ascending runs of keys begin, then len(keys); empty if there are more than `limit`."""
    out = np.empty(limit + 1, np.int64)
    out[0] = 0
    count = 1
    for i in range(1, keys.shape[0]):
        if keys[i] < keys[i - 1]:
            if count == limit:
                return out[:0].copy()
            out[count] = i
            count += 1
    out[count] = keys.shape[0]
    return out[:count + 1].copy()


@numba.njit(cache=True)
def _next_run(runs, head, order, keys):
    """(j, key, j2, key2): the run whose next position comes first in order of (key, index), and the
    one after it (-1 and _BIG if none); runs are in order of index, so ties go to the earlier run."""
    j = j2 = -1
    s = s2 = _BIG
    for i in range(runs.shape[0] - 1):
        if head[i] < runs[i + 1]:
            x = keys[order[head[i]] if order.shape[0] else head[i]]
            if x < s:
                j2, s2 = j, s
                j, s = i, x
            elif x < s2:
                j2, s2 = i, x
    return j, s, j2, s2


@numba.njit(cache=True, nogil=True)
def _by_start(runs, order, piece_ptr, piece_instr, body, dir_of_body, n_dir, body_ptr, body_engine, body_mult,
              piece_start, piece_end, start, body_lead, waited_for, busy_on):
    """Visit the pieces in order of (start, index), merging `runs` (see _order). Fills waited_for:
    the piece its DMA engine took before each (its predecessor) if the piece started after it was
    ready (its dma_copy's start + its lead, body_lead) and the predecessor ended after that, else -1 (what the
    critical path's walk follows). Returns (ok, ticks, p_last, moved, union_start, union_end): ok
    is False, and the rest undone, if a run is not in order of start after all; the pieces'
    durations summed; the piece that ends last (the first of equals; -1 if none); for each
    direction d < n_dir the length of the union of the intervals of its pieces that moved data, and
    the union of all of them as disjoint intervals, in order. Adds each piece's duration to
    busy_on[its DMA engine] (zeros on entry; the caller zeroes it again before a second visit).
    A piece stands for the pieces of body_mult DMA engines from its own on, alike in time (the class
    pieces, TimingResult): its duration counts for each of them."""
    m = piece_start.shape[0]
    ordered = order.shape[0] > 0
    n_runs = runs.shape[0] - 1
    head = runs[:-1].copy()
    k_of = np.zeros(n_runs, np.int64)  # the dma_copy of each run's next piece (without `order`)
    if not ordered:
        for j in range(n_runs):
            k_of[j] = np.searchsorted(piece_ptr, runs[j], side="right") - 1
    before = np.full(n_runs, -_BIG, np.int64)  # the start of each run's previous piece
    last_on = np.full(body_engine.max() + 1 if body_engine.shape[0] else 1, -1, np.int64)  # per DMA engine
    end_on = np.zeros(last_on.shape[0], np.int64)  # the end of its last_on
    lo = np.full(n_dir, -1, np.int64)  # the interval of the union being built, per direction
    hi = np.full(n_dir, -1, np.int64)
    moved = np.zeros(n_dir, np.int64)
    all_lo = all_hi = -1  # and of all pieces, whose union is kept
    out_lo = np.empty(m, np.int64)
    out_hi = np.empty(m, np.int64)
    n_out = 0
    ticks = 0
    p_last = -1
    e_last = -1
    while True:
        j, _, j2, s2 = _next_run(runs, head, order, piece_start)
        if j < 0:
            break
        i, stop, k, prior = head[j], runs[j + 1], k_of[j], before[j]
        k_end = base = d = -1  # the end of dma_copy k's pieces; its body's first row in body_engine,
        # less piece_ptr[k]; its direction
        while i < stop:
            h = order[i] if ordered else i
            s = piece_start[h]
            if s > s2 or (s == s2 and j > j2):
                break
            if s < prior:
                return False, 0, -1, moved[:0], out_lo[:0], out_hi[:0]
            prior = s
            i += 1
            e = piece_end[h]
            if ordered or h >= k_end:
                if ordered:
                    k = piece_instr[h]
                else:
                    while piece_ptr[k + 1] <= h:
                        k += 1
                k_end = piece_ptr[k + 1]
                base = body_ptr[body[k]] - piece_ptr[k]
                d = dir_of_body[body[k]]
            de = body_engine[base + h]
            ready = start[k] + body_lead[base + h]
            waited_for[h] = last_on[de] if s > ready and last_on[de] >= 0 and end_on[de] > ready else -1
            last_on[de] = h
            end_on[de] = e
            mult = body_mult[base + h]
            ticks += (e - s) * mult
            for x in range(de, de + mult):
                busy_on[x] += e - s
            if e > e_last or (e == e_last and h < p_last):
                p_last, e_last = h, e
            if e > s:
                if s > hi[d]:
                    moved[d] += hi[d] - lo[d]
                    lo[d], hi[d] = s, e
                elif e > hi[d]:
                    hi[d] = e
                if s > all_hi:
                    if all_hi >= 0:
                        out_lo[n_out], out_hi[n_out] = all_lo, all_hi
                        n_out += 1
                    all_lo, all_hi = s, e
                elif e > all_hi:
                    all_hi = e
        head[j], k_of[j], before[j] = i, k, prior
    for d in range(n_dir):
        moved[d] += hi[d] - lo[d]
    if all_hi >= 0:
        out_lo[n_out], out_hi[n_out] = all_lo, all_hi
        n_out += 1
    return True, ticks, p_last, moved, out_lo[:n_out].copy(), out_hi[:n_out].copy()


@numba.njit(cache=True, nogil=True)
def _busy(runs, order, start, end):
    """The union of the intervals [start, end) that are not empty, as disjoint intervals (lo, hi)
    in order, visiting them in order of start by merging `runs` (see _order)."""
    ordered = order.shape[0] > 0
    head = runs[:-1].copy()
    out_lo = np.empty(start.shape[0], np.int64)
    out_hi = np.empty(start.shape[0], np.int64)
    n_out = 0
    lo = hi = -1
    while True:
        j, _, j2, s2 = _next_run(runs, head, order, start)
        if j < 0:
            break
        while head[j] < runs[j + 1]:
            k = order[head[j]] if ordered else head[j]
            s = start[k]
            e = end[k]
            if e <= s:  # empty: passed over wherever it is
                head[j] += 1
                continue
            if s > s2 or (s == s2 and j > j2):
                break
            head[j] += 1
            if s > hi:
                if hi >= 0:
                    out_lo[n_out], out_hi[n_out] = lo, hi
                    n_out += 1
                lo, hi = s, e
            elif e > hi:
                hi = e
    if hi >= 0:
        out_lo[n_out], out_hi[n_out] = lo, hi
        n_out += 1
    return out_lo[:n_out].copy(), out_hi[:n_out].copy()


@numba.njit(cache=True)
def _union_length(a_lo, a_hi, b_lo, b_hi):
    """The length of the union of two lists of intervals, each in order of start."""
    i = j = 0
    lo = hi = -1
    total = 0
    while i < a_lo.shape[0] or j < b_lo.shape[0]:
        if j >= b_lo.shape[0] or (i < a_lo.shape[0] and a_lo[i] <= b_lo[j]):
            s, e = a_lo[i], a_hi[i]
            i += 1
        else:
            s, e = b_lo[j], b_hi[j]
            j += 1
        if s > hi:
            total += hi - lo
            lo, hi = s, e
        elif e > hi:
            hi = e
    return total + hi - lo


@numba.njit(cache=True)
def _capped(hbm_time, hbm_rate, total, at_cap):
    """Ticks during which HBM ran at its cap: hbm_rate[i] holds from hbm_time[i] to the next time (or
    the end of the run)."""
    out = 0
    for i in range(hbm_time.shape[0]):
        if hbm_rate[i] >= at_cap:
            out += (hbm_time[i + 1] if i + 1 < hbm_time.shape[0] else total) - hbm_time[i]
    return out


def _critical_path(r: TimingResult, releaser: np.ndarray, waited_for: np.ndarray, k_last: int,
                   p_last: int, body_ptr: np.ndarray, body_lead: np.ndarray) -> tuple[tuple[str, int], ...]:
    """The critical path's ticks by PATH_KINDS (see the module docstring), summing to the total."""
    acc = np.zeros(len(PATH_KINDS), np.int64)
    total = int(r.total_ticks)
    if r.count == 0 or total == 0:
        acc[_OTHER] = total
        return tuple(zip(PATH_KINDS, (int(x) for x in acc)))
    # what ends last: the instruction (the first of equals), or a piece if one ends later
    if p_last >= 0 and r.class_end[p_last] > r.end[k_last]:
        k_last = -1
    else:
        p_last = -1
    _walk(acc, total, k_last, p_last, r.avail, r.ready, r.start, r.end, r.first, releaser, r.class_ptr,
          r.class_instr, r.class_start, r.class_end, waited_for, r.body, body_ptr, body_lead)
    return tuple(zip(PATH_KINDS, (int(x) for x in acc)))


@numba.njit(cache=True)
def _walk(acc, t, k, p, avail, ready, start, end, first, releaser, piece_ptr, piece_instr,
          piece_start, piece_end, waited_for, body, body_ptr, body_lead):
    """Walk the critical path back from instruction k (or piece p, k = -1) ending at t, adding each
    stretch to acc by kind. Every step goes to an item that finished no later, none twice: at most
    n + m steps."""
    for _ in range(avail.shape[0] + piece_start.shape[0] + 1):
        if p >= 0:  # a piece: it moved data, after its DMA engine's previous piece or its latency
            acc[_OTHER] += t - piece_end[p]
            acc[_DATA] += piece_end[p] - piece_start[p]
            t = piece_start[p]
            if waited_for[p] >= 0:  # its DMA engine's previous piece, still moving when it was ready
                p = waited_for[p]
                continue
            k = piece_instr[p]
            lead = body_lead[body_ptr[body[k]] + p - piece_ptr[k]]  # from its dma_copy's start until eligible
            acc[_OTHER] += max(t - (start[k] + lead), 0)
            acc[_LATENCY] += min(t, start[k] + lead) - start[k]
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
            last = -1  # a dma_copy's piece that ended last (the last of equals; only a dma_copy has pieces)
            for h in range(piece_ptr[r], piece_ptr[r + 1]):
                if last < 0 or piece_end[h] >= piece_end[last]:
                    last = h
            if last >= 0:
                p = last
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
    path = np.empty(n, np.int32)
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
    busiest, dma_top = rep.dma_busiest
    u_dma = max(dma_top, hbm)
    hbm_text = f"HBM {pct(hbm)} of {rep.config.hbm_bandwidth / 1e9:g} GB/s"
    dma_text = f"DMA engines busy {pct(dma)}"
    if pct(dma_top) != pct(dma):
        dma_text += f" (DMA engine {busiest} {pct(dma_top)})"
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
                           f"bound by DMA latency: {top_share} of the critical path waits out the fixed"
                           f" latency of transfers ({rep.config.dma_latency_ns} ns, less the per-transfer work"
                           f" done meanwhile; mean {_size(int(mean))});"
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
