"""The assembler's flat-array back end (`ncsim.asm.build`): encoding a chunk's lanes in batches gives
the bytes that encoding them all at once gives."""

from __future__ import annotations

import sys

from ncsim.asm import build
from ncsim.asm.assembler import assemble
from ncsim.asm.elf import write_elf

LOOPS = """
.hbm x f32[256, 64] in
.hbm y f32[256, 64] out
.sbuf a f32[128, 4, 64]
.sbuf b f32[128, 64]
.for i in 0..50
  dma_copy a[:, i % 4, :], x[(i % 2) * 128 : (i % 2) * 128 + 128, :]
  tensor_scalar b[:, 0 : i % 7 + 1], a[:, i % 4, 0 : i % 7 + 1], multiply, i
  activation a[:, (i + 1) % 4, :], relu, b
  dma_copy y[(i % 2) * 128 : (i % 2) * 128 + 128, :], a[:, (i + 1) % 4, :], engine=gpsimd
.end
"""


def test_encoding_in_batches_of_lanes_gives_the_same_object(monkeypatch):
    whole = write_elf(assemble(LOOPS, "loops.s"))
    monkeypatch.setattr(build, "BATCH", 3)  # 50 lanes in batches of 3, the last one short
    assert write_elf(assemble(LOOPS, "loops.s")) == whole


WIDE = """
.hbm x f32[64, 8] in
.sbuf w f32[64, 16]
.sbuf f f32[64, 16]
.for i in 0..12
  .for k in 0..10
    dma_copy w[:, k], x[:, (i + k) % 8], queue=k
  .end
  tensor_copy f[:, 0:10], w[:, 0:10]
  tensor_scalar f[:, i % 4 : i % 4 + 1], f[:, 10:11], add, i
.end
"""


def test_encoding_in_blocks_gives_the_same_object_with_instructions_built_one_by_one(monkeypatch):
    """The layout, wait counts and signals are worked out in blocks of BATCH instructions (or edges);
    with BATCH = 3 the 144 instructions span 48 of them, among them tensor_copy lanes
    that wait on ten queues (two waits more than the encoding holds: built one by one, after two
    sem_waits)."""
    from ncsim.asm.assembler import Assembler

    def build_it():
        asm = Assembler()
        obj = asm.assemble(WIDE, "wide.s")
        return write_elf(obj), asm.program

    whole, program = build_it()
    mnemonics = [i.mnemonic for i in program.instructions]
    assert mnemonics.count("sem_wait") == 2 * 12 and len(mnemonics) == 12 * 12 + 2 * 12
    monkeypatch.setattr(build, "BATCH", 3)
    again, again_program = build_it()
    assert again == whole
    for f in ("words", "word_first", "pos", "first", "file", "line", "col", "origin"):
        assert (getattr(program.encoded, f) == getattr(again_program.encoded, f)).all(), f


def test_line_tables_are_columns_that_read_as_line_entries():
    """The assembler and the ELF reader keep each stream's line table as columns (`LineTable`), with
    no Python object per instruction; it reads and compares as the list of LineEntry it stands for."""
    import numpy as np
    import pytest

    from ncsim.asm.elf import read_elf
    from ncsim.asm.objfile import LineEntry, LineTable

    obj = assemble(LOOPS, "loops.s")
    table = obj.lines["sync"]
    assert isinstance(table, LineTable) and len(table) == 50
    entries = [LineEntry(k, 0, 7, 3) for k in range(50)]
    assert table == entries and entries == table and list(table) == entries
    assert table[0] == entries[0] and table[-1] == entries[-1] and table[2:4] == entries[2:4]
    with pytest.raises(IndexError):
        table[50]
    assert table != entries[:-1] and table != [*entries[:-1], LineEntry(49, 0, 7, 4)]
    again = read_elf(write_elf(obj), "loops.o")
    assert all(isinstance(again.lines[e], LineTable) for e in again.lines)
    assert again.lines == obj.lines
    # a table whose entries do not number the instructions 0, 1, ... is read as a list (the reader
    # does not renumber what the file says)
    obj.lines["sync"] = [LineEntry(2 * k, 0, 7, 3) for k in range(50)]
    assert read_elf(write_elf(obj), "loops.o").lines["sync"] == obj.lines["sync"]
    assert LineTable(np.zeros(0, np.int32), np.zeros(0, np.uint32), np.zeros(0, np.uint32)) == []


