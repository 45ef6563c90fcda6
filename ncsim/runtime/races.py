"""Races: two instructions on different streams touch the same bytes, one of them writing, and nothing
orders them.

The streams are those of the assembler's automatic synchronisation (`ncsim.asm.sync.stream_of`): each
engine's instructions, and each (DMA queue, issuing engine) pair for the transfers of dma_copy. A
dma_copy's accesses belong to its transfer, on its DMA stream, active from its first piece's start to
its last piece's end; its issuing engine only triggers it and goes on.

Happens-before (a -> b: a's accesses are complete before b's begin), in the run that was timed:
- program order: an engine instruction precedes the next instruction of its engine (for a dma_copy,
  the issue of its transfer); the transfer follows its issue; a transfer precedes the next transfer
  of its DMA stream (the queue keeps their order, as the assembler assumes);
- semaphores: a wait that held because of updates (the timing's edge_signal -> edge_wait) acquires
  the completion of its releasing instruction and of every earlier update of that semaphore: those
  applied at an earlier instant, or at the same instant by the completion of an engine instruction
  or a DMA transfer (the scheduler applies those before it checks waits). This is the usual
  release/acquire reading of a semaphore (ThreadSanitizer's): a consumer that waits for `s>=2`
  after two producers each did `s+=1` follows both, not only the second.

A race is a pair of instructions on different streams with overlapping footprints (same memory,
overlapping partitions, and exactly overlapping bytes: the access patterns' byte runs, not only their
spans), at least one writing, neither happening before the other. Nothing else fixes their order:
another timing (a DMA a little slower, an engine a little faster) can change which comes first, so
the values they produce are not defined. Each race says whether the two also overlapped in time in
this run, or which came first and by how much: the report does not depend on the run's luck, the
explanation does.

Programs assembled with `.sync auto` have no races (the assembler orders every such pair); the
check is for `.sync manual` programs and for objects built by other tools.

Speed. No graph is built. The happens-before relation is program order along chains (each engine's
instructions, each DMA stream's transfers) plus, for each node, a few predecessors on other chains: a
transfer's issue; a wait's releaser and the updates it acquires, which are found by searching each
(semaphore, chain)'s updates (a chain's knowledge only grows, so the last update acquired stands for
all the earlier ones of its chain). Vector clocks (one column per stream that accesses memory) are
computed in one numba pass that walks the engines' chains depth-first, each node once (`_clocks`; a
transfer's clock is its issue's plus its stream's column, so the DMA streams are not walked). Then, for
each ordered pair of streams (s, t), the accesses of t that are unordered with an access b of s and
come before it in time form a window of t's program order whose two ends only move forward as b
advances. Footprints that cannot conflict with any of the other stream's (their spans meet none of a
conflicting kind) are left out; a small window is searched access by access (with few distinct
footprints, which pairs of them conflict is tabled beforehand), a large one through
max-segment-trees over t's footprints sorted by address (one of all footprints, one of writes),
built when a window first needs them, which the window's accesses enter only when a query needs
them. The work is O(streams x footprints x log footprints) plus the pairs found; candidate pairs
(spans overlap) are confirmed exactly in Python, once per distinct (access pattern, access pattern,
offset difference). Everything before that reads the timing result's columns in place, with int32
indices; the large arrays the kernels fill are allocated by numpy (huge pages: few page faults),
and the hot loops (_walk, _sweep_run, _hash_rows) are compiled without reference counting; from
_THREAD_FROM instructions a second thread finds each wait's edges, touches the clock matrix's pages,
finds when each transfer's accesses begin and hashes the footprints while the first lists the
semaphore updates and walks. On
tools/bench_pipeline.py's 10^6-instruction program, measured side by side in fresh processes, the
check took 0.15 s of CPU and about 100 bytes per instruction at its peak where building the graph
(7.5 million edges, sorted) took 0.94-1.17 s and 746 bytes; on tools/bench_timing.py's 303 168
instructions 0.077 s where it took 0.146 s. Walking the engines' chains only (not the DMA
streams'), two passes over the instructions instead of four for the streams and accesses, no
renumbering pass over the footprint rows, the conflict table and the second thread's larger share
then took it from 0.137-0.144 s to 0.093-0.101 s (wall, a process's first run, two cores; CPU 0.16
-> 0.11-0.15 s); tools/bench_pipeline.py's races row went from 0.155 to 0.089-0.095 s.
A search that hits its caps (HITS_PER_ACCESS, MAX_CANDIDATES) says so: `RaceReport.complete` is
False.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numba
import numpy as np

from ncsim import isa
from ncsim.asm.sync import byte_runs
from ncsim.errors import RaceError, SimError, SourceLoc
from ncsim.memory.access import AccessPattern, Memory
from ncsim.runtime.timing import ACCESS_WRITE, ENGINES, TimingResult

__all__ = ["Access", "Race", "RaceError", "RaceReport", "check_races", "find_races", "race_error"]

DMA_COPY = isa.BY_MNEMONIC["dma_copy"].opcode
_ADDR_SHIFT = 48  # memory code << 48 | byte: one address line for the three memories
_BYTE_MAX = (1 << _ADDR_SHIFT) - 1
LINEAR_WINDOW = 24  # windows of at most this many accesses are searched one by one, larger ones by trees
CONFLICT_TABLE_MAX = 1024  # up to this many distinct footprints, their conflicts are tabled (1 MiB at most)
HITS_PER_ACCESS = 64  # candidate footprints one access may collect from one other stream
MAX_CANDIDATES = 1 << 20  # candidate pairs collected in all before the search stops
# From this many instructions, the vector clocks are computed in a second thread while this one hashes
# the footprints (with two cores free, about 15 ms less at 10^6); below it a thread costs more than it saves.
_THREAD_FROM = 100_000


# --------------------------------------------------------------------------- the result

@dataclass(frozen=True)
class Access:
    """One side of a race: an instruction, what it does to the bytes, and when it was active."""

    k: int  # the instruction (TimingResult numbering)
    engine: str  # its engine (for a dma_copy: the engine that issued it)
    index: int  # its place in its engine's stream
    mnemonic: str
    stream: str  # its engine, or "dma queue Q from ENGINE" for a transfer
    write: bool
    loc: SourceLoc | None
    start_ns: float  # active from (for a transfer: its first piece's start)
    end_ns: float  # to (its last piece's end)

    def describe(self) -> str:
        """E.g. `vector[0] tensor_copy writes, 0.000-0.511 µs`, with `(its transfer on dma queue 0 from
        sync)` for a dma_copy."""
        on = f" (its transfer on {self.stream})" if self.mnemonic == "dma_copy" else ""
        return (f"{self.engine}[{self.index}] {self.mnemonic} {'writes' if self.write else 'reads'}{on},"
                f" {self.start_ns / 1000:.3f}-{self.end_ns / 1000:.3f} µs")


@dataclass(frozen=True)
class Race:
    """Two accesses to overlapping bytes, one writing, neither ordered before the other. `first` is
    the one that began first in this run."""

    first: Access
    second: Access
    memory: str  # "sbuf", "psum" or "hbm"
    partitions: tuple[int, int]  # [lo, hi) of the partitions both touch ((0, 0) in HBM)
    span: tuple[int, int]  # [lo, hi) of the bytes where both spans meet (in each partition on chip)

    @property
    def overlap_ns(self) -> float:
        """How long both were active at once (0 if one ended before the other began)."""
        return max(0.0, min(self.first.end_ns, self.second.end_ns) - self.second.start_ns)

    @property
    def kind(self) -> str:
        """RAW, WAR or WAW, naming the run's order: the first access, then the second."""
        return {(True, False): "RAW", (False, True): "WAR", (True, True): "WAW"}[(self.first.write,
                                                                                   self.second.write)]

    def where(self) -> str:
        if self.memory == "hbm":
            return f"hbm bytes [{self.span[0]:#x}, {self.span[1]:#x})"
        return (f"{self.memory} partitions {self.partitions[0]}..{self.partitions[1] - 1},"
                f" bytes [{self.span[0]}, {self.span[1]}) of each")

    def timing(self) -> str:
        if self.overlap_ns > 0:
            return f"in this run they overlapped for {self.overlap_ns:.1f} ns"
        gap = self.second.start_ns - self.first.end_ns
        return (f"in this run the {'write' if self.first.write else 'read'} ended {gap:.1f} ns before the"
                f" {'write' if self.second.write else 'read'} began, by the luck of timing")

    def describe(self) -> str:
        """Several lines: where, each side with its source place, and the timing."""
        lines = [f"{self.where()}:"]
        for side in (self.first, self.second):
            lines.append(f"  {side.loc or '<no source line>'}  {side.describe()}")
        lines.append(f"  no semaphore orders them; {self.timing()} ({self.kind} in this order)")
        return "\n".join(lines)


