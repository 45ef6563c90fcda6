"""A timed run as Chrome Trace Event JSON, for ui.perfetto.dev (or chrome://tracing).

    from ncsim.runtime.trace import write_trace
    write_trace(result, "giou.trace.json", obj)   # result = time_program(obj, ...)

Everything is built from the TimingResult's flat arrays after the run (the scheduler records
nothing for it). The file holds one process, "NeuronCore-v2", and these tracks (threads), in order:

- one per engine (Tensor, Vector, Scalar, GpSimd, Sync): a complete ("X") slice per instruction,
  named by its mnemonic; its args hold `instr` (engine[index]), `at` (file:line:col), `source`
  (the source line), `asm` (the instruction as assembly text), `cost` (its formula with the
  numbers), `sem_wait_ns` and `port_wait_ns`, and `start_tick` / `end_tick` (exact, see below);
- with gpsimd_calls in the run, one per GpSimd core, "GpSimd core <N>": a slice per call from the
  call's start for that core's cycles (args: instr, cycles); the GpSimd engine's slice of the call
  lasts until its slowest core ends (docs/gpsimd.md#cycles);
- one per DMA queue in use, "DMA q<N>": a slice per dma_copy from the moment its first piece starts
  moving to the moment its last piece ends (args: bytes, pieces, achieved GB/s, `queued_ns` from the
  issue to the first piece). Transfers of one queue can overlap in time (their pieces run on
  different DMA engines); an overlapping one goes on an extra track "DMA q<N> (2)", ... (slices of
  one track must nest or be disjoint);
- one per DMA engine in use, "DMA engine <N>": a slice per transfer piece (bytes, src->dst memory,
  achieved GB/s); an engine moves one piece at a time, so these never overlap. Only up to
  DMA_PIECES_MAX pieces (a million): a larger run has no DMA engine tracks, and otherData's "dma" says
  so (the transfer slices, with their piece counts, remain);
- flows ("s"/"f" pairs, one id per semaphore edge of the result): from the slice whose semaphore
  update made a wait hold (the signalling instruction, or for a dma_copy its transfer slice: its
  update applies when the last piece ends) to the instruction that waited (`bp: "e"`: bound to the
  enclosing slice). Perfetto draws them from the end of the first slice to the start of the second;
- counters: "HBM bandwidth" in GB/s (the result's hbm_time/hbm_rate step function), and
  "SBUF live bytes" / "PSUM live bytes" (see `live_bytes`).

Time. Perfetto stores time in integer nanoseconds and rounds `ts` and `dur` (microseconds) to the
nanosecond separately; slices of one track whose rounded ends passed the next rounded start would be
dropped as overlapping. So `ts` is the start exact to the picosecond (a tick of 5.6 GHz is 178.57
ps; round(ts * 5600) is the tick) and `dur` is the end rounded as Perfetto rounds, minus the start
rounded likewise, in whole nanoseconds: in Perfetto every slice ends at its end rounded to the ns, and
back-to-back slices stay back to back. The exact ticks are in `start_tick` / `end_tick`.

Instructions that take no engine time (a dma_copy's issue, sem_wait, sem_signal) are slices of zero
duration; several at one nanosecond on one track show nested in Perfetto, which stacks them like
instants. Events are written in the order in which Perfetto's importer reads them (see _chunks), so
each flow binds to its own slice even among slices of one nanosecond; tests/runtime/test_trace.py
replays the importer's rules on every program.

Determinism: that order is total (time, then fixed keys, then order of construction), numbers have
fixed formats, and nothing depends on the host (no host times, no absolute paths: source places are
the paths the object recorded; ASCII output). Two runs of the same program give identical bytes.

Size and speed. The lines are rendered by a numba kernel (_render) from integer columns and a table
of strings (see _Events), copying strings 8 bytes at a time; the events are put in order by a
counting sort and one stable sort of a single key (_event_order); write_trace writes each chunk in a
second thread while the next is rendered, and before that, while the columns are built, that thread
fills the file with zeros as far as the events surely reach (a new file's pages are most of what
writing costs; overwriting them is cheap); the live-bytes counters and the events' order are worked
out in another thread while the main thread builds the other columns and lays them out. What stays
in Python is per distinct value (places, formulas, rates) and, up to FULL_ARGS_MAX instructions, the
`asm` and `cost` of every instruction slice (about 3 us each). Beyond FULL_ARGS_MAX the instruction
slices leave those two out, and beyond DMA_PIECES_MAX pieces there are no DMA engine tracks;
otherData's "args" and "dma" say so. Bytes: about 330 per instruction slice without asm and cost
(with a source line of 40 characters), 160 per DMA piece, 220 per transfer, 93 per flow event (two
per semaphore edge), 87 per counter point. programs/giou.s (560 instructions, 768 pieces): 0.5 MB in
0.02 s. tools/bench_pipeline.py at 10^5 (100,384 instructions, 661,504 pieces, all kept): 181 MB in
0.6-0.8 s of CPU. At 10^6 (999,616 instructions, 6,585,856 pieces): 777 MB (819 MB with the
benchmark's longer path) where it was 1,750-1,870 MB before DMA_PIECES_MAX; on the shared 2-core
machine, never idle while this was measured, the benchmark's trace phase took 4.5 s against 22.5 s
for the code before (load 2.6), and in one process, alternating, 4.8-6.7 s against 23.9 s (load 4;
CPU 2.5-4.4 s against 13.6 s, of which 1-2.8 s against 6.9 s in the system, mostly a new file's
pages). Source places come from the timed program's source columns (one lookup per distinct place).
The text of each instruction is made from the program's arrays (`result.instruction(k)`): once per
body and distinct value of its constants, the rest filled in from the footprints and semaphore
columns. ui.perfetto.dev loads a JSON trace into the browser's memory and struggles beyond a few
hundred MB (`LARGE_TRACE_BYTES`, compare with what write_trace returns): for such runs use
--timeline, or Perfetto's trace_processor.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ncsim import isa
from ncsim.arrays import distinct
from ncsim.asm.fields import SIGNAL_OPS, WAIT_OPS, SemOp
from ncsim.asm.instruction import Instruction
from ncsim.asm.objfile import ObjectFile
from ncsim.memory.access import AccessPattern, Memory
from ncsim.runtime.timing import ACCESS_READ, ACCESS_WRITE, ENGINES, TimingResult

PROCESS = "NeuronCore-v2"
PID = 1
ENGINE_TRACKS = ("Tensor", "Vector", "Scalar", "GpSimd", "Sync")  # display names of ENGINES
LARGE_TRACE_BYTES = 300 * 2**20  # above this, ui.perfetto.dev struggles to open a JSON trace
# Instructions beyond which the instruction slices leave out `asm` and `cost` (otherData's "args" then
# says so): their text is made in Python, about 3 us an instruction, where the rest of the trace is
# rendered by numba.
FULL_ARGS_MAX = 100_000
# DMA pieces beyond which the trace has no "DMA engine <N>" tracks (no slice per piece; otherData's
# "dma" then says so): the transfer slices on the queue tracks remain, with their piece counts. A piece
# slice is about 160 bytes of JSON, and a large run has several per dma_copy (tools/bench_pipeline.py
# at 10^6 instructions: 6.6M pieces, 1.05 GB of its 1.75 GB trace).
DMA_PIECES_MAX = 1_000_000
# Footprint cells expanded for the live-bytes counters, at most (see live_bytes): beyond this the byte
# boundaries are coarsened, which over-counts partly used cells but bounds time and memory.
_LIVE_CELLS_MAX = 4_000_000


# --------------------------------------------------------------------------- time


def ticks_to_ps(ticks: np.ndarray | int, tick_hz: int) -> np.ndarray:
    """Ticks as whole picoseconds, rounded to nearest (exact integer arithmetic)."""
    t = np.asarray(ticks, np.int64)
    g = math.gcd(10**12, tick_hz)
    num, den = 10**12 // g, tick_hz // g  # 1250 / 7 at 5.6 GHz
    if t.size and int(t.max()) * 2 * num + den >= 2**62:  # would overflow int64: Python integers
        return np.array([(int(x) * 2 * num + den) // (2 * den) for x in t.ravel().tolist()],
                        np.int64).reshape(t.shape)
    return (t * (2 * num) + den) // (2 * den)


def perfetto_ns(ps: np.ndarray) -> np.ndarray:
    """The integer ns Perfetto makes of a `ts` written as ps / 10**6 us: llround(us * 1000.0).

    In integers: ps rounded to the ns, half up; a tie (ps % 1000 == 500) and values that a double no
    longer holds to the ps take the floating-point formula, which decides them as Perfetto does (away
    from ties a double's error, below 10**-6 ns here, cannot change the rounding). One numba pass."""
    ps = np.asarray(ps, np.int64)
    return _perfetto_ns(ps.reshape(-1)).reshape(ps.shape)


@numba.njit(cache=True, nogil=True)
def _perfetto_ns(ps):
    out = np.empty(ps.shape[0], np.int64)
    for i in range(ps.shape[0]):
        p = ps[i]
        q = p // 1000
        rem = p - q * 1000
        if rem == 500 or p >= 2**50 or p < 0:
            x = (p / 1e6) * 1000.0
            f = np.floor(x)
            out[i] = np.int64(f + (1.0 if x - f >= 0.5 else 0.0))
        else:
            out[i] = q + (1 if rem > 500 else 0)
    return out


# --------------------------------------------------------------------------- derived tables


@dataclass(frozen=True)
class Transfers:
    """One row per dma_copy that moved data: its instruction, span and where its pieces ran."""

    instr: np.ndarray  # k of the dma_copy
    start: np.ndarray  # ticks: its first piece started
    end: np.ndarray  # ticks: its last piece ended (== done[k])
    queue: np.ndarray
    bytes: np.ndarray
    pieces: np.ndarray
    src: np.ndarray  # Memory codes (of the first piece)
    dst: np.ndarray


def transfers(result: TimingResult) -> Transfers:
    """Read per transfer: its times from the class pieces, the rest from its body's rows of the piece
    table (no column as long as the pieces: 6.6 million of them at 10^6 instructions)."""
    counts = np.diff(result.piece_ptr)
    ks = np.nonzero(counts > 0)[0]
    if len(ks) == 0:
        z = np.zeros(0, np.int64)
        return Transfers(z, z, z, z, z, z, z, z)
    body_ptr, nbytes = result.body_pieces("bytes")
    body_bytes = np.concatenate(([0], np.cumsum(nbytes, dtype=np.int64)))
    body_bytes = body_bytes[body_ptr[1:]] - body_bytes[body_ptr[:-1]]
    b = result.body[ks]
    row = body_ptr[b]  # each transfer's first piece's row
    return Transfers(
        instr=ks,
        start=np.minimum.reduceat(result.class_start, result.class_ptr[ks]),  # (the pieces' times, fewer)
        end=np.maximum.reduceat(result.class_end, result.class_ptr[ks]),
        queue=result.body_pieces("queue")[1][row].astype(np.int64),
        bytes=body_bytes[b].astype(np.int64),
        pieces=counts[ks],
        src=result.body_pieces("src")[1][row].astype(np.int64),
        dst=result.body_pieces("dst")[1][row].astype(np.int64),
    )


def kernel_name(result: TimingResult, obj: ObjectFile | None, default: str) -> str:
    """The kernel's name for a trace or picture of the run: `obj`'s, else the timed program's unless
    it was built from Python Instructions (it then has none of its own), else `default`."""
    if obj is not None:
        return obj.kernel
    prog = result.program
    return prog.kernel if prog._given is None else default


def lanes(queue: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Lane of each interval inside its queue: the first lane whose last interval ended by `start`
    (greedy in order of start, which uses the fewest lanes); intervals of one lane never overlap."""
    order = np.lexsort((np.asarray(start, np.int64), np.asarray(queue, np.int64)))
    return _lanes(order, np.asarray(queue, np.int64), np.asarray(start, np.int64), np.asarray(end, np.int64))


@numba.njit(cache=True)
def _lanes(order, queue, start, end):
    lane = np.zeros(order.shape[0], np.int64)
    ends = np.empty(order.shape[0], np.int64)  # the end of the last interval of each lane of the queue
    used = 0
    for x in range(order.shape[0]):
        i = order[x]
        if x == 0 or queue[i] != queue[order[x - 1]]:
            used = 0  # a new queue
        j = 0
        while j < used and ends[j] > start[i]:
            j += 1
        if j == used:
            used += 1
        ends[j] = end[i]
        lane[i] = j
    return lane


def live_bytes(result: TimingResult, memory: Memory, tr: Transfers | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Bytes of `memory` (SBUF or PSUM) holding a value still to be read, as a step function:
    (times in ticks, bytes from each time until the next).

    Built from the footprints (memory, partitions, byte range [lo, hi) per partition) of every
    operand. The partition and byte boundaries of all footprints cut the memory into cells; a cell's
    accesses, in order of start time, split into values: a write that does not also read the cell
    starts a new one. A value is live from the start of its first access (for a dma_copy, from its
    first piece's start) to the end of its last (for a dma_copy, when its last piece ends): from the
    write that produces it to the last read that consumes it, so a double-buffered slot is dead
    between its last read and its next load. Footprints of strided operands are their envelopes
    (the gaps count). Past `_LIVE_CELLS_MAX` cells the byte boundaries are coarsened (over-counts).
    `tr`: transfers(result), if the caller has it.
    """
    rows = np.nonzero(result.fp_memory == int(memory))[0]
    if len(rows) == 0:
        return np.zeros(1, np.int64), np.zeros(1, np.int64)
    k = np.repeat(np.arange(result.count), np.diff(result.fp_ptr))[rows]
    p0 = result.fp_partition[rows].astype(np.int64)
    p1 = p0 + result.fp_partitions[rows]
    lo = result.fp_lo[rows].astype(np.int64)
    hi = result.fp_hi[rows].astype(np.int64)
    pb = distinct(np.concatenate((p0, p1)))
    i0, i1 = np.searchsorted(pb, p0), np.searchsorted(pb, p1)
    granule = 1
    while True:
        glo, ghi = lo // granule * granule, -(-hi // granule) * granule
        bb = distinct(np.concatenate((glo, ghi)))
        j0, j1 = np.searchsorted(bb, glo), np.searchsorted(bb, ghi)
        nj = j1 - j0
        n = (i1 - i0) * nj
        if int(n.sum()) <= _LIVE_CELLS_MAX:
            break
        granule *= 4
    t = transfers(result) if tr is None else tr
    first_moved = result.start.copy()
    first_moved[t.instr] = t.start
    begin = first_moved[k]
    acc = result.fp_access[rows]
    pure_write = (acc & ACCESS_WRITE).astype(bool) & ~(acc & ACCESS_READ).astype(bool)
    # One entry per (footprint, cell), by cell, then start, then instruction (numba: a lexsort of the
    # entries took 0.1 s of 0.15 at 303 168 instructions).
    seg_begin, seg_end, band, j = _live_segments(np.argsort(begin, kind="stable"), i0, i1, j0, j1, len(bb) - 1,
                                                 begin, np.maximum(result.end, result.done)[k], pure_write)
    seg_bytes = np.diff(pb)[band] * np.diff(bb)[j]
    times = np.concatenate((seg_begin, seg_end, [0]))
    delta = np.concatenate((seg_bytes, -seg_bytes, [0]))
    o = np.argsort(times, kind="stable")
    times, delta = times[o], delta[o]
    heads = np.nonzero(np.concatenate(([True], times[1:] != times[:-1])))[0]
    times, level = times[heads], np.cumsum(np.add.reduceat(delta, heads))
    keep = np.concatenate(([True], level[1:] != level[:-1]))  # only the changes
    return times[keep], level[keep]


@numba.njit(cache=True, nogil=True)
def _live_segments(by_time, i0, i1, j0, j1, n_j, begin, finish, pure_write):
    """The values of live_bytes: footprint f covers the cells (partition band i, byte interval j) of
    [i0[f], i1[f]) x [j0[f], j1[f]); its entries, in order of time (by_time: start, then instruction),
    sorted stably by cell (j, then i: two counting sorts), split at each new cell or pure write.
    Returns (begin, end, band, interval) of each value."""
    total = 0
    n_i = 0
    for f in range(i0.shape[0]):
        total += (i1[f] - i0[f]) * (j1[f] - j0[f])
        n_i = max(n_i, i1[f])
    ent_f = np.empty(total, np.int64)
    ent_i = np.empty(total, np.int64)
    ent_j = np.empty(total, np.int64)
    e = 0
    for f in by_time:
        for i in range(i0[f], i1[f]):
            for j in range(j0[f], j1[f]):
                ent_f[e], ent_i[e], ent_j[e] = f, i, j
                e += 1
    by_j = np.empty(total, np.int64)
    start = np.zeros(n_j + 1, np.int64)
    for e in range(total):
        start[ent_j[e] + 1] += 1
    for j in range(n_j):
        start[j + 1] += start[j]
    for e in range(total):
        by_j[start[ent_j[e]]] = e
        start[ent_j[e]] += 1
    order = np.empty(total, np.int64)
    start = np.zeros(n_i + 1, np.int64)
    for e in range(total):
        start[ent_i[e] + 1] += 1
    for i in range(n_i):
        start[i + 1] += start[i]
    for x in range(total):
        e = by_j[x]
        order[start[ent_i[e]]] = e
        start[ent_i[e]] += 1
    seg_begin = np.empty(total, np.int64)
    seg_end = np.empty(total, np.int64)
    seg_i = np.empty(total, np.int64)
    seg_j = np.empty(total, np.int64)
    n = -1
    for x in range(total):
        e = order[x]
        f = ent_f[e]
        if n < 0 or pure_write[f] or ent_i[e] != seg_i[n] or ent_j[e] != seg_j[n]:
            n += 1
            seg_begin[n], seg_end[n], seg_i[n], seg_j[n] = begin[f], finish[f], ent_i[e], ent_j[e]
        else:
            seg_begin[n] = min(seg_begin[n], begin[f])
            seg_end[n] = max(seg_end[n], finish[f])
    return seg_begin[:n + 1], seg_end[:n + 1], seg_i[:n + 1], seg_j[:n + 1]


# --------------------------------------------------------------------------- text of instructions

_SENTINEL = 9_000_000_000_000_000_000  # 19 digits: byte offsets put into a template, found in its text
_SEM_SENTINEL = SemOp(987_654_321, "#", 0)
_IN_MEMORY = (Memory.SBUF, Memory.PSUM, Memory.HBM)  # access patterns with a footprint


class _Template:
    """The text of every instruction of one body: the body's text with its access patterns' byte
    offsets and its semaphores cut out, filled in from the result's footprints and semaphore lists.

    Instructions of a body differ only there and in constants (timing.py: the body is every byte but
    those), so one decode per body replaces one per instruction (measured: 48 us per decode and
    print). A body with constant operands has one template per distinct value of its constants'
    bits (the program's ap_value column), usually a handful."""

    def __init__(self, parts: list[str], aps: int, sem_operand: bool, sep: str):
        self.parts, self.aps, self.sem_operand, self.sep = parts, aps, sem_operand, sep

    @classmethod
    def of(cls, instr: Instruction) -> _Template | None:
        ops = dict(instr.operands)
        aps, sem_operand = 0, False
        for operand in instr.spec.operands:
            value = ops[operand.name]
            if isinstance(value, AccessPattern) and value.memory in _IN_MEMORY:
                ops[operand.name] = dataclasses.replace(value, offset=_SENTINEL + aps)
                aps += 1
            elif isinstance(value, SemOp):
                ops[operand.name] = _SEM_SENTINEL
                sem_operand = True
        text = str(dataclasses.replace(instr, operands=ops, waits=(), signals=()))
        parts = []
        for mark in [f"@{_SENTINEL + j}" for j in range(aps)] + ([str(_SEM_SENTINEL)] if sem_operand else []):
            if text.count(mark) != 1:
                return None  # printed in a way this does not know
            head, text = text.split(mark)
            parts.append(head + ("@" if mark.startswith("@") else ""))
        parts.append(text)
        # The semaphore lists follow the operands after ", ", or the bare mnemonic after " ".
        sep = ", " if " " in str(dataclasses.replace(instr, waits=(), signals=())) else " "
        return cls(parts, aps, sem_operand, sep)

    def fill(self, offsets: list[int], sem: str | None, waits: str, signals: str) -> str:
        fills = [str(o) for o in offsets] + ([sem] if self.sem_operand else [])
        out = self.parts[0] + "".join(f + p for f, p in zip(fills, self.parts[1:], strict=True))
        extra = [x for x in (waits and "wait=[" + waits + "]", signals and "signal=[" + signals + "]") if x]
        return out + self.sep + ", ".join(extra) if extra else out


def _sem_texts(sem: np.ndarray, op: np.ndarray, value: np.ndarray, ops: Sequence[str]) -> list[str]:
    """Each row of a semaphore list as text (`s3>=2`, `s4+=1`), as SemOp prints it."""
    return [f"s{s}{ops[o]}{v}" for s, o, v in zip(sem.tolist(), op.tolist(), value.tolist(), strict=True)]


def _constant_groups(result: TimingResult, ks: np.ndarray) -> list[np.ndarray]:
    """The instructions `ks` of one body split by the bits of their constant operands (all of them
    together, if the body has none), in order of first appearance."""
    prog = result.program
    cols = [prog.ap_value[prog.ap_ptr[ks] + j] for j in prog.constant_slots(int(ks[0]))]
    if not cols:
        return [ks]
    _, first, inverse = np.unique(np.stack(cols, 1), axis=0, return_index=True, return_inverse=True)
    rank = np.empty(len(first), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))  # groups in order of first appearance
    group = rank[inverse.reshape(-1)]
    order = np.argsort(group, kind="stable")
    return np.split(ks[order], np.flatnonzero(np.diff(group[order])) + 1)


def instruction_texts(result: TimingResult) -> list[str]:
    """str(result.instruction(k)) for every k, decoding one instruction per body (per distinct value
    of its constants) where it can."""
    n = result.count
    texts: list[str] = [""] * n
    waits = _sem_texts(result.wait_sem, result.wait_op, result.wait_value, WAIT_OPS)
    signals = _sem_texts(result.signal_sem, result.signal_op, result.signal_value, SIGNAL_OPS)
    wptr, sptr, fptr = result.wait_ptr.tolist(), result.signal_ptr.tolist(), result.fp_ptr.tolist()
    flo = result.fp_lo.tolist()
    order = np.argsort(result.body, kind="stable")
    bounds = np.nonzero(np.diff(result.body[order]))[0] + 1
    for body_ks in np.split(order, bounds):
        if len(body_ks) == 0:
            continue
        for ks in _constant_groups(result, body_ks):
            _fill_texts(result, ks.tolist(), texts, waits, signals, wptr, sptr, fptr, flo)
    return texts


def _fill_texts(result: TimingResult, ks: list[int], texts: list[str], waits: list[str], signals: list[str],
                wptr: list[int], sptr: list[int], fptr: list[int], flo: list[int]) -> None:
    """texts[k] for instructions `ks` that print alike but for offsets and semaphores."""
    k0 = ks[0]
    first = result.instruction(k0)
    tpl = _Template.of(first)
    base = flo[fptr[k0]:fptr[k0 + 1]]
    if tpl is None or len(base) != tpl.aps:
        for k in ks:
            texts[k] = str(result.instruction(k))
        return
    offsets0 = [v.offset for v in (first.operands[o.name] for o in first.spec.operands)
                if isinstance(v, AccessPattern) and v.memory in _IN_MEMORY]
    for k in ks:
        lo = flo[fptr[k]:fptr[k + 1]]
        offsets = [o + a - b for o, a, b in zip(offsets0, lo, base, strict=True)]
        w = waits[wptr[k]:wptr[k + 1]]
        s = signals[sptr[k]:sptr[k + 1]]
        sem = None
        if tpl.sem_operand:  # sem_wait's condition is its last wait, sem_signal's update its last signal
            if first.mnemonic == "sem_wait":
                sem, w = w[-1], w[:-1]
            else:
                sem, s = s[-1], s[:-1]
        texts[k] = tpl.fill(offsets, sem, ", ".join(w), ", ".join(s))
    # Checked against the decoder on the first and last instructions; the decoder wins.
    if texts[k0] != str(first) or texts[ks[-1]] != str(result.instruction(ks[-1])):
        for k in ks:
            texts[k] = str(result.instruction(k))


def _places(result: TimingResult) -> tuple[list[str], list[str], np.ndarray]:
    """(at, source, place): the distinct (file:line:col, source line) of the instructions, as
    result.loc(k) gives them, and the index of each instruction's (0: none). Read from the program's
    source columns, one lookup per distinct place."""
    prog = result.program
    n = result.count
    if prog._given is not None:  # instructions built in Python: their own SourceLocs
        at, src = [""] * (n + 1), [""] * (n + 1)
        for k in range(n):
            loc = result.loc(k)
            if loc is not None:
                at[k + 1], src[k + 1] = str(loc), loc.text.strip()
        return at, src, np.arange(1, n + 1)
    place = np.zeros(n, np.int64)  # 0: no source place
    file, line, col = (np.asarray(c, np.int64) for c in (prog.src_file, prog.src_line, prog.src_col))
    has = file >= 0
    if n and int(file.max()) < 2**20 and int(line.max()) < 2**26 and int(col.max()) < 2**16 \
            and int(line.min()) >= 0 and int(col.min()) >= 0:  # one int64 key per place: 1-d unique
        key = (file << 42) | (line << 16) | col
        packed, inverse = np.unique(key[has], return_inverse=True)
        places = np.stack((packed >> 42, (packed >> 16) & (2**26 - 1), packed & (2**16 - 1)), 1)
    else:
        places, inverse = np.unique(np.stack((file, line, col), 1)[has], axis=0, return_inverse=True)
    at, src = [""], [""]
    for f, line, col in places.tolist():
        path = prog.files[f] if f < len(prog.files) else prog.name
        at.append(f"{path}:{line}:{col}")
        src.append(prog.source_line(path, line).strip())
    place[has] = 1 + inverse.reshape(-1)
    return at, src, place


def _formulas(result: TimingResult) -> tuple[list[str], np.ndarray]:
    """(texts, index): result.formula(k) is texts[index[k]], computed once per distinct (body, extra
    flags, extra ticks)."""
    if result.count == 0:
        return [], np.zeros(0, np.int64)
    keys = np.stack((result.body, result.extra_flags.astype(np.int64), result.extra_ticks.astype(np.int64)), 1)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    return [result.formula(int(k)) for k in first.tolist()], inverse.reshape(-1)


# --------------------------------------------------------------------------- the trace


def trace_text(result: TimingResult, obj: ObjectFile | None = None) -> str:
    """The trace as JSON text (what write_trace writes). `obj`: the timed ObjectFile, for the kernel's
    name and a fast source-line lookup; without it the places come from result.loc (slower)."""
    return b"".join(bytes(chunk) for chunk in _chunks(result, obj)).decode("ascii")


def trace_dict(result: TimingResult, obj: ObjectFile | None = None) -> dict:
    """The trace as a JSON-able dict: {"otherData": {...}, "traceEvents": [...]}."""
    return json.loads(trace_text(result, obj))


def write_trace(result: TimingResult, path: str | Path, obj: ObjectFile | None = None) -> int:
    """Write the trace to `path`; returns its size in bytes (compare with LARGE_TRACE_BYTES).

    A second thread writes each chunk while the next one is rendered (into the other of two buffers;
    the numba kernel releases the GIL, and so does the file's write). Before that, while the events
    are being built, the same thread fills the file with zeros up to the size they will surely take
    (_Prefill), and the text overwrites them: a file's new pages are what writing costs (on the
    project's machine 1.5-1.9 s of system time for 776 MB, against 0.12 s to overwrite them)."""
    size = 0
    with open(path, "wb", buffering=0) as f, ThreadPoolExecutor(1) as writer:
        prefill = _Prefill(f)
        regular = stat.S_ISREG(os.fstat(f.fileno()).st_mode)  # not a pipe or a device (/dev/null)
        writes = [writer.submit(prefill.run)] if regular else []
        rendered: list[Future] = []  # writes of chunks in the render buffers
        try:
            for chunk in _chunks(result, obj, buffers=2, reserve=prefill.reserve):
                if not isinstance(chunk, bytes):
                    prefill.stop()  # rendering has begun: the writes queue up behind the filling
                writes.append(writer.submit(_write_all, f, chunk))
                size += len(chunk)
                if not isinstance(chunk, bytes):
                    rendered.append(writes[-1])
                    if len(rendered) > 1:
                        rendered.pop(0).result()  # the buffer the next chunk is rendered into is free again
        finally:
            prefill.stop()
        for w in writes:
            w.result()
        if regular:
            f.truncate(size)  # zeros filled past the end, if any
    return size


def _write_all(f, chunk) -> None:
    view = memoryview(chunk)
    while view:
        view = view[f.write(view):]


class _Prefill:
    """Zeros written to the start of a file, as far as reserve() allows, until stop()."""

    def __init__(self, f):
        self.f = f
        self.allowed = 0
        self.done = 0  # bytes filled
        self.stopped = False
        self.cond = threading.Condition()

    def reserve(self, nbytes: int) -> None:
        with self.cond:
            self.allowed += nbytes
            self.cond.notify()

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify()

    def run(self) -> None:
        zeros = bytes(1 << 22)
        while True:
            with self.cond:
                while not self.stopped and self.allowed <= self.done:
                    self.cond.wait()
                if self.stopped:
                    return
                n = min(len(zeros), self.allowed - self.done)
            self.done += os.pwrite(self.f.fileno(), zeros[:n], self.done)


# Events are rendered by a numba kernel from columns of integers and a table of strings ("snippets":
# JSON-quoted names and places, fixed text, numbers formatted once per distinct value), following a
# small program per kind of event. Ops: (_LIT, snippet), (_STR, column holding a snippet), (_INT,
# column), (_FIX3, column): x // 1000 "." x % 1000 in 3 digits, (_FIX6, column): likewise with 10**6.
_LIT, _STR, _INT, _FIX3, _FIX6 = range(5)
_CHUNK_BYTES = 1 << 24


class _Events:
    """The events of the trace, as kinds of event each with a format and columns."""

    def __init__(self, reserve: Callable[[int], None] | None = None):
        self.reserve = reserve  # told, as each kind is added, bytes that its lines take at least
        self.snippets: list[bytes] = []
        self.snippet_of: dict[bytes, int] = {}
        self.ops: list[list[tuple[int, int]]] = []
        self.columns: list[list[np.ndarray]] = []
        self.keys: list[tuple[np.ndarray, ...]] = []

    def snippet(self, text: str) -> int:
        b = text.encode("ascii")
        i = self.snippet_of.get(b)
        if i is None:
            i = self.snippet_of[b] = len(self.snippets)
            self.snippets.append(b)
        return i

    def snippets_of(self, texts: list[str]) -> np.ndarray:
        return np.array([self.snippet(t) for t in texts], np.int64).reshape(-1)

    def add(self, fmt: list, columns: list[np.ndarray], ps: np.ndarray, dur: np.ndarray | int, order: np.ndarray,
            slices: bool) -> None:
        """Events of one format: `fmt` is a list of literal strings and (op, column) pairs. They are at
        `ps`, of (or bound to) slices lasting `dur` ns, tie-broken by `order` (then by row)."""
        ops = []
        for item in fmt:
            ops.append((_LIT, self.snippet(item)) if isinstance(item, str) else item)
        self.ops.append(ops)
        rows = len(ps)
        self.columns.append([np.broadcast_to(np.asarray(c, np.int64), (rows,)) for c in columns])
        d = np.broadcast_to(np.asarray(dur, np.int64), (rows,))
        self.keys.append((perfetto_ns(ps), d, np.asarray(slices), np.broadcast_to(np.asarray(order, np.int64), (rows,))))
        if self.reserve is not None and rows:  # ",\n", the literals, a digit per number and the strings
            lengths = np.array([len(b) for b in self.snippets], np.int64)
            least = rows * (2 + sum(int(lengths[a]) if code == _LIT else 1 for code, a in ops if code != _STR))
            self.reserve(least + sum(int(lengths[self.columns[-1][a]].sum()) for code, a in ops if code == _STR))

    def order(self) -> np.ndarray:
        """The events in the order Perfetto's importer reads them: by ns, then slices of positive
        duration (longest first), then all else by the duration of the slice they belong to (longest
        first), then by `order`, then in order of addition: a stable counting sort by `order` (numba,
        _event_order), then a stable sort by one key of (ns, duration class); a lexsort if that key
        would not fit in 63 bits."""
        ns = np.concatenate([k[0] for k in self.keys]) if self.keys else np.zeros(0, np.int64)
        if len(ns) == 0:
            return ns
        d = np.concatenate([k[1] for k in self.keys])
        slices = np.repeat(np.array([bool(k[2]) for k in self.keys]), [len(k[0]) for k in self.keys])
        top = int(d.max(initial=0))
        order = np.concatenate([k[3] for k in self.keys])
        by_order, key = _event_order(ns, d, slices, order, top)
        if int(ns.min()) >= 0 and int(d.min()) >= 0 and (int(ns.max()) + 1) * (2 * top + 1) < 2**63:
            return by_order[np.argsort(key, kind="stable")]  # timsort: runs of events already in order
        cls = np.where(slices & (d > 0), top - d, 2 * top - d)  # the key overflowed: three keys
        seq = np.empty(len(ns), np.int64)
        seq[by_order] = np.arange(len(ns))
        return np.lexsort((seq, cls, ns))

    def render(self, events: np.ndarray | Future, buffers: int = 1):
        """The events' lines in the order given (or by a future, worked out meanwhile), each after
        ",\\n", in chunks: views of `buffers` buffers taken in turn, each chunk overwritten by the one
        `buffers` later."""
        snip = np.frombuffer(b"".join(self.snippets) + bytes(8), np.uint8)  # slack for _move8
        snip_ptr = np.concatenate(([0], np.cumsum([len(s) for s in self.snippets], dtype=np.int64)))
        ops_ptr = np.concatenate(([0], np.cumsum([len(o) for o in self.ops]))).astype(np.int64)
        ops = np.array([x for o in self.ops for x in o], np.int64).reshape(-1, 2)
        # Column by column, each kind's fields in a block of rows: one contiguous copy per column (laid
        # out event by event, the copies were strided, 0.2-0.7 s of CPU at 10^6 instructions; the
        # kernel reads either as fast).
        sizes = np.array([len(k[0]) for k in self.keys], np.int64)
        width = np.array([len(cols) for cols in self.columns], np.int64)
        base = np.concatenate(([0], np.cumsum(width * sizes))).astype(np.int64)
        data = np.empty(int(base[-1]), np.int64)
        for g, cols in enumerate(self.columns):
            block = data[base[g]:base[g + 1]].reshape(len(cols), int(sizes[g]))
            for c, col in enumerate(cols):
                block[c] = col
        group_first = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        lengths = np.diff(snip_ptr)
        bound = np.array([2 + sum(int(lengths[arg]) if code == _LIT else
                                  int(lengths[cols[arg]].max(initial=0)) if code == _STR else 28
                                  for code, arg in o) for o, cols in zip(self.ops, self.columns, strict=True)],
                         np.int64).reshape(-1)
        bufs = [np.empty(max(_CHUNK_BYTES, int(bound.max(initial=0)) + 8), np.uint8) for _ in range(buffers)]
        if isinstance(events, Future):
            events = events.result()
        i, turn = 0, 0
        while i < len(events):
            buf = bufs[turn]
            nxt, used = _render(buf, events, i, group_first, ops_ptr, ops, data, base, sizes, bound, snip, snip_ptr)
            yield buf[:used]  # a view of the buffer, overwritten `buffers` chunks later
            i, turn = nxt, (turn + 1) % buffers


@numba.njit(cache=True, nogil=True)
def _event_order(ns, d, is_slice, order, top):
    """Events.order's first step: (idx, key), the events' indices in a stable counting sort by order
    and, in that order, the key ns * (2 * top + 1) + class (class: top - d for a slice of positive
    duration d, else 2 * top - d), which the caller uses only if it fits in 63 bits."""
    n = ns.shape[0]
    lo, hi = order.min(), order.max()
    start = np.zeros(hi - lo + 2, np.int64)
    for i in range(n):
        start[order[i] - lo + 1] += 1
    for v in range(hi - lo + 1):
        start[v + 1] += start[v]
    idx = np.empty(n, np.int64)
    for i in range(n):
        v = order[i] - lo
        idx[start[v]] = i
        start[v] += 1
    width = 2 * top + 1
    key = np.empty(n, np.int64)
    for j in range(n):
        i = idx[j]
        c = top - d[i] if is_slice[i] and d[i] > 0 else 2 * top - d[i]
        key[j] = ns[i] * width + c
    return idx, key


@intrinsic
def _move8(typingctx, dst, dst_at, src, src_at):
    """Copy the 8 bytes src[src_at:src_at + 8] to dst[dst_at:dst_at + 8]: one unaligned 64-bit load
    and store (no bounds check; _render copies a snippet 8 bytes at a time, 4 times faster than byte
    by byte, so both its arrays have 8 bytes of slack)."""

    def codegen(context, builder, signature, args):
        d, d_at, s, s_at = args
        word = ir.IntType(64).as_pointer()
        to = builder.bitcast(builder.gep(context.make_array(signature.args[0])(context, builder, d).data, [d_at]), word)
        at = builder.bitcast(builder.gep(context.make_array(signature.args[2])(context, builder, s).data, [s_at]), word)
        builder.store(builder.load(at, align=1), to, align=1)
        return context.get_dummy_value()

    return types.void(dst, dst_at, src, src_at), codegen


# "00" to "99": _digits writes two digits a step
_PAIRS = np.frombuffer("".join(f"{i:02d}" for i in range(100)).encode(), np.uint8).copy()
_TEN, _HUNDRED = np.uint64(10), np.uint64(100)


@numba.njit(inline="always")
def _digits(buf, used, v):
    """Write the decimal digits of v >= 0 at buf[used:]; returns where they end. Unsigned and by
    constants, two digits a step (a table of the pairs): LLVM divides by a multiplication then, where
    numba's floor division of signed integers by 10 took about 30% of _render's samples
    (tools/profile_kernels.py's method, on the trace of bench_pipeline's 10^5 program)."""
    u = np.uint64(v)
    nd, p = 1, _TEN
    while nd < 19 and u >= p:
        nd += 1
        p *= _TEN
    end = used + nd
    x = end
    while x - used >= 2:
        q = u // _HUNDRED
        r = np.int64(u - q * _HUNDRED) * 2
        x -= 2
        buf[x] = _PAIRS[r]
        buf[x + 1] = _PAIRS[r + 1]
        u = q
    if x > used:
        buf[used] = np.uint8(48 + u)
    return end


@numba.njit(cache=True, nogil=True)
def _render(buf, events, i, group_first, ops_ptr, ops, data, base, rows, bound, snip, snip_ptr):
    """Render events[i:] into buf while they fit (an event of kind g takes at most bound[g] bytes, and
    _move8 up to 7 more): (the next event, bytes used). Field c of row r of kind g is
    data[base[g] + c * rows[g] + r]. `snip` ends with 8 bytes of padding."""
    used = 0
    n_groups = group_first.shape[0] - 1
    while i < events.shape[0]:
        ev = events[i]
        g = 0
        while g + 1 < n_groups and group_first[g + 1] <= ev:
            g += 1
        row = base[g] + (ev - group_first[g])  # its fields: data[row + column * stride]
        stride = rows[g]
        if used + bound[g] + 8 > buf.shape[0]:
            break
        buf[used] = 44  # ","
        buf[used + 1] = 10  # "\n"
        used += 2
        for o in range(ops_ptr[g], ops_ptr[g + 1]):
            code, arg = ops[o, 0], ops[o, 1]
            if code == _LIT or code == _STR:
                s = arg if code == _LIT else data[row + arg * stride]
                a = snip_ptr[s]
                size = snip_ptr[s + 1] - a
                for x in range(0, size, 8):
                    _move8(buf, used + x, snip, a + x)
                used += size
                continue
            v = data[row + arg * stride]
            # floor division and a non-negative remainder, as Python formats them; by constants
            if code == _INT:
                whole, frac, places = v, np.int64(0), 0
            elif code == _FIX3:
                whole = v // 1000
                frac, places = v - whole * 1000, 3
            else:
                whole = v // 1000000
                frac, places = v - whole * 1000000, 6
            if whole < 0:
                buf[used] = 45  # "-"
                used += 1
                whole = -whole
            used = _digits(buf, used, whole)
            if places:
                buf[used] = 46  # "."
                used += 1
                f = np.uint64(frac)
                for x in range(places - 1, -1, -1):
                    q = f // _TEN
                    buf[used + x] = np.uint8(48 + (f - q * _TEN))
                    f = q
                used += places
        i += 1
    return i, used


def _floats(values: np.ndarray, events: _Events) -> np.ndarray:
    """Snippets of the values formatted with 3 decimals (as f"{x:.3f}"), once per distinct value."""
    kinds, inverse = np.unique(np.asarray(values, np.float64), return_inverse=True)
    return events.snippets_of([f"{x:.3f}" for x in kinds.tolist()])[inverse.reshape(-1)]


def _pieces(ev: _Events, result: TimingResult, direction: np.ndarray, engine_name: np.ndarray, index: np.ndarray,
            dma_engines: list[int], tid: dict, base2: int) -> None:
    """A slice per transfer piece on its DMA engine's track."""
    hz = result.config.tick_hz
    pid = f',"pid":{PID},"tid":'
    mem = len(Memory)
    p_ps0, p_ps1 = ticks_to_ps(result.piece_start, hz), ticks_to_ps(result.piece_end, hz)
    p_dur = perfetto_ns(p_ps1) - perfetto_ns(p_ps0)
    p_rate = result.piece_bytes * (hz / 1e9) / np.maximum(result.piece_end - result.piece_start, 1)
    dma_tid = np.zeros(max(dma_engines, default=0) + 1, np.int64)
    dma_tid[dma_engines] = [tid[("dma", d)] for d in dma_engines]
    p_instr = result.piece_instr
    ev.add(['{"name":', (_STR, 0), ',"cat":"dma","ph":"X","ts":', (_FIX6, 1), ',"dur":', (_FIX3, 2), pid,
            (_INT, 3), ',"args":{"instr":"', (_STR, 4), "[", (_INT, 5), ']","queue":', (_INT, 6), ',"bytes":',
            (_INT, 7), ',"GB/s":', (_STR, 8), "}}"],
           [direction[result.piece_src * mem + result.piece_dst], p_ps0, p_dur, dma_tid[result.piece_engine],
            engine_name[p_instr], index[p_instr], result.piece_queue, result.piece_bytes, _floats(p_rate, ev)],
           p_ps0, p_dur, base2 + np.arange(result.pieces), True)


def _chunks(result: TimingResult, obj: ObjectFile | None, buffers: int = 1,
            reserve: Callable[[int], None] | None = None):
    """The JSON text in pieces of bytes (or of one of `buffers` buffers taken in turn, which the piece
    `buffers` later overwrites): header, events (one per line) in order of time, footer."""
    cfg = result.config
    hz = cfg.tick_hz
    n = result.count
    full = n <= FULL_ARGS_MAX
    other = {"kernel": kernel_name(result, obj, ""), "simulator": "ncsim", "core": PROCESS, "tick_hz": hz,
             "total_ticks": int(result.total_ticks), "total_ns": round(result.total_ns, 3),
             "time": "ts: the start exact to the ps; dur: the end rounded to the ns as Perfetto does, minus"
                     " the start likewise; exact ticks in args start_tick/end_tick"}
    pieces = result.pieces <= DMA_PIECES_MAX
    if not pieces:
        other["dma"] = (f"no DMA engine tracks (a slice per transfer piece): the run has {result.pieces} pieces,"
                        f" more than {DMA_PIECES_MAX} (ncsim.runtime.trace.DMA_PIECES_MAX); each transfer's"
                        " slice on its queue's track counts its pieces")
    if not full:
        other["args"] = (f"instruction slices leave out asm and cost: the run has {n} instructions, more than"
                         f" {FULL_ARGS_MAX} (ncsim.runtime.trace.FULL_ARGS_MAX)")
    yield ('{"otherData":' + json.dumps(other, sort_keys=True, separators=(",", ":")) + ',\n"traceEvents":[\n').encode()

    # Tracks: engines, then DMA queue lanes, then DMA engines.
    tr = transfers(result)
    # The live-bytes counters are worked out in a second thread meanwhile (numpy's sorts and the numba
    # kernel release the GIL); they are added last.
    with ThreadPoolExecutor(1) as pool:
        live = [(memory, pool.submit(live_bytes, result, memory, tr)) for memory in (Memory.SBUF, Memory.PSUM)
                if np.any(result.fp_memory == int(memory))]
        yield from _events(result, full, pieces, tr, live, buffers, pool, reserve)
    yield b"\n]}\n"


def _events(result: TimingResult, full: bool, pieces: bool, tr: Transfers, live: list, buffers: int,
            pool: ThreadPoolExecutor, reserve: Callable[[int], None] | None) -> Iterator[bytes | np.ndarray]:
    """The track metadata and the events of _chunks; `live`: (memory, future of its live_bytes). The
    events' order is worked out in `pool` while render lays out their fields."""
    hz = result.config.tick_hz
    n = result.count
    tr_ps0, tr_ps1 = ticks_to_ps(tr.start, hz), ticks_to_ps(tr.end, hz)
    tr_ns0, tr_ns1 = perfetto_ns(tr_ps0), perfetto_ns(tr_ps1)
    tr_lane = lanes(tr.queue, tr_ns0, tr_ns1)
    tracks = [(name, ("engine", e)) for e, name in enumerate(ENGINE_TRACKS)]
    from ncsim.engines.cores import calls_per_core

    call_ks, core_ticks = calls_per_core(result)
    if len(call_ks):
        tracks += [(f"GpSimd core {c}", ("core", c)) for c in range(core_ticks.shape[1])]
    # (queue, lane) of each transfer as one key, queue-major: its distinct values are the lane tracks
    width = int(tr_lane.max(initial=0)) + 1
    lane_values, lane_index = np.unique(tr.queue.astype(np.int64) * width + tr_lane, return_inverse=True)
    lane_keys = [(int(v) // width, int(v) % width) for v in lane_values.tolist()]
    tracks += [(f"DMA q{qu}" + (f" ({la + 1})" if la else ""), ("lane", qu, la)) for qu, la in lane_keys]
    dma_engines = sorted(set(distinct(result.body_pieces("engine")[1]).tolist())) if pieces else []  # (every body is run)
    tracks += [(f"DMA engine {d}", ("dma", d)) for d in dma_engines]
    tid = {key: i + 1 for i, (_, key) in enumerate(tracks)}
    meta = [f'{{"name":"process_name","ph":"M","pid":{PID},"args":{{"name":"{PROCESS}"}}}}',
            f'{{"name":"process_sort_index","ph":"M","pid":{PID},"args":{{"sort_index":0}}}}']
    for name, key in tracks:
        meta.append(f'{{"name":"thread_name","ph":"M","pid":{PID},"tid":{tid[key]},"args":{{"name":"{name}"}}}}')
        meta.append(f'{{"name":"thread_sort_index","ph":"M","pid":{PID},"tid":{tid[key]},'
                    f'"args":{{"sort_index":{tid[key]}}}}}')
    yield ",\n".join(meta).encode()

    # Events in the order in which Perfetto's JSON importer reads them, so that a flow binds to the
    # slice it belongs to: the top of its track's stack when the flow is read. The importer sorts by
    # time in ns, then puts complete slices of positive duration first, longest first, then all else
    # (slices of zero duration, flows, counters) in file order (trace_sorter.h). So the file is
    # sorted the same way, and among "all else": first the flows of the slices of positive duration,
    # then each slice of zero duration followed by its flows.
    ev = _Events(reserve)
    pid = f',"pid":{PID},"tid":'

    # Instructions.
    start_ps, end_ps = ticks_to_ps(result.start, hz), ticks_to_ps(result.end, hz)
    dur_ns = perfetto_ns(end_ps) - perfetto_ns(start_ps)
    engine = result.engine.astype(np.int64)
    name_of = ev.snippets_of([json.dumps(isa.BY_OPCODE[int(o)].mnemonic) for o in result.body_opcode.tolist()])
    engine_name = ev.snippets_of(list(ENGINES))[engine]
    at, src, place = _places(result)
    at_of, src_of = ev.snippets_of([json.dumps(a) for a in at])[place], ev.snippets_of([json.dumps(s) for s in src])[place]
    index = result.index
    cols = [name_of[result.body], start_ps, dur_ns, engine + 1, engine_name, index, at_of, src_of,
            ticks_to_ps(result.sem_wait, hz), ticks_to_ps(result.port_wait, hz), result.start, result.end]
    fmt = ['{"name":', (_STR, 0), ',"cat":"instruction","ph":"X","ts":', (_FIX6, 1), ',"dur":', (_FIX3, 2),
           pid, (_INT, 3), ',"args":{"instr":"', (_STR, 4), "[", (_INT, 5), ']","at":', (_STR, 6), ',"source":',
           (_STR, 7)]
    if full:
        cost, cost_of = _formulas(result)
        cols += [ev.snippets_of([json.dumps(t) for t in instruction_texts(result)]),
                 ev.snippets_of([json.dumps(c) for c in cost])[cost_of]]
        fmt += [',"asm":', (_STR, 12), ',"cost":', (_STR, 13)]
    fmt += [',"sem_wait_ns":', (_FIX3, 8), ',"port_wait_ns":', (_FIX3, 9), ',"start_tick":', (_INT, 10),
            ',"end_tick":', (_INT, 11), "}}"]
    # Order: 3 per slice (slice, its outgoing flows, its incoming flows); instructions first.
    ev.add(fmt, cols, start_ps, dur_ns, np.arange(n) * 3, True)

    # Transfers on their queue lanes.
    base = 3 * n
    nt = len(tr.instr)
    span = np.maximum(tr.end - tr.start, 1)
    rate = tr.bytes * (hz / 1e9) / span
    mem = {m.value: m.label for m in Memory}
    direction = ev.snippets_of([f'"{mem[a]}->{mem[b]}"' for a in range(len(mem)) for b in range(len(mem))])
    tr_tid = np.array([tid[("lane", qu, la)] for qu, la in lane_keys], np.int64)[lane_index].reshape(-1)
    ev.add(['{"name":', (_STR, 0), ',"cat":"transfer","ph":"X","ts":', (_FIX6, 1), ',"dur":', (_FIX3, 2), pid,
            (_INT, 3), ',"args":{"instr":"', (_STR, 4), "[", (_INT, 5), ']","at":', (_STR, 6), ',"bytes":', (_INT, 7),
            ',"pieces":', (_INT, 8), ',"GB/s":', (_STR, 9), ',"queued_ns":', (_FIX3, 10), "}}"],
           [direction[tr.src * len(mem) + tr.dst], tr_ps0, tr_ns1 - tr_ns0, tr_tid, engine_name[tr.instr],
            index[tr.instr], at_of[tr.instr], tr.bytes, tr.pieces, _floats(rate, ev),
            ticks_to_ps(tr.start - result.start[tr.instr], hz)],
           tr_ps0, tr_ns1 - tr_ns0, base + np.arange(nt) * 3, True)
    transfer_of = np.full(n, -1, np.int64)
    transfer_of[tr.instr] = np.arange(nt)

    # Pieces on their DMA engines.
    base2 = base + 3 * nt
    if pieces:
        _pieces(ev, result, direction, engine_name, index, dma_engines, tid, base2)

    # GpSimd cores: a slice per call and core that ran.
    base3 = base2 + (result.pieces if pieces else 0)
    call_i, core_c = np.nonzero(core_ticks)
    c_k = call_ks[call_i]
    c_ps0 = start_ps[c_k]
    c_dur = perfetto_ns(ticks_to_ps(result.start[c_k] + core_ticks[call_i, core_c], hz)) - perfetto_ns(c_ps0)
    c_tid = np.array([tid[("core", c)] for c in core_c.tolist()], np.int64)
    ev.add(['{"name":"core ', (_INT, 0), '","cat":"gpsimd_core","ph":"X","ts":', (_FIX6, 1), ',"dur":', (_FIX3, 2),
            pid, (_INT, 3), ',"args":{"instr":"', (_STR, 4), "[", (_INT, 5), ']","cycles":', (_INT, 6), "}}"],
           [core_c, c_ps0, c_dur, c_tid, engine_name[c_k], index[c_k],
            core_ticks[call_i, core_c] // result.config.ticks_per_cycle("gpsimd")],
           c_ps0, c_dur, base3 + np.arange(len(c_k)), True)

    # Flows: from the signalling slice (a dma_copy's transfer) to the waiting instruction.
    sig, wait = result.edge_signal.astype(np.int64), result.edge_wait.astype(np.int64)
    tr_tid = np.append(tr_tid, 0)  # a dummy last row keeps the indexing below valid without transfers
    via = transfer_of[sig]
    on_lane = via >= 0
    src_ps = np.where(on_lane, np.append(tr_ps0, 0)[via], start_ps[sig])
    src_dur = np.where(on_lane, np.append(tr_ns1 - tr_ns0, 0)[via], dur_ns[sig])
    src_ord = np.where(on_lane, base + 3 * via, 3 * sig) + 1
    src_tid = np.where(on_lane, tr_tid[via], engine[sig] + 1)
    flow = np.arange(len(sig))
    ev.add(['{"name":"s', (_INT, 0), '","cat":"semaphore","ph":"s","ts":', (_FIX6, 1), pid, (_INT, 2), ',"id":',
            (_INT, 3), "}"], [result.edge_sem, src_ps, src_tid, flow], src_ps, src_dur, src_ord, False)
    ev.add(['{"name":"s', (_INT, 0), '","cat":"semaphore","ph":"f","bp":"e","ts":', (_FIX6, 1), pid, (_INT, 2),
            ',"id":', (_INT, 3), "}"], [result.edge_sem, start_ps[wait], engine[wait] + 1, flow],
           start_ps[wait], dur_ns[wait], 3 * wait + 2, False)

    # Counters: each series in order of time (the order of addition breaks ties).
    last = base3 + len(c_k)
    h_time, h_rate = (result.hbm_time, result.hbm_rate) if len(result.hbm_time) else ([0], [0.0])  # no DMA: 0
    h_ps = ticks_to_ps(h_time, hz)
    gbs = np.asarray(h_rate, float) * (hz / 1e9)
    ev.add(['{"name":"HBM bandwidth","ph":"C","ts":', (_FIX6, 0), f',"pid":{PID},"args":{{"GB/s":', (_STR, 1), "}}"],
           [h_ps, _floats(gbs, ev)], h_ps, 0, last, False)
    for memory, future in live:
        times, level = future.result()
        c_ps = ticks_to_ps(times, hz)
        ev.add([f'{{"name":"{memory.name} live bytes","ph":"C","ts":', (_FIX6, 0),
                f',"pid":{PID},"args":{{"bytes":', (_INT, 1), "}}"], [c_ps, level], c_ps, 0, last + 1, False)

    yield from ev.render(pool.submit(ev.order), buffers)


