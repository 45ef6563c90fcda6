"""The ELF object file: round trips, binutils reads it cleanly, and bad bytes give one clear error."""

from __future__ import annotations

import dataclasses
import io
import mmap
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ncsim.asm import elf
from ncsim.asm.elf import (
    FILES_SECTION,
    KERNEL_SECTION,
    LINES_SECTION,
    MAX_DIMS,
    MEMORY_CODES,
    SECTION_ORDER,
    SEMS_SECTION,
    TENSORS_SECTION,
    load_object,
    mapped_object,
    read_elf,
    write_elf,
    write_elf_file,
)
from ncsim.asm.objfile import ENGINES, TENSOR_KINDS, LineEntry, ObjectFile, TensorEntry
from ncsim.dtypes import BFLOAT16, DTYPES, FLOAT32, INT32
from ncsim.errors import ObjectFileError

READELF = shutil.which("readelf")
needs_readelf = pytest.mark.skipif(READELF is None, reason="binutils readelf is not installed")

# --- strategies -------------------------------------------------------------------------------

identifiers = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,30}", fullmatch=True)
# Any text an ELF string table can hold: no NUL, no lone surrogates (not encodable as UTF-8).
file_names = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\0"), max_size=24)
streams = st.integers(0, 6).flatmap(lambda n: st.binary(min_size=8 * n, max_size=8 * n))


@st.composite
def tensors(draw: st.DrawFn) -> TensorEntry:
    dtype = draw(st.sampled_from(DTYPES))
    # Keep the size in bytes below 2**64 (it is the symbol's st_size): each dimension may use what
    # the ones before it left of the budget.
    budget = 2**64 // dtype.itemsize - 1
    shape = []
    for _ in range(draw(st.integers(0, MAX_DIMS))):
        d = draw(st.integers(0, min(2**32 - 1, budget)))
        budget //= max(d, 1)
        shape.append(d)
    return TensorEntry(
        name=draw(identifiers),
        memory=draw(st.sampled_from(sorted(MEMORY_CODES))),
        dtype=dtype,
        shape=tuple(shape),
        partition=draw(st.integers(0, 2**32 - 1)),
        address=draw(st.integers(0, 2**64 - 1)),
        kind=draw(st.sampled_from(TENSOR_KINDS)),
    )


@st.composite
def object_files(draw: st.DrawFn) -> ObjectFile:
    files = draw(st.lists(file_names, max_size=4))
    lines: dict[str, list[LineEntry]] = {e: [] for e in ENGINES}
    if files:
        u32 = st.integers(0, 2**32 - 1)
        for engine in ENGINES:
            for index in sorted(draw(st.sets(u32, max_size=5))):
                file = draw(st.integers(0, len(files) - 1))
                lines[engine].append(LineEntry(index, file, draw(u32), draw(u32)))
    return ObjectFile(
        kernel=draw(identifiers),
        streams={e: draw(streams) for e in ENGINES},
        lines=lines,
        files=files,
        tensors=draw(st.lists(tensors(), max_size=5)),
        semaphores=draw(st.dictionaries(st.integers(0, 2**32 - 1), identifiers, max_size=4)
                        .filter(lambda d: len(set(d.values())) == len(d))),
    )


def sample() -> ObjectFile:
    """A small object with something in every table, and an empty stream or two."""
    return ObjectFile(
        kernel="matmul_relu",
        streams={"tensor": bytes(range(16)), "vector": b"\xaa" * 8, "scalar": b"", "gpsimd": b"",
                 "sync": bytes(range(100, 124))},
        lines={"tensor": [LineEntry(0, 0, 3, 5), LineEntry(1, 1, 7, 1)], "vector": [LineEntry(0, 0, 9, 3)],
               "scalar": [], "gpsimd": [], "sync": [LineEntry(0, 0, 1, 1), LineEntry(2, 0, 2, 1)]},
        files=["matmul.s", "common.inc"],
        tensors=[
            TensorEntry("a", "hbm", FLOAT32, (128, 512), 0, 0x1000, "in"),
            TensorEntry("result", "hbm", BFLOAT16, (128, 512), 0, 0x41000, "out"),
            TensorEntry("acc", "psum", FLOAT32, (128, 512), 0, 0, "tile"),
            TensorEntry("idx", "sbuf", INT32, (64, 4), 64, 2048, "tile"),
        ],
    )


SAMPLE = write_elf(sample())


