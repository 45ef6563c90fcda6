"""What an instruction's `execute` function sees: its operands, memory reads and writes, and errors.

An execute function is `fn(ctx: Context) -> None`. It reads operands with `ctx.read(name)` (values
widened to float32, shaped like the operand: partitions first), computes, and stores with
`ctx.write(name, values)` (narrowed to the operand's dtype, round to nearest even). Every read and
write is recorded as a footprint for the race checker, and a read of memory nothing wrote is
reported as a warning naming the instruction's source line. `ctx.fail(message)` raises a SimError
placed at the instruction.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ncsim import dtypes, numerics
from ncsim.asm.rules import column_problem, lockstep
from ncsim.engines import alu
from ncsim.errors import SimError
from ncsim.memory.access import AccessPattern, Immediate
from ncsim.memory.state import AccessError, fit5

if TYPE_CHECKING:
    from ncsim.asm.instruction import Instruction
    from ncsim.runtime.machine import Machine

Operand = AccessPattern | Immediate | None
DST = "<dst>"  # in Context.fp32_into's steps: the destination, as the step before left it


class Context:
    def __init__(self, machine: Machine, engine: str, index: int, instr: Instruction, body: int | None = None):
        """`body`: the decoded program's body of the instruction (Program.body), if known: instructions
        of one body differ only in their offsets and constants, so what fp32_into finds from the rest
        is found once per body (Machine.plans)."""
        self.machine = machine
        self.config = machine.config
        self.mem = machine.mem
        self.engine = engine
        self.index = index
        self.instr = instr
        self.body = body
        self.state: dict[str, Any] = machine.engine_state[engine]  # per-engine registers (Scalar accumulators)

    # ------------------------------------------------------------------ operands
    def __getitem__(self, name: str) -> Any:
        return self.instr.operands[name]

    def ap(self, name_or_ap: str | AccessPattern) -> AccessPattern:
        ap = self.instr.operands[name_or_ap] if isinstance(name_or_ap, str) else name_or_ap
        if not isinstance(ap, AccessPattern):
            raise self.fail(f"operand '{name_or_ap}' must be a tile here")
        return ap

    def label(self, name_or_ap: str | AccessPattern) -> str:
        return f"'{name_or_ap}'" if isinstance(name_or_ap, str) else "an operand"

    # ------------------------------------------------------------------ reads
    def read_raw(self, name_or_ap: str | AccessPattern) -> np.ndarray:
        """The stored values (the dtype's storage type), shaped like the operand: a copy."""
        return self.read_raw_view(name_or_ap).copy()

    def read(self, name_or_ap: str | AccessPattern) -> np.ndarray:
        """The operand's values widened to float32 (exact), shaped like the operand."""
        ap = self.ap(name_or_ap)
        raw = self.read_raw(name_or_ap)
        if ap.dtype.storage == np.float32:  # f32 and tf32 are fp32 bit patterns; raw is already a copy
            return raw
        return numerics.to_f32(raw, ap.dtype)

    def read_raw_view(self, name_or_ap: str | AccessPattern) -> np.ndarray:
        """The stored values as a read-only view of memory, not a copy (see read2d_view). Every read
        goes through here: it records the footprint and warns of bytes nothing wrote."""
        ap = self.ap(name_or_ap)
        try:
            view = self.mem.read_view(ap)
        except AccessError as e:
            raise self.fail(f"{self.label(name_or_ap)}: {e}") from None
        self._note_read(name_or_ap, ap)
        return view

    def _note_read(self, name_or_ap: str | AccessPattern, ap: AccessPattern) -> None:
        """Record the read of `ap` and warn of the elements nothing wrote (`ap` lies in memory)."""
        try:
            missing = self.mem.unwritten(ap)
        except AccessError as e:
            raise self.fail(f"{self.label(name_or_ap)}: {e}") from None
        self.machine.record(self, ap, write=False)
        if missing:
            self.machine.warn_unwritten(self, name_or_ap, ap, missing)

    def read2d_view(self, name: str) -> np.ndarray:
        """read2d(name), but an f32 or tf32 operand comes as a read-only view of memory, not a copy
        (a strided copy of a 128 x 128 tile is a fifth of a tensor_tensor's time). Only for
        instructions that compute a fresh result from their inputs before they write anything."""
        ap = self.ap(name)
        if ap.dtype.storage != np.float32:
            return self.read2d(name)
        return self.read_raw_view(name).reshape(ap.partitions, ap.free_elements)

    def read_bits(self, name_or_ap: str | AccessPattern | Immediate) -> np.ndarray:
        """32-bit patterns for a bitwise operator (see alu.to_bits); an immediate is an integer (rule
        bitwise-integers)."""
        v = self.instr.operands[name_or_ap] if isinstance(name_or_ap, str) else name_or_ap
        if isinstance(v, Immediate):
            return np.asarray(int(v.value) & 0xFFFFFFFF, np.uint32)
        ap = self.ap(v)
        return alu.to_bits(self.read_raw(name_or_ap if isinstance(name_or_ap, str) else ap), ap.dtype)

    def scalar(self, name: str, partitions: int) -> np.ndarray:
        """A constant-or-column operand as float32, broadcastable against [partitions, ...]:
        an immediate gives a 0-d array; a tile must be [partitions, 1] and gives shape (partitions, 1)."""
        v = self.instr.operands[name]
        if isinstance(v, Immediate):
            return np.asarray(v.value, np.float32)
        ap = self.ap(name)
        self.check_column(name, ap, partitions)
        return self.read(name).reshape(partitions, 1)

    def check_column(self, name: str, ap: AccessPattern, partitions: int) -> None:
        problem = column_problem(name, ap, partitions)  # the rule the assembler checks (rule column)
        if problem:
            raise self.fail(problem)

    # ------------------------------------------------------------------ writes
    def write_raw(self, name_or_ap: str | AccessPattern, raw: np.ndarray) -> None:
        """Store values already in the operand's storage type; `raw` has the operand's partitions and
        its number of free elements (any shape with that many elements per partition)."""
        ap = self.ap(name_or_ap)
        raw = self._shaped(name_or_ap, ap, raw)
        try:
            self.mem.write(ap, raw)
        except AccessError as e:
            raise self.fail(f"{self.label(name_or_ap)}: {e}") from None
        self.machine.record(self, ap, write=True)

    def write(self, name_or_ap: str | AccessPattern, values: np.ndarray) -> None:
        """Narrow float32 values to the operand's dtype (round to nearest even) and store them."""
        ap = self.ap(name_or_ap)
        values = np.asarray(values, np.float32)
        # fp32 needs no narrowing, and the store copies: skip from_f32's copy
        raw = values if ap.dtype == dtypes.FLOAT32 else numerics.from_f32(values, ap.dtype)
        self.write_raw(name_or_ap, raw)

    def write_bits(self, name_or_ap: str | AccessPattern, bits: np.ndarray) -> None:
        ap = self.ap(name_or_ap)
        self.write_raw(name_or_ap, alu.from_bits(bits, ap.dtype))

    def _shaped(self, name_or_ap: str | AccessPattern, ap: AccessPattern, values: np.ndarray) -> np.ndarray:
        if values.shape == ap.shape:
            return values
        if values.size == ap.num_elements and (not ap.on_chip or values.shape[:1] == (ap.partitions,)):
            return values.reshape(ap.shape)
        raise self.fail(f"{self.label(name_or_ap)} has shape {list(ap.shape)} but the result has shape"
                        f" {list(values.shape)}")

    # ------------------------------------------------------------------ straight into the destination
    def fp32_into(self, dst: str, steps: Sequence[tuple[str, Any, Any]], scalars: tuple[str, ...] = ()) -> bool:
        """Compute fp32 elementwise operators straight into dst's memory, when they can be: no result
        array, no copy into the destination, no pass to find NaNs (alu.apply_into). Gives the values,
        footprints and warnings of reading the operands, computing with alu.apply and storing with
        write().

        `steps`: (op, x, y), computed as x op y in order, each result rounded to fp32 and stored; x
        and y are the name of a tile operand shaped like dst, the name of one of `scalars` (an
        immediate, or a [P, 1] column repeated along the free axes), DST (the destination as the step
        before left it) or a Python float (a constant).

        Returns False, having read and written nothing, where this path does not apply: an operator
        apply_into does not compute, dst not f32, an operand not stored as fp32 or shaped otherwise
        than dst, a tile that overlaps dst without being it, a dst that visits a byte twice, views the
        compiled kernel does not take (contiguous or unaligned). The caller then computes the
        general way."""
        plan = self._per_body((dst, tuple(steps), scalars), lambda: self._fp32_plan(dst, steps, scalars))
        if plan is None:
            return False
        codes, names, kinds = plan
        ops = self.instr.operands
        d = ops[dst]
        mem = self.mem
        try:
            out = mem.view5(d)
            if out is None:
                return False
            arrays: dict[Any, np.ndarray | None] = {DST: out}
            for n, kind in zip(names, kinds):
                v = ops[n]
                if kind == _IMMEDIATE:
                    arrays[n] = _constant5(v.value, out.shape)
                elif kind == _COLUMN:
                    arrays[n] = mem.column5(v, out.shape, 5 - len(d.shape)) if v.on_chip else None
                elif _may_overlap(v, d) and v != d:
                    return False
                else:
                    arrays[n] = mem.view5(v)
                if arrays[n] is None:
                    return False
        except AccessError:
            return False  # the general path says where
        for n, kind in zip(names, kinds):
            if kind != _IMMEDIATE:
                self._note_read(n, ops[n])
        mem.mark_written(d)
        self.machine.record(self, d, write=True)
        for code, (_, x, y) in zip(codes, steps):
            alu.apply_into(code, _operand(arrays, x, out.shape), _operand(arrays, y, out.shape), out)
        return True

    def _fp32_plan(self, dst: str, steps: Sequence[tuple[str, Any, Any]],
                   scalars: tuple[str, ...]) -> tuple[list[int], list[str], list[int]] | None:
        """What fp32_into finds without the instruction's offsets and constants (the same for every
        instruction of its body): the operators' codes, the operands it reads and the kind of each
        (_IMMEDIATE, _COLUMN, _TILE); None where the path cannot apply whatever the offsets. Raises the
        general path's error for a column operand of the wrong shape."""
        ops = self.instr.operands
        d = ops[dst]
        if not isinstance(d, AccessPattern) or d.dtype != dtypes.FLOAT32 or not d.on_chip or _self_overlaps(d):
            return None
        codes = []
        names: list[str] = []
        for op, x, y in steps:
            code = alu.INTO_CODES.get(op)
            if code is None:
                return None
            codes.append(code)
            names += [n for n in (x, y) if isinstance(n, str) and n != DST and n not in names]
        kinds = []
        for n in names:
            v = ops[n]
            if isinstance(v, Immediate):
                kinds.append(_IMMEDIATE)
            elif not isinstance(v, AccessPattern) or v.dtype.storage != np.float32:
                return None
            elif n in scalars:
                self.check_column(n, v, d.partitions)  # the general path's error, if any
                kinds.append(_COLUMN)
            elif v.shape != d.shape:
                return None
            else:
                kinds.append(_TILE)
        return codes, names, kinds

    def _per_body(self, key: tuple, make: Callable[[], Any]) -> Any:
        """make(), made once per body of the program (Machine.plans, under (body, *key)) where the
        instruction's body is known: for what depends only on what the instructions of a body share."""
        if self.body is None:
            return make()
        key = (self.body, *key)
        plans = self.machine.plans
        found = plans.get(key, _UNPLANNED)
        if found is _UNPLANNED:
            found = plans[key] = make()
        return found

    # ------------------------------------------------------------------ shapes
    def rows(self, *names: str) -> tuple[int, int]:
        """(partitions, free elements) shared by the named tile operands, else a shape error: an
        elementwise instruction walks every operand's pattern in lockstep. Shapes are a body's, so the
        answer is found once per body."""
        return self._per_body((names,), lambda: self._rows(names))

    def _rows(self, names: tuple[str, ...]) -> tuple[int, int]:
        aps = [(n, self.ap(n)) for n in names]
        problem = lockstep(aps)
        if problem:
            raise self.fail(problem)
        return aps[0][1].partitions, aps[0][1].free_elements

    def read2d(self, name: str) -> np.ndarray:
        """read(name) as [partitions, free elements] float32."""
        ap = self.ap(name)
        return self.read(name).reshape(ap.partitions, ap.free_elements)

    # ------------------------------------------------------------------ errors
    def fail(self, message: str) -> SimError:
        """A SimError at this instruction (raise it: `raise ctx.fail(...)`)."""
        loc = self.machine.loc(self.engine, self.index)
        return SimError(f"{self.instr.mnemonic}: {message}", loc)


# ---------------------------------------------------------------------- fp32_into's helpers
_UNPLANNED = object()  # Machine.plans has no entry for the key
_IMMEDIATE, _COLUMN, _TILE = range(3)  # how fp32_into reads an operand (_fp32_plan)
_CONSTANTS: dict[tuple[float, float, tuple[int, ...]], np.ndarray] = {}


def _constant5(value: float, shape: tuple[int, ...]) -> np.ndarray:
    """A float32 constant as a five-axis array of `shape` (every stride 0), kept by value, sign (-0.0
    equals 0.0 as a key) and shape: a loop uses the same few, and no kernel writes to them."""
    key = (value, math.copysign(1.0, value), shape)
    c = _CONSTANTS.get(key)
    if c is None:
        if len(_CONSTANTS) >= 4096:
            _CONSTANTS.clear()
        c = _CONSTANTS[key] = fit5(np.ndarray(shape, np.float32, np.full(1, value, np.float32), 0, (0,) * 5))
    return c


def _operand(arrays: dict[Any, np.ndarray], x: Any, shape: tuple[int, ...]) -> np.ndarray:
    return _constant5(x, shape) if isinstance(x, float) else arrays[x]


def _may_overlap(a: AccessPattern, b: AccessPattern) -> bool:
    """Whether two patterns may touch a common byte (same memory, partitions and byte ranges meet)."""
    if a.memory != b.memory:
        return False
    if a.on_chip and (a.partition >= b.partition + b.partitions or b.partition >= a.partition + a.partitions):
        return False
    (alo, ahi), (blo, bhi) = a.byte_span(), b.byte_span()
    return alo < bhi and blo < ahi


@functools.lru_cache(maxsize=4096)
def _self_overlaps(ap: AccessPattern) -> bool:
    """Whether the free dimensions may visit one element twice (a stride-0 or interleaved dimension).
    Sufficient test: sorted by |step|, each step passes the whole reach of the smaller ones."""
    reach = 0
    for step, count in sorted((abs(s), c) for s, c in ap.dims if c > 1):
        if step <= reach:
            return True
        reach += step * (count - 1)
    return False
