"""Automatic synchronisation: find the hazards between streams and insert semaphore waits and signals.

Streams. Each compute engine runs its instructions in order; each DMA queue runs in order the
transfers that one engine puts on it (a queue fed by two engines is two streams). A dma_copy is
triggered by an engine (its waits are waited there) and then moves data on its queue. Two
instructions on the same stream need nothing (the stream keeps its order); two on different streams
that touch overlapping bytes, at least one writing (read-after-write, write-after-read,
write-after-write), need the later one to wait for the earlier one's completion.

Minimal edges. Each instruction carries a vector clock: for every stream, the last instruction of
that stream it is already known to follow (through its own stream's order and the waits before it).
A hazard with an instruction the clock already covers needs no edge, and only the latest hazard on
each other stream gets one (the latest producers are waited for first, and a producer that one of
them already covers is dropped), so no edge is implied by the others and independent work is never
serialised.

Semaphores. Each stream that some instruction waits for gets one semaphore that counts its
completions: the instructions waited for signal `s+=1` in stream order, and a waiter waits for
`s>=n`, n being its producer's rank among them. Semaphores the program names or uses are avoided.
When an instruction would wait on more semaphores than the encoding holds, the extra waits go on
sem_wait instructions placed just before it on its engine.

Exactness. Byte footprints are compared exactly: an access pattern is a set of equal-length runs
of bytes (its innermost contiguous dimensions folded into the run), per partition range on chip.
`byte_runs`, `overlap` and `hazard` state this on AccessPattern objects (for `ncsim.runtime.races`
and tests); the pass itself runs on flat arrays.

Speed. The pass (`synchronise_arrays`) runs in numba over flat arrays, which a front end can build
without Instruction objects. The latest hazard on another stream past what an instruction knows is
found without walking back through that stream: each (stream, memory, read or write) has a static
tree over its accesses in program order whose nodes bound the accesses below them (up to SPANS byte
ranges and a partition mask); the search starts at the stream's last access and moves left a subtree
at a time, entering only subtrees whose bounds meet the access, and confirms a candidate exactly.
The exact test materialises nothing: it walks the runs of the pattern with fewer runs, entering only
sub-patterns whose span meets a run of the other, found by arithmetic on its steps. The walk this
replaced took O(n^2) when two streams never wait for each other (1k instructions 0.48 s, 4k 11.7 s,
8k 139 s). Measured by tools/bench_sync.py on 2**20 instructions (busy 2-core machine): 0.27 s for
two engines that never wait for each other (4096 took the walk 4.8 s), 0.26 s with their tiles
interleaved in one pool, and 0.54 s for a load -> matmul -> copy -> store pipeline with 1.5 million
waits (0.75, 0.75 and 1.45 s before the per-candidate functions ran without reference counting); the
time per instruction stays within x2 from 1k to 1M (it is O(n log n) at worst while the node bounds
separate the streams' footprints, and O(n) per search when they cannot). The assembler gives the
accesses with their shapes stored once (`synchronise_rows`): 21 bytes per access row, and the pass
adds about 20 per row (the rows' order and instruction, 12, and its search trees) and
4 x (streams + 1) per instruction.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import NamedTuple

import numba
import numpy as np

from ncsim import isa
from ncsim.arrays import distinct
from ncsim.asm.fields import SemOp
from ncsim.asm.instruction import Instruction
from ncsim.errors import AsmError
from ncsim.memory.access import AccessPattern, Memory


@dataclass(frozen=True)
class Access:
    ap: AccessPattern
    write: bool
    operand: str


@dataclass
class Edge:
    producer: int  # instruction index (program order)
    consumer: int
    kind: str  # RAW, WAR, WAW
    producer_operand: str
    consumer_operand: str
    memory: str
    wait: SemOp | None = None


@dataclass
class SyncResult:
    instructions: list[Instruction]
    origin: list[int]  # for each output instruction, the index of the input instruction it came from
    edges: list[Edge] = field(default_factory=list)
    semaphores: dict[str, int] = field(default_factory=dict)  # stream -> semaphore


def stream_of(instr: Instruction) -> str:
    """The stream that carries out the instruction's work. A DMA queue keeps the order of what one
    engine puts on it; transfers that two engines put on the same queue are ordered only by when
    they are triggered, so each (queue, issuing engine) is a stream of its own."""
    if instr.mnemonic == "dma_copy":
        return f"dma queue {instr.operands['queue']} from {instr.engine}"
    return instr.engine


def accesses(instr: Instruction) -> list[Access]:
    out = []
    for operand in instr.spec.operands:
        value = instr.operands[operand.name]
        if not isinstance(value, AccessPattern):
            continue
        if operand.role in ("out", "inout"):
            out.append(Access(value, True, operand.name))
        if operand.role in ("in", "inout") or (operand.name == "dst" and _accumulates(instr)):
            out.append(Access(value, False, operand.name))
    return out


def _accumulates(instr: Instruction) -> bool:
    """Whether the instruction reads dst too: a matmul's accumulate, a DMA's read-modify-write."""
    return bool(instr.operands.get("accumulate")) or instr.operands.get("dst_rmw_op") is not None


@lru_cache(maxsize=65536)
def byte_runs(ap: AccessPattern) -> tuple[np.ndarray, int]:
    """(sorted run starts, run length in bytes) covering exactly the bytes the pattern touches in one
    partition (on chip) or in HBM."""
    size = ap.dtype.itemsize
    dims = list(ap.dims)
    run = size
    while dims and dims[-1][0] * size == run:
        run *= dims[-1][1]
        dims.pop()
    starts = np.full((), ap.offset, dtype=np.int64)
    for step, count in dims:
        starts = starts[..., None] + np.arange(count, dtype=np.int64) * (step * size)
    return distinct(starts.ravel()), run


def overlap(a: AccessPattern, b: AccessPattern) -> bool:
    if a.memory != b.memory:
        return False
    if a.on_chip and (a.partition >= b.partition + b.partitions or b.partition >= a.partition + a.partitions):
        return False
    (alo, ahi), (blo, bhi) = a.byte_span(), b.byte_span()
    if alo >= bhi or blo >= ahi:
        return False
    sa, la = byte_runs(a)
    sb, lb = byte_runs(b)
    idx = np.searchsorted(sb, sa + la, side="left")
    ok = idx > 0
    return bool(np.any(sb[idx[ok] - 1] + lb > sa[ok]))


def hazard(earlier: list[Access], later: list[Access]) -> tuple[str, Access, Access] | None:
    """The first hazard between two instructions' accesses, RAW reported before WAR before WAW."""
    for kind, ew, lw in (("RAW", True, False), ("WAR", False, True), ("WAW", True, True)):
        for e in earlier:
            if e.write != ew:
                continue
            for lt in later:
                if lt.write == lw and overlap(e.ap, lt.ap):
                    return kind, e, lt
    return None


