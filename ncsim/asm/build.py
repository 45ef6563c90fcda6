"""From parsed instructions to encoded streams, as flat arrays: synchronisation and encoding.

The assembler gathers *chunks*: one parsed instruction whose values may hold lanes (one per loop
iteration, `ncsim.asm.lanes`), and the program-order positions of its lanes. A line outside loops
is a chunk of one lane. This module never makes a Python object per instruction:

1. `Gathered`: per instruction, in program order, which chunk and lane it is, its engine and its
   stream; `access_rows`: its accesses as one CSR table, a row holding only what varies from one
   iteration to the next (byte offset, partitions, write flag) and an index into a table of the
   distinct shapes (memory, item size, dimensions);
2. automatic synchronisation (`ncsim.asm.sync.synchronise_rows` over that table) gives the waits, and
   the semaphores are assigned to the streams waited for, as `ncsim.asm.sync` documents; the access
   table is dropped before encoding;
3. `encode_program`: every chunk encoded for its lanes in batches of BATCH (`encode_lanes`), placed
   by a small numba kernel (`_place`) with room for the automatic waits and signals, which are then
   written in, laid out per engine stream as one array of 64-bit words; the object's streams are
   read-only views of it (`Encoded.stream_view`) and its line tables columns (`LineTable`).

Memory (the words are most of it: 181 bytes per instruction on tools/bench_pipeline.py's program).
Before synchronisation and before encoding, the heap memory earlier stages freed is handed back to the
system (`give_back`). Program-order positions are int32, stream ids and the edges' operands int8.
Besides the words, encoding keeps 13 bytes per instruction (word starts, wait counts, signal flags)
while it fills them and then makes the object's columns (line tables and origins, 16 bytes); the rest
it needs per instruction is made a block of BATCH at a time, and the word positions (`Encoded.pos`)
only when asked. The peak is the end of encoding, where the words, the line tables, the parsed chunks
(20 bytes per instruction of that program: their positions and operand lanes) and what the sync report
needs (the edges and ranks, 16, and the instructions' chunks and engines, 5) are live
together. Measured on that program's 10^6 instructions (peak RSS growth of the whole assembly, as the
benchmark takes it): 301 bytes per instruction before this was done, 246-248 after (traced: 274 ->
238). The issue's 200 is out of reach without a more compact encoding of the words (an access
pattern is a fixed 56-byte field): the object's own words and line tables are 193.

An instruction that would wait on more semaphores than the encoding holds is the one case built one
at a time (the extra waits go on sem_wait instructions before it, on its engine).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numba
import numpy as np

from ncsim import isa
from ncsim.asm import sync
from ncsim.asm.fields import SemOp
from ncsim.asm.instruction import Instruction, encode, encode_lanes, layout, pick
from ncsim.asm.lanes import Lanes
from ncsim.errors import AsmError
from ncsim.memory.access import AccessPattern, Immediate, Memory

ENGINES = isa.ENGINES
MAX_DIMS = 5


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]
    return trim


_TRIM = _malloc_trim()
GIVE_BACK_FROM = 100_000  # instructions: smaller programs leave too little behind to be worth a trim


def give_back(n: int) -> None:
    """Hand the heap memory that earlier stages freed back to the system (glibc's malloc_trim) before
    a stage that allocates a lot, when the program has at least GIVE_BACK_FROM instructions.
    glibc serves arrays of up to 32 MiB from its heap once larger ones were freed, and keeps what a
    stage frees there: the next stage reuses only the holes its own arrays fit, and the words, served
    fresh, came on top of it. On tools/bench_pipeline.py's 10^6 program the parse left 70 bytes per
    instruction freed but held and synchronisation 70 more; trimmed before synchronisation and before
    encoding, the assembler's peak fell by them. A process that keeps freed memory for reuse
    (`ncsim.runtime.heap.keep_freed_memory`, which the `ncsim` command calls) is left as it chose."""
    if _TRIM is None or n < GIVE_BACK_FROM:
        return
    from ncsim.runtime import heap  # the `ncsim` command may have chosen to keep freed memory for speed

    if heap.keeps_freed_memory():  # (docs/running.md): then the assembler does not undo that
        return
    _TRIM(0)  # about 3 ms on that program (a gc.collect first would take 30 and free nothing more)


@dataclass
class Chunk:
    """`instr` (values may be lanes) at the program-order `positions` of its lanes, from source `where`
    (file index, line, column)."""

    instr: Instruction
    positions: np.ndarray  # int32 (a program has fewer than 2**31 instructions)
    where: tuple[int, int, int]

    def __post_init__(self) -> None:
        self.positions = np.asarray(self.positions, np.int32)

    @property
    def n(self) -> int:
        return len(self.positions)


def column(value: int | Lanes, n: int) -> np.ndarray:
    return value.v if isinstance(value, Lanes) else np.full(n, value, np.int64)


@dataclass
class Gathered:
    """Per instruction g (program order): chunk[g] (int32), lane[g], engine[g] (int8), its stream
    (`streams`, int8 up to 127 streams) and its issuing engine's stream (`issuers()`, made for synchronisation and
    dropped after it). The accesses (`access_rows`) are made when synchronisation needs them and
    dropped after it: they are the largest table of the assembly."""

    chunks: list[Chunk]
    n: int
    chunk: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.chunk = np.empty(self.n, np.int32)
        for ci, c in enumerate(self.chunks):
            self.chunk[c.positions] = ci

    @cached_property
    def lane(self) -> np.ndarray:
        """Instruction g's lane in its chunk (made when first asked: only the slow paths ask)."""
        lane = np.empty(self.n, np.int32)
        for c in self.chunks:
            lane[c.positions] = np.arange(c.n)
        return lane

    def instruction(self, g: int) -> Instruction:
        return pick(self.chunks[int(self.chunk[g])].instr, int(self.lane[g]))

    @cached_property
    def engine(self) -> np.ndarray:
        per_chunk = np.array([ENGINES.index(c.instr.engine) for c in self.chunks], np.int8)
        return per_chunk[self.chunk] if self.n else np.zeros(0, np.int8)

    def forget_streams(self) -> None:
        """Drop `streams` (4 bytes per instruction) until it is asked for again."""
        self.__dict__.pop("streams", None)

    @cached_property
    def streams(self) -> tuple[np.ndarray, list[str]]:
        """(stream id per instruction, stream names): names sorted, the engines among them, as
        `ncsim.asm.sync.synchronise` numbers them."""
        per_lane: list[tuple[Chunk, np.ndarray | None]] = []
        names = {c.instr.engine for c in self.chunks}
        for c in self.chunks:
            if c.instr.mnemonic == "dma_copy":
                queues = column(c.instr.operands["queue"], c.n)
                per_lane.append((c, queues))
                names.update(f"dma queue {q} from {c.instr.engine}" for q in np.unique(queues).tolist())
            else:
                per_lane.append((c, None))
        ordered = sorted(names)
        sid = {s: k for k, s in enumerate(ordered)}
        stream = np.empty(self.n, np.int8 if len(ordered) <= 127 else np.int32)  # 5 engines + their queues
        for c, queues in per_lane:
            if queues is None:
                stream[c.positions] = sid[c.instr.engine]
            else:
                uq, inv = np.unique(queues, return_inverse=True)
                ids = np.array([sid[f"dma queue {q} from {c.instr.engine}"] for q in uq.tolist()], stream.dtype)
                stream[c.positions] = ids[inv.reshape(-1)]
        return stream, ordered

    def issuers(self) -> np.ndarray:
        """The stream id of each instruction's issuing engine (int32; -1 for an engine without a stream)."""
        _, names = self.streams
        engine_ids = np.array([names.index(e) if e in names else -1 for e in ENGINES], np.int32)
        return engine_ids[self.engine]