@dataclass(frozen=True)
class RaceReport:
    """The races of a run: the first `limit` (by the time the second access began) in `races`."""

    races: tuple[Race, ...]
    total: int  # races found (instruction pairs), at least len(races)
    complete: bool  # False if the search stopped at a cap: there may be more than `total`

    def __bool__(self) -> bool:
        return self.total > 0

    def __len__(self) -> int:
        return self.total

    def format(self, show: int = 5) -> str:
        if not self.total:
            return "races: none"
        more = self.total - min(show, len(self.races))
        count = f"{self.total}{'' if self.complete else '+'}"
        lines = [(f"races: {count} pair{'s' if self.total != 1 else ''} of instructions touch the same bytes,"
                  " one writing, with no semaphore between them")]
        for r in self.races[:show]:
            lines += ["  " + line for line in r.describe().splitlines()]
        if more > 0 or not self.complete:
            lines.append(f"  ... and {more}{'' if self.complete else ' or more'} more")
        return "\n".join(lines)

    def error(self) -> RaceError | None:
        """The RaceError a run that must be race-free raises, placed at the first race's access that
        began later in the run; the notes give both source lines."""
        if not self.total:
            return None
        r = self.races[0]
        at, other = r.second, r.first
        notes = []
        for side in (r.first, r.second):
            text = f": {side.loc.text.strip()}" if side.loc is not None and side.loc.text else ""
            notes.append(f"{side.loc or '<no source line>'}{text}  ({side.describe()})")
        notes.append(r.timing())
        rest = self.total - 1
        if rest or not self.complete:
            notes.append(f"{rest}{'' if self.complete else ' or more'} more race{'s' if rest != 1 else ''}")
        notes.append("order them with a semaphore: the later one waits for the earlier one's signal")
        message = (f"race on {r.where()}: {at.engine}[{at.index}] {at.mnemonic}"
                   f" {'writes' if at.write else 'reads'} bytes that {other.engine}[{other.index}]"
                   f" {other.mnemonic} {'writes' if other.write else 'reads'}, and no semaphore orders them")
        return RaceError(message, at.loc or other.loc, notes=tuple(notes))


# --------------------------------------------------------------------------- entry points

def find_races(result: TimingResult, limit: int = 20) -> RaceReport:
    """Every race of a timed program (see the module docstring); the first `limit` described."""
    g = _Graph(result)
    if g.n_cols < 2:
        return RaceReport((), 0, True)
    r = result
    if result.count < _THREAD_FROM:
        g.transfer_keys()
        clock = g.clocks()
        g.footprints()
    else:  # a second thread finds each wait's edges, then the transfers' keys, then hashes the footprints,
        # while this one lists the semaphore updates, then walks the chains (the kernels release the GIL)
        with ThreadPoolExecutor(1) as pool:
            waits = pool.submit(g.waits)
            keys = pool.submit(g.transfer_keys)
            footprints = pool.submit(g.footprints)
            clock = g.clocks(waits)
            keys.result()
            footprints.result()
    cand, truncated = _sweep(clock, g.acc_ptr, g.acc_k, g.acc_key, r.fp_ptr, r.fp_memory, r.fp_lo,
                             r.fp_hi, r.fp_access, r.fp_partition, r.fp_partitions, g.dist, g.d_lo, g.d_hi,
                             g.d_write, g.d_ptr, g.d_order, g.rank, LINEAR_WINDOW, HITS_PER_ACCESS, MAX_CANDIDATES,
                             CONFLICT_TABLE_MAX)
    a_k, a_row, b_k, b_row = cand.T
    exact = _Exact(result).check(a_k, a_row, b_k, b_row)
    a_k, a_row, b_k, b_row = a_k[exact], a_row[exact], b_k[exact], b_row[exact]
    if len(a_k) == 0:
        return RaceReport((), 0, not truncated)
    # One race per pair of instructions: the first pair of footprints found.
    pair = np.stack([np.minimum(a_k, b_k), np.maximum(a_k, b_k)], axis=1)
    _, first = np.unique(pair, axis=0, return_index=True)
    a_k, a_row, b_k, b_row = a_k[first], a_row[first], b_k[first], b_row[first]
    lo_a, lo_b = g.active(a_k), g.active(b_k)
    order = np.lexsort((np.minimum(a_k, b_k), np.minimum(lo_a, lo_b), np.maximum(lo_a, lo_b)))[:max(limit, 0)]
    races = []
    for i in order:
        sides = [(int(a_k[i]), int(a_row[i])), (int(b_k[i]), int(b_row[i]))]
        sides.sort(key=lambda s: (int(g.active(s[0])), g.active_end(s[0]), s[0]))
        races.append(_race(result, g, *sides))
    return RaceReport(tuple(races), len(a_k), not truncated)


def race_error(result: TimingResult | RaceReport) -> RaceError | None:
    """The RaceError of a run's first race, or None if it has none (for callers who want a run to fail)."""
    report = result if isinstance(result, RaceReport) else find_races(result, limit=1)
    return report.error()


def check_races(result: TimingResult) -> None:
    """Raise RaceError if the run has a race."""
    err = race_error(result)
    if err is not None:
        raise err


def _race(result: TimingResult, g: _Graph, a: tuple[int, int], b: tuple[int, int]) -> Race:
    (ka, ra), (kb, rb) = a, b
    mem = Memory(int(result.fp_memory[ra]))
    if mem == Memory.HBM:
        parts = (0, 0)
    else:
        parts = (max(int(result.fp_partition[ra]), int(result.fp_partition[rb])),
                 min(int(result.fp_partition[ra] + result.fp_partitions[ra]),
                     int(result.fp_partition[rb] + result.fp_partitions[rb])))
    span = (max(int(result.fp_lo[ra]), int(result.fp_lo[rb])), min(int(result.fp_hi[ra]), int(result.fp_hi[rb])))
    return Race(_access(result, g, ka, ra), _access(result, g, kb, rb), mem.label, parts, span)


def _access(result: TimingResult, g: _Graph, k: int, row: int) -> Access:
    e = result.program.engine_of(k)
    return Access(k, ENGINES[e], k - int(result.first[e]), result.mnemonic(k), g.stream_name(k),
                  bool(result.fp_access[row] & ACCESS_WRITE), result.loc(k), result.ns(int(g.active(k))),
                  result.ns(g.active_end(k)))


