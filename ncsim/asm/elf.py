"""The ncsim object file: an ELF64 relocatable object that `readelf -a` and pyelftools both read.

`write_elf` lays an `ObjectFile` out as below; `read_elf` reads it back and checks every rule, so a
corrupt or foreign file gives one `ObjectFileError` that says which rule it broke and at which byte.

ELF header
    ELF64 (EI_CLASS 2), little-endian (EI_DATA 1), EI_VERSION 1, ELFOSABI_NONE, ET_REL,
    EM_NONE, e_version 1, no program headers. The section header table comes last.

Sections, in this order (index in brackets). All integers are little-endian; every string is UTF-8
without NUL bytes, stored NUL-terminated in `.strtab` and named by its byte offset there.

    [1-5] .text.tensor .text.vector .text.scalar .text.gpsimd .text.sync
          SHT_PROGBITS, SHF_ALLOC|SHF_EXECINSTR, sh_addralign 8: the encoded instruction stream of
          each engine, in `ENGINES` order. Any of them may be empty.

    [6]   .ncsim.kernel   SHT_PROGBITS, 16 bytes, sh_link = .strtab:
              0  u32    format version (FORMAT_VERSION = 2; 1 had the operand layouts before NKI 2.27's
                        forms, and is refused with the version named)
              4  u8[4]  reserved, 0
              8  u32    kernel name (.strtab offset); not empty
             12  u32    reserved, 0

    [7]   .ncsim.tensors  SHT_PROGBITS, sh_entsize 56, sh_link = .strtab; one record per tensor:
              0  u32    name (.strtab offset); not empty
              4  u8     memory: 1 sbuf, 2 psum, 3 hbm (`ncsim.memory.access.Memory`)
              5  u8     dtype code (`ncsim.dtypes.DType.code`)
              6  u8     kind: index in TENSOR_KINDS (0 in, 1 out, 2 inout, 3 scratch, 4 tile)
              7  u8     ndim, 0..8
              8  u32    first partition (0 for HBM)
             12  u32    reserved, 0
             16  u64    address: byte offset inside each partition on chip, byte address in HBM
             24  u32[8] shape, outermost (the partition dimension on chip) first; dims past ndim are 0

    [8]   .ncsim.files    SHT_PROGBITS, sh_entsize 4, sh_link = .strtab: one u32 per source
          file, the .strtab offset of its name. A line entry's file index counts these records.

    [9]   .ncsim.lines    SHT_PROGBITS, sh_entsize 20: where each instruction came from.
              0  u8     engine: index in ENGINES (0 tensor, 1 vector, 2 scalar, 3 gpsimd, 4 sync)
              1  u8[3]  reserved, 0
              4  u32    instruction index within that engine's stream
              8  u32    file index into .ncsim.files
             12  u32    line (from 1)
             16  u32    column (from 1)
          Sorted by engine, then by strictly increasing instruction index.

    [10]  .symtab    SHT_SYMTAB, sh_entsize 24, sh_link = .strtab, sh_info = 1 (only the null
          symbol is local). For binutils and people; `read_elf` does not need it. Symbols:
              the null symbol;
              <kernel>           GLOBAL FUNC in .ncsim.kernel, value 0, size 16;
              <kernel>.<engine>  GLOBAL FUNC in .text.<engine>, value 0, size = stream bytes,
                                 for each non-empty stream, in ENGINES order;
              <tensor>           GLOBAL OBJECT, SHN_ABS, value = address, size = bytes, per tensor.
    [11]  .strtab    SHT_STRTAB: offset 0 is the empty string; each distinct string once, in
          order of first use.
    [12]  .shstrtab  SHT_STRTAB: the section names.

    [13]  .ncsim.gpsimd   SHT_PROGBITS, sh_link = .strtab; only in objects with GpSimd programs (`.gpsimd`
          sections of the source, docs/gpsimd.md), whose format version is then 3 (GPSIMD_VERSION); an
          object without programs has no such section and version 2, so its bytes did not change:
              0  u32    number of programs P
              4  P records of 16 bytes: u32 name (.strtab offset), u32 instructions N, u32 offset of the
                 code in this section, u32 offset of the source places in this section
                 then each program's code: N records of 16 bytes (`ncsim.gpsimd.code`: opcode u8, the
                 operands in table order, zeros) and its source places: N x (u32 file index, u32 line,
                 u32 column)

    [14]  .ncsim.sems     SHT_PROGBITS, sh_entsize 8, sh_link = .strtab; only in objects whose source
          names semaphores (`.sem NAME`), after .ncsim.gpsimd when both are present: one record per name,
              0  u32    semaphore number
              4  u32    name (.strtab offset); not empty, an identifier
          sorted by strictly increasing number, each name once. The names are for messages (a deadlock
          report names `ready`, not s0) and for the disassembler, which prints them as `.sem NAME @N`.
          It is optional and changes no other section, so the format version stays: an object without
          names has no such section and the same bytes as before, and a reader that does not know the
          section skips it and loses only the names, which never change what a program computes.

The reader finds sections by name, so other tools may add sections; it checks each section lies
inside the file, but it does not check how long an instruction is (the decoder does).
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import re
import struct
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numba
import numpy as np
from elftools.elf.elffile import ELFFile

from ncsim.asm.objfile import ENGINES, TENSOR_KINDS, LineEntry, LineTable, ObjectFile, TensorEntry
from ncsim.dtypes import by_code
from ncsim.errors import ObjectFileError
from ncsim.memory.access import Memory

FORMAT_VERSION = 2  # 2: operands in nki.isa's order of SDK 2.27 (issue 11); objects of version 1 are refused
GPSIMD_VERSION = 3  # 3: version 2 with a .ncsim.gpsimd section (GpSimd programs, issue 14)
GPSIMD_SECTION = ".ncsim.gpsimd"
SEMS_SECTION = ".ncsim.sems"  # optional: the source's semaphore names (no version change, see above)
_SEM_NAME = struct.Struct("<II")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # the assembler's names (ncsim.asm.lexer)
_PROGRAM = struct.Struct("<IIII")
_PLACE = struct.Struct("<III")
MAX_DIMS = 8
MEMORY_CODES: dict[str, int] = {m.label: int(m) for m in (Memory.SBUF, Memory.PSUM, Memory.HBM)}
_MEMORY_BY_CODE = {code: label for label, code in MEMORY_CODES.items()}

TEXT_SECTIONS: tuple[str, ...] = tuple(f".text.{e}" for e in ENGINES)
KERNEL_SECTION = ".ncsim.kernel"
TENSORS_SECTION = ".ncsim.tensors"
FILES_SECTION = ".ncsim.files"
LINES_SECTION = ".ncsim.lines"
SECTION_ORDER: tuple[str, ...] = TEXT_SECTIONS + (
    KERNEL_SECTION, TENSORS_SECTION, FILES_SECTION, LINES_SECTION, ".symtab", ".strtab", ".shstrtab",
)
_INDEX = {name: i + 1 for i, name in enumerate(SECTION_ORDER)}  # index 0 is the null section

# Record layouts (see the module docstring); '<' means little-endian with no padding.
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_KERNEL = struct.Struct("<I4sII")
_TENSOR = struct.Struct(f"<I4BIIQ{MAX_DIMS}I")
_FILE = struct.Struct("<I")
_LINE = struct.Struct("<B3sIIII")
_U32 = 2**32
_U64 = 2**64

_ELF_MAGIC = b"\x7fELF"
_ELFCLASS64, _ELFDATA2LSB, _EV_CURRENT, _ELFOSABI_NONE = 2, 1, 1, 0
_ET_REL, _EM_NONE = 1, 0
_SHT_PROGBITS, _SHT_SYMTAB, _SHT_STRTAB = 1, 2, 3
_SHF_ALLOC, _SHF_EXECINSTR, _SHF_COMPRESSED = 0x2, 0x4, 0x800
_STB_GLOBAL = 1
_STT_OBJECT, _STT_FUNC = 1, 2
_SHN_ABS = 0xFFF1


# ---------------------------------------------------------------------------------------------
# Writing


class Pieces:
    """Section data of a known size made in pieces as it is written (so that the whole of it is never
    in memory): `nbytes`, and `pieces()` gives buffers that add up to it."""

    def __init__(self, nbytes: int, pieces: Callable[[], Iterable[Any]]):
        self.nbytes = nbytes
        self.pieces = pieces

    def __len__(self) -> int:
        return self.nbytes


@dataclass(frozen=True)
class _Section:
    name: str
    type: int
    flags: int
    data: bytes | memoryview | Pieces
    addralign: int
    entsize: int = 0
    link: int = 0
    info: int = 0


class _StringTable:
    """An ELF string table: offset 0 is "", each distinct string stored once, in order of first use."""

    def __init__(self) -> None:
        self._data = bytearray(b"\0")
        self._offsets: dict[str, int] = {"": 0}

    def add(self, s: str, what: str) -> int:
        if "\0" in s:
            raise ValueError(f"{what} {s!r} contains a NUL character, which an ELF string table cannot hold")
        if s not in self._offsets:
            self._offsets[s] = len(self._data)
            self._data += s.encode("utf-8") + b"\0"
        return self._offsets[s]

    def data(self) -> bytes:
        return bytes(self._data)


def _check_range(value: int, limit: int, what: str) -> int:
    if not 0 <= value < limit:
        raise ValueError(f"{what} is {value}; the object file holds 0..{limit - 1}")
    return value


_LINE_RECORD = np.dtype([("engine", "u1"), ("reserved", "V3"), ("index", "<u4"), ("file", "<u4"), ("line", "<u4"),
                         ("col", "<u4")])


_LINES_AT_ONCE = 1 << 16  # line records of a long LineTable packed at a time, as they are written


def _table_part(table: LineTable, a: int) -> LineTable:
    """Entries a .. a + _LINES_AT_ONCE - 1 of `table`, as a LineTable of its columns' slices."""
    b = a + _LINES_AT_ONCE
    return LineTable(table.file[a:b], table.line[a:b], table.col[a:b])