def section(data: bytes, name: str) -> tuple[int, int]:
    """(file offset of the section header, file offset of the data) of section `name` in `data`."""
    shoff = struct.unpack_from("<Q", data, 40)[0]
    index = SECTION_ORDER.index(name) + 1
    header_at = shoff + 64 * index
    return header_at, struct.unpack_from("<Q", data, header_at + 24)[0]


def patched(data: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


# up to six bytes of SAMPLE, each set to any value
MUTATIONS = st.lists(st.tuples(st.integers(0, len(SAMPLE) - 1), st.integers(0, 255)), min_size=1, max_size=6)


def mutated(mutations: list[tuple[int, int]]) -> bytes:
    data = bytearray(SAMPLE)
    for at, value in mutations:
        data[at] = value
    return bytes(data)


def read_error(data: bytes, filename: str = "bad.o") -> ObjectFileError:
    """The ObjectFileError reading `data` gives, after checking it formats to one line naming the file."""
    with pytest.raises(ObjectFileError) as info:
        read_elf(data, filename)
    err = info.value
    text = err.format()
    assert text.startswith(f"{filename}: ") and "\n" not in text, text
    assert err.file == filename
    return err


def read_or_error(data: bytes) -> None:
    """Reading `data` either succeeds or raises ObjectFileError; anything else fails the test."""
    try:
        read_elf(data, "mutant.o")
    except ObjectFileError as err:
        text = err.format()
        assert text.startswith("mutant.o: ") and "\n" not in text, text


# --- round trip ---------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(object_files())
def test_round_trip(obj: ObjectFile) -> None:
    data = write_elf(obj)
    assert write_elf(obj) == data
    assert read_elf(data, "k.o") == obj


def test_round_trip_sample_and_minimal() -> None:
    assert read_elf(SAMPLE, "k.o") == sample()
    assert read_elf(write_elf(ObjectFile("k")), "k.o") == ObjectFile("k")


def test_load_object(tmp_path: Path) -> None:
    path = tmp_path / "k.o"
    path.write_bytes(SAMPLE)
    assert load_object(path) == sample()
    missing = tmp_path / "missing.o"
    with pytest.raises(ObjectFileError) as info:
        load_object(missing)
    assert info.value.format().startswith(f"{missing}: error: cannot read the object file")


def mapped_or_error(path: Path) -> ObjectFile | str:
    """What mapped_object gives for the file at `path`: the object, or the error's text."""
    try:
        with mapped_object(path) as obj:
            return dataclasses.replace(obj, streams={e: bytes(v) for e, v in obj.streams.items()})
    except ObjectFileError as err:
        return err.format()


def loaded_or_error(path: Path) -> ObjectFile | str:
    try:
        return load_object(path)
    except ObjectFileError as err:
        return err.format()


def test_a_mapped_object_is_the_object_read(tmp_path: Path) -> None:
    path = tmp_path / "k.o"
    for data in (SAMPLE, write_elf(ObjectFile("k")), write_elf(named_sample()), b"", b"\x7fEL", SAMPLE[:100]):
        path.write_bytes(data)
        assert mapped_or_error(path) == loaded_or_error(path)
    assert mapped_or_error(tmp_path / "missing.o") == loaded_or_error(tmp_path / "missing.o")
    path.write_bytes(b"")  # (a file that cannot be mapped is read)
    assert "empty file" in str(mapped_or_error(path))


@settings(max_examples=60, deadline=None)
@given(MUTATIONS)
@example([(937, 4)])  # section 0's offset far past the end: mmap's own seek refused it (found on a clean clone)
def test_a_mapped_mutant_reads_as_the_bytes_do(mutations: list[tuple[int, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mutant.o"
        path.write_bytes(mutated(mutations))
        assert mapped_or_error(path) == loaded_or_error(path)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["seek", "read", "tell"]),
                          st.integers(-50, 3 * len(SAMPLE)) | st.sampled_from([2**63 - 1, 2**63, 2**64]),
                          st.sampled_from([io.SEEK_SET, io.SEEK_CUR, io.SEEK_END])), max_size=12))