# --------------------------------------------------------------------------- the happens-before graph

class _Graph:
    """The streams, the accesses by stream, and the semaphore updates and waits of a timed run: what
    the vector clocks (`clocks`, the happens-before relation of the module docstring) and the sweep
    read. Nothing here is per edge or per node of an explicit graph: program order is implicit in the
    streams, and a wait's semaphore predecessors are found by searching the updates (see _clocks)."""

    def __init__(self, r: TimingResult):
        self.r = r
        n = r.count
        n_eng = len(r.first) - 1
        dma_body = np.asarray(r.body_opcode == DMA_COPY, np.bool_).reshape(-1)
        queue_of_body = np.array([c.transfer.queue if c.transfer is not None else 0 for c in r.body_cost],
                                 np.int64).reshape(-1)
        n_queues = int(queue_of_body.max()) + 1 if len(queue_of_body) else 1
        # Streams: engines 0..4, then each (issuing engine, queue) of a transfer; the accesses
        # (instructions with footprints) by stream, one clock column per stream that has any, with
        # their active times and time keys (made monotone along the stream).
        # (the DMA streams' time keys and d_active come from `transfer_keys`).
        (self.dma_i, self.d_stream, keys, col_of_stream, self.acc_ptr, self.acc_k,
         self.acc_key) = _streams(r.first, r.body, dma_body, queue_of_body, n_queues, r.fp_ptr, r.start,
                                  _big(n, np.int32), _big(n, np.int32), _big(n, np.int32), _big(n, np.int64))
        self.d_active = _big(len(self.d_stream), np.int64)
        self.n_streams = n_eng + len(keys)
        self.stream_names = list(ENGINES) + [f"dma queue {int(x) % n_queues} from {ENGINES[int(x) // n_queues]}"
                                             for x in keys]
        self.col_of_stream = col_of_stream
        self.n_cols = len(self.acc_ptr) - 1
        self.n = n

    def footprints(self) -> None:
        """dist (per footprint row), the distinct footprints d_lo, d_hi, d_write, d_ptr (sorted), d_order
        and rank (sorted place <-> dist's numbering)."""
        r = self.r
        # Distinct footprints (column, address range, write) by hashing: a tiled program touches few,
        # so which of them could conflict with another stream is quick to find. Sorted by (column, lo,
        # hi, write): d_order[i] is the i-th's number in order of first appearance, which dist[row]
        # gives (no pass over the rows to renumber them), rank the inverse.
        self.dist, k_col, k_lo, k_hi, k_w = _distinct(self.acc_ptr, self.acc_k, r.fp_ptr, r.fp_memory, r.fp_lo,
                                                      r.fp_hi, r.fp_access, _big(len(r.fp_memory), np.int32))
        d_order = np.lexsort((k_w, k_hi, k_lo, k_col))
        self.rank = np.empty(len(k_col), np.int32)
        self.rank[d_order] = np.arange(len(k_col), dtype=np.int32)
        self.d_order = d_order.astype(np.int64)
        self.d_lo, self.d_hi, self.d_write = k_lo[d_order], k_hi[d_order], k_w[d_order]
        self.d_ptr = np.searchsorted(k_col[d_order], np.arange(self.n_cols + 1)).astype(np.int64)

    def transfer_keys(self) -> None:
        """d_active and the DMA streams' time keys (see _transfer_keys)."""
        r = self.r
        _transfer_keys(r.first, self.dma_i, r.start, r.class_ptr, r.class_start, self.col_of_stream, self.acc_ptr,
                       self.acc_k, self.d_active, self.acc_key)

    def waits(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray]:
        """The semaphore edges by waiting instruction (see _waits), and the clock matrix with its pages
        already touched (filled with -1), for `clocks`: in a second thread, its page faults (6,000 of
        them at 10^6 instructions without huge pages) are no longer the walk's."""
        r = self.r
        clock = _big((self.n, self.n_cols), np.int32)
        clock.fill(-1)
        w_ptr, w_sig, w_sem = np.zeros(self.n + 1, np.int32), _big(len(r.edge_wait), np.int32), _big(
            len(r.edge_wait), np.int32)
        most = _waits(self.n, r.edge_signal, r.edge_wait, r.edge_sem, w_ptr, w_sig, w_sem)
        return w_ptr, w_sig, w_sem, int(most), clock

    def clocks(self, waits: Future | None = None) -> np.ndarray:
        """clock[k, c] for every instruction k (for a dma_copy: its transfer's clock; the issue's own
        is needed by nothing else): the last instruction of column c's stream known complete once k is
        complete, -1 if none; for the columns other than k's own, what was known when k began (see
        _clocks). `waits`: `waits()` being computed in another thread, or None to compute it here."""
        r = self.r
        tmax = int(r.total_ticks) + 1
        if tmax >= 1 << 54:
            raise SimError(f"the run is too long ({r.total_ticks} ticks) to check for races")
        n_sems = 1 + max(int(r.signal_sem.max(initial=0)), int(r.edge_sem.max(initial=0)))
        n_dma_streams = len(self.stream_names) - len(ENGINES)
        g_node, g_key = _big(len(r.signal_sem), np.int32), _big(len(r.signal_sem), np.int64)
        g_ptr, sg_ptr, sg = _updates(r.first, self.dma_i, self.d_stream, n_dma_streams, r.start, r.end, r.done,
                                     r.signal_ptr, r.signal_sem, n_sems, g_node, g_key)
        w_ptr, w_sig, w_sem, most, clock = waits.result() if waits is not None else self.waits()
        clock, ok = _clocks(r.first, self.dma_i, self.d_stream, n_dma_streams, r.fp_ptr, self.col_of_stream, r.ready,
                            n_sems, g_ptr, g_node, g_key, sg_ptr, sg, w_ptr, w_sig, w_sem, most, clock,
                            np.zeros(self.n, np.bool_))
        if not ok:  # the graph follows time, so it cannot have a cycle
            raise AssertionError("ncsim bug: the happens-before graph of a timed run has a cycle")
        return clock

    def stream_name(self, k: int) -> str:
        i = int(self.dma_i[k])
        if i < 0:
            return ENGINES[self.r.program.engine_of(k)]
        return self.stream_names[len(ENGINES) + int(self.d_stream[i])]

    def active(self, k):
        """When instruction k's accesses begin (k an int or an array): its start; for a dma_copy its
        transfer's earliest piece's start (its start if it has no pieces)."""
        i = self.dma_i[k]
        if np.ndim(k) == 0:
            return int(self.d_active[i]) if i >= 0 else int(self.r.start[k])
        return np.where(i >= 0, self.d_active[np.maximum(i, 0)] if len(self.d_active) else 0, self.r.start[k])

    def active_end(self, k: int) -> int:
        """When instruction k's accesses end: its end, for a dma_copy its transfer's last piece's."""
        return int(self.r.done[k] if self.dma_i[k] >= 0 else self.r.end[k])


# --------------------------------------------------------------------------- numba kernels

def _big(shape, dtype) -> np.ndarray:
    """An array for a kernel to fill, allocated by numpy rather than inside the kernel: where numpy's
    huge-page advice is on (a library user's default; the ncsim command turns it off, see
    ncsim.runtime.heap), numpy asks the kernel for transparent huge pages on large arrays (madvise),
    so filling 32 MB costs 16 page faults instead of 8192, where numba's allocator takes plain pages;
    at 10^6 instructions the check took 21,000 page faults before."""
    return np.empty(shape, dtype)


