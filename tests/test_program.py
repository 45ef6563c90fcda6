"""The decoded program (ncsim.program): built once, from an object or from the assembler's arrays,
and read by every phase without decoding the bytes again."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ncsim import program as program_mod
from ncsim.asm.assembler import Assembler, assemble, assemble_file
from ncsim.asm.elf import read_elf, write_elf
from ncsim.asm.instruction import decode_one
from ncsim.config import DEFAULT
from ncsim.memory.access import Memory
from ncsim.program import Program
from ncsim.runtime.machine import Machine
from ncsim.runtime.timing import time_program
from tests.strategies import access_patterns

PROGRAMS = sorted(Path(__file__).resolve().parents[1].glob("programs/*.s"))
ARRAYS = [f.name for f in dataclasses.fields(Program) if not f.name.startswith("_")
          and f.name not in ("kernel", "files", "tensors", "name", "semaphores", "obj")]


def _decoded(obj, prog: Program, k: int):
    """Instruction k of object `obj` decoded from its bytes, the way the program does not."""
    e = prog.engine_of(k)
    stream = bytes(obj.streams[program_mod.ENGINES[e]])
    at = 0
    for _ in range(k - int(prog.first[e])):
        at += int.from_bytes(stream[at + 4:at + 6], "little")
    instr = decode_one(stream, at)[0]
    if instr.mnemonic == "gpsimd_call":  # the bytes name the GpSimd program by index; the program links it
        instr = dataclasses.replace(instr, operands={**instr.operands, "program": prog.gpsimd[instr["program"]]})
    return instr


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_the_object_and_the_assembler_give_the_same_program(path):
    asm = Assembler(DEFAULT)
    obj = asm.assemble(path.read_text(), str(path))
    direct = Program.from_encoded(asm.program.encoded, obj.kernel, obj.files, obj.tensors, str(path),
                                  gpsimd=obj.gpsimd)
    loaded = Program.from_object(read_elf(write_elf(obj), str(path)), str(path))
    for name in ARRAYS:
        assert np.array_equal(getattr(direct, name), getattr(loaded, name)), name
    assert (direct.kernel, direct.files, direct.tensors) == (loaded.kernel, loaded.files, loaded.tensors)
    # and back: the same object bytes
    assert write_elf(direct.to_object()) == write_elf(obj)


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_every_instruction_made_from_the_columns_is_the_decoded_one(path):
    obj = assemble_file(path)
    prog = Program.from_object(obj, str(path))
    assert len(prog.body_first) < prog.count or prog.count == 1  # the programs' loops share bodies
    for k in range(prog.count):
        made = prog.instruction(k)
        assert made == _decoded(obj, prog, k), k
        assert str(made) == str(_decoded(obj, prog, k))
        assert made.waits + ((made.operands["cond"],) if made.mnemonic == "sem_wait" else ()) == prog.waits(k)


def test_the_machine_and_the_timing_decode_only_each_body_once(monkeypatch):
    path = PROGRAMS[[p.name for p in PROGRAMS].index("matmul.s")]
    obj = assemble_file(path)
    calls = []
    real = program_mod.decode_one
    monkeypatch.setattr(program_mod, "decode_one", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    prog = Program.from_object(obj, str(path))
    bodies = len(prog.body_first)
    assert len(calls) == bodies
    time_program(prog, DEFAULT)
    m = Machine(prog, DEFAULT, str(path))
    for t in prog.tensors:
        if t.memory == "hbm" and t.kind == "in":
            m.load_tensor(t, np.zeros(t.shape, t.dtype.storage))
    m.run()
    assert len(calls) == bodies and len(m.order) == prog.count


def test_prefix_keeps_the_first_instructions_of_each_stream():
    prog = Program.from_object(assemble_file(PROGRAMS[0]), str(PROGRAMS[0]))
    counts = [(int(prog.first[e + 1] - prog.first[e]) + 1) // 2 for e in range(len(program_mod.ENGINES))]
    cut = prog.prefix(counts)
    assert np.array_equal(np.diff(cut.first), counts)
    for e, c in enumerate(counts):
        for i in range(c):
            k, j = int(prog.first[e]) + i, int(cut.first[e]) + i
            assert cut.instruction(j) == prog.instruction(k)
            assert cut.loc(j) == prog.loc(k)


def test_source_lines_of_two_files_with_one_relative_name(tmp_path):
    """Two programs called r.s in different folders: each place shows its own file's line."""
    texts = {"a": ".hbm x f32[128, 4] in\n.sbuf t f32[128, 4]\ndma_copy t, x\n",
             "b": ".hbm x f32[128, 4] in\n.sbuf t f32[128, 4]\n\n# another line 4\ndma_copy t, x  # b\n"}
    seen = []
    cwd = os.getcwd()
    try:
        for d, text in texts.items():
            (tmp_path / d).mkdir()
            os.chdir(tmp_path / d)
            Path("r.s").write_text(text)
            r = time_program(assemble(text, "r.s"), DEFAULT, "r.s")
            seen.append(r.loc(0).text)
    finally:
        os.chdir(cwd)
    assert seen == ["dma_copy t, x", "dma_copy t, x  # b"]