def used_semaphores(instrs: list[Instruction]) -> set[int]:
    used = set()
    for instr in instrs:
        for op in instr.waits + instr.signals:
            used.add(op.sem)
        for v in instr.operands.values():
            if isinstance(v, SemOp):
                used.add(v.sem)
    return used


def synchronise(instrs: list[Instruction], num_semaphores: int, reserved: set[int] = frozenset()) -> SyncResult:
    streams = [stream_of(i) for i in instrs]
    edges = find_edges(streams, [i.engine for i in instrs], [accesses(i) for i in instrs])
    return _assign_semaphores(instrs, streams, edges, num_semaphores, reserved)


def find_edges(streams: list[str], engines: list[str], foot: list[list[Access]]) -> list[Edge]:
    """The minimal edges (without semaphores) of instructions given by their streams, issuing engines and
    accesses: `synchronise_arrays` on them, streams and engines numbered in sorted order of name."""
    names = sorted(set(streams) | set(engines))
    sid = {s: k for k, s in enumerate(names)}
    rows = [a for f in foot for a in f]
    acc_ptr = np.zeros(len(foot) + 1, dtype=np.int64)
    np.cumsum([len(f) for f in foot], out=acc_ptr[1:])
    dims = np.zeros((len(rows), MAX_DIMS, 2), dtype=np.int64)
    for r, a in enumerate(rows):
        dims[r, :len(a.ap.dims)] = a.ap.dims
    found = synchronise_arrays(
        np.array([sid[s] for s in streams], dtype=np.int64),
        np.array([sid[e] for e in engines], dtype=np.int64),
        acc_ptr,
        np.array([a.ap.memory for a in rows], dtype=np.int64),
        np.array([a.ap.partition for a in rows], dtype=np.int64),
        np.array([a.ap.partitions for a in rows], dtype=np.int64),
        np.array([a.ap.offset for a in rows], dtype=np.int64),
        np.array([a.ap.dtype.itemsize for a in rows], dtype=np.int64),
        np.array([len(a.ap.dims) for a in rows], dtype=np.int64),
        dims,
        np.array([a.write for a in rows], dtype=np.bool_))
    return [Edge(int(p), int(c), KINDS[k], rows[pr].operand, rows[cr].operand, rows[pr].ap.memory.label)
            for p, c, k, pr, cr in zip(found.producer, found.consumer, found.kind, found.producer_row,
                                       found.consumer_row)]


def _assign_semaphores(instrs: list[Instruction], streams: list[str], edges: list[Edge], num_semaphores: int,
                       reserved: set[int]) -> SyncResult:
    producers = sorted({e.producer for e in edges})
    stream_names = sorted({streams[p] for p in producers}, key=lambda s: (s.startswith("dma"), s))
    free = [s for s in range(num_semaphores) if s not in reserved]
    if len(stream_names) > len(free):
        raise AsmError(f"automatic synchronisation needs {len(stream_names)} semaphores, {len(free)} are free")
    sem_of = dict(zip(stream_names, free))
    rank: dict[int, int] = {}
    counts = {s: 0 for s in stream_names}
    for p in producers:
        counts[streams[p]] += 1
        rank[p] = counts[streams[p]]
    waits: dict[int, list[SemOp]] = {}
    for e in edges:
        e.wait = SemOp(sem_of[streams[e.producer]], ">=", rank[e.producer])
        waits.setdefault(e.consumer, []).append(e.wait)
    out: list[Instruction] = []
    origin: list[int] = []
    limit = isa.WAITS.max_len
    sem_wait = isa.BY_MNEMONIC["sem_wait"]
    for i, instr in enumerate(instrs):
        new_waits = list(instr.waits) + waits.get(i, [])
        extra, new_waits = new_waits[:-limit] if len(new_waits) > limit else [], new_waits[-limit:]
        for w in extra:
            out.append(Instruction(sem_wait, instr.engine, {"cond": w}, loc=instr.loc))
            origin.append(i)
        signals = list(instr.signals)
        if i in rank:
            signals.append(SemOp(sem_of[streams[i]], "+=", 1))
        out.append(replace(instr, waits=tuple(new_waits), signals=tuple(signals)))
        origin.append(i)
    return SyncResult(out, origin, edges, sem_of)


def describe_edges(result: SyncResult, instrs: list[Instruction], where: list[str]) -> str:
    """One line per inserted wait: who waits for whom, the hazard, and the semaphore."""
    lines = [f"automatic synchronisation: {len(result.edges)} waits on {len(result.semaphores)} semaphores"
             + ("" if not result.semaphores else " (" + ", ".join(f"s{s} counts {name}" for name, s
                                                                  in result.semaphores.items()) + ")")]
    for e in result.edges:
        p, c = instrs[e.producer], instrs[e.consumer]
        lines.append(f"  {where[e.consumer]} {c.mnemonic} ({stream_of(c)}) waits {e.wait} for"
                     f" {where[e.producer]} {p.mnemonic} ({stream_of(p)}): {e.kind} on {e.memory}"
                     f" ({e.producer_operand} -> {e.consumer_operand})")
    return "\n".join(lines)


# --------------------------------------------------------------------------- the array core

KINDS = ("RAW", "WAR", "WAW")  # EdgeArrays.kind indexes this
MAX_DIMS = 5  # dimensions of an access pattern (HBM's limit; on chip has at most 4)


class EdgeArrays(NamedTuple):
    """The minimal edges, one entry each, in the order `synchronise` lists them (by consumer, then
    latest producer first)."""

    producer: np.ndarray  # int32 instruction index
    consumer: np.ndarray  # int32 instruction index
    kind: np.ndarray  # int8: 0 RAW, 1 WAR, 2 WAW (KINDS)
    producer_row: np.ndarray  # int32 access row of the producer's side of the hazard
    consumer_row: np.ndarray  # int32 access row of the consumer's side