def _line_table_ok(table: LineTable, nfiles: int, start: int = 0) -> bool:
    """Whether the entries of `table`, numbered from `start` on, keep the rules of a line record: a file
    among the `nfiles`, every field in 0 .. 2**32 - 1 (the numbers ascend by construction)."""
    if not len(table):
        return True
    columns = [np.asarray(c) for c in (table.file, table.line, table.col)]
    return (start + len(table) <= _U32 and all(int(c.min()) >= 0 and int(c.max()) < _U32 for c in columns)
            and int(columns[0].max()) < nfiles)


def _line_records(code: int, entries: Sequence[LineEntry], nfiles: int, start: int = 0) -> bytes | None:
    """The .ncsim.lines records of one stream (or of its entries from index `start` on, a LineTable's
    slice), packed by numpy; None when an entry breaks a rule (the caller's loop, one entry at a time,
    then says which and how)."""
    if isinstance(entries, LineTable):
        if not _line_table_ok(entries, nfiles, start):
            return None
        index = np.arange(start, start + len(entries), dtype=np.int64)
        file, line, col = entries.file, entries.line, entries.col
    else:
        try:
            table = np.array(entries, np.int64).reshape(-1, 4)
        except (OverflowError, ValueError, TypeError):
            return None
        index, file, line, col = table.T
        if (np.diff(index) <= 0).any() or (file >= nfiles).any() or (table < 0).any() or (table > _U32 - 1).any():
            return None
    out = np.zeros(len(index), _LINE_RECORD)
    out["engine"] = code
    out["index"], out["file"], out["line"], out["col"] = index, file, line, col
    return out.tobytes()


def write_elf(obj: ObjectFile) -> bytes:
    """The ELF object for `obj`, laid out as the module docstring says; the same object gives the same bytes.

    Raises ValueError if `obj` breaks an invariant the assembler guarantees (an unknown engine,
    memory or kind, a field too wide for its record, unsorted line entries).
    """
    out = io.BytesIO()
    write_elf_to(obj, out)
    return out.getvalue()


