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
3. encoding, a block at a time (`_Layout`): one stream's BLOCK instructions, each chunk's lanes among
   them encoded in batches of BATCH (`encode_lanes`), placed by a small numba kernel (`_place`) with
   room for the automatic waits and signals, which are then written in. `encode_program` lays the
   blocks into one array of 64-bit words, per engine stream, for an object (its streams are
   read-only views of it, `Encoded.stream_view`, and its line tables columns, `LineTable`); `Blocks`
   gives them one block at a time in one buffer, for `ncsim.program.Program.from_blocks`, which reads
   each as it comes (`Assembler.assemble_program`, what `ncsim run` does with a .s file).

Memory. Once parsing is over, the chunks' lanes are held as int32 where every value fits
(`narrow_lanes`), and the access table takes int16 partitions and shapes and an int32 pointer column
where they fit. Before synchronisation and before encoding (and every TRIM_EVERY instructions of
`Blocks`), the heap memory earlier stages freed is handed back to the system (`give_back`).
Program-order positions are int32, stream ids and the edges' operands int8. Besides what it makes,
encoding keeps 9 bytes per instruction (wait counts, signal flags, the streams' order) and a block's
temporaries. Assembling straight into the decoded program never holds the program's words: on
tools/bench_pipeline.py's 10^6 instructions its peak (RSS growth of the whole assembly, as the
benchmark takes it) is 188-191 bytes per instruction, at synchronisation and at the end, where the
decoded program's 127 bytes, the parsed chunks (12 bytes per instruction of that program) and what
the sync report needs (the edges and ranks, 16, and the instructions' chunks and engines, 5) are live
together. An object's words are 181 bytes per instruction of that program (an access pattern is a
fixed 56-byte field) and its line tables 12: assembling into an object peaks at 243-251 bytes per
instruction (301 before the encoding was made in blocks of flat arrays).

An instruction that would wait on more semaphores than the encoding holds is the one case built one
at a time (the extra waits go on sem_wait instructions before it, on its engine).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import cache, cached_property
from typing import Any, NamedTuple

import numba
import numpy as np

from ncsim import isa
from ncsim.arrays import distinct
from ncsim.asm import sync
from ncsim.asm.fields import APKind, SemOp
from ncsim.asm.instruction import Instruction, encode, encode_lanes, layout, pick
from ncsim.asm.lanes import Lanes
from ncsim.errors import AsmError
from ncsim.memory.access import AccessPattern, Immediate, Memory