def test_the_mapped_stream_moves_as_bytesio_does(ops: list[tuple[str, int, int]]) -> None:
    """What pyelftools reads a mapped file through (elf._Stream) answers every seek, read and tell as
    BytesIO of the same bytes does, past the end and before the start included."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.o"
        path.write_bytes(SAMPLE)
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            mapped, plain = elf._Stream(m), io.BytesIO(SAMPLE)
            for op, n, whence in ops:
                if op == "tell":
                    assert mapped.tell() == plain.tell()
                else:
                    answers = []
                    for stream in (mapped, plain):
                        try:
                            answers.append(stream.read(n) if op == "read" else stream.seek(n, whence))
                        except (ValueError, OverflowError) as e:
                            answers.append(type(e).__name__)
                    assert answers[0] == answers[1]
            assert mapped.read() == plain.read()


def test_an_object_file_is_replaced_not_rewritten(tmp_path: Path) -> None:
    """write_elf_file puts a new file in place of an existing one (a run that has the old one mapped
    keeps reading its bytes), with the old one's permissions; a failed write leaves the old file."""
    path = tmp_path / "k.o"
    write_elf_file(ObjectFile("k"), path)
    path.chmod(0o640)
    before = path.stat().st_ino
    with path.open("rb") as old:
        write_elf_file(sample(), path)
        assert old.read() == write_elf(ObjectFile("k"))  # the old file, still open, is untouched
    assert path.read_bytes() == SAMPLE and path.stat().st_ino != before
    assert path.stat().st_mode & 0o777 == 0o640
    bad = sample()
    bad.files.append("a\0b")
    with pytest.raises(ValueError, match="NUL"):
        write_elf_file(bad, path)
    assert path.read_bytes() == SAMPLE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.o"]  # no temporary file left
    link = tmp_path / "link.o"
    link.symlink_to(path)
    write_elf_file(ObjectFile("k"), link)  # through the link, which stays one
    assert link.is_symlink() and path.read_bytes() == write_elf(ObjectFile("k"))


def test_pyelftools_sees_the_symbols() -> None:
    elf = ELFFile(io.BytesIO(SAMPLE))
    symbols = {s.name: s for s in elf.get_section_by_name(".symtab").iter_symbols()}
    assert symbols["matmul_relu"]["st_info"]["type"] == "STT_FUNC"
    stream = symbols["matmul_relu.sync"]
    assert stream["st_size"] == 24 and elf.get_section(stream["st_shndx"]).name == ".text.sync"
    assert "matmul_relu.scalar" not in symbols  # empty streams get no symbol
    result = symbols["result"]
    assert result["st_info"]["type"] == "STT_OBJECT" and result["st_shndx"] == "SHN_ABS"
    assert (result["st_value"], result["st_size"]) == (0x41000, 128 * 512 * 2)


def test_write_rejects_what_the_format_cannot_hold() -> None:
    obj = sample()
    obj.tensors.append(TensorEntry("big", "hbm", FLOAT32, (1,) * 9, 0, 0, "in"))
    with pytest.raises(ValueError, match="9 dimensions"):
        write_elf(obj)
    obj = sample()
    obj.lines["tensor"].reverse()
    with pytest.raises(ValueError, match="indices must increase"):
        write_elf(obj)
    with pytest.raises(ValueError, match="NUL"):
        write_elf(ObjectFile("k", files=["a\0b"]))


# --- semaphore names (.ncsim.sems) ----------------------------------------------------------------


def named_sample() -> ObjectFile:
    obj = sample()
    obj.semaphores = {7: "done", 1: "ready"}
    return obj


def sems_section(data: bytes) -> tuple[int, int]:
    """(file offset of the header, file offset of the data) of .ncsim.sems, found by name."""
    elf = ELFFile(io.BytesIO(data))
    index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == SEMS_SECTION)
    header_at = struct.unpack_from("<Q", data, 40)[0] + 64 * index
    return header_at, struct.unpack_from("<Q", data, header_at + 24)[0]


def test_semaphore_names_round_trip_in_their_own_section() -> None:
    data = write_elf(named_sample())
    assert read_elf(data, "k.o").semaphores == {1: "ready", 7: "done"}
    _, at = sems_section(data)
    strtab = ELFFile(io.BytesIO(data)).get_section_by_name(".strtab")
    (n0, off0), (n1, off1) = struct.iter_unpack("<II", data[at:at + 16])
    assert (n0, strtab.get_string(off0), n1, strtab.get_string(off1)) == (1, "ready", 7, "done")
    # Without names there is no such section, and the bytes are those of an object before it existed.
    assert SEMS_SECTION.encode() not in SAMPLE
    assert ELFFile(io.BytesIO(SAMPLE)).num_sections() == len(SECTION_ORDER) + 1