@dataclass
class AccessRows:
    """The accesses of every instruction, as `ncsim.asm.sync.synchronise_rows` takes them: rows
    ptr[g]..ptr[g + 1] are instruction g's, in the order `ncsim.asm.sync.accesses` gives them; per row
    its byte offset, first and end partition, write flag and shape (an index into the shape_*
    columns: memory, item size, dimensions, one entry per distinct shape). `operand[c, a]` is the
    operand (index into `operand_names`) of access a of chunk c's instructions."""

    ptr: np.ndarray
    offset: np.ndarray
    first: np.ndarray
    end: np.ndarray
    write: np.ndarray
    shape: np.ndarray
    shape_memory: np.ndarray
    shape_itemsize: np.ndarray
    shape_ndims: np.ndarray
    shape_dims: np.ndarray
    operand: np.ndarray
    operand_names: list[str]


def _lane_values(value: int | Lanes) -> int | np.ndarray:
    return value.v if isinstance(value, Lanes) else value


def access_rows(gathered: Gathered) -> AccessRows:
    """The access table of `gathered` (a chunk's rows share one shape when its dimensions are the same
    in every lane, so a row is 21 bytes)."""
    chunks = gathered.chunks
    per_chunk = [sync.accesses(c.instr) for c in chunks]
    counts = np.array([len(a) for a in per_chunk], np.int64)
    ptr = np.zeros(gathered.n + 1, np.int64)
    if gathered.n:
        np.cumsum(counts[gathered.chunk], out=ptr[1:])
    rows = int(ptr[-1])
    offset = np.empty(rows, np.int64)
    first = np.empty(rows, np.int32)
    end = np.empty(rows, np.int32)
    write = np.empty(rows, np.bool_)
    shape = np.empty(rows, np.int32)
    shapes: dict[tuple[int, int, tuple[tuple[int, int], ...]], int] = {}
    operand = np.zeros((len(chunks), int(counts.max(initial=0))), np.int16)
    names: dict[str, int] = {}
    for ci, (c, accs) in enumerate(zip(chunks, per_chunk)):
        base = ptr[c.positions]
        for a, acc in enumerate(accs):
            r = base + a
            ap: AccessPattern = acc.ap
            memory, itemsize = int(ap.memory), ap.dtype.itemsize
            offset[r] = _lane_values(ap.offset)
            first[r] = _lane_values(ap.partition)
            end[r] = _lane_values(ap.partition) + _lane_values(ap.partitions)
            write[r] = acc.write
            if not any(isinstance(x, Lanes) for d in ap.dims for x in d):
                shape[r] = shapes.setdefault((memory, itemsize, tuple(ap.dims)), len(shapes))
            else:  # dimensions that vary from lane to lane: a shape per distinct value
                per_lane = np.stack([column(x, c.n) for d in ap.dims for x in d], axis=1)
                distinct, inverse = np.unique(per_lane, axis=0, return_inverse=True)
                ids = np.array([shapes.setdefault((memory, itemsize, tuple(zip(u[0::2], u[1::2]))), len(shapes))
                                for u in distinct.tolist()], np.int32)
                shape[r] = ids[inverse.reshape(-1)]
            operand[ci, a] = names.setdefault(acc.operand, len(names))
    keys = list(shapes)
    shape_dims = np.zeros((len(keys), MAX_DIMS, 2), np.int64)
    for s, (_, _, dims) in enumerate(keys):
        shape_dims[s, :len(dims)] = dims
    return AccessRows(ptr, offset, first, end, write, shape, np.array([k[0] for k in keys], np.int64),
                      np.array([k[1] for k in keys], np.int64), np.array([len(k[2]) for k in keys], np.int64),
                      shape_dims, operand, list(names) or [""])


