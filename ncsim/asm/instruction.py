"""Instructions as values, and the four loops over the table: encode, decode, print, parse.

Binary encoding of one instruction (little-endian; every size is a multiple of 8 bytes):

    header   8 bytes   opcode u8 | engine u8 | waits u8 | signals u8 | size u16 | reserved u16 (zero)
    fields            the row's operands in table order, each at a fixed offset, `kind.size` bytes,
                      then the engine choice is in the header, so it takes no field; zero padding to 8
    waits    8 bytes each: semaphore u8 | op u8 (0 >=, 1 ==) | zero u16 | value u32
    signals  8 bytes each: semaphore u8 | op u8 (0 +=, 1 -=, 2 =) | zero u16 | value u32

`docs/isa.md` lists each instruction's field offsets; they come from `layout()` below.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from ncsim import isa
from ncsim.asm.fields import FieldError, ParseEnv, SemOp, suggest
from ncsim.asm.lanes import Lanes
from ncsim.asm.lexer import Cursor, Line, describe
from ncsim.errors import ObjectFileError, SourceLoc
from ncsim.memory.access import AccessPattern, Immediate

HEADER = struct.Struct("<BBBBHH")
ENGINE_CODES = {name: i for i, name in enumerate(isa.ENGINES)}


@dataclass(frozen=True)
class Instruction:
    spec: isa.InstrSpec
    engine: str
    operands: Mapping[str, Any]  # every operand of spec.operands, by name, defaults filled in
    waits: tuple[SemOp, ...] = ()
    signals: tuple[SemOp, ...] = ()
    loc: SourceLoc | None = field(default=None, compare=False)
    given: frozenset[str] = field(default=frozenset(), compare=False)  # operands the source wrote

    @property
    def mnemonic(self) -> str:
        return self.spec.mnemonic

    def __getitem__(self, name: str) -> Any:
        return self.operands[name]

    def __str__(self) -> str:
        return format_instruction(self)


@cache
def layout(opcode: int) -> tuple[tuple[tuple[isa.Operand, int], ...], int]:
    """((operand, byte offset), ...) of a row's fixed fields, and the size of header + fields, padded to 8."""
    spec = isa.BY_OPCODE[opcode]
    off = HEADER.size
    placed = []
    for operand in spec.operands:
        placed.append((operand, off))
        off += operand.kind.size
    return tuple(placed), (off + 7) // 8 * 8


def encode(instr: Instruction) -> bytes:
    spec = instr.spec
    placed, fixed = layout(spec.opcode)
    body = bytearray(fixed)
    for operand, off in placed:
        raw = operand.kind.encode(instr.operands[operand.name])
        assert len(raw) == operand.kind.size, (spec.mnemonic, operand.name)
        body[off:off + len(raw)] = raw
    tail = isa.WAITS.encode(instr.waits) + isa.SIGNALS.encode(instr.signals)
    size = fixed + len(tail)
    HEADER.pack_into(body, 0, spec.opcode, ENGINE_CODES[instr.engine], len(instr.waits), len(instr.signals), size, 0)
    return bytes(body) + tail


def pick(value: Any, lane: int) -> Any:
    """`value` (an operand, or a whole Instruction) as it is in one lane: every Lanes replaced by
    its value there (`ncsim.asm.lanes`)."""
    if isinstance(value, Lanes):
        return int(value.v[lane])
    if isinstance(value, AccessPattern):
        return AccessPattern(value.memory, value.dtype, pick(value.partition, lane), pick(value.partitions, lane),
                             pick(value.offset, lane), pick(value.dims, lane))
    if isinstance(value, Immediate):
        return Immediate(pick(value.value, lane), value.dtype)
    if isinstance(value, SemOp):
        return SemOp(value.sem, value.op, pick(value.value, lane))
    if isinstance(value, tuple):
        return tuple(pick(v, lane) for v in value)
    if isinstance(value, Instruction):
        return Instruction(value.spec, value.engine, {k: pick(v, lane) for k, v in value.operands.items()},
                           pick(value.waits, lane), pick(value.signals, lane), value.loc, value.given)
    return value


