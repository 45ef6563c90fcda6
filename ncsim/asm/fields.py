"""Operand kinds: the small table of typed fields that instructions are made of.

Each kind knows how to parse its value from assembly tokens, check it against the limits of the
encoding, encode it into a fixed number of bytes, decode it back, print it in the canonical form
that parses to the same value, and describe itself for `ncsim isa` and docs/isa.md.

Limits here are the encoding's (an 8-bit partition start, 4 free dimensions). Limits that depend on
the hardware configuration (SBUF size, partition-start rules) are checked in `ncsim.asm.rules`.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ncsim import dtypes
from ncsim.asm.expr import parse_int, parse_number
from ncsim.asm.lanes import Lanes, Unvectorisable, is_int
from ncsim.asm.lexer import Cursor, describe
from ncsim.memory.access import AccessPattern, Immediate, Memory

SEM_NAME = re.compile(r"s[0-9]+")
MAX_FREE_DIMS = 4  # on-chip: partition dimension plus up to 4 free dimensions (docs/hardware.md#access)
MAX_HBM_DIMS = 5  # HBM: the outermost dimension stands in for the partition dimension
MAX_PARTITIONS = 128
INT32_MIN, INT32_MAX, UINT32_MAX = -(2**31), 2**31 - 1, 2**32 - 1


def put_lanes(out: np.ndarray, off: int, value: Any, width: int) -> None:
    """Write `value` (if it has lanes) as a little-endian integer of `width` bytes (two's complement,
    low bytes kept, as struct packing with truncation does) at byte `off` of every row of `out`."""
    if isinstance(value, Lanes):
        raw = value.v.astype("<i8").view(np.uint8).reshape(-1, 8)
        out[:, off:off + width] = raw[:, :width]


class FieldError(ValueError):
    """A value that breaks a kind's rule; the caller adds where (source place or byte offset)."""


class ParseEnv:
    """Names an operand may use. The raw instruction layer knows only integer constants; the
    language layer (declared tensors, named semaphores) extends this."""

    def __init__(self, names: dict[str, int | float] | None = None):
        self.names: dict[str, int | float] = dict(names or {})

    def tensor_operand(self, cur: Cursor) -> AccessPattern | None:
        """An operand written as a declared tensor or a slice of one; None if the next token is not."""
        return None

    def semaphore(self, cur: Cursor) -> int | None:
        """A semaphore written by name; None if the next token is not one."""
        return None

    def raw_semaphore(self, number: int, cur: Cursor) -> None:
        """A semaphore written by number (the cursor is on it): the language layer keeps it apart from
        the named ones."""

    def is_semaphore(self, name: str) -> bool:
        """Whether `name` denotes a semaphore (so `s3=0` is an update, not an operand named s3)."""
        return SEM_NAME.fullmatch(name) is not None


def parse_list(cur: Cursor, item: Callable[[], Any]) -> tuple[Any, ...]:
    """`[a, b, ...]` (possibly empty), or a single item without brackets."""
    if not cur.accept("["):
        return (item(),)
    items = []
    if not cur.at("]"):
        items.append(item())
        while cur.accept(","):
            items.append(item())
    cur.expect("]", "to close the list")
    return tuple(items)


class Kind:
    """Base of the operand kinds. `size` is the number of encoded bytes."""

    size: int = 0
    kind_name: str = ""

    def parse(self, cur: Cursor, env: ParseEnv) -> Any:
        raise NotImplementedError

    def check(self, value: Any) -> None:
        """Raise FieldError saying the rule if `value` cannot be encoded."""

    def encode(self, value: Any) -> bytes:
        raise NotImplementedError

    def decode(self, buf: bytes, off: int) -> Any:
        raise NotImplementedError

    def patch(self, out: np.ndarray, off: int, value: Any) -> None:
        """Write the parts of `value` that differ between lanes (`ncsim.asm.lanes`) into the encoded
        rows `out` [lanes, bytes] at byte `off`; the rest is already there, encoded from lane 0."""
        raise Unvectorisable(f"{self.kind_name} operands cannot differ between loop iterations here")

    def format(self, value: Any) -> str:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def parse_checked(self, cur: Cursor, env: ParseEnv) -> Any:
        start = cur.peek()
        value = self.parse(cur, env)
        try:
            self.check(value)
        except FieldError as e:
            end = cur.toks[max(cur.i - 1, 0)]
            length = max(1, end.col + len(end.text) - start.col)
            raise cur.line.error(str(e), start).at(cur.line.loc(start.col, length)) from None
        return value