@dataclass
class Synced:
    """The waits automatic synchronisation inserted: edge j makes `consumer[j]` wait for `producer[j]`
    (program order), a hazard of `kind[j]` (0 RAW, 1 WAR, 2 WAW) between operands; `sem_of` maps a
    stream id to its semaphore, `rank[g]` is g's place among its stream's producers (from 1). Edge
    columns are int32 (kind, memory and the operands int8), rank int32."""

    producer: np.ndarray
    consumer: np.ndarray
    kind: np.ndarray
    producer_operand: np.ndarray  # index into operand_names
    consumer_operand: np.ndarray
    memory: np.ndarray  # Memory code of the hazard
    sem_of: dict[int, int]
    rank: np.ndarray
    operand_names: list[str] = field(default_factory=list)

    @staticmethod
    def none(n: int) -> Synced:
        e = np.zeros(0, np.int64)
        return Synced(e, e, e, e, e, e, {}, np.zeros(n, np.int64))

    def wait_on(self, stream: np.ndarray, p: int) -> SemOp:
        """The wait that orders an instruction after producer p: p's stream's semaphore at p's rank."""
        return SemOp(self.sem_of[int(stream[p])], ">=", int(self.rank[p]))


class _Lazy:
    """A sequence whose items are made when read (for the few a report names)."""

    def __init__(self, item: Callable[[int], object]):
        self.item = item

    def __getitem__(self, g: int) -> object:
        return self.item(g)