def test_a_loop_pattern_keeps_no_span_of_its_own():
    """A pattern whose offset has a value per loop iteration does not keep its byte span (two more
    arrays per pattern of a loop, held as long as the assembler holds its chunks); byte_span makes it
    when asked, and a pattern of plain integers keeps its span as before. Its hash is made when first
    asked (the assembler never asks it of a loop's patterns)."""
    import numpy as np

    from ncsim import dtypes
    from ncsim.asm.lanes import Lanes
    from ncsim.memory.access import AccessPattern, Memory

    ap = AccessPattern(Memory.SBUF, dtypes.FLOAT32, 0, 128, Lanes(np.array([0, 64, 128])), ((1, 16),))
    assert ap._span is None
    lo, hi = ap.byte_span()
    assert lo.v.tolist() == [0, 64, 128] and hi.v.tolist() == [64, 128, 192]
    plain = AccessPattern(Memory.SBUF, dtypes.FLOAT32, 0, 128, 8, ((1, 16),))
    assert plain._span == plain.byte_span() == (8, 72)
    # nor its hash until asked, which is then the same as the same pattern's made again
    assert ap._hash is None
    again = AccessPattern(Memory.SBUF, dtypes.FLOAT32, 0, 128, Lanes(np.array([0, 64, 128])), ((1, 16),))
    assert hash(ap) == hash(again) and ap._hash == hash(ap)
    assert plain._hash == hash(AccessPattern(Memory.SBUF, dtypes.FLOAT32, 0, 128, 8, ((1, 16),)))


def test_the_assembled_object_views_the_encoded_words():
    """The assembler's object holds each stream as a read-only view of the encoded words (no copy of
    the program's largest array); it reads, compares and writes as the bytes it stands for."""
    import pytest

    from ncsim.asm.assembler import Assembler
    from ncsim.asm.elf import read_elf

    asm = Assembler()
    obj = asm.assemble(LOOPS, "loops.s")
    view = obj.streams["vector"]
    assert isinstance(view, memoryview) and view.readonly and len(view) % 8 == 0 and len(view)
    enc = asm.program.encoded
    assert view.obj is not None and not enc.words.flags.writeable
    with pytest.raises(ValueError):
        enc.words[0] = 0
    again = read_elf(write_elf(obj), "loops.o")
    assert again.streams == obj.streams and again.streams["vector"] == bytes(view)


def test_large_programs_give_freed_heap_memory_back_unless_the_process_keeps_it(monkeypatch):
    """build.give_back trims glibc's heap (malloc_trim) from GIVE_BACK_FROM instructions on, except in
    a process that asked to keep freed memory for reuse (ncsim.runtime.heap, the `ncsim` command)."""
    from ncsim.runtime import heap

    if sys.platform == "linux":  # glibc's, found without ctypes.util
        assert build._malloc_trim() is not None
    calls = []
    monkeypatch.setattr(build, "_malloc_trim", lambda: lambda pad: calls.append(pad) or 1)
    monkeypatch.setattr(heap, "_kept", False)
    build.give_back(build.GIVE_BACK_FROM - 1)
    assert calls == []
    build.give_back(build.GIVE_BACK_FROM)
    assert calls == [0]
    monkeypatch.setattr(heap, "_kept", True)
    build.give_back(10 * build.GIVE_BACK_FROM)
    assert calls == [0]
    monkeypatch.setattr(build, "GIVE_BACK_FROM", 1)  # and an assembly calls it: before sync and encoding
    monkeypatch.setattr(heap, "_kept", False)
    assemble(LOOPS, "loops.s")
    assert calls == [0, 0, 0]


STREAM = """
.hbm x  f32[2048, 512] in
.hbm y  f32[2048, 512] out
.sbuf xs f32[128, 2, 512]
.sbuf w  f32[128, 512]
.sbuf v  f32[128, 512]
.sbuf os f32[128, 2, 512]
.for j in 0..20000
  dma_copy      xs[:, j % 2, :], x[(j % 16) * 128 : (j % 16) * 128 + 128, :]
  tensor_tensor w, xs[:, j % 2, :], xs[:, j % 2, :], multiply
  activation    v, gelu, w
  tensor_tensor os[:, j % 2, :], v, w, add
  dma_copy      y[(j % 16) * 128 : (j % 16) * 128 + 128, :], os[:, j % 2, :], engine=gpsimd
.end
"""


