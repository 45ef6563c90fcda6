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

Speed. Vector clocks (one column per stream that accesses memory) are propagated once over the
happens-before graph in topological order (numba). Then, for each ordered pair of streams (s, t),
the accesses of t that are unordered with an access b of s and come before it in time form a window
of t's program order whose two ends only move forward as b advances. Footprints that cannot
conflict with any of the other stream's (their spans meet none of a conflicting kind) are left out;
a small window is searched access by access, a large one through max-segment-trees over t's
footprints sorted by address (one of all footprints, one of writes), which the window's accesses
enter only when a query needs them. The work is O(streams x footprints x log footprints) plus the
pairs found; candidate pairs (spans overlap) are confirmed exactly in Python, once per distinct
(access pattern, access pattern, offset difference). The graph and the footprint tables are built
by numba kernels (edges, counting sorts, a hash table of distinct footprints): on
tools/bench_timing.py's tiled matmul the whole check takes 0.1-0.14 s of CPU at 303 168
instructions and 0.4 s at 1 000 544 (--million), of which building the graph 0.23 s (2.9 s with
numpy's sorts).
A search that hits its caps (HITS_PER_ACCESS, MAX_CANDIDATES) says so: `RaceReport.complete` is
False.
"""

from __future__ import annotations

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
HITS_PER_ACCESS = 64  # candidate footprints one access may collect from one other stream
MAX_CANDIDATES = 1 << 20  # candidate pairs collected in all before the search stops


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
    clocks = _clocks(g.n_nodes, g.succ_ptr, g.succ, g.indeg, g.node_col, g.node_pos, g.n_cols)
    if clocks[1] < g.n_nodes:  # the graph follows time, so it cannot have a cycle
        raise AssertionError("ncsim bug: the happens-before graph of a timed run has a cycle")
    cand, truncated = _sweep(clocks[0], g.acc_ptr, g.acc_k, g.acc_node, g.acc_key, g.fp_ptr, g.row_lo, g.row_hi,
                             g.row_write, g.row_part, g.row_parts, g.row_mem, g.col_rows_ptr, g.col_rows,
                             g.col_rows_lo, g.slot_of_row, g.dist, g.d_lo, g.d_hi, g.d_write, g.d_ptr,
                             LINEAR_WINDOW, HITS_PER_ACCESS, MAX_CANDIDATES)
    a_k, a_row, b_k, b_row = cand.T
    exact = _Exact(result).check(a_k, a_row, b_k, b_row)
    a_k, a_row, b_k, b_row = a_k[exact], a_row[exact], b_k[exact], b_row[exact]
    if len(a_k) == 0:
        return RaceReport((), 0, not truncated)
    # One race per pair of instructions: the first pair of footprints found.
    pair = np.stack([np.minimum(a_k, b_k), np.maximum(a_k, b_k)], axis=1)
    _, first = np.unique(pair, axis=0, return_index=True)
    a_k, a_row, b_k, b_row = a_k[first], a_row[first], b_k[first], b_row[first]
    lo_a, lo_b = g.active[a_k], g.active[b_k]
    order = np.lexsort((np.minimum(a_k, b_k), np.minimum(lo_a, lo_b), np.maximum(lo_a, lo_b)))[:max(limit, 0)]
    races = []
    for i in order:
        sides = [(int(a_k[i]), int(a_row[i])), (int(b_k[i]), int(b_row[i]))]
        sides.sort(key=lambda s: (g.active[s[0]], g.active_end[s[0]], s[0]))
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
    return Access(k, ENGINES[int(result.engine[k])], int(result.index[k]), result.mnemonic(k), g.stream_name(k),
                  bool(result.fp_access[row] & ACCESS_WRITE), result.loc(k), result.ns(int(g.active[k])),
                  result.ns(int(g.active_end[k])))


# --------------------------------------------------------------------------- the happens-before graph

class _Graph:
    """Nodes: every instruction (for a dma_copy: its issue), every transfer, and two per (semaphore,
    instant with updates): PRE (the updates the scheduler applies before it checks waits: completions
    of engine instructions and transfers) and CP (all of them). Edges as the module docstring says."""

    def __init__(self, r: TimingResult):
        n = r.count
        is_dma = r.opcode == DMA_COPY
        dma_k = np.flatnonzero(is_dma)
        nd = len(dma_k)
        comp = np.arange(n, dtype=np.int64)  # the node whose completion is the instruction's completion
        comp[dma_k] = n + np.arange(nd)
        self.comp = comp

        # Streams: engines 0..4, then each (issuing engine, queue) of a transfer.
        queue_of_body = np.array([c.transfer.queue if c.transfer is not None else -1 for c in r.body_cost],
                                 np.int64).reshape(-1)
        queue = queue_of_body[r.body] if n else np.zeros(0, np.int64)
        stream = r.engine.astype(np.int64)
        dma_key = r.engine[dma_k].astype(np.int64) * 65536 + queue[dma_k]
        keys, dma_stream = np.unique(dma_key, return_inverse=True)
        stream[dma_k] = len(ENGINES) + dma_stream
        self.stream = stream
        self.stream_names = list(ENGINES) + [f"dma queue {int(q) % 65536} from {ENGINES[int(q) // 65536]}"
                                             for q in keys]

        # Active intervals and the time key (monotone along each stream) of every instruction.
        active = r.start.astype(np.int64).copy()
        active_end = r.end.astype(np.int64).copy()
        if nd:
            counts = np.diff(r.piece_ptr)[dma_k]
            has = counts > 0
            firsts = np.full(nd, 0, np.int64)
            if r.pieces:
                firsts[has] = np.minimum.reduceat(r.piece_start, r.piece_ptr[dma_k][has])
            active[dma_k[has]] = firsts[has]
            active_end[dma_k] = r.done[dma_k]
        self.active, self.active_end = active, active_end

        # Accesses: instructions with footprints; one clock column per stream that has any.
        fp_count = np.diff(r.fp_ptr)
        acc = np.flatnonzero(fp_count > 0)
        used = np.flatnonzero(np.bincount(stream[acc], minlength=len(self.stream_names)))
        col_of_stream = np.full(len(self.stream_names), -1, np.int64)
        col_of_stream[used] = np.arange(len(used))
        self.n_cols = len(used)
        n_nodes_base = n + nd

        # Semaphores: the (semaphore, instant) checkpoints of the updates.
        u_k = np.repeat(np.arange(n, dtype=np.int64), np.diff(r.signal_ptr))
        tmax = int(r.total_ticks) + 1
        if tmax >= 1 << 54:
            raise SimError(f"the run is too long ({r.total_ticks} ticks) to check for races")
        u_key = r.signal_sem.astype(np.int64) * tmax + r.done[u_k].astype(np.int64)
        gkey, u_group = np.unique(u_key, return_inverse=True)
        ng = len(gkey)
        chain = (gkey[1:] // tmax) == (gkey[:-1] // tmax)  # group g + 1 is the same semaphore's next
        # The checkpoint each wait that held because of updates acquires (see the module docstring):
        # the last group of its semaphore at or before its ready time (PRE if at it, else CP).
        e_w = r.edge_wait.astype(np.int64)
        want = r.edge_sem.astype(np.int64) * tmax + r.ready[e_w].astype(np.int64)
        below = np.searchsorted(gkey, want, side="right")
        g = np.maximum(below - 1, 0)
        ok = (below > 0) & (gkey[g] // tmax == r.edge_sem) if ng else np.zeros(len(e_w), bool)
        at = n_nodes_base + 2 * g + (gkey[g] != want) if ng else g
        self.n_nodes = n_nodes_base + 2 * ng
        src, dst = _edges(r.first, comp, dma_k, dma_stream, r.signal_ptr, u_group.reshape(-1).astype(np.int64),
                          r.end > r.start, is_dma, n_nodes_base, chain, r.edge_signal.astype(np.int64), e_w, at, ok)
        self.succ_ptr, self.succ, self.indeg = _csr(src, dst, self.n_nodes)
        self.node_col = np.full(self.n_nodes, -1, np.int64)
        self.node_pos = np.full(self.n_nodes, -1, np.int64)
        self.node_col[comp[acc]] = col_of_stream[stream[acc]]
        self.node_pos[comp[acc]] = acc

        # Accesses by column, in program order, with their time keys made monotone along the stream.
        acc_col = col_of_stream[stream[acc]]
        order = _counting_order(acc_col, self.n_cols)  # acc is in program order already
        acc = acc[order]
        acc_col = acc_col[order]
        self.acc_k = acc
        self.acc_node = comp[acc]
        key = active[acc]
        self.acc_ptr = np.searchsorted(acc_col, np.arange(self.n_cols + 1)).astype(np.int64)
        for c in range(self.n_cols):
            lo, hi = self.acc_ptr[c], self.acc_ptr[c + 1]
            key[lo:hi] = np.maximum.accumulate(key[lo:hi])
        self.acc_key = key

        # Footprint rows: addresses on one line, write flags; per column, its rows sorted by address.
        self.fp_ptr = np.asarray(r.fp_ptr, np.int64)
        mem, self.row_lo, self.row_hi = _addresses(r.fp_memory, r.fp_lo, r.fp_hi)
        self.row_mem = mem
        self.row_write = (r.fp_access & ACCESS_WRITE) != 0
        self.row_part = np.asarray(r.fp_partition, np.int64)
        self.row_parts = np.asarray(r.fp_partitions, np.int64)
        # Distinct footprints (address range and write flag) of each column: a tiled program touches
        # few, so which of them could conflict with another stream is quick to find. They are found
        # by hashing and sorted by (column, lo, hi, write); the rows, in order of column and program,
        # then sorted by their distinct footprint (a stable counting sort): 0.1 s where a lexsort of
        # every row took 1.5 s on tools/bench_timing.py --million.
        rows_per_acc = fp_count[acc]
        rows = _rows_of(acc, self.fp_ptr, int(rows_per_acc.sum()))
        row_col = np.repeat(acc_col, rows_per_acc)
        local, k_col, k_lo, k_hi, k_w = _distinct(rows, row_col, self.row_lo, self.row_hi, self.row_write)
        d_order = np.lexsort((k_w, k_hi, k_lo, k_col))
        rank = np.empty(len(k_col), np.int64)
        rank[d_order] = np.arange(len(k_col))
        self.col_rows_ptr = np.searchsorted(row_col, np.arange(self.n_cols + 1)).astype(np.int64)
        self.col_rows, self.col_rows_lo, self.dist, self.slot_of_row = _by_footprint(
            rows, rank[local], len(k_col), len(mem), self.col_rows_ptr, row_col, self.row_lo)
        self.d_lo, self.d_hi, self.d_write = k_lo[d_order], k_hi[d_order], k_w[d_order]
        self.d_ptr = np.searchsorted(k_col[d_order], np.arange(self.n_cols + 1)).astype(np.int64)

    def stream_name(self, k: int) -> str:
        return self.stream_names[int(self.stream[k])]


@numba.njit(cache=True)
def _addresses(fp_memory, fp_lo, fp_hi):
    """(memory, lo, hi) of each footprint row, lo and hi on one address line for the three
    memories: memory << _ADDR_SHIFT | the byte, clipped to 0.._BYTE_MAX."""
    m = fp_memory.shape[0]
    mem = np.empty(m, np.int64)
    lo = np.empty(m, np.int64)
    hi = np.empty(m, np.int64)
    for i in range(m):
        mem[i] = fp_memory[i]
        lo[i] = (mem[i] << _ADDR_SHIFT) | min(max(fp_lo[i], 0), _BYTE_MAX)
        hi[i] = (mem[i] << _ADDR_SHIFT) | min(max(fp_hi[i], 0), _BYTE_MAX)
    return mem, lo, hi


@numba.njit(cache=True)
def _rows_of(acc, fp_ptr, total):
    out = np.empty(total, np.int64)
    i = 0
    for k in acc:
        for row in range(fp_ptr[k], fp_ptr[k + 1]):
            out[i] = row
            i += 1
    return out


# --------------------------------------------------------------------------- numba kernels

@numba.njit(cache=True)
def _counting_order(keys, n_keys):
    """The stable order of `keys` (integers in 0..n_keys-1), by counting: O(len + n_keys)."""
    start = np.zeros(n_keys + 1, np.int64)
    for x in keys:
        start[x + 1] += 1
    for i in range(n_keys):
        start[i + 1] += start[i]
    order = np.empty(keys.shape[0], np.int64)
    for i in range(keys.shape[0]):
        order[start[keys[i]]] = i
        start[keys[i]] += 1
    return order


@numba.njit(cache=True)
def _edges(first, comp, dma_k, dma_stream, signal_ptr, u_group, busy, is_dma, pre0, chain, e_r, e_w, at, ok):
    """The happens-before edges (src, dst) of _Graph: program order, transfers, semaphore checkpoints
    (PRE of group g is node pre0 + 2 g, CP the next) and waits."""
    n = comp.shape[0]
    ng = chain.shape[0] + 1 if signal_ptr[n] > 0 else 0
    cap = n + 2 * dma_k.shape[0] + 2 * signal_ptr[n] + 2 * ng + 2 * e_w.shape[0]
    src = np.empty(cap, np.int64)
    dst = np.empty(cap, np.int64)
    m = 0
    for e in range(first.shape[0] - 1):  # program order of each engine
        for k in range(first[e], first[e + 1] - 1):
            src[m], dst[m] = k, k + 1
            m += 1
    last = np.full(dma_stream.max() + 1 if dma_k.shape[0] else 0, -1, np.int64)
    for i in range(dma_k.shape[0]):  # each transfer after its issue, and after the one before on its stream
        k = dma_k[i]
        src[m], dst[m] = k, comp[k]
        m += 1
        if last[dma_stream[i]] >= 0:
            src[m], dst[m] = comp[last[dma_stream[i]]], comp[k]
            m += 1
        last[dma_stream[i]] = k
    for k in range(n):  # every update into its checkpoint: CP, and PRE if applied before waits are checked
        for j in range(signal_ptr[k], signal_ptr[k + 1]):
            pre = pre0 + 2 * u_group[j]
            src[m], dst[m] = comp[k], pre + 1
            m += 1
            if is_dma[k] or busy[k]:
                src[m], dst[m] = comp[k], pre
                m += 1
    for g in range(ng):
        src[m], dst[m] = pre0 + 2 * g, pre0 + 2 * g + 1
        m += 1
        if g + 1 < ng and chain[g]:
            src[m], dst[m] = pre0 + 2 * g + 1, pre0 + 2 * g + 2
            m += 1
    for i in range(e_w.shape[0]):  # each wait after its releaser, and after the checkpoint it acquires
        src[m], dst[m] = comp[e_r[i]], e_w[i]
        m += 1
        if ok[i]:
            src[m], dst[m] = at[i], e_w[i]
            m += 1
    return src[:m], dst[:m]


@numba.njit(cache=True)
def _csr(src, dst, n_nodes):
    """(succ_ptr, succ, indeg) of the edges src -> dst."""
    succ_ptr = np.zeros(n_nodes + 1, np.int64)
    indeg = np.zeros(n_nodes, np.int64)
    for i in range(src.shape[0]):
        succ_ptr[src[i] + 1] += 1
        indeg[dst[i]] += 1
    for v in range(n_nodes):
        succ_ptr[v + 1] += succ_ptr[v]
    fill = succ_ptr[:-1].copy()
    succ = np.empty(src.shape[0], np.int64)
    for i in range(src.shape[0]):
        succ[fill[src[i]]] = dst[i]
        fill[src[i]] += 1
    return succ_ptr, succ, indeg


@numba.njit(cache=True)
def _distinct(rows, row_col, row_lo, row_hi, row_write):
    """The distinct (column, lo, hi, write) of footprint rows `rows` (row_col[i] is the column of
    rows[i]), by an open-addressing hash table: (local, col, lo, hi, write) with local[i] the
    distinct footprint of rows[i], numbered in order of first appearance."""
    m = rows.shape[0]
    local = np.empty(m, np.int64)
    k_col = np.empty(m, np.int64)
    k_lo = np.empty(m, np.int64)
    k_hi = np.empty(m, np.int64)
    k_w = np.empty(m, np.bool_)
    k_hash = np.empty(m, np.uint64)
    nd = 0
    size = 1024
    table = np.full(size, -1, np.int64)
    for i in range(m):
        row = rows[i]
        c, lo, hi, w = row_col[i], row_lo[row], row_hi[row], row_write[row]
        h = np.uint64(c) * np.uint64(0x9E3779B97F4A7C15) ^ np.uint64(lo)
        h = (h ^ (h >> np.uint64(31))) * np.uint64(0xBF58476D1CE4E5B9) ^ np.uint64(hi)
        h = (h ^ (h >> np.uint64(29))) * np.uint64(0x94D049BB133111EB) ^ np.uint64(w)
        h ^= h >> np.uint64(32)
        slot = np.int64(h & np.uint64(size - 1))
        while True:
            d = table[slot]
            if d < 0:
                table[slot] = nd
                k_col[nd], k_lo[nd], k_hi[nd], k_w[nd], k_hash[nd] = c, lo, hi, w, h
                local[i] = nd
                nd += 1
                if 2 * nd > size:  # keep the table at most half full
                    size *= 2
                    table = np.full(size, -1, np.int64)
                    for j in range(nd):
                        s2 = np.int64(k_hash[j] & np.uint64(size - 1))
                        while table[s2] >= 0:
                            s2 = (s2 + 1) & (size - 1)
                        table[s2] = j
                break
            if k_hash[d] == h and k_col[d] == c and k_lo[d] == lo and k_hi[d] == hi and k_w[d] == w:
                local[i] = d
                break
            slot = (slot + 1) & (size - 1)
    return local, k_col[:nd], k_lo[:nd], k_hi[:nd], k_w[:nd]


@numba.njit(cache=True)
def _by_footprint(rows, rank, n_dist, n_rows, col_ptr, row_col, row_lo):
    """Rows `rows` (every footprint row: each belongs to an access) sorted by the rank of their
    distinct footprint, stably (col_rows, and their row_lo); each row's rank (dist) and its place
    among its column's sorted rows (slot_of_row). A counting sort that visits the rows in their order
    and scatters only the sorted arrays: scattering dist and slot_of_row as well, in sorted order,
    took 0.13 s of cache misses at 2.9 M rows."""
    start = np.zeros(n_dist + 1, np.int64)
    for x in rank:
        start[x + 1] += 1
    for i in range(n_dist):
        start[i + 1] += start[i]
    col_rows = np.empty(rows.shape[0], np.int64)
    col_rows_lo = np.empty(rows.shape[0], np.int64)
    dist = np.empty(n_rows, np.int64)
    slot_of_row = np.empty(n_rows, np.int64)
    for i in range(rows.shape[0]):
        row = rows[i]
        at = start[rank[i]]
        start[rank[i]] += 1
        col_rows[at] = row
        col_rows_lo[at] = row_lo[row]
        dist[row] = rank[i]
        slot_of_row[row] = at - col_ptr[row_col[i]]
    return col_rows, col_rows_lo, dist, slot_of_row


@numba.njit(cache=True)
def _clocks(n_nodes, succ_ptr, succ, indeg, node_col, node_pos, n_cols):
    """Vector clocks in topological order (Kahn): clock[v, c] is the last position (instruction k) of
    column c's stream known complete before node v begins, -1 if none. Returns (clock, nodes done).
    int32 (an instruction position is below 2**31: the object of so many would be over 16 GB): the pass
    is bound by the memory traffic of this n_nodes x n_cols matrix, halved (0.13 -> 0.06 s at 10^6)."""
    clock = np.full((n_nodes, n_cols), -1, np.int32)
    deg = indeg.copy()
    queue = np.empty(n_nodes, np.int64)
    head = 0
    tail = 0
    for v in range(n_nodes):
        if deg[v] == 0:
            queue[tail] = v
            tail += 1
    while head < tail:
        v = queue[head]
        head += 1
        c = node_col[v]
        for i in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ[i]
            for j in range(n_cols):
                clock[w, j] = max(clock[w, j], clock[v, j])
            if c >= 0 and node_pos[v] > clock[w, c]:
                clock[w, c] = np.int32(node_pos[v])
            deg[w] -= 1
            if deg[w] == 0:
                queue[tail] = w
                tail += 1
    return clock, head


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
def _sweep(clock, acc_ptr, acc_k, acc_node, acc_key, fp_ptr, row_lo, row_hi, row_write, row_part, row_parts,
           row_mem, col_rows_ptr, col_rows, col_rows_lo, slot_of_row, dist, d_lo, d_hi, d_write, d_ptr,
           linear_window, hits_per_access, max_candidates):
    """Candidate races: (a_k, a_row, b_k, b_row) with a on another stream than b, before b in time
    order, neither ordered before the other, their spans overlapping, at least one writing.
    Returns (the four arrays, truncated)."""
    n_cols = acc_ptr.shape[0] - 1
    out = np.empty((max_candidates, 4), np.int64)  # (a_k, a_row, b_k, b_row); pages are touched as filled
    n_out = 0
    truncated = False
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
    # rel[d]: for the pair of columns at hand, distinct footprint d meets one of the other column's
    # that it could conflict with (spans only). Rows of the others never enter a tree or ask one.
    rel = np.zeros(n_dist, np.bool_)
    biggest = 1
    for c in range(n_cols):
        biggest = max(biggest, col_rows_ptr[c + 1] - col_rows_ptr[c])
    size = 1
    while size < biggest:
        size *= 2
    all_tree = np.full(2 * size, -1, np.int64)
    write_tree = np.full(2 * size, -1, np.int64)
    stack_node = np.empty(128, np.int64)  # depth-first over the tree: at most 2 per level pending
    stack_lo = np.empty(128, np.int64)
    stack_len = np.empty(128, np.int64)
    for t in range(n_cols):
        r0 = col_rows_ptr[t]
        m_t = col_rows_ptr[t + 1] - r0
        # row -> its instruction, for the rows of column t
        row_k = np.empty(m_t, np.int64)
        node_of = np.empty(m_t, np.int64)
        for i in range(acc_ptr[t], acc_ptr[t + 1]):
            k = acc_k[i]
            for row in range(fp_ptr[k], fp_ptr[k + 1]):
                row_k[slot_of_row[row]] = k
                node_of[slot_of_row[row]] = acc_node[i]
        for s in range(n_cols):
            if s == t:
                continue
            any_t = False
            for i in range(d_ptr[t], d_ptr[t + 1]):
                pm = pm_all if d_write[i] else pm_w
                rel[i] = _meets(d_lo, pm, d_ptr[s], d_ptr[s + 1] - d_ptr[s], d_lo[i], d_hi[i])
                any_t = any_t or rel[i]
            any_s = False
            for i in range(d_ptr[s], d_ptr[s + 1]):
                pm = pm_all if d_write[i] else pm_w
                rel[i] = _meets(d_lo, pm, d_ptr[t], d_ptr[t + 1] - d_ptr[t], d_lo[i], d_hi[i])
                any_s = any_s or rel[i]
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
                vb = acc_node[j]
                key_b = acc_key[j]
                while hi_i < t_end and (acc_key[hi_i] < key_b or (acc_key[hi_i] == key_b and t < s)):
                    hi_i += 1
                while lo_i < t_end and acc_k[lo_i] <= clock[vb, t]:
                    if lo_i < ins_i:
                        k = acc_k[lo_i]
                        for row in range(fp_ptr[k], fp_ptr[k + 1]):
                            if rel[dist[row]]:
                                _tree_set(all_tree, size, slot_of_row[row], -1)
                                if row_write[row]:
                                    _tree_set(write_tree, size, slot_of_row[row], -1)
                    lo_i += 1
                ins_i = max(ins_i, lo_i)
                if lo_i >= hi_i:
                    continue
                if hi_i - lo_i <= linear_window and ins_i <= lo_i:
                    # A small window (the usual case): look at its accesses one by one.
                    for rb in range(fp_ptr[kb], fp_ptr[kb + 1]):
                        if not rel[dist[rb]]:
                            continue
                        found = 0
                        for i in range(lo_i, hi_i):
                            k = acc_k[i]
                            for ra in range(fp_ptr[k], fp_ptr[k + 1]):
                                if (rel[dist[ra]] and (row_write[ra] or row_write[rb]) and row_lo[ra] < row_hi[rb]
                                        and row_lo[rb] < row_hi[ra] and found < hits_per_access
                                        and _candidate(ra, rb, kb, acc_node[i], s, clock, row_mem, row_part,
                                                       row_parts)):
                                    if n_out == max_candidates:
                                        return out[:n_out], True
                                    out[n_out, 0] = k
                                    out[n_out, 1] = ra
                                    out[n_out, 2] = kb
                                    out[n_out, 3] = rb
                                    n_out += 1
                                    found += 1
                        if found >= hits_per_access:
                            truncated = True
                    continue
                # A large window: the trees, brought up to date.
                while ins_i < hi_i:
                    k = acc_k[ins_i]
                    for row in range(fp_ptr[k], fp_ptr[k + 1]):
                        if rel[dist[row]]:
                            _tree_set(all_tree, size, slot_of_row[row], row_hi[row])
                            if row_write[row]:
                                _tree_set(write_tree, size, slot_of_row[row], row_hi[row])
                    ins_i += 1
                for rb in range(fp_ptr[kb], fp_ptr[kb + 1]):
                    tree = all_tree if row_write[rb] else write_tree
                    if not rel[dist[rb]] or tree[1] <= row_lo[rb]:
                        continue
                    # slots [0, p) begin below b's end; find those that end above b's start
                    a = 0
                    z = m_t
                    while a < z:
                        mid = (a + z) // 2
                        if col_rows_lo[r0 + mid] < row_hi[rb]:
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
                        if tree[node] <= row_lo[rb] or first_slot >= p:
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
                        if not _candidate(ra, rb, kb, node_of[first_slot], s, clock, row_mem, row_part, row_parts):
                            continue
                        if n_out == max_candidates:
                            return out[:n_out], True
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
    return out[:n_out], truncated


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
def _candidate(ra, rb, kb, node_a, s, clock, row_mem, row_part, row_parts):
    """Rows ra (of instruction a, clock node node_a) and rb (of instruction kb, on column s) whose spans
    meet: do their partitions meet too (always in HBM), and is b not ordered before a?"""
    if row_mem[ra] != 3 and (row_part[ra] >= row_part[rb] + row_parts[rb]
                             or row_part[rb] >= row_part[ra] + row_parts[ra]):
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
        body = result.body
        self.rep = {}  # body -> (first instruction, its access patterns by footprint row)
        if len(body):
            bodies, firsts = np.unique(body, return_index=True)
            self.rep_k = dict(zip(bodies.tolist(), firsts.tolist()))
        else:
            self.rep_k = {}

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