ENGINES = isa.ENGINES
MAX_DIMS = 5


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where there is none; looked up on first use (ctypes, and the
    subprocess that ctypes.util.find_library would start, cost a run of a small program ~25 ms)."""
    import ctypes

    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]
    return trim


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
    if n < GIVE_BACK_FROM or _malloc_trim() is None:
        return
    from ncsim.runtime import heap  # the `ncsim` command may have chosen to keep freed memory for speed

    if heap.keeps_freed_memory():  # (docs/running.md): then the assembler does not undo that
        return
    _malloc_trim()(0)  # about 3 ms on that program (a gc.collect first would take 30 and free nothing more)


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
                names.update(f"dma queue {q} from {c.instr.engine}" for q in distinct(queues).tolist())
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
        """The stream id of each instruction's issuing engine (int8 up to 127 streams, as `streams`; -1 for
        an engine without a stream)."""
        _, names = self.streams
        engine_ids = np.array([names.index(e) if e in names else -1 for e in ENGINES],
                              np.int8 if len(names) <= 127 else np.int32)
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


def _per_lane(value: int | Lanes | np.ndarray) -> np.ndarray:
    """An int64 array for _put_rows: a value per lane, or the one value of every lane."""
    v = value.v if isinstance(value, Lanes) else value
    return np.ascontiguousarray(v, np.int64).reshape(-1)


@numba.njit(cache=True, _nrt=False)
def _put_rows(base, a, off, part, parts, shape_id, w, offset, first, end, write, shape):
    """Access rows base[i] + a (i a lane) of access_rows' table: each of off, part, parts and shape_id
    holds a value per lane, or one value (length 1) for all of them. One pass where numpy's indexed
    assignments made five (and a temporary for the end): access_rows of tools/bench_pipeline.py's
    10^6 program 0.10-0.13 -> 0.064-0.098 s (best of 5, alternating processes, the same table). The
    rows of a chunk's lanes lie all over the table, so each pass goes through all of it: writing
    the table in row order instead would need each instruction's lane, another such pass."""
    so = 1 if off.shape[0] > 1 else 0
    sp = 1 if part.shape[0] > 1 else 0
    sq = 1 if parts.shape[0] > 1 else 0
    ss = 1 if shape_id.shape[0] > 1 else 0
    for i in range(base.shape[0]):
        r = base[i] + a
        offset[r] = off[i * so]
        p = part[i * sp]
        first[r] = p
        end[r] = p + parts[i * sq]
        write[r] = w
        shape[r] = shape_id[i * ss]


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
            ap: AccessPattern = acc.ap
            memory, itemsize = int(ap.memory), ap.dtype.itemsize
            if not any(isinstance(x, Lanes) for d in ap.dims for x in d):
                shape_id: int | np.ndarray = shapes.setdefault((memory, itemsize, tuple(ap.dims)), len(shapes))
            else:  # dimensions that vary from lane to lane: a shape per distinct value
                per_lane = np.stack([column(x, c.n) for d in ap.dims for x in d], axis=1)
                kinds, inverse = np.unique(per_lane, axis=0, return_inverse=True)
                ids = np.array([shapes.setdefault((memory, itemsize, tuple(zip(u[0::2], u[1::2]))), len(shapes))
                                for u in kinds.tolist()], np.int64)
                shape_id = ids[inverse.reshape(-1)]
            _put_rows(base, a, _per_lane(ap.offset), _per_lane(ap.partition), _per_lane(ap.partitions),
                      _per_lane(shape_id), bool(acc.write), offset, first, end, write, shape)
            operand[ci, a] = names.setdefault(acc.operand, len(names))
    # narrower where the values allow (the sync kernels take either): 5 bytes per row fewer at the peak
    if len(shapes) <= np.iinfo(np.int16).max:
        shape = shape.astype(np.int16)
    if rows and int(first.min()) >= 0 and max(int(first.max()), int(end.max())) <= np.iinfo(np.int16).max:
        first, end = first.astype(np.int16), end.astype(np.int16)
    if rows < 2**31 - 1:
        ptr = ptr.astype(np.int32)
    keys = list(shapes)
    shape_dims = np.zeros((len(keys), MAX_DIMS, 2), np.int64)
    for s, (_, _, dims) in enumerate(keys):
        shape_dims[s, :len(dims)] = dims
    return AccessRows(ptr, offset, first, end, write, shape, np.array([k[0] for k in keys], np.int64),
                      np.array([k[1] for k in keys], np.int64), np.array([len(k[2]) for k in keys], np.int64),
                      shape_dims, operand, list(names) or [""])


class Hazards(NamedTuple):
    """What each automatic wait is for: edge j's hazard `kind[j]` (0 RAW, 1 WAR, 2 WAW), its operands
    (`producer_operand[j]`, `consumer_operand[j]`: indices into `operand_names`) and `memory[j]` (a
    Memory code)."""

    kind: np.ndarray
    producer_operand: np.ndarray
    consumer_operand: np.ndarray
    memory: np.ndarray
    operand_names: list[str]