def describe(gathered: Gathered, synced: Synced, files: list[str]) -> str:
    """`ncsim.asm.sync.describe_edges` for the arrays: one line per wait, who waits for whom and why."""
    stream, names = gathered.streams
    operand = synced.operand_names
    memory = {int(m): m.label for m in Memory}
    edges = []
    for j in range(len(synced.producer)):
        p, c = int(synced.producer[j]), int(synced.consumer[j])
        wait = synced.wait_on(stream, p)
        edges.append(sync.Edge(p, c, sync.KINDS[int(synced.kind[j])], str(operand[synced.producer_operand[j]]),
                               str(operand[synced.consumer_operand[j]]), memory[int(synced.memory[j])], wait))
    semaphores = {names[s]: sem for s, sem in sorted(synced.sem_of.items(), key=lambda x: x[1])}
    result = sync.SyncResult([], [], edges, semaphores)

    def where(g: int) -> str:
        f, ln, _ = gathered.chunks[int(gathered.chunk[g])].where
        return f"{files[f]}:{ln}"

    return sync.describe_edges(result, _Lazy(gathered.instruction), _Lazy(where))



def synchronise(gathered: Gathered, num_semaphores: int, reserved: set[int]) -> Synced:
    """The waits between streams (see `ncsim.asm.sync`), and a semaphore for each stream waited for."""
    stream, names = gathered.streams
    give_back(gathered.n)
    acc = access_rows(gathered)
    producer, consumer, kind, prow, crow = sync.synchronise_rows(
        stream, gathered.issuers(), acc.ptr, acc.offset, acc.first, acc.end, acc.shape, acc.write, acc.shape_memory,
        acc.shape_itemsize, acc.shape_ndims, acc.shape_dims)
    # an edge's operands: the rows' places among their instructions' accesses, in their chunks' tables
    small = np.int8 if len(acc.operand_names) <= 127 else np.int16  # kept for the report: 1 byte an edge
    pa = acc.operand[gathered.chunk[producer], prow - acc.ptr[producer]].astype(small)
    ca = acc.operand[gathered.chunk[consumer], crow - acc.ptr[consumer]].astype(small)
    memory = acc.shape_memory.astype(np.int8)[acc.shape[prow]]
    operand_names = acc.operand_names
    del acc  # the largest table of the assembly: gone before encoding
    producers = np.flatnonzero(np.bincount(producer, minlength=gathered.n))  # sorted, each once
    waited = sorted({names[s] for s in np.unique(stream[producers]).tolist()}, key=lambda s: (s.startswith("dma"), s))
    free = [s for s in range(num_semaphores) if s not in reserved]
    if len(waited) > len(free):
        raise AsmError(f"automatic synchronisation needs {len(waited)} semaphores, {len(free)} are free")
    sem_of = {names.index(s): sem for s, sem in zip(waited, free)}
    rank = np.zeros(gathered.n, np.int32)
    for s in np.unique(stream[producers]).tolist():  # a stream's producers count 1, 2, ... in program order
        mine = producers[stream[producers] == s]
        rank[mine] = np.arange(1, len(mine) + 1, dtype=np.int32)
    return Synced(producer, consumer, kind, pa, ca, memory, sem_of, rank, operand_names)