def test_the_program_takes_at_most_175_bytes_per_instruction():
    """Issue 10 bounds the decoded program by 200 bytes per instruction, everything it keeps counted
    (nbytes: the columns and its bodies' words; the object's words are not kept). giou's program (560
    instructions of every engine, DMAs, constants, waits) takes 130 (146 with int64 CSR pointers, 350
    when the program kept the words and their positions): 175 keeps the margin that bench_pipeline's
    program needs (127 there, 143 with int64 pointers, 332 with the words)."""
    path = PROGRAMS[[p.name for p in PROGRAMS].index("giou.s")]
    prog = Program.from_object(assemble_file(path), str(path))
    assert prog.nbytes() / prog.count <= 175


def test_a_loaded_program_keeps_neither_the_object_nor_its_words():
    """Once decoded, nothing reads the instruction words: a program read from an object keeps neither
    the object nor the file's bytes (so they can go), and makes the same bytes again from its columns
    when asked for its object (to_object, Program.encoded). Streams read from a file (views of its
    bytes, back to back) and streams apart load the same program."""
    path = Path(__file__).resolve().parents[1] / "programs" / "giou.s"
    obj = assemble_file(path)
    data = write_elf(obj)
    read = read_elf(data, "giou.o")
    prog = Program.from_object(read, str(path))
    assert prog.obj is None
    assert not any(np.shares_memory(v, np.frombuffer(data, np.uint8)) for v in vars(prog).values()
                   if isinstance(v, np.ndarray))
    assert prog.nbytes() == sum(v.nbytes for v in vars(prog).values() if isinstance(v, np.ndarray))
    assert len(prog.body_words) < sum(len(s) for s in read.streams.values()) // 8 // 4  # only the bodies' words
    assert write_elf(prog.to_object()) == data
    words, pos = prog.encoded()
    assert words.tobytes() == b"".join(bytes(read.streams[e]) for e in program_mod.ENGINES)
    assert len(pos) == prog.count
    apart = dataclasses.replace(read, streams={e: bytes(s) for e, s in read.streams.items()})
    copied = Program.from_object(apart, str(path))
    for name in ARRAYS:
        assert np.array_equal(getattr(copied, name), getattr(prog, name)), name


def test_a_loaded_program_takes_the_line_tables_columns_without_copying_them():
    """The ELF reader's line tables (and the assembler's) are slices of one column each, back to back:
    the program's src_file / src_line / src_col are those columns (read-only views, no pages written),
    and line tables apart (one array per stream) give the same columns by copying."""
    from ncsim.asm.objfile import LineTable

    path = Path(__file__).resolve().parents[1] / "programs" / "giou.s"
    obj = assemble_file(path)
    for source in (read_elf(write_elf(obj), "giou.o"), obj):
        prog = Program.from_object(source, str(path))
        for name in ("file", "line", "col"):
            column = getattr(prog, f"src_{name}")
            assert column.dtype == np.int32 and not column.flags.writeable
            assert all(np.shares_memory(column, getattr(t, name)) for t in source.lines.values() if len(t))
        apart = dataclasses.replace(source, lines={e: LineTable(t.file.copy(), t.line.copy(), t.col.copy())
                                                   for e, t in source.lines.items()})
        copied = Program.from_object(apart, str(path))
        for name in ("file", "line", "col"):
            assert not np.shares_memory(getattr(copied, f"src_{name}"), getattr(prog, f"src_{name}"))
        for name in ARRAYS:
            assert np.array_equal(getattr(copied, name), getattr(prog, name)), name