@dataclass
class Synced:
    """The waits automatic synchronisation inserted: edge j makes `consumer[j]` wait for `producer[j]`
    (program order); `sem_of` maps a stream id to its semaphore, `rank[g]` is g's place among its
    stream's producers (from 1). Edge columns are int32, rank int32. What each edge is for (`what`)
    only the sync report reads: it is found when first asked (`hazards`), not during the assembly."""

    producer: np.ndarray
    consumer: np.ndarray
    sem_of: dict[int, int]
    rank: np.ndarray
    hazards: Callable[[], Hazards] = field(repr=False)

    @staticmethod
    def none(n: int) -> Synced:
        e = np.zeros(0, np.int32)  # the sweep's types: the encoding's kernel (`_automatic`) takes one
        return Synced(e, e, {}, np.zeros(n, np.int32), lambda: Hazards(e, e, e, e, [""]))

    @cached_property
    def what(self) -> Hazards:
        return self.hazards()

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
    what = synced.what
    operand = what.operand_names
    memory = {int(m): m.label for m in Memory}
    edges = []
    for j in range(len(synced.producer)):
        p, c = int(synced.producer[j]), int(synced.consumer[j])
        wait = synced.wait_on(stream, p)
        edges.append(sync.Edge(p, c, sync.KINDS[int(what.kind[j])], str(operand[what.producer_operand[j]]),
                               str(operand[what.consumer_operand[j]]), memory[int(what.memory[j])], wait))
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
    producer, consumer, *_ = sync.synchronise_rows(
        stream, gathered.issuers(), acc.ptr, acc.offset, acc.first, acc.end, acc.shape, acc.write, acc.shape_memory,
        acc.shape_itemsize, acc.shape_ndims, acc.shape_dims, hazards=False)
    del acc  # the largest table of the assembly: gone before encoding
    producers = np.flatnonzero(np.bincount(producer, minlength=gathered.n))  # sorted, each once
    waited = sorted({names[s] for s in distinct(stream[producers]).tolist()}, key=lambda s: (s.startswith("dma"), s))
    free = [s for s in range(num_semaphores) if s not in reserved]
    if len(waited) > len(free):
        raise AsmError(f"automatic synchronisation needs {len(waited)} semaphores, {len(free)} are free")
    sem_of = {names.index(s): sem for s, sem in zip(waited, free)}
    rank = np.zeros(gathered.n, np.int32)
    for s in distinct(stream[producers]).tolist():  # a stream's producers count 1, 2, ... in program order
        mine = producers[stream[producers] == s]
        rank[mine] = np.arange(1, len(mine) + 1, dtype=np.int32)
    return Synced(producer, consumer, sem_of, rank, lambda: _hazards(gathered, producer, consumer))


def _hazards(gathered: Gathered, producer: np.ndarray, consumer: np.ndarray) -> Hazards:
    """What each edge is for: (kind, producer operand, consumer operand, memory, operand names), from
    the access table made again (`Synced.hazards`)."""
    stream, _ = gathered.streams
    acc = access_rows(gathered)
    kind, prow, crow = sync.edge_hazards(
        producer, consumer, stream, gathered.issuers(), acc.ptr, acc.offset, acc.first, acc.end, acc.shape, acc.write,
        acc.shape_memory, acc.shape_itemsize, acc.shape_ndims, acc.shape_dims)
    # an edge's operands: the rows' places among their instructions' accesses, in their chunks' tables
    small = np.int8 if len(acc.operand_names) <= 127 else np.int16
    pa = acc.operand[gathered.chunk[producer], prow - acc.ptr[producer]].astype(small)
    ca = acc.operand[gathered.chunk[consumer], crow - acc.ptr[consumer]].astype(small)
    memory = acc.shape_memory.astype(np.int8)[acc.shape[prow]]
    return Hazards(kind, pa, ca, memory, acc.operand_names)


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
BLOCK = 1 << 14  # instructions encoded at a time (`_Layout.block`): bounds the temporaries, and the one buffer
# of a block's words that is all the decoder (`Blocks`) holds of them
TRIM_EVERY = 1 << 18  # instructions decoded between two hand-backs of freed heap (`give_back`, ~3 ms each)


def map_lanes(value: Any, fn: Callable[[np.ndarray], np.ndarray], constants: bool = True) -> Any:
    """`value` (an operand, or a whole Instruction) with fn applied to the values of each of its Lanes
    (those of constant operands too, unless `constants` is False)."""
    def each(v: Any) -> Any:
        return map_lanes(v, fn, constants)

    if isinstance(value, Lanes):
        return Lanes(fn(value.v))
    if isinstance(value, AccessPattern):
        return AccessPattern(value.memory, value.dtype, each(value.partition), each(value.partitions),
                             each(value.offset), each(value.dims))
    if isinstance(value, Immediate):
        return Immediate(each(value.value), value.dtype) if constants else value
    if isinstance(value, SemOp):
        return SemOp(value.sem, value.op, each(value.value))
    if isinstance(value, tuple):
        return tuple(each(v) for v in value)
    if isinstance(value, Instruction):
        return Instruction(value.spec, value.engine, {k: each(v) for k, v in value.operands.items()},
                           each(value.waits), each(value.signals), value.loc, value.given)
    return value