@numba.njit(cache=True)
def _streams(first, body, dma_body, queue_of_body, n_queues, fp_ptr, start, dma_i, d_stream, acc_k, acc_key):
    """The streams and their accesses, in two passes over the instructions: (dma_i, d_stream, keys,
    col_of_stream, acc_ptr, acc_k, acc_key), acc_key for the engines' columns only (the DMA streams'
    are _transfer_keys').

    dma_i[k] is the dma_copy's number i in program order (-1 for other instructions); d_stream[i] its
    transfer's stream among the DMA streams, numbered in order of their keys (issuing engine *
    n_queues + queue), `keys` those keys. An engine instruction's accesses begin at its start.
    The accesses (instructions with footprint rows) by column (the streams that have any, in stream
    order), in program order: acc_k and acc_key (when they begin, made monotone along the column).
    The arrays of n come from the caller (see _big) and are cut to their lengths."""
    n_eng = first.shape[0] - 1
    n_keys = n_eng * n_queues
    transfers = np.zeros(n_keys, np.int64)
    count = np.zeros(n_eng + n_keys, np.int64)  # accesses: per engine, then per DMA key
    nd = 0
    for e in range(n_eng):
        for k in range(first[e], first[e + 1]):
            b = body[k]
            has = fp_ptr[k + 1] > fp_ptr[k]
            if dma_body[b]:
                dma_i[k] = nd
                nd += 1
                x = e * n_queues + queue_of_body[b]
                transfers[x] += 1
                if has:
                    count[n_eng + x] += 1
            else:
                dma_i[k] = -1
                if has:
                    count[e] += 1
    sid = np.full(n_keys, -1, np.int64)
    n_s = 0
    for x in range(n_keys):
        if transfers[x] > 0:
            sid[x] = n_s
            n_s += 1
    keys = np.empty(n_s, np.int64)
    for x in range(n_keys):
        if transfers[x] > 0:
            keys[sid[x]] = x
    n_streams = n_eng + n_s
    col_of_stream = np.full(n_streams, -1, np.int64)
    n_cols = 0
    for st in range(n_streams):
        if count[st if st < n_eng else n_eng + keys[st - n_eng]] > 0:
            col_of_stream[st] = n_cols
            n_cols += 1
    acc_ptr = np.zeros(n_cols + 1, np.int64)
    for st in range(n_streams):
        if col_of_stream[st] >= 0:
            acc_ptr[col_of_stream[st] + 1] = count[st if st < n_eng else n_eng + keys[st - n_eng]]
    for c in range(n_cols):
        acc_ptr[c + 1] += acc_ptr[c]
    m = acc_ptr[n_cols]
    fill = acc_ptr[:n_cols].copy()
    for e in range(n_eng):
        for k in range(first[e], first[e + 1]):
            i = dma_i[k]
            if i >= 0:
                st = n_eng + sid[e * n_queues + queue_of_body[body[k]]]
                d_stream[i] = st - n_eng
            else:
                st = e
            if fp_ptr[k + 1] > fp_ptr[k]:
                c = col_of_stream[st]
                at = fill[c]
                fill[c] += 1
                acc_k[at] = k
                if i < 0:
                    a = start[k]
                    acc_key[at] = a if at == acc_ptr[c] else max(a, acc_key[at - 1])
    return dma_i, d_stream[:nd], keys, col_of_stream, acc_ptr, acc_k[:m], acc_key[:m]


@numba.njit(cache=True, nogil=True)
def _transfer_keys(first, dma_i, start, class_ptr, class_start, col_of_stream, acc_ptr, acc_k, d_active, acc_key):
    """When each transfer's accesses begin, d_active[i] for the i-th dma_copy (its earliest piece's
    start; its start if it has no pieces), and the time keys of the DMA streams' columns (made
    monotone along each), which _streams leaves to this kernel. It reads the class pieces
    (TimingResult.class_ptr and class_start: they start when the pieces they stand for do; 411,616 at
    10^6 instructions, of 6.6 million pieces), in the second thread beside the clocks."""
    n_eng = first.shape[0] - 1
    for k in range(first[n_eng]):
        i = dma_i[k]
        if i >= 0:
            a = start[k]
            if class_ptr[k + 1] > class_ptr[k]:
                a = class_start[class_ptr[k]]
                for p in range(class_ptr[k] + 1, class_ptr[k + 1]):
                    a = min(a, class_start[p])
            d_active[i] = a
    for st in range(n_eng, col_of_stream.shape[0]):
        c = col_of_stream[st]
        if c < 0:
            continue
        for at in range(acc_ptr[c], acc_ptr[c + 1]):
            a = d_active[dma_i[acc_k[at]]]
            acc_key[at] = a if at == acc_ptr[c] else max(a, acc_key[at - 1])


@numba.njit(inline="always")
def _addr(memory, byte):
    """A byte of one of the three memories on one address line: memory << _ADDR_SHIFT | the byte,
    clipped to 0.._BYTE_MAX."""
    return (np.int64(memory) << _ADDR_SHIFT) | min(max(np.int64(byte), 0), _BYTE_MAX)


@numba.njit(cache=True, nogil=True)
def _distinct(acc_ptr, acc_k, fp_ptr, fp_memory, fp_lo, fp_hi, fp_access, local):
    """The distinct (column, lo, hi, write) of the accesses' footprint rows, lo and hi on one address
    line (_addr), by an open-addressing hash table (_hash_rows): (local, col, lo, hi, write) with
    local[row] the distinct footprint of each row, numbered in order of first appearance (every row
    is an access's; `local` is the caller's, see _big). A table too small is made 8 times larger and
    the rows hashed again."""
    cap = 1024
    while True:
        keys = np.empty((4, cap), np.int64)  # column, lo, hi, write
        k_hash = np.empty(cap, np.uint64)
        table = np.empty(2 * cap, np.int64)
        nd = _hash_rows(acc_ptr, acc_k, fp_ptr, fp_memory, fp_lo, fp_hi, fp_access, local, keys, k_hash, table)
        if nd >= 0:
            return local, keys[0, :nd].copy(), keys[1, :nd].copy(), keys[2, :nd].copy(), keys[3, :nd] != 0
        cap *= 8


@numba.njit(cache=True, _nrt=False, nogil=True)
def _hash_rows(acc_ptr, acc_k, fp_ptr, fp_memory, fp_lo, fp_hi, fp_access, local, keys, k_hash, table):
    """_distinct's hashing into tables it is given (no reference counting, _nrt=False): the number of
    distinct footprints, or -1 if there are more than keys.shape[1] (the table is kept at most half full)."""
    cap = keys.shape[1]
    size = table.shape[0]
    for i in range(size):
        table[i] = -1
    nd = 0
    for c in range(acc_ptr.shape[0] - 1):
        for a in range(acc_ptr[c], acc_ptr[c + 1]):
            k = acc_k[a]
            for row in range(fp_ptr[k], fp_ptr[k + 1]):
                lo = _addr(fp_memory[row], fp_lo[row])
                hi = _addr(fp_memory[row], fp_hi[row])
                w = np.int64(1) if (fp_access[row] & ACCESS_WRITE) != 0 else np.int64(0)
                h = np.uint64(c) * np.uint64(0x9E3779B97F4A7C15) ^ np.uint64(lo)
                h = (h ^ (h >> np.uint64(31))) * np.uint64(0xBF58476D1CE4E5B9) ^ np.uint64(hi)
                h = (h ^ (h >> np.uint64(29))) * np.uint64(0x94D049BB133111EB) ^ np.uint64(w)
                h ^= h >> np.uint64(32)
                slot = np.int64(h & np.uint64(size - 1))
                while True:
                    d = table[slot]
                    if d < 0:
                        if nd == cap:
                            return -1
                        table[slot] = nd
                        keys[0, nd] = c
                        keys[1, nd] = lo
                        keys[2, nd] = hi
                        keys[3, nd] = w
                        k_hash[nd] = h
                        local[row] = nd
                        nd += 1
                        break
                    if (k_hash[d] == h and keys[0, d] == c and keys[1, d] == lo and keys[2, d] == hi
                            and keys[3, d] == w):
                        local[row] = d
                        break
                    slot = (slot + 1) & (size - 1)
    return nd


