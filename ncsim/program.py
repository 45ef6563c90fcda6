"""The decoded program: one loaded kernel as flat numpy arrays, read by every phase.

A `Program` is built once, from an object file (`Program.from_object`), straight from the
assembler's words a block at a time (`Program.from_blocks`: neither an object nor the whole
program's words in between), from its whole encoded arrays (`Program.from_encoded`), or from
instructions made in Python (`Program.from_instructions`). The functional machine (`ncsim.runtime.machine`), the
timing model (`ncsim.runtime.timing`), and through its result the race check, the report and the
trace all read it; none of them decodes the instruction bytes again.

Instructions are numbered k = 0..count-1: the streams of `isa.ENGINES` concatenated in that order,
program order within each; `first[e]` is the k of stream e's first instruction (`first[-1]` is the
count). Per instruction k:

- `opcode[k]` (isa row), `engine[k]` (index into isa.ENGINES);
- `body[k]`: instructions whose encodings agree in every byte but the semaphore counts, the access
  patterns' byte offsets (or constants' bits) and sem_wait's / sem_signal's semaphore operand share
  a body; `body_first[b]` is the first instruction of body b, whose words are
  body_words[body_pos[b]:body_pos[b + 1]]. The isa operand table (`layout`) says where those bytes
  are, so nothing here names an operand;
- access-pattern operands (every operand of an APKind, in table order, absent ones and constants
  included): rows ap_ptr[k]..ap_ptr[k + 1] of `ap_value`, the byte offset of a pattern in memory or
  the bits of a constant (the rest of each pattern is its body's);
- footprints of the patterns in memory (CSR): rows fp_ptr[k]..fp_ptr[k + 1] of fp_memory (Memory
  codes), fp_partition, fp_partitions (0 in HBM), fp_lo, fp_hi (bytes [lo, hi) in each partition, or
  of HBM) and fp_access (ACCESS_READ | ACCESS_WRITE);
- waits (CSR): rows wait_ptr[k]..wait_ptr[k + 1] of wait_sem, wait_op (index into fields.WAIT_OPS)
  and wait_value, sem_wait's condition last; signals likewise in signal_ptr, signal_sem, signal_op
  (index into fields.SIGNAL_OPS), signal_value, sem_signal's update last;
- source place: src_file[k] (index into `files`; -1: none), src_line[k], src_col[k].

Besides: `kernel`, `files`, `tensors` (the object's TensorEntry list) and `name` (the display name
of the program, where errors are placed when there is no source). The object format names no
semaphores, so neither does the program.

Decoding: one numba pass (`_read`) walks the streams, checks each header and writes every column
(into numpy arrays as long as the words bound them, or exactly as long as the assembler counted,
cut in place after); it reads a piece of words at a time with its counts and body tables carried
over (`_Reader`), so the assembler's blocks are read as they come; only the first instruction
of each body is decoded into an `Instruction` (a tiled kernel of a million instructions has a few
hundred bodies). `instruction(k)` gives any instruction as an `Instruction`, made from its body's
and its own columns (not from the bytes) and kept; the functional machine runs those, `stream(engine)`
gives a whole stream. Every byte is checked once: the bodies' first instructions by the decoder, the
rest of each instruction (offsets, constants, semaphore entries, headers) by the numba pass.

The encoded words are not kept once decoded (nor is the object a program was read from): every
byte an instruction does not share with its body's first is in a column, so `encoded()` makes the
words again (a numba pass, `_encode`) for `to_object` and `prefix`, byte for byte those read.

Integer columns are int64 but where the encoding bounds them: body int32, the CSR pointers
(wait_ptr, signal_ptr, fp_ptr, ap_ptr) int32 while the words number fewer than 2**31 (else int64),
semaphore numbers and partitions int16, semaphore ops, memories and access bits int8, source places
int32 (measured on tools/bench_pipeline.py's program: 127 bytes per instruction, everything the
program keeps; 143 with int64 pointers, 332 when it kept the words). A program read from an ELF file
takes the line table's columns as the reader made them (views, not copies).
"""

from __future__ import annotations

import dataclasses
import itertools
import linecache
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

import numba
import numpy as np

from ncsim import dtypes, isa
from ncsim.asm.fields import SIGNAL_OPS, WAIT_OPS, APKind, SemOneKind, SemOp, const_from_bits
from ncsim.asm.instruction import Instruction, decode_one, encode, layout
from ncsim.asm.objfile import LineEntry, LineTable, ObjectFile, TensorEntry
from ncsim.errors import ObjectFileError, SourceLoc
from ncsim.memory.access import ON_CHIP, AccessPattern, Immediate, Memory

if TYPE_CHECKING:
    from ncsim.asm.build import Blocks, Encoded
    from ncsim.config import Config

ENGINES = isa.ENGINES
ACCESS_READ, ACCESS_WRITE = 1, 2  # bits of fp_access
_MAX_AP = 8  # access-pattern operands of one instruction, at most
_MRU = 4  # bodies per opcode _read compares an instruction with before it looks in its hash table
_BODIES = 4096  # bodies _read's tables hold at first (x8 each time a program has more); a tiled kernel
# of a million instructions has a few hundred


def source_line(path: str, line: int, checked: set[str]) -> str:
    """Line `line` of file `path` ('' if there is none), read through linecache by absolute path (two
    programs named r.s in different folders are different files); a file not yet in `checked` is
    first checked against the disk, then added."""
    full = os.path.abspath(path)
    if full not in checked:
        linecache.checkcache(full)
        checked.add(full)
    return linecache.getline(full, line).rstrip("\n")


