"""GpSimd programs: what a `.gpsimd NAME` ... `.end` section assembles to, and its encodings.

A program is a list of core instructions (rows of `isa.CORE_TABLE`), each with its source place.
Encoded (the object's `.ncsim.gpsimd` section, `ncsim.asm.elf`), an instruction is one 16-byte record:
byte 0 its opcode, then the row's operands in table order, each `kind.size` bytes at a fixed offset,
then zero bytes. The interpreter reads the code matrix (`CoreProgram.matrix`): int64 [instructions,
CODE_COLUMNS], column 0 the opcode and then each operand's columns (`ncsim.gpsimd.fields.columns`).

Inside a section a line is blank, a comment, `LABEL:` (optionally followed by an instruction) or one
instruction; the source's `.const` names may stand for numbers, and a label may be used before the
line that defines it. A label at the very end names the end: branching there ends the program.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, cached_property

import numpy as np

from ncsim import isa
from ncsim.asm.fields import FieldError
from ncsim.asm.instruction import Instruction, format_instruction, parse_instruction
from ncsim.asm.lexer import Cursor, Line
from ncsim.errors import ObjectFileError, SourceLoc
from ncsim.gpsimd.fields import CoreEnv, TargetKind, columns, width

RECORD = 16  # bytes of one encoded core instruction
CODE_COLUMNS = 8  # the code matrix's columns: the opcode and at most 7 operand columns
MAX_INSTRUCTIONS = 1 << 20  # of one program


def layout(spec: isa.InstrSpec) -> tuple[tuple[isa.Operand, int], ...]:
    """((operand, byte offset in the record), ...) of a core instruction (worked out once per opcode)."""
    return _layout(spec.opcode)


@cache
def _layout(opcode: int) -> tuple[tuple[isa.Operand, int], ...]:
    spec = isa.CORE_BY_OPCODE[opcode]
    off, placed = 1, []
    for operand in spec.operands:
        placed.append((operand, off))
        off += operand.kind.size
    assert off <= RECORD, spec.mnemonic
    return tuple(placed)


for _row in isa.CORE_TABLE:  # every row fits a record and the code matrix
    layout(_row)
    assert 1 + sum(width(o.kind) for o in _row.operands) <= CODE_COLUMNS, _row.mnemonic


def encode(instr: Instruction) -> bytes:
    out = bytearray(RECORD)
    out[0] = instr.spec.opcode
    for operand, off in layout(instr.spec):
        raw = operand.kind.encode(instr.operands[operand.name])
        out[off:off + len(raw)] = raw
    return bytes(out)


def decode(buf: bytes, pos: int, file: str) -> Instruction:
    """The core instruction of the 16 bytes at `pos`; errors name the byte."""
    spec = isa.CORE_BY_OPCODE.get(buf[pos])
    if spec is None:
        raise ObjectFileError(f"opcode 0x{buf[pos]:02x} is no GpSimd core instruction", file=file, offset=pos)
    operands = {}
    end = 1
    for operand, off in layout(spec):
        try:
            operands[operand.name] = operand.kind.decode(buf, pos + off)
            operand.kind.check(operands[operand.name])
        except (FieldError, struct.error) as e:
            raise ObjectFileError(f"{spec.mnemonic} operand '{operand.name}': {e}", file=file, offset=pos + off) from None
        end = off + operand.kind.size
    if any(buf[pos + end:pos + RECORD]):
        raise ObjectFileError(f"{spec.mnemonic}: padding bytes are not zero", file=file, offset=pos + end)
    return Instruction(spec, "gpsimd", operands)


@dataclass(eq=False)
class CoreProgram:
    """One GpSimd program. `places[i]` is instruction i's (file index, line, column); `files` the
    object's source files (shared with it)."""

    name: str
    index: int
    instrs: list[Instruction]
    places: list[tuple[int, int, int]]
    files: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.instrs)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, CoreProgram) and (self.name, self.index, self.places) ==
                (other.name, other.index, other.places) and self.code() == other.code())

    __hash__ = None  # type: ignore[assignment]

    def code(self) -> bytes:
        return b"".join(encode(i) for i in self.instrs)

    @classmethod
    def from_code(cls, name: str, index: int, raw: bytes, places: list[tuple[int, int, int]], files: list[str],
                  file: str) -> CoreProgram:
        if len(raw) % RECORD:
            raise ObjectFileError(f"GpSimd program '{name}' has {len(raw)} bytes of code, not a multiple of {RECORD}",
                                  file=file)
        instrs = [decode(raw, p, f"{file} (GpSimd program '{name}')") for p in range(0, len(raw), RECORD)]
        return cls(name, index, instrs, places, files)

    @cached_property
    def matrix(self) -> np.ndarray:
        out = np.zeros((len(self.instrs) + 1, CODE_COLUMNS), np.int64)  # one more row: a halt at the end
        out[-1, 0] = isa.CORE_BY_MNEMONIC["halt"].opcode
        for i, instr in enumerate(self.instrs):
            row = [instr.spec.opcode]
            for operand in instr.spec.operands:
                row += columns(operand.kind, instr.operands[operand.name])
            out[i, :len(row)] = row
        return out

    def loc(self, pc: int) -> SourceLoc | None:
        if not 0 <= pc < len(self.instrs):
            return None
        f, line, col = self.places[pc]
        if not 0 <= f < len(self.files):
            return None
        from ncsim.program import source_line  # the same reading of source lines as the engines' instructions

        path = self.files[f]
        return SourceLoc(path, line, col, source_line(path, line, set()), len(self.instrs[pc].mnemonic))

    def where(self, pc: int) -> str:
        loc = self.loc(pc)
        text = f"{self.name}[{pc}] {format_instruction(self.instrs[pc])}" if 0 <= pc < len(self.instrs) else \
            f"{self.name}[{pc}]"
        return f"{loc} ({text})" if loc else text

    def disassemble(self) -> list[str]:
        """The section as text: `.gpsimd NAME`, each instruction after its `.loc`, `.end`."""
        out = [f".gpsimd {self.name}"]
        for instr, (f, line, col) in zip(self.instrs, self.places):
            out.append(f"    .loc {f} {line} {col}")
            out.append("    " + format_instruction(instr))
        out.append(".end")
        return out