def test_bad_semaphore_name_records() -> None:
    data = write_elf(named_sample())
    header_at, at = sems_section(data)
    err = read_error(patched(data, at, "<I", 9))  # s9 before s7
    assert err.message == ("semaphore name 1 (s7) comes after s9: the records must be sorted by strictly"
                           " increasing semaphore number") and err.offset == at + 8
    _, off_done = struct.unpack_from("<II", data, at + 8)
    err = read_error(patched(data, at + 4, "<I", off_done))
    assert err.message == "'done' names two semaphores in .ncsim.sems"
    strtab = ELFFile(io.BytesIO(data)).get_section_by_name(".strtab")
    not_identifier = next(i for i in range(strtab.data_size) if strtab.get_string(i).startswith("."))
    err = read_error(patched(data, at + 4, "<I", not_identifier))  # ".tensor" of "matmul_relu.tensor"
    assert err.message == "semaphore name 0 (.tensor, s1) is not an identifier" and err.offset == at + 4
    err = read_error(patched(data, header_at + 56, "<Q", 4))
    assert "a semaphore name record is 8 bytes" in err.message
    with pytest.raises(ValueError, match="'a b' is not an identifier"):
        write_elf(ObjectFile("k", semaphores={0: "a b"}))
    with pytest.raises(ValueError, match="'x' is given twice"):
        write_elf(ObjectFile("k", semaphores={0: "x", 1: "x"}))


# --- binutils -----------------------------------------------------------------------------------


