"""The decoded program (ncsim.program): built once, from an object or from the assembler's arrays,
and read by every phase without decoding the bytes again."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

from ncsim import program as program_mod
from ncsim.asm.assembler import Assembler, assemble, assemble_file
from ncsim.asm.elf import read_elf, write_elf
from ncsim.asm.instruction import decode_one
from ncsim.config import DEFAULT
from ncsim.program import Program
from ncsim.runtime.machine import Machine
from ncsim.runtime.timing import time_program

PROGRAMS = sorted(Path(__file__).resolve().parents[1].glob("programs/*.s"))
ARRAYS = [f.name for f in dataclasses.fields(Program) if not f.name.startswith("_")
          and f.name not in ("kernel", "files", "tensors", "name", "semaphores", "obj")]


def _decoded(prog: Program, k: int):
    """Instruction k decoded from its bytes, the way the program does not."""
    e = prog.engine_of(k)
    stream = prog.words[prog.word_first[e]:prog.word_first[e + 1]].tobytes()
    instr = decode_one(stream, int(prog.pos[k] - prog.word_first[e]) * 8)[0]
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
    prog = Program.from_object(assemble_file(path), str(path))
    assert len(prog.body_first) < prog.count or prog.count == 1  # the programs' loops share bodies
    for k in range(prog.count):
        made = prog.instruction(k)
        assert made == _decoded(prog, k), k
        assert str(made) == str(_decoded(prog, k))
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


def test_the_columns_take_at_most_175_bytes_per_instruction():
    """Issue 10 bounds the decoded program by 200 bytes per instruction (the encoded words apart: they
    are the object's own bytes). giou's program (560 instructions of every engine, DMAs, constants,
    waits) takes 150 with the narrower integer columns, 195 with int64 everywhere: 175 keeps the margin
    that bench_pipeline's program needs (about 150 there too, 208 with int64)."""
    path = PROGRAMS[[p.name for p in PROGRAMS].index("giou.s")]
    prog = Program.from_object(assemble_file(path), str(path))
    columns = sum(v.nbytes for name, v in vars(prog).items() if isinstance(v, np.ndarray) and name != "words")
    assert columns / prog.count <= 175


def test_loading_an_object_file_does_not_copy_its_instruction_words():
    """The words of an object read from its ELF bytes are a view into those bytes (its .text sections
    follow each other in the file), and so are those of the assembler's object; streams that are not
    laid out back to back are concatenated, with the same result."""
    path = Path(__file__).resolve().parents[1] / "programs" / "giou.s"
    obj = assemble_file(path)
    data = write_elf(obj)
    read = read_elf(data, "giou.o")
    prog = Program.from_object(read, str(path))
    assert np.shares_memory(prog.words, np.frombuffer(data, np.uint8))
    assert not prog.words.flags.writeable
    assert np.shares_memory(Program.from_object(obj, str(path)).words, obj.streams["vector"])
    apart = dataclasses.replace(read, streams={e: bytes(s) for e, s in read.streams.items()})
    copied = Program.from_object(apart, str(path))
    assert not np.shares_memory(copied.words, np.frombuffer(data, np.uint8))
    assert np.array_equal(copied.words, prog.words) and copied.words.flags.c_contiguous