@dataclass
class Encoded:
    """The program as the object holds it: `words` (every stream's instructions, in ENGINES order),
    `word_first[e]` where stream e starts; per instruction k (streams in ENGINES order) its source
    place (`file`, `line`, `col`) and word position `pos[k]` (found from the words when first asked);
    `first[e]` the k of stream e's first instruction; `origin[k]` the program-order instruction it was
    made for (a sem_wait inserted for an instruction's extra waits has that instruction's)."""

    words: np.ndarray
    word_first: np.ndarray
    first: np.ndarray
    file: np.ndarray  # int32
    line: np.ndarray  # uint32, as the object's line table holds them
    col: np.ndarray  # uint32
    origin: np.ndarray  # int32

    @cached_property
    def pos(self) -> np.ndarray:
        """Each instruction's word position (int64): each stream walked header by header (a header's
        bits 32..47 are the instruction's size in bytes). Only inspection asks for it, so the assembly
        does not keep 8 bytes per instruction for it."""
        out = np.empty(len(self.origin), np.int64)
        sizes = self.words  # read one header at a time
        k = 0
        for e in range(len(ENGINES)):
            p, end = int(self.word_first[e]), int(self.word_first[e + 1])
            while p < end:
                out[k] = p
                k += 1
                p += (int(sizes[p]) >> 32 & 0xFFFF) // 8
        return out

    def stream_view(self, e: int) -> memoryview:
        """Stream e's bytes without a copy: a read-only view of `words` (which encoding leaves read-only)."""
        return memoryview(self.words[self.word_first[e]:self.word_first[e + 1]].view(np.uint8)).toreadonly()


_SEM_WAIT = isa.BY_MNEMONIC["sem_wait"]


BATCH = 8192  # lanes encoded at a time: bounds the encoding's temporaries, whatever a chunk's size


def take(value: Any, idx: np.ndarray) -> Any:
    """`value` (an operand, or a whole Instruction) restricted to the lanes `idx` (as `pick` is to one)."""
    if isinstance(value, Lanes):
        return Lanes(value.v[idx])
    if isinstance(value, AccessPattern):
        return AccessPattern(value.memory, value.dtype, take(value.partition, idx), take(value.partitions, idx),
                             take(value.offset, idx), take(value.dims, idx))
    if isinstance(value, Immediate):
        return Immediate(take(value.value, idx), value.dtype)
    if isinstance(value, SemOp):
        return SemOp(value.sem, value.op, take(value.value, idx))
    if isinstance(value, tuple):
        return tuple(take(v, idx) for v in value)
    if isinstance(value, Instruction):
        return Instruction(value.spec, value.engine, {k: take(v, idx) for k, v in value.operands.items()},
                           take(value.waits, idx), take(value.signals, idx), value.loc, value.given)
    return value


@numba.njit(cache=True, _nrt=False)
def _place(words, enc, start, waits, signs, size, head, own_waits, own_signals):
    """Lane x's encoding enc[x] into `words` at start[x]: its first `head` words (header, fields, its own
    waits), room for its `waits[x]` automatic waits, its own signals, and the header's counts and size
    patched (a wait count in bits 16.., signals 24.., bytes 32..)."""
    for x in range(start.shape[0]):
        base = start[x]
        for c in range(head):
            words[base + c] = enc[x, c]
        tail = base + head + waits[x]
        for c in range(own_signals):
            words[tail + c] = enc[x, head + c]
        header = enc[x, 0] & np.uint64(0xFFFF)
        header |= np.uint64(own_waits + waits[x]) << np.uint64(16)
        header |= np.uint64(own_signals + signs[x]) << np.uint64(24)
        header |= np.uint64(size[x] * 8) << np.uint64(32)
        words[base] = header


