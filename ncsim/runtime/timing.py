"""Event-driven timing of the whole core: when each instruction and each DMA piece starts and ends.

`time_program(program, config)` needs no functional run: everything comes from the decoded
program (`ncsim.program.Program`, built once from the object or by the assembler; an object given
here is decoded first). It works in three steps, each over flat arrays:

1. Cost the bodies. Instructions whose encodings agree in everything that can change their cost
   (every byte except the semaphore counts, the access patterns' byte offsets and the semaphore
   operands) share one *body* (`Program.body`, found by the program's numba reading pass). Only the
   first instruction of each body is costed (`ncsim.engines.cost.describe`): a tiled kernel of a
   million instructions costs a few hundred. What differs between the instructions of a body is in
   the program's per-instruction columns: the access patterns' footprints (memory, partitions, byte
   range) and the semaphore waits and signals.
2. Schedule (`_simulate`, numba): the five in-order engine queues, the semaphores, the v2 ports,
   the 16 DMA engines with 16 queues each, and the HBM bandwidth cap, in integer ticks of
   `Config.tick_hz`. Everything that is the same for a body is looked up in small per-body tables,
   so the per-instruction arrays are few (measured: the loop is bound by memory traffic, not
   arithmetic). docs/timing.md states the model, its order of events and its formulas.
3. Describe: a `TimingResult` of flat arrays, with methods that turn an index into words (source
   place, cost formula). Columns that follow from others are computed when first read.

Where the DMA model lives, for a change to it:
- What a transfer is: the cost's `transfer` plan (`ncsim.engines.cost.describe`, which cuts it with
  ncsim/memory/dma.py): its queue and its pieces, each with a DMA engine, bytes, HBM bytes and an
  efficiency. `_flatten` turns each body's plan into rows of the piece table (`_Flat.piece_table`:
  DMA engine, queue, bytes, HBM bytes, src, dst, lead) and `_Flat.piece_cap` (the bytes per tick a piece
  moves on its own, `dma_engine_bandwidth` x efficiency); the pieces of instruction k are its
  body's rows in order (`piece_ptr[k]`.. `piece_ptr[k + 1]`), so a per-piece cost that depends only
  on the body is a column of that table. `_schedule` passes the loop the columns it reads.
- When pieces move, in `_simulate`: a dma_copy's start (step 3, kind 1) appends it to the list of
  each queue number its pieces use and heads the DMA engines' queues it finds empty (eligible at
  start + its lead, `dma.lead_ns`); step 4 is where an idle DMA engine takes its next eligible piece
  (round-robin over its queues), and sets the piece's rate when it does not touch HBM (its cap)
  and its end; step 5 shares HBM among the pieces that touch it (max-min fair, each capped by its
  own rate) and sets their ends; step 1 ends pieces and, with a dma_copy's last, the instruction.
  A change to what one piece costs goes in `_flatten` (a table column); to how pieces share the DMA
  engines or HBM, in steps 4 and 5. Only each piece's start and end are written per piece.
- Runs of DMA engines whose pieces are alike in every transfer (`_lockstep`; a tiled kernel's 16
  engines are usually one such class) are simulated as one engine each (`_simulate`'s `mult`): a
  change that makes the engines' pieces differ (bytes, efficiency, queue) only splits the classes,
  since `_lockstep` compares the piece table's rows; a change to how pieces share HBM must keep
  step 5 counting each of the `mult` engines of a class one by one, as it does now.

Errors a program can cause (a deadlock, a semaphore driven out of range, a malformed object, a DMA
whose sides differ in size) are NcsimError subclasses placed at the instruction's source line.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import NamedTuple

import numba
import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from ncsim import isa
from ncsim.asm.fields import WAIT_OPS
from ncsim.asm.instruction import Instruction
from ncsim.asm.objfile import ObjectFile
from ncsim.config import DEFAULT, Config
from ncsim.engines.cost import (
    DATAPATH,
    DMA,
    SEMAPHORE,
    InstrCost,
    dependent_overhead,
    describe,
    static_overhead,
)
from ncsim.errors import DeadlockError, NcsimError, SimError, SourceLoc, Waiting, unmet_wait
from ncsim.memory.dma import Piece, lead_ns
from ncsim.program import ACCESS_READ, ACCESS_WRITE, Program  # noqa: F401 - ACCESS_*: re-exported
from ncsim.runtime.heap import small_pages

ENGINES = isa.ENGINES  # the order of the streams, and of ties between engines at one instant
SEM_MAX = 2**32 - 1
_INF = 2**62
_SEMS = 256  # semaphore numbers the encoding can name (u8); Config.semaphores may allow fewer

# Bits of TimingResult.extra_flags: which neighbour-dependent costs an instruction paid.
COLD_START = 1  # its engine was idle: the tensor-access start was not hidden (docs/hardware.md#ports)
OVERHEAD = 2  # dependent on the previous instruction of its engine, or tiny (docs/timing.md)
LOAD_STATIONARY = 4  # nc_matmul: the part of its LoadStationary the previous instruction did not hide
DEPENDENT = 16  # it reads bytes the previous data-path instruction of its engine wrote

# ACCESS_READ, ACCESS_WRITE: bits of TimingResult.fp_access (ncsim.program's)


# --------------------------------------------------------------------------- the result

@dataclass(eq=False)
class TimingResult:
    """When everything happened, as flat arrays. Times are ticks of `config.tick_hz` (5.6 GHz).

    Instructions are numbered k = 0..count-1: the streams of ENGINES concatenated in that order.
    - engine[k] (index into ENGINES), index[k] (its place in its stream), opcode[k], mnemonic(k);
    - avail[k]: its engine had finished everything before it; ready[k]: its semaphore waits held
      too; start[k]: it started (ready, plus any wait for a port); end[k]: its engine was free again
      (for dma_copy and semaphore instructions end == start); done[k]: its signals applied (for
      dma_copy: when the last piece of its transfer finished);
    - sem_wait[k] = ready - avail and port_wait[k] = start - ready, in ticks; busy = end - start;
    - cost_cycles[k]: the cycles of its formula; flops[k]: 2 K M N for nc_matmul; extra_ticks[k]: what its neighbours added to its
      busy time, and extra_flags[k] which (COLD_START, OVERHEAD, LOAD_STATIONARY;
      DEPENDENT marks a read of what the previous instruction of its engine wrote);
    - formula(k): its cost in words with the numbers; loc(k): its source place; instruction(k).
    DMA pieces p = 0..pieces-1, those of one dma_copy consecutive (pieces_of(k), piece_ptr):
    - piece_instr, piece_engine (DMA engine), piece_queue, piece_bytes, piece_hbm_bytes (HBM reads
      plus writes), piece_src / piece_dst (Memory codes), piece_issue (its dma_copy started),
      piece_ready (issue + its lead: the latency less what its per-transfer work overlaps,
      `ncsim.memory.dma.lead_ns`), piece_start (its DMA engine took it), piece_end.
    The class pieces: DMA engines in lockstep (`_lockstep`) move alike pieces at the same times, so
    the scheduler times one piece per class of alike engines (every engine its own class when they
    are not in lockstep): class_start and class_end, class_ptr per dma_copy as piece_ptr, and
    class_body_pieces(column) (the first engine's row; "mult": how many engines' pieces it stands
    for). piece_start and piece_end are those times written out per piece, made when first read; the
    report and the race check read the class pieces (on a 10^6-instruction kernel, 16 times fewer).
    Semaphore edges e: edge_signal[e] is the instruction whose update made a wait of edge_wait[e]
    on semaphore edge_sem[e] hold (the last update that turned the condition true).
    HBM traffic: hbm_rate[i] bytes per tick from hbm_time[i] until hbm_time[i + 1] (a step function
    that ends at 0).
    Semaphores (CSR): the waits of instruction k are rows wait_ptr[k]..wait_ptr[k+1] of wait_sem,
    wait_op (0 >=, 1 ==) and wait_value, sem_wait's condition last; its updates likewise in
    signal_ptr, signal_sem, signal_op (0 +=, 1 -=, 2 =) and signal_value, sem_signal's last.
    Footprints (CSR): the operands of instruction k are rows fp_ptr[k]..fp_ptr[k+1] of fp_memory
    (Memory codes), fp_partition, fp_partitions (0 in HBM), fp_lo, fp_hi (bytes [lo, hi) in each
    partition, or of HBM) and fp_access (ACCESS_READ | ACCESS_WRITE).
    """

    config: Config
    total_ticks: int
    first: np.ndarray  # k of the first instruction of each engine's stream, and count at the end
    body: np.ndarray  # k -> its body: instructions that cost the same (index into the body_* lists)
    body_cost: list[InstrCost]
    body_opcode: np.ndarray
    avail: np.ndarray
    ready: np.ndarray
    start: np.ndarray
    end: np.ndarray
    done: np.ndarray
    extra_ticks: np.ndarray
    extra_flags: np.ndarray
    piece_ptr: np.ndarray
    class_ptr: np.ndarray
    class_start: np.ndarray
    class_end: np.ndarray
    edge_signal: np.ndarray
    edge_wait: np.ndarray
    edge_sem: np.ndarray
    hbm_time: np.ndarray
    hbm_rate: np.ndarray
    wait_ptr: np.ndarray
    wait_sem: np.ndarray
    wait_op: np.ndarray
    wait_value: np.ndarray
    signal_ptr: np.ndarray
    signal_sem: np.ndarray
    signal_op: np.ndarray
    signal_value: np.ndarray
    fp_ptr: np.ndarray
    fp_memory: np.ndarray
    fp_partition: np.ndarray
    fp_partitions: np.ndarray
    fp_lo: np.ndarray
    fp_hi: np.ndarray
    fp_access: np.ndarray
    _body_piece_ptr: np.ndarray = field(repr=False)  # body -> its rows of the piece table (CSR)
    _piece_table: np.ndarray = field(repr=False)  # [row, _PIECE_COLUMNS]
    _class_body_ptr: np.ndarray = field(repr=False)  # body -> its class rows (CSR)
    # row of the piece table -> the class row that stands for it: a class's rows in a transfer are
    # consecutive, its first engine's first, so this never decreases
    _row_class: np.ndarray = field(repr=False)
    _program: Program = field(repr=False)

    # ------------------------------------------------------------------ sizes and units
    @property
    def count(self) -> int:
        return int(self.first[-1])

    @property
    def pieces(self) -> int:
        return int(self.piece_ptr[-1])

    @property
    def total_ns(self) -> float:
        return self.ns(self.total_ticks)

    def ns(self, ticks: float) -> float:
        return ticks * 1e9 / self.config.tick_hz

    # ------------------------------------------------------------------ derived columns
    @cached_property
    def engine(self) -> np.ndarray:
        return np.repeat(np.arange(len(ENGINES), dtype=np.int8), np.diff(self.first))

    @cached_property
    def index(self) -> np.ndarray:
        return np.arange(self.count) - self.first[:-1][self.engine]

    @cached_property
    def opcode(self) -> np.ndarray:
        return self.body_opcode[self.body]

    @cached_property
    def cost_cycles(self) -> np.ndarray:
        return np.array([c.cycles for c in self.body_cost], np.int64).reshape(-1)[self.body]

    @cached_property
    def flops(self) -> np.ndarray:
        """Floating-point operations of each instruction: 2 K M N for nc_matmul, 0 for the rest."""
        return np.array([c.flops for c in self.body_cost], np.int64).reshape(-1)[self.body]

    @property
    def sem_wait(self) -> np.ndarray:
        return self.ready - self.avail

    @property
    def port_wait(self) -> np.ndarray:
        return self.start - self.ready

    @property
    def busy(self) -> np.ndarray:
        return self.end - self.start

    @cached_property
    def piece_start(self) -> np.ndarray:
        return self._per_piece(self.class_start)

    @cached_property
    def piece_end(self) -> np.ndarray:
        return self._per_piece(self.class_end)

    def _per_piece(self, values: np.ndarray) -> np.ndarray:
        """A class piece column written out for every piece."""
        if len(values) == self.pieces:  # every engine its own class: the class pieces are the pieces
            return values
        with small_pages():
            out = np.empty(self.pieces, values.dtype)
        _per_piece(self.piece_ptr, self.class_ptr, self.body, self._body_piece_ptr, self._class_body_ptr,
                   self._row_class, values, out)
        return out

    @cached_property
    def class_instr(self) -> np.ndarray:
        """The dma_copy (k) of each class piece."""
        with small_pages():
            out = np.empty(len(self.class_start), np.int64)
        _piece_instr(self.class_ptr, out)
        return out

    def class_body_pieces(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        """body_pieces for the class pieces: (body_ptr, values) of each body's class rows, a column of
        the row each stands for (its class's first DMA engine's), or "mult" (how many engines')."""
        if column == "mult":  # the rows each stands for
            return self._class_body_ptr, np.bincount(self._row_class, minlength=int(self._class_body_ptr[-1]))
        first = np.flatnonzero(np.diff(self._row_class, prepend=-1))  # the first row each stands for
        return self._class_body_ptr, self._piece_table[first, _PIECE_COLUMNS.index(column)]

    @cached_property
    def piece_instr(self) -> np.ndarray:
        """The dma_copy (k) of each piece."""
        with small_pages():
            out = np.empty(self.pieces, np.int64)
        _piece_instr(self.piece_ptr, out)
        return out

    def _piece_column(self, column: int) -> np.ndarray:
        with small_pages():
            out = np.empty(self.pieces, np.int64)
        _piece_column(self.piece_ptr, self.body, self._body_piece_ptr, self._piece_table[:, column].copy(), out)
        return out

    @cached_property
    def piece_engine(self) -> np.ndarray:
        return self._piece_column(0)

    @cached_property
    def piece_queue(self) -> np.ndarray:
        return self._piece_column(1)

    @cached_property
    def piece_bytes(self) -> np.ndarray:
        return self._piece_column(2)

    @cached_property
    def piece_hbm_bytes(self) -> np.ndarray:
        return self._piece_column(3)

    @cached_property
    def piece_src(self) -> np.ndarray:
        return self._piece_column(4)

    @cached_property
    def piece_dst(self) -> np.ndarray:
        return self._piece_column(5)

    @cached_property
    def piece_issue(self) -> np.ndarray:
        return self.start[self.piece_instr]

    @cached_property
    def piece_ready(self) -> np.ndarray:
        return self.piece_issue + self._piece_column(_PIECE_COLUMNS.index("lead"))

    # ------------------------------------------------------------------ one instruction in words
    def find(self, engine: str, index: int) -> int:
        """The k of instruction `index` of `engine`'s stream."""
        return int(self.first[ENGINES.index(engine)] + index)

    def body_pieces(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        """(body_ptr, values): a column of the piece table (_PIECE_COLUMNS: "engine", "lead", ...) for
        each body's pieces, as CSR (body b's are values[body_ptr[b]:body_ptr[b + 1]])."""
        return self._body_piece_ptr, self._piece_table[:, _PIECE_COLUMNS.index(column)].copy()

    def pieces_of(self, k: int) -> range:
        return range(int(self.piece_ptr[k]), int(self.piece_ptr[k + 1]))

    def mnemonic(self, k: int) -> str:
        return isa.BY_OPCODE[int(self.body_opcode[self.body[k]])].mnemonic

    @property
    def program(self) -> Program:
        """The decoded program that was timed."""
        return self._program

    def instruction(self, k: int) -> Instruction:
        return self._program.instruction(int(k))

    def loc(self, k: int) -> SourceLoc | None:
        return self._program.loc(int(k))

    @property
    def obj(self) -> ObjectFile | None:
        """The timed object (None for a program given as instructions); for a program the assembler
        built directly, made from it when first asked."""
        prog = self._program
        if prog.obj is None and prog._given is None:
            prog.obj = prog.to_object()
        return prog.obj

    def formula(self, k: int) -> str:
        """Instruction k's cost in words: its formula with numbers, then what its neighbours added."""
        text = self.body_cost[int(self.body[k])].formula
        flags, extra = int(self.extra_flags[k]), int(self.extra_ticks[k])
        cfg = self.config
        parts = []
        if flags & COLD_START:
            parts.append(f"tensor-access start {cfg.access_start_cycles} cycles (its engine was idle)")
        if flags & OVERHEAD:
            engine = ENGINES[int(self.engine[k])]
            if flags & DEPENDENT and dependent_overhead(engine, cfg) >= static_overhead(engine, cfg):
                why = f"dependent overhead {dependent_overhead(engine, cfg)} cycles (dependent on the previous" \
                      f" {engine.capitalize()} instruction)"
            else:
                why = f"static overhead {static_overhead(engine, cfg)} cycles (tiny)"
            parts.append(f"{why}, not stacked on the formula's fixed part")
        if flags & LOAD_STATIONARY:
            parts.append("the part of its LoadStationary the previous instruction did not hide")
        if parts:
            text += f"; + {extra} ticks: " + ", ".join(parts)
        return text

    def describe(self, k: int) -> str:
        """One line: engine, index, mnemonic, times in ns, and the formula."""
        e = ENGINES[int(self.engine[k])]
        return (f"{e}[{int(self.index[k])}] {self.mnemonic(k)}: start {self.ns(int(self.start[k])):.1f} ns,"
                f" end {self.ns(int(self.end[k])):.1f} ns; {self.formula(k)}")


def lead_ticks(piece: Piece, config: Config) -> int:
    """From a piece's dma_copy's start until the piece is eligible, in ticks (`dma.lead_ns`)."""
    return round(lead_ns(piece, config) * config.tick_hz / 1e9)


@numba.njit(cache=True, _nrt=False)
def _piece_instr(piece_ptr, out):
    """out[h]: the dma_copy of piece h."""
    for k in range(piece_ptr.shape[0] - 1):
        for h in range(piece_ptr[k], piece_ptr[k + 1]):
            out[h] = k


@numba.njit(cache=True, _nrt=False)
def _per_piece(piece_ptr, class_ptr, body, body_piece_ptr, class_body_ptr, row_class, values, out):
    """out[h]: values[c], c the class piece that stands for piece h (TimingResult._per_piece)."""
    for k in range(piece_ptr.shape[0] - 1):
        row = body_piece_ptr[body[k]]
        base = class_ptr[k] - class_body_ptr[body[k]]
        for h in range(piece_ptr[k], piece_ptr[k + 1]):
            out[h] = values[base + row_class[row]]
            row += 1


@numba.njit(cache=True, _nrt=False)
def _piece_column(piece_ptr, body, body_piece_ptr, values, out):
    """out[h]: values[row] of piece h's row of the piece table (the pieces of a dma_copy are its
    body's rows, in order)."""
    for k in range(piece_ptr.shape[0] - 1):
        row = body_piece_ptr[body[k]]
        for h in range(piece_ptr[k], piece_ptr[k + 1]):
            out[h] = values[row]
            row += 1


# --------------------------------------------------------------------------- entry point

def time_program(program: Program | ObjectFile | Mapping[str, Sequence[Instruction]], config: Config = DEFAULT,
                 file: str = "<object>", profile: dict[str, float] | None = None) -> TimingResult:
    """Time a program: a decoded `ncsim.program.Program`, an ObjectFile (decoded here), or
    {engine: [Instruction, ...]} for instructions built in Python.

    `profile`, if given, receives the host seconds of each step: "read" (decoding an object, if one is
    given, and the costs of the distinct bodies), "simulate" (the scheduler alone) and "total"; and
    "dma_engines": how many DMA engines the scheduler simulated (fewer than the core has when some
    are in lockstep, `_lockstep`: 1 when all are).
    """
    t0 = time.perf_counter()
    prog = Program.of(program, file)
    with small_pages():
        flat = _flatten(prog, config)
        t1 = time.perf_counter()
        result = _schedule(prog, flat, config, profile)
    if profile is not None:
        profile["read"] = t1 - t0
        profile["total"] = time.perf_counter() - t0
    return result


# --------------------------------------------------------------------------- the dependent flag

@numba.njit(cache=True)
def _dependent(first, body, kind_b, fp_ptr, fmem, fpart, fparts, flo, fhi, facc):
    """dependent[k]: instruction k reads bytes that the previous data-path instruction of its engine
    wrote (same memory, overlapping partitions, overlapping byte ranges)."""
    n = body.shape[0]
    out = np.zeros(n, np.bool_)
    for e in range(first.shape[0] - 1):
        prev = -1
        for k in range(first[e], first[e + 1]):
            if kind_b[body[k]] != 0:
                continue
            if prev >= 0:
                for r in range(fp_ptr[k], fp_ptr[k + 1]):
                    if (facc[r] & 1) == 0:
                        continue
                    for w in range(fp_ptr[prev], fp_ptr[prev + 1]):
                        if (facc[w] & 2) == 0 or fmem[w] != fmem[r]:
                            continue
                        if fmem[r] != 3 and (fpart[r] >= fpart[w] + fparts[w] or fpart[w] >= fpart[r] + fparts[r]):
                            continue
                        if flo[r] < fhi[w] and flo[w] < fhi[r]:
                            out[k] = True
                            break
                    if out[k]:
                        break
            prev = k
    return out


# --------------------------------------------------------------------------- flattening

@dataclass
class _Flat:
    """The program as the scheduler takes it: per-instruction arrays and per-body tables."""

    body: np.ndarray
    dependent: np.ndarray
    costs: list[InstrCost]
    body_opcode: np.ndarray
    body_table: np.ndarray  # [body, column] int64: see _BODY_COLUMNS
    sems: tuple  # wptr, wsem, wop, wval, sptr, ssem, sop, sval
    fp: tuple  # fp_ptr, fmem, fpart, fparts, flo, fhi, facc
    piece_ptr: np.ndarray  # per instruction (CSR)
    body_piece_ptr: np.ndarray  # per body (CSR into piece_table)
    piece_table: np.ndarray  # [row, _PIECE_COLUMNS] int64
    piece_cap: np.ndarray  # [row] bytes per tick a piece moves on its own
    row_next: np.ndarray  # [row] the next row of its body on the same DMA engine, or -1
    body_de_row: np.ndarray  # [body x DMA engines + DMA engine] the body's first row on that DMA engine, or -1
    body_q_ptr: np.ndarray  # per body (CSR into body_q): the DMA queue numbers its pieces use
    body_q: np.ndarray


# A DMA piece's row: its DMA engine and queue, bytes, HBM bytes, src and dst (Memory codes), and its lead:
# the ticks from its dma_copy's start until it is eligible (ncsim.memory.dma.lead_ns).
_PIECE_COLUMNS = ("engine", "queue", "bytes", "hbm_bytes", "src", "dst", "lead")
_BODY_COLUMNS = ("kind", "ticks", "overhead_ticks", "tiny", "start_ticks", "tiny_ticks", "load_stationary_ticks",
                 "ports")


def _flatten(prog: Program, config: Config) -> _Flat:
    body, reps = prog.body, prog.body_first
    sems = (prog.wait_ptr, prog.wait_sem, prog.wait_op, prog.wait_value, prog.signal_ptr, prog.signal_sem,
            prog.signal_op, prog.signal_value)
    fp = (prog.fp_ptr, prog.fp_memory, prog.fp_partition, prog.fp_partitions, prog.fp_lo, prog.fp_hi, prog.fp_access)
    first = prog.first

    costs = []
    for k in reps:  # the first instruction of each body, in program order: errors come in that order
        k = int(k)
        try:
            costs.append(describe(prog.instruction(k), config))
        except NcsimError as e:
            loc = prog.loc(k)
            raise (e.at(loc) if e.loc is None and loc is not None else e) from None
    table = np.array([[getattr(c, col) for col in _BODY_COLUMNS] for c in costs], np.int64)
    table = table.reshape(len(costs), len(_BODY_COLUMNS))
    dependent = _dependent(first, body, table[:, 0].copy(), *fp)
    body_opcode = prog.opcode[reps]

    rows, caps = [], []
    body_piece_ptr = np.zeros(len(costs) + 1, np.int64)
    for i, c in enumerate(costs):
        plan = c.transfer
        if plan is not None:
            for p in plan.pieces:
                rows.append((p.engine, plan.queue, p.nbytes, p.hbm_bytes, int(plan.src), int(plan.dst),
                             lead_ticks(p, config)))
                caps.append(config.dma_engine_bandwidth * p.efficiency / config.tick_hz)
        body_piece_ptr[i + 1] = len(rows)
    piece_table = np.array(rows, np.int64).reshape(len(rows), len(_PIECE_COLUMNS))
    piece_ptr = np.zeros(len(body) + 1, np.int64)
    np.cumsum(np.diff(body_piece_ptr)[body], out=piece_ptr[1:])
    row_next, body_de_row = _links(piece_table, body_piece_ptr, config.dma_engines)
    body_q_ptr = np.zeros(len(costs) + 1, np.int64)
    body_q: list[int] = []
    for i in range(len(costs)):
        queues: list[int] = []
        for row in range(int(body_piece_ptr[i]), int(body_piece_ptr[i + 1])):
            if rows[row][1] not in queues:
                queues.append(rows[row][1])
        body_q += queues
        body_q_ptr[i + 1] = len(body_q)
    return _Flat(body, dependent, costs, body_opcode, table, sems, fp, piece_ptr, body_piece_ptr, piece_table,
                 np.array(caps, np.float64), row_next, body_de_row, body_q_ptr, np.array(body_q, np.int64))


def _links(piece_table: np.ndarray, body_piece_ptr: np.ndarray, n_dma: int) -> tuple[np.ndarray, np.ndarray]:
    """How the scheduler finds a body's pieces by DMA engine: row_next[row], the next row of its body
    on the same DMA engine (-1: none), and body_de_row[body x n_dma + engine], the body's first row
    on that engine (-1: none)."""
    engines = piece_table[:, 0].tolist()
    row_next = np.full(len(engines), -1, np.int64)
    body_de_row = np.full((len(body_piece_ptr) - 1) * n_dma, -1, np.int64)
    for i in range(len(body_piece_ptr) - 1):
        last: dict[int, int] = {}
        for row in range(int(body_piece_ptr[i]), int(body_piece_ptr[i + 1])):
            de = engines[row]
            if de in last:
                row_next[last[de]] = row
            else:
                body_de_row[i * n_dma + de] = row
            last[de] = row
    return row_next, body_de_row


# --------------------------------------------------------------------------- the scheduler

@numba.njit(inline="always")
def _holds(v, op, val):
    return v >= val if op == 0 else v == val


@numba.njit(inline="always")
def _ticks(remaining, rate):
    """Whole ticks to move `remaining` bytes at `rate` bytes per tick: at least one."""
    c = np.int64(math.ceil(remaining / rate - 1e-9))
    return c if c > 1 else np.int64(1)


_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@numba.njit(cache=True, _nrt=False)
def _simulate(first, body, dependent, bt, wptr, wsem, wop, wval, sptr, ssem, sop, sval,
              piece_ptr, body_piece_ptr, row_q, row_bytes, piece_cap, piece_hbm, row_next, body_de_row, body_q_ptr,
              body_q, body_q_des, row_lead, hbm_cap, hist_ptr, mult, class_ptr, row_pos,
              avail, ready, start, end, done, extra, flags, p_start, p_end, e_sig, e_wait, e_sem, h_time, h_rate,
              pc, head, head_ready, head_ports, checked, inflight, eng_end, last_end, last_dur, holder, sems, hist_fill, hist_after, hist_k, mono, completed,
              fifo, fifo_tail, cur, cur_row, cur_h, q_ready, empty, qbits, moving, queued, rr, wake,
              a_k, a_h, a_cap, a_rem, a_rate, a_upd, a_end, a_hbm, order, counts):
    """The event loop. At each instant, in this order: DMA pieces finish (by DMA engine), engine
    instructions finish (by engine), instructions start (earliest ready first, ties by engine; until
    nothing more can start at this instant), idle DMA engines take pieces (round-robin over their
    queues), HBM bandwidth is shared out again. Then time jumps to the next instant something ends
    or becomes eligible.

    Every array it uses is allocated by the caller (`_State`), outputs and state alike, so it is
    compiled without numba's reference counting (`_nrt=False`): no atomic increment and decrement per
    array use. It gives (status, info, t) and the number of edges and HBM steps in counts[0..1].

    Speed, measured on tools/bench_timing.py's 303 168 instructions (590 848 pieces, 335 365
    instants): 86 ms before these three choices, 37 ms after (8.3 M instructions/s):
    - no helper function takes an array: numba counts references to array arguments with atomic
      instructions at every call, even inlined (35% of the loop's time went to NRT_incref/decref);
      so the semaphore updates are applied in one place, from a list of what completed;
    - the DMA engines and their queues are visited through bitsets (the engines moving a piece, the
      engines with queued pieces, each engine's non-empty queues), not scanned: scanning an engine's
      16 queues twice for every piece it took was 19 M visits;
    - every instruction starts and every piece moves in a run that finishes (one that does not
      raises), so the output arrays are not filled beforehand; a small per-engine state says whether
      the instruction at an engine's head has its avail and ready times yet.
    Per piece it writes only its start and end. The queues hold dma_copy instructions, not pieces:
    queue number q is one list of the dma_copy instructions issued on it (_State.fifo), which each
    DMA engine walks with its own cursor (the pieces of a dma_copy are its body's rows of the piece
    table, found through body_de_row and row_next). A piece's instruction and row are computed when
    read (TimingResult.piece_instr, piece_engine, ...). Also: a wait's releaser is found by
    galloping back from the newest update; an engine whose waits failed is not checked again until a
    semaphore changes; nothing starts at an instant at which nothing completed; the DMA engines' next
    event is kept while their state does not change. Measured on tools/bench_pipeline.py's 10^6
    program (1.0 M instructions, 6.6 M pieces, 1.3 M instants), side by side with the loop before
    these changes: this loop 0.445 -> 0.24 s warm; time_program run cold 0.47 -> 0.32 s CPU, its
    peak memory 362 -> 196 MiB (380 -> 206 bytes per instruction). Where the time went then (perf,
    by source line): idle DMA engines taking pieces 27%, sharing HBM 17%, choosing and starting
    instructions 26%, applying semaphore updates 11%, the rest 19%.

    Then, for the DMA engines: (a) `mult`: engines in lockstep (`_lockstep`: a run of engines whose
    pieces are alike in every transfer sees the same queues and moves the same pieces at the same
    rates) are simulated as one per class: it counts its `mult[de]` pieces towards the dma_copy's
    completion, and step 5 repeats its share `mult[de]` times with the same operations in the same
    order as the engines one by one (status 3 if they would get different rates: the caller then
    simulates them one by one); (b) step 5 skips the sort and the fair-share loop when all pieces have the
    same cap and HBM is not the limit by a 1% margin (each gets its cap, as the loop would give),
    and pieces with the same bytes left share one division. On the 10^6 program, whose 411 616
    transfers are all in lockstep, side by side with the loop before (a) and (b): time_program run
    cold 0.33 -> 0.21 s CPU (scheduler 1.7-2.1x), tools/bench_pipeline.py's timing phase 0.34-0.38
    -> 0.21-0.25 s (two runs each), every TimingResult column the same. Where the
    time goes now (perf, by source line): applying semaphore updates 28%, checking waits and
    choosing what starts 27%, starting instructions (and issuing transfers) 10%, idle DMA engines
    taking pieces 12%, pieces ending 7%, sharing HBM 4%, finding the next instant 9%.

    Then (issue 10's fault session) it writes one start and one end per piece of the table it is
    given, the *class pieces* (`TimingResult.class_start`): piece class_ptr[k] + row_pos[r] is row r
    of dma_copy k's body, row_pos[r] its place among its body's rows of that table; the pieces of
    the engines a class stands for, the same times, are written out only when asked
    (`TimingResult.piece_start`). On the 10^6 program that is 411,616 starts and ends instead of
    6,585,856: 105 MB less written, time_program in a fresh process 0.51-0.53 -> 0.42-0.48 s and
    51,000 -> 29,000 page faults (side by side with the commit before, three runs each)."""
    n_eng = first.shape[0] - 1
    n_dma = a_k.shape[0]
    n_queues = q_ready.shape[0] // n_dma
    n_edges = 0
    n_h = 0
    n_completed = 0
    dma_next = _INF  # the earliest a_end of the pieces moving
    dma_wake = _INF  # the earliest wake of the DMA engines that have queued pieces and move none
    dma_dirty = False  # the DMA engines' state changed at this instant: dma_next and dma_wake are stale
    version = 0  # semaphore updates applied so far
    dwords = moving.shape[0]

    t = np.int64(0)
    status = 0
    info = -1
    while True:
        rates_dirty = False
        # 1. DMA pieces that finish now, by DMA engine.
        if dma_next == t:
            for w in range(dwords):
                bits = moving[w]
                while bits != 0:
                    de = (w << 6) + np.int64(trailing_zeros(bits))
                    bits &= bits - _ONE
                    if a_end[de] != t:
                        continue
                    p_end[a_h[de]] = t
                    moving[w] &= ~(_ONE << np.uint64(de & 63))
                    dma_dirty = True
                    if a_hbm[de] > 0.0:
                        rates_dirty = True
                    k = a_k[de]
                    done[k] += mult[de]  # minus the pieces still to finish, until the last one
                    if done[k] == 0:
                        done[k] = t
                        completed[n_completed] = k
                        n_completed += 1
        # 2. Engine instructions that finish now, by engine.
        for e in range(n_eng):
            if eng_end[e] == t:
                k = inflight[e]
                inflight[e] = -1
                eng_end[e] = _INF
                if holder[0] == k:
                    holder[0] = -1
                if holder[1] == k:
                    holder[1] = -1
                done[k] = t
                completed[n_completed] = k
                n_completed += 1
        # 3. Apply the updates of what completed, in that order; then start what can start: the
        #    earliest ready first, ties by engine order; again and again, since an instruction of no
        #    duration may release another at this same instant. Nothing can start at an instant at
        #    which nothing completed (no semaphore, port or engine was freed), except the first.
        startable = n_completed > 0 or t == 0
        while startable:
            for i in range(n_completed):
                k = completed[i]
                for j in range(sptr[k], sptr[k + 1]):
                    s = ssem[j]
                    before = sems[s]
                    if sop[j] == 0:
                        after = before + sval[j]
                    elif sop[j] == 1:
                        after = before - sval[j]
                        mono[s] = False
                    else:
                        after = sval[j]
                        mono[s] = False
                    if after < 0 or after > SEM_MAX:
                        if status == 0:
                            status, info = 2, j
                        continue
                    sems[s] = after
                    version += 1
                    x = hist_ptr[s] + hist_fill[s]
                    hist_after[x] = after
                    hist_k[x] = k
                    hist_fill[s] += 1
            n_completed = 0
            if status != 0:
                break
            best = -1
            best_ready = _INF
            busy_ports = (1 if holder[0] >= 0 else 0) | (2 if holder[1] >= 0 else 0)
            for e in range(n_eng):
                if inflight[e] >= 0:
                    continue
                k = pc[e]
                if k >= first[e + 1]:
                    continue
                if head[e] == 0:
                    avail[k] = t
                    head[e] = 1
                if head[e] == 1:
                    if checked[e] == version:
                        continue  # its waits failed and no semaphore has changed since
                    ok = True
                    for j in range(wptr[k], wptr[k + 1]):
                        if not _holds(sems[wsem[j]], wop[j], wval[j]):
                            ok = False
                            break
                    if not ok:
                        checked[e] = version
                        continue
                    ready[k] = t
                    head[e] = 2
                    head_ready[e] = t
                    head_ports[e] = bt[body[k], 7]
                    # Each wait's releaser: the update that last turned its condition true (none if
                    # it held from the start).
                    for j in range(wptr[k], wptr[k + 1]):
                        s, op, val = wsem[j], wop[j], wval[j]
                        if op == 0 and val <= 0:
                            continue  # holds for every value: nothing released it
                        lo = hist_ptr[s]
                        hi = lo + hist_fill[s]
                        r = -1
                        if mono[s]:
                            # The values rise, so the first update that reached val released it.
                            # It is usually among the latest: gallop back from the newest to
                            # bracket it, then bisect (the history of a semaphore is long).
                            a, b, step = lo, hi, 1
                            while b - step >= lo:
                                if hist_after[b - step] < val:
                                    a = b - step + 1
                                    break
                                b -= step
                                step *= 2
                            while a < b:
                                mid = (a + b) // 2
                                if hist_after[mid] >= val:
                                    b = mid
                                else:
                                    a = mid + 1
                            if a < hi and not _holds(hist_after[a - 1] if a > lo else 0, op, val):
                                r = hist_k[a]
                        else:
                            x = hi - 1
                            while x >= lo:
                                if not _holds(hist_after[x - 1] if x > lo else 0, op, val):
                                    r = hist_k[x]
                                    break
                                x -= 1
                        if r >= 0:
                            e_sig[n_edges] = r
                            e_wait[n_edges] = k
                            e_sem[n_edges] = s
                            n_edges += 1
                if (head_ports[e] & busy_ports) != 0:
                    continue
                if head_ready[e] < best_ready:
                    best_ready = head_ready[e]
                    best = e
            if best < 0:
                break
            e = best
            k = pc[e]
            u = body[k]
            pc[e] += 1
            head[e] = 0
            start[k] = t
            kind = bt[u, 0]
            if kind == 2:  # semaphore only: no engine time
                end[k] = t
                done[k] = t
                extra[k] = 0
                flags[k] = 0
                completed[n_completed] = k
                n_completed += 1
            elif kind == 1:  # dma_copy: queue its pieces and go on
                end[k] = t
                extra[k] = 0
                flags[k] = 0
                # done[k]: minus the pieces still to finish; -1 for ever if it has none
                done[k] = -max(piece_ptr[k + 1] - piece_ptr[k], np.int64(1))
                for i in range(body_q_ptr[u], body_q_ptr[u + 1]):  # k joins the queues it uses
                    q = body_q[i]
                    x = fifo_tail[q]
                    fifo[x] = k
                    fifo_tail[q] = x + 1
                    # The DMA engines whose queue q was empty have k's piece at its head now (the
                    # others reach k when they get to it).
                    for w in range(dwords):
                        need = empty[q * dwords + w] & body_q_des[i * dwords + w]
                        empty[q * dwords + w] &= ~need
                        while need != 0:
                            de = (w << 6) + np.int64(trailing_zeros(need))
                            need &= need - _ONE
                            r = body_de_row[u * n_dma + de]
                            while row_q[r] != q:
                                r = row_next[r]
                            qi = de * n_queues + q
                            cur[qi] = x
                            cur_row[qi] = r
                            cur_h[qi] = class_ptr[k] + row_pos[r]
                            q_ready[qi] = t + row_lead[r]
                            qbits[de] |= _ONE << np.uint64(q)
                            queued[w] |= _ONE << np.uint64(de & 63)
                            wake[de] = min(wake[de], t + row_lead[r])
                            dma_dirty = True
            else:
                cold = last_end[e] < 0 or t > last_end[e]
                dep = dependent[k]
                fl = 16 if dep else 0
                x = bt[u, 5]  # the static overhead of a tiny instruction (0 if not tiny)
                if dep:  # the dependent overhead, less the time the previous output had to commit while idle
                    xd = bt[u, 2] - (t - last_end[e] if last_end[e] >= 0 else 0)
                    x = max(x, xd)
                if x > 0:
                    fl |= 2
                if cold and bt[u, 4] > x:  # the tensor-access start, when nothing hid it
                    x = bt[u, 4]
                    fl = (fl & 16) | 1
                lsx = bt[u, 6]  # LoadStationary, minus what the previous instruction hid
                if not cold:
                    lsx = max(np.int64(0), lsx - last_dur[e])
                if lsx > 0:
                    fl |= 4
                d = bt[u, 1] + x + lsx
                extra[k] = d - bt[u, 1]
                flags[k] = fl
                end[k] = t + d
                last_end[e] = t + d
                last_dur[e] = d
                if d == 0:
                    done[k] = t
                    completed[n_completed] = k
                    n_completed += 1
                else:
                    inflight[e] = k
                    eng_end[e] = t + d
                    if bt[u, 7] & 1:
                        holder[0] = k
                    if bt[u, 7] & 2:
                        holder[1] = k
        if status != 0:
            break
        # 4. Idle DMA engines take the next eligible piece, round-robin over their queues: the
        #    non-empty ones after the queue served last, then those from the first on.
        if dma_dirty or dma_wake <= t:
            for dw in range(dwords):
                dbits = queued[dw] & ~moving[dw]
                while dbits != 0:
                    de = (dw << 6) + np.int64(trailing_zeros(dbits))
                    dbits &= dbits - _ONE
                    if wake[de] > t:
                        continue
                    dma_dirty = True
                    base = de * n_queues
                    after = _ALL << np.uint64(rr[de] + 1)  # the queues after the one served last
                    q = -1
                    for sweep in range(2):
                        bits = qbits[de] & (after if sweep == 0 else ~after)
                        while bits != 0:
                            c = np.int64(trailing_zeros(bits))
                            bits &= bits - _ONE
                            if q_ready[base + c] <= t:
                                q = c
                                break
                        if q >= 0:
                            break
                    if q >= 0:
                        qi = base + q
                        x = cur[qi]
                        k = fifo[x]
                        row = cur_row[qi]
                        h = cur_h[qi]
                        rr[de] = q
                        # The next piece of this queue: a later row of k's on it, or the first row on
                        # it of a later dma_copy of queue q.
                        r = row_next[row]
                        while r >= 0 and row_q[r] != q:
                            r = row_next[r]
                        if r >= 0:
                            cur_row[qi] = r  # the same dma_copy
                            q_ready[qi] = start[k] + row_lead[r]
                            cur_h[qi] = h + row_pos[r] - row_pos[row]
                        else:
                            while True:
                                x += 1
                                if x == fifo_tail[q]:
                                    break
                                kx = fifo[x]
                                r = body_de_row[body[kx] * n_dma + de]
                                while r >= 0 and row_q[r] != q:
                                    r = row_next[r]
                                if r >= 0:
                                    break
                            if r >= 0:
                                cur[qi] = x
                                cur_row[qi] = r
                                cur_h[qi] = class_ptr[kx] + row_pos[r]
                                q_ready[qi] = start[kx] + row_lead[r]
                            else:
                                qbits[de] &= ~(_ONE << np.uint64(q))
                                empty[q * dwords + dw] |= _ONE << np.uint64(de & 63)
                                if qbits[de] == 0:
                                    queued[dw] &= ~(_ONE << np.uint64(de & 63))
                        a_k[de] = k
                        a_h[de] = h
                        a_cap[de] = piece_cap[row]
                        moving[dw] |= _ONE << np.uint64(de & 63)
                        p_start[h] = t
                        a_rem[de] = row_bytes[row]
                        a_upd[de] = t
                        a_hbm[de] = piece_hbm[row]
                        if a_hbm[de] > 0.0:
                            rates_dirty = True
                        else:
                            a_rate[de] = a_cap[de]
                            a_end[de] = t + _ticks(a_rem[de], a_rate[de])
                    w_min = _INF
                    bits = qbits[de]
                    while bits != 0:
                        c = np.int64(trailing_zeros(bits))
                        bits &= bits - _ONE
                        w_min = min(w_min, q_ready[base + c])
                    wake[de] = w_min
        # 5. Share HBM among the pieces that touch it: max-min fair, each capped by its own rate.
        if rates_dirty:
            cnt = 0
            weight = 0.0
            cap0 = -1.0  # the cap of the first, and whether every one has that cap
            alike = True
            for w in range(dwords):
                bits = moving[w]
                while bits != 0:
                    de = (w << 6) + np.int64(trailing_zeros(bits))
                    bits &= bits - _ONE
                    if a_hbm[de] > 0.0:
                        if a_upd[de] != t:  # (a piece taken at t has moved nothing yet)
                            a_rem[de] -= a_rate[de] * (t - a_upd[de])
                            a_rem[de] = max(a_rem[de], 0.0)
                            a_upd[de] = t
                        order[cnt] = de
                        cnt += 1
                        weight += a_hbm[de] * mult[de]
                        if a_cap[de] != cap0:
                            if cnt == 1:
                                cap0 = a_cap[de]
                            else:
                                alike = False
            used = 0.0
            last_rem = -1.0
            last_rate = -1.0
            last_ticks = np.int64(0)
            if cnt > 0 and alike and cap0 * weight <= 0.99 * hbm_cap:
                # HBM is not the limit (with a margin far beyond rounding): every piece moves at its
                # cap, as the fair share below would give; equal caps keep the order by DMA engine,
                # so `used` is summed in the same order. Pieces alike share their division.
                for i in range(cnt):
                    de = order[i]
                    a_rate[de] = cap0
                    for c in range(mult[de]):
                        used += cap0 * a_hbm[de]
                    if a_rem[de] != last_rem:
                        last_rem = a_rem[de]
                        last_ticks = _ticks(last_rem, cap0)
                    a_end[de] = t + last_ticks
            else:
                for i in range(1, cnt):  # insertion sort by cap, then by DMA engine: a fixed order, a fixed result
                    de = order[i]
                    j = i
                    while j > 0 and a_cap[order[j - 1]] > a_cap[de]:
                        order[j] = order[j - 1]
                        j -= 1
                    order[j] = de
                budget = hbm_cap
                weight = 0.0
                for i in range(cnt):
                    for c in range(mult[order[i]]):
                        weight += a_hbm[order[i]]
                level = -1.0
                for i in range(cnt):
                    de = order[i]
                    cap = a_cap[de]
                    for c in range(mult[de]):  # (mult: the DMA engines this one stands for, in lockstep)
                        if level < 0.0 and cap * weight <= budget:
                            rate = cap
                            budget -= cap * a_hbm[de]
                            weight -= a_hbm[de]
                        else:
                            if level < 0.0:
                                level = budget / weight
                            rate = level
                        if c == 0:
                            a_rate[de] = rate
                        elif rate != a_rate[de] and status == 0:
                            status = 3  # the engines it stands for would move at different rates
                        used += rate * a_hbm[de]
                    if a_rem[de] != last_rem or a_rate[de] != last_rate:
                        last_rem = a_rem[de]
                        last_rate = a_rate[de]
                        last_ticks = _ticks(last_rem, last_rate)
                    a_end[de] = t + last_ticks
            h_time[n_h] = t
            h_rate[n_h] = used
            n_h += 1
            if status != 0:
                break
        # The next instant at which anything happens: an engine's instruction or a piece ends, or a
        # queued piece becomes eligible (an idle DMA engine with nothing queued has wake _INF).
        nt = _INF
        for e in range(n_eng):
            nt = min(nt, eng_end[e])
        if dma_dirty or rates_dirty:  # else the DMA engines' next events are those found last time
            dma_dirty = False
            dma_next = _INF
            dma_wake = _INF
            for w in range(dwords):
                bits = moving[w]
                while bits != 0:
                    dma_next = min(dma_next, a_end[(w << 6) + np.int64(trailing_zeros(bits))])
                    bits &= bits - _ONE
                bits = queued[w] & ~moving[w]
                while bits != 0:
                    dma_wake = min(dma_wake, wake[(w << 6) + np.int64(trailing_zeros(bits))])
                    bits &= bits - _ONE
        nt = min(nt, dma_next, dma_wake)
        if nt == _INF:
            break
        t = nt
    if status == 0:
        for e in range(n_eng):
            if pc[e] < first[e + 1]:
                status = 1
    counts[0] = n_edges
    counts[1] = n_h
    return status, info, t


def _schedule(prog: Program, flat: _Flat, config: Config, profile: dict[str, float] | None) -> TimingResult:
    wptr, wsem, wop, wval, sptr, ssem, sop, sval = flat.sems
    _check_semaphores(prog, flat, config)
    n, m = len(flat.body), int(flat.piece_ptr[-1])
    n_dma, n_queues = config.dma_engines, config.dma_queues_per_engine
    hist_ptr = np.concatenate(([0], np.cumsum(np.bincount(ssem, minlength=_SEMS)))).astype(np.int64)
    avail, ready, start, end, done, extra = (np.empty(n, np.int64) for _ in range(6))
    flags = np.empty(n, np.int8)
    # The edges: instructions as int32 below 2**31 of them, semaphores as the program has them (int16),
    # as the semaphore history keeps them: at 10^6 instructions, 14 MB fewer to write than int64.
    index = np.int32 if n < 2**31 else np.int64
    e_sig, e_wait, e_sem = np.empty(int(wptr[-1]), index), np.empty(int(wptr[-1]), index), np.empty_like(wsem)
    h_time, h_rate = np.empty(2 * m + 1, np.int64), np.empty(2 * m + 1, np.float64)
    counts = np.zeros(2, np.int64)
    t0 = time.perf_counter()

    def run(f: _Flat, n_dma: int, mult: np.ndarray) -> tuple[_State, int, int, int, tuple]:
        table = f.piece_table
        per_body = np.diff(f.body_piece_ptr)
        class_ptr = np.zeros(n + 1, np.int64)  # the class pieces (one per row of this table) of each dma_copy
        np.cumsum(per_body[f.body], out=class_ptr[1:])
        row_pos = np.arange(len(table), dtype=np.int64) - np.repeat(f.body_piece_ptr[:-1], per_body)
        p_start, p_end = np.empty(int(class_ptr[-1]), np.int64), np.empty(int(class_ptr[-1]), np.int64)
        state = _State.of(prog.first, f, hist_ptr, n_dma, n_queues)
        status, info, t = _simulate(
            prog.first, f.body, f.dependent, f.body_table, wptr, wsem, wop, wval, sptr, ssem, sop, sval,
            f.piece_ptr, f.body_piece_ptr, table[:, 1].copy(), table[:, 2].astype(np.float64),
            f.piece_cap, table[:, 3] / np.maximum(table[:, 2], 1), f.row_next, f.body_de_row,
            f.body_q_ptr, f.body_q, _des_of(f, n_dma), table[:, _PIECE_COLUMNS.index("lead")].copy(),
            config.hbm_bandwidth / config.tick_hz, hist_ptr, mult, class_ptr, row_pos,
            avail, ready, start, end, done, extra, flags, p_start, p_end, e_sig, e_wait, e_sem, h_time, h_rate,
            *state, counts)
        return state, status, info, t, (class_ptr, p_start, p_end)

    classes = _lockstep(flat, n_dma) if _LOCKSTEP else None
    status = 3
    if classes is not None:
        one, mult, row_class = classes
        state, status, info, t, times = run(one, len(mult), mult)
        rows = (one.body_piece_ptr, row_class)
    simulated = len(classes[1]) if status != 3 else n_dma
    if status == 3:  # no engines alike, or alike ones would have parted: each DMA engine on its own
        state, status, info, t, times = run(flat, n_dma, np.ones(n_dma, np.int64))
        rows = (flat.body_piece_ptr, np.arange(len(flat.piece_table), dtype=np.int64))
    if profile is not None:
        profile["simulate"] = time.perf_counter() - t0
        profile["dma_engines"] = float(simulated)
    pc, sems = state.pc, state.sems
    if status == 2:
        k = int(np.searchsorted(sptr, info, side="right") - 1)
        instr = prog.instruction(k)
        updates = instr.signals + ((instr.operands["update"],) if instr.mnemonic == "sem_signal" else ())
        update = updates[int(info - sptr[k])]
        raise SimError(f"semaphore s{update.sem} is {int(sems[update.sem])}; {update} would take it outside"
                       f" 0..{SEM_MAX} (at {t * 1e9 / config.tick_hz:.1f} ns)", prog.loc(k))
    if status == 1:
        err = _deadlock(prog, flat, config, pc, sems, int(t))
        err.partial = lambda: _ran(prog, config, pc)
        raise err
    total = int(max(done.max(initial=0), end.max(initial=0)))
    n_edges, n_h = int(counts[0]), int(counts[1])
    return TimingResult(
        config=config, total_ticks=total, first=prog.first, body=flat.body, body_cost=flat.costs,
        body_opcode=flat.body_opcode, avail=avail, ready=ready, start=start, end=end, done=done, extra_ticks=extra,
        extra_flags=flags, piece_ptr=flat.piece_ptr, class_ptr=times[0], class_start=times[1], class_end=times[2],
        edge_signal=e_sig[:n_edges], edge_wait=e_wait[:n_edges], edge_sem=e_sem[:n_edges], hbm_time=h_time[:n_h],
        hbm_rate=h_rate[:n_h], wait_ptr=wptr, wait_sem=wsem, wait_op=wop, wait_value=wval, signal_ptr=sptr,
        signal_sem=ssem, signal_op=sop, signal_value=sval,
        fp_ptr=flat.fp[0], fp_memory=flat.fp[1], fp_partition=flat.fp[2], fp_partitions=flat.fp[3],
        fp_lo=flat.fp[4], fp_hi=flat.fp[5], fp_access=flat.fp[6], _body_piece_ptr=flat.body_piece_ptr,
        _class_body_ptr=rows[0], _row_class=rows[1],
        _piece_table=flat.piece_table, _program=prog)


_LOCKSTEP = True  # tests turn it off to compare with every DMA engine simulated on its own


def _lockstep(flat: _Flat, n_dma: int) -> tuple[_Flat, np.ndarray, np.ndarray] | None:
    """DMA engines in lockstep: engines de and de + 1 are alike when, in every transfer, each piece
    on de is followed in the piece table by a piece on de + 1 with the same queue, bytes, HBM bytes,
    src, dst and efficiency (and each piece on de + 1 follows one on de so). Alike engines see the
    same queues and move the same pieces: they are in the same state at every instant, their pieces
    start together and end together. A run of alike engines (a class) is then simulated as one
    engine, its first (`_simulate`'s `mult`: the class's size), whose piece's start and end stand for
    all `mult` (TimingResult's class pieces), and which counts them all in HBM's sharing, in the order
    and with the arithmetic of the engines one by one (classes are runs of consecutive engines, so
    the order by cap, then engine, is kept): the results are the same to the bit. Returns the piece
    table of the first engine of each class (its rows numbered by class), the class sizes, and for
    each row of the full table the kept row that stands for it (the piece of its class's first engine
    in its transfer); None if every engine is its own class. `_simulate` gives up (status 3) if the engines of a class
    would come to move at different rates (at the edge of HBM's cap, where rounding can give the
    first engines their cap and the others the fair level), and they are then simulated one by one.

    A tiled kernel is usually one class of 16 (tools/bench_pipeline.py's 10^6 program: 411 616
    transfers of 16 alike pieces, 15 of every 16 pieces' work spared); a few narrow transfers (a
    bias row on one engine) split it into a few classes."""
    table, cap = flat.piece_table, flat.piece_cap
    rows = len(table)
    if n_dma < 2 or rows == 0:
        return None
    counts = np.diff(flat.body_piece_ptr)
    row_body = np.repeat(np.arange(len(counts)), counts)
    eng = table[:, 0]
    twin = np.zeros(rows, np.bool_)  # row r's piece is followed by its twin on the next engine
    twin[:-1] = ((eng[1:] == eng[:-1] + 1) & (row_body[1:] == row_body[:-1])
                 & (table[1:, 1:] == table[:-1, 1:]).all(axis=1) & (cap[1:] == cap[:-1]))
    apart = np.zeros(n_dma + 1, np.bool_)  # apart[de]: engines de and de + 1 are not alike
    apart[eng[~twin]] = True  # a piece on de with no twin on de + 1
    led = np.zeros(rows, np.bool_)
    led[1:] = twin[:-1]
    apart[eng[~led & (eng > 0)] - 1] = True  # a piece on de + 1 that follows no twin on de
    first = np.flatnonzero(np.concatenate(([True], apart[:n_dma - 1])))  # each class's first engine
    if len(first) == n_dma:
        return None
    mult = np.diff(np.append(first, n_dma)).astype(np.int64)
    cls = np.repeat(np.arange(len(first)), mult)  # engine -> class
    keep = np.zeros(n_dma, np.bool_)
    keep[first] = True
    kept = np.flatnonzero(keep[eng])
    one = table[kept].copy()
    one[:, 0] = cls[eng[kept]]
    body_piece_ptr = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(np.bincount(row_body[kept], minlength=len(counts)), out=body_piece_ptr[1:])
    row_next, body_de_row = _links(one, body_piece_ptr, len(first))
    # A class's pieces in a transfer are consecutive rows, one per engine from its first: row r stands
    # for itself less its engine's place in its class.
    row_class = np.searchsorted(kept, np.arange(rows) - (eng - first[cls[eng]]))
    return (replace(flat, body_piece_ptr=body_piece_ptr, piece_table=one, piece_cap=cap[kept].copy(),
                    row_next=row_next, body_de_row=body_de_row), mult, row_class)


def _bits(members: Iterable[int], n_dma: int) -> np.ndarray:
    """A bitset of the DMA engines listed: 64-bit words."""
    words = np.zeros((n_dma + 63) // 64, np.uint64)
    for de in members:
        words[de >> 6] |= np.uint64(1) << np.uint64(de & 63)
    return words


def _des_of(flat: _Flat, n_dma: int) -> np.ndarray:
    """[i x words + word], i indexing body_q: the DMA engines on which body i's pieces use that queue."""
    words = (n_dma + 63) // 64
    out = np.zeros(len(flat.body_q) * words, np.uint64)
    table = flat.piece_table
    for u in range(len(flat.body_q_ptr) - 1):
        rows = range(int(flat.body_piece_ptr[u]), int(flat.body_piece_ptr[u + 1]))
        for i in range(int(flat.body_q_ptr[u]), int(flat.body_q_ptr[u + 1])):
            out[i * words:(i + 1) * words] = _bits((int(table[r, 0]) for r in rows if table[r, 1] == flat.body_q[i]),
                                                   n_dma)
    return out


class _State(NamedTuple):
    """The scheduler's working state, allocated here so that `_simulate` allocates nothing (its
    order is that of _simulate's arguments)."""

    pc: np.ndarray  # per engine: the next instruction (k) of its stream
    head: np.ndarray  # the instruction at pc: 0 nothing known, 1 avail set, 2 ready set too
    head_ready: np.ndarray  # once ready (head 2): when, and the ports it needs
    head_ports: np.ndarray
    checked: np.ndarray  # the semaphores' version when its waits last failed (-1: none yet)
    inflight: np.ndarray  # the instruction the engine runs, or -1
    eng_end: np.ndarray  # and when it ends (_INF: none)
    last_end: np.ndarray  # end of the previous data-path instruction of the engine (-1: none yet)
    last_dur: np.ndarray  # and its busy time
    holder: np.ndarray  # the instruction holding each port (0 SBUF, 1 PSUM), or -1
    # Semaphores, and the history of each: every update in the order applied (hist_ptr: each
    # semaphore's share), so the value before update i is the value after update i - 1 (0 before the first).
    sems: np.ndarray
    hist_fill: np.ndarray  # (hist_after: uint32, as semaphores are; hist_k: int32 below 2**31 instructions)
    hist_after: np.ndarray
    hist_k: np.ndarray
    mono: np.ndarray  # only increments so far
    completed: np.ndarray  # instructions whose updates are still to apply
    # The DMA queues. The dma_copy instructions of each queue number q, in the order they issued: fifo,
    # where q owns as many slots as the program has dma_copy instructions on it (so it never wraps),
    # up to fifo_tail[q]. The queue q of DMA engine de (qi = de x queues per engine + q) is the pieces
    # on de of those instructions; its head piece is row cur_row[qi] of the piece table, of the
    # dma_copy in slot cur[qi]; it has pieces queued when its bit of qbits is set.
    fifo: np.ndarray
    fifo_tail: np.ndarray
    cur: np.ndarray
    cur_row: np.ndarray
    cur_h: np.ndarray  # and its piece number
    q_ready: np.ndarray  # when the head piece of a queue is eligible
    empty: np.ndarray  # [q x words + word]: the DMA engines whose queue q is empty (a bitset)
    qbits: np.ndarray  # each DMA engine's non-empty queues (a bitset)
    moving: np.ndarray  # DMA engines that move a piece (bitset)
    queued: np.ndarray  # DMA engines with queued pieces (bitset)
    rr: np.ndarray  # the queue each DMA engine served last
    wake: np.ndarray  # the earliest a queued piece of the DMA engine is eligible
    a_k: np.ndarray  # per DMA engine, the piece it moves: its dma_copy, its number h
    a_h: np.ndarray
    a_cap: np.ndarray  # the bytes per tick it moves on its own
    a_rem: np.ndarray  # its bytes left
    a_rate: np.ndarray  # bytes per tick since a_upd
    a_upd: np.ndarray
    a_end: np.ndarray  # when it finishes at that rate
    a_hbm: np.ndarray  # HBM bytes per byte moved
    order: np.ndarray  # scratch: the DMA engines moving HBM bytes, by cap

    @classmethod
    def of(cls, first: np.ndarray, flat: _Flat, hist_ptr: np.ndarray, n_dma: int, n_queues: int) -> _State:
        n_eng, n_sems = len(first) - 1, len(hist_ptr) - 1
        # Each queue's slots: the uses of each body that has pieces on it.
        uses = np.bincount(flat.body, minlength=len(flat.costs))
        fifo_ptr = np.zeros(n_queues + 1, np.int64)
        np.add.at(fifo_ptr, flat.body_q + 1, np.repeat(uses, np.diff(flat.body_q_ptr)))
        fifo_ptr = np.cumsum(fifo_ptr)
        index = np.int32 if len(flat.body) < 2**31 else np.int64
        dwords = (n_dma + 63) // 64
        assert n_queues <= 64, "a DMA engine's queues are one 64-bit word (Config allows 16)"
        i64 = np.int64
        return cls(
            pc=first[:-1].astype(i64), head=np.zeros(n_eng, i64), head_ready=np.zeros(n_eng, i64),
            head_ports=np.zeros(n_eng, i64), checked=np.full(n_eng, -1, i64), inflight=np.full(n_eng, -1, i64), eng_end=np.full(n_eng, _INF, i64),
            last_end=np.full(n_eng, -1, i64), last_dur=np.zeros(n_eng, i64), holder=np.full(2, -1, i64),
            sems=np.zeros(n_sems, i64), hist_fill=np.zeros(n_sems, i64), hist_after=np.empty(hist_ptr[-1], np.uint32),
            hist_k=np.empty(hist_ptr[-1], index), mono=np.ones(n_sems, np.bool_),
            completed=np.empty(n_eng + n_dma + 1, i64),
            fifo=np.empty(fifo_ptr[-1], index), fifo_tail=fifo_ptr[:-1].copy(), cur=np.zeros(n_dma * n_queues, i64),
            cur_row=np.zeros(n_dma * n_queues, i64), cur_h=np.zeros(n_dma * n_queues, i64),
            q_ready=np.zeros(n_dma * n_queues, i64), empty=np.tile(_bits(range(n_dma), n_dma), n_queues), qbits=np.zeros(n_dma, np.uint64),
            moving=np.zeros(dwords, np.uint64), queued=np.zeros(dwords, np.uint64),
            rr=np.full(n_dma, n_queues - 1, i64), wake=np.full(n_dma, _INF, i64), a_k=np.zeros(n_dma, i64),
            a_h=np.zeros(n_dma, i64), a_cap=np.zeros(n_dma, np.float64), a_rem=np.zeros(n_dma, np.float64),
            a_rate=np.zeros(n_dma, np.float64), a_upd=np.zeros(n_dma, i64), a_end=np.zeros(n_dma, i64),
            a_hbm=np.zeros(n_dma, np.float64), order=np.empty(n_dma, i64))


def _check_semaphores(prog: Program, flat: _Flat, config: Config) -> None:
    """Semaphore numbers the encoding allows but this configuration's core does not have."""
    wptr, wsem, _, _, sptr, ssem = flat.sems[:6]
    for ptr, sem in ((wptr, wsem), (sptr, ssem)):
        bad = np.flatnonzero(sem >= config.semaphores)
        if len(bad):
            k = int(np.searchsorted(ptr, bad[0], side="right") - 1)
            raise SimError(f"semaphore s{int(sem[bad[0]])} does not exist: this core has {config.semaphores}"
                           f" (s0..s{config.semaphores - 1})", prog.loc(k))


def _ran(prog: Program, config: Config, pc: np.ndarray) -> TimingResult:
    """The timing of what ran before a deadlock: the program cut, in each stream, before the
    instruction its engine waits at, timed again. It is the deadlocked run's schedule: an engine
    blocked at a wait takes no part in the scheduler's choices, and when nothing is left running
    everything that started has finished. (Timed again rather than cut out of the arrays: it costs a
    second timing, and only when someone asks for the trace of a deadlock.)"""
    count = [int(pc[e] - prog.first[e]) for e in range(len(ENGINES))]
    return time_program(prog.prefix(count), config)


def _deadlock(prog: Program, flat: _Flat, config: Config, pc: np.ndarray, sems: np.ndarray,
              t: int) -> DeadlockError:
    wptr, wsem, wop, wval = flat.sems[:4]
    names = prog.semaphores
    waiting = []
    for e, engine in enumerate(ENGINES):
        k = int(pc[e])
        if k >= prog.first[e + 1]:
            continue
        unmet = []
        for j in range(int(wptr[k]), int(wptr[k + 1])):
            s, op, v = int(wsem[j]), WAIT_OPS[int(wop[j])], int(wval[j])
            if not (sems[s] >= v if op == ">=" else sems[s] == v):
                unmet.append(unmet_wait(s, op, v, int(sems[s]), names.get(s)))
        mnemonic = isa.BY_OPCODE[int(flat.body_opcode[flat.body[k]])].mnemonic
        waiting.append(Waiting(engine, k - int(prog.first[e]), prog.loc(k), mnemonic, tuple(unmet),
                               int(prog.first[e + 1] - prog.first[e])))
    after = (f"at simulated time {t * 1e9 / config.tick_hz:.1f} ns ({t} ticks) nothing is left running"
             " that could change a semaphore")
    return DeadlockError.of(waiting, (after,))


assert (DATAPATH, DMA, SEMAPHORE) == (0, 1, 2), "the scheduler numbers the kinds of ncsim.engines.cost so"
