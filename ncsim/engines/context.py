"""What an instruction's `execute` function sees: its operands, memory reads and writes, and errors.

An execute function is `fn(ctx: Context) -> None`. It reads operands with `ctx.read(name)` (values
widened to float32, shaped like the operand: partitions first), computes, and stores with
`ctx.write(name, values)` (narrowed to the operand's dtype, round to nearest even). Every read and
write is recorded as a footprint for the race checker, and a read of memory nothing wrote is
reported as a warning naming the instruction's source line. `ctx.fail(message)` raises a SimError
placed at the instruction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ncsim import dtypes, numerics
from ncsim.asm.rules import column_problem, lockstep
from ncsim.engines import alu
from ncsim.errors import SimError
from ncsim.memory.access import AccessPattern, Immediate
from ncsim.memory.state import AccessError

if TYPE_CHECKING:
    from ncsim.asm.instruction import Instruction
    from ncsim.runtime.machine import Machine

Operand = AccessPattern | Immediate | None


class Context:
    def __init__(self, machine: Machine, engine: str, index: int, instr: Instruction):
        self.machine = machine
        self.config = machine.config
        self.mem = machine.mem
        self.engine = engine
        self.index = index
        self.instr = instr
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
            missing = self.mem.unwritten(ap)
        except AccessError as e:
            raise self.fail(f"{self.label(name_or_ap)}: {e}") from None
        self.machine.record(self, ap, write=False)
        if missing:
            self.machine.warn_unwritten(self, name_or_ap, ap, missing)
        return view

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

    # ------------------------------------------------------------------ shapes
    def rows(self, *names: str) -> tuple[int, int]:
        """(partitions, free elements) shared by the named tile operands, else a shape error: an
        elementwise instruction walks every operand's pattern in lockstep."""
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