def has_lanes(value: Any) -> bool:
    if isinstance(value, Lanes):
        return True
    if isinstance(value, AccessPattern):
        return any(isinstance(x, Lanes) for x in (value.partition, value.partitions, value.offset)) or \
            has_lanes(value.dims)
    if isinstance(value, (Immediate, SemOp)):
        return isinstance(value.value, Lanes)
    if isinstance(value, tuple):
        return any(has_lanes(v) for v in value)
    return False


def encode_lanes(instr: Instruction, n: int) -> np.ndarray:
    """The encodings of an instruction whose operands have `n` lanes: [n, size] bytes, one row a lane
    (what `encode(pick(instr, lane))` gives for each lane, without a Python call per lane)."""
    base = np.frombuffer(encode(pick(instr, 0)), np.uint8)
    out = np.tile(base, (n, 1))
    placed, fixed = layout(instr.spec.opcode)
    for operand, off in placed:
        value = instr.operands[operand.name]
        if has_lanes(value):
            operand.kind.patch(out, off, value)
    if has_lanes(instr.waits):
        isa.WAITS.patch(out, fixed, instr.waits)
    if has_lanes(instr.signals):
        isa.SIGNALS.patch(out, fixed + 8 * len(instr.waits), instr.signals)
    return out


def decode_one(buf: bytes, pos: int, file: str = "<object>") -> tuple[Instruction, int]:
    """The instruction at byte `pos` of a stream and the position after it. Errors name the byte offset."""

    def bad(message: str, at: int = pos) -> ObjectFileError:
        return ObjectFileError(message, file=file, offset=at)

    if pos + HEADER.size > len(buf):
        raise bad(f"truncated instruction header: {len(buf) - pos} bytes left, a header is {HEADER.size}")
    opcode, engine_code, nwait, nsignal, size, reserved = HEADER.unpack_from(buf, pos)
    spec = isa.BY_OPCODE.get(opcode)
    if spec is None:
        raise bad(f"opcode 0x{opcode:02x} is no instruction")
    if engine_code >= len(isa.ENGINES) or isa.ENGINES[engine_code] not in spec.engines:
        raise bad(f"{spec.mnemonic} cannot run on engine code {engine_code}"
                  f" (it runs on {', '.join(spec.engines)})", pos + 1)
    if reserved:
        raise bad("reserved header bits are not zero", pos + 6)
    if nwait > isa.WAITS.max_len or nsignal > isa.SIGNALS.max_len:
        raise bad(f"{nwait} waits and {nsignal} signals: at most {isa.WAITS.max_len} of each", pos + 2)
    placed, fixed = layout(opcode)
    expected = fixed + 8 * (nwait + nsignal)
    if size != expected:
        raise bad(f"{spec.mnemonic} with {nwait} waits and {nsignal} signals is {expected} bytes, the header says {size}",
                  pos + 4)
    if pos + size > len(buf):
        raise bad(f"truncated {spec.mnemonic}: {len(buf) - pos} bytes left of {size}")
    operands: dict[str, Any] = {}
    for operand, off in placed:
        try:
            operands[operand.name] = operand.kind.decode(buf, pos + off)
        except FieldError as e:
            raise bad(f"{spec.mnemonic} operand '{operand.name}': {e}", pos + off) from None
    end_fields = placed[-1][1] + placed[-1][0].kind.size if placed else HEADER.size
    if any(buf[pos + end_fields:pos + fixed]):
        raise bad(f"{spec.mnemonic}: padding bytes are not zero", pos + end_fields)
    try:
        waits = isa.WAITS.decode_items(buf, pos + fixed, nwait)
        signals = isa.SIGNALS.decode_items(buf, pos + fixed + 8 * nwait, nsignal)
    except FieldError as e:
        raise bad(f"{spec.mnemonic}: {e}", pos + fixed) from None
    return Instruction(spec, isa.ENGINES[engine_code], operands, waits, signals), pos + size


def decode_stream(buf: bytes, file: str = "<object>") -> list[Instruction]:
    out = []
    pos = 0
    while pos < len(buf):
        instr, pos = decode_one(buf, pos, file)
        out.append(instr)
    return out