def write_elf_file(obj: ObjectFile, path: str | Path) -> int:
    """Write `obj`'s ELF object (`write_elf`'s bytes) to the file `path` without making them whole in
    memory: the streams are written from the object's buffers, or piece by piece where they are
    `Pieces` (a decoded program's, `write_program`); returns the bytes written.

    An existing regular file is replaced (the bytes go to a new file beside it, renamed over it when
    complete), not rewritten in place: a run that is loading it has it mapped (`mapped_object`) and
    keeps reading the old bytes, where a file cut short under a mapping would kill that process
    (SIGBUS). A new file, a link, a device or a pipe is written in place, as is a file whose directory
    takes no new file."""
    name = os.fspath(path)
    if os.path.isfile(name) and not os.path.islink(name):
        temp = os.path.join(os.path.dirname(name) or ".", f".{os.path.basename(name)}.{os.getpid()}.tmp")
        created = False
        try:
            with open(temp, "xb") as out:
                created = True
                size = write_elf_to(obj, out)
            os.chmod(temp, os.stat(name).st_mode & 0o7777)
            os.replace(temp, name)
            return size
        except BaseException as exc:
            if created:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
            if created or not isinstance(exc, OSError):
                raise
        # (the directory takes no new file: the file is written in place)
    with open(name, "wb") as out:
        return write_elf_to(obj, out)


def write_program(prog: Any, path: str | Path, block: int = 1 << 14) -> int:
    """Write the object of a decoded program (`ncsim.program.Program`) to the file `path`, its words made
    again (`Program.encoded`) `block` instructions at a time as they are written, and its line records
    _LINES_AT_ONCE at a time: the same bytes as write_elf(prog.to_object()), never more than a block of
    them in memory. Returns the bytes written."""
    obj = ObjectFile(kernel=prog.kernel, files=list(prog.files), tensors=list(prog.tensors), gpsimd=list(prog.gpsimd),
                     semaphores=dict(prog.semaphores))
    first = [int(f) for f in prog.first]
    for i, e in enumerate(ENGINES):
        lo, hi = first[i], first[i + 1]
        obj.lines[e] = LineTable(prog.src_file[lo:hi], prog.src_line[lo:hi], prog.src_col[lo:hi])
        starts = range(lo, hi, block)
        size = sum(prog.encoded_size(np.arange(a, min(a + block, hi), dtype=np.int64)) for a in starts)
        obj.streams[e] = Pieces(8 * size, lambda starts=starts, hi=hi: (
            prog.encoded(np.arange(a, min(a + block, hi), dtype=np.int64))[0] for a in starts))
    return write_elf_file(obj, path)


def _piece_bytes(data: bytes | memoryview | Pieces) -> Iterable[Any]:
    return data.pieces() if isinstance(data, Pieces) else (data,)