def take(value: Any, idx: np.ndarray) -> Any:
    """`value` (an operand, or a whole Instruction) restricted to the lanes `idx` (as `pick` is to one)."""
    return map_lanes(value, lambda v: v[idx])


def _int32_if_exact(v: np.ndarray) -> np.ndarray:
    if v.dtype == np.int32 or not len(v):
        return v
    small = v.astype(np.int32)
    return small if (small == v).all() else v


def narrow_lanes(instr: Instruction) -> Instruction:
    """`instr` with each of its Lanes held as int32 where every value fits (offsets, partitions, counts
    of an unrolled loop mostly do): once parsing is over nothing computes with them any more, and
    encoding writes them as the same integers (`ncsim.asm.fields.put_lanes`). Half the chunks' memory
    (8 of the 16 bytes per instruction of tools/bench_pipeline.py's program) at the assembler's peaks.
    Constants keep theirs (their encoding masks them as int64)."""
    return map_lanes(instr, _int32_if_exact, constants=False)


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


_ALL = np.zeros(0, np.bool_)  # `_automatic`'s `normal` when no instruction is built one by one


@numba.njit(cache=True, _nrt=False)
def _automatic(words, gs, starts, normal, consumer, producer, engine, head, fixed, ck, aw, signs, stream, sem_by_stream,
               rank):
    """The automatic waits and signals of instructions gs (one stream's, in program order), which `_place`
    put at `starts` with room for them: the j-th wait of each consumer, in the order its edges were
    found (consumer ascends, producer beside it), after the instruction's own waits, and its signal after
    its own signals. normal[k] is False for an instruction built one by one (its words are written
    apart); an empty `normal` means there is none. Every instruction of gs's engine between gs[0] and
    gs[-1] is in gs."""
    n = gs.shape[0]
    if n == 0:
        return
    first, last, own = gs[0], gs[n - 1], engine[gs[0]]
    lo = np.searchsorted(consumer, first)  # the first edge whose consumer is gs[0] or later
    k = 0
    previous = -1
    nth = 0
    for j in range(lo, consumer.shape[0]):
        c = consumer[j]
        if c > last:
            break
        if c != previous:
            previous = c
            nth = 0
        else:
            nth += 1
        if engine[c] != own:  # another engine's instruction between two of gs
            continue
        while k < n - 1 and gs[k] < c:
            k += 1
        if gs[k] != c or (normal.shape[0] and not normal[k]):  # (the first cannot be: see above)
            continue
        p = producer[j]
        words[starts[k] + head[ck[c]] + nth] = sem_by_stream[stream[p]] | (np.uint64(rank[p]) << np.uint64(32))
    for k in range(n):
        g = gs[k]
        if signs[g] == 1 and (normal.shape[0] == 0 or normal[k]):
            words[starts[k] + fixed[ck[g]] + aw[g]] = sem_by_stream[stream[g]] | (np.uint64(1) << np.uint64(32))


