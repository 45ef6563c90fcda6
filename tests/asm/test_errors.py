"""Bad input through the CLI: file:line:col, the line, a caret under the column, exit status 1, no traceback."""

from __future__ import annotations

import resource
import signal
import struct
import subprocess

import pytest

from ncsim.asm.assembler import assemble
from ncsim.asm.elf import SECTION_ORDER, write_elf
from ncsim.asm.instruction import layout
from ncsim.errors import AsmError
from tests.asm.conftest import NCSIM, PROGRAMS

TILE = ".sbuf a f32[128, 4] @0:0\n"  # line 1 of the cases that use a declared tile
AP = "sbuf.f32[0:128, @0, [1,4]]"  # a raw access pattern that every Vector operand accepts

# (id, source, line, column, phrases the message must contain)
CASES = [
    ("unknown-mnemonic", "sem_signal s1+=1\n\ttensor_tensr a, a\n", 2, 2,
     ("unknown instruction 'tensor_tensr'", "did you mean 'tensor_tensor'")),
    ("unknown-keyword", TILE + "tensor_copy a, a, engin=vector\n", 2, 19,
     ("tensor_copy has no operand 'engin'", "did you mean 'engine'")),
    ("missing-operand", TILE + "tensor_copy a\n", 2, 1, ("tensor_copy is missing operand 'src'",)),
    ("missing-operands", TILE + "tensor_tensor a, a\n", 2, 1, ("missing operands 'data2', 'op'",)),
    ("too-many-positional", TILE + "tensor_copy a, a, a\n", 2, 19,
     ("tensor_copy takes 2 operands by position", "syntax: tensor_copy dst, src")),
    ("positional-after-keyword", TILE + "tensor_copy a, engine=vector, a\n", 2, 31,
     ("an operand by position cannot follow one by keyword",)),
    ("operand-twice", TILE + "tensor_copy a, a, engine=vector, engine=gpsimd\n", 2, 34,
     ("operand 'engine' is given twice",)),
    ("positional-then-keyword-same", TILE + "tensor_copy a, a, dst=a\n", 2, 19, ("operand 'dst' is given twice",)),
    ("unknown-dtype", f"tensor_copy sbuf.f33[0:128, @0, [1,4]], {AP}\n", 1, 18, ("unknown dtype 'f33'",)),
    ("hbm-to-tensor_tensor", f"tensor_tensor {AP}, hbm.f32[@0, [1,4]], {AP}, add\n", 1, 43,
     ("must be in sbuf/psum, not hbm",)),
    ("matmul-dst-in-sbuf", f"nc_matmul {AP}, {AP}, {AP}\n", 1, 11, ("this operand must be in psum, not sbuf",)),
    ("scalar-tensor_scalar-pair", TILE + "tensor_scalar a, a, add, 1.0, op1=maximum, operand1=0.0, engine=scalar\n",
     2, 1, ("op0=add does not run on the scalar engine of NeuronCore-v2", "(rule alu-engine)")),
    ("tensor_scalar-op1-alone", TILE + "tensor_scalar a, a, add, 1.0, op1=maximum\n", 2, 1,
     ("op1 is given without operand1",)),
    ("lockstep-shapes", TILE + "tensor_tensor a, a, a[:, 0:2], add\n", 2, 1,
     ("shapes disagree: 'dst' is [128, 4] and 'data2' is [128, 2]", "the same partitions and elements per partition")),
    ("five-free-dims", f"tensor_copy sbuf.f32[0:128, @0, [1,2],[1,2],[1,2],[1,2],[1,2]], {AP}\n", 1, 13,
     ("1 to 4 [step, count] dimensions, this one has 5",)),
    ("zero-count", f"tensor_copy sbuf.f32[0:128, @0, [1,0]], {AP}\n", 1, 13, ("count must be at least 1, not 0",)),
    ("partitions-past-128", f"tensor_copy sbuf.f32[100:140, @0, [1,4]], {AP}\n", 1, 13,
     ("partitions 100:140 run past 128",)),
    ("partitions-129", f"tensor_copy sbuf.f32[0:129, @0, [1,4]], {AP}\n", 1, 13, ("partitions 0:129",)),
    ("empty-partition-range", f"tensor_copy sbuf.f32[64:64, @0, [1,4]], {AP}\n", 1, 25,
     ("empty partition range 64:64",)),
    ("partition-start", "tensor_copy sbuf.f32[32:72, @0, [1,4]], sbuf.f32[0:40, @0, [1,4]]\n", 1, 1,
     ("operand 'dst' starts at partition 32 with 40 partitions",)),
    ("gpsimd-psum", f"sem_signal s1+=1\ntensor_copy psum.f32[0:128, @0, [1,4]], {AP}, engine=gpsimd\n", 2, 1,
     ("operand 'dst' is in PSUM, which the GpSimd engine cannot reach",)),
    ("both-inputs-psum", f"tensor_tensor {AP}, psum.f32[0:128, @0, [1,4]], psum.f32[0:128, @64, [1,4]], add\n", 1, 1,
     ("'data1' and 'data2' cannot both be in PSUM",)),
    ("matmul-across-bank", ("nc_matmul psum.f32[0:128, @1024, [1,512]], sbuf.f32[0:128, @0, [1,128]],"
                            " sbuf.f32[0:128, @0, [1,512]]\n"), 1, 1,
     ("spans bytes 1024..3071 of each partition, across a 2048-byte bank boundary", "(rule psum-bank)")),
    ("bad-enum", f"tensor_tensor {AP}, {AP}, {AP}, op=addd\n", 1, 102,
     ("'addd' is not one of the ALU operators", "did you mean 'add'")),
    ("semaphore-300", "sem_wait s300>=1\n", 1, 10, ("semaphore s300 does not exist",)),
    ("unexpected-character", f"tensor_copy {AP}, {AP} $\n", 1, 68, ("unexpected character '$'",)),
    ("unexpected-unicode", "sem_signal s1+=1 ¤\n", 1, 18, ("unexpected character '¤'",)),
    ("unclosed-bracket", f"tensor_copy {AP}, sbuf.f32[0:128, @0, [1,4]\n", 1, 66,
     ("expected ']' to close the access pattern, found end of line",)),
    ("unclosed-subscript", TILE + "tensor_copy a, a[0:128, 0:4\n", 2, 28,
     ("expected ']' to close the subscript, found end of line",)),
    ("index-past-the-tensor", TILE + "tensor_copy a[0:128, 0:4, 0], a\n", 2, 27, ("'a' has 2 dimensions",)),
    ("unknown-directive", ".hbmm x f32[4] in @0\n", 1, 2, ("unknown directive '.hbmm'", "did you mean 'hbm'")),
    ("duplicate-tensor", ".hbm x f32[4] in @0\n.sbuf x f32[128, 4] @0:0\n", 2, 7, ("'x' is already a tensor",)),
    ("tile-past-sbuf", ".sbuf big f32[128, 45057] @0:0\n", 1, 7,
     ("tile 'big' needs bytes 0..180228 of each partition", "180224 bytes of sbuf")),
    ("tile-offset-past-sbuf", ".sbuf big u8[128, 1024] @0:179201\n", 1, 7, ("past the 180224 bytes of sbuf",)),
    ("operand-past-sbuf", "memset sbuf.f32[0:128, @180224, [1,1]], 0\n", 1, 1, ("past the end of sbuf",)),
    ("divide-by-zero", f"tensor_copy sbuf.f32[0:128, @4/0, [1,4]], {AP}\n", 1, 32,
     ("division by zero in an integer expression",)),
    ("modulo-by-zero", ".sbuf t f32[128, 4 % (2 - 2)] @0:0\n", 1, 22, ("division by zero",)),
    ("inexact-division", f"tensor_copy sbuf.f32[0:128, @7/2, [1,4]], {AP}\n", 1, 31,
     ("7 / 2 is not a whole number",)),
    ("malformed-number", f"memset {AP}, 0x_\n", 1, 36, ("malformed number '0x_'",)),
    ("float-where-integer", f"tensor_copy sbuf.f32[0:128, @1.5, [1,4]], {AP}\n", 1, 30,
     ("expected a byte offset, found the non-integer number '1.5'",)),
    ("unknown-name", "tensor_copy nosuch, nosuch\n", 1, 13, ("unknown name 'nosuch'",)),
    ("for-without-end", ".for i in 0..4\nsem_signal s1+=1\n", 1, 2, ("has no matching '.end'",)),
    ("sync-after-instruction", "sem_signal s1+=1\n.sync manual\n", 2, 7, (".sync must come before the first",)),
    ("float-const-expression", ".const T = 1.0 / 8\n", 1, 16,
     ("a float constant is one literal", "only integers combine in expressions")),
]


