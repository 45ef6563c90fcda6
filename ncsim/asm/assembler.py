"""Assembly text -> ObjectFile.

A program is a sequence of lines; each is blank, a comment, a directive (starting with '.') or one
instruction. Directives of this layer:

    .kernel NAME                          the kernel's name (default: the file's stem)
    .hbm  NAME DTYPE[d0, d1, ...] KIND [@ADDRESS]     an HBM tensor; KIND is in, out, inout or scratch
    .sbuf NAME DTYPE[P, d1, ...] [@PARTITION:OFFSET]  an SBUF tile (partition dimension first)
    .psum NAME DTYPE[P, d1, ...] [@PARTITION:OFFSET]  a PSUM tile
    .view NAME = TENSOR DTYPE[shape]      the same bytes seen with another shape (and dtype): on chip the
                                          same partitions and bytes per partition, in HBM the same size
    .const NAME = EXPR                    a named integer or float constant
    .param NAME [= DEFAULT]               a named integer supplied from outside (Assembler(params=...),
                                          `ncsim asm -D NAME=VALUE`), else DEFAULT; then like .const
    .sem NAME [@N]                        a named semaphore (for programs that synchronise by hand):
                                          the lowest number not yet in use, or N
    .for VAR in START..STOP [step S]      repeat the lines up to the matching .end, VAR = START, ...
    .end                                  (STOP excluded), unrolled at assembly time: each body line
                                          is parsed once for all iterations (ncsim.asm.template)
    .if EXPR / .elif EXPR / .else / .end  the lines of the first branch whose integer expression is
                                          nonzero (or of .else); inside a loop the condition may use
                                          its variables (the template splits the iterations by it)
    .include "PATH"                       the lines of another file (relative to this one)
    .sync auto|manual                     auto (the default): the assembler inserts the semaphore waits
                                          and signals between engines (ncsim.asm.sync); manual: the
                                          program states its own
    .file N "PATH"                        source file number N (used by .loc); written by the disassembler
    .loc N LINE COL                       the next instruction came from file N, LINE, COL
    .gpsimd NAME / .end                   a GpSimd program: labels and GpSimd core instructions
                                          (isa.CORE_TABLE, docs/gpsimd.md), run by gpsimd_call

Operands name declared tensors and numpy-style slices of them (`ncsim.asm.slices`), or raw access
patterns. Tensors without an address are placed by `ncsim.asm.alloc`. Declared tensors go into the
object's tensor table (the simulator gives inputs and reads outputs through it). Instructions are
gathered as chunks (a parsed line and the program-order positions of its iterations); `ncsim.asm.build`
synchronises and encodes them as flat arrays, each to the stream of the engine that runs it, in
program order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ncsim import dtypes
from ncsim.asm import build, objfile, template
from ncsim.asm.alloc import Allocator
from ncsim.asm.expr import parse_int, parse_number
from ncsim.asm.fields import SEM_NAME, ParseEnv, suggest
from ncsim.asm.instruction import Instruction, decode_one, parse_instruction
from ncsim.asm.lexer import Cursor, Line, Token, string_value
from ncsim.asm.objfile import LineTable, ObjectFile, TensorEntry
from ncsim.asm.rules import check_instruction, check_tensor
from ncsim.asm.slices import tensor_view
from ncsim.asm.sync import used_semaphores
from ncsim.config import DEFAULT, Config
from ncsim.errors import AsmError
from ncsim.gpsimd.code import CoreProgram, parse_section, section_end
from ncsim.memory.access import AccessPattern

if TYPE_CHECKING:
    from ncsim.program import Program as Decoded

HBM_KINDS = ("in", "out", "inout", "scratch")
MAX_INSTRUCTIONS = 20_000_000  # a guard against loops that unroll without end
MAX_LOOP_TRIPS = 20_000_000  # and against loops that unroll nothing, for ever
MAX_INCLUDE_DEPTH = 16
MAX_LOOP_DEPTH = 64  # .for loops and .if blocks nest at most this deep (together)
MAX_TENSOR_DIMS = 8  # the object file's tensor table holds up to 8 dimensions
UINT32_MAX = 2**32 - 1
BLOCKS = ("for", "if", "end")  # the directives that open and close blocks (.else and .elif split an .if)
RESERVED = {"sbuf", "psum", "hbm", "none", "true", "false", "inf", "nan"}


class LanguageEnv(ParseEnv):
    """Names of the program: constants and loop variables, declared tensors, named semaphores."""

    def __init__(self) -> None:
        super().__init__()
        self.tensors: dict[str, TensorEntry] = {}
        self.sems: dict[str, int] = {}
        self.raw_sems: set[int] = set()  # semaphores the program writes by number (sN)
        self.broadcasts: list[tuple[Token, AccessPattern]] = []  # .broadcast_to views of the current line
        self.gpsimd_programs: dict[str, CoreProgram] = {}  # the .gpsimd sections so far, by name

    def tensor_operand(self, cur: Cursor) -> AccessPattern | None:
        tok = cur.peek()
        t = self.tensors.get(tok.text)
        if t is None:
            return None
        cur.next()
        return tensor_view(cur, self.names, t, tok, self.broadcasts)

    def semaphore(self, cur: Cursor) -> int | None:
        tok = cur.peek()
        if tok.kind == "ident" and tok.text in self.sems:
            cur.next()
            return self.sems[tok.text]
        return None

    def is_semaphore(self, name: str) -> bool:
        return name in self.sems or super().is_semaphore(name)

    def raw_semaphore(self, number: int, cur: Cursor) -> None:
        named = next((n for n, v in self.sems.items() if v == number), None)
        if named is not None:
            raise cur.error(f"s{number} is the semaphore named '{named}': use the name, or another number")
        self.raw_sems.add(number)

    def defined(self, name: str) -> str | None:
        if name in self.names:
            return "a constant or loop variable"
        if name in self.tensors:
            return "a tensor"
        if name in self.sems:
            return "a semaphore"
        if name in self.gpsimd_programs:
            return "a GpSimd program"
        return None


@dataclass
class Program:
    """What the assembler has gathered: chunks of instructions (`ncsim.asm.build.Chunk`: one parsed
    line, its lanes at their program-order positions); `build()` synchronises and encodes them."""

    kernel: str
    files: list[str] = field(default_factory=list)
    tensors: dict[str, TensorEntry] = field(default_factory=dict)
    chunks: list[build.Chunk] = field(default_factory=list)
    count: int = 0  # instructions so far (program order positions 0..count-1)
    sync: str = "auto"
    encoded: build.Encoded | None = None  # set by build()
    gpsimd: list[CoreProgram] = field(default_factory=list)  # the .gpsimd sections, in order
    _sync_report: Callable[[], str] | None = None

    def add(self, instr: Instruction, where: tuple[int, int, int], positions: np.ndarray | None = None) -> None:
        """Append `instr` (one lane), or a chunk of lanes at `positions` (relative to the end)."""
        at = np.array([0], np.int64) if positions is None else positions
        self.chunks.append(build.Chunk(instr, at + self.count, where))
        self.count += len(at)

    @property
    def instructions(self) -> list[Instruction]:
        """Every instruction in program order, one Python object each, with the waits and signals
        synchronisation gave them once built (for inspection and tests; the assembler itself never
        makes them)."""
        if self.encoded is None:
            gathered = build.Gathered(self.chunks, self.count)
            return [gathered.instruction(g) for g in range(self.count)]
        enc = self.encoded
        raw = enc.words.tobytes()
        return [decode_one(raw, 8 * int(enc.pos[k]))[0] for k in np.lexsort((enc.pos, enc.origin))]

    @property
    def sync_report(self) -> str:
        """What automatic synchronisation inserted, and why (made when asked: one line per wait)."""
        return self._sync_report() if self._sync_report is not None else ""

    def synchronise(self, config: Config, reserved: set[int]) -> tuple[build.Gathered, build.Synced]:
        """Insert the semaphores between streams (in auto mode)."""
        for c in self.chunks:
            if c.n > 1:  # (a chunk of one lane holds plain integers)
                c.instr = build.narrow_lanes(c.instr)
        gathered = build.Gathered(self.chunks, self.count)
        if self.sync == "auto":
            synced = build.synchronise(gathered, config.semaphores, used_semaphores([c.instr for c in self.chunks]) | reserved)
            self._sync_report = lambda: build.describe(gathered, synced, self.files)
        else:
            synced = build.Synced.none(self.count)
            self._sync_report = lambda: "synchronisation: manual (.sync manual): nothing inserted"
        return gathered, synced

    def build(self, config: Config, reserved: set[int]) -> build.Encoded:
        """Insert the semaphores between streams (in auto mode) and encode everything."""
        self.encoded = build.encode_program(*self.synchronise(config, reserved))
        return self.encoded

    def decode(self, config: Config, reserved: set[int], name: str, semaphores: dict[int, str]) -> Decoded:
        """Insert the semaphores and build the decoded program, its words made and read a block at a time
        (`ncsim.program.Program.from_blocks`): no object, and never the whole program's words, in memory."""
        from ncsim.program import (
            Program as Decoded,  # at run time: the program imports the assembler's modules
        )

        blocks = build.Blocks(*self.synchronise(config, reserved))
        return Decoded.from_blocks(blocks, self.kernel, self.files, list(self.tensors.values()), name, semaphores,
                                   self.gpsimd)

    def file_index(self, path: str) -> int:
        if path not in self.files:
            self.files.append(path)
        return self.files.index(path)

    def to_object(self) -> ObjectFile:
        enc = self.encoded
        assert enc is not None, "build() first"
        obj = ObjectFile(kernel=self.kernel, files=list(self.files), tensors=list(self.tensors.values()))
        obj.streams = {e: enc.stream_view(i) for i, e in enumerate(objfile.ENGINES)}  # no copy
        obj.gpsimd = list(self.gpsimd)
        for p in obj.gpsimd:
            p.files = obj.files
        for i, e in enumerate(objfile.ENGINES):
            lo, hi = int(enc.first[i]), int(enc.first[i + 1])
            obj.lines[e] = LineTable(enc.file[lo:hi], enc.line[lo:hi], enc.col[lo:hi])
        return obj