class _Layout:
    """What encoding needs per instruction besides the chunks, worked out once for the whole program:
    aw[g] its automatic waits (int32), signs[g] 1 when it signals its stream's semaphore (int8), per
    chunk its own waits, signals and fixed words; `blobs`, the instructions built one by one (more
    waits or signals than the encoding holds: `_one_by_one`); `korder`, the program-order instruction
    of each place in the streams (ENGINES order, program order within each), and `cuts`, where its
    blocks of at most BLOCK instructions start (a block never spans two streams). The words are then
    made a block at a time (`block`), into one array or a block's own."""

    def __init__(self, gathered: Gathered, synced: Synced):
        n = self.n = gathered.n
        self.gathered, self.synced = gathered, synced
        chunks = gathered.chunks
        self.stream, names = gathered.streams
        give_back(n)
        self.sem_by_stream = np.zeros(max(len(names), 1), np.uint64)
        for s, sem in synced.sem_of.items():
            self.sem_by_stream[s] = sem
        self.ck = ck = gathered.chunk
        step = BATCH  # instructions or edges per block of the whole-program passes below
        consumer, producer = synced.consumer, synced.producer
        if len(consumer) > 1 and (consumer[1:] < consumer[:-1]).any():  # the sweep lists them by consumer already
            order = np.argsort(consumer, kind="stable")
            consumer, producer = consumer[order], producer[order]
            del order
        self.consumer, self.producer = consumer, producer
        self.aw = aw = np.empty(n, np.int32)  # automatic waits per instruction
        for lo in range(0, n, step):
            # keys of consumer's own dtype: a Python list would make numpy convert all of consumer per call
            a, b = np.searchsorted(consumer, np.array([lo, lo + step], consumer.dtype))
            aw[lo:lo + step] = np.bincount(consumer[a:b] - lo, minlength=min(step, n - lo))
        self.signs = signs = np.zeros(n, np.int8)  # 1: it signals its stream's semaphore
        signs[synced.producer] = 1
        # per chunk: its own waits, its own signals, and where its signals start (after the fixed fields
        # and its own waits), in words
        self.own_w = own_w = np.array([len(c.instr.waits) for c in chunks], np.int32)
        self.own_s = own_s = np.array([len(c.instr.signals) for c in chunks], np.int32)
        self.head = np.array([layout(c.instr.spec.opcode)[1] // 8 for c in chunks], np.int32) + own_w
        self.fixed = self.head + own_s  # words of a chunk's instructions besides their automatic waits and signal
        self.blobs: dict[int, list[bytes]] = {}  # g -> its encoding, after the sem_waits made for its extra waits
        for lo in range(0, n, step):
            for g in (lo + np.flatnonzero(_special(np.arange(lo, min(n, lo + step)), ck, own_w, own_s, aw, signs))).tolist():
                self.blobs[g] = _one_by_one(gathered, synced, self.stream, g)
        self.engine = engine = gathered.engine
        self.korder = korder = np.empty(n, np.int32)
        per_engine = np.zeros(len(ENGINES) + 1, np.int64)
        done = 0
        for e in range(len(ENGINES)):
            for lo in range(0, n, step):
                mine = lo + np.flatnonzero(engine[lo:lo + step] == e)
                korder[done:done + len(mine)] = mine
                done += len(mine)
            per_engine[e + 1] = done
        self.cuts = distinct(np.concatenate([np.arange(int(per_engine[e]), int(per_engine[e + 1]), BLOCK)
                                             for e in range(len(ENGINES))] + [per_engine]))
        self.ascending: dict[int, bool] = {}  # per chunk: whether its positions ascend (`lanes`)
        self.where = np.array([c.where for c in chunks], np.int64).reshape(-1, 3)  # per chunk: file, line, col

    def blocks(self) -> list[tuple[int, int, int]]:
        """(lo, hi, engine): the blocks, korder[lo:hi], in order."""
        return [(lo, hi, int(self.engine[self.korder[lo]])) for lo, hi in itertools.pairwise(self.cuts.tolist())]

    @cached_property
    def block_words(self) -> list[int]:
        """The words of each block of `blocks()`."""
        return [int(self.sizes(self.korder[lo:hi]).sum()) for lo, hi, _ in self.blocks()]

    def sizes(self, gs: np.ndarray, special: np.ndarray | None = None) -> np.ndarray:
        """The words of instructions gs (int64); `special`: their `_special` mask, if already at hand."""
        sizes = (self.fixed[self.ck[gs]] + self.aw[gs] + self.signs[gs]).astype(np.int64)
        if self.blobs:
            for i in np.flatnonzero(self._special(gs) if special is None else special).tolist():
                sizes[i] = sum(len(b) for b in self.blobs[int(gs[i])]) // 8
        return sizes

    def _special(self, gs: np.ndarray) -> np.ndarray:
        return _special(gs, self.ck, self.own_w, self.own_s, self.aw, self.signs)

    def block(self, lo: int, hi: int, words: np.ndarray, base: int) -> int:
        """Encode instructions korder[lo:hi] (one stream's, in program order) into `words` from word
        `base`, back to back; returns the word after them. Each chunk's lanes among them are encoded in
        batches of BATCH (`encode_lanes`) and placed by `_place` with room for the automatic waits and
        signal, which are then written in: the j-th wait of each consumer in the order the edges were
        found, after the instruction's own; its signal after its own signals."""
        gs = self.korder[lo:hi]
        special = self._special(gs) if self.blobs else None
        sizes = self.sizes(gs, special)
        starts = np.empty(len(gs), np.int64)
        starts[0] = base
        np.cumsum(sizes[:-1], out=starts[1:])
        starts[1:] += base
        end = int(starts[-1] + sizes[-1])
        normal = None if special is None else ~special
        cks = self.ck[gs]
        order = np.argsort(cks, kind="stable")
        bounds = np.flatnonzero(np.diff(cks[order])) + 1
        for group in np.split(order, bounds):
            if normal is not None:
                group = group[normal[group]]
            if not len(group):
                continue
            ci = int(cks[group[0]])
            c = self.gathered.chunks[ci]
            w, s, hw = int(self.own_w[ci]), int(self.own_s[ci]), int(self.head[ci])  # hw: words before the automatic waits
            for b in range(0, len(group), BATCH):
                part_idx = group[b:b + BATCH]
                g = gs[part_idx]
                lanes_idx = self.lanes(ci, g)
                whole = len(lanes_idx) == c.n and self.ascending[ci]  # every lane, in lane order
                part = c.instr if whole else take(c.instr, lanes_idx)
                enc = encode_lanes(part, len(lanes_idx)).view(np.uint64)
                _place(words, enc, starts[part_idx], self.aw[g], self.signs[g], sizes[part_idx], hw, w, s)
                del enc
        _automatic(words, gs, starts, _ALL if normal is None else normal, self.consumer, self.producer, self.engine,
                   self.head, self.fixed, self.ck, self.aw, self.signs, self.stream, self.sem_by_stream, self.synced.rank)
        if self.blobs:
            for i in np.flatnonzero(~normal).tolist():
                raw = np.frombuffer(b"".join(self.blobs[int(gs[i])]), "<u8")
                words[starts[i]:starts[i] + len(raw)] = raw
        return end

    def lanes(self, ci: int, gs: np.ndarray) -> np.ndarray:
        """The lanes of chunk ci that instructions gs are: found in its positions where they ascend (a
        loop's iterations, the usual case), else through `Gathered.lane` (4 bytes per instruction)."""
        ascending = self.ascending.get(ci)
        if ascending is None:
            pos = self.gathered.chunks[ci].positions
            ascending = self.ascending[ci] = bool((pos[1:] > pos[:-1]).all())
        if ascending:
            return np.searchsorted(self.gathered.chunks[ci].positions, gs)
        return self.gathered.lane[gs]

    def done(self) -> None:
        """Drop what only the words needed (the streams and lanes are made again if the sync report asks)."""
        self.gathered.forget_streams()
        self.gathered.__dict__.pop("lane", None)
        del self.aw, self.signs, self.korder, self.stream

    def k_origin(self, lo: int, hi: int) -> np.ndarray:
        """The program-order instruction of each instruction of korder[lo:hi] as encoded (a blob's
        sem_waits repeat their instruction's)."""
        gs = self.korder[lo:hi]
        if not self.blobs:
            return gs
        made = np.ones(len(gs), np.int64)  # instructions each becomes (a blob's sem_waits come before it)
        for i in np.flatnonzero(self._special(gs)).tolist():
            made[i] = len(self.blobs[int(gs[i])])
        return np.repeat(gs, made)

    def places(self, gk: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(file, line, col) of instructions whose program-order instructions are gk."""
        where = self.where[self.ck[gk]]
        return where[:, 0], where[:, 1], where[:, 2]


class Blocks:
    """The program's words a block at a time (one stream's at most BLOCK instructions, in the streams'
    order), for a decoder that never holds them whole (`ncsim.program.Program.from_blocks`): iterating
    gives (engine, words) per block. Known before the first block: `count` instructions, `waits`
    waits, `signals` signals, `patterns` access patterns and `footprints` as the decoder counts them,
    `words` in all; after the last, `src` holds each instruction's source place (file, line, col). Per
    instruction it keeps 4 bytes of automatic waits, 1 of signals and 4 of place (`_Layout`)."""

    def __init__(self, gathered: Gathered, synced: Synced):
        self.lay = lay = _Layout(gathered, synced)
        self.blocks = lay.blocks()
        self.words = sum(lay.block_words)
        self.count = gathered.n + sum(len(parts) - 1 for parts in lay.blobs.values())
        chunks = gathered.chunks
        chunk_n = np.array([c.n for c in chunks], np.int64)
        ops = [[c.instr.operands[op.name] for op, _ in layout(c.instr.spec.opcode)[0] if isinstance(op.kind, APKind)]
               for c in chunks]
        # The decoder's counts, exactly (its columns are allocated for them): a sem_wait's condition and a
        # sem_signal's update are one more wait or signal (a sem_wait made for extra waits carries one of
        # its instruction's), and a pattern in memory (not absent, not a constant) has a footprint.
        cond = np.array([c.instr.mnemonic == "sem_wait" for c in chunks], np.int64)
        update = np.array([c.instr.mnemonic == "sem_signal" for c in chunks], np.int64)
        self.waits = int(chunk_n @ (lay.own_w + cond)) + len(lay.consumer)
        self.signals = int(chunk_n @ (lay.own_s + update)) + int(lay.signs.sum(dtype=np.int64))
        self.patterns = int(chunk_n @ np.array([len(o) for o in ops], np.int64))
        self.footprints = int(chunk_n @ np.array([sum(isinstance(v, AccessPattern) for v in o) for o in ops], np.int64))
        self.src: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def __iter__(self) -> Iterator[tuple[int, np.ndarray]]:
        lay = self.lay
        src = [np.empty(self.count, np.int32) for _ in range(3)]  # file, line, col
        sizes = lay.block_words
        buffer = words = np.empty(max(sizes, default=0), np.uint64)  # one for every block: no heap left behind
        k = 0
        trim_at = TRIM_EVERY
        for (lo, hi, e), size in zip(self.blocks, sizes):
            gk = lay.k_origin(lo, hi)
            for column, values in zip(src, lay.places(gk)):
                column[k:k + len(gk)] = values
            k += len(gk)
            words = buffer[:size]
            lay.block(lo, hi, words, 0)  # (it writes every word)
            yield e, words
            if k >= trim_at:  # what the blocks' temporaries left in the heap, back to the system
                give_back(self.count)
                trim_at += TRIM_EVERY
        del buffer, words
        lay.done()
        self.src = (src[0], src[1], src[2])


def encode_program(gathered: Gathered, synced: Synced) -> Encoded:
    """Encode every instruction into one array of words (see the module docstring), a block at a time.
    Besides the words, its peak memory is, per instruction, 4 bytes of automatic waits, 1 of signals
    and 4 of place (`_Layout`), then the object's line tables and origins (16)."""
    lay = _Layout(gathered, synced)
    blocks = lay.blocks()
    word_first = np.zeros(len(ENGINES) + 1, np.int64)
    for (_, _, e), size in zip(blocks, lay.block_words):
        word_first[e + 1] += size
    np.cumsum(word_first, out=word_first)
    words = np.zeros(int(word_first[-1]), np.uint64)
    at = 0
    for lo, hi, _ in blocks:
        at = lay.block(lo, hi, words, at)
    gk = lay.k_origin(0, gathered.n).astype(np.int32, copy=False)
    lay.done()
    k_count = len(gk)
    file = np.empty(k_count, np.int32)
    line = np.empty(k_count, np.uint32)
    col = np.empty(k_count, np.uint32)
    for lo in range(0, k_count, BATCH):
        file[lo:lo + BATCH], line[lo:lo + BATCH], col[lo:lo + BATCH] = lay.places(gk[lo:lo + BATCH])
    first = np.zeros(len(ENGINES) + 1, np.int64)
    for lo in range(0, k_count, BATCH):  # (bincount takes int64 indices: a block at a time)
        first[1:] += np.bincount(lay.engine[gk[lo:lo + BATCH]], minlength=len(ENGINES))
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