def write_elf_to(obj: ObjectFile, out: BinaryIO) -> int:
    """Write `obj`'s ELF object (`write_elf`'s bytes) to the binary file `out`, section by section;
    returns the bytes written."""
    unknown = sorted(set(obj.streams) - set(ENGINES)) + sorted(set(obj.lines) - set(ENGINES))
    if unknown:
        raise ValueError(f"unknown engine {unknown[0]!r}; the engines are {', '.join(ENGINES)}")
    if not obj.kernel:
        raise ValueError("the kernel has no name")
    streams = [s if isinstance(s, Pieces) else memoryview(s).cast("B") for s in (obj.streams.get(e, b"") for e in ENGINES)]

    strtab = _StringTable()
    kernel_name = strtab.add(obj.kernel, "kernel name")
    symbols = [_SYM.pack(0, 0, 0, 0, 0, 0)]
    symbols.append(_SYM.pack(kernel_name, _STB_GLOBAL << 4 | _STT_FUNC, 0, _INDEX[KERNEL_SECTION], 0, _KERNEL.size))
    for engine, section, stream in zip(ENGINES, TEXT_SECTIONS, streams):
        if stream:
            name = strtab.add(f"{obj.kernel}.{engine}", "stream symbol")
            symbols.append(_SYM.pack(name, _STB_GLOBAL << 4 | _STT_FUNC, 0, _INDEX[section], 0, len(stream)))

    tensors = bytearray()
    for i, t in enumerate(obj.tensors):
        what = f"tensor {i} ({t.name!r})"
        if not t.name:
            raise ValueError(f"tensor {i} has no name")
        if t.memory not in MEMORY_CODES:
            raise ValueError(f"{what}: memory {t.memory!r} is not one of {', '.join(MEMORY_CODES)}")
        if t.kind not in TENSOR_KINDS:
            raise ValueError(f"{what}: kind {t.kind!r} is not one of {', '.join(TENSOR_KINDS)}")
        if by_code(t.dtype.code) != t.dtype:
            raise ValueError(f"{what}: dtype {t.dtype} is not in ncsim.dtypes.DTYPES")
        if len(t.shape) > MAX_DIMS:
            raise ValueError(f"{what} has {len(t.shape)} dimensions; the object file holds up to {MAX_DIMS}")
        dims = [_check_range(d, _U32, f"{what} dimension {k}") for k, d in enumerate(t.shape)]
        name = strtab.add(t.name, "tensor name")
        tensors += _TENSOR.pack(
            name, MEMORY_CODES[t.memory], t.dtype.code, TENSOR_KINDS.index(t.kind), len(dims),
            _check_range(t.partition, _U32, f"{what} partition"), 0,
            _check_range(t.address, _U64, f"{what} address"), *dims, *[0] * (MAX_DIMS - len(dims)),
        )
        size = _check_range(t.nbytes, _U64, f"{what} size in bytes")
        symbols.append(_SYM.pack(name, _STB_GLOBAL << 4 | _STT_OBJECT, 0, _SHN_ABS, t.address, size))

    files = b"".join(_FILE.pack(strtab.add(f, "source file name")) for f in obj.files)

    lines: list[bytes | Pieces] = []
    for code, engine in enumerate(ENGINES):
        table = obj.lines.get(engine, [])
        if isinstance(table, LineTable) and len(table) > _LINES_AT_ONCE and _line_table_ok(table, len(obj.files)):
            lines.append(Pieces(_LINE.size * len(table), lambda code=code, table=table: (  # made as they are written
                _line_records(code, _table_part(table, a), len(obj.files), a) for a in range(0, len(table), _LINES_AT_ONCE))))
            continue
        fast = _line_records(code, table, len(obj.files))
        if fast is not None:
            lines.append(fast)
            continue
        previous = -1
        records = bytearray()
        for entry in obj.lines.get(engine, []):
            what = f"{engine} line entry for instruction {entry.index}"
            if entry.index <= previous:
                raise ValueError(f"{what} follows instruction {previous}: indices must increase")
            if not 0 <= entry.file < len(obj.files):
                raise ValueError(f"{what} names file {entry.file} but there are {len(obj.files)} files")
            records += _LINE.pack(
                code, b"\0\0\0", _check_range(entry.index, _U32, f"{what}: index"), entry.file,
                _check_range(entry.line, _U32, f"{what}: line"), _check_range(entry.col, _U32, f"{what}: col"),
            )
            previous = entry.index
        lines.append(bytes(records))
    lines_data = Pieces(sum(len(part) for part in lines),
                        lambda: (piece for part in lines for piece in _piece_bytes(part)))

    gpsimd = _gpsimd_section(obj, strtab)
    sems = _sems_section(obj, strtab)
    kernel = _KERNEL.pack(GPSIMD_VERSION if gpsimd else FORMAT_VERSION, b"\0\0\0\0", kernel_name, 0)
    strtab_index = _INDEX[".strtab"]
    sections = [
        _Section(name, _SHT_PROGBITS, _SHF_ALLOC | _SHF_EXECINSTR, stream, 8)
        for name, stream in zip(TEXT_SECTIONS, streams)
    ] + [
        _Section(KERNEL_SECTION, _SHT_PROGBITS, 0, kernel, 4, link=strtab_index),
        _Section(TENSORS_SECTION, _SHT_PROGBITS, 0, bytes(tensors), 8, _TENSOR.size, strtab_index),
        _Section(FILES_SECTION, _SHT_PROGBITS, 0, files, 4, _FILE.size, strtab_index),
        _Section(LINES_SECTION, _SHT_PROGBITS, 0, lines_data, 4, _LINE.size),
        _Section(".symtab", _SHT_SYMTAB, 0, b"".join(symbols), 8, _SYM.size, strtab_index, info=1),
        _Section(".strtab", _SHT_STRTAB, 0, strtab.data(), 1),
    ]
    shstrtab = _StringTable()
    names = [shstrtab.add(s.name, "section name") for s in sections]
    names.append(shstrtab.add(".shstrtab", "section name"))
    extra = [_Section(GPSIMD_SECTION, _SHT_PROGBITS, 0, gpsimd, 4, link=strtab_index)] if gpsimd else []
    if sems:
        extra.append(_Section(SEMS_SECTION, _SHT_PROGBITS, 0, sems, 4, _SEM_NAME.size, strtab_index))
    names += [shstrtab.add(s.name, "section name") for s in extra]
    sections.append(_Section(".shstrtab", _SHT_STRTAB, 0, shstrtab.data(), 1))
    assert [s.name for s in sections] == list(SECTION_ORDER)
    sections += extra

    # The layout first (every size is known), then the bytes in file order.
    at = _EHDR.size
    headers = [bytes(_SHDR.size)]
    places = []
    for name, s in zip(names, sections):
        at += -at % s.addralign
        places.append(at)
        headers.append(_SHDR.pack(
            name, s.type, s.flags, 0, at, len(s.data), s.link, s.info, s.addralign, s.entsize,
        ))
        at += len(s.data)
    shoff = at + (-at % 8)
    ident = _ELF_MAGIC + bytes([_ELFCLASS64, _ELFDATA2LSB, _EV_CURRENT, _ELFOSABI_NONE]) + bytes(8)
    written = out.write(_EHDR.pack(
        ident, _ET_REL, _EM_NONE, _EV_CURRENT, 0, 0, shoff, 0, _EHDR.size, 0, 0, _SHDR.size,
        len(headers), _INDEX[".shstrtab"],
    ))
    for place, s in zip(places, sections):
        written += out.write(bytes(place - written))
        for piece in _piece_bytes(s.data):
            written += out.write(piece)
        if written != place + len(s.data):
            raise AssertionError(f"section {s.name}: {written - place} bytes written for {len(s.data)}")
    written += out.write(bytes(shoff - written))
    return written + out.write(b"".join(headers))


def _gpsimd_section(obj: ObjectFile, strtab: _StringTable) -> bytes:
    """The .ncsim.gpsimd section's bytes (b"" for an object without GpSimd programs)."""
    if not obj.gpsimd:
        return b""
    head = bytearray(struct.pack("<I", len(obj.gpsimd)))
    tail = bytearray()
    at = 4 + _PROGRAM.size * len(obj.gpsimd)
    for p in obj.gpsimd:
        code = p.code()
        places = b"".join(_PLACE.pack(*place) for place in p.places)
        head += _PROGRAM.pack(strtab.add(p.name, "GpSimd program name"), len(p.instrs), at + len(tail),
                              at + len(tail) + len(code))
        tail += code + places
    return bytes(head + tail)


def _sems_section(obj: ObjectFile, strtab: _StringTable) -> bytes:
    """The .ncsim.sems section's bytes (b"" for an object whose source names no semaphore)."""
    out = bytearray()
    seen: set[str] = set()
    for number, name in sorted(obj.semaphores.items()):
        if not _IDENTIFIER.fullmatch(name) or name in seen:
            why = "given twice" if name in seen else "not an identifier"
            raise ValueError(f"semaphore {number}'s name {name!r} is {why}")
        seen.add(name)
        out += _SEM_NAME.pack(_check_range(number, _U32, f"semaphore {name!r}'s number"),
                              strtab.add(name, "semaphore name"))
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# Reading


@dataclass(frozen=True)
class _Found:
    """A section the reader needs: where its header and its bytes are."""

    name: str
    index: int
    header_at: int  # file offset of its section header
    offset: int  # file offset of its data
    type: str | int  # pyelftools' name for the type ("SHT_PROGBITS"), or the number if it has none
    entsize: int
    link: int
    data: bytes | memoryview  # a read-only view into the file's bytes for the sections in _VIEWED