@numba.njit(cache=True, nogil=True)
def _updates(first, dma_i, d_stream, n_dma_streams, start, end, done, signal_ptr, signal_sem, n_sems, g_node, g_key):
    """The semaphore updates by (semaphore, chain) for _clocks: (g_ptr, sg_ptr, sg), with g_node and
    g_key (the caller's, see _big) filled: list g = sem * n_ch + chain holds, in chain order, the
    updating nodes and the suffix minima of their keys; sg[sg_ptr[sem]:sg_ptr[sem + 1]] are the g of
    semaphore sem whose lists are not empty."""
    n_eng = first.shape[0] - 1
    n_ch = n_eng + n_dma_streams
    # Semaphore updates by (semaphore, chain), each list in chain order: the node, its key's suffix minimum.
    g_ptr = np.zeros(n_sems * n_ch + 1, np.int64)
    for e in range(n_eng):
        for k in range(first[e], first[e + 1]):
            if signal_ptr[k + 1] == signal_ptr[k]:
                continue
            ch = e if dma_i[k] < 0 else n_eng + d_stream[dma_i[k]]
            for j in range(signal_ptr[k], signal_ptr[k + 1]):
                g_ptr[signal_sem[j] * n_ch + ch + 1] += 1
    for g in range(n_sems * n_ch):
        g_ptr[g + 1] += g_ptr[g]
    fill = g_ptr[:n_sems * n_ch].copy()
    for e in range(n_eng):  # in program order, which is each chain's order (a DMA stream has one issuing engine)
        for k in range(first[e], first[e + 1]):
            if signal_ptr[k + 1] == signal_ptr[k]:
                continue
            i = dma_i[k]
            ch = e if i < 0 else n_eng + d_stream[i]
            node = k
            late = 0 if (i >= 0 or end[k] > start[k]) else 1
            for j in range(signal_ptr[k], signal_ptr[k + 1]):
                g = signal_sem[j] * n_ch + ch
                g_node[fill[g]] = node
                g_key[fill[g]] = 2 * done[k] + late
                fill[g] += 1
    for g in range(n_sems * n_ch):
        for x in range(g_ptr[g + 1] - 2, g_ptr[g] - 1, -1):
            g_key[x] = min(g_key[x], g_key[x + 1])
    # The (semaphore, chain) lists that are not empty, by semaphore: their g.
    sg_ptr = np.zeros(n_sems + 1, np.int64)
    sg = np.empty(n_sems * n_ch, np.int64)
    for sem in range(n_sems):
        sg_ptr[sem + 1] = sg_ptr[sem]
        for uc in range(n_ch):
            if g_ptr[sem * n_ch + uc + 1] > g_ptr[sem * n_ch + uc]:
                sg[sg_ptr[sem + 1]] = sem * n_ch + uc
                sg_ptr[sem + 1] += 1
    return g_ptr, sg_ptr, sg


@numba.njit(cache=True, nogil=True)
def _waits(n, edge_signal, edge_wait, edge_sem, w_ptr, w_sig, w_sem):
    """The semaphore edges by waiting instruction for _clocks, into the caller's arrays (w_ptr zeroed,
    n + 1 long): instruction k's are w_sig[w_ptr[k]:w_ptr[k + 1]] (releasers) and w_sem (their
    semaphores). Returns the most edges of one instruction."""
    # The edges of each waiting instruction, in its order: the releaser's node and the semaphore.
    for e in range(edge_wait.shape[0]):
        w_ptr[edge_wait[e] + 1] += 1
    most = 0
    for k in range(n):
        most = max(most, w_ptr[k + 1])
        w_ptr[k + 1] += w_ptr[k]
    for e in range(edge_wait.shape[0]):  # w_ptr[k] serves as k's cursor, and ends as w_ptr[k + 1] was
        x = w_ptr[edge_wait[e]]
        w_ptr[edge_wait[e]] += 1
        ks = edge_signal[e]
        w_sig[x] = ks
        w_sem[x] = edge_sem[e]
    for k in range(n, 0, -1):
        w_ptr[k] = w_ptr[k - 1]
    w_ptr[0] = 0
    return most


@numba.njit(cache=True, nogil=True)
def _clocks(first, dma_i, d_stream, n_dma_streams, fp_ptr, col_of_stream, ready, n_sems, g_ptr, g_node, g_key, sg_ptr,
            sg, w_ptr, w_sig, w_sem, most, clock, complete):
    """Vector clocks over the happens-before relation of the module docstring: clock[v, c] is the last
    instruction of column c's stream known complete once node v is complete (nodes: k for instruction
    k; for a dma_copy, the row of k holds its transfer's clock, see _walk), -1 if none. For another
    column than v's own that is also what was known when v began, all that the sweep reads. Returns
    (clock, False if the relation has a cycle).

    No graph is built. The nodes form chains: each engine's instructions (program order), each DMA
    stream's transfers (queue order). A node's other predecessors are all earlier nodes of other
    chains: a transfer's issue; for an instruction whose waits held because of updates, each
    releaser and the updates its wait acquires. Those of semaphore s that a wait ready at T acquires
    are the updates applied before T, and at T those the scheduler applies before it checks waits
    (completions of busy engine instructions and of transfers): with key 2 done + (0 if so, else 1),
    those with key < 2 T + 1. The updates of s by one chain are listed in chain order with the
    suffix minima of their keys; the last with a suffix minimum below the bound is the last such
    update, and completing it makes all the earlier ones known (a chain's clocks only grow). A chain
    is processed from its head as far as it can go; when a node's predecessor lies ahead in another
    chain, that chain is processed up to it first (a stack of chains: depth-first, each node's clock
    computed once). The updates' lists are _updates', the waits' _waits'; `clock` and `complete` are
    the caller's (see _big), `complete` zeroed."""
    n_eng = first.shape[0] - 1
    n_ch = n_eng + n_dma_streams
    n_cols = clock.shape[1]
    # The walk's chains are the engines' only: a transfer's clock is its issue's (see _walk).
    cur = np.full((n_eng, n_cols), -1, np.int32)  # what completing each engine's last processed node made known
    head = first[:n_eng].astype(np.int64)
    stop = first[1:].astype(np.int64)
    on_stack = np.zeros(n_eng, np.bool_)
    st_ch = np.empty(n_eng + 1, np.int64)
    st_to = np.empty(n_eng + 1, np.int64)
    # A node's predecessors of other chains; where each waiting chain last found the acquired update of
    # each (semaphore, chain): the bounds of one waiting chain mostly grow, so the next search gallops
    # from there.
    # A chain's head's predecessors are kept while the chain waits for them.
    pred = np.empty((n_eng, most * (n_ch + 1) + 1), np.int64)
    pend = np.full(n_eng, -1, np.int64)  # how many, -1 if not found yet
    hint = np.full(n_eng * n_sems * n_ch, -1, np.int64)  # only engine instructions wait
    last = np.full(n_ch, -1, np.int32)
    ok = _walk(first, dma_i, d_stream, fp_ptr, col_of_stream, ready, n_sems, n_ch, g_ptr, g_node, g_key, sg_ptr, sg,
               w_ptr, w_sig, w_sem, clock, complete, cur, head, stop, on_stack, st_ch, st_to, pred, pend, hint, last)
    return clock, ok


