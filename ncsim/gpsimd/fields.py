"""Operand kinds of the GpSimd core instructions (`isa.CORE_TABLE`) and of the call that starts a
GpSimd program (`gpsimd_call`'s `program`).

Each kind, like those of `ncsim.asm.fields`, parses, checks, encodes, decodes and prints itself;
besides, `columns(value)` gives the integers the interpreter's code matrix holds for it
(`ncsim.gpsimd.code`): one per operand, two for a register-or-immediate (whether it is an
immediate, then the register number or the immediate's 32 bits).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

from ncsim.asm.expr import parse_int, parse_number
from ncsim.asm.fields import (
    INT32_MAX,
    INT32_MIN,
    UINT32_MAX,
    EnumKind,
    FieldError,
    FloatKind,
    IntKind,
    Kind,
    ParseEnv,
    format_float,
    to_f32,
)
from ncsim.asm.lanes import is_int
from ncsim.asm.lexer import Cursor, describe

REGISTERS = 32  # scalar registers r0..r31 and vector registers v0..v31
LANE_TYPES = ("f32", "i32", "i16", "i8")  # a vector register's 512 bits as 16 x 32, 32 x 16 or 64 x 8 lanes
LANE_BYTES = {"f32": 4, "i32": 4, "i16": 2, "i8": 1}
COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
# The calling instruction's operands a program names (gpsimd_call's access-pattern operands).
ARGS = ("out0", "in0", "out1", "in1", "in2", "in3")

LANE = EnumKind(table="lane types", choices=LANE_TYPES)
CMP = EnumKind(table="comparisons", choices=COMPARISONS)
ARG = EnumKind(table="call operands", choices=ARGS)


class Reg(NamedTuple):
    """A scalar register as a register-or-immediate operand's value."""

    n: int

    def __str__(self) -> str:
        return f"r{self.n}"


def f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def bits_f32(b: int) -> float:
    return struct.unpack("<f", struct.pack("<I", b & UINT32_MAX))[0]


@dataclass(frozen=True)
class RegKind(Kind):
    """A register: r0..r31 (scalar, 32 bits) or v0..v31 (vector, 512 bits). With `group` > 1, the first
    of `group` consecutive registers (vld4's destinations): the last must still be a register."""

    prefix: str = "r"
    size: int = 1
    kind_name: str = "register"
    group: int = 1

    @property
    def last(self) -> int:
        """The highest register number that can name the group."""
        return REGISTERS - self.group

    @property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(self.prefix + r"([0-9]+)")

    def describe(self) -> str:
        what = "scalar" if self.prefix == "r" else "vector"
        if self.group > 1:
            return (f"{what} register {self.prefix}0..{self.prefix}{self.last}, the first of {self.group}"
                    " consecutive registers")
        return f"{what} register {self.prefix}0..{self.prefix}{REGISTERS - 1}"

    def parse(self, cur: Cursor, env: ParseEnv) -> int:
        tok = cur.peek()
        m = self.pattern.fullmatch(tok.text) if tok.kind == "ident" else None
        if m is None:
            raise cur.error(f"expected a {self.describe()}, found {describe(tok)}", tok)
        n = int(m.group(1))
        if n >= REGISTERS:
            raise cur.error(f"there is no register {tok.text}: the registers are {self.prefix}0..{self.prefix}"
                            f"{REGISTERS - 1}", tok)
        if n > self.last:
            raise cur.error(f"{tok.text} names {self.group} registers {tok.text}..{self.prefix}{n + self.group - 1},"
                            f" past {self.prefix}{REGISTERS - 1}: the first of the group must be at most"
                            f" {self.prefix}{self.last}", tok)
        cur.next()
        return n

    def check(self, value: Any) -> None:
        if not is_int(value) or not 0 <= value <= self.last:
            raise FieldError(f"register number {value} is outside 0..{self.last}"
                             + (f" (the first of {self.group} consecutive registers)" if self.group > 1 else ""))

    def encode(self, value: int) -> bytes:
        return bytes([value])

    def decode(self, buf: bytes, off: int) -> int:
        self.check(buf[off])
        return buf[off]

    def format(self, value: int) -> str:
        return f"{self.prefix}{value}"

    def columns(self, value: int) -> tuple[int, ...]:
        return (value,)