def test_the_csr_pointers_are_int32_below_2_31_words_and_read_the_same_as_int64(monkeypatch):
    """wait_ptr, signal_ptr, fp_ptr and ap_ptr are int32 while the words (which bound every row
    number) are fewer than 2**31, else int64; both give the same values, instructions and object."""
    assert program_mod._ptr_dtype(2**31 - 2) is np.int32
    assert program_mod._ptr_dtype(2**31 - 1) is np.int64
    path = PROGRAMS[[p.name for p in PROGRAMS].index("giou.s")]
    obj = assemble_file(path)
    narrow = Program.from_object(obj, str(path))
    monkeypatch.setattr(program_mod, "_ptr_dtype", lambda words: np.int64)
    wide = Program.from_object(obj, str(path))
    for name in ("wait_ptr", "signal_ptr", "fp_ptr", "ap_ptr"):
        assert getattr(narrow, name).dtype == np.int32 and getattr(wide, name).dtype == np.int64
    for name in ARRAYS:
        assert np.array_equal(getattr(narrow, name), getattr(wide, name)), name
    assert [narrow.instruction(k) for k in range(narrow.count)] == [wide.instruction(k) for k in range(wide.count)]
    assert write_elf(narrow.to_object()) == write_elf(wide.to_object()) == write_elf(obj)


def test_a_program_that_keeps_its_object_counts_its_streams():
    """nbytes counts every array the program keeps: the streams of an object it keeps too (the
    assembler's, in ncsim.run's load of a .s file)."""
    path = Path(__file__).resolve().parents[1] / "programs" / "giou.s"
    obj = assemble_file(path)
    prog = Program.from_object(obj, str(path))
    columns = prog.nbytes()
    prog.obj = obj
    assert prog.nbytes() == columns + sum(len(s) for s in obj.streams.values())


def test_a_program_with_more_bodies_than_the_tables_hold_reads_the_same(monkeypatch):
    """_read's body tables have a fixed capacity; when a program has more bodies they grow x8 and the
    reading goes on from the instruction that did not fit, giving the same columns."""
    path = PROGRAMS[[p.name for p in PROGRAMS].index("gumbel_topk.s")]
    obj = assemble_file(path)
    whole = Program.from_object(obj, str(path))
    assert len(whole.body_first) == 17
    monkeypatch.setattr(program_mod, "_BODIES", 2)  # 2, 16, 128: grown twice
    again = Program.from_object(obj, str(path))
    for name in ARRAYS:
        assert np.array_equal(getattr(again, name), getattr(whole, name)), name
    assert write_elf(again.to_object()) == write_elf(obj)


def test_a_run_of_assembly_source_keeps_no_object():
    """ncsim.run of a .s file decodes the assembler's arrays and keeps neither the assembler's object nor
    its words; RunResult.obj makes the object's bytes again, the same as assembling gives."""
    import ncsim

    path = PROGRAMS[[p.name for p in PROGRAMS].index("giou.s")]
    result = ncsim.run(str(path), values=False, sidecar=False)
    assert result.program.obj is None
    assert write_elf(result.obj) == write_elf(assemble_file(path))


def _same_program(direct: Program, loaded: Program) -> None:
    for name in ARRAYS:
        a, b = getattr(direct, name), getattr(loaded, name)
        if isinstance(b, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert (direct.kernel, direct.files, direct.tensors, direct.semaphores) == \
        (loaded.kernel, loaded.files, loaded.tensors, loaded.semaphores)


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_assembling_straight_into_the_program_gives_the_decoded_objects(path):
    """Assembler.assemble_program (what `ncsim run` does with a .s file: the words made and read a
    block at a time, never whole) gives the program that decoding the assembled object gives, and
    the same object back."""
    text = path.read_text()
    obj = Assembler(DEFAULT).assemble(text, str(path))
    loaded = Program.from_object(read_elf(write_elf(obj), str(path)), str(path))
    direct = Assembler(DEFAULT).assemble_program(text, str(path))
    _same_program(direct, loaded)
    assert [p.name for p in direct.gpsimd] == [p.name for p in loaded.gpsimd]
    assert direct.rules_kept is DEFAULT
    assert write_elf(direct.to_object()) == write_elf(obj)


LOOP_LINES = [
    "dma_copy a[:, i % 4, :], x[(i % 2) * 128 : (i % 2) * 128 + 128, :]",
    "tensor_scalar b[:, 0 : i % 7 + 1], a[:, i % 4, 0 : i % 7 + 1], multiply, i",
    "activation a[:, (i + 1) % 4, :], relu, b",
    "dma_copy y[(i % 2) * 128 : (i % 2) * 128 + 128, :], a[:, (i + 1) % 4, :], engine=gpsimd",
    "tensor_copy b[:, 0:10], a[:, i % 4, 0:10]",
    ".for k in 0..10\n  dma_copy w[:, k], x[0:128, (i + k) % 8], queue=k\n.end\ntensor_copy b[:, 0:10], w[:, 0:10]",
]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(st.sampled_from(range(len(LOOP_LINES))), min_size=1, max_size=6),
       trips=st.integers(1, 30), block=st.integers(1, 9), bodies=st.sampled_from([2, 4, 4096]),
       sync=st.sampled_from(["auto", "manual"]))