def auto_queue(queues: dict[tuple[str, object, object], int], config: Config, engine: str, src: AccessPattern,
               dst: AccessPattern) -> int:
    """The queue of a dma_copy that names none (Assembler.auto_queue says why); `queues` holds the
    program's choices so far, by (issuing engine, source memory, destination memory)."""
    key = (engine, src.memory, dst.memory)
    if key not in queues:
        queues[key] = len(queues) % config.dma_queues_per_engine
    return queues[key]


class Assembler:
    def __init__(self, config: Config = DEFAULT, params: Mapping[str, int] | None = None):
        self.config = config
        self.params = dict(params or {})  # the values of the program's .param names, given from outside
        self.declared_params: list[str] = []  # the .param names seen so far
        self.env = LanguageEnv()
        self.directives: dict[str, Callable[[Line, Cursor], None]] = {
            "kernel": self.d_kernel,
            "hbm": self.d_tensor,
            "sbuf": self.d_tensor,
            "psum": self.d_tensor,
            "view": self.d_view,
            "const": self.d_const,
            "param": self.d_param,
            "sem": self.d_sem,
            "sync": self.d_sync,
            "file": self.d_file,
            "loc": self.d_loc,
        }
        self.program = Program(kernel="kernel")
        self.alloc = Allocator(config)
        self.file_numbers: dict[int, str] = {}
        self.next_loc: tuple[int, int, int] | None = None
        self.include_stack: list[Path] = []
        self.kernel_line: Line | None = None  # the .kernel directive, once seen
        self.loop_trips = 0  # iterations unrolled so far, against MAX_LOOP_TRIPS
        self.queues: dict[tuple[str, object, object], int] = {}  # auto_queue's choices

    # ---------------------------------------------------------------- driver
    def assemble(self, text: str, filename: str) -> ObjectFile:
        self.parse(text, filename)
        self.program.build(self.config, set(self.env.sems.values()))
        obj = self.program.to_object()
        obj.semaphores = self.semaphore_names()
        return obj

    def assemble_program(self, text: str, filename: str) -> Decoded:
        """Assemble straight into the decoded program (`ncsim.program.Program`), as `ncsim run` and `ncsim
        asm` do with a .s file: the same program as decoding `assemble`'s object, without the object's words."""
        self.parse(text, filename)
        prog = self.program.decode(self.config, set(self.env.sems.values()), filename, self.semaphore_names())
        prog.rules_kept = self.config  # every instruction was checked under it as it was assembled
        return prog

    def parse(self, text: str, filename: str) -> None:
        """Every line of `text` into chunks, the kernel named after the file and the .param names checked."""
        self.program.kernel = _identifier(Path(filename).stem)
        self.assemble_lines(text, filename)
        self.check_params(filename)

    def semaphore_names(self) -> dict[int, str]:
        """The source's `.sem` names, by number."""
        return {number: name for name, number in self.env.sems.items()}

    def assemble_lines(self, text: str, filename: str) -> None:
        lines = source_lines(text, filename)
        self.include_stack.append(Path(filename).resolve())
        self.run(lines)
        self.include_stack.pop()

    def run(self, lines: list[Line]) -> None:
        """Assemble a block of lines, unrolling .for loops, taking .if branches and following .include."""
        i = 0
        while i < len(lines):
            line = lines[i]
            cur = Cursor(line)
            if cur.at_end():
                i += 1
                continue
            word = cur.peek(1).text if cur.at(".") else ""
            if word == "for":
                end = self.matching_end(lines, i)
                if not self.template_loop(lines, i, end):
                    self.run_loop(line, lines[i + 1:end])
                i = end + 1
                continue
            if word == "if":
                end = self.matching_end(lines, i)
                for cond, lo, hi in self.if_branches(lines, i, end):
                    if cond is None or self.condition(cond) != 0:
                        self.run(lines[lo:hi])
                        break
                i = end + 1
                continue
            if word == "gpsimd":
                end = section_end(lines, i)
                self.gpsimd_section(line, cur, lines[i + 1:end])
                i = end + 1
                continue
            if word == "end":
                raise line.error("'.end' without a '.for' or '.if' to close", cur.peek(1))
            if word in ("else", "elif"):
                raise line.error(f"'.{word}' without an '.if'", cur.peek(1))
            if word == "include":
                self.include(line, cur)
            elif word:
                self.directive(line, cur)
            else:
                self.instruction(line, cur)
            i += 1

    @staticmethod
    def matching_end(lines: list[Line], start: int) -> int:
        """The index of the `.end` that closes the `.for` or `.if` at lines[start]."""
        depth = 0
        for j in range(start, len(lines)):
            toks = lines[j].tokens
            if len(toks) > 1 and toks[0].is_(".") and toks[1].text in BLOCKS:
                depth += 1 if toks[1].text != "end" else -1
                if depth > MAX_LOOP_DEPTH:
                    raise lines[j].error(f"nesting too deep: .for loops and .if blocks nest at most {MAX_LOOP_DEPTH}"
                                         " levels", toks[1])
                if depth == 0:
                    return j
        raise lines[start].error(f"this '.{lines[start].tokens[1].text}' has no matching '.end'",
                                 lines[start].tokens[1])

    @staticmethod
    def if_branches(lines: list[Line], start: int, end: int) -> list[tuple[Line | None, int, int]]:
        """The branches of the `.if` block lines[start..end]: (the `.if` or `.elif` line whose condition
        chooses it, or None for `.else`; the first and past-the-last line of its body)."""
        branches: list[tuple[Line | None, int, int]] = []
        cond: Line | None = lines[start]
        lo = start + 1
        depth = 0
        for j in range(start + 1, end):
            toks = lines[j].tokens
            if len(toks) < 2 or not toks[0].is_("."):
                continue
            word = toks[1].text
            if word in BLOCKS:
                depth += 1 if word != "end" else -1
            elif word in ("else", "elif") and depth == 0:
                if cond is None:
                    raise lines[j].error(f"'.{word}' after this block's '.else'", toks[1])
                branches.append((cond, lo, j))
                if word == "else":
                    Cursor(lines[j], 2).expect_end("after .else")
                cond, lo = (lines[j] if word == "elif" else None), j + 1
        branches.append((cond, lo, end))
        return branches

    def condition(self, line: Line) -> int:
        """The value of an `.if` or `.elif` line's condition (nonzero is true; lanes in templates)."""
        cur = Cursor(line, 2)
        value = parse_int(cur, self.env.names, "a condition (an integer expression)")
        cur.expect_end(f"after the .{line.tokens[1].text} condition")
        return value

    def loop_header(self, line: Line) -> tuple[Token, int, int, int]:
        """The loop variable's token, start, stop and step of a `.for` line (values may be lanes)."""
        cur = Cursor(line)
        cur.next()
        cur.next()
        var_tok = cur.expect_ident("the loop variable")
        if what := self.env.defined(var_tok.text):
            raise cur.error(f"loop variable '{var_tok.text}' is already {what}", var_tok)
        in_tok = cur.expect_ident("'in'")
        if in_tok.text != "in":
            raise cur.error(f"expected 'in', found '{in_tok.text}'", in_tok)
        start = parse_int(cur, self.env.names, "the loop's start")
        cur.expect("..", "between the loop's start and stop (START..STOP)")
        stop = parse_int(cur, self.env.names, "the loop's stop")
        step = 1
        if cur.peek().is_("step"):
            cur.next()
            step_tok = cur.peek()
            step = parse_int(cur, self.env.names, "the loop's step")
            if step <= 0:
                raise cur.error(f"the loop's step must be positive, not {step}", step_tok)
        cur.expect_end("after the loop header")
        return var_tok, start, stop, step

    def count_trips(self, trips: int, var_tok: Token, line: Line) -> None:
        self.loop_trips += trips
        if self.loop_trips > MAX_LOOP_TRIPS:
            raise line.error(f"the loops unroll more than {MAX_LOOP_TRIPS} times in all", var_tok)

    def run_loop(self, line: Line, body: list[Line]) -> None:
        """Unroll a loop one iteration at a time (what `template_loop` cannot take: bodies with
        directives, and every loop once a template finds an error, so that the error is the first
        in program order and reads as it always has)."""
        var_tok, start, stop, step = self.loop_header(line)
        self.count_trips(len(range(start, stop, step)), var_tok, line)
        for value in range(start, stop, step):
            self.env.names[var_tok.text] = value
            self.run(body)
        self.env.names.pop(var_tok.text, None)

    # ---------------------------------------------------------------- loops as templates
    def template_loop(self, lines: list[Line], i: int, end: int) -> bool:
        """Assemble the loop at lines[i..end] by parsing each body line once for all its iterations
        (`ncsim.asm.template`); False if it must be unrolled one iteration at a time instead."""
        if self.next_loc is not None:
            return False
        tree = template.loop_tree(lines, i, end, self)
        if tree is None:
            return False
        saved = (dict(self.env.names), dict(self.queues), self.loop_trips)
        try:
            template.assemble_loop(self, tree)
        except template.Fallback:
            self.env.names.clear()
            self.env.names.update(saved[0])
            self.queues = saved[1]
            self.loop_trips = saved[2]
            return False
        return True

    def gpsimd_section(self, line: Line, cur: Cursor, body: list[Line]) -> None:
        """`.gpsimd NAME` ... `.end`: a GpSimd program (`ncsim.gpsimd.code`), which gpsimd_call runs."""
        cur.next()
        cur.next()
        name_tok = self.declare(cur)
        cur.expect_end("after the program's name")
        programs = self.env.gpsimd_programs
        program = parse_section(line, body, self.env.names, name_tok.text, len(programs), self.program.file_index,
                                self.loc_file)
        programs[name_tok.text] = program
        self.program.gpsimd.append(program)

    def loc_file(self, num: int, line: Line) -> int:
        if num not in self.file_numbers:
            raise line.error(f"file number {num} has no .file directive")
        return self.program.file_index(self.file_numbers[num])

    def include(self, line: Line, cur: Cursor) -> None:
        cur.next()
        cur.next()
        path_tok = cur.peek()
        if path_tok.kind != "string":
            raise cur.error("expected the included file's path in double quotes", path_tok)
        cur.next()
        cur.expect_end("after .include")
        path = (Path(line.file).parent / string_value(path_tok)).resolve()
        if path in self.include_stack:
            raise cur.error(f"'{string_value(path_tok)}' includes itself (through {len(self.include_stack)} files)",
                            path_tok)
        if len(self.include_stack) >= MAX_INCLUDE_DEPTH:
            raise cur.error(f"includes nest deeper than {MAX_INCLUDE_DEPTH}", path_tok)
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise cur.error(f"cannot read included file {path_tok.text}: {getattr(e, 'strerror', e)}",
                            path_tok) from None
        rel = str(Path(line.file).parent / string_value(path_tok))
        self.include_stack.append(path)
        try:
            self.run(source_lines(text, rel))
        except AsmError as e:
            e.included_from += (line.loc(),)  # the chain, innermost first, as the error leaves each file
            raise
        self.include_stack.pop()

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
        self.emit(self.parse_instruction(line, cur), line)

    def parse_instruction(self, line: Line, cur: Cursor) -> Instruction:
        """An instruction line parsed and checked against the rules (its values may be lanes)."""
        self.env.broadcasts.clear()
        instr = parse_instruction(line, cur, self.env)
        for tok, ap in self.env.broadcasts:
            if instr.mnemonic != "dma_copy" or instr.operands["src"] is not ap:
                raise line.error("broadcast_to is for the source of a dma_copy (src), which reads HBM", tok)
        if instr.mnemonic == "dma_copy" and "queue" not in instr.given and self.program.sync == "auto":
            instr = dataclasses.replace(instr, operands={**instr.operands, "queue": self.auto_queue(instr)})
        check_instruction(instr, self.config)
        return instr

    def auto_queue(self, instr: Instruction) -> int:
        """The DMA queue of a dma_copy that names none, under .sync auto: one queue for each issuing
        engine and direction (HBM->SBUF, SBUF->HBM, ...), numbered in order of first use. A queue keeps
        its transfers in order, so loads and stores on one queue would make a load wait behind a store
        that waits for its data; on queues of their own they pass each other."""
        return auto_queue(self.queues, self.config, instr.engine, instr.operands["src"], instr.operands["dst"])

    def emit(self, instr: Instruction, line: Line) -> None:
        if self.program.count >= MAX_INSTRUCTIONS:
            raise line.error(f"the program unrolls to more than {MAX_INSTRUCTIONS} instructions")
        if self.next_loc is not None:
            where, self.next_loc = self.next_loc, None
        else:
            where = (self.program.file_index(line.file), line.lineno, instr.loc.col if instr.loc else 1)
        self.program.add(instr, where)

    # ---------------------------------------------------------------- directives
    def d_kernel(self, line: Line, cur: Cursor) -> None:
        if self.kernel_line is not None:
            first = self.kernel_line
            raise cur.error(f"a second .kernel: the kernel is named '{self.program.kernel}' by the .kernel at"
                            f" {first.file}:{first.lineno}", line.tokens[1])
        self.program.kernel = cur.expect_ident("the kernel's name").text
        self.kernel_line = line

    def declare(self, cur: Cursor) -> Token:
        tok = cur.expect_ident("a name")
        if what := self.env.defined(tok.text):
            raise cur.error(f"'{tok.text}' is already {what}", tok)
        if tok.text in RESERVED or SEM_NAME.fullmatch(tok.text):
            raise cur.error(f"'{tok.text}' is reserved: memories, none, true, false, inf, nan and s0..s255", tok)
        return tok

    def d_sync(self, line: Line, cur: Cursor) -> None:
        tok = cur.expect_ident("auto or manual")
        if tok.text not in ("auto", "manual"):
            raise cur.error(f"expected auto or manual, found '{tok.text}'", tok)
        if self.program.count:
            raise cur.error(".sync must come before the first instruction", tok)
        self.program.sync = tok.text

    def d_view(self, line: Line, cur: Cursor) -> None:
        name_tok = self.declare(cur)
        cur.expect("=", "after the view's name")
        base_tok = cur.expect_ident("the tensor it views")
        base = self.env.tensors.get(base_tok.text)
        if base is None:
            raise cur.error(f"'{base_tok.text}' is no declared tensor", base_tok)
        dt_tok = cur.expect_ident("a dtype")
        dt = dtypes.by_name(dt_tok.text)
        if dt is None:
            raise cur.error(f"unknown dtype '{dt_tok.text}'", dt_tok, notes=(suggest(dt_tok.text, dtypes.dtype_names()),))
        shape_tok = cur.peek()
        shape = self.parse_shape(cur)
        view = TensorEntry(name_tok.text, base.memory, dt, shape, base.partition, base.address, base.kind)
        if base.memory != "hbm" and shape[0] != base.shape[0]:
            raise cur.error(f"a view keeps the partitions: '{base.name}' has {base.shape[0]}, this shape {shape[0]}",
                            shape_tok)
        if view.nbytes != base.nbytes:
            raise cur.error(f"a view covers the same bytes: '{base.name}' has {base.nbytes}, this shape and dtype"
                            f" {view.nbytes}", shape_tok)
        self.env.tensors[name_tok.text] = view  # the assembler's name only: the object keeps the base tensor

    def d_const(self, line: Line, cur: Cursor) -> None:
        tok = self.declare(cur)
        cur.expect("=", "after the constant's name")
        value = parse_number(cur, self.env.names)
        if isinstance(value, float) and not cur.at_end():
            raise cur.error("a float constant is one literal (2.5, 1e-5, -inf) or a float constant's name:"
                            " only integers combine in expressions", cur.peek())
        self.env.names[tok.text] = value

    def d_param(self, line: Line, cur: Cursor) -> None:
        tok = self.declare(cur)
        default = None
        if cur.accept("="):
            default = parse_int(cur, self.env.names, "the parameter's default (an integer expression)")
        value = self.params.get(tok.text, default)
        if value is None:
            raise cur.error(f"parameter '{tok.text}' has no value: give one (ncsim asm/run -D {tok.text}=VALUE,"
                            f" Assembler(params={{'{tok.text}': VALUE}})) or a default (.param {tok.text} = EXPR)",
                            tok)
        if isinstance(value, bool) or not isinstance(value, int):
            raise cur.error(f"parameter '{tok.text}' is given {value!r}: a parameter is an integer", tok)
        self.env.names[tok.text] = value
        self.declared_params.append(tok.text)

    def check_params(self, filename: str) -> None:
        """A value given for a name the program does not declare with .param is an error (a misspelt
        -D would otherwise change nothing)."""
        unknown = sorted(set(self.params) - set(self.declared_params))
        if unknown:
            declared = ", ".join(self.declared_params) or "none"
            raise AsmError(f"a value is given for {', '.join(repr(n) for n in unknown)}, which the program does not"
                           f" declare with .param (its parameters: {declared})", file=filename,
                           notes=tuple(n for n in (suggest(u, self.declared_params) for u in unknown)
                                       if n.startswith("did you mean")))

    def d_sem(self, line: Line, cur: Cursor) -> None:
        tok = self.declare(cur)
        used = set(self.env.sems.values()) | self.env.raw_sems
        if cur.accept("@"):  # `.sem NAME @N`: that number (the disassembler writes this form)
            num_tok = cur.peek()
            number = self.bounded_int(cur, "a semaphore number", 0, self.config.semaphores - 1)
            named = next((n for n, v in self.env.sems.items() if v == number), None)
            if named is not None:
                raise cur.error(f"s{number} is already the semaphore named '{named}'", num_tok)
            if number in self.env.raw_sems:
                raise cur.error(f"s{number} is written by number earlier in the program: name another", num_tok)
            self.env.sems[tok.text] = number
            return
        free = next((n for n in range(self.config.semaphores) if n not in used), None)
        if free is None:
            raise cur.error(f"all {self.config.semaphores} semaphores are named already", tok)
        self.env.sems[tok.text] = free

    def d_file(self, line: Line, cur: Cursor) -> None:
        num_tok = cur.peek()
        num = parse_int(cur, self.env.names, "a file number")
        path_tok = cur.peek()
        if path_tok.kind != "string":
            raise cur.error("expected the file's path in double quotes", path_tok)
        cur.next()
        if num in self.file_numbers:
            raise cur.error(f"file number {num} is already given", num_tok)
        if "\0" in string_value(path_tok):
            raise cur.error("a file name cannot contain a NUL character", path_tok)
        self.file_numbers[num] = string_value(path_tok)
        self.program.file_index(self.file_numbers[num])  # keep the object's file order

    def d_loc(self, line: Line, cur: Cursor) -> None:
        num_tok = cur.peek()
        num = parse_int(cur, self.env.names, "a file number")
        if num not in self.file_numbers:
            raise cur.error(f"file number {num} has no .file directive", num_tok)
        ln = self.bounded_int(cur, "a line number", 1, UINT32_MAX)
        col = self.bounded_int(cur, "a column number", 1, UINT32_MAX)
        self.next_loc = (self.program.file_index(self.file_numbers[num]), ln, col)

    def d_tensor(self, line: Line, cur: Cursor) -> None:
        memory = cur.toks[cur.i - 1].text
        name_tok = self.declare(cur)
        name = name_tok.text
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
        elif shape[0] > self.config.pmax:
            raise cur.error(f"'{name}' has {shape[0]} partitions (its first dimension); a tile has at most"
                            f" {self.config.pmax}", name_tok)
        entry = TensorEntry(name, memory, dt, shape, 0, 0, kind)
        if cur.at("@"):
            partition, address = self.parse_placement(cur, memory)
            entry = TensorEntry(name, memory, dt, shape, partition, address, kind)
            try:
                check_tensor(entry, self.config)
            except AsmError as e:
                raise line.error(e.message, name_tok) from None
            try:
                self.alloc.reserve_explicit(entry)
            except AsmError as e:
                raise line.error(e.message, name_tok) from None
        else:
            try:
                entry = self.alloc.place(entry)
            except AsmError as e:
                raise line.error(e.message, name_tok, notes=e.notes) from None
        self.program.tensors[name] = entry
        self.env.tensors[name] = entry

    def parse_shape(self, cur: Cursor) -> tuple[int, ...]:
        cur.expect("[", "to open the shape")
        dims = []
        while True:
            if len(dims) == MAX_TENSOR_DIMS:
                raise cur.error(f"a tensor has at most {MAX_TENSOR_DIMS} dimensions", cur.peek())
            dims.append(self.bounded_int(cur, "a dimension", 1, UINT32_MAX))
            if not cur.accept(","):
                break
        cur.expect("]", "to close the shape")
        return tuple(dims)

    def parse_placement(self, cur: Cursor, memory: str) -> tuple[int, int]:
        cur.expect("@")
        if memory == "hbm":
            return 0, self.bounded_int(cur, "a byte address", 0, 2**63 - 1)
        partition = self.bounded_int(cur, "the first partition", 0, self.config.pmax - 1)
        cur.expect(":", "between partition and byte offset")
        return partition, self.bounded_int(cur, "a byte offset", 0, 2**63 - 1)

    def bounded_int(self, cur: Cursor, what: str, lo: int, hi: int) -> int:
        tok = cur.peek()
        value = parse_int(cur, self.env.names, what)
        if not lo <= value <= hi:
            raise cur.error(f"{what} must be in {lo}..{hi}, not {value}", tok)
        return value


def source_lines(text: str, filename: str) -> list[Line]:
    """The lines of a source file; a UTF-8 byte-order mark at its start (some Windows editors write
    one) is no part of the first line."""
    return [Line(filename, n, raw) for n, raw in enumerate(text.removeprefix("\ufeff").splitlines(), start=1)]


def _identifier(stem: str) -> str:
    out = "".join(c if (c.isascii() and c.isalnum()) or c == "_" else "_" for c in stem)
    return out if out and not out[0].isdigit() else "k_" + out


def assemble(text: str, filename: str = "<input>", config: Config = DEFAULT,
             params: Mapping[str, int] | None = None) -> ObjectFile:
    return Assembler(config, params).assemble(text, filename)


def read_source(path: str | Path) -> str:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise AsmError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}", file=str(path)) from None


def assemble_file(path: str | Path, config: Config = DEFAULT, params: Mapping[str, int] | None = None) -> ObjectFile:
    return assemble(read_source(path), str(path), config, params)