def readelf(*args: str, data: bytes, tmp_path: Path) -> str:
    path = tmp_path / "k.o"
    path.write_bytes(data)
    done = subprocess.run([READELF, *args, str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    for word in ("Warning", "Error"):
        assert word not in done.stdout, done.stdout
    return done.stdout


@needs_readelf
def test_readelf_reads_it_cleanly(tmp_path: Path) -> None:
    for obj in (sample(), ObjectFile("empty_kernel"), named_sample()):
        readelf("-a", "-W", data=write_elf(obj), tmp_path=tmp_path)
        readelf("-a", data=write_elf(obj), tmp_path=tmp_path)
    symbols = readelf("-s", "-W", data=SAMPLE, tmp_path=tmp_path)
    for name in ("matmul_relu", "matmul_relu.tensor", "matmul_relu.sync", "a", "result", "acc", "idx"):
        assert any(line.split()[-1] == name for line in symbols.splitlines() if line.strip()), name


@needs_readelf
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(object_files())
def test_readelf_reads_random_objects(tmp_path: Path, obj: ObjectFile) -> None:
    readelf("-a", "-W", data=write_elf(obj), tmp_path=tmp_path)
    names = {line.split()[-1] for line in readelf("-s", "-W", data=write_elf(obj), tmp_path=tmp_path)
             .splitlines() if len(line.split()) == 8}
    assert obj.kernel in names
    assert {t.name for t in obj.tensors} <= names


# --- bad input ----------------------------------------------------------------------------------


def test_empty_file() -> None:
    assert "empty file" in read_error(b"").message


def test_not_elf() -> None:
    err = read_error(b"MZ\x90\x00 this is not an object")
    assert err.message.startswith("not an ELF file: the first 4 bytes are 4d 5a 90 00")
    assert err.offset == 0
    assert "not an ELF file" in read_error(b"\x7fEL").message


def test_elf32_header() -> None:
    ident = b"\x7fELF" + bytes([1, 1, 1, 0]) + bytes(8)
    elf32 = struct.pack("<16sHHIIIIIHHHHHH", ident, 1, 0, 1, 0, 0, 0, 0, 52, 0, 0, 40, 0, 0)
    err = read_error(elf32)
    assert "ELF class 1 (32-bit) is not supported" in err.message and err.offset == 4


def test_big_endian_and_wrong_type() -> None:
    assert "little-endian" in read_error(SAMPLE[:5] + b"\x02" + SAMPLE[6:]).message
    err = read_error(patched(SAMPLE, 16, "<H", 2))  # ET_EXEC
    assert "e_type is 2, expected 1" in err.message and err.offset == 16


def test_every_prefix_is_an_error() -> None:
    for n in range(len(SAMPLE)):
        read_error(SAMPLE[:n])


def test_not_an_ncsim_object() -> None:
    header_at, _ = section(SAMPLE, ".shstrtab")
    shstrtab_at = struct.unpack_from("<Q", SAMPLE, header_at + 24)[0]
    i = SAMPLE.index(b".ncsim.kernel\0", shstrtab_at)
    renamed = SAMPLE[:i] + b".ncsim.kernex\0" + SAMPLE[i + 14:]
    assert read_error(renamed).message == (
        "this is an ELF object but not an ncsim object (no .ncsim.kernel section)"
    )
    i = SAMPLE.index(b".ncsim.lines\0", shstrtab_at)
    assert read_error(SAMPLE[:i] + b".ncsim.linez\0" + SAMPLE[i + 13:]).message == "missing section .ncsim.lines"


def test_truncated_tensor_table() -> None:
    header_at, _ = section(SAMPLE, TENSORS_SECTION)
    err = read_error(patched(SAMPLE, header_at + 32, "<Q", 37))
    assert err.message == "section .ncsim.tensors is truncated: 37 bytes is not a multiple of the 56-byte tensor record"


def test_section_past_the_end() -> None:
    header_at, _ = section(SAMPLE, ".text.sync")
    err = read_error(patched(SAMPLE, header_at + 32, "<Q", 2**40))
    assert "(.text.sync) runs past the end of the file" in err.message and err.offset == header_at + 24


def test_bad_codes_in_records() -> None:
    _, tensors_at = section(SAMPLE, TENSORS_SECTION)
    err = read_error(patched(SAMPLE, tensors_at + 3 * 56 + 5, "<B", 14))
    assert err.message == "tensor 3 (idx) names dtype code 14, which is no dtype"
    assert err.offset == tensors_at + 3 * 56 + 5
    assert "names memory code 0" in read_error(patched(SAMPLE, tensors_at + 4, "<B", 0)).message
    assert "kind code 5" in read_error(patched(SAMPLE, tensors_at + 6, "<B", 5)).message
    err = read_error(patched(SAMPLE, tensors_at, "<I", 10**6))
    assert err.message.startswith("the name of tensor 0 is at offset 1000000 of the string table .strtab")

    _, lines_at = section(SAMPLE, LINES_SECTION)
    err = read_error(patched(SAMPLE, lines_at + 4 * 20 + 8, "<I", 9))
    assert err.message == "line entry 4 names file 9 but there are 2 files"
    assert "engine code 7" in read_error(patched(SAMPLE, lines_at, "<B", 7)).message
    err = read_error(patched(SAMPLE, lines_at + 20 + 4, "<I", 0))  # tensor instruction 1 -> 0, a repeat
    assert "must be sorted" in err.message

    _, files_at = section(SAMPLE, FILES_SECTION)
    assert "of the string table .strtab" in read_error(patched(SAMPLE, files_at, "<I", 10**6)).message

    _, kernel_at = section(SAMPLE, KERNEL_SECTION)
    err = read_error(patched(SAMPLE, kernel_at, "<I", 4))
    assert err.message == "object format version 4 is not supported (this ncsim reads versions 2 and 3)"
    # version 3 is version 2 with GpSimd programs (.ncsim.gpsimd): without that section it is refused
    err = read_error(patched(SAMPLE, kernel_at, "<I", 3))
    assert err.message == "format version 3 needs section .ncsim.gpsimd"
    # version 1 laid the operands out in ncsim's order before NKI 2.27's forms: refused by its number
    err = read_error(patched(SAMPLE, kernel_at, "<I", 1))
    assert err.message == "object format version 1 is not supported (this ncsim reads versions 2 and 3)"
    assert "reserved bytes 4..7" in read_error(patched(SAMPLE, kernel_at + 4, "<B", 2)).message


def test_every_header_byte_corrupted() -> None:
    """Each byte of the ELF header and of every section header, set to a few telling values."""
    shoff = struct.unpack_from("<Q", SAMPLE, 40)[0]
    for at in [*range(64), *range(shoff, len(SAMPLE))]:
        for value in {0x00, 0xFF, SAMPLE[at] ^ 0x01, SAMPLE[at] ^ 0x80} - {SAMPLE[at]}:
            read_or_error(SAMPLE[:at] + bytes([value]) + SAMPLE[at + 1:])


@settings(max_examples=300, deadline=None)
@given(MUTATIONS)
def test_random_mutations(mutations: list[tuple[int, int]]) -> None:
    read_or_error(mutated(mutations))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, len(SAMPLE) - 8), st.sampled_from([0, 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1]))
def test_random_wide_field_mutations(at: int, value: int) -> None:
    read_or_error(patched(SAMPLE, at, "<Q", value))