@numba.njit(cache=True, _nrt=False, nogil=True)
def _walk(first, dma_i, d_stream, fp_ptr, col_of_stream, ready, n_sems, n_ch, g_ptr, g_node, g_key, sg_ptr, sg, w_ptr,
          w_sig, w_sem, clock, complete, cur, head, stop, on_stack, st_ch, st_to, pred, pend, hint, last):
    """_clocks' walk over the engines' chains (False if it meets a cycle), with every array it needs
    given: it allocates nothing and is compiled without numba's reference counting (_nrt=False; with
    it, the atomic increments and decrements of the arrays it passes around took about a third of
    the walk).

    A DMA stream's transfers are not walked: a transfer's only predecessors are its issue and the
    stream's previous transfer, whose issue came earlier on the same engine (a stream has one
    issuing engine), so what the previous transfer made known the issue knows already, except the
    stream's own column. The transfer's clock is thus its issue's plus its stream's column (its
    own k, or the stream's last access before it), written in the dma_copy's row k, which the issue
    itself needs for nothing else (its accesses are the transfer's). `last[ch]` is each DMA stream's
    last access so far."""
    n_eng = first.shape[0] - 1
    n_cols = clock.shape[1]
    for c0 in range(n_eng):
        st_ch[0] = c0
        st_to[0] = stop[c0]
        on_stack[c0] = True
        top = 1
        while top > 0:
            c = st_ch[top - 1]
            if head[c] >= stop[c]:
                on_stack[c] = False
                top -= 1
                continue
            k = head[c]
            n_pred = pend[c]
            if n_pred < 0:
                n_pred = 0
                bound = 2 * ready[k] + 1
                for x in range(w_ptr[k], w_ptr[k + 1]):
                    pred[c, n_pred] = w_sig[x]
                    n_pred += 1
                    sem = w_sem[x]
                    for y in range(sg_ptr[sem], sg_ptr[sem + 1]):
                        g = sg[y]
                        g0 = g_ptr[g]
                        g1 = g_ptr[g + 1]
                        if g_key[g0] >= bound:
                            continue
                        hx = c * n_sems * n_ch + g
                        lo = hint[hx]
                        if lo < g0 or g_key[lo] >= bound:
                            lo = g0
                        # the last place with a suffix minimum below the bound: gallop, then bisect
                        step = 1
                        while lo + step < g1 and g_key[lo + step] < bound:
                            lo += step
                            step *= 2
                        hi = min(lo + step, g1)
                        while hi - lo > 1:
                            mid = (lo + hi) // 2
                            if g_key[mid] < bound:
                                lo = mid
                            else:
                                hi = mid
                        hint[hx] = lo
                        if g_node[lo] != pred[c, n_pred - 1]:  # often the releaser itself
                            pred[c, n_pred] = g_node[lo]
                            n_pred += 1
                pend[c] = n_pred
            # a predecessor still ahead in its chain: process that chain up to it first
            need = -1
            for x in range(n_pred):
                if not complete[pred[c, x]]:
                    need = pred[c, x]
                    break
            if need >= 0:
                if head[c] >= st_to[top - 1]:  # past what was asked of it: back to the chain that asked
                    on_stack[c] = False
                    top -= 1
                    continue
                vc = 0
                while need >= first[vc + 1]:
                    vc += 1
                if on_stack[vc]:
                    return False
                on_stack[vc] = True
                st_ch[top] = vc
                st_to[top] = need + 1
                top += 1
                continue
            # every predecessor is complete: what completing this node makes known
            for j in range(n_cols):
                acc_j = cur[c, j]
                for x in range(n_pred):
                    acc_j = max(acc_j, clock[pred[c, x], j])
                cur[c, j] = acc_j
                clock[k, j] = acc_j
            i = dma_i[k]
            if i < 0:
                cc = col_of_stream[c]
                if cc >= 0 and fp_ptr[k + 1] > fp_ptr[k]:
                    cur[c, cc] = k
                    clock[k, cc] = k
            else:  # the transfer: the clock and its stream's column
                ch = n_eng + d_stream[i]
                if fp_ptr[k + 1] > fp_ptr[k]:
                    last[ch] = k
                cc = col_of_stream[ch]
                if cc >= 0:
                    clock[k, cc] = max(clock[k, cc], last[ch])
            complete[k] = True
            head[c] += 1
            pend[c] = -1
    return True


@numba.njit(inline="always")
def _tree_set(tree, size, slot, value):
    i = slot + size
    tree[i] = value
    i >>= 1
    while i >= 1:
        a = tree[2 * i]
        b = tree[2 * i + 1]
        tree[i] = max(b, a)
        i >>= 1


@numba.njit(cache=True)
def _sweep(clock, acc_ptr, acc_k, acc_key, fp_ptr, fp_memory, fp_lo, fp_hi, fp_access, fp_partition,
           fp_partitions, dist, d_lo, d_hi, d_write, d_ptr, d_order, rank, linear_window, hits_per_access,
           max_candidates, conflict_table_max):
    """Candidate races: (a_k, a_row, b_k, b_row) with a on another stream than b, before b in time
    order, neither ordered before the other, their spans overlapping, at least one writing.
    Returns (the four arrays, truncated). The search is _sweep_run's; the trees (and each column's
    rows sorted by distinct footprint, which they stand on) are built only if a window needs them,
    and the search then starts again with them."""
    n_cols = acc_ptr.shape[0] - 1
    n_rows = fp_memory.shape[0]
    out = np.empty((max_candidates, 4), np.int64)  # (a_k, a_row, b_k, b_row); pages are touched as filled
    # Per column, over its distinct footprints sorted by address: prefix maxima of the end, of all
    # of them and of the writes.
    n_dist = d_lo.shape[0]
    pm_all = np.empty(n_dist, np.int64)
    pm_w = np.empty(n_dist, np.int64)
    for c in range(n_cols):
        best_all = -1
        best_w = -1
        for i in range(d_ptr[c], d_ptr[c + 1]):
            best_all = max(best_all, d_hi[i])
            if d_write[i]:
                best_w = max(best_w, d_hi[i])
            pm_all[i] = best_all
            pm_w[i] = best_w
    rel = np.zeros(n_dist, np.bool_)
    # With few distinct footprints (a tiled program's), which pairs of them conflict (spans meet, one
    # writes), in dist's numbering: a small window's rows are checked by one look-up each.
    use_conf = n_dist <= conflict_table_max
    conf = np.zeros((n_dist, n_dist) if use_conf else (1, 1), np.bool_)
    if use_conf:
        for x in range(n_dist):
            i = rank[x]
            for y in range(n_dist):
                j = rank[y]
                conf[x, y] = d_lo[i] < d_hi[j] and d_lo[j] < d_hi[i] and (d_write[i] or d_write[j])
    col_rows_ptr = np.zeros(n_cols + 1, np.int64)
    for c in range(n_cols):
        for a in range(acc_ptr[c], acc_ptr[c + 1]):
            col_rows_ptr[c + 1] += fp_ptr[acc_k[a] + 1] - fp_ptr[acc_k[a]]
        col_rows_ptr[c + 1] += col_rows_ptr[c]
    stack = np.empty((3, 128), np.int64)  # depth-first over a tree: at most 2 per level pending
    none32 = np.empty(0, np.int32)
    none64 = np.empty(0, np.int64)
    n_out, truncated, need = _sweep_run(
        clock, acc_ptr, acc_k, acc_key, fp_ptr, fp_memory, fp_lo, fp_hi, fp_access, fp_partition,
        fp_partitions, dist, d_lo, d_ptr, d_hi, d_write, linear_window, hits_per_access, out, pm_all, pm_w, rel,
        d_order, conf, use_conf, col_rows_ptr, False, 1, none64, none64, none32, none64, none32, none32, stack)
    if need:
        # Every column's rows sorted by the rank of their distinct footprint, stably (the accesses'
        # order): col_rows, their starts, and each row's place among its column's.
        biggest = 1
        for c in range(n_cols):
            biggest = max(biggest, col_rows_ptr[c + 1] - col_rows_ptr[c])
        size = 1
        while size < biggest:
            size *= 2
        start = np.zeros(n_dist + 1, np.int64)
        for c in range(n_cols):
            for a in range(acc_ptr[c], acc_ptr[c + 1]):
                for row in range(fp_ptr[acc_k[a]], fp_ptr[acc_k[a] + 1]):
                    start[rank[dist[row]] + 1] += 1
        for i in range(n_dist):
            start[i + 1] += start[i]
        m_all = col_rows_ptr[n_cols]
        col_rows = np.empty(m_all, np.int32)
        col_rows_lo = np.empty(m_all, np.int64)
        slot_of_row = np.empty(n_rows, np.int32)
        for c in range(n_cols):
            for a in range(acc_ptr[c], acc_ptr[c + 1]):
                for row in range(fp_ptr[acc_k[a]], fp_ptr[acc_k[a] + 1]):
                    at = start[rank[dist[row]]]
                    start[rank[dist[row]]] += 1
                    col_rows[at] = row
                    col_rows_lo[at] = _addr(fp_memory[row], fp_lo[row])
                    slot_of_row[row] = at - col_rows_ptr[c]
        n_out, truncated, need = _sweep_run(
            clock, acc_ptr, acc_k, acc_key, fp_ptr, fp_memory, fp_lo, fp_hi, fp_access, fp_partition,
            fp_partitions, dist, d_lo, d_ptr, d_hi, d_write, linear_window, hits_per_access, out, pm_all, pm_w, rel,
            d_order, conf, use_conf, col_rows_ptr, True, size, np.full(2 * size, -1, np.int64),
            np.full(2 * size, -1, np.int64), col_rows, col_rows_lo, slot_of_row, np.empty(biggest, np.int32), stack)
    return out[:n_out], truncated