_VIEWED = frozenset((*TEXT_SECTIONS, LINES_SECTION))


def _show(name: str) -> str:
    """A name read from a file, as a message shows it: as is if printable, else quoted and escaped."""
    return name if name and name.isprintable() else repr(name)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Stream:
    """A mapped file as pyelftools reads a stream, with BytesIO's rules: a position may lie past the end
    (a read there gives b""), not before the start (an absolute one there is refused, a relative one
    stops at the start). mmap's own seek refuses a position past the end, so a header field pointing
    there failed in pyelftools where the same bytes, read from the file, passed on to ncsim's checks."""

    def __init__(self, data: mmap.mmap):
        self.data = data
        self.pos = 0

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET and offset < 0:
            raise ValueError(f"negative seek value {offset}")
        base = 0 if whence == io.SEEK_SET else self.pos if whence == io.SEEK_CUR else len(self.data)
        if base + offset > sys.maxsize:
            raise OverflowError("Python int too large to convert to C ssize_t")  # as BytesIO's
        self.pos = max(base + offset, 0)  # (a relative seek before the start stops at it, as BytesIO's does)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, size: int | None = -1) -> bytes:
        if size is not None and size > sys.maxsize:
            raise OverflowError("cannot fit 'int' into an index-sized integer")  # as BytesIO's
        end = len(self.data) if size is None or size < 0 else min(self.pos + size, len(self.data))
        out = self.data[self.pos:end] if end > self.pos else b""
        self.pos = max(self.pos, end)
        return out