def test_any_block_size_and_body_table_give_the_decoded_objects_program(lines, trips, block, bodies, sync):
    """Random loops (lane-varying offsets and widths, DMAs on ten queues whose consumer waits on more
    semaphores than the encoding holds, automatic or no synchronisation) read a few instructions a
    block, with body tables that fill and grow mid-block: the same program as the object's."""
    from ncsim.asm import build

    body = "\n".join(LOOP_LINES[j] for j in lines)
    text = (f".sync {sync}\n.hbm x f32[256, 64] in\n.hbm y f32[256, 64] out\n.sbuf a f32[128, 4, 64]\n"
            f".sbuf b f32[128, 64]\n.sbuf w f32[128, 16]\n.for i in 0..{trips}\n{body}\n.end\n")
    obj = Assembler(DEFAULT).assemble(text, "loops.s")
    loaded = Program.from_object(obj, "loops.s")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(build, "BLOCK", block)
        mp.setattr(program_mod, "_BODIES", bodies)
        direct = Assembler(DEFAULT).assemble_program(text, "loops.s")
        again = Assembler(DEFAULT).assemble(text, "loops.s")  # the object's words made in the same small blocks
    _same_program(direct, loaded)
    assert write_elf(again) == write_elf(obj)


def test_columns_allocated_for_fewer_rows_stop_the_reader():
    """_read stops at an instruction its columns have no room for (rather than writing past them):
    the decoder's counts come from the assembler, and a wrong one is a bug, said as such."""
    from ncsim.asm import build

    path = PROGRAMS[[p.name for p in PROGRAMS].index("giou.s")]
    asm = Assembler(DEFAULT)
    asm.assemble_lines(path.read_text(), str(path))
    blocks = build.Blocks(*asm.program.synchronise(DEFAULT, set()))
    blocks.waits -= 1
    with pytest.raises(AssertionError, match="allocated for fewer rows"):
        Program.from_blocks(blocks, "giou", asm.program.files, [])


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_a_program_written_a_block_at_a_time_is_its_objects_file(path, tmp_path, monkeypatch):
    """elf.write_program (what `ncsim asm` does: the words made again a few instructions at a time as
    they are written, the line records a few entries at a time) writes write_elf's bytes, and so does
    write_elf_file of the object."""
    from ncsim.asm import elf

    obj = assemble_file(path)
    want = write_elf(obj)
    monkeypatch.setattr(elf, "_LINES_AT_ONCE", 5)
    prog = Assembler(DEFAULT).assemble_program(path.read_text(), str(path))
    assert elf.write_program(prog, tmp_path / "p.o", block=3) == len(want)
    assert (tmp_path / "p.o").read_bytes() == want
    assert elf.write_elf_file(obj, tmp_path / "o.o") == len(want)
    assert (tmp_path / "o.o").read_bytes() == want


def test_a_program_loaded_from_a_file_keeps_nothing_of_the_file(tmp_path):
    """A run of an object decodes it from the file mapped into memory (elf.mapped_object) and keeps
    no view of it: cut short in place afterwards (where a kept view would kill the process with
    SIGBUS), the program still gives the same values, times and object."""
    import ncsim
    from ncsim.asm.elf import write_elf_file

    source = Path(__file__).resolve().parent.parent / "programs" / "giou.s"
    path = tmp_path / "giou.o"
    write_elf_file(assemble_file(source), path)
    first = ncsim.run(path, sidecar=False)
    want = path.read_bytes()
    with open(path, "r+b") as f:  # in place, as a careless writer would
        f.truncate(0)
        f.write(b"not an object any more")
    again = ncsim.run(first.program, first.inputs, sidecar=False)
    for name, value in first.outputs.items():
        assert np.array_equal(again.outputs[name], value, equal_nan=True)
    assert np.array_equal(again.timing.end, first.timing.end)
    assert write_elf(first.program.to_object()) == want


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(list(Memory)).flatmap(access_patterns), st.integers(0, 1 << 30))
def test_a_moved_pattern_is_the_pattern_made_anew_at_that_offset(ap, offset):
    """AccessPattern.moved (what instruction(k) makes for each offset of a loop body's pattern) gives
    the pattern dataclasses.replace makes: equal, the same hash, span and derived sizes."""
    moved, made = ap.moved(offset), dataclasses.replace(ap, offset=offset)
    assert moved == made and hash(moved) == hash(made)
    assert moved.byte_span() == made.byte_span() == made._make_span()
    assert {f.name: getattr(moved, f.name) for f in dataclasses.fields(made)} == \
        {f.name: getattr(made, f.name) for f in dataclasses.fields(made)}