@numba.njit(cache=True, _nrt=False)
def _sweep_run(clock, acc_ptr, acc_k, acc_key, fp_ptr, fp_memory, fp_lo, fp_hi, fp_access, fp_partition,
               fp_partitions, dist, d_lo, d_ptr, d_hi, d_write, linear_window, hits_per_access, out, pm_all, pm_w, rel,
               d_order, conf, use_conf, col_rows_ptr, trees, size, all_tree, write_tree, col_rows, col_rows_lo,
               slot_of_row, row_k, stack):
    """_sweep's search, into `out`: (candidates, truncated, False), or (0, False, True) as soon as a
    window needs the trees when `trees` is False. rel[d], for the pair of columns at hand (d numbered
    as dist gives it; d_order[i] is the i-th in sorted order's): distinct footprint d meets one of the other column's that it could conflict with (spans only); rows of
    the others never enter a tree or ask one. Allocates nothing (_nrt=False: no reference counting)."""
    n_cols = acc_ptr.shape[0] - 1
    max_candidates = out.shape[0]
    n_out = 0
    truncated = False
    stack_node = stack[0]
    stack_lo = stack[1]
    stack_len = stack[2]
    for t in range(n_cols):
        r0 = col_rows_ptr[t]
        m_t = col_rows_ptr[t + 1] - r0
        have_rows = False  # row_k, for column t
        for s in range(n_cols):
            if s == t:
                continue
            any_t = False
            for i in range(d_ptr[t], d_ptr[t + 1]):
                pm = pm_all if d_write[i] else pm_w
                rel[d_order[i]] = _meets(d_lo, pm, d_ptr[s], d_ptr[s + 1] - d_ptr[s], d_lo[i], d_hi[i])
                any_t = any_t or rel[d_order[i]]
            any_s = False
            for i in range(d_ptr[s], d_ptr[s + 1]):
                pm = pm_all if d_write[i] else pm_w
                rel[d_order[i]] = _meets(d_lo, pm, d_ptr[t], d_ptr[t + 1] - d_ptr[t], d_lo[i], d_hi[i])
                any_s = any_s or rel[d_order[i]]
            if not (any_t and any_s):
                continue
            # The window [lo_i, hi_i) of t's accesses; those in [lo_i, ins_i) are in the trees. An
            # access enters the trees only when a query needs it: in a well-synchronised program most
            # leave the window (become ordered) before any query sees them.
            lo_i = acc_ptr[t]
            hi_i = lo_i
            ins_i = lo_i
            t_end = acc_ptr[t + 1]
            for j in range(acc_ptr[s], acc_ptr[s + 1]):
                kb = acc_k[j]
                key_b = acc_key[j]
                while hi_i < t_end and (acc_key[hi_i] < key_b or (acc_key[hi_i] == key_b and t < s)):
                    hi_i += 1
                while lo_i < t_end and acc_k[lo_i] <= clock[kb, t]:
                    if lo_i < ins_i:
                        k = acc_k[lo_i]
                        for row in range(fp_ptr[k], fp_ptr[k + 1]):
                            if rel[dist[row]]:
                                _tree_set(all_tree, size, slot_of_row[row], -1)
                                if fp_access[row] & ACCESS_WRITE:
                                    _tree_set(write_tree, size, slot_of_row[row], -1)
                    lo_i += 1
                ins_i = max(ins_i, lo_i)
                if lo_i >= hi_i:
                    continue
                if hi_i - lo_i <= linear_window and ins_i <= lo_i:
                    # A small window (the usual case): look at its accesses one by one.
                    for rb in range(fp_ptr[kb], fp_ptr[kb + 1]):
                        db = dist[rb]
                        if not rel[db]:
                            continue
                        wb = (fp_access[rb] & ACCESS_WRITE) != 0
                        lo_b = _addr(fp_memory[rb], fp_lo[rb])
                        hi_b = _addr(fp_memory[rb], fp_hi[rb])
                        found = 0
                        for i in range(lo_i, hi_i):
                            k = acc_k[i]
                            for ra in range(fp_ptr[k], fp_ptr[k + 1]):
                                if use_conf:
                                    hit = conf[dist[ra], db]
                                else:
                                    hit = (rel[dist[ra]] and (wb or (fp_access[ra] & ACCESS_WRITE) != 0)
                                           and _addr(fp_memory[ra], fp_lo[ra]) < hi_b
                                           and lo_b < _addr(fp_memory[ra], fp_hi[ra]))
                                if (hit and found < hits_per_access
                                        and _candidate(ra, rb, kb, k, s, clock, fp_memory, fp_partition,
                                                       fp_partitions)):
                                    if n_out == max_candidates:
                                        return n_out, True, False
                                    out[n_out, 0] = k
                                    out[n_out, 1] = ra
                                    out[n_out, 2] = kb
                                    out[n_out, 3] = rb
                                    n_out += 1
                                    found += 1
                        if found >= hits_per_access:
                            truncated = True
                    continue
                if not trees:
                    return 0, False, True
                if not have_rows:
                    # row -> its instruction (its clock row), for the rows of column t
                    have_rows = True
                    for i in range(acc_ptr[t], acc_ptr[t + 1]):
                        k = acc_k[i]
                        for row in range(fp_ptr[k], fp_ptr[k + 1]):
                            row_k[slot_of_row[row]] = k
                # A large window: the trees, brought up to date.
                while ins_i < hi_i:
                    k = acc_k[ins_i]
                    for row in range(fp_ptr[k], fp_ptr[k + 1]):
                        if rel[dist[row]]:
                            hi_r = _addr(fp_memory[row], fp_hi[row])
                            _tree_set(all_tree, size, slot_of_row[row], hi_r)
                            if fp_access[row] & ACCESS_WRITE:
                                _tree_set(write_tree, size, slot_of_row[row], hi_r)
                    ins_i += 1
                for rb in range(fp_ptr[kb], fp_ptr[kb + 1]):
                    tree = all_tree if fp_access[rb] & ACCESS_WRITE else write_tree
                    lo_b = _addr(fp_memory[rb], fp_lo[rb])
                    hi_b = _addr(fp_memory[rb], fp_hi[rb])
                    if not rel[dist[rb]] or tree[1] <= lo_b:
                        continue
                    # slots [0, p) begin below b's end; find those that end above b's start
                    a = 0
                    z = m_t
                    while a < z:
                        mid = (a + z) // 2
                        if col_rows_lo[r0 + mid] < hi_b:
                            a = mid + 1
                        else:
                            z = mid
                    p = a
                    found = 0
                    stack_node[0] = 1
                    stack_lo[0] = 0
                    stack_len[0] = size
                    top = 1
                    while top > 0 and found < hits_per_access:
                        top -= 1
                        node = stack_node[top]
                        first_slot = stack_lo[top]
                        width = stack_len[top]
                        if tree[node] <= lo_b or first_slot >= p:
                            continue
                        if width > 1:
                            half = width // 2
                            stack_node[top] = 2 * node + 1
                            stack_lo[top] = first_slot + half
                            stack_len[top] = half
                            stack_node[top + 1] = 2 * node
                            stack_lo[top + 1] = first_slot
                            stack_len[top + 1] = half
                            top += 2
                            continue
                        ra = col_rows[r0 + first_slot]
                        if not _candidate(ra, rb, kb, row_k[first_slot], s, clock, fp_memory, fp_partition,
                                          fp_partitions):
                            continue
                        if n_out == max_candidates:
                            return n_out, True, False
                        out[n_out, 0] = row_k[first_slot]
                        out[n_out, 1] = ra
                        out[n_out, 2] = kb
                        out[n_out, 3] = rb
                        n_out += 1
                        found += 1
                    if found >= hits_per_access:
                        truncated = True
            for i in range(lo_i, ins_i):  # leave the trees empty for the next pair
                k = acc_k[i]
                for row in range(fp_ptr[k], fp_ptr[k + 1]):
                    if rel[dist[row]]:
                        _tree_set(all_tree, size, slot_of_row[row], -1)
                        _tree_set(write_tree, size, slot_of_row[row], -1)
    return n_out, truncated, False