# --------------------------------------------------------------------------- access patterns

MEMORY_BY_NAME = {"sbuf": Memory.SBUF, "psum": Memory.PSUM, "hbm": Memory.HBM}
_AP = struct.Struct("<BBBBHHq" + "iI" * MAX_HBM_DIMS)  # 56 bytes


def format_float(x: float) -> str:
    """The shortest text that reads back as the same fp32 value."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return str(np.float32(x))


def to_f32(x: float) -> float:
    """Round a Python float to the nearest fp32 value (round-to-nearest-even)."""
    with np.errstate(over="ignore"):
        return float(np.float32(x))


_CONST_DTYPES = ("u8", "u16", "u32", "i8", "i16", "i32", "f32")


def const_of(value: float) -> Immediate:
    """A number as a constant: a float becomes fp32, an integer int32 (uint32 above 2**31 - 1).
    FieldError if an integer does not fit in 32 bits. The assembler and the NKI tracer both use it."""
    if isinstance(value, float):
        return Immediate(to_f32(value), dtypes.FLOAT32)
    if not INT32_MIN <= value <= UINT32_MAX:
        raise FieldError(f"constant {value} does not fit in 32 bits")
    return Immediate(value, dtypes.INT32 if value <= INT32_MAX else dtypes.by_name("u32"))


def parse_const(cur: Cursor, env: ParseEnv) -> Immediate:
    """A constant (const_of of the number written)."""
    tok = cur.peek()
    value = parse_number(cur, env.names)
    try:
        return const_of(value)
    except FieldError as e:
        raise cur.error(str(e), tok) from None


def const_bits(imm: Immediate) -> int:
    if imm.dtype.is_float:
        return struct.unpack("<I", struct.pack("<f", imm.value))[0]
    return imm.value & UINT32_MAX


def const_from_bits(code: int, bits: int) -> Immediate:
    dt = dtypes.by_code(code)
    if dt is None or dt.short not in _CONST_DTYPES or bits >> 32:
        raise FieldError(f"malformed constant (dtype code {code})")
    if dt.is_float:
        return Immediate(struct.unpack("<f", struct.pack("<I", bits))[0], dt)
    if dt.short == "u32":
        return Immediate(bits, dt)
    return Immediate(int(np.int32(np.uint32(bits))), dtypes.INT32)


def format_const(imm: Immediate) -> str:
    return format_float(imm.value) if imm.dtype.is_float else str(imm.value)


@dataclass(frozen=True)
class ConstKind(Kind):
    """A constant scalar (memset's value): a float is held as fp32, an integer as int32/uint32."""

    size: int = 5
    kind_name: str = "constant"

    def describe(self) -> str:
        return "a constant (float or integer)"

    def parse(self, cur: Cursor, env: ParseEnv) -> Immediate:
        return parse_const(cur, env)

    def check(self, value: Any) -> None:
        if not isinstance(value, Immediate):
            raise FieldError("expected a constant")

    def encode(self, value: Immediate) -> bytes:
        return struct.pack("<BI", value.dtype.code, const_bits(value))

    def decode(self, buf: bytes, off: int) -> Immediate:
        code, bits = struct.unpack_from("<BI", buf, off)
        return const_from_bits(code, bits)

    def patch(self, out: np.ndarray, off: int, value: Immediate) -> None:
        if value.dtype.is_float:
            super().patch(out, off, value)
        put_lanes(out, off + 1, value.value, 4)

    def format(self, value: Immediate) -> str:
        return format_const(value)


@dataclass(frozen=True)
class APKind(Kind):
    """An access pattern in one of `memories`; with `imm`, also a constant scalar; with `optional`,
    it may be absent (encoded as memory none)."""

    memories: tuple[Memory, ...] = (Memory.SBUF, Memory.PSUM)
    imm: bool = False
    optional: bool = False
    size: int = _AP.size
    kind_name: str = "access pattern"

    def describe(self) -> str:
        mems = "/".join(m.label for m in self.memories)
        text = f"access pattern in {mems}"
        if self.imm:
            text += ", or a constant"
        return text

    def parse(self, cur: Cursor, env: ParseEnv) -> AccessPattern | Immediate | None:
        tok = cur.peek()
        if tok.kind == "ident" and tok.text == "none" and self.optional:
            cur.next()
            return None
        if tok.kind == "ident" and tok.text in MEMORY_BY_NAME and cur.peek(1).is_("."):
            return self._parse_raw(cur, env)
        if tok.kind == "ident" and tok.text not in ("inf", "nan") and tok.text not in env.names:
            ap = env.tensor_operand(cur)
            if ap is not None:
                return ap
            raise cur.error(
                f"expected {self.describe()}, found unknown name '{tok.text}'",
                tok,
                notes=("a raw access pattern reads MEM.DTYPE[start:stop, @offset, [step,count], ...]",),
            )
        if self.imm:
            return parse_const(cur, env)
        raise cur.error(f"expected {self.describe()}, found {describe(tok)}", tok)

    def _parse_raw(self, cur: Cursor, env: ParseEnv) -> AccessPattern:
        mem_tok = cur.next()
        memory = MEMORY_BY_NAME[mem_tok.text]
        cur.expect(".", "between memory and dtype")
        dt_tok = cur.expect_ident("a dtype")
        dt = dtypes.by_name(dt_tok.text)
        if dt is None:
            raise cur.error(f"unknown dtype '{dt_tok.text}'", dt_tok,
                            notes=("dtypes: " + ", ".join(dtypes.dtype_names()),))
        cur.expect("[", "to open the access pattern")
        partition = partitions = 0
        if memory != Memory.HBM:
            partition = parse_int(cur, env.names, "the first partition")
            cur.expect(":", "in the partition range start:stop")
            stop_tok = cur.peek()
            stop = parse_int(cur, env.names, "the partition after the last")
            partitions = stop - partition
            if partitions < 1:
                raise cur.error(f"empty partition range {partition}:{stop}", stop_tok)
            cur.expect(",", "after the partition range")
        cur.expect("@", "before the byte offset")
        offset = parse_int(cur, env.names, "a byte offset")
        dims: list[tuple[int, int]] = []
        while cur.accept(","):
            cur.expect("[", "to open a [step, count] dimension")
            step = parse_int(cur, env.names, "a step")
            cur.expect(",", "between step and count")
            count = parse_int(cur, env.names, "a count")
            cur.expect("]", "to close the [step, count] dimension")
            dims.append((step, count))
        cur.expect("]", "to close the access pattern")
        if memory not in self.memories:
            raise cur.error(f"this operand must be in {'/'.join(m.label for m in self.memories)},"
                            f" not {memory.label}", mem_tok)
        return AccessPattern(memory, dt, partition, partitions, offset, tuple(dims))

    def check(self, value: Any) -> None:
        if value is None:
            if not self.optional:
                raise FieldError("this operand is required")
            return
        if isinstance(value, Immediate):
            if not self.imm:
                raise FieldError("this operand must be an access pattern, not a constant")
            return
        ap: AccessPattern = value
        if ap.memory not in self.memories:
            raise FieldError(f"this operand must be in {'/'.join(m.label for m in self.memories)},"
                             f" not {ap.memory.label}")
        limit = MAX_HBM_DIMS if ap.memory == Memory.HBM else MAX_FREE_DIMS
        if not 1 <= len(ap.dims) <= limit:
            raise FieldError(f"{ap.memory.label} access patterns have 1 to {limit} [step, count] dimensions,"
                             f" this one has {len(ap.dims)}")
        for step, count in ap.dims:
            if not INT32_MIN <= step <= INT32_MAX:
                raise FieldError(f"step {step} does not fit in 32 bits")
            if not 1 <= count <= UINT32_MAX:
                raise FieldError(f"a dimension's count must be at least 1, not {count}")
        if ap.memory == Memory.HBM:
            if ap.partition or ap.partitions:
                raise FieldError("hbm access patterns have no partition range")
        else:
            if not 1 <= ap.partitions <= MAX_PARTITIONS or not 0 <= ap.partition < MAX_PARTITIONS:
                raise FieldError(f"partitions {ap.partition}:{ap.partition + ap.partitions} are outside 0:128")
            if ap.partition + ap.partitions > MAX_PARTITIONS:
                raise FieldError(f"partitions {ap.partition}:{ap.partition + ap.partitions} run past 128")
        if not 0 <= ap.offset < 2**63:
            raise FieldError(f"byte offset {ap.offset} is negative or too large")
        if ap.byte_span()[0] < 0:
            raise FieldError("the pattern reaches below its byte offset's memory start")

    def encode(self, value: Any) -> bytes:
        if value is None:
            return _AP.pack(Memory.NONE, 0, 0, 0, 0, 0, 0, *([0] * 2 * MAX_HBM_DIMS))
        if isinstance(value, Immediate):
            return _AP.pack(Memory.IMM, value.dtype.code, 0, 0, 0, 0, const_bits(value), *([0] * 2 * MAX_HBM_DIMS))
        ap: AccessPattern = value
        flat = [x for d in ap.dims for x in d] + [0] * 2 * (MAX_HBM_DIMS - len(ap.dims))
        return _AP.pack(ap.memory, ap.dtype.code, ap.partition, len(ap.dims), ap.partitions, 0, ap.offset, *flat)

    def decode(self, buf: bytes, off: int) -> Any:
        mem, code, partition, ndims, partitions, reserved, offset, *flat = _AP.unpack_from(buf, off)
        try:
            memory = Memory(mem)
        except ValueError:
            raise FieldError(f"memory code {mem} is no memory") from None
        if reserved:
            raise FieldError("reserved bits of an access pattern are not zero")
        if memory == Memory.NONE:
            if code or partition or ndims or partitions or offset or any(flat):
                raise FieldError("an absent operand has non-zero fields")
            return None
        if memory == Memory.IMM:
            if partition or ndims or partitions or any(flat) or offset < 0:
                raise FieldError("malformed constant operand")
            if not self.imm:
                raise FieldError("this operand cannot be a constant")
            return const_from_bits(code, offset)
        dt = dtypes.by_code(code)
        if dt is None:
            raise FieldError(f"dtype code {code} is no dtype")
        if ndims > MAX_HBM_DIMS or any(flat[2 * ndims:]):
            raise FieldError(f"malformed access pattern with {ndims} dimensions")
        dims = tuple((flat[2 * i], flat[2 * i + 1]) for i in range(ndims))
        ap = AccessPattern(memory, dt, partition, partitions, offset, dims)
        self.check(ap)
        return ap

    def patch(self, out: np.ndarray, off: int, value: Any) -> None:
        if isinstance(value, Immediate):
            put_lanes(out, off + 8, value.value & UINT32_MAX, 8)
            return
        ap: AccessPattern = value
        put_lanes(out, off + 2, ap.partition, 1)
        put_lanes(out, off + 4, ap.partitions, 2)
        put_lanes(out, off + 8, ap.offset, 8)
        for d, (step, count) in enumerate(ap.dims):
            put_lanes(out, off + 16 + 8 * d, step, 4)
            put_lanes(out, off + 20 + 8 * d, count, 4)

    def format(self, value: Any) -> str:
        if value is None:
            return "none"
        if isinstance(value, Immediate):
            return format_const(value)
        ap: AccessPattern = value
        parts = [] if ap.memory == Memory.HBM else [f"{ap.partition}:{ap.partition + ap.partitions}"]
        parts.append(f"@{ap.offset}")
        parts += [f"[{s},{c}]" for s, c in ap.dims]
        return f"{ap.memory.label}.{ap.dtype.short}[{', '.join(parts)}]"


# --------------------------------------------------------------------------- scalars

NONE_U32 = 0xFFFFFFFF  # an optional IntKind's `none`


@dataclass(frozen=True)
class IntKind(Kind):
    """An integer immediate in [lo, hi], encoded in 4 bytes. With `optional` (only for lo >= 0) it
    may also be `none`, encoded as 0xFFFFFFFF."""

    lo: int = INT32_MIN
    hi: int = INT32_MAX
    optional: bool = False
    size: int = 4
    kind_name: str = "integer"

    def __post_init__(self) -> None:
        assert not self.optional or 0 <= self.lo <= self.hi < NONE_U32, "optional integers are unsigned"

    def describe(self) -> str:
        return f"integer {self.lo}..{self.hi}" + (", or none" if self.optional else "")

    def parse(self, cur: Cursor, env: ParseEnv) -> int | None:
        tok = cur.peek()
        if self.optional and tok.kind == "ident" and tok.text == "none":
            cur.next()
            return None
        return parse_int(cur, env.names, "an integer" + (" or none" if self.optional else ""))

    def check(self, value: Any) -> None:
        if value is None and self.optional:
            return
        if not is_int(value) or not self.lo <= value <= self.hi:
            raise FieldError(f"{value} is outside {self.lo}..{self.hi}")

    def encode(self, value: int | None) -> bytes:
        return struct.pack("<q", NONE_U32 if value is None else value)[:4]

    def patch(self, out: np.ndarray, off: int, value: Any) -> None:
        put_lanes(out, off, value, 4)

    def decode(self, buf: bytes, off: int) -> int | None:
        fmt = "<i" if self.lo < 0 else "<I"
        value = struct.unpack_from(fmt, buf, off)[0]
        if self.optional and value == NONE_U32:
            return None
        self.check(value)
        return value

    def format(self, value: int | None) -> str:
        return "none" if value is None else str(value)



@dataclass(frozen=True)
class FloatKind(Kind):
    """A float immediate, held as an fp32 value."""

    size: int = 4
    kind_name: str = "float"

    def describe(self) -> str:
        return "fp32 constant"

    def parse(self, cur: Cursor, env: ParseEnv) -> float:
        return to_f32(float(parse_number(cur, env.names)))

    def check(self, value: Any) -> None:
        if not isinstance(value, float) or (not math.isnan(value) and to_f32(value) != value):
            raise FieldError(f"{value!r} is not an fp32 value")

    def encode(self, value: float) -> bytes:
        return struct.pack("<f", value)

    def decode(self, buf: bytes, off: int) -> float:
        return struct.unpack_from("<f", buf, off)[0]

    def format(self, value: float) -> str:
        return format_float(value)


@dataclass(frozen=True)
class BoolKind(Kind):
    size: int = 1
    kind_name: str = "bool"

    def describe(self) -> str:
        return "true or false (or an expression giving 1 or 0)"

    def parse(self, cur: Cursor, env: ParseEnv) -> bool:
        tok = cur.peek()
        if tok.kind == "ident" and tok.text in ("true", "false"):
            cur.next()
            return tok.text == "true"
        value = parse_int(cur, env.names, "true, false or an integer expression giving 0 or 1")
        if value not in (0, 1):
            raise cur.error(f"expected true or false (or 1 or 0), the expression gives {value}", tok)
        return bool(value)

    def encode(self, value: bool) -> bytes:
        return bytes([int(value)])

    def decode(self, buf: bytes, off: int) -> bool:
        if buf[off] > 1:
            raise FieldError(f"boolean byte is {buf[off]}, not 0 or 1")
        return bool(buf[off])

    def format(self, value: bool) -> str:
        return "true" if value else "false"


@dataclass(frozen=True)
class EnumKind(Kind):
    """One name from a fixed list (ALU operators, activation functions, engines); encoded as its index."""

    table: str = ""
    choices: tuple[str, ...] = ()
    aliases: dict[str, str] | None = None  # other accepted spellings (max -> maximum)
    optional: bool = False  # may be `none` (encoded as 255)
    size: int = 1
    kind_name: str = "enum"

    def __hash__(self) -> int:
        return hash((self.table, self.choices, self.optional))

    def describe(self) -> str:
        text = f"one of the {self.table}" if len(self.choices) > 6 else "one of " + ", ".join(self.choices)
        return text + (", or none" if self.optional else "")

    def parse(self, cur: Cursor, env: ParseEnv) -> str | None:
        tok = cur.peek()
        if tok.kind != "ident":
            raise cur.error(f"expected {self.describe()}, found {describe(tok)}", tok)
        if tok.text == "none" and self.optional:
            cur.next()
            return None
        name = (self.aliases or {}).get(tok.text, tok.text)
        if name not in self.choices:
            raise cur.error(f"'{tok.text}' is not one of the {self.table}", tok,
                            notes=(suggest(name, self.choices),))
        cur.next()
        return name

    def check(self, value: Any) -> None:
        if value is None and self.optional:
            return
        if value not in self.choices:
            raise FieldError(f"{value!r} is not one of the {self.table}")

    def encode(self, value: str | None) -> bytes:
        return bytes([255 if value is None else self.choices.index(value)])

    def decode(self, buf: bytes, off: int) -> str | None:
        code = buf[off]
        if code == 255 and self.optional:
            return None
        if code >= len(self.choices):
            raise FieldError(f"code {code} is none of the {len(self.choices)} {self.table}")
        return self.choices[code]

    def format(self, value: str | None) -> str:
        return "none" if value is None else value


@dataclass(frozen=True)
class IntListKind(Kind):
    """A bracketed list of up to `max_len` integers in [lo, hi] (free axes, a shuffle mask, steps)."""

    max_len: int = 4
    lo: int = INT32_MIN
    hi: int = INT32_MAX
    min_len: int = 0
    what: str = "integers"
    kind_name: str = "integer list"

    @property
    def size(self) -> int:  # type: ignore[override]
        return 1 + 4 * self.max_len

    def describe(self) -> str:
        n = f"{self.min_len}..{self.max_len}" if self.min_len != self.max_len else str(self.max_len)
        return f"[list of {n} {self.what}, each {self.lo}..{self.hi}]"

    def parse(self, cur: Cursor, env: ParseEnv) -> tuple[int, ...]:
        return parse_list(cur, lambda: parse_int(cur, env.names, self.what))

    def check(self, value: Any) -> None:
        if not self.min_len <= len(value) <= self.max_len:
            raise FieldError(f"expected {self.min_len} to {self.max_len} {self.what}, got {len(value)}")
        for v in value:
            if not self.lo <= v <= self.hi:
                raise FieldError(f"{v} is outside {self.lo}..{self.hi}")

    def encode(self, value: tuple[int, ...]) -> bytes:
        padded = list(value) + [0] * (self.max_len - len(value))
        return bytes([len(value)]) + struct.pack(f"<{self.max_len}i", *padded)

    def patch(self, out: np.ndarray, off: int, value: Any) -> None:
        for j, v in enumerate(value):
            put_lanes(out, off + 1 + 4 * j, v, 4)

    def decode(self, buf: bytes, off: int) -> tuple[int, ...]:
        n = buf[off]
        items = struct.unpack_from(f"<{self.max_len}i", buf, off + 1)
        if n > self.max_len or any(items[n:]):
            raise FieldError(f"malformed list of {n} {self.what}")
        value = tuple(items[:n])
        self.check(value)
        return value

    def format(self, value: tuple[int, ...]) -> str:
        return "[" + ", ".join(str(v) for v in value) + "]"


@dataclass(frozen=True)
class PatternKind(Kind):
    """An affine index pattern: up to 4 [step, count] pairs (iota and affine_select values)."""

    size: int = 1 + 8 * MAX_FREE_DIMS
    kind_name: str = "pattern"

    def describe(self) -> str:
        return "[[step, count], ...] with 1 to 4 dimensions"

    def parse(self, cur: Cursor, env: ParseEnv) -> tuple[tuple[int, int], ...]:
        cur.expect("[", "to open the pattern")
        dims: list[tuple[int, int]] = []
        while True:
            cur.expect("[", "to open a [step, count] pair")
            step = parse_int(cur, env.names, "a step")
            cur.expect(",", "between step and count")
            count = parse_int(cur, env.names, "a count")
            cur.expect("]", "to close the [step, count] pair")
            dims.append((step, count))
            if not cur.accept(","):
                break
        cur.expect("]", "to close the pattern")
        return tuple(dims)

    def check(self, value: Any) -> None:
        if not 1 <= len(value) <= MAX_FREE_DIMS:
            raise FieldError(f"a pattern has 1 to {MAX_FREE_DIMS} dimensions, not {len(value)}")
        for step, count in value:
            if not INT32_MIN <= step <= INT32_MAX or not 1 <= count <= INT32_MAX:
                raise FieldError(f"[{step}, {count}] is out of range (step fits 32 bits, count >= 1)")

    def encode(self, value: tuple[tuple[int, int], ...]) -> bytes:
        flat = [x for d in value for x in d] + [0] * 2 * (MAX_FREE_DIMS - len(value))
        return bytes([len(value)]) + struct.pack(f"<{2 * MAX_FREE_DIMS}i", *flat)

    def patch(self, out: np.ndarray, off: int, value: Any) -> None:
        for d, (step, count) in enumerate(value):
            put_lanes(out, off + 1 + 8 * d, step, 4)
            put_lanes(out, off + 5 + 8 * d, count, 4)

    def decode(self, buf: bytes, off: int) -> tuple[tuple[int, int], ...]:
        n = buf[off]
        flat = struct.unpack_from(f"<{2 * MAX_FREE_DIMS}i", buf, off + 1)
        if n > MAX_FREE_DIMS or any(flat[2 * n:]):
            raise FieldError(f"malformed pattern with {n} dimensions")
        value = tuple((flat[2 * i], flat[2 * i + 1]) for i in range(n))
        self.check(value)
        return value

    def format(self, value: tuple[tuple[int, int], ...]) -> str:
        return "[" + ", ".join(f"[{s},{c}]" for s, c in value) + "]"


# --------------------------------------------------------------------------- semaphores

WAIT_OPS = (">=", "==")  # wait until the semaphore's value is >= / == the operand
SIGNAL_OPS = ("+=", "-=", "=")  # on completion: increment, decrement, set
_SEM = struct.Struct("<BBHI")


@dataclass(frozen=True)
class SemOp:
    """One semaphore condition (`s3>=2`) or update (`s3+=1`)."""

    sem: int
    op: str
    value: int

    def __str__(self) -> str:
        return f"s{self.sem}{self.op}{self.value}"

    def named(self, names: Mapping[int, str]) -> str:
        """As the source writes it: `ready>=1` for a semaphore named by `.sem`, else `s3>=1`."""
        return f"{names.get(self.sem, f's{self.sem}')}{self.op}{self.value}"


@dataclass(frozen=True)
class SemListKind(Kind):
    """`[s3>=2, s5>=1]` (waits) or `[s4+=1]` (signals). Encoded after the fixed fields, 8 bytes an
    entry, with the counts in the instruction header."""

    ops: tuple[str, ...] = WAIT_OPS
    max_len: int = 8
    num_sems: int = 256
    entry_size: int = _SEM.size
    size: int = 0  # variable: lives in the instruction's tail
    kind_name: str = "semaphore list"

    def describe(self) -> str:
        return f"[sN{self.ops[0]}value, ...], up to {self.max_len} (ops: {' '.join(self.ops)})"

    def parse_item(self, cur: Cursor, env: ParseEnv) -> SemOp:
        tok = cur.peek()
        sem = env.semaphore(cur)
        if sem is None:
            if tok.kind != "ident" or not tok.text[1:].isdigit() or tok.text[0] != "s":
                raise cur.error(f"expected a semaphore (s0..s{self.num_sems - 1}), found {describe(tok)}", tok)
            sem = int(tok.text[1:])
            env.raw_semaphore(sem, cur)
            cur.next()
        op_tok = cur.peek()
        if op_tok.kind != "punct" or op_tok.text not in self.ops:
            raise cur.error(f"expected one of {' '.join(self.ops)} after the semaphore, found {describe(op_tok)}",
                            op_tok)
        cur.next()
        value = parse_int(cur, env.names, "a semaphore value")
        item = SemOp(sem, op_tok.text, value)
        try:
            self.check_item(item)
        except FieldError as e:
            raise cur.error(str(e), tok) from None
        return item

    def parse(self, cur: Cursor, env: ParseEnv) -> tuple[SemOp, ...]:
        return parse_list(cur, lambda: self.parse_item(cur, env))

    def check_item(self, item: SemOp) -> None:
        if not 0 <= item.sem < self.num_sems:
            raise FieldError(f"semaphore s{item.sem} does not exist: there are {self.num_sems} (s0..s255)")
        if item.op not in self.ops:
            raise FieldError(f"'{item.op}' is not one of {' '.join(self.ops)}")
        if not 0 <= item.value <= UINT32_MAX:
            raise FieldError(f"semaphore value {item.value} is outside 0..{UINT32_MAX}")

    def check(self, value: Any) -> None:
        if len(value) > self.max_len:
            raise FieldError(f"at most {self.max_len} semaphores per instruction, not {len(value)}")
        for item in value:
            self.check_item(item)

    def encode(self, value: tuple[SemOp, ...]) -> bytes:
        return b"".join(_SEM.pack(i.sem, self.ops.index(i.op), 0, i.value) for i in value)

    def patch(self, out: np.ndarray, off: int, value: Any) -> None:
        for j, item in enumerate(value):
            put_lanes(out, off + _SEM.size * j + 4, item.value, 4)

    def decode_items(self, buf: bytes, off: int, n: int) -> tuple[SemOp, ...]:
        items = []
        for k in range(n):
            sem, op, pad, value = _SEM.unpack_from(buf, off + k * _SEM.size)
            if op >= len(self.ops) or pad:
                raise FieldError(f"malformed semaphore entry (op code {op})")
            items.append(SemOp(sem, self.ops[op], value))
        return tuple(items)

    def format(self, value: tuple[SemOp, ...]) -> str:
        return "[" + ", ".join(str(i) for i in value) + "]"


@dataclass(frozen=True)
class SemOneKind(Kind):
    """One semaphore condition or update, as the operand of sem_wait / sem_signal."""

    ops: tuple[str, ...] = WAIT_OPS
    size: int = _SEM.size
    kind_name: str = "semaphore"

    @property
    def _list(self) -> SemListKind:
        return SemListKind(ops=self.ops)

    def describe(self) -> str:
        return f"sN{self.ops[0]}value (ops: {' '.join(self.ops)})"

    def parse(self, cur: Cursor, env: ParseEnv) -> SemOp:
        return self._list.parse_item(cur, env)

    def check(self, value: Any) -> None:
        self._list.check_item(value)

    def encode(self, value: SemOp) -> bytes:
        return self._list.encode((value,))

    def patch(self, out: np.ndarray, off: int, value: Any) -> None:
        self._list.patch(out, off, (value,))

    def decode(self, buf: bytes, off: int) -> SemOp:
        return self._list.decode_items(buf, off, 1)[0]

    def format(self, value: SemOp) -> str:
        return str(value)


def suggest(name: str, choices: Any) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.6)
    if close:
        return "did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
    choices = list(choices)
    shown = ", ".join(choices[:40]) + (", ..." if len(choices) > 40 else "")
    return "choices: " + shown