def synchronise_arrays(stream: np.ndarray, engine: np.ndarray, acc_ptr: np.ndarray, acc_memory: np.ndarray,
                       acc_partition: np.ndarray, acc_partitions: np.ndarray, acc_offset: np.ndarray,
                       acc_itemsize: np.ndarray, acc_ndims: np.ndarray, acc_dims: np.ndarray,
                       acc_write: np.ndarray) -> EdgeArrays:
    """The minimal edges of a program given as flat arrays: what `synchronise` finds for Instruction
    objects (it calls this), for a front end that has no Instruction objects.

    Instructions are numbered 0..n-1 in program order. Streams and engines share one id space
    0..ids-1 (ids = 1 + the largest id given; unused ids cost only a little time):
      stream       int [n]: the stream that carries out instruction i's work (`stream_of`): for an
                   instruction its engine runs, that engine's id; for a dma_copy, the id of its (queue,
                   issuing engine) pair, an id no engine has.
      engine       int [n]: the engine that issues instruction i (and waits its waits).
    Accesses, one row each, grouped by instruction (CSR):
      acc_ptr      int [n+1]: instruction i's rows are acc_ptr[i] .. acc_ptr[i+1]-1; acc_ptr[0] = 0,
                   acc_ptr[n] = rows. An instruction may have no rows.
                   Within an instruction, rows come in the order `accesses` gives them (operands in
                   table order; for an operand both written and read, the write first): when two
                   instructions conflict in several ways, the edge names the first RAW pair, else WAR,
                   else WAW, taking the producer's rows in order, then the consumer's.
      acc_memory   int [rows]: Memory code: SBUF (1), PSUM (2) or HBM (3).
      acc_partition, acc_partitions  int [rows]: on chip, the first partition and the number of
                   partitions (1 <= partitions, partition + partitions <= 128); in HBM, 0 and 0.
      acc_offset   int [rows]: byte offset (within each partition on chip; the address in HBM), >= 0.
      acc_itemsize int [rows]: bytes per element, >= 1.
      acc_ndims    int [rows]: dimensions used, 1..5.
      acc_dims     int [rows, 5, 2]: (step, count) in elements, outermost first; entries past
                   acc_ndims are ignored. Every count >= 1 (steps may be negative or 0); the pattern
                   reaches no byte below 0, and every byte address it reaches fits in int64.
      acc_write    bool [rows]: the row writes (else it reads).
    These are the rules every `AccessPattern` of an instruction passes (`fields.APKind.check`); they
    are not checked again. Integer arrays are taken as int64 (converted if they are not).

    Returns the edges (EdgeArrays): a row index stands for the operand (the caller knows which
    operand each row came from) and the memory (acc_memory of the row). This form stores every
    row's dimensions; `synchronise_rows` takes them once per distinct shape (what the assembler
    gives), and this function calls it with one shape per row."""
    (stream, engine, acc_ptr, acc_memory, acc_partition, acc_partitions, acc_offset, acc_itemsize, acc_ndims,
     acc_dims) = (np.ascontiguousarray(x, dtype=np.int64) for x in (
        stream, engine, acc_ptr, acc_memory, acc_partition, acc_partitions, acc_offset, acc_itemsize, acc_ndims,
        acc_dims))
    rows = len(acc_memory)
    if acc_dims.shape != (rows, MAX_DIMS, 2):
        raise ValueError(f"acc_dims has shape {acc_dims.shape}, not ({rows}, {MAX_DIMS}, 2)")
    return synchronise_rows(stream, engine, acc_ptr, acc_offset, acc_partition, acc_partition + acc_partitions,
                            np.arange(rows, dtype=np.int32), acc_write, acc_memory, acc_itemsize, acc_ndims, acc_dims)


def _narrow(a: np.ndarray, narrow: type, wide: type) -> np.ndarray:
    """`a` contiguous, as it is when its dtype is `narrow` or `wide`, else converted to `wide`: the
    assembler passes narrow columns where the values allow (`ncsim.asm.build.access_rows`), and the
    kernels are compiled for both."""
    a = np.ascontiguousarray(a)
    return a if a.dtype in (np.dtype(narrow), np.dtype(wide)) else a.astype(wide)


def synchronise_rows(stream: np.ndarray, engine: np.ndarray, acc_ptr: np.ndarray, row_offset: np.ndarray,
                     row_first: np.ndarray, row_end: np.ndarray, row_shape: np.ndarray, row_write: np.ndarray,
                     shape_memory: np.ndarray, shape_itemsize: np.ndarray, shape_ndims: np.ndarray,
                     shape_dims: np.ndarray, hazards: bool = True) -> EdgeArrays:
    """`synchronise_arrays` with what an access shares with others stored once: row r is at byte
    `row_offset[r]` (int64), on partitions `row_first[r]` .. `row_end[r]` - 1 (int32; 0 and 0 in HBM),
    writes if `row_write[r]`, and has shape `row_shape[r]` (int32), an index into the shape table
    (shape_memory, shape_itemsize, shape_ndims, shape_dims: as acc_memory .. acc_dims of
    `synchronise_arrays`, one entry per shape). Rows that differ only in offset and partitions (the
    iterations of an unrolled loop) share a shape, so a row costs 17 bytes here.

    Besides the inputs it takes about 20 bytes per row (the rows' order and instruction, 12, and the
    search trees) and 4 x (ids + 1) bytes per instruction.

    hazards=False leaves the edges' kind and rows out (-1: `edge_hazards` finds them later, for a
    report), which spares about a fifth of the pass."""
    stream, engine, acc_ptr, row_write, acc, ids = _prepared(
        stream, engine, acc_ptr, row_offset, row_first, row_end, row_shape, row_write, shape_memory, shape_itemsize,
        shape_ndims, shape_dims)
    return EdgeArrays(*_sweep(stream, engine, ids, acc_ptr, row_write, *acc, *_index(stream, acc_ptr, row_write, *acc, ids),
                              hazards=hazards))