def encode_program(gathered: Gathered, synced: Synced) -> Encoded:
    """Encode every instruction into one array of words (see the module docstring). Its peak memory is
    the words and, per instruction, 8 bytes of word positions, 4 of automatic waits and 1 of
    signals, then the object's line tables, positions and origins (24): what a chunk's lanes need
    (their sizes, which of them go one by one) is worked out per batch rather than kept for all."""
    n = gathered.n
    chunks = gathered.chunks
    stream, names = gathered.streams
    give_back(n)
    sem_by_stream = np.zeros(max(len(names), 1), np.uint64)
    for s, sem in synced.sem_of.items():
        sem_by_stream[s] = sem
    ck = gathered.chunk
    step = BATCH  # instructions or edges per block of the whole-program passes below
    consumer, producer = synced.consumer, synced.producer
    if len(consumer) > 1 and (consumer[1:] < consumer[:-1]).any():  # the sweep lists them by consumer already
        order = np.argsort(consumer, kind="stable")
        consumer, producer = consumer[order], producer[order]
        del order
    aw = np.empty(n, np.int32)  # automatic waits per instruction
    for lo in range(0, n, step):
        a, b = np.searchsorted(consumer, [lo, lo + step])
        aw[lo:lo + step] = np.bincount(consumer[a:b] - lo, minlength=min(step, n - lo))
    signs = np.zeros(n, np.int8)  # 1: it signals its stream's semaphore
    signs[synced.producer] = 1
    # per chunk: its own waits, its own signals, and where its signals start (after the fixed fields
    # and its own waits), in words; looked up per instruction through `ck` where needed
    own_w = np.array([len(c.instr.waits) for c in chunks], np.int32)
    own_s = np.array([len(c.instr.signals) for c in chunks], np.int32)
    head = np.array([layout(c.instr.spec.opcode)[1] // 8 for c in chunks], np.int32) + own_w
    fixed = head + own_s  # words of a chunk's instructions besides their automatic waits and signal

    blobs: dict[int, list[bytes]] = {}  # g -> its encoding, after the sem_waits made for its extra waits
    for lo in range(0, n, step):
        for g in (lo + np.flatnonzero(_special(np.arange(lo, min(n, lo + step)), ck, own_w, own_s, aw, signs))).tolist():
            blobs[g] = _one_by_one(gathered, synced, stream, g)

    # Layout: streams in ENGINES order, program order within each; word_start[g] is where g starts.
    # Two passes in blocks of program order: each engine's words, then each instruction's start
    # after its engine's earlier instructions.
    engine = gathered.engine
    word_start = np.empty(n, np.int64)  # the size of each instruction in words, then its start
    word_first = np.zeros(len(ENGINES) + 1, np.int64)
    for lo in range(0, n, step):
        sizes = fixed[ck[lo:lo + step]] + aw[lo:lo + step] + signs[lo:lo + step]
        word_start[lo:lo + step] = sizes
        word_first[1:] += np.bincount(engine[lo:lo + step], weights=sizes, minlength=len(ENGINES)).astype(np.int64)
    for g, parts in blobs.items():
        nwords = sum(len(b) for b in parts) // 8
        word_first[1 + engine[g]] += nwords - word_start[g]
        word_start[g] = nwords
    np.cumsum(word_first, out=word_first)
    total_words = int(word_first[-1])
    done = word_first[:-1].copy()  # per engine, the words laid out so far
    for lo in range(0, n, step):
        sizes = word_start[lo:lo + step]
        eng = engine[lo:lo + step]
        for e in np.unique(eng).tolist():
            mine = np.flatnonzero(eng == e)
            ends = np.cumsum(sizes[mine]) + done[e]
            done[e] = ends[-1]
            sizes[mine] = ends - sizes[mine]  # sizes is a view: word_start's block becomes starts
    del done
    words = np.zeros(total_words, np.uint64)

    for ci, c in enumerate(chunks):
        w, s, hw = int(own_w[ci]), int(own_s[ci]), int(head[ci])  # hw: words before the automatic waits
        for lo in range(0, c.n, BATCH):
            lanes_idx = np.arange(lo, min(c.n, lo + BATCH))
            gs = c.positions[lanes_idx]
            if blobs:
                keep = ~_special(gs, ck, own_w, own_s, aw, signs)
                lanes_idx, gs = lanes_idx[keep], gs[keep]
            if not len(gs):
                continue
            part = c.instr if len(lanes_idx) == c.n else take(c.instr, lanes_idx)
            enc = encode_lanes(part, len(lanes_idx)).view(np.uint64)
            sizes = fixed[ci] + aw[gs] + signs[gs]
            _place(words, enc, word_start[gs], aw[gs], signs[gs], sizes, hw, w, s)
            del enc
    # Automatic waits, after the instruction's own (the j-th wait of each consumer in the order the
    # edges were found); its signal after its own signals. Both in blocks of BATCH, so that their
    # index temporaries stay small whatever the program's size.
    for lo in range(0, len(consumer), step):
        cs, ps = consumer[lo:lo + step], producer[lo:lo + step]
        nth = np.arange(lo, lo + len(cs)) - np.searchsorted(consumer, cs, side="left")
        if blobs:
            normal = ~_special(cs, ck, own_w, own_s, aw, signs)
            cs, ps, nth = cs[normal], ps[normal], nth[normal]
        words[word_start[cs] + head[ck[cs]] + nth] = \
            sem_by_stream[stream[ps]] | (synced.rank[ps].astype(np.uint64) << np.uint64(32))
    for lo in range(0, n, step):
        sig = lo + np.flatnonzero(signs[lo:lo + step] == 1)
        if blobs:
            sig = sig[~_special(sig, ck, own_w, own_s, aw, signs)]
        words[word_start[sig] + fixed[ck[sig]] + aw[sig]] = sem_by_stream[stream[sig]] | (np.uint64(1) << np.uint64(32))
    del aw, signs
    for g, parts in blobs.items():
        raw = np.frombuffer(b"".join(parts), "<u8")
        words[word_start[g]:word_start[g] + len(raw)] = raw

    del word_start, stream
    gathered.forget_streams()  # made again if the sync report asks for them
    # Per instruction k: its source and origin (inserted sem_waits repeat their instruction's).
    korder = np.empty(n, np.int32)  # g of each slot: streams in ENGINES order, program order within each
    done = 0
    for e in range(len(ENGINES)):
        for lo in range(0, n, step):
            mine = lo + np.flatnonzero(engine[lo:lo + step] == e)
            korder[done:done + len(mine)] = mine
            done += len(mine)
    if blobs:
        made = np.ones(n, np.int64)  # instructions each program-order instruction becomes
        for g, parts in blobs.items():
            made[g] = len(parts)
        gk = np.repeat(korder, made[korder])
    else:
        gk = korder
    del korder
    k_count = len(gk)
    where = np.array([c.where for c in chunks], np.int64).reshape(-1, 3)
    file = np.empty(k_count, np.int32)
    line = np.empty(k_count, np.uint32)
    col = np.empty(k_count, np.uint32)
    for lo in range(0, k_count, step):
        ckk = gathered.chunk[gk[lo:lo + step]]
        file[lo:lo + step] = where[ckk, 0]
        line[lo:lo + step] = where[ckk, 1]
        col[lo:lo + step] = where[ckk, 2]
    first = np.zeros(len(ENGINES) + 1, np.int64)
    for lo in range(0, k_count, step):  # (bincount takes int64 indices: a block at a time)
        first[1:] += np.bincount(engine[gk[lo:lo + step]], minlength=len(ENGINES))
    np.cumsum(first, out=first)
    words.flags.writeable = False  # the object's streams are views of it (Encoded.stream_view)
    return Encoded(words, word_first, first, file, line, col, gk)


def _special(gs: np.ndarray, ck: np.ndarray, own_w: np.ndarray, own_s: np.ndarray, aw: np.ndarray,
             signs: np.ndarray) -> np.ndarray:
    """Which of instructions gs are built one by one: more waits or signals than the encoding holds."""
    c = ck[gs]
    return (own_w[c] + aw[gs] > isa.WAITS.max_len) | (own_s[c] + signs[gs] > isa.SIGNALS.max_len)


def _one_by_one(gathered: Gathered, synced: Synced, stream: np.ndarray, g: int) -> list[bytes]:
    """Instruction g encoded the slow way: its waits beyond the encoding's limit on sem_waits before it."""
    instr = gathered.instruction(g)
    mine = np.flatnonzero(synced.consumer == g)
    auto = [synced.wait_on(stream, int(synced.producer[j])) for j in mine]
    waits = list(instr.waits) + auto
    limit = isa.WAITS.max_len
    extra, waits = (waits[:-limit], waits[-limit:]) if len(waits) > limit else ([], waits)
    signals = list(instr.signals)
    if synced.rank[g]:
        signals.append(SemOp(synced.sem_of[int(stream[g])], "+=", 1))
    if len(signals) > isa.SIGNALS.max_len:
        raise AsmError(f"{instr.mnemonic} would signal {len(signals)} semaphores; an instruction signals at most"
                       f" {isa.SIGNALS.max_len}").at(instr.loc)
    parts = [encode(Instruction(_SEM_WAIT, instr.engine, {"cond": w}, loc=instr.loc)) for w in extra]
    parts.append(encode(replace(instr, waits=tuple(waits), signals=tuple(signals))))
    return parts