def format_instruction(instr: Instruction, sems: Mapping[int, str] | None = None) -> str:
    """Canonical text: required operands by position, others by keyword when not their default.
    `sems` names semaphores as the source's `.sem` did (the disassembler passes the object's names)."""
    spec = instr.spec
    parts = []
    for operand in spec.operands:
        value = instr.operands[operand.name]
        text = value.named(sems) if sems and isinstance(value, SemOp) else operand.kind.format(value)
        if operand.required:
            parts.append(text)
        elif not same(value, operand.default):
            parts.append(f"{operand.name}={text}")
    if spec.engine_field and instr.engine != spec.engines[0]:
        parts.append(f"engine={instr.engine}")
    for key, ops, kind in (("wait", instr.waits, isa.WAITS), ("signal", instr.signals, isa.SIGNALS)):
        if ops:
            text = "[" + ", ".join(op.named(sems) for op in ops) + "]" if sems else kind.format(ops)
            parts.append(f"{key}={text}")
    return spec.mnemonic + (" " + ", ".join(parts) if parts else "")


def same(a: Any, b: Any) -> bool:
    """Equality that treats a float NaN like itself and keeps 1 and 1.0 (and True) apart."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def parse_instruction(line: Line, cur: Cursor, env: ParseEnv,
                      table: Mapping[str, isa.InstrSpec] = isa.BY_MNEMONIC) -> Instruction:
    """Parse `mnemonic operand, operand, key=value, ...` from the cursor to the end of the line; `table`
    is the engines' instructions, or the GpSimd cores' (isa.CORE_BY_MNEMONIC) inside a .gpsimd section."""
    mtok = cur.peek()
    if mtok.kind != "ident":
        raise cur.error(f"expected an instruction mnemonic, found {describe(mtok)}", mtok)
    spec = table.get(mtok.text)
    if spec is None and table is isa.BY_MNEMONIC and mtok.text in isa.CORE_BY_MNEMONIC:
        raise cur.error(f"'{mtok.text}' is a GpSimd core instruction: it belongs inside a '.gpsimd NAME' section,"
                        " which gpsimd_call runs", mtok)
    if spec is None and table is isa.CORE_BY_MNEMONIC and mtok.text in isa.BY_MNEMONIC:
        raise cur.error(f"'{mtok.text}' is an engine instruction: a .gpsimd section holds GpSimd core"
                        " instructions only (docs/gpsimd.md)", mtok)
    if spec is None:
        raise cur.error(f"unknown instruction '{mtok.text}'", mtok, notes=(suggest(mtok.text, table),))
    cur.next()
    operands = spec.all_operands
    positional = [o for o in spec.operands if o.required]
    values: dict[str, Any] = {}
    seen_keyword = False
    npos = 0
    while not cur.at_end():
        if values or npos:
            cur.expect(",", "between operands")
        tok = cur.peek()
        if tok.kind == "ident" and cur.peek(1).is_("=") and not env.is_semaphore(tok.text):
            seen_keyword = True
            operand = spec.operand(tok.text)
            if operand is None:
                names = [o.name for o in operands]
                raise cur.error(f"{spec.mnemonic} has no operand '{tok.text}'", tok,
                                notes=(suggest(tok.text, names), "syntax: " + spec.syntax()))
            if operand.name in values:
                raise cur.error(f"operand '{tok.text}' is given twice", tok)
            cur.next()
            cur.next()
        else:
            if seen_keyword:
                raise cur.error("an operand by position cannot follow one by keyword", tok,
                                notes=("syntax: " + spec.syntax(),))
            if npos >= len(positional):
                raise cur.error(f"{spec.mnemonic} takes {len(positional)} operands by position; this is one more",
                                tok, notes=("syntax: " + spec.syntax(),))
            operand = positional[npos]
            npos += 1
            if operand.name in values:
                raise cur.error(f"operand '{operand.name}' is given twice", tok)
        values[operand.name] = operand.kind.parse_checked(cur, env)
    missing = [o.name for o in positional if o.name not in values]
    if missing:
        raise cur.error(f"{spec.mnemonic} is missing operand{'s' if len(missing) > 1 else ''} "
                        + ", ".join(f"'{m}'" for m in missing), mtok, notes=("syntax: " + spec.syntax(),))
    given = frozenset(values)
    for operand in spec.operands:
        values.setdefault(operand.name, operand.default)
    engine = values.pop("engine", spec.engines[0])
    waits = values.pop("wait", ())
    signals = values.pop("signal", ())
    loc = line.loc(mtok.col, len(mtok.text))
    return Instruction(spec, engine, values, waits, signals, loc, given)