def edge_hazards(producer: np.ndarray, consumer: np.ndarray, stream: np.ndarray, engine: np.ndarray,
                 acc_ptr: np.ndarray, row_offset: np.ndarray, row_first: np.ndarray, row_end: np.ndarray,
                 row_shape: np.ndarray, row_write: np.ndarray, shape_memory: np.ndarray, shape_itemsize: np.ndarray,
                 shape_ndims: np.ndarray, shape_dims: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kind, producer row, consumer row) of edges that `synchronise_rows(..., hazards=False)` found,
    over the same rows: what it gives with hazards=True."""
    _, _, acc_ptr, row_write, acc, _ = _prepared(
        stream, engine, acc_ptr, row_offset, row_first, row_end, row_shape, row_write, shape_memory, shape_itemsize,
        shape_ndims, shape_dims)
    out = np.empty((len(producer), 3), np.int32)
    _hazards(np.asarray(producer, np.int64), np.asarray(consumer, np.int64), *acc, row_write, acc_ptr, out,
             np.empty((2, 5, MAX_DIMS + 1), np.int64))
    return out[:, 0].astype(np.int8), out[:, 1].copy(), out[:, 2].copy()


def _prepared(stream, engine, acc_ptr, row_offset, row_first, row_end, row_shape, row_write, shape_memory,
              shape_itemsize, shape_ndims, shape_dims):
    """synchronise_rows' arguments checked and in the types its kernels take: (stream, engine, acc_ptr,
    row_write, (offset, first, end, shape, shape table, dims), ids)."""
    stream = _narrow(stream, np.int8, np.int32)
    engine = _narrow(engine, np.int8, np.int32)
    acc_ptr = _narrow(acc_ptr, np.int32, np.int64)
    row_offset = np.ascontiguousarray(row_offset, dtype=np.int64)
    row_first = _narrow(row_first, np.int16, np.int32)
    row_end = _narrow(row_end, np.int16, np.int32)
    row_shape = _narrow(row_shape, np.int16, np.int32)
    row_write = np.ascontiguousarray(row_write, dtype=np.bool_)
    n = len(stream)
    rows = len(row_offset)
    if len(engine) != n or len(acc_ptr) != n + 1 or acc_ptr[0] != 0 or acc_ptr[-1] != rows:
        raise ValueError("stream, engine and acc_ptr do not describe the same instructions and rows")
    if not len(row_first) == len(row_end) == len(row_shape) == len(row_write) == rows:
        raise ValueError("the row columns differ in length")
    shape_dims = np.ascontiguousarray(shape_dims, dtype=np.int64)
    shapes = len(shape_memory)
    if shape_dims.shape != (shapes, MAX_DIMS, 2):
        raise ValueError(f"shape_dims has shape {shape_dims.shape}, not ({shapes}, {MAX_DIMS}, 2)")
    ids = int(max(stream.max(initial=-1), engine.max(initial=-1))) + 1
    table = _shapes(*(np.ascontiguousarray(x, dtype=np.int64) for x in (shape_memory, shape_itemsize, shape_ndims)),
                    shape_dims)
    return stream, engine, acc_ptr, row_write, (row_offset, row_first, row_end, row_shape, table, shape_dims), ids


# Columns of the shape table (int64, one row per shape): memory code, item size, the byte span
# [LO, HI) relative to the offset (as AccessPattern.byte_span), and the byte runs as `byte_runs`
# folds them: the innermost dimensions whose step continues the run are folded into RUN bytes, the
# FOLD outer ones remain (a prefix of the dimensions), RUNS runs in all (saturated at 2**62).
S_MEM, S_SIZE, S_LO, S_HI, S_RUN, S_FOLD, S_RUNS = range(7)
# The accesses travel through the kernels as six arrays (off, first_p, end_p, shape: per row; table,
# dims: per shape) given as separate arguments. The functions the sweep calls for every candidate
# allocate nothing and are compiled without numba's reference counting (_nrt=False): with it, each
# call paid an atomic increment and decrement per array it received (perf: 40% of the sweep in
# NRT_incref/NRT_decref; the sweep on tools/bench_pipeline.py's 10^5 program 0.10 s -> 0.027 s).
# Partition masks are int64 bit patterns rather than uint64: numba turns uint64 mixed with an int64
# into float64, and only `&` and `!= 0` are done on them.
CLASSES = 8  # per stream, one search tree per (memory code 0..3, write)
# Rows per tree leaf (a leaf's rows are tested one by one) and byte ranges per node bound. BLOCK 4..64
# and SPANS 4 or 8 time alike on tools/bench_sync.py (within its +-20% noise); SPANS must be at least
# the number of separate footprints a stream alternates between for its bounds to leave out another
# stream's footprints lying between them (its `interleaved` program: 4 tiles each). A node takes 152
# bytes, and there are up to 4 nodes per leaf (2 per leaf, the leaves rounded up to a power of two):
# at BLOCK = 16 the trees took 30 bytes per row on tools/bench_pipeline.py's 10^6 program, at 64 they
# take 7.5 (the pass's peak 176 -> 116 bytes per instruction; its time the same or less, side by
# side on that program and on tools/bench_sync.py's three).
BLOCK = 64
SPANS = 8
STACK = 128  # pending subtrees of one search: one per level at most, and a tree has < 64 levels
_SBUF, _PSUM = int(Memory.SBUF), int(Memory.PSUM)


@numba.njit(cache=True, _nrt=False)
def _mask(lo, hi, base):
    """Bits lo..hi (inclusive partitions) that fall in the 64-partition word starting at `base`."""
    a = max(lo, base)
    b = min(hi, base + 63)
    if a > b:
        return 0
    if b - a == 63:
        return -1
    return ((1 << (b - a + 1)) - 1) << (a - base)


@numba.njit(cache=True, _nrt=False)
def _masks(off, first_p, end_p, shape, table, dims, r):
    """Row r's partitions as a 128-bit mask (M0, M1): any partition past 127 counts as 127; all ones
    in HBM, which has no partitions."""
    memory = table[shape[r], S_MEM]
    if memory == _SBUF or memory == _PSUM:
        first = min(np.int64(first_p[r]), 127)
        last = min(np.int64(end_p[r]) - 1, 127)
        return _mask(first, last, 0), _mask(first, last, 64)
    return np.int64(-1), np.int64(-1)


@numba.njit(cache=True)
def _shapes(memory, itemsize, ndims, dims):
    """The shape table (S_* columns) of the shapes given as `synchronise_arrays` gives rows."""
    count = memory.shape[0]
    table = np.empty((count, 7), np.int64)
    for s in range(count):
        size = itemsize[s]
        nd = ndims[s]
        lo = 0
        hi = 0
        for d in range(nd):
            reach = dims[s, d, 0] * (dims[s, d, 1] - 1)
            if reach < 0:
                lo += reach
            else:
                hi += reach
        run = size
        fold = nd
        while fold > 0 and dims[s, fold - 1, 0] * size == run:
            run *= dims[s, fold - 1, 1]
            fold -= 1
        runs = 1
        for d in range(fold):
            c = dims[s, d, 1]
            runs = (1 << 62) if runs > (1 << 62) // c else runs * c
        table[s, S_MEM] = memory[s]
        table[s, S_SIZE] = size
        table[s, S_LO] = lo * size
        table[s, S_HI] = hi * size + size
        table[s, S_RUN] = run
        table[s, S_FOLD] = fold
        table[s, S_RUNS] = runs
    return table


@numba.njit(cache=True, _nrt=False)
def _range(base, step, count, sub_lo, sub_hi, x, y):
    """The indices i in [0, count) whose sub-pattern, spanning [base + i*step + sub_lo, base + i*step +
    sub_hi), may meet the byte range [x, y) (the run test's sa < y and sa + la > x): (first, last)."""
    if step > 0:
        first = (x - base - sub_hi) // step + 1
        last = (y - base - sub_lo - 1) // step
    elif step < 0:
        first = (base + sub_lo - y) // -step + 1
        last = (base + sub_hi - x - 1) // -step
    elif base + sub_lo < y and base + sub_hi > x:
        first, last = 0, 0  # every index gives the same sub-pattern: one stands for all
    else:
        first, last = 0, -1
    return max(first, 0), min(last, count - 1)


@numba.njit(cache=True, _nrt=False)
def _sub_spans(off, first_p, end_p, shape, table, dims, r, it):
    """it[3, d], it[4, d]: span [lo, hi) of row r's sub-pattern of folded dimensions d.. (relative to
    its first byte), for d = 0..FOLD."""
    s = shape[r]
    fold = table[s, S_FOLD]
    size = table[s, S_SIZE]
    it[3, fold] = 0
    it[4, fold] = table[s, S_RUN]
    for d in range(fold - 1, -1, -1):
        reach = dims[s, d, 0] * size * (dims[s, d, 1] - 1)
        it[3, d] = it[3, d + 1] + min(reach, 0)
        it[4, d] = it[4, d + 1] + max(reach, 0)


@numba.njit(cache=True, _nrt=False)
def _hits(off, first_p, end_p, shape, table, dims, r, x, y, it):
    """Does a byte run of row r meet [x, y)? `it` holds r's sub-spans (_sub_spans); rows 0..2 are the
    search's odometer (index, last index, base byte per level). Only sub-patterns whose span meets
    [x, y) are entered, and at the innermost level that test is exact."""
    s = shape[r]
    fold = table[s, S_FOLD]
    o = off[r]
    if fold == 0:
        return o < y and o + table[s, S_RUN] > x
    size = table[s, S_SIZE]
    d = 0
    it[2, 0] = o
    it[0, 0], it[1, 0] = _range(o, dims[s, 0, 0] * size, dims[s, 0, 1], it[3, 1], it[4, 1], x, y)
    while True:
        if it[0, d] > it[1, d]:
            if d == 0:
                return False
            d -= 1
            it[0, d] += 1
            continue
        if d == fold - 1:
            return True
        base = it[2, d] + it[0, d] * dims[s, d, 0] * size
        d += 1
        it[2, d] = base
        it[0, d], it[1, d] = _range(base, dims[s, d, 0] * size, dims[s, d, 1], it[3, d + 1], it[4, d + 1], x, y)


@numba.njit(cache=True, _nrt=False)
def _runs_meet(off, first_p, end_p, shape, table, dims, a, b, scratch):
    """Does a byte run of row a meet one of row b? a's runs are walked, each sub-pattern of a entered
    only if its span meets b's span and a run of b (_hits), so neither side is materialised."""
    ia = scratch[0]
    ib = scratch[1]
    _sub_spans(off, first_p, end_p, shape, table, dims, b, ib)
    sa = shape[a]
    sb = shape[b]
    oa = off[a]
    fold = table[sa, S_FOLD]
    if fold == 0:
        return _hits(off, first_p, end_p, shape, table, dims, b, oa, oa + table[sa, S_RUN], ib)
    _sub_spans(off, first_p, end_p, shape, table, dims, a, ia)
    blo = off[b] + table[sb, S_LO]
    bhi = off[b] + table[sb, S_HI]
    size = table[sa, S_SIZE]
    d = 0
    ia[2, 0] = oa
    ia[0, 0], ia[1, 0] = _range(oa, dims[sa, 0, 0] * size, dims[sa, 0, 1], ia[3, 1], ia[4, 1], blo, bhi)
    while True:
        if ia[0, d] > ia[1, d]:
            if d == 0:
                return False
            d -= 1
            ia[0, d] += 1
            continue
        base = ia[2, d] + ia[0, d] * dims[sa, d, 0] * size
        if not _hits(off, first_p, end_p, shape, table, dims, b, base + ia[3, d + 1], base + ia[4, d + 1], ib):
            ia[0, d] += 1
        elif d == fold - 1:
            return True
        else:
            d += 1
            ia[2, d] = base
            ia[0, d], ia[1, d] = _range(base, dims[sa, d, 0] * size, dims[sa, d, 1], ia[3, d + 1], ia[4, d + 1],
                                        blo, bhi)


@numba.njit(cache=True, _nrt=False, inline="always")  # (see _sweep)
def _overlap(off, first_p, end_p, shape, table, dims, a, b, scratch):
    """`overlap` of rows a and b: same memory, a common partition on chip, and a common byte."""
    sa = shape[a]
    sb = shape[b]
    if table[sa, S_MEM] != table[sb, S_MEM]:
        return False
    on_chip = table[sa, S_MEM] == _SBUF or table[sa, S_MEM] == _PSUM
    if on_chip and (first_p[a] >= end_p[b] or first_p[b] >= end_p[a]):
        return False
    if off[a] + table[sa, S_LO] >= off[b] + table[sb, S_HI] or off[b] + table[sb, S_LO] >= off[a] + table[sa, S_HI]:
        return False
    if table[sa, S_FOLD] == 0 and table[sb, S_FOLD] == 0:
        return True  # one run each: the spans are the runs
    if table[sa, S_RUNS] > table[sb, S_RUNS]:  # walk the side with fewer runs
        a, b = b, a
    return _runs_meet(off, first_p, end_p, shape, table, dims, a, b, scratch)


@numba.njit(cache=True, _nrt=False)
def _join(buf, m, limit):
    """Sort the m byte ranges buf[:m] by start, join those that overlap or touch, then join the two
    neighbours with the smallest gap between them until at most `limit` remain. Returns their count."""
    for a in range(1, m):
        lo = buf[a, 0]
        hi = buf[a, 1]
        b = a
        while b > 0 and buf[b - 1, 0] > lo:
            buf[b, 0] = buf[b - 1, 0]
            buf[b, 1] = buf[b - 1, 1]
            b -= 1
        buf[b, 0] = lo
        buf[b, 1] = hi
    c = 0
    for a in range(m):
        if c > 0 and buf[a, 0] <= buf[c - 1, 1]:
            buf[c - 1, 1] = max(buf[c - 1, 1], buf[a, 1])
        else:
            buf[c, 0] = buf[a, 0]
            buf[c, 1] = buf[a, 1]
            c += 1
    while c > limit:
        g = 1
        for a in range(2, c):
            if buf[a, 0] - buf[a - 1, 1] < buf[g, 0] - buf[g - 1, 1]:
                g = a
        buf[g - 1, 1] = buf[g, 1]
        for a in range(g, c - 1):
            buf[a, 0] = buf[a + 1, 0]
            buf[a, 1] = buf[a + 1, 1]
        c -= 1
    return c


def _index(stream, acc_ptr, write, off, first_p, end_p, shape, table, dims, ids):
    """The search structure. Rows are grouped by key (stream, memory, write) into sequences in
    program order (seq_row; seq_pos is the 1-based position of the row's instruction in its stream).
    Over each sequence a static binary tree: its leaves are blocks of BLOCK rows, and each node
    bounds the rows below it by at most SPANS disjoint byte ranges (tree_span[node, :count]: a
    range's union, the closest ones joined when there are more) and a partition mask (tree_info[node]
    = count, M0, M1). Key k's nodes are tree_start[k] + v for v = 1 (the root) .. 2 tree_leaves[k] - 1;
    node v's children are 2v and 2v+1; block b is node tree_leaves[k] + b; blocks past the sequence's
    end are empty (count 0). Positions and row numbers are int32 (n < 2**31 instructions).

    The arrays are allocated here and filled by two passes compiled without numba's reference
    counting (`_index_sequences`, then `_index_trees` once the trees' size is known): in a pass that
    counts references, each call of `_masks` (per row) and `_join` (per node) counted its array
    arguments up and down with atomic instructions, as in `_sweep`."""
    n = stream.shape[0]
    rows = off.shape[0]
    keys = ids * CLASSES
    pos = np.empty(n, np.int32)
    row_instr = np.empty(rows, np.int32)
    key_start = np.zeros(keys + 1, np.int64)
    seq_row = np.empty(rows, np.int32)
    seq_pos = np.empty(rows, np.int32)
    tree_start = np.zeros(keys + 1, np.int64)
    tree_leaves = np.empty(keys, np.int64)
    _index_sequences(stream, acc_ptr, write, shape, table, np.zeros(ids, np.int32), np.empty(keys, np.int64), pos,
                     row_instr, key_start, seq_row, seq_pos, tree_start, tree_leaves)
    nodes = int(tree_start[keys])
    tree_span = np.empty((nodes, SPANS, 2), np.int64)
    tree_info = np.zeros((nodes, 3), np.int64)
    _index_trees(off, first_p, end_p, shape, table, dims, key_start, seq_row, tree_start, tree_leaves,
                 np.empty((max(BLOCK, 2 * SPANS), 2), np.int64), tree_span, tree_info)
    return pos, row_instr, key_start, seq_row, seq_pos, tree_start, tree_leaves, tree_span, tree_info


@numba.njit(cache=True, _nrt=False)
def _index_sequences(stream, acc_ptr, write, shape, table, length, fill, pos, row_instr, key_start, seq_row, seq_pos,
                     tree_start, tree_leaves):
    """_index's first pass: positions, each row's instruction, the keys' sequences and the trees'
    places (`length` zeros, `fill` scratch: one entry per stream and per key)."""
    n = stream.shape[0]
    rows = row_instr.shape[0]
    keys = tree_leaves.shape[0]
    for i in range(n):
        length[stream[i]] += 1
        pos[i] = length[stream[i]]
        for r in range(acc_ptr[i], acc_ptr[i + 1]):
            row_instr[r] = i
    for r in range(rows):
        key_start[stream[row_instr[r]] * CLASSES + table[shape[r], S_MEM] * 2 + write[r] + 1] += 1
    for k in range(keys):
        key_start[k + 1] += key_start[k]
    for k in range(keys):
        fill[k] = key_start[k]
    for r in range(rows):
        k = stream[row_instr[r]] * CLASSES + table[shape[r], S_MEM] * 2 + write[r]
        seq_row[fill[k]] = r
        seq_pos[fill[k]] = pos[row_instr[r]]
        fill[k] += 1
    for k in range(keys):
        blocks = (key_start[k + 1] - key_start[k] + BLOCK - 1) // BLOCK
        p = 1
        while p < blocks:
            p *= 2
        tree_leaves[k] = p
        tree_start[k + 1] = tree_start[k] + 2 * p


@numba.njit(cache=True, _nrt=False)
def _index_trees(off, first_p, end_p, shape, table, dims, key_start, seq_row, tree_start, tree_leaves, buf,
                 tree_span, tree_info):
    """_index's second pass: each key's tree, its blocks of rows first, then the nodes above them
    (`tree_info` zeros, `buf` scratch of max(BLOCK, 2 SPANS) ranges)."""
    for k in range(tree_leaves.shape[0]):
        t0 = tree_start[k]
        p = tree_leaves[k]
        first = key_start[k]
        count = key_start[k + 1] - first
        for b in range(min(p, (count + BLOCK - 1) // BLOCK)):
            v = t0 + p + b
            m = 0
            for t in range(b * BLOCK, min((b + 1) * BLOCK, count)):
                r = seq_row[first + t]
                buf[m, 0] = off[r] + table[shape[r], S_LO]
                buf[m, 1] = off[r] + table[shape[r], S_HI]
                m += 1
                m0, m1 = _masks(off, first_p, end_p, shape, table, dims, r)
                tree_info[v, 1] |= m0
                tree_info[v, 2] |= m1
            c = _join(buf, m, SPANS)
            tree_info[v, 0] = c
            for a in range(c):
                tree_span[v, a, 0] = buf[a, 0]
                tree_span[v, a, 1] = buf[a, 1]
        for v in range(p - 1, 0, -1):
            m = 0
            for c in range(t0 + 2 * v, t0 + 2 * v + 2):
                for a in range(tree_info[c, 0]):
                    buf[m, 0] = tree_span[c, a, 0]
                    buf[m, 1] = tree_span[c, a, 1]
                    m += 1
                tree_info[t0 + v, 1] |= tree_info[c, 1]
                tree_info[t0 + v, 2] |= tree_info[c, 2]
            c = _join(buf, m, SPANS)
            tree_info[t0 + v, 0] = c
            for a in range(c):
                tree_span[t0 + v, a, 0] = buf[a, 0]
                tree_span[t0 + v, a, 1] = buf[a, 1]


@numba.njit(cache=True, _nrt=False)
def _meets_node(tree_span, tree_info, v, lo, hi, m0, m1):
    """May a row spanning [lo, hi) on the partitions of mask (m0, m1) meet a row below node v: a
    common partition and a byte range that meets the span?"""
    if ((tree_info[v, 1] & m0) | (tree_info[v, 2] & m1)) == 0:
        return False
    for a in range(tree_info[v, 0]):
        if tree_span[v, a, 0] >= hi:
            return False
        if tree_span[v, a, 1] > lo:
            return True
    return False


@numba.njit(cache=True, _nrt=False, inline="always")  # (see _sweep)
def _latest(off, first_p, end_p, shape, table, dims, q, qlo, qhi, m0, m1, k, bound, filled, key_start, seq_row, seq_pos, tree_start, tree_leaves,
            tree_span, tree_info, stack, scratch):
    """The last of the first `filled` rows of key k's sequence whose instruction's position is past
    `bound` and which overlaps row q (spanning [qlo, qhi) on the partitions of mask (m0, m1)) exactly:
    its index in seq_row, or -1. The caller has checked that the last of those rows is past `bound`
    and that the tree's root may meet q.

    Hazards are mostly recent, so the search starts at the last block and moves left a subtree at a
    time (climbing to the nearest ancestor that is a right child and going to its left sibling),
    entering a subtree only if its node may meet q, right child first; a block's rows are tested last
    to first. Finding a hazard d blocks back takes O(log d) nodes when the bounds are tight."""
    first = key_start[k]
    t0 = tree_start[k]
    # lo: the first row past `bound`, by galloping back from the last, then bisection
    a = filled - 1
    step = 1
    while a - step >= 0 and seq_pos[first + a - step] > bound:
        a -= step
        step *= 2
    lo = max(a - step, -1) + 1
    while lo < a:
        mid = (lo + a) // 2
        if seq_pos[first + mid] <= bound:
            lo = mid + 1
        else:
            a = mid
    block_lo = lo // BLOCK
    p = tree_leaves[k]
    v = p + (filled - 1) // BLOCK  # the subtree searched next, covering `width` blocks
    width = 1
    while True:
        stack[0, 0] = v
        stack[0, 1] = width
        top = 1
        while top > 0:
            top -= 1
            u = stack[top, 0]
            w = stack[top, 1]
            if (u + 1) * w - p <= block_lo or not _meets_node(tree_span, tree_info, t0 + u, qlo, qhi, m0, m1):
                continue
            if w == 1:
                b = u - p
                for t in range(min(filled, (b + 1) * BLOCK) - 1, max(lo, b * BLOCK) - 1, -1):
                    if _overlap(off, first_p, end_p, shape, table, dims, seq_row[first + t], q, scratch):
                        return first + t
                continue
            stack[top, 0] = 2 * u
            stack[top, 1] = w // 2
            stack[top + 1, 0] = 2 * u + 1
            stack[top + 1, 1] = w // 2
            top += 2
        while v > 1 and v % 2 == 0:
            v //= 2
            width *= 2
        if v == 1:
            return -1
        v -= 1
        if (v + 1) * width - p <= block_lo:
            return -1


@numba.njit(cache=True, _nrt=False)
def _first_hazard(off, first_p, end_p, shape, table, dims, write, acc_ptr, j, i, scratch):
    """`hazard` of instructions j (earlier) and i: (kind, j's row, i's row), the first RAW, else WAR,
    else WAW pair in row order (kind -1 if none, which cannot be for a producer `_latest` found)."""
    for kind in range(3):
        ew = kind != 1
        lw = kind != 0
        for e in range(acc_ptr[j], acc_ptr[j + 1]):
            if write[e] != ew:
                continue
            for lt in range(acc_ptr[i], acc_ptr[i + 1]):
                if write[lt] == lw and _overlap(off, first_p, end_p, shape, table, dims, e, lt, scratch):
                    return kind, e, lt
    return -1, -1, -1


@numba.njit(cache=True, _nrt=False)
def _hazards(producer, consumer, off, first_p, end_p, shape, table, dims, write, acc_ptr, out, scratch):
    """out[j] = `_first_hazard` of edge j (producer[j] -> consumer[j]): its kind and rows."""
    for x in range(producer.shape[0]):
        kind, e, lt = _first_hazard(off, first_p, end_p, shape, table, dims, write, acc_ptr, producer[x],
                                    consumer[x], scratch)
        out[x, 0] = kind
        out[x, 1] = e
        out[x, 2] = lt


def _sweep(stream, engine, ids, acc_ptr, write, off, first_p, end_p, shape, table, dims, pos, row_instr, key_start, seq_row, seq_pos,
           tree_start, tree_leaves, tree_span, tree_info, hazards=True):
    """The vector-clock pass of `synchronise` (see the module docstring), with each stream's latest
    hazard past what the instruction knows found by `_latest` instead of a walk back through the
    stream. Returns the edges' (producer, consumer, kind, producer row, consumer row).

    The pass itself (`_sweep_run`) is compiled without numba's reference counting, like the functions
    it calls for each candidate: in a caller that counts references, every call of theirs counted
    each array it passes, up and down, with atomic instructions, about 20 arrays per `_latest` call.
    So its state and output are allocated here, and it stops before an instruction whose edges might
    not fit (at most one per other stream) for the output to be grown and the pass resumed. On
    tools/bench_pipeline.py's 10^6-instruction program, side by side (best of 5 each, alternating):
    1.15 -> 0.53 s, the same edges.

    `_latest` and `_overlap` are inlined where they are called (numba's inline="always"): a call passed
    its twenty-odd arrays by value, each a struct of pointer, sizes and strides, and the search itself
    is a few steps (per call on that program: one node, one or two exact tests). Side by side in one
    process (10 rounds, alternating, the same edges): 0.39 -> 0.31 s best, 0.66 -> 0.42 s median."""
    n = stream.shape[0]
    clock_now = np.zeros((ids, ids), np.int64)  # what the next instruction of each stream will know
    # what anyone who waits for instruction i's completion knows (int32: positions are < n < 2**31, and
    # this is the pass's one n x ids table)
    clock_after = np.zeros((n, ids), np.int32)
    known = np.zeros(ids, np.int64)
    gained = np.zeros(ids, np.int64)
    filled = np.zeros(ids * CLASSES, np.int64)  # rows of each key's sequence that precede instruction i
    found = np.empty(ids, np.int64)
    latest = np.zeros(ids, np.int64)  # the position of each stream's latest instruction so far
    stack = np.empty((STACK, 2), np.int64)  # (node, blocks it covers) of the subtrees pending
    scratch = np.empty((2, 5, MAX_DIMS + 1), np.int64)
    # the current instruction's rows: span, partition masks, memory (found once, tested per stream)
    rows = np.empty((5, max(int(np.diff(acc_ptr).max()) if n else 0, 1)), np.int64)
    out = np.empty((max(1024, n // 4), 5), np.int32)  # int32: instructions and rows number < 2**31
    at = np.zeros(2, np.int64)  # the next instruction, the edges so far
    while True:
        _sweep_run(stream, engine, ids, acc_ptr, write, off, first_p, end_p, shape, table, dims, pos, row_instr, key_start,
                   seq_row, seq_pos, tree_start, tree_leaves, tree_span, tree_info, clock_now, clock_after, known, gained,
                   filled, found, latest, stack, scratch, rows, out, at, hazards)
        if at[0] >= n:
            break
        grown = np.empty((2 * out.shape[0], 5), np.int32)
        grown[:at[1]] = out[:at[1]]
        out = grown
    e = int(at[1])
    return out[:e, 0].copy(), out[:e, 1].copy(), out[:e, 2].astype(np.int8), out[:e, 3].copy(), out[:e, 4].copy()


@numba.njit(cache=True, _nrt=False)
def _sweep_run(stream, engine, ids, acc_ptr, write, off, first_p, end_p, shape, table, dims, pos, row_instr, key_start,
               seq_row, seq_pos, tree_start, tree_leaves, tree_span, tree_info, clock_now, clock_after, known, gained,
               filled, found, latest, stack, scratch, rows, out, at, hazards):
    """_sweep's pass from instruction at[0] on, its edges written into `out` from row at[1] on (their
    kind and rows -1 unless `hazards`). Returns with `at` set to the instruction to resume at and the
    edges so far: n once every instruction is done, or an instruction whose edges might not fit in
    `out`."""
    n = stream.shape[0]
    edges = at[1]
    q_lo = rows[0]
    q_hi = rows[1]
    q_m0 = rows[2]
    q_m1 = rows[3]
    q_mem = rows[4]
    for i in range(at[0], n):
        if edges + ids > out.shape[0]:
            at[0] = i
            at[1] = edges
            return
        own = stream[i]
        eng = engine[i]
        for s in range(ids):
            gained[s] = clock_now[eng, s]  # the issuing engine learns only what it waits for
            known[s] = max(gained[s], clock_now[own, s]) if own != eng else gained[s]
        r0 = acc_ptr[i]
        for r in range(r0, acc_ptr[i + 1]):
            q_mem[r - r0] = table[shape[r], S_MEM]
            q_lo[r - r0] = off[r] + table[shape[r], S_LO]
            q_hi[r - r0] = off[r] + table[shape[r], S_HI]
            q_m0[r - r0], q_m1[r - r0] = _masks(off, first_p, end_p, shape, table, dims, r)
        nfound = 0
        for s in range(ids):
            if s == own or latest[s] <= known[s]:  # nothing of stream s past what i knows: no key to test
                continue
            bound = known[s]
            best = -1
            for r in range(r0, acc_ptr[i + 1]):
                x = r - r0
                # a read meets the other stream's writes, a write its reads and writes
                for w in range(0 if write[r] else 1, 2):
                    k = s * CLASSES + q_mem[x] * 2 + w
                    # most keys have nothing past `bound` or nothing that may meet the row: a call
                    # costs more than these tests (calling first measured 2x slower on the pipeline of
                    # tools/bench_sync.py)
                    if filled[k] == 0 or seq_pos[key_start[k] + filled[k] - 1] <= bound:
                        continue
                    if not _meets_node(tree_span, tree_info, tree_start[k] + 1, q_lo[x], q_hi[x], q_m0[x], q_m1[x]):
                        continue
                    t = _latest(off, first_p, end_p, shape, table, dims, r, q_lo[x], q_hi[x], q_m0[x], q_m1[x], k, bound, filled[k], key_start, seq_row,
                                seq_pos, tree_start, tree_leaves, tree_span, tree_info, stack, scratch)
                    if t >= 0:  # later rows need only look past it
                        bound = seq_pos[t]
                        best = row_instr[seq_row[t]]
            if best >= 0:
                found[nfound] = best
                nfound += 1
        # latest producers first: waiting for them may already cover the others
        for a in range(1, nfound):
            x = found[a]
            b = a
            while b > 0 and found[b - 1] < x:
                found[b] = found[b - 1]
                b -= 1
            found[b] = x
        for a in range(nfound):
            j = found[a]
            if pos[j] <= known[stream[j]]:
                continue
            for s in range(ids):
                known[s] = max(known[s], clock_after[j, s])
                gained[s] = max(gained[s], clock_after[j, s])
            kind = e = lt = -1
            if hazards:
                kind, e, lt = _first_hazard(off, first_p, end_p, shape, table, dims, write, acc_ptr, j, i, scratch)
            out[edges, 0] = j
            out[edges, 1] = i
            out[edges, 2] = kind
            out[edges, 3] = e
            out[edges, 4] = lt
            edges += 1
        known[own] = pos[i]
        latest[own] = pos[i]
        for s in range(ids):
            if own != eng:
                clock_now[eng, s] = gained[s]
            clock_now[own, s] = known[s]
            clock_after[i, s] = known[s]
        for r in range(acc_ptr[i], acc_ptr[i + 1]):
            filled[own * CLASSES + table[shape[r], S_MEM] * 2 + write[r]] += 1
    at[0] = n
    at[1] = edges
