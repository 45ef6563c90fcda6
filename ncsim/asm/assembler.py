"""Assembly text -> ObjectFile.

A program is a sequence of lines; each is blank, a comment, a directive (starting with '.') or one
instruction. Directives of this layer:

    .kernel NAME                          the kernel's name (default: the file's stem)
    .hbm  NAME DTYPE[d0, d1, ...] KIND @ADDRESS      an HBM tensor; KIND is in, out, inout or scratch
    .sbuf NAME DTYPE[P, d1, ...] @PARTITION:OFFSET   an SBUF tile (partition dimension first)
    .psum NAME DTYPE[P, d1, ...] @PARTITION:OFFSET   a PSUM tile
    .file N "PATH"                        source file number N (used by .loc); written by the disassembler
    .loc N LINE COL                       the next instruction came from file N, LINE, COL

Declared tensors go into the object's tensor table (the simulator gives inputs and reads outputs
through it). Instructions go to the stream of the engine that runs them, in program order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ncsim import dtypes
from ncsim.asm import objfile
from ncsim.asm.expr import parse_int
from ncsim.asm.fields import ParseEnv, suggest
from ncsim.asm.instruction import Instruction, encode, parse_instruction
from ncsim.asm.lexer import Cursor, Line
from ncsim.asm.objfile import LineEntry, ObjectFile, TensorEntry
from ncsim.asm.rules import check_instruction, check_tensor
from ncsim.config import DEFAULT, Config
from ncsim.errors import AsmError

HBM_KINDS = ("in", "out", "inout", "scratch")


@dataclass
class Program:
    """What the assembler has gathered so far; `to_object()` encodes it."""

    kernel: str
    files: list[str] = field(default_factory=list)
    tensors: dict[str, TensorEntry] = field(default_factory=dict)
    instructions: list[Instruction] = field(default_factory=list)
    lines: list[tuple[int, int, int]] = field(default_factory=list)  # per instruction: file index, line, col

    def file_index(self, path: str) -> int:
        if path not in self.files:
            self.files.append(path)
        return self.files.index(path)

    def to_object(self) -> ObjectFile:
        obj = ObjectFile(kernel=self.kernel, files=list(self.files), tensors=list(self.tensors.values()))
        streams: dict[str, list[bytes]] = {e: [] for e in objfile.ENGINES}
        for instr, (f, ln, col) in zip(self.instructions, self.lines):
            obj.lines[instr.engine].append(LineEntry(len(streams[instr.engine]), f, ln, col))
            streams[instr.engine].append(encode(instr))
        obj.streams = {e: b"".join(parts) for e, parts in streams.items()}
        return obj


class Assembler:
    def __init__(self, config: Config = DEFAULT):
        self.config = config
        self.env = ParseEnv()
        self.directives: dict[str, Callable[[Line, Cursor], None]] = {
            "kernel": self.d_kernel,
            "hbm": self.d_tensor,
            "sbuf": self.d_tensor,
            "psum": self.d_tensor,
            "file": self.d_file,
            "loc": self.d_loc,
        }
        self.program = Program(kernel="kernel")
        self.file_numbers: dict[int, str] = {}
        self.next_loc: tuple[int, int, int] | None = None

    # ---------------------------------------------------------------- driver
    def assemble(self, text: str, filename: str) -> ObjectFile:
        self.program.kernel = _identifier(Path(filename).stem)
        self.assemble_lines(text, filename)
        return self.program.to_object()

    def assemble_lines(self, text: str, filename: str) -> None:
        for lineno, raw in enumerate(text.splitlines(), start=1):
            line = Line(filename, lineno, raw)
            cur = Cursor(line)
            if cur.at_end():
                continue
            if cur.at("."):
                self.directive(line, cur)
            else:
                self.instruction(line, cur)

    def directive(self, line: Line, cur: Cursor) -> None:
        cur.next()
        name_tok = cur.expect_ident("a directive name after '.'")
        handler = self.directives.get(name_tok.text)
        if handler is None:
            raise cur.error(f"unknown directive '.{name_tok.text}'", name_tok,
                            notes=(suggest(name_tok.text, self.directives),))
        handler(line, cur)
        cur.expect_end(f"after .{name_tok.text}")

    def instruction(self, line: Line, cur: Cursor) -> None:
        instr = parse_instruction(line, cur, self.env)
        check_instruction(instr, self.config)
        self.emit(instr, line)

    def emit(self, instr: Instruction, line: Line) -> None:
        if self.next_loc is not None:
            where, self.next_loc = self.next_loc, None
        else:
            where = (self.program.file_index(line.file), line.lineno, instr.loc.col if instr.loc else 1)
        self.program.instructions.append(instr)
        self.program.lines.append(where)

    # ---------------------------------------------------------------- directives
    def d_kernel(self, line: Line, cur: Cursor) -> None:
        self.program.kernel = cur.expect_ident("the kernel's name").text

    def d_file(self, line: Line, cur: Cursor) -> None:
        num_tok = cur.peek()
        num = parse_int(cur, self.env.names, "a file number")
        path_tok = cur.peek()
        if path_tok.kind != "string":
            raise cur.error("expected the file's path in double quotes", path_tok)
        cur.next()
        if num in self.file_numbers:
            raise cur.error(f"file number {num} is already given", num_tok)
        self.file_numbers[num] = path_tok.text[1:-1]
        self.program.file_index(self.file_numbers[num])  # keep the object's file order

    def d_loc(self, line: Line, cur: Cursor) -> None:
        num_tok = cur.peek()
        num = parse_int(cur, self.env.names, "a file number")
        if num not in self.file_numbers:
            raise cur.error(f"file number {num} has no .file directive", num_tok)
        ln = parse_int(cur, self.env.names, "a line number")
        col = parse_int(cur, self.env.names, "a column number")
        self.next_loc = (self.program.file_index(self.file_numbers[num]), ln, col)

    def d_tensor(self, line: Line, cur: Cursor) -> None:
        memory = cur.toks[cur.i - 1].text
        name_tok = cur.expect_ident("the tensor's name")
        name = name_tok.text
        if name in self.program.tensors:
            raise cur.error(f"tensor '{name}' is already declared", name_tok)
        dt_tok = cur.expect_ident("a dtype")
        dt = dtypes.by_name(dt_tok.text)
        if dt is None:
            raise cur.error(f"unknown dtype '{dt_tok.text}'", dt_tok, notes=(suggest(dt_tok.text, dtypes.dtype_names()),))
        shape = self.parse_shape(cur)
        kind = "tile"
        if memory == "hbm":
            kind_tok = cur.peek()
            if kind_tok.kind != "ident" or kind_tok.text not in HBM_KINDS:
                raise cur.error("expected the HBM tensor's role: " + ", ".join(HBM_KINDS), kind_tok)
            kind = cur.next().text
        partition, address = self.parse_placement(cur, memory, name_tok)
        entry = TensorEntry(name, memory, dt, shape, partition, address, kind)
        try:
            check_tensor(entry, self.config)
        except AsmError as e:
            raise line.error(e.message, name_tok) from None
        self.program.tensors[name] = entry

    def parse_shape(self, cur: Cursor) -> tuple[int, ...]:
        cur.expect("[", "to open the shape")
        dims = []
        while True:
            tok = cur.peek()
            d = parse_int(cur, self.env.names, "a dimension")
            if d < 1:
                raise cur.error(f"a dimension must be at least 1, not {d}", tok)
            dims.append(d)
            if not cur.accept(","):
                break
        cur.expect("]", "to close the shape")
        return tuple(dims)

    def parse_placement(self, cur: Cursor, memory: str, name_tok) -> tuple[int, int]:
        if not cur.at("@"):
            raise cur.error(f"give the address of '{name_tok.text}' with @"
                            + ("ADDRESS" if memory == "hbm" else "PARTITION:OFFSET"), cur.peek())
        cur.next()
        if memory == "hbm":
            return 0, parse_int(cur, self.env.names, "a byte address")
        partition = parse_int(cur, self.env.names, "the first partition")
        cur.expect(":", "between partition and byte offset")
        return partition, parse_int(cur, self.env.names, "a byte offset")


def _identifier(stem: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in stem)
    return out if out and not out[0].isdigit() else "k_" + out


def assemble(text: str, filename: str = "<input>", config: Config = DEFAULT) -> ObjectFile:
    return Assembler(config).assemble(text, filename)


def assemble_file(path: str | Path, config: Config = DEFAULT) -> ObjectFile:
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise AsmError(f"cannot read {path}: {e}", file=str(path)) from None
    return assemble(text, str(path), config)