class _Reader:
    def __init__(self, data: bytes | mmap.mmap, filename: str):
        self.data = data
        self.view = memoryview(data)
        self.filename = filename

    def error(self, message: str, offset: int | None = None) -> ObjectFileError:
        return ObjectFileError(message, file=self.filename, offset=offset)

    @contextmanager
    def library(self, what: str, offset: int | None) -> Iterator[None]:
        """Turn any failure inside pyelftools into an ObjectFileError about `what`.

        pyelftools raises a wide, undocumented set of exceptions on corrupt input (ELFError,
        ELFParseError, struct.error, UnicodeDecodeError, IndexError, ValueError, ...), so only calls
        into it run under this, and everything it raises is reported as the file's fault.
        """
        try:
            yield
        except Exception as exc:
            raise self.error(f"{what}: {_one_line(exc)}", offset) from exc

    def read(self) -> ObjectFile:
        shoff, shnum, shstrndx = self.check_header()
        with self.library("cannot parse the ELF header", 0):
            # (BytesIO of a mapped file would copy it)
            elf = ELFFile(_Stream(self.data) if isinstance(self.data, mmap.mmap) else io.BytesIO(self.data))
        found = self.find_sections(elf, shoff, shnum, shstrndx)
        if KERNEL_SECTION not in found:
            raise self.error(f"this is an ELF object but not an ncsim object (no {KERNEL_SECTION} section)")
        for name in (*TEXT_SECTIONS, TENSORS_SECTION, FILES_SECTION, LINES_SECTION, ".strtab"):
            if name not in found:
                raise self.error(f"missing section {name}")
        for name in (*TEXT_SECTIONS, KERNEL_SECTION, TENSORS_SECTION, FILES_SECTION, LINES_SECTION):
            self.expect_type(found[name], "SHT_PROGBITS")
        self.expect_type(found[".strtab"], "SHT_STRTAB")
        strtab = found[".strtab"]

        kernel = self.read_kernel(found[KERNEL_SECTION], strtab)
        files = [
            self.string(strtab, off, f"file {i}", at)
            for i, (at, (off,)) in enumerate(self.records(found[FILES_SECTION], _FILE, "file name"))
        ]
        obj = ObjectFile(
            kernel=kernel,
            streams={e: found[s].data for e, s in zip(ENGINES, TEXT_SECTIONS)},
            lines=self.read_lines(found[LINES_SECTION], len(files)),
            files=files,
            tensors=self.read_tensors(found[TENSORS_SECTION], strtab),
        )
        version = struct.unpack_from("<I", found[KERNEL_SECTION].data)[0]
        if (version == GPSIMD_VERSION) != (GPSIMD_SECTION in found):
            raise self.error(f"format version {version} {'needs' if version == GPSIMD_VERSION else 'has no'}"
                             f" section {GPSIMD_SECTION}", found[KERNEL_SECTION].offset)
        if GPSIMD_SECTION in found:
            obj.gpsimd = self.read_gpsimd(found[GPSIMD_SECTION], strtab, files)
        if SEMS_SECTION in found:
            obj.semaphores = self.read_sems(found[SEMS_SECTION], strtab)
        return obj

    def read_sems(self, s: _Found, strtab: _Found) -> dict[int, str]:
        self.expect_type(s, "SHT_PROGBITS")
        names: dict[int, str] = {}
        previous = -1
        for i, (at, (number, name_off)) in enumerate(self.records(s, _SEM_NAME, "semaphore name")):
            name = self.string(strtab, name_off, f"semaphore name {i}", at + 4)
            if not _IDENTIFIER.fullmatch(name):
                raise self.error(f"semaphore name {i} ({_show(name)}, s{number}) is not an identifier", at + 4)
            if number <= previous:
                raise self.error(f"semaphore name {i} (s{number}) comes after s{previous}: the records must be"
                                 " sorted by strictly increasing semaphore number", at)
            names[number] = name
            previous = number
        seen: set[str] = set()
        for name in names.values():
            if name in seen:
                raise self.error(f"'{name}' names two semaphores in {s.name}", s.offset)
            seen.add(name)
        return names

    def read_gpsimd(self, s: _Found, strtab: _Found, files: list[str]) -> list:
        from ncsim.gpsimd.code import RECORD, CoreProgram

        self.expect_type(s, "SHT_PROGBITS")
        data = s.data
        if len(data) < 4:
            raise self.error(f"section {s.name} is truncated: {len(data)} bytes", s.offset)
        (count,) = struct.unpack_from("<I", data)
        if 4 + count * _PROGRAM.size > len(data):
            raise self.error(f"section {s.name} says {count} programs but holds {len(data)} bytes", s.offset)
        programs = []
        for i in range(count):
            at = 4 + i * _PROGRAM.size
            name_off, n, code_at, places_at = _PROGRAM.unpack_from(data, at)
            name = self.string(strtab, name_off, f"GpSimd program {i}", s.offset + at)
            if code_at + n * RECORD > len(data) or places_at + n * _PLACE.size > len(data):
                raise self.error(f"GpSimd program '{name}' ({n} instructions) runs past the end of {s.name}",
                                 s.offset + at)
            places = [_PLACE.unpack_from(data, places_at + k * _PLACE.size) for k in range(n)]
            for k, (f, _, _) in enumerate(places):
                if f >= len(files):
                    raise self.error(f"GpSimd program '{name}' instruction {k} names file {f} but there are"
                                     f" {len(files)} files", s.offset + places_at + k * _PLACE.size)
            programs.append(CoreProgram.from_code(name, i, data[code_at:code_at + n * RECORD], places, files,
                                                  self.filename))
        return programs

    def check_header(self) -> tuple[int, int, int]:
        """Check the ELF header field by field; give the section table's offset, count and .shstrtab index."""
        data = self.data
        if not data:
            raise self.error("empty file: an ncsim object is an ELF file, which starts with \\x7fELF", 0)
        if data[:4] != _ELF_MAGIC:
            shown = " ".join(f"{b:02x}" for b in data[:4])
            raise self.error(f"not an ELF file: the first 4 bytes are {shown}, not 7f 45 4c 46 (\\x7fELF)", 0)
        if len(data) >= 5 and data[4] != _ELFCLASS64:
            cls = {1: " (32-bit)"}.get(data[4], "")
            raise self.error(f"ELF class {data[4]}{cls} is not supported: ncsim objects are ELF64 (class 2)", 4)
        if len(data) >= 6 and data[5] != _ELFDATA2LSB:
            order = {2: " (big-endian)"}.get(data[5], "")
            raise self.error(
                f"ELF data encoding {data[5]}{order} is not supported: ncsim objects are little-endian (1)", 5
            )
        if len(data) < _EHDR.size:
            raise self.error(f"truncated ELF header: the file has {len(data)} bytes, the header needs 64", 0)
        (ident, e_type, e_machine, e_version, _entry, _phoff, shoff, _flags, ehsize, _phentsize, _phnum,
         shentsize, shnum, shstrndx) = _EHDR.unpack_from(data)
        checks = (
            (ident[6], _EV_CURRENT, 6, "EI_VERSION", "EV_CURRENT"),
            (ident[7], _ELFOSABI_NONE, 7, "EI_OSABI", "ELFOSABI_NONE"),
            (e_type, _ET_REL, 16, "e_type", "ET_REL, a relocatable object"),
            (e_machine, _EM_NONE, 18, "e_machine", "EM_NONE"),
            (e_version, _EV_CURRENT, 20, "e_version", "EV_CURRENT"),
            (ehsize, _EHDR.size, 52, "e_ehsize", "the size of an ELF64 header"),
            (shentsize, _SHDR.size, 58, "e_shentsize", "the size of an ELF64 section header"),
        )
        for got, want, offset, field, meaning in checks:
            if got != want:
                raise self.error(f"ELF header field {field} is {got}, expected {want} ({meaning})", offset)
        if shnum == 0:
            raise self.error("the ELF header says there are no sections (e_shnum 0)", 60)
        if shoff + shnum * _SHDR.size > len(data):
            raise self.error(
                f"the section header table ({shnum} headers at byte {shoff}) runs past the end of the file "
                f"({len(data)} bytes)", 40,
            )
        if not 0 < shstrndx < shnum:
            raise self.error(f"section name table index e_shstrndx is {shstrndx}, but there are {shnum} sections", 62)
        return shoff, shnum, shstrndx

    def section(self, elf: ELFFile, index: int, header_at: int, shstrtab: bytes | None) -> _Found | None:
        """Section `index`, bounds-checked and named (None for an SHT_NULL section)."""
        with self.library(f"cannot parse section header {index}", header_at):
            header = elf.get_section(index).header
        sh_type, offset, size = header["sh_type"], header["sh_offset"], header["sh_size"]
        if sh_type == "SHT_NULL":
            return None
        if sh_type == "SHT_NOBITS":  # occupies no bytes of the file, whatever sh_offset and sh_size say
            offset = size = 0
        if shstrtab is None:
            name = ".shstrtab"
        else:
            # A foreign section's name need not be UTF-8 (ours are ASCII): escape what is not.
            raw = self.raw_cstring(shstrtab, header["sh_name"], "section name table", f"section {index}'s name",
                                   header_at)
            name = raw.decode("utf-8", errors="backslashreplace")
        if header["sh_flags"] & _SHF_COMPRESSED:
            raise self.error(f"section {index} ({_show(name)}) is compressed (SHF_COMPRESSED); ncsim never compresses",
                             header_at + 8)
        if offset + size > len(self.data):
            raise self.error(
                f"section {index} ({_show(name)}) runs past the end of the file: bytes {offset}..{offset + size} "
                f"but the file has {len(self.data)} bytes", header_at + 24,
            )
        # The instruction streams and the line table (most of a large object's bytes) are views into the
        # file's bytes, not copies; the other sections are small and read as bytes.
        data = self.view[offset: offset + size] if name in _VIEWED else self.data[offset: offset + size]
        return _Found(name, index, header_at, offset, sh_type, header["sh_entsize"], header["sh_link"], data)

    def find_sections(self, elf: ELFFile, shoff: int, shnum: int, shstrndx: int) -> dict[str, _Found]:
        shstrtab = self.section(elf, shstrndx, shoff + shstrndx * _SHDR.size, None)
        if shstrtab is None or shstrtab.type != "SHT_STRTAB":
            raise self.error(f"section {shstrndx}, named by e_shstrndx, is not a string table (SHT_STRTAB)",
                             shoff + shstrndx * _SHDR.size + 4)
        wanted = {*SECTION_ORDER, GPSIMD_SECTION, SEMS_SECTION}
        found: dict[str, _Found] = {}
        for index in range(shnum):
            s = self.section(elf, index, shoff + index * _SHDR.size, shstrtab.data)
            if s is None or s.name not in wanted:
                continue
            if s.name in found:
                raise self.error(f"section {s.name} appears twice (sections {found[s.name].index} and {index})",
                                 s.header_at)
            found[s.name] = s
        return found

    def expect_type(self, s: _Found, want: str) -> None:
        if s.type != want:
            raise self.error(f"section {s.name} has type {s.type}, expected {want}", s.header_at + 4)

    def records(self, s: _Found, layout: struct.Struct, what: str) -> Iterator[tuple[int, tuple]]:
        """(file offset, fields) of each fixed-size record of section `s`."""
        if s.entsize != layout.size:
            raise self.error(
                f"section {s.name} has sh_entsize {s.entsize}, but a {what} record is {layout.size} bytes",
                s.header_at + 56,
            )
        if len(s.data) % layout.size:
            raise self.error(
                f"section {s.name} is truncated: {len(s.data)} bytes is not a multiple of the "
                f"{layout.size}-byte {what} record", s.header_at + 32,
            )
        for k, fields in enumerate(layout.iter_unpack(s.data)):
            yield s.offset + k * layout.size, fields

    def raw_cstring(self, table: bytes, off: int, table_name: str, what: str, at: int) -> bytes:
        """The NUL-terminated string at byte `off` of `table`; `at` is where `off` was read from."""
        if off >= len(table):
            raise self.error(f"{what} is at offset {off} of the {table_name}, which has only {len(table)} bytes",
                             at)
        end = table.find(b"\0", off)
        if end < 0:
            raise self.error(f"{what} at offset {off} of the {table_name} has no terminating NUL byte", at)
        return table[off:end]

    def cstring(self, table: bytes, off: int, table_name: str, what: str, at: int) -> str:
        """The NUL-terminated UTF-8 string at byte `off` of `table`; `at` is where `off` was read from."""
        raw = self.raw_cstring(table, off, table_name, what, at)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.error(f"{what} at offset {off} of the {table_name} is not valid UTF-8", at) from None

    def string(self, strtab: _Found, off: int, what: str, at: int) -> str:
        return self.cstring(strtab.data, off, "string table .strtab", f"the name of {what}", at)

    def read_kernel(self, s: _Found, strtab: _Found) -> str:
        if len(s.data) >= 4:
            (version,) = struct.unpack_from("<I", s.data)
            if version not in (FORMAT_VERSION, GPSIMD_VERSION):
                raise self.error(
                    f"object format version {version} is not supported (this ncsim reads versions "
                    f"{FORMAT_VERSION} and {GPSIMD_VERSION})", s.offset,
                )
        if len(s.data) != _KERNEL.size:
            raise self.error(f"section {s.name} is {len(s.data)} bytes; the kernel header is {_KERNEL.size}",
                             s.header_at + 32)
        _version, reserved, name, reserved2 = _KERNEL.unpack(s.data)
        if reserved != b"\0\0\0\0":
            raise self.error(f"the reserved bytes 4..7 of {s.name} are not zero", s.offset + 4)
        if reserved2:
            raise self.error(f"the reserved field at byte 12 of {s.name} is {reserved2}, not 0", s.offset + 12)
        kernel = self.string(strtab, name, "the kernel", s.offset + 8)
        if not kernel:
            raise self.error("the kernel name is empty", s.offset + 8)
        return kernel

    def read_tensors(self, s: _Found, strtab: _Found) -> list[TensorEntry]:
        tensors = []
        for i, (at, fields) in enumerate(self.records(s, _TENSOR, "tensor")):
            name_off, memory, dtype_code, kind, ndim, partition, reserved, address, *dims = fields
            name = self.string(strtab, name_off, f"tensor {i}", at)
            if not name:
                raise self.error(f"tensor {i} has an empty name", at)
            what = f"tensor {i} ({_show(name)})"
            if memory not in _MEMORY_BY_CODE:
                codes = ", ".join(f"{c} ({m})" for m, c in MEMORY_CODES.items())
                raise self.error(f"{what} names memory code {memory}, which is none of {codes}", at + 4)
            dtype = by_code(dtype_code)
            if dtype is None:
                raise self.error(f"{what} names dtype code {dtype_code}, which is no dtype", at + 5)
            if kind >= len(TENSOR_KINDS):
                raise self.error(
                    f"{what} names kind code {kind}; kinds are 0..{len(TENSOR_KINDS) - 1} "
                    f"({', '.join(TENSOR_KINDS)})", at + 6,
                )
            if ndim > MAX_DIMS:
                raise self.error(f"{what} has {ndim} dimensions; at most {MAX_DIMS} fit in a record", at + 7)
            if reserved:
                raise self.error(f"{what}: the reserved field is {reserved}, not 0", at + 12)
            extra = next((k for k in range(ndim, MAX_DIMS) if dims[k]), None)
            if extra is not None:
                raise self.error(f"{what} has {ndim} dimensions but dimension slot {extra} is {dims[extra]}, not 0",
                                 at + 24 + 4 * extra)
            tensors.append(TensorEntry(name, _MEMORY_BY_CODE[memory], dtype, tuple(dims[:ndim]), partition,
                                       address, TENSOR_KINDS[kind]))
        return tensors

    def read_lines_fast(self, s: _Found, nfiles: int) -> dict[str, Sequence[LineEntry]] | None:
        """The line table read by numpy, as LineTables (lists where a stream's entries do not number its
        instructions 0, 1, ...); None when anything is off (read_lines' loop then says what)."""
        if s.entsize != _LINE.size or len(s.data) % _LINE.size:
            return None
        rows = np.frombuffer(s.data, "<u4").reshape(-1, _LINE.size // 4)
        n = len(rows)
        file, line, col = np.empty(n, np.int32), np.empty(n, np.uint32), np.empty(n, np.uint32)
        bounds = np.zeros(len(ENGINES) + 1, np.int64)
        if rows.flags.aligned and _line_columns(rows, len(ENGINES), nfiles, file, line, col, bounds):
            # every stream's entries number its instructions 0, 1, ...: columns, in one pass
            return {e: LineTable(file[bounds[k]:bounds[k + 1]], line[bounds[k]:bounds[k + 1]],
                                 col[bounds[k]:bounds[k + 1]]) for k, e in enumerate(ENGINES)}
        table = np.frombuffer(s.data, _LINE_RECORD)
        engine = table["engine"].astype(np.int64)
        order = engine * 2**32 + table["index"].astype(np.int64)
        if ((engine >= len(ENGINES)).any() or (table["reserved"] != np.void(b"\0\0\0")).any()
                or (np.diff(order) <= 0).any() or (table["file"] >= nfiles).any()):
            return None
        bounds = np.searchsorted(engine, np.arange(len(ENGINES) + 1))
        out: dict[str, Sequence[LineEntry]] = {}
        for k, e in enumerate(ENGINES):
            part = table[bounds[k]:bounds[k + 1]]
            if np.array_equal(part["index"], np.arange(len(part))):
                out[e] = LineTable(part["file"].astype(np.int32), part["line"].copy(), part["col"].copy())
            else:
                out[e] = list(map(LineEntry._make, zip(*(part[c].tolist() for c in ("index", "file", "line", "col")))))
        return out

    def read_lines(self, s: _Found, nfiles: int) -> dict[str, Sequence[LineEntry]]:
        fast = self.read_lines_fast(s, nfiles)
        if fast is not None:
            return fast
        lines: dict[str, list[LineEntry]] = {e: [] for e in ENGINES}
        previous: tuple[int, int] | None = None
        for i, (at, (engine, reserved, index, file, line, col)) in enumerate(self.records(s, _LINE, "line")):
            if engine >= len(ENGINES):
                raise self.error(
                    f"line entry {i} names engine code {engine}; engines are 0..{len(ENGINES) - 1} "
                    f"({', '.join(ENGINES)})", at,
                )
            if reserved != b"\0\0\0":
                raise self.error(f"line entry {i}: the reserved bytes are not zero", at + 1)
            if previous is not None and (engine, index) <= previous:
                before = f"{ENGINES[previous[0]]} instruction {previous[1]}"
                raise self.error(
                    f"line entry {i} ({ENGINES[engine]} instruction {index}) comes after line entry {i - 1} "
                    f"({before}): entries must be sorted by engine, then by increasing instruction index", at,
                )
            if file >= nfiles:
                raise self.error(f"line entry {i} names file {file} but there are {nfiles} files", at + 8)
            lines[ENGINES[engine]].append(LineEntry(index, file, line, col))
            previous = (engine, index)
        return lines


@numba.njit(cache=True)
def _line_columns(rows, n_engines, nfiles, file, line, col, bounds):
    """The line table's records (_LINE, as rows of five little-endian u32: engine and the reserved
    bytes, index, file, line, col) into the columns file, line and col, and bounds[e] where engine e's
    entries start. True when every record is well formed and each engine's entries number its
    instructions 0, 1, ... in order; else False (read_lines_fast's numpy path and read_lines' loop then
    say what is off)."""
    n = rows.shape[0]
    engine = 0
    expect = 0
    bounds[0] = 0
    for i in range(n):
        e = np.int64(rows[i, 0])  # the reserved bytes above the engine's are zero
        if e >= n_engines or e < engine:
            return False
        while engine < e:
            engine += 1
            bounds[engine] = i
            expect = 0
        f = rows[i, 2]
        if rows[i, 1] != expect or f >= nfiles:
            return False
        expect += 1
        file[i] = f
        line[i] = rows[i, 3]
        col[i] = rows[i, 4]
    while engine < n_engines:
        engine += 1
        bounds[engine] = n
    return True


def read_elf(data: bytes, filename: str) -> ObjectFile:
    """The ObjectFile in `data`, the bytes of the file `filename` (used in error messages). Its streams
    are read-only memoryviews into (a bytes copy of) `data`, which they keep alive.

    Raises ObjectFileError, naming the broken rule and the byte offset, for anything that is not a
    well-formed ncsim object; nothing else.
    """
    return _Reader(bytes(data), filename).read()


def load_object(path: str | os.PathLike[str]) -> ObjectFile:
    """Read the ncsim object file at `path` (its bytes read into memory: the ObjectFile may be kept)."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ObjectFileError(f"cannot read the object file: {exc.strerror or exc}", file=name) from exc
    return read_elf(data, name)


@contextmanager
def mapped_object(path: str | os.PathLike[str]) -> Iterator[ObjectFile]:
    """The ncsim object file at `path`, for the `with` block, its instruction streams and line table
    read-only views into the file mapped into memory (mmap) rather than read: the pages of the
    system's file cache serve as they are, where reading copies them into fresh pages of the process.
    tools/bench_pipeline.py's 10^6-instruction object (201 MB), read: 0.15-0.19 s and 49,100 page
    faults; mapped and read through once: 0.03 s and 440 (the 2-core machine, 2026-11-28).

    For decoding and dropping (`ncsim.runtime.run.load_program`: Program.from_object keeps neither the
    ObjectFile nor views of it), not for keeping: the mapping is closed when the block ends if nothing
    refers to it any more, else when the last view goes. The file must not be cut short while it is
    mapped (a read past its new end kills the process with SIGBUS); ncsim replaces an object it
    writes (`write_elf_file`) rather than rewriting it in place. A file that cannot be mapped (empty,
    a pipe, a device) is read as `load_object` reads it."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            try:
                data: bytes | mmap.mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):  # empty, or not a file that can be mapped
                data = f.read()
    except OSError as exc:
        raise ObjectFileError(f"cannot read the object file: {exc.strerror or exc}", file=name) from exc
    try:
        yield _Reader(data, name).read()
    finally:
        if isinstance(data, mmap.mmap):
            with contextlib.suppress(BufferError):  # a view is still alive: it keeps the mapping until it goes
                data.close()