def source_line(source: str, line: int) -> str:
    return source.splitlines()[line - 1]


@pytest.mark.parametrize(("source", "line", "col", "phrases"), [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_error_points_at_the_place(cli, tmp_path, source, line, col, phrases):
    (tmp_path / "bad.s").write_text(source)
    res = cli("asm", "bad.s")
    assert res.code == 1, res
    assert res.out == ""
    assert "Traceback" not in res.err and "internal error" not in res.err
    lines = res.err.splitlines()
    assert lines[0].startswith(f"bad.s:{line}:{col}: error: "), res.err
    for phrase in phrases:
        assert phrase in res.err, res.err
    # the source line, then a caret under the column (a tab shows as one space, so columns stay aligned)
    shown = source_line(source, line).replace("\t", " ")
    gutter, text = lines[1].split(" | ", 1)
    assert gutter.strip() == str(line) and text == shown, lines[1]
    caret_gutter, marks = lines[2].split("| ", 1)
    assert len(caret_gutter) == len(gutter) + 1 and not caret_gutter.strip()
    assert marks.index("^") == col - 1 and not marks[:col - 1].strip(), lines[2]
    assert set(marks[col:]) <= {"~"}
    assert not (tmp_path / "bad.o").exists()


def test_errors_list_is_checked_by_the_assembler_too():
    """The same sources through the API raise AsmError placed where the CLI says."""
    for name, source, line, col, _ in CASES:
        with pytest.raises(AsmError) as info:
            assemble(source, "bad.s")
        loc = info.value.loc
        assert (loc.file, loc.line, loc.col) == ("bad.s", line, col), name


# --- files that cannot be read -----------------------------------------------------------------


def one_line_error(res, *phrases: str) -> str:
    assert res.code == 1, res
    assert res.out == ""
    assert "Traceback" not in res.err and "internal error" not in res.err
    lines = res.err.splitlines()
    assert len(lines) == 1, res.err
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    return lines[0]


def test_missing_source(cli):
    line = one_line_error(cli("asm", "nothere.s"), "nothere.s", "No such file")
    assert line.startswith("nothere.s: error: cannot read nothere.s")


def test_missing_object(cli):
    line = one_line_error(cli("disasm", "nothere.o"), "No such file")
    assert line.startswith("nothere.o: error: cannot read the object file")


def test_source_not_utf8(cli, tmp_path):
    (tmp_path / "latin1.s").write_bytes(b"# caf\xe9\nsem_signal s1+=1\n")
    one_line_error(cli("asm", "latin1.s"), "latin1.s", "cannot read")


def test_unwritable_output(cli, tmp_path):
    (tmp_path / "ok.s").write_text("sem_signal s1+=1\n")
    one_line_error(cli("asm", "ok.s", "-o", "no/such/dir/ok.o"), "cannot write", "no/such/dir/ok.o")


@pytest.mark.parametrize("command", ["asm", "disasm", "run"])
def test_directory_as_input(cli, tmp_path, command):
    (tmp_path / "adir.s").mkdir()
    res = cli(command, "adir.s")
    assert "adir.s" in res.err and "directory" in res.err
    assert "Traceback" not in res.err
    assert res.code == 1


# --- objects that cannot be disassembled --------------------------------------------------------


@pytest.fixture(scope="module")
def matmul_object() -> bytes:
    return write_elf(assemble(PROGRAMS["matmul_relu"], "prog.s"))


def text_section(data: bytes, engine: str) -> tuple[int, int, int]:
    """(file offset of the section header, of the data, data size) of .text.ENGINE."""
    shoff = struct.unpack_from("<Q", data, 40)[0]
    header_at = shoff + 64 * (SECTION_ORDER.index(f".text.{engine}") + 1)
    offset, size = struct.unpack_from("<QQ", data, header_at + 24)
    return header_at, offset, size


def patched(data: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def disasm_error(cli, tmp_path, data: bytes, *phrases: str) -> str:
    (tmp_path / "bad.o").write_bytes(data)
    return one_line_error(cli("disasm", "bad.o"), "bad.o", *phrases)


def test_disasm_not_elf(cli, tmp_path):
    line = disasm_error(cli, tmp_path, b"#!/bin/sh\necho hello\n", "not an ELF file")
    assert line.startswith("bad.o: byte 0: error: not an ELF file: the first 4 bytes are 23 21 2f 62")


def test_disasm_empty_file(cli, tmp_path):
    assert disasm_error(cli, tmp_path, b"", "empty file").startswith("bad.o: byte 0: error: ")


def test_disasm_truncated_object(cli, tmp_path, matmul_object):
    line = disasm_error(cli, tmp_path, matmul_object[:len(matmul_object) // 2], "runs past the end of the file")
    assert line.startswith("bad.o: byte 40: error: the section header table")


def test_disasm_unknown_opcode(cli, tmp_path, matmul_object):
    _, offset, size = text_section(matmul_object, "tensor")
    first = struct.unpack_from("<H", matmul_object, offset + 4)[0]  # the first instruction's size
    assert first < size
    line = disasm_error(cli, tmp_path, patched(matmul_object, offset + first, "<B", 0xEE),
                        "opcode 0xee is no instruction")
    assert line.startswith(f"bad.o (.text.tensor): byte {first}: error: ")  # the second instruction


def test_disasm_bad_engine_code(cli, tmp_path, matmul_object):
    _, offset, _ = text_section(matmul_object, "sync")  # dma_copy: every engine but code 7
    line = disasm_error(cli, tmp_path, patched(matmul_object, offset + 1, "<B", 7),
                        "dma_copy cannot run on engine code 7")
    assert line.startswith("bad.o (.text.sync): byte 1: error: ")


def test_disasm_bad_operand_code(cli, tmp_path, matmul_object):
    """tensor_tensor's `op` byte set past the ALU operators: the message names the operand and its byte."""
    _, offset, _ = text_section(matmul_object, "vector")
    opcode = matmul_object[offset]
    placed, _ = layout(opcode)
    op_at = {o.name: off for o, off in placed}["op"]
    line = disasm_error(cli, tmp_path, patched(matmul_object, offset + op_at, "<B", 200),
                        "tensor_tensor operand 'op': code 200 is none of the")
    assert line.startswith(f"bad.o (.text.vector): byte {op_at}: error: ")


def test_disasm_instruction_cut_short(cli, tmp_path, matmul_object):
    header_at, _, size = text_section(matmul_object, "tensor")
    line = disasm_error(cli, tmp_path, patched(matmul_object, header_at + 32, "<Q", size - 8), "truncated nc_matmul")
    assert "(.text.tensor): byte " in line


def test_disasm_line_table_mismatch(cli, tmp_path, matmul_object):
    """.text.tensor cut to its first instruction: the line table has one entry too many."""
    header_at, offset, _ = text_section(matmul_object, "tensor")
    first = struct.unpack_from("<H", matmul_object, offset + 4)[0]
    line = disasm_error(cli, tmp_path, patched(matmul_object, header_at + 32, "<Q", first),
                        "the line table of .text.tensor has 2 entries for 1 instructions")
    assert line.startswith("bad.o: error: ")


# --- known bugs: input that makes ncsim fail as if it were ncsim's fault ------------------------------


BUGS = [
    ("loc-line-negative", '.file 0 "a.s"\n.loc 0 (-1) 1\nsem_signal s1+=1\n'),
    ("loc-line-2-to-32", '.file 0 "a.s"\n.loc 0 4294967296 1\nsem_signal s1+=1\n'),
    ("hbm-dim-2-to-32", ".hbm x f32[4294967296] in @0\n"),
    ("hbm-nine-dims", ".hbm x u8[1, 1, 1, 1, 1, 1, 1, 1, 1] in @0\n"),
    ("sbuf-negative-partition", ".sbuf t f32[1, 4] @-5:0\n"),
    ("sbuf-negative-offset", ".sbuf t f32[1, 4] @0:-64\n"),
    ("hbm-negative-address", ".hbm x f32[4] in @-8\n"),
    ("file-name-with-nul", '.file 0 "a\0b"\n'),
    ("integer-of-5000-digits", f"iota {AP}, [[1,4]], 10**5000\n"),
]


@pytest.mark.parametrize("source", [pytest.param(s, id=i) for i, s in BUGS])
def test_bad_values_are_user_errors(cli, tmp_path, source):
    (tmp_path / "bad.s").write_text(source)
    res = cli("asm", "bad.s")
    assert "internal error" not in res.err, res.err
    assert res.code == 1 and res.err.startswith("bad.s:"), res


def test_floor_division():
    obj = assemble(".sbuf t f32[128, 9 // 2] @0:0\n", "floor.s")
    assert obj.tensors[0].shape == (128, 4)


def test_integer_of_4301_digits_is_not_inf():
    with pytest.raises(AsmError, match="does not fit in 32 bits"):
        assemble(f"memset {AP}, {'9' * 40}\n", "big.s")
    for digits in (65, 4300, 4301):  # refused as too long, never read as a float (inf)
        with pytest.raises(AsmError, match="number literal longer than 64 characters"):
            assemble(f"memset {AP}, {'9' * digits}\n", "big.s")


class Timeout(Exception):
    pass


@pytest.fixture
def one_second():
    def alarm(signum, frame):
        raise Timeout

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


def test_huge_loop_is_refused(one_second):
    with pytest.raises(AsmError):
        assemble(".for i in 0..10**12\n.end\n", "loop.s")


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (300 << 20, 300 << 20))


def ncsim_in_300_mib(tmp_path, source: str) -> subprocess.CompletedProcess:
    (tmp_path / "k.s").write_text(source)
    return subprocess.run([str(NCSIM), "asm", "k.s"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          preexec_fn=limit_memory, check=False)


def test_huge_power_is_refused(tmp_path):
    if not NCSIM.exists():
        pytest.skip("the ncsim script is not installed")
    if ncsim_in_300_mib(tmp_path, "sem_signal s1+=1\n").returncode != 0:
        pytest.skip("ncsim needs more than 300 MiB of address space to start")
    done = ncsim_in_300_mib(tmp_path, f"iota {AP}, [[1,4]], 2**(2**40)\n")
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("k.s:1:"), done.stderr


def test_partition_reduce_takes_only_its_four_operators():
    src = "tensor_partition_reduce sbuf.f32[0:1, @0, [1,128]], multiply, sbuf.f32[0:128, @0, [1,128]]\n"
    with pytest.raises(AsmError, match="reduces with add, maximum, bitwise_or, bitwise_and, not multiply"):
        assemble(src, "pr.s")