def test_synchronising_and_encoding_a_long_loop_take_little_besides_the_words():
    """Program.build's traced peak on 100,000 instructions of a DMA + compute stream (1.2 waits each),
    over the encoded words (202 bytes per instruction here): under 80 bytes per instruction (112
    before the search trees' leaves grew to 64 rows and encoding stopped keeping whole-program
    temporaries; 65 then, 71 with the words made a block at a time). Numba's functions are loaded by a small assembly first."""
    import tracemalloc

    from ncsim.asm.assembler import Assembler

    Assembler().assemble(STREAM.replace("0..20000", "0..20"), "warm.s")
    asm = Assembler()
    asm.assemble_lines(STREAM, "stream.s")
    n = asm.program.count
    assert n == 100_000
    tracemalloc.start()
    try:
        asm.program.build(asm.config, set())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    words = asm.program.encoded.words.nbytes
    assert words / n > 150 and (peak - words) / n < 80


def test_lanes_are_held_as_int32_where_every_value_fits():
    """narrow_lanes: once parsing is over, a chunk's lanes are int32 where each value fits exactly,
    int64 where one does not, and constants keep theirs (their encoding masks them as int64); the
    object is the one the int64 lanes give."""
    import numpy as np

    from ncsim.asm.instruction import encode_lanes
    from ncsim.asm.lanes import Lanes

    text = """
.hbm big f32[1048576, 1024] in
.sbuf a f32[128, 64]
.for i in 0..4
  dma_copy a[0:1, :], big[i * 300000 : i * 300000 + 1, 0:64]
  tensor_scalar a[:, 0:1], a[:, i:i + 1], add, i
.end
"""
    from ncsim.asm.assembler import Assembler

    asm = Assembler()
    asm.assemble_lines(text, "narrow.s")
    chunks = asm.program.chunks
    dma = next(c for c in chunks if c.instr.mnemonic == "dma_copy")
    narrowed = build.narrow_lanes(dma.instr)
    src = narrowed.operands["src"]
    assert isinstance(src.offset, Lanes) and src.offset.v.dtype == np.int64  # up to 3.7e9 bytes: past int32
    assert narrowed.operands["dst"] == dma.instr.operands["dst"]
    ts = next(c for c in chunks if c.instr.mnemonic == "tensor_scalar")
    narrowed = build.narrow_lanes(ts.instr)
    offset = narrowed.operands["data"].offset
    assert isinstance(offset, Lanes) and offset.v.dtype == np.int32
    assert narrowed.operands["operand0"] is ts.instr.operands["operand0"]  # a constant: as it was
    for c in (dma, ts):
        n = c.n
        assert (encode_lanes(build.narrow_lanes(c.instr), n) == encode_lanes(c.instr, n)).all()


def test_the_access_table_is_narrow_where_the_values_allow():
    """access_rows gives int16 partitions and shapes and an int32 pointer column where they fit (the
    sync kernels take those as they are, and int32 / int64 otherwise)."""
    import numpy as np

    from ncsim.asm import sync
    from ncsim.asm.assembler import Assembler

    asm = Assembler()
    asm.assemble_lines(LOOPS, "loops.s")
    acc = build.access_rows(build.Gathered(asm.program.chunks, asm.program.count))
    assert (acc.first.dtype, acc.end.dtype, acc.shape.dtype, acc.ptr.dtype) == (np.int16, np.int16, np.int16, np.int32)
    assert sync._narrow(acc.first, np.int16, np.int32) is acc.first
    assert sync._narrow(np.arange(3, dtype=np.int64), np.int16, np.int32).dtype == np.int32


def test_a_chunk_whose_lanes_are_not_in_program_order_encodes_each_lane_at_its_place():
    """A chunk's lanes need not come in program order: with every chunk's lanes and positions reversed,
    the object and the decoded program are those of the program as parsed."""
    import numpy as np

    from ncsim.asm.assembler import Assembler
    from ncsim.config import DEFAULT
    from ncsim.program import Program

    def parsed() -> Assembler:
        asm = Assembler()
        asm.assemble_lines(LOOPS, "loops.s")
        return asm

    want = parsed()
    want.program.build(DEFAULT, set())
    obj = want.program.to_object()
    reversed_ = parsed(), parsed()
    for asm in reversed_:
        for c in asm.program.chunks:
            if c.n > 1:
                back = np.arange(c.n)[::-1]
                c.instr, c.positions = build.take(c.instr, back), c.positions[back]
    asm, asm2 = reversed_
    asm.program.build(DEFAULT, set())
    assert write_elf(asm.program.to_object()) == write_elf(obj)
    decoded = asm2.program.decode(DEFAULT, set(), "loops.s", {})
    loaded = Program.from_object(obj, "loops.s")
    assert write_elf(decoded.to_object()) == write_elf(obj)
    assert np.array_equal(decoded.ap_value, loaded.ap_value) and np.array_equal(decoded.body, loaded.body)