@dataclass(eq=False)
class Program:
    kernel: str
    files: list[str]
    tensors: list[TensorEntry]
    name: str
    first: np.ndarray
    opcode: np.ndarray
    src_file: np.ndarray
    src_line: np.ndarray
    src_col: np.ndarray
    body: np.ndarray
    body_first: np.ndarray
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
    ap_ptr: np.ndarray
    ap_value: np.ndarray
    body_words: np.ndarray  # the words of each body's first instruction, back to back
    body_pos: np.ndarray  # body b's are body_words[body_pos[b]:body_pos[b + 1]]
    semaphores: dict[int, str] = field(default_factory=dict)  # the source's `.sem` names, by number
    gpsimd: list[Any] = field(default_factory=list)  # the GpSimd programs (ncsim.gpsimd.code), see link_gpsimd
    # An object kept with the program (ncsim.run keeps the assembler's; from_object keeps none:
    # to_object makes it again). nbytes counts its streams.
    obj: ObjectFile | None = field(default=None, repr=False)
    # The configuration whose rules every instruction is known to keep: set where the assembler made
    # the program under it (ncsim.runtime.run.load_program) or verify_program checked it against it.
    # The functional machine then runs the instructions without checking their rules again.
    rules_kept: Config | None = field(default=None, repr=False)
    _given: list[Instruction] | None = field(default=None, repr=False)  # from_instructions: as given
    _bodies: list[Instruction] = field(default_factory=list, repr=False)  # body -> its first, decoded
    _instrs: dict[int, Instruction] = field(default_factory=dict, repr=False)
    _patterns: dict[tuple[int, int, int], Any] = field(default_factory=dict, repr=False)
    _fields: dict[int, tuple[Any, ...]] = field(default_factory=dict, repr=False)  # body -> _variable_fields of its first
    # One object for each distinct access pattern of the instructions made here: the functional machine
    # keys its memory's caches by pattern, and a lookup with the very object a cache holds skips the
    # comparison of their fields (AccessPattern.__eq__), which two equal patterns of different bodies
    # (a tile one instruction writes and the next reads) would otherwise pay at each lookup.
    _interned: dict[AccessPattern, AccessPattern] = field(default_factory=dict, repr=False)
    _checked: set[str] = field(default_factory=set, repr=False)  # files linecache was checked for

    # ------------------------------------------------------------------ building
    @classmethod
    def from_object(cls, obj: ObjectFile, name: str = "<object>") -> Program:
        """Decode an object: its streams, line table, files and tensors. A malformed object raises
        ObjectFileError naming the section and byte offset."""
        streams = {e: obj.streams.get(e, b"") for e in ENGINES}
        for engine in ENGINES:
            if len(streams[engine]) % 8:
                _raise_decode(streams[engine], engine, name)  # a truncated instruction: decode says where
        words = _words(streams[e] for e in ENGINES)
        sizes = np.array([len(streams[e]) // 8 for e in ENGINES], np.int64)
        word_first = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        first, columns = _columns(words, word_first, name)
        n = int(first[-1])
        tables = [obj.lines.get(engine, []) for engine in ENGINES]
        for e, engine in enumerate(ENGINES):
            lo, hi = int(first[e]), int(first[e + 1])
            if len(tables[e]) != hi - lo:
                raise ObjectFileError(f"the line table of .text.{engine} has {len(tables[e])} entries for"
                                      f" {hi - lo} instructions", file=name)
        # The ELF reader's (and the assembler's) tables are slices of one column each, back to back:
        # the program takes those columns as they are (no copy, no pages written).
        src = _joined_lines([t for t in tables if len(t)], n)
        if src is None:
            src = [np.empty(n, np.int32) for _ in range(3)]  # file, line, col
            for e, entries in enumerate(tables):
                lo, hi = int(first[e]), int(first[e + 1])
                if hi > lo and isinstance(entries, LineTable):
                    for column, values in zip(src, (entries.file, entries.line, entries.col)):
                        column[lo:hi] = values
                elif hi > lo:
                    table = np.fromiter(itertools.chain.from_iterable(entries), np.int64, 4 * (hi - lo)).reshape(-1, 4)
                    if not np.array_equal(table[:, 0], np.arange(hi - lo)):
                        raise ObjectFileError(f"the line table of .text.{ENGINES[e]} does not number its entries"
                                              f" 0..{hi - lo - 1} in order", file=name)
                    for j, column in enumerate(src):
                        column[lo:hi] = table[:, 1 + j]
        # The object is not kept: its words (the file's bytes) are not needed once decoded, and
        # to_object makes the same bytes again from the columns.
        prog = cls._made(obj.kernel, list(obj.files), list(obj.tensors), name, words, word_first, first, columns,
                         src[0], src[1], src[2])
        prog.semaphores = dict(getattr(obj, "semaphores", {}))
        prog.link_gpsimd(obj.gpsimd)
        return prog

    @classmethod
    def from_encoded(cls, enc: Encoded, kernel: str, files: Sequence[str], tensors: Sequence[TensorEntry],
                     name: str = "<program>", semaphores: Mapping[int, str] | None = None,
                     gpsimd: Sequence[Any] = ()) -> Program:
        """The assembler's arrays (`ncsim.asm.build.Encoded`), without making an object; `gpsimd`: the
        GpSimd programs its gpsimd_call instructions run (the object's `gpsimd`), linked as from_object does."""
        first, columns = _columns(enc.words, enc.word_first, name)
        prog = cls._made(kernel, list(files), list(tensors), name, enc.words, enc.word_first, first, columns,
                         enc.file, enc.line, enc.col)
        prog.semaphores = dict(semaphores or {})
        prog.link_gpsimd(gpsimd)
        return prog

    @classmethod
    def from_blocks(cls, blocks: Blocks, kernel: str, files: Sequence[str], tensors: Sequence[TensorEntry],
                    name: str = "<program>", semaphores: Mapping[int, str] | None = None,
                    gpsimd: Sequence[Any] = ()) -> Program:
        """The assembler's words a block at a time (`ncsim.asm.build.Blocks`), each read as it comes and
        dropped: the program's words are never whole in memory. Columns, bodies and bytes are those
        from_encoded and from_object give for the same program."""
        reader = _Reader(blocks.count, blocks.waits, blocks.signals, blocks.patterns, blocks.footprints,
                         _ptr_dtype(blocks.words))
        first = np.zeros(len(ENGINES) + 1, np.int64)
        for e, words in blocks:
            status, _ = reader.feed(words, 0, len(words), e)
            if status:
                raise AssertionError(f"the assembler encoded a malformed {ENGINES[e]} instruction (status {status})")
            first[e + 1] = reader.count
            del words
        np.maximum.accumulate(first, out=first)
        columns = reader.columns()
        if columns.bad >= 0 or reader.count != blocks.count:
            raise AssertionError(f"the assembler encoded a malformed instruction ({columns.bad})")
        assert blocks.src is not None
        prog = cls._made(kernel, list(files), list(tensors), name, None, None, first, columns, *blocks.src)
        prog.semaphores = dict(semaphores or {})
        prog.link_gpsimd(gpsimd)
        return prog

    @classmethod
    def from_instructions(cls, streams: Mapping[str, Sequence[Instruction]], name: str = "<program>",
                          kernel: str = "kernel", tensors: Sequence[TensorEntry] = ()) -> Program:
        """{engine: [Instruction, ...]} built in Python; their `loc`s are their source places."""
        unknown = set(streams) - set(ENGINES)
        if unknown:
            raise ValueError(f"unknown engines {sorted(unknown)}: the streams are {', '.join(ENGINES)}")
        given = [i for e in ENGINES for i in streams.get(e, ())]
        raw = {e: b"".join(encode(i) for i in streams.get(e, ())) for e in ENGINES}
        files = sorted({i.loc.file for i in given if i.loc is not None})
        index = {f: j for j, f in enumerate(files)}
        src = np.array([(index[i.loc.file], i.loc.line, i.loc.col) if i.loc is not None else (-1, -1, -1)
                        for i in given], np.int64).reshape(-1, 3)
        obj = ObjectFile(kernel, raw, {e: [LineEntry(j, 0, 0, 0) for j in range(len(streams.get(e, ())))]
                                       for e in ENGINES}, files, list(tensors))
        prog = cls.from_object(obj, name)
        prog.src_file, prog.src_line, prog.src_col = src[:, 0].copy(), src[:, 1].copy(), src[:, 2].copy()
        prog._given = given
        prog.obj = None
        return prog

    @classmethod
    def of(cls, program: Program | ObjectFile | Mapping[str, Sequence[Instruction]], name: str) -> Program:
        if isinstance(program, Program):
            return program
        if isinstance(program, ObjectFile):
            return cls.from_object(program, name)
        return cls.from_instructions(program, name)

    @classmethod
    def _made(cls, kernel: str, files: list[str], tensors: list[TensorEntry], name: str, words: np.ndarray | None,
              word_first: np.ndarray | None, first: np.ndarray, columns: _Columns, src_file: np.ndarray,
              src_line: np.ndarray, src_col: np.ndarray) -> Program:
        """The program of the columns _columns read from `words`, the first instruction of each body
        decoded; the words are not kept (None: read a block at a time, by from_blocks, whose errors are
        the assembler's, said as they are)."""
        reps, rpos = columns.reps, columns.rpos
        body_words, body_pos = columns.body_words, columns.body_pos
        i32 = np.int32
        prog = cls(kernel, files, tensors, name, first, src_file=np.asarray(src_file, i32),
                   src_line=np.asarray(src_line, i32), src_col=np.asarray(src_col, i32), body_first=reps,
                   body_words=body_words, body_pos=body_pos, **dict(zip(_COLUMNS, columns.arrays)))
        for b, k in enumerate(reps.tolist()):  # the first instruction of each body, in program order: errors in that order
            try:
                prog._bodies.append(prog._decode(b))
            except ObjectFileError:
                if words is None or word_first is None:
                    raise
                _raise_at(words, word_first, first, rpos[b], k, name)  # again over the whole stream, for the offset
                raise
        if columns.bad >= 0 and words is not None and word_first is not None:
            k = columns.bad
            e = prog.engine_of(k)
            _raise_at(words, word_first, first, _position(words, word_first[e], k - int(first[e])), k, name)
        return prog

    def link_gpsimd(self, programs: Sequence[Any]) -> None:
        """Keep the object's GpSimd programs and put each in the `program` operand of the gpsimd_call
        instructions that name it by index (so that they run and time it, and print its name)."""
        self.gpsimd = list(programs)
        for b, rep in enumerate(self._bodies):
            if rep.mnemonic != "gpsimd_call" or not isinstance(rep.operands["program"], int):
                continue
            index = rep.operands["program"]
            if index >= len(self.gpsimd):
                raise ObjectFileError(f"gpsimd_call runs GpSimd program {index}, but the object has"
                                      f" {len(self.gpsimd)}", file=self.name)
            self._bodies[b] = dataclasses.replace(rep, operands={**rep.operands, "program": self.gpsimd[index]})
            self._instrs.pop(int(self.body_first[b]), None)

    # ------------------------------------------------------------------ sizes
    @property
    def count(self) -> int:
        return int(self.first[-1])

    def __len__(self) -> int:
        return self.count

    @property
    def engine(self) -> np.ndarray:
        return np.repeat(np.arange(len(ENGINES), dtype=np.int8), np.diff(self.first))

    def engine_of(self, k: int) -> int:
        return int(np.searchsorted(self.first, k, side="right") - 1)

    def constant_slots(self, k: int) -> list[int]:
        """The slots of instruction k's ap_value columns (ap_ptr[k] + slot) that hold constants (its
        Immediate operands); the same for every instruction of its body."""
        b = int(self.body[k])
        rep = self._bodies[b]
        return [j for j, name in self._body_fields(b)[0] if isinstance(rep.operands[name], Immediate)]

    def on_chip_extents(self) -> dict[Memory, int]:
        """The end of the furthest footprint in each partition of SBUF and PSUM (bytes; 0 if none):
        how much of each on-chip memory the program's instructions reach."""
        out = {}
        for m in ON_CHIP:
            hi = self.fp_hi[self.fp_memory == m]
            out[m] = int(hi.max()) if hi.shape[0] else 0
        return out

    def find(self, engine: str, index: int) -> int:
        """The k of instruction `index` of `engine`'s stream."""
        return int(self.first[ENGINES.index(engine)] + index)

    def mnemonic(self, k: int) -> str:
        return isa.BY_OPCODE[int(self.opcode[k])].mnemonic

    def nbytes(self) -> int:
        """Bytes of every array the program keeps: its columns, and the streams of the object it keeps
        if it keeps one (a program read from an object does not; the assembler's may)."""
        own = sum(v.nbytes for v in vars(self).values() if isinstance(v, np.ndarray))
        return own + (sum(len(s) for s in self.obj.streams.values()) if self.obj is not None else 0)

    # ------------------------------------------------------------------ one instruction
    def loc(self, k: int) -> SourceLoc | None:
        """Instruction k's source place, with its line's text (None if it has none)."""
        k = int(k)
        if self._given is not None:
            return self._given[k].loc
        f = int(self.src_file[k])
        if f < 0:
            return None
        path = self.files[f] if f < len(self.files) else self.name
        line = int(self.src_line[k])
        return SourceLoc(path, line, int(self.src_col[k]), self.source_line(path, line),
                         length=len(self.mnemonic(k)))

    def source_line(self, path: str, line: int) -> str:
        """Line `line` of file `path` as it is now ('' if there is none), checked against the file on
        disk once per program (it may have changed since an earlier program)."""
        return source_line(path, line, self._checked)

    def instruction(self, k: int) -> Instruction:
        """Instruction k, made from its body's decoded first instruction and its own columns, and kept."""
        k = int(k)
        instr = self._instrs.get(k)
        if instr is not None:
            return instr
        if self._given is not None:
            instr = self._given[k]
        else:
            instr = self._make(k)
        self._instrs[k] = instr
        return instr

    def stream(self, engine: str) -> list[Instruction]:
        """Every instruction of one engine's stream, in order."""
        e = ENGINES.index(engine)
        return [self.instruction(k) for k in range(int(self.first[e]), int(self.first[e + 1]))]

    def waits(self, k: int) -> tuple[SemOp, ...]:
        """Every wait of instruction k, sem_wait's condition last."""
        return _sem_ops(self.wait_ptr, self.wait_sem, self.wait_op, self.wait_value, WAIT_OPS, k)

    def signals(self, k: int) -> tuple[SemOp, ...]:
        """Every semaphore update of instruction k, sem_signal's update last."""
        return _sem_ops(self.signal_ptr, self.signal_sem, self.signal_op, self.signal_value, SIGNAL_OPS, k)

    def _make(self, k: int) -> Instruction:
        b = int(self.body[k])
        rep = self._bodies[b]
        if k == int(self.body_first[b]):
            return rep
        waits, signals = self.waits(k), self.signals(k)
        ops = dict(rep.operands)
        fields = self._body_fields(b)
        a0 = int(self.ap_ptr[k])
        values = self.ap_value[a0:a0 + fields[2]].tolist()
        for j, name in fields[0]:
            ops[name] = self._pattern(b, j, rep.operands[name], values[j])
        if fields[1] is not None:  # sem_wait's condition / sem_signal's update: the last entry
            if rep.mnemonic == "sem_wait":
                ops[fields[1]], waits = waits[-1], waits[:-1]
            else:
                ops[fields[1]], signals = signals[-1], signals[:-1]
        return Instruction(rep.spec, rep.engine, ops, waits, signals)

    def _body_fields(self, b: int) -> tuple[Any, ...]:
        """_variable_fields of body b's first instruction, made once."""
        fields = self._fields.get(b)
        if fields is None:
            fields = self._fields[b] = _variable_fields(self._bodies[b])
        return fields

    def _pattern(self, b: int, j: int, rep: AccessPattern | Immediate, value: int) -> AccessPattern | Immediate:
        """Operand j of body b with its own offset (or constant bits) `value`; one object per distinct value."""
        key = (b, j, value)
        out = self._patterns.get(key)
        if out is None:
            if isinstance(rep, Immediate):
                out = const_from_bits(rep.dtype.code, value)
            elif value == rep.offset:
                out = rep
            else:
                moved = rep.moved(value)
                out = self._interned.setdefault(moved, moved)
            self._patterns[key] = out
        return out

    def _decode(self, b: int) -> Instruction:
        """Body b's first instruction decoded from its words (only those are decoded), its access
        patterns interned (see _interned)."""
        instr = decode_one(self.body_words[self.body_pos[b]:self.body_pos[b + 1]].tobytes(), 0)[0]
        ops = instr.operands
        for name, v in ops.items():
            if isinstance(v, AccessPattern):
                ops[name] = self._interned.setdefault(v, v)
        return instr

    def encoded(self, ks: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(words, pos): instructions `ks` (all by default; ascending) encoded again from the columns
        and their bodies' words, back to back, instruction ks[i] at word pos[i]. The same bytes as the
        object the program was read from: every byte an instruction does not share with its body's
        first is in a column."""
        tab = _tables()
        ks = np.arange(self.count, dtype=np.int64) if ks is None else np.asarray(ks, np.int64)
        pos = np.empty(len(ks), np.int64)
        total = _encoded_sizes(ks, self.opcode, self.wait_ptr, self.signal_ptr, tab.fixed_words, tab.sem_operand, pos)
        words = np.empty(total, np.uint64)  # numpy's (huge pages), every word written
        _encode(ks, pos, words, self.opcode, self.body, self.body_words, self.body_pos, self.wait_ptr, self.wait_sem,
                self.wait_op, self.wait_value, self.signal_ptr, self.signal_sem, self.signal_op, self.signal_value,
                self.ap_ptr, self.ap_value, tab.fixed_words, tab.ap_off, tab.sem_operand)
        return words, pos

    def encoded_size(self, ks: np.ndarray) -> int:
        """The words instructions `ks` take encoded (`encoded(ks)`'s length), without encoding them."""
        tab = _tables()
        return int(_encoded_sizes(ks, self.opcode, self.wait_ptr, self.signal_ptr, tab.fixed_words, tab.sem_operand,
                                  np.empty(len(ks), np.int64)))

    def prefix(self, counts: Sequence[int]) -> Program:
        """The program of the first counts[e] instructions of each stream e."""
        ks = np.concatenate([np.arange(int(self.first[e]), int(self.first[e]) + int(c))
                             for e, c in enumerate(counts)]).astype(np.int64)
        words, pos = self.encoded(ks)
        word_first = np.append(pos, len(words))[np.concatenate(([0], np.cumsum(counts)))].astype(np.int64)
        first, columns = _columns(words, word_first, self.name)
        prog = Program._made(self.kernel, self.files, self.tensors, self.name, words, word_first, first, columns,
                             self.src_file[ks], self.src_line[ks], self.src_col[ks])
        prog.semaphores = self.semaphores
        prog.link_gpsimd(self.gpsimd)
        if self._given is not None:
            prog._given = [self._given[k] for k in ks.tolist()]
        return prog

    # ------------------------------------------------------------------ back to an object
    def to_object(self) -> ObjectFile:
        """The object that holds this program (for writing it out)."""
        obj = ObjectFile(kernel=self.kernel, files=list(self.files), tensors=list(self.tensors), gpsimd=list(self.gpsimd),
                         semaphores=dict(self.semaphores))
        words, pos = self.encoded()
        words.flags.writeable = False
        word_first = np.append(pos, len(words))[self.first]  # stream e's first word (the last: the end)
        obj.streams = {e: memoryview(words[word_first[i]:word_first[i + 1]].view(np.uint8)).toreadonly()
                       for i, e in enumerate(ENGINES)}  # views of the words, as the assembler's object has
        for i, e in enumerate(ENGINES):
            lo, hi = int(self.first[i]), int(self.first[i + 1])
            obj.lines[e] = LineTable(self.src_file[lo:hi], self.src_line[lo:hi], self.src_col[lo:hi])
        return obj


def _joined_lines(tables: Sequence[Sequence[LineEntry]], n: int) -> list[np.ndarray] | None:
    """[file, line, col] of the program (n instructions), read-only int32 views (32-bit unsigned
    columns are taken as int32, as copying them into an int32 column would), when `tables` (the
    non-empty streams' in order) are LineTables whose columns are slices laid back to back in one array
    each (the ELF reader's, the assembler's); else None."""
    if not tables or not all(isinstance(t, LineTable) for t in tables):
        return None
    out = []
    for name in ("file", "line", "col"):
        parts = [getattr(t, name) for t in tables]
        if not all(isinstance(a, np.ndarray) and a.dtype.kind in "iu" and a.dtype.itemsize == 4
                   and a.dtype == parts[0].dtype and a.flags.c_contiguous for a in parts):
            return None
        start = parts[0].ctypes.data
        ends = [a.ctypes.data + a.nbytes for a in parts]
        if any(a.ctypes.data != end for a, end in zip(parts[1:], ends)) or ends[-1] - start != 4 * n:
            return None
        root = parts[0]
        while isinstance(root.base, np.ndarray):  # the array that owns the memory
            root = root.base
        if not (root.flags.c_contiguous and root.ctypes.data <= start and ends[-1] <= root.ctypes.data + root.nbytes):
            return None
        column = np.ndarray((n,), np.int32, root, start - root.ctypes.data)  # the same bytes, as int32
        column.flags.writeable = False
        out.append(column)
    return out


def _words(streams: Iterable[bytes | memoryview]) -> np.ndarray:
    """The streams, back to back, as one read-only array of little-endian 64-bit words: a view without a
    copy when they are views laid out one after the other in one buffer (an object read from a file,
    whose .text sections follow each other, or the assembler's), else one concatenation."""
    parts = [s for s in streams if len(s)]
    if not parts:
        return np.frombuffer(b"", "<u8")
    if all(isinstance(s, memoryview) and s.c_contiguous and s.itemsize == 1 for s in parts):
        roots = [s.obj for s in parts]
        for k, root in enumerate(roots):
            while isinstance(root, np.ndarray) and root.base is not None:  # the array that owns the memory
                root = root.base
            roots[k] = root
        if all(r is roots[0] for r in roots):
            try:
                base = np.frombuffer(roots[0], np.uint8)
            except (TypeError, ValueError, BufferError):
                return np.frombuffer(b"".join(parts), dtype="<u8")
            lo = base.ctypes.data
            starts = [np.frombuffer(s, np.uint8).ctypes.data - lo for s in parts]
            ends = [a + len(s) for a, s in zip(starts, parts)]
            if (starts[0] >= 0 and ends[-1] <= base.size and (lo + starts[0]) % 8 == 0
                    and all(e == a for e, a in zip(ends, starts[1:]))):
                words = base[starts[0]:ends[-1]].view("<u8")
                words.flags.writeable = False
                return words
    return np.frombuffer(b"".join(parts), dtype="<u8")


_COLUMNS = ("opcode", "body", "wait_ptr", "wait_sem", "wait_op", "wait_value", "signal_ptr", "signal_sem", "signal_op",
            "signal_value", "fp_ptr", "fp_memory", "fp_partition", "fp_partitions", "fp_lo", "fp_hi", "fp_access",
            "ap_ptr", "ap_value")  # the columns _read writes, in the order of _Columns.arrays


@dataclass
class _Columns:
    """What _read found: the columns _COLUMNS names; reps[b], rpos[b]: body b's first instruction and its
    word (in the words it was read from); body_words / body_pos: each body's first instruction's words,
    back to back; bad: the first instruction whose semaphore entries or pattern offsets are malformed, or -1."""

    arrays: list[np.ndarray]
    reps: np.ndarray
    rpos: np.ndarray
    body_words: np.ndarray
    body_pos: np.ndarray
    bad: int


def _ptr_dtype(words: int) -> type:
    """The dtype of the CSR pointer columns (wait_ptr, signal_ptr, fp_ptr, ap_ptr) of a program of
    `words` instruction words: a wait, a signal or a pattern takes at least one word, so no row number
    reaches `words`; int32 while that is below 2**31 (every program short of 16 GiB of instructions),
    else int64. 16 of the 143 bytes per instruction (tools/bench_pipeline.py's program) fewer to fault in."""
    return np.int32 if words < 2**31 - 1 else np.int64


class _Reader:
    """_read's columns, tables and counts, for a program read a piece of words at a time (`feed`) and
    then cut to what was written (`columns`). The columns are allocated for at most n instructions,
    `waits` waits, `signals` signals, `patterns` access patterns and `footprints` footprints (_read
    stops at an instruction that would not fit), untouched where not written; the bodies' tables
    start at _BODIES rows and grow x8 when full (`_tables`), what was read so far kept."""

    def __init__(self, n: int, waits: int, signals: int, patterns: int, footprints: int, ptr: type):
        e = np.empty
        self.arrays = [e(n, np.uint8), e(n, np.int32),  # opcode, body
                       e(n + 1, ptr), e(waits, np.int16), e(waits, np.int8), e(waits, np.int64),  # waits
                       e(n + 1, ptr), e(signals, np.int16), e(signals, np.int8), e(signals, np.int64),  # signals
                       e(n + 1, ptr), e(footprints, np.int8), e(footprints, np.int16), e(footprints, np.int16),
                       e(footprints, np.int64), e(footprints, np.int64), e(footprints, np.int8),  # footprints
                       e(n + 1, ptr), e(patterns, np.int64)]  # patterns
        for k in (2, 6, 10, 17):
            self.arrays[k][0] = 0
        self.st = np.zeros(8, np.int64)
        self.st[6] = -1
        self.mru = np.full((256, _MRU), -1, np.int64)
        self.cap = 0
        self._tables(_BODIES)

    def _tables(self, cap: int) -> None:
        """Body tables of `cap` rows, what the smaller ones held copied in."""
        old, nb = self.cap, int(self.st[5])
        tab = _tables()
        words = int(tab.fixed_words.max()) + 16  # an instruction's words, at most (_read: 8 waits, 8 signals)
        grown = [np.zeros((cap, _MAX_AP), np.int64) for _ in range(5)] + [
            np.empty(cap, np.uint64), np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap + 1, np.int64),
            np.empty(cap * words, np.uint64)]  # rhash, reps, rpos, spos, store
        if old:
            for a, b in zip(grown, self.per_body + [self.rhash, self.reps, self.rpos, self.spos, self.store]):
                a[:len(b)] = b
        self.per_body = grown[:5]
        self.rhash, self.reps, self.rpos, self.spos, self.store = grown[5:]
        if not old:
            self.spos[0] = 0
        self.table = np.full(2 * cap, -1, np.int64)
        _rehash(self.rhash, nb, self.table)
        self.cap = cap

    def feed(self, words: np.ndarray, lo: int, end: int, e: int) -> tuple[int, int]:
        """Read words[lo:end], a piece of stream e, after what was read before: (0, end), or (status,
        word) of a malformed header (1) or an instruction encoded for another engine (2) at that word."""
        tab = _tables()
        while True:
            status, p = _read(words, lo, end, e, *self.arrays[:2], self.reps, self.rpos, *self.arrays[2:],
                              *self.per_body, self.rhash, self.table, self.mru, self.store, self.spos, self.st,
                              tab.fixed_words, tab.key_mask, tab.ap_off, tab.ap_access, tab.ap_count, tab.sem_operand,
                              tab.itemsize)
            if status == 4:
                raise AssertionError(f"_read's columns were allocated for fewer rows (counts {self.st.tolist()})")
            if status != 3:
                return int(status), int(p)
            self._tables(self.cap * 8)
            lo = p

    @property
    def count(self) -> int:
        return int(self.st[0])

    def columns(self) -> _Columns:
        """The columns cut to what was written: in place (realloc; no copy, the pages past it go back)."""
        count, waits, signals, patterns, footprints, bodies, bad, stored = self.st.tolist()
        for column, length in zip(self.arrays, (count, count, count + 1, waits, waits, waits, count + 1, signals,
                                                signals, signals, count + 1, footprints, footprints, footprints,
                                                footprints, footprints, footprints, count + 1, patterns)):
            column.resize(length, refcheck=False)
        return _Columns(self.arrays, self.reps[:bodies].copy(), self.rpos[:bodies].copy(),
                        self.store[:stored].copy(), self.spos[:bodies + 1].copy(), int(bad))


def _sem_ops(ptr: np.ndarray, sem: np.ndarray, op: np.ndarray, value: np.ndarray, names: Sequence[str],
             k: int) -> tuple[SemOp, ...]:
    """Rows ptr[k]..ptr[k + 1] of a program's wait or signal columns, as SemOps."""
    lo, hi = int(ptr[k]), int(ptr[k + 1])
    if lo == hi:
        return ()
    return tuple(SemOp(s, names[o], v) for s, o, v in zip(sem[lo:hi].tolist(), op[lo:hi].tolist(),
                                                          value[lo:hi].tolist()))


def _variable_fields(rep: Instruction) -> tuple[tuple[tuple[int, str], ...], str | None, int]:
    """What `Program._make` replaces in a copy of a body's first instruction `rep`: ((j, name), ...) of
    its present access-pattern operands (j: the operand's place among the row's APKind operands, its
    ap_value row), the name of its SemOp operand (sem_wait's / sem_signal's) or None, and how many
    APKind operands the row has (its ap_value rows)."""
    patterns, sem = [], None
    j = 0
    for operand, _ in layout(rep.spec.opcode)[0]:
        value = rep.operands[operand.name]
        if isinstance(operand.kind, APKind):
            if value is not None:
                patterns.append((j, operand.name))
            j += 1
        elif isinstance(value, SemOp):
            sem = operand.name
    return tuple(patterns), sem, j


def _columns(words: np.ndarray, word_first: np.ndarray, name: str) -> tuple[np.ndarray, _Columns]:
    """(first, columns) of the streams in `words` (stream e is words[word_first[e]:word_first[e + 1]]),
    read by _read, a stream a call; a malformed header raises ObjectFileError naming its section and byte."""
    size = len(words)
    # an instruction is at least 2 words, a wait or a signal one, a pattern 7
    reader = _Reader(size // 2 + 1, size, size, size // 7 + 1, size // 7 + 1, _ptr_dtype(size))
    first = np.zeros(len(word_first), np.int64)
    for s in range(len(word_first) - 1):
        status, at = reader.feed(words, int(word_first[s]), int(word_first[s + 1]), s)
        if status:
            offset = int(at - word_first[s]) * 8
            if status == 2:
                code = int(words[at] >> np.uint64(8) & np.uint64(0xFF))
                other = ENGINES[code] if code < len(ENGINES) else f"code {code}"
                raise ObjectFileError(f".text.{ENGINES[s]} holds an instruction encoded for the {other} engine",
                                      file=f"{name} (.text.{ENGINES[s]})", offset=offset + 1)
            _raise_decode(words[word_first[s]:word_first[s + 1]].tobytes(), ENGINES[s], name, offset)
        first[s + 1] = reader.count
    return first, reader.columns()


def _position(words: np.ndarray, start: int, index: int) -> int:
    """The word of instruction `index` of the stream starting at word `start` (headers already checked)."""
    p = start
    for _ in range(index):
        p += int((words[p] >> np.uint64(32)) & np.uint64(0xFFFF)) // 8
    return p


def _raise_at(words: np.ndarray, word_first: np.ndarray, first: np.ndarray, p: int, k: int, name: str) -> None:
    """Raise the ObjectFileError of a malformed instruction k, at word p of `words` (decoding its stream
    says what is wrong, and at which byte of it)."""
    e = int(np.searchsorted(first, k, side="right") - 1)
    stream = words[word_first[e]:word_first[e + 1]].tobytes()
    _raise_decode(stream, ENGINES[e], name, int(p - word_first[e]) * 8)


def _raise_decode(stream: bytes, engine: str, file: str, pos: int = 0) -> None:
    """Decode `stream` from byte `pos` to raise the ObjectFileError that says what is wrong there."""
    where = f"{file} (.text.{engine})"
    while pos < len(stream):
        _, pos = decode_one(stream, pos, where)
    raise ObjectFileError(f"malformed instruction stream in .text.{engine}", file=file)


# --------------------------------------------------------------------------- tables of the encoding

@dataclass(frozen=True)
class _Tables:
    fixed_words: np.ndarray  # opcode -> words of header + fields (0: no such opcode)
    key_mask: np.ndarray  # [opcode, word]: the bits that make up a body
    ap_off: np.ndarray  # [opcode, j]: byte offset of the j-th access-pattern operand (-1: none)
    ap_access: np.ndarray  # [opcode, j]: ACCESS_READ | ACCESS_WRITE
    ap_count: np.ndarray  # opcode -> access-pattern operands
    sem_operand: np.ndarray  # opcode -> 1 for sem_wait (its cond is one more wait), 2 for sem_signal
    itemsize: np.ndarray  # dtype code -> bytes (0: no such dtype)


@cache
def _tables() -> _Tables:
    words = max(layout(row.opcode)[1] for row in isa.TABLE) // 8
    fixed = np.zeros(256, np.int64)
    mask = np.zeros((256, words), np.uint64)
    ap_off = np.full((256, _MAX_AP), -1, np.int64)
    ap_access = np.zeros((256, _MAX_AP), np.int64)
    ap_count = np.zeros(256, np.int64)
    sem_operand = np.zeros(256, np.int64)
    roles = {"in": ACCESS_READ, "out": ACCESS_WRITE, "inout": ACCESS_READ | ACCESS_WRITE}
    for row in isa.TABLE:
        placed, size = layout(row.opcode)
        fixed[row.opcode] = size // 8
        keep = np.full(size, 0xFF, np.uint8)
        keep[2:6] = 0  # semaphore counts and size: not part of the body
        for operand, off in placed:
            if isinstance(operand.kind, APKind):
                keep[off + 8:off + 16] = 0  # the byte offset (or a constant's bits): read per instruction
                j = ap_count[row.opcode]
                ap_off[row.opcode, j] = off
                ap_access[row.opcode, j] = roles[operand.role]
                ap_count[row.opcode] += 1
            elif isinstance(operand.kind, SemOneKind):
                keep[off:off + operand.kind.size] = 0
                sem_operand[row.opcode] = 1 if row.mnemonic == "sem_wait" else 2
        mask[row.opcode, :size // 8] = keep.view("<u8")
    itemsize = np.zeros(256, np.int64)
    for d in dtypes.DTYPES:
        itemsize[d.code] = d.itemsize
    return _Tables(fixed, mask, ap_off, ap_access, ap_count, sem_operand, itemsize)


# --------------------------------------------------------------------------- numba kernels

@numba.njit(cache=True)
def _encoded_sizes(ks, opcode, wptr, sptr, fixed_words, sem_operand, pos):
    """Where each of instructions ks starts (pos, in words) when they are encoded back to back; returns
    the words they take."""
    total = 0
    for i in range(ks.shape[0]):
        k = ks[i]
        pos[i] = total
        op = np.int64(opcode[k])
        extra = 1 if sem_operand[op] != 0 else 0
        total += fixed_words[op] + (wptr[k + 1] - wptr[k]) + (sptr[k + 1] - sptr[k]) - extra
    return total


@numba.njit(cache=True)
def _encode(ks, pos, words, opcode, body, body_words, body_pos, wptr, wsem, wop, wval, sptr, ssem, sop, sval, ap_ptr,
            ap_value, fixed_words, ap_off, sem_operand):
    """Instructions ks encoded from the columns into `words`, ks[i] at word pos[i] (the inverse of
    _read): each body's first instruction's fixed words, the header's counts and size, the patterns'
    values and sem_wait's / sem_signal's operand written in, then the waits and signals."""
    m = ks.shape[0]
    b = words.view(np.uint8)
    for i in range(m):
        k = ks[i]
        op = np.int64(opcode[k])
        fw = fixed_words[op]
        p = pos[i]
        q = body_pos[body[k]]
        for w in range(fw):
            words[p + w] = body_words[q + w]
        nw = wptr[k + 1] - wptr[k] - (1 if sem_operand[op] == 1 else 0)
        ns = sptr[k + 1] - sptr[k] - (1 if sem_operand[op] == 2 else 0)
        size = fw + nw + ns
        words[p] = ((words[p] & ~(np.uint64(0xFFFFFFFF) << np.uint64(16))) | (np.uint64(nw) << np.uint64(16))
                    | (np.uint64(ns) << np.uint64(24)) | (np.uint64(size * 8) << np.uint64(32)))
        for j in range(wptr[k + 1] - wptr[k]):
            r = wptr[k] + j
            w = (np.uint64(wsem[r] & 0xFF) | (np.uint64(wop[r] & 0xFF) << np.uint64(8))
                 | (np.uint64(wval[r] & 0xFFFFFFFF) << np.uint64(32)))
            if j < nw:
                words[p + fw + j] = w
            else:
                words[p + 1] = w  # sem_wait's condition
        for j in range(sptr[k + 1] - sptr[k]):
            r = sptr[k] + j
            w = (np.uint64(ssem[r] & 0xFF) | (np.uint64(sop[r] & 0xFF) << np.uint64(8))
                 | (np.uint64(sval[r] & 0xFFFFFFFF) << np.uint64(32)))
            if j < ns:
                words[p + fw + nw + j] = w
            else:
                words[p + 1] = w  # sem_signal's update
        a = ap_ptr[k]
        for j in range(ap_off.shape[1]):
            off = ap_off[op, j]
            if off < 0:
                break
            v = ap_value[a + j]
            o = p * 8 + off + 8
            for c in range(8):
                b[o + c] = np.uint8((v >> (8 * c)) & 0xFF)


@numba.njit(inline="always")
def _u16(b, o):
    return np.int64(b[o]) | (np.int64(b[o + 1]) << 8)


@numba.njit(inline="always")
def _u32(b, o):
    return _u16(b, o) | (_u16(b, o + 2) << 16)


@numba.njit(inline="always")
def _i32(b, o):
    v = _u32(b, o)
    return v - (np.int64(1) << 32) if v >= (np.int64(1) << 31) else v


@numba.njit(inline="always")
def _u64(words, o):
    """The little-endian 64-bit value at byte o of `words` (any alignment)."""
    w = o >> 3
    shift = np.uint64(8 * (o & 7))
    if shift == 0:
        return words[w]
    return (words[w] >> shift) | (words[w + 1] << (np.uint64(64) - shift))


@numba.njit(inline="always")
def _body_footprints(b, base, opcode, ap_off, itemsize, nb, bmem, bpart, bparts, blo, bhi):
    """Row nb of the bodies' pattern tables, from the first instruction of body nb at byte `base`: per
    pattern its memory code, first partition, partitions, and the bytes it reaches below and from its
    offset (the dimensions are the body's: only the offset varies)."""
    for j in range(ap_off.shape[1]):
        off = ap_off[opcode, j]
        if off < 0:
            break
        o = base + off
        mem = np.int64(b[o])
        bmem[nb, j] = mem
        if mem < 1 or mem > 3:
            continue
        isz = itemsize[b[o + 1]]
        lo = np.int64(0)
        hi = np.int64(0)
        for d in range(min(np.int64(b[o + 3]), np.int64(5))):
            reach = _i32(b, o + 16 + 8 * d) * (_u32(b, o + 20 + 8 * d) - 1)
            if reach < 0:
                lo += reach
            else:
                hi += reach
        bpart[nb, j] = b[o + 2]
        bparts[nb, j] = _u16(b, o + 4)
        blo[nb, j] = lo * isz
        bhi[nb, j] = (hi + 1) * isz


@numba.njit(inline="always")
def _hash(words, p, n, mask, opcode):
    h = np.uint64(14695981039346656037)
    for w in range(n):
        h ^= words[p + w] & mask[opcode, w]
        h *= np.uint64(1099511628211)
        h ^= h >> np.uint64(29)
    return h


@numba.njit(cache=True)
def _read(words, lo, end, e, opcodes, body, reps, rpos, wptr, wsem, wop, wval, sptr, ssem, sop, sval, fp_ptr,
          fmem, fpart, fparts, flo, fhi, facc, ap_ptr, ap_value, bmem, bpart, bparts, blo, bhi, rhash, table, mru, store,
          spos, st, fixed_words, key_mask, ap_off, ap_access, ap_count, sem_operand, itemsize):
    """One pass over words[lo:end], a piece of stream e: the
    instructions' headers checked, and their opcodes, bodies, semaphore lists, pattern values and
    footprints written into the columns given from the counts in `st` on (numpy's arrays, as long as
    the words bound them or exactly as long as the assembler knows they must be: what is not written is
    never touched, and is cut off after). Pieces are read one after the other, in program order (the
    streams in ENGINES order), with the same tables and `st`, so that a program can be read a block of
    words at a time without its words ever being whole in memory (`_Reader`).

    st holds the counts so far: [instructions, waits, signals, patterns, footprints, bodies, bad,
    store words]; bad is the first instruction whose semaphore entries or access-pattern offsets are
    malformed, or -1. Body b's first instruction is instruction reps[b], at word rpos[b] of the piece it
    came in, its words store[spos[b]:spos[b + 1]]; the bodies' hash table (`table`, 2 * cap slots of
    body numbers, `rhash` their hashes) and each opcode's recent bodies (`mru`) carry over from piece to
    piece. Per body and pattern, bmem.. hold its memory, partitions and byte range about its offset (the
    same for every instruction of the body, only offsets vary: worked out once, from its first).

    Returns (status, p): status 0 when the piece is read; 1 when the header at word p is malformed; 2
    when the instruction at p is encoded for another engine than e; 3 when the instruction at p would
    make a body the tables (cap = bmem.shape[0] rows, a power of 2) have no row for: nothing of it is
    written, and the caller reads on from p with larger tables (`_Reader._tables`); 4 when the columns
    have no room for the instruction at p (it is left half written: the caller's counts were wrong)."""
    b = words.view(np.uint8)
    cap = bmem.shape[0]
    size = table.shape[0]
    i, rw, rs, ra, rf, nb, bad, sw = st[0], st[1], st[2], st[3], st[4], st[5], st[6], st[7]
    status = 0
    p = lo
    while p < end:
        h = words[p]
        opcode = np.int64(h & np.uint64(0xFF))
        nw = np.int64((h >> np.uint64(16)) & np.uint64(0xFF))
        ns = np.int64((h >> np.uint64(24)) & np.uint64(0xFF))
        nbytes = np.int64((h >> np.uint64(32)) & np.uint64(0xFFFF))
        fw = fixed_words[opcode]
        if fw == 0 or nw > 8 or ns > 8 or nbytes != 8 * (fw + nw + ns) or p + nbytes // 8 > end:
            status = 1
            break
        if np.int64((h >> np.uint64(8)) & np.uint64(0xFF)) != e:
            status = 2  # encoded for another engine
            break
        extra_w = 1 if sem_operand[opcode] == 1 else 0
        extra_s = 1 if sem_operand[opcode] == 2 else 0
        if (i >= opcodes.shape[0] or rw + nw + extra_w > wsem.shape[0] or rs + ns + extra_s > ssem.shape[0]
                or ra + ap_count[opcode] > ap_value.shape[0]):
            status = 4  # the columns are full (the caller allocated them for fewer)
            break
        # The body: one of the last _MRU bodies of its opcode (a loop's instructions repeat a few), else
        # found in the hash table, or a new one.
        hit = -1
        for m in range(_MRU):
            c = mru[opcode, m]
            if c < 0:
                break
            q = spos[c]
            diff = np.uint64(0)  # no early exit: LLVM vectorises the loop (-15% of _read's time)
            for w in range(fw):
                diff |= (words[p + w] ^ store[q + w]) & key_mask[opcode, w]
            if diff == 0:
                hit = c
                for m2 in range(m, 0, -1):  # to the front
                    mru[opcode, m2] = mru[opcode, m2 - 1]
                mru[opcode, 0] = c
                break
        if hit < 0:
            key = _hash(words, p, fw, key_mask, opcode)
            slot = np.int64(key & np.uint64(size - 1))
            while True:
                c = table[slot]
                if c < 0:
                    break
                if rhash[c] == key:
                    q = spos[c]
                    diff = np.uint64(0)
                    for w in range(fw):
                        diff |= (words[p + w] ^ store[q + w]) & key_mask[opcode, w]
                    if diff == 0:
                        hit = c
                        break
                slot = (slot + 1) & (size - 1)
            if hit < 0:
                if nb == cap:  # the bodies' tables are full: the caller reads on from here with more
                    status = 3
                    break
                hit = nb
                reps[nb] = i
                rpos[nb] = p
                rhash[nb] = key
                table[slot] = nb
                for w in range(nbytes // 8):
                    store[sw + w] = words[p + w]
                spos[nb] = sw
                sw += nbytes // 8
                spos[nb + 1] = sw
                _body_footprints(b, p * 8, opcode, ap_off, itemsize, nb, bmem, bpart, bparts, blo, bhi)
                nb += 1
            for m2 in range(_MRU - 1, 0, -1):  # the front of its opcode's recent bodies
                mru[opcode, m2] = mru[opcode, m2 - 1]
            mru[opcode, 0] = hit
        opcodes[i] = opcode
        body[i] = hit
        # Waits, then signals: the tail entries, then sem_wait's condition / sem_signal's update.
        tail = p + fw
        for j in range(nw + extra_w):
            w = words[tail + j] if j < nw else words[p + 1]
            wsem[rw] = np.int64(w & np.uint64(0xFF))
            op = np.int64((w >> np.uint64(8)) & np.uint64(0xFF))
            wop[rw] = op  # int8: checked below, before anyone reads it
            wval[rw] = np.int64(w >> np.uint64(32))
            if (op > 1 or ((w >> np.uint64(16)) & np.uint64(0xFFFF)) != 0) and bad < 0:
                bad = i
            rw += 1
        for j in range(ns + extra_s):
            w = words[tail + nw + j] if j < ns else words[p + 1]
            ssem[rs] = np.int64(w & np.uint64(0xFF))
            op = np.int64((w >> np.uint64(8)) & np.uint64(0xFF))
            sop[rs] = op
            sval[rs] = np.int64(w >> np.uint64(32))
            if (op > 2 or ((w >> np.uint64(16)) & np.uint64(0xFFFF)) != 0) and bad < 0:
                bad = i
            rs += 1
        wptr[i + 1] = rw
        sptr[i + 1] = rs
        # Every access-pattern operand's value (offset or constant bits); footprints of those in memory.
        base = p * 8
        for j in range(ap_off.shape[1]):
            off = ap_off[opcode, j]
            if off < 0:
                break
            offset = np.int64(_u64(words, base + off + 8))
            ap_value[ra] = offset
            ra += 1
            mem = bmem[hit, j]
            if mem == 0:
                if offset != 0 and bad < 0:
                    bad = i
                continue
            if mem == 4:
                if (offset < 0 or offset >= (np.int64(1) << 32)) and bad < 0:
                    bad = i
                continue
            if mem > 4:
                continue  # the body's first instruction is decoded, and fails, before anyone looks
            if rf == fmem.shape[0]:
                status = 4
                break
            lo_ = offset + blo[hit, j]
            if (offset < 0 or lo_ < 0) and bad < 0:
                bad = i
            fmem[rf] = mem
            fpart[rf] = bpart[hit, j]
            fparts[rf] = bparts[hit, j]
            flo[rf] = lo_
            fhi[rf] = offset + bhi[hit, j]
            facc[rf] = ap_access[opcode, j]
            rf += 1
        if status == 4:
            break
        fp_ptr[i + 1] = rf
        ap_ptr[i + 1] = ra
        i += 1
        p += nbytes // 8
    st[0], st[1], st[2], st[3], st[4], st[5], st[6], st[7] = i, rw, rs, ra, rf, nb, bad, sw
    return status, p


@numba.njit(cache=True, _nrt=False)
def _rehash(rhash, nb, table):
    """The bodies' hash table made again for its new size (`_Reader._tables`): the same probing as _read's."""
    size = table.shape[0]
    for c in range(nb):
        slot = np.int64(rhash[c] & np.uint64(size - 1))
        while table[slot] >= 0:
            slot = (slot + 1) & (size - 1)
        table[slot] = c


__all__ = ["ACCESS_READ", "ACCESS_WRITE", "ENGINES", "Program"]