@dataclass(frozen=True)
class RegOrImmKind(Kind):
    """A scalar register, or an immediate: an int32 (`float_imm` False) or an fp32 value."""

    float_imm: bool = False
    size: int = 5  # u8: 0 register, 1 immediate; u32: register number or the immediate's bits
    kind_name: str = "register or immediate"

    def describe(self) -> str:
        return "scalar register r0..r31 or " + ("an fp32 constant" if self.float_imm else "an int32 constant")

    def parse(self, cur: Cursor, env: ParseEnv) -> Reg | int | float:
        tok = cur.peek()
        if tok.kind == "ident" and re.fullmatch(r"r[0-9]+", tok.text) and tok.text not in env.names:
            return Reg(RegKind("r").parse(cur, env))
        if self.float_imm:
            return to_f32(float(parse_number(cur, env.names)))
        return parse_int(cur, env.names, "a register or an integer")

    def check(self, value: Any) -> None:
        if isinstance(value, Reg):
            RegKind("r").check(value.n)
        elif self.float_imm:
            FloatKind().check(value)
        elif not is_int(value) or not INT32_MIN <= value <= INT32_MAX:
            raise FieldError(f"{value} does not fit in an int32")

    def encode(self, value: Reg | float) -> bytes:
        if isinstance(value, Reg):
            return struct.pack("<BI", 0, value.n)
        return struct.pack("<BI", 1, f32_bits(value) if self.float_imm else value & UINT32_MAX)

    def decode(self, buf: bytes, off: int) -> Reg | int | float:
        flag, raw = struct.unpack_from("<BI", buf, off)
        if flag == 0:
            RegKind("r").check(raw)
            return Reg(raw)
        if flag != 1:
            raise FieldError(f"register-or-immediate flag is {flag}, not 0 or 1")
        return bits_f32(raw) if self.float_imm else raw - (1 << 32) if raw > INT32_MAX else raw

    def format(self, value: Reg | float) -> str:
        if isinstance(value, Reg):
            return str(value)
        return format_float(value) if self.float_imm else str(value)

    def columns(self, value: Reg | float) -> tuple[int, ...]:
        if isinstance(value, Reg):
            return (0, value.n)
        return (1, f32_bits(value) if self.float_imm else value)


class CoreEnv(ParseEnv):
    """Names inside a `.gpsimd` section: the source's constants and the section's labels."""

    def __init__(self, names: dict[str, int | float], labels: dict[str, int] | None = None):
        super().__init__()
        self.names = names
        self.labels: dict[str, int] = labels or {}


@dataclass(frozen=True)
class TargetKind(Kind):
    """A branch target: a label of the program, or an instruction index (how the disassembler prints it)."""

    size: int = 4
    kind_name: str = "branch target"

    def describe(self) -> str:
        return "a label of the program (or an instruction index)"

    def parse(self, cur: Cursor, env: ParseEnv) -> int:
        tok = cur.peek()
        labels = getattr(env, "labels", {})
        if tok.kind == "ident" and tok.text in labels and tok.text not in env.names:
            cur.next()
            return labels[tok.text]
        if tok.kind == "ident" and tok.text not in env.names:
            raise cur.error(f"unknown label '{tok.text}'", tok)
        return parse_int(cur, env.names, "a label")

    def check(self, value: Any) -> None:
        IntKind(lo=0, hi=UINT32_MAX - 1).check(value)

    def encode(self, value: int) -> bytes:
        return struct.pack("<I", value)

    def decode(self, buf: bytes, off: int) -> int:
        return struct.unpack_from("<I", buf, off)[0]

    def format(self, value: int) -> str:
        return str(value)

    def columns(self, value: int) -> tuple[int, ...]:
        return (value,)


@dataclass(frozen=True)
class ProgramKind(Kind):
    """gpsimd_call's program: the name of a `.gpsimd` section of the source, encoded as its index in
    the object's GpSimd programs. Decoded alone it is that index; a loaded program links it to the
    `CoreProgram` (`ncsim.program.Program`), which prints as its name."""

    size: int = 2
    kind_name: str = "GpSimd program"

    def describe(self) -> str:
        return "the name of a .gpsimd section"

    def parse(self, cur: Cursor, env: ParseEnv) -> Any:
        tok = cur.peek()
        programs = getattr(env, "gpsimd_programs", {})
        if tok.kind == "ident" and tok.text in programs:
            cur.next()
            return programs[tok.text]
        if tok.kind == "ident" and tok.text not in env.names:
            raise cur.error(f"no .gpsimd section named '{tok.text}' comes before this line", tok,
                            notes=("a GpSimd program is declared with '.gpsimd NAME' ... '.end' before its calls",))
        return parse_int(cur, env.names, "a GpSimd program")

    def check(self, value: Any) -> None:
        index = getattr(value, "index", value)
        if not is_int(index) or not 0 <= index < 2**16:
            raise FieldError(f"program index {index} is outside 0..65535")

    def encode(self, value: Any) -> bytes:
        return struct.pack("<H", getattr(value, "index", value))

    def decode(self, buf: bytes, off: int) -> int:
        return struct.unpack_from("<H", buf, off)[0]

    def format(self, value: Any) -> str:
        return str(getattr(value, "name", value))


def columns(kind: Kind, value: Any) -> tuple[int, ...]:
    """The code matrix's integers for one operand (module docstring)."""
    if isinstance(kind, (RegKind, RegOrImmKind, TargetKind)):
        return kind.columns(value)
    if isinstance(kind, EnumKind):
        return (kind.choices.index(value),)
    if isinstance(kind, FloatKind):
        return (f32_bits(value),)
    return (int(value),)


def width(kind: Kind) -> int:
    return 2 if isinstance(kind, RegOrImmKind) else 1
