"""GpSimd programs: the core rows round-trip (encode, decode, print, parse), `.gpsimd` sections
assemble into the object and back through ELF and the disassembler, and malformed sections are
clear errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ncsim import isa
from ncsim.asm.assembler import assemble
from ncsim.asm.disasm import disassemble
from ncsim.asm.elf import GPSIMD_VERSION, read_elf, write_elf
from ncsim.asm.fields import ParseEnv
from ncsim.asm.instruction import Instruction, format_instruction, parse_instruction
from ncsim.asm.lexer import Cursor, Line
from ncsim.errors import AsmError, ObjectFileError
from ncsim.gpsimd import code
from tests.strategies import values

CORE_ROWS = [pytest.param(row, id=row.mnemonic) for row in isa.CORE_TABLE]

RELU = """
.hbm x f32[64] in
.hbm y f32[64] out
.const N = 64
.gpsimd relu
    coreid r1
    bne r1, 0, done      # core 0 does it all
    li r2, 0
    li r3, N
    lif r5, 0.0
top:
    eld r4, in0, r2
    fmax r4, r4, r5
    est out0, r2, r4
    add r2, r2, 1
    blt r2, r3, top
done:
.end
gpsimd_call relu, y, x
"""


def test_core_rows_are_their_own_group():
    assert all(r.group == "core" for r in isa.CORE_TABLE) and all(r.group == "neuroncore" for r in isa.TABLE)
    opcodes = [r.opcode for r in isa.CORE_TABLE] + [r.opcode for r in isa.TABLE]
    assert len(set(opcodes)) == len(opcodes)
    assert all(r.summary and r.semantics and r.cost for r in isa.CORE_TABLE)


@pytest.mark.parametrize("row", CORE_ROWS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_core_encode_decode_print_parse(row: isa.InstrSpec, data):
    instr = Instruction(row, "gpsimd", {o.name: data.draw(values(o.kind)) for o in row.operands})
    raw = code.encode(instr)
    assert len(raw) == code.RECORD
    decoded = code.decode(raw, 0, "<test>")
    assert code.encode(decoded) == raw
    text = format_instruction(decoded)
    line = Line("<roundtrip>", 1, text)
    again = parse_instruction(line, Cursor(line), ParseEnv(), isa.CORE_BY_MNEMONIC)
    assert code.encode(again) == raw, text


def test_section_assembles_round_trips_through_elf_and_disassembly():
    obj = assemble(RELU, "relu.s")
    (prog,) = obj.gpsimd
    assert prog.name == "relu" and len(prog) == 10
    assert prog.places[0] == (0, 6, 5)
    assert prog.instrs[1].operands["target"] == 10  # `done` is the end of the program
    data = write_elf(obj)
    assert int.from_bytes(data[obj_kernel_offset(data):][:4], "little") == GPSIMD_VERSION
    back = read_elf(data, "relu.o")
    assert back.gpsimd == obj.gpsimd
    again = assemble(disassemble(back), "again.s")
    assert write_elf(again) == data


def obj_kernel_offset(data: bytes) -> int:
    import io

    from elftools.elf.elffile import ELFFile

    return ELFFile(io.BytesIO(data)).get_section_by_name(".ncsim.kernel")["sh_offset"]


def test_objects_without_programs_keep_version_2():
    data = write_elf(assemble(".hbm x f32[4] in\n.sbuf t f32[1, 4]\ndma_copy t, x\n", "a.s"))
    assert b".ncsim.gpsimd" not in data
    assert int.from_bytes(data[obj_kernel_offset(data):][:4], "little") == 2


@pytest.mark.parametrize("source, message", [
    ("vadd f32, v0, v1, v2\n", "is a GpSimd core instruction: it belongs inside a '.gpsimd NAME' section"),
    (".gpsimd p\n  memset v0, 0\n.end\n", "'memset' is an engine instruction"),
    (".gpsimd p\n  jmp nowhere\n.end\n", "unknown label 'nowhere'"),
    (".gpsimd p\n  jmp 5\n.end\n", "branch target 5 is outside the program"),
    (".gpsimd p\n a:\n a:\n  halt\n.end\n", "label 'a' is defined twice"),
    (".gpsimd p\n  add r1, r32, 1\n.end\n", "there is no register r32"),
    (".gpsimd p\n  li r1, 1\n", "this '.gpsimd' has no matching '.end'"),
    (".gpsimd p\n.end\n", "GpSimd program 'p' has no instructions"),
    (".gpsimd p\n  .for i in 0..2\n  halt\n  .end\n.end\n", "'.for' inside a .gpsimd section"),
    (".hbm x f32[4] in\ngpsimd_call q, x, x\n", "no .gpsimd section named 'q'"),
])
def test_section_errors(source, message):
    with pytest.raises(AsmError) as e:
        assemble(source, "bad.s")
    assert message in str(e.value)


def test_corrupt_program_is_an_object_error():
    data = bytearray(write_elf(assemble(RELU, "relu.s")))
    at = data.find(code.encode(assemble(RELU, "relu.s").gpsimd[0].instrs[0]))
    data[at] = 0x7F  # not a core opcode
    with pytest.raises(ObjectFileError, match="opcode 0x7f is no GpSimd core instruction"):
        read_elf(bytes(data), "bad.o")