@numba.njit(inline="always")
def _meets(sorted_lo, pm, r0, m, lo, hi):
    """Does some footprint r0..r0+m (sorted by start, pm their prefix maxima of the end) meet [lo, hi)?"""
    a = 0
    z = m
    while a < z:
        mid = (a + z) // 2
        if sorted_lo[r0 + mid] < hi:
            a = mid + 1
        else:
            z = mid
    return a > 0 and pm[r0 + a - 1] > lo


@numba.njit(inline="always")
def _candidate(ra, rb, kb, node_a, s, clock, fp_memory, fp_partition, fp_partitions):
    """Rows ra (of instruction a, clock node node_a) and rb (of instruction kb, on column s) whose spans
    meet: do their partitions meet too (always in HBM), and is b not ordered before a?"""
    if fp_memory[ra] != 3 and (fp_partition[ra] >= fp_partition[rb] + fp_partitions[rb]
                               or fp_partition[rb] >= fp_partition[ra] + fp_partitions[ra]):
        return False
    return clock[node_a, s] < kb  # b before a can only happen at equal time keys


# --------------------------------------------------------------------------- exact overlap

class _Exact:
    """Do two footprints share a byte? Their spans overlap; their access patterns' byte runs decide.

    Instructions of one body differ only in their byte offsets, so the runs of footprint row j of
    any instruction are those of the body's first instruction, shifted; the answer for two rows
    depends on their bodies, their operands and the difference of their offsets, and is memoised so.
    """

    def __init__(self, result: TimingResult):
        self.r = result
        self.rep = {}  # body -> (first instruction, its access patterns by footprint row)
        self._rep_k: dict[int, int] | None = None

    @property
    def rep_k(self) -> dict[int, int]:
        """body -> its first instruction; found when the first candidate is checked (a sort of every
        instruction's body, which a run without candidates does not pay for)."""
        if self._rep_k is None:
            body = self.r.body
            bodies, firsts = np.unique(body, return_index=True) if len(body) else ([], [])
            self._rep_k = dict(zip(np.asarray(bodies).tolist(), np.asarray(firsts).tolist()))
        return self._rep_k

    def _patterns(self, b: int) -> tuple[int, list[AccessPattern] | None]:
        if b not in self.rep:
            k = self.rep_k[b]
            r = self.r
            rows = range(int(r.fp_ptr[k]), int(r.fp_ptr[k + 1]))
            aps = [v for v in r.instruction(k).operands.values()
                   if isinstance(v, AccessPattern) and v.memory in (Memory.SBUF, Memory.PSUM, Memory.HBM)]
            ok = len(aps) == len(rows) and all(
                int(r.fp_memory[row]) == ap.memory and (int(r.fp_lo[row]), int(r.fp_hi[row])) == ap.byte_span()
                for row, ap in zip(rows, aps))
            self.rep[b] = (k, aps if ok else None)
        return self.rep[b]

    def check(self, a_k: np.ndarray, a_row: np.ndarray, b_k: np.ndarray, b_row: np.ndarray) -> np.ndarray:
        r = self.r
        if len(a_k) == 0:
            return np.zeros(0, bool)
        ba, bb = r.body[a_k], r.body[b_k]
        ja = a_row - r.fp_ptr[a_k]
        jb = b_row - r.fp_ptr[b_k]
        first = np.zeros(int(r.body.max()) + 1, np.int64)
        first[list(self.rep_k)] = list(self.rep_k.values())
        shift = (r.fp_lo[b_row] - r.fp_lo[r.fp_ptr[first[bb]] + jb]) - (r.fp_lo[a_row] - r.fp_lo[r.fp_ptr[first[ba]] + ja])
        keys = np.stack([ba, ja, bb, jb, shift], axis=1).astype(np.int64)
        uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
        answers = np.array([self._overlap(*map(int, key)) for key in uniq], bool)
        return answers[inverse.reshape(-1)]

    def _overlap(self, ba: int, ja: int, bb: int, jb: int, shift: int) -> bool:
        _, aps_a = self._patterns(ba)
        _, aps_b = self._patterns(bb)
        if aps_a is None or aps_b is None:
            return True  # footprints that do not match their decoded operands: trust the spans
        sa, la = byte_runs(aps_a[ja])
        sb, lb = byte_runs(aps_b[jb])
        sb = sb + shift
        idx = np.searchsorted(sb, sa + la, side="left")
        ok = idx > 0
        return bool(np.any(sb[idx[ok] - 1] + lb > sa[ok]))