def section_end(lines: list[Line], start: int) -> int:
    """The index of the `.end` that closes the `.gpsimd` at lines[start]."""
    for j in range(start + 1, len(lines)):
        toks = lines[j].tokens
        if len(toks) > 1 and toks[0].is_(".") and toks[1].text == "end":
            return j
    raise lines[start].error("this '.gpsimd' has no matching '.end'", lines[start].tokens[1])


def parse_section(header: Line, lines: list[Line], names: dict[str, int | float], name: str, index: int,
                  file_index: Callable[[str], int], file_number: Callable[[int, Line], int]) -> CoreProgram:
    """The program of a section's body lines. `file_index(path)` gives a source file's index in the
    object (adding it); `file_number(n, line)` the index of the file a `.file n` directive named."""
    labels: dict[str, tuple[int, Line]] = {}
    body: list[tuple[Line, int]] = []  # (line, the token index its instruction starts at)
    next_loc: tuple[int, int, int] | None = None
    locs: list[tuple[int, int, int] | None] = []
    for line in lines:
        cur = Cursor(line)
        if cur.at_end():
            continue
        if cur.at("."):
            word = cur.peek(1).text
            if word == "loc":  # the disassembler's source places
                cur.next()
                cur.next()
                vals = []
                for what in ("a file number", "a line number", "a column number"):
                    tok = cur.next()
                    if tok.kind != "number":
                        raise line.error(f"expected {what}", tok)
                    vals.append(int(tok.text, 0))
                cur.expect_end("after .loc")
                next_loc = (file_number(vals[0], line), vals[1], vals[2])
                continue
            raise line.error(f"'.{word}' inside a .gpsimd section: it holds labels and GpSimd core instructions"
                             " (define constants before it)", cur.peek(1))
        if cur.peek().kind == "ident" and cur.peek(1).is_(":"):
            tok = cur.next()
            cur.next()
            if tok.text in labels:
                raise line.error(f"label '{tok.text}' is defined twice (first at line {labels[tok.text][1].lineno})",
                                 tok)
            if tok.text in names:
                raise line.error(f"label '{tok.text}' is already a constant", tok)
            labels[tok.text] = (len(body), line)
            if cur.at_end():
                continue
        body.append((line, cur.i))
        locs.append(next_loc)
        next_loc = None
        if len(body) > MAX_INSTRUCTIONS:
            raise line.error(f"a GpSimd program has at most {MAX_INSTRUCTIONS} instructions")
    env = CoreEnv(names, {k: v[0] for k, v in labels.items()})
    instrs, places = [], []
    for (line, start), loc in zip(body, locs):
        cur = Cursor(line, start)
        instr = parse_instruction(line, cur, env, isa.CORE_BY_MNEMONIC)
        for operand in instr.spec.operands:
            if isinstance(operand.kind, TargetKind) and instr.operands[operand.name] > len(body):
                raise line.error(f"branch target {instr.operands[operand.name]} is outside the program"
                                 f" (instructions 0..{len(body) - 1}, or {len(body)}: its end)",
                                 cur.toks[start])
        instrs.append(instr)
        places.append(loc if loc is not None else (file_index(line.file), line.lineno, instr.loc.col))
    if not instrs:
        raise header.error(f"GpSimd program '{name}' has no instructions")
    return CoreProgram(name, index, instrs, places)
