"""The `ncsim` command line: asm -> disasm -> asm is the identity, and isa, config and run say what they should."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from ncsim import dtypes, isa
from ncsim.asm import fields as F
from ncsim.asm.assembler import assemble
from ncsim.asm.disasm import decode_object, disassemble
from ncsim.asm.elf import read_elf, write_elf
from ncsim.asm.instruction import Instruction, format_instruction
from ncsim.asm.objfile import ENGINES
from ncsim.asm.rules import check_instruction, partition_start_ok
from ncsim.config import DEFAULT, Config
from ncsim.errors import AsmError
from ncsim.memory.access import AccessPattern, Memory
from tests.asm.conftest import PROGRAMS, run_ncsim
from tests.strategies import constants, values
from tests.test_startup import run_in_pty

READELF = shutil.which("readelf")

PROGRAM_IDS = [pytest.param(name, id=name) for name in PROGRAMS]


def ncsim_asm_roundtrip(cli, tmp_path: Path, name: str) -> bytes:
    """asm, disasm, asm again through the CLI (run in tmp_path); the objects' bytes must be equal."""
    (tmp_path / name).mkdir()
    (tmp_path / name / "prog.s").write_text(PROGRAMS[name])
    first = cli("asm", f"{name}/prog.s", "-o", f"{name}/prog.o")
    assert first.code == 0, first.err
    assert first.err == ""
    dis = cli("disasm", f"{name}/prog.o", "-o", f"{name}/dis.s")
    assert dis.code == 0, dis.err
    assert dis.out == ""
    again = cli("asm", f"{name}/dis.s", "-o", f"{name}/again.o")
    text = (tmp_path / name / "dis.s").read_text()
    assert again.code == 0, again.err + "\n" + text
    data = (tmp_path / name / "prog.o").read_bytes()
    assert (tmp_path / name / "again.o").read_bytes() == data, text
    return data


def instruction_lines(source: str) -> list[str]:
    """The NeuronCore instructions of a source: not directives, comments, or a .gpsimd section's core code."""
    lines, in_core = [], False
    for ln in (raw.strip() for raw in source.splitlines()):
        if ln.startswith(".gpsimd"):
            in_core = True
        elif in_core and ln.startswith(".end"):
            in_core = False
        elif ln and not in_core and not ln.startswith((".", "#", ";")):
            lines.append(ln)
    return lines


@pytest.mark.parametrize("name", PROGRAM_IDS)
def test_asm_disasm_asm_is_identity(cli, tmp_path, name):
    data = ncsim_asm_roundtrip(cli, tmp_path, name)
    obj = read_elf(data, "prog.o")
    assert obj == assemble(PROGRAMS[name], f"{name}/prog.s")
    # The object holds what the source says, not just something stable.
    mnemonics = [ln.split()[0] for ln in instruction_lines(PROGRAMS[name])]
    decoded = [i.mnemonic for e in ENGINES for i in decode_object(obj)[e]]
    assert sorted(decoded) == sorted(mnemonics)
    declared = re.findall(r"^\.(?:hbm|sbuf|psum)\s+(\w+)", PROGRAMS[name], flags=re.MULTILINE)
    assert [t.name for t in obj.tensors] == declared


def test_the_programs_cover_the_table():
    used = {ln.split()[0] for text in PROGRAMS.values() for ln in instruction_lines(text)}
    assert used == set(isa.BY_MNEMONIC)


def test_asm_reports_what_it_wrote(cli, tmp_path):
    (tmp_path / "mm.s").write_text(PROGRAMS["matmul_relu"])
    res = cli("asm", "mm.s")
    assert res.code == 0, res.err
    size = (tmp_path / "mm.o").stat().st_size  # default output: the source with .o
    assert res.out.strip() == (f"mm.o: kernel mm_relu, 9 instructions (tensor 2, vector 3, scalar 2, gpsimd 1,"
                               f" sync 1), 5 tensors, {size} bytes")


def test_disasm_text(cli, tmp_path):
    """The disassembly: .file/.loc carry the source places; instructions come by engine."""
    ncsim_asm_roundtrip(cli, tmp_path, "locations")
    res = cli("disasm", "locations/prog.o")
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    assert lines[0] == "# disassembly of locations/prog.o (ncsim)"
    # .sync manual: the semaphores are all in the text, so re-assembling inserts none
    assert lines[1:3] == [".kernel with_locations", ".sync manual"]
    assert lines[3:6] == ['.file 0 "kernel.py"', '.file 1 "other.s"', '.file 2 "locations/prog.s"']
    body = [ln for ln in lines[6:] if ln and not ln.startswith("#")]
    assert body == [
        ".loc 1 3 1", "sem_wait s1>=1, engine=vector",  # the vector stream comes before the sync stream
        ".loc 0 120 9", "sem_signal s1+=1",
        ".loc 2 6 1", "sem_signal s2+=2",  # no .loc before it: its own place in the source
    ]


def test_disasm_names_semaphores_as_the_source_did(cli, tmp_path):
    data = ncsim_asm_roundtrip(cli, tmp_path, "named_sems")
    assert read_elf(data, "prog.o").semaphores == {1: "ready", 9: "done"}
    res = cli("disasm", "named_sems/prog.o")
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    assert lines[3:5] == [".sem ready @1", ".sem done @9"]  # numbers kept: s0 is used raw
    body = [ln for ln in lines if ln and not ln.startswith((".", "#"))]
    assert body == ["sem_wait ready>=1, engine=vector, signal=[done+=2, s3+=1]", "sem_wait done>=2, engine=scalar",
                    "sem_signal s0+=1", "sem_signal ready+=1, wait=[s0>=1]"]


def test_disasm_prints_tensors(cli, tmp_path):
    ncsim_asm_roundtrip(cli, tmp_path, "tensors_only")
    res = cli("disasm", "tensors_only/prog.o")
    assert res.code == 0, res.err
    assert res.out.splitlines()[1:] == [
        ".kernel prog",
        ".sync manual",
        ".hbm  big bf16[16, 1024, 1024] scratch @1",
        ".hbm  io u8[1] inout @17179869183",
        ".sbuf top f32[32, 8] @96:180192",
        ".psum bank7 f32[128, 512] @0:14336",
    ]


# --- random programs ---------------------------------------------------------------------------------

LEGAL_PARTITIONS = [(s, c) for c in range(1, 129) for s in (0, 32, 64, 96) if s + c <= 128 and partition_start_ok(s, c)]


@st.composite
def small_access_patterns(draw, memory: Memory, partitions: tuple[int, int]) -> AccessPattern:
    """An access pattern that fits the default core: a few small dimensions near the memory's start."""
    dt = draw(st.sampled_from([dtypes.FLOAT32, *dtypes.DTYPES]))  # fp32 first: matmul's PSUM output
    limit = F.MAX_HBM_DIMS if memory == Memory.HBM else F.MAX_FREE_DIMS
    dims = tuple(draw(st.lists(st.tuples(st.integers(-4, 16), st.integers(1, 8)), min_size=1, max_size=limit)))
    reach = sum(-s * (c - 1) for s, c in dims if s < 0) * dt.itemsize
    offset = reach + draw(st.integers(0, 8192))
    if memory == Memory.HBM:
        return AccessPattern(memory, dt, 0, 0, offset, dims)
    start, count = partitions
    return AccessPattern(memory, dt, start, count, offset, dims)


@functools.cache
def _small_operands(kind: F.APKind, partitions: tuple[int, int]) -> st.SearchStrategy:
    """An access-pattern operand's strategy on those partitions, made once (see tests/strategies.values)."""
    options = [small_access_patterns(m, partitions) for m in kind.memories]
    return st.one_of(options + [constants()] * kind.imm + [st.none()] * kind.optional)


@st.composite
def legal_instructions(draw) -> Instruction:
    """A random row's instruction with operands the default core accepts (check_instruction passes)."""
    for _ in range(50):
        spec = draw(st.sampled_from(isa.TABLE))
        partitions = draw(st.sampled_from(LEGAL_PARTITIONS))
        operands = {}
        for o in spec.operands:
            if isinstance(o.kind, F.APKind):
                operands[o.name] = draw(_small_operands(o.kind, partitions))
            else:
                operands[o.name] = draw(values(o.kind))
        instr = Instruction(spec, draw(st.sampled_from(spec.engines)), operands,
                            draw(values(isa.WAITS)), draw(values(isa.SIGNALS)))
        try:
            check_instruction(instr, DEFAULT)
        except AsmError:
            continue
        return instr
    reject()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(legal_instructions(), min_size=1, max_size=12), st.data())
def test_random_programs_round_trip(program, data):
    # Some of the semaphores the program uses get `.sem` names, placed by number, which the source then uses.
    used = sorted({op.sem for i in program for op in i.waits + i.signals} | {
        v.sem for i in program for v in i.operands.values() if isinstance(v, F.SemOp)})
    named = {n: f"sem{n}" for n in data.draw(st.lists(st.sampled_from(used), unique=True) if used else st.just([]))}
    # .sync manual: the program's own semaphores only, so that line n of the source is instruction n
    head = [".sync manual"] + [f".sem {name} @{n}" for n, name in named.items()]
    text = "\n".join(head + [format_instruction(i, named) for i in program]) + "\n"
    obj = assemble(text, "rand.s")
    assert obj.semaphores == named
    data = write_elf(obj)
    dis = disassemble(read_elf(data, "rand.o"), "rand.o")
    again = assemble(dis, "dis.s")
    assert write_elf(again) == data, dis
    # the instructions came back in program order per engine, each from its own source line
    for engine, entries in again.lines.items():
        expected = [n for n, i in enumerate(program, start=len(head) + 1) if i.engine == engine]
        assert [e.line for e in entries] == expected


# --- binutils ---------------------------------------------------------------------------------------


@pytest.mark.skipif(READELF is None, reason="binutils readelf is not installed")
@pytest.mark.parametrize("name", ["matmul_relu", "vector_zoo"])
def test_readelf_reads_ncsim_asm_output(cli, tmp_path, name):
    (tmp_path / "k.s").write_text(PROGRAMS[name])
    assert cli("asm", "k.s", "-o", "k.o").code == 0
    done = subprocess.run([READELF, "-a", "-W", str(tmp_path / "k.o")], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    text = done.stdout + done.stderr
    assert "Warning" not in text and "Error" not in text, text
    assert ".text.tensor" in done.stdout and ".ncsim.lines" in done.stdout


# --- isa, config, run ------------------------------------------------------------------------------


def test_isa_lists_every_instruction(cli):
    res = cli("isa")
    assert res.code == 0, res.err
    words = set(re.findall(r"\w+", res.out))
    missing = [row.mnemonic for row in isa.TABLE if row.mnemonic not in words]
    assert not missing
    for row in isa.TABLE:  # each under its default engine's heading, with its summary
        assert re.search(rf"^\s+{row.mnemonic}\s+{re.escape(row.summary)}", res.out, flags=re.MULTILINE), row.mnemonic


def test_isa_describes_one_instruction(cli):
    spec = isa.BY_MNEMONIC["nc_matmul"]
    res = cli("isa", "nc_matmul")
    assert res.code == 0, res.err
    out = res.out
    assert spec.syntax() in out
    assert ("nc_matmul dst, stationary, moving, is_stationary_onezero=false, is_moving_onezero=false,"
            " is_transpose=false, accumulate=false, tile_position=[], tile_size=[], perf_mode=none") in out
    for heading in ("syntax:", "operands:", "semantics:", "cost:", "encoding"):
        assert heading in out, heading
    for operand in spec.all_operands:
        assert re.search(rf"^\s+{operand.name}\s", out, flags=re.MULTILINE), operand.name
    assert spec.semantics in out and spec.cost in out
    assert "0x01" in out
    assert re.search(r"^\s+8\s+\+56\s+dst$", out, flags=re.MULTILINE)  # dst: 56 bytes after the 8-byte header


def test_isa_unknown_name_suggests(cli):
    res = cli("isa", "tensor_tensr")
    assert res.code == 1
    assert res.out == ""
    assert "no instruction 'tensor_tensr'" in res.err
    assert "did you mean 'tensor_tensor'" in res.err
    assert "Traceback" not in res.err


def test_config_set_marks_the_change(cli):
    res = cli("config", "--set", "hbm_bandwidth=820e9")
    assert res.code == 0, res.err
    params = {f.name for f in dataclasses.fields(Config)}
    marked = [ln for ln in res.out.splitlines() if ln.startswith("*") and ln.split()[1] in params]
    assert len(marked) == 1, marked
    assert marked[0].split()[1] == "hbm_bandwidth" and "820 GB/s" in marked[0]
    plain = cli("config")
    assert plain.code == 0
    assert not [ln for ln in plain.out.splitlines() if ln.startswith("*") and ln.split()[1] in params]
    assert re.search(r"^\s+hbm_bandwidth\s+410 GB/s", plain.out, flags=re.MULTILINE)


def test_config_set_unknown_parameter(cli):
    res = cli("config", "--set", "nosuch=1")
    assert res.code == 1
    assert res.out == ""
    assert res.err.startswith("error: unknown parameter 'nosuch'"), res.err
    assert "Traceback" not in res.err


def test_config_set_bad_value(cli):
    res = cli("config", "--set", "hbm_bandwidth=fast")
    assert res.code == 1
    assert "hbm_bandwidth" in res.err and "fast" in res.err
    assert "Traceback" not in res.err


def test_asm_honours_config_overrides(cli, tmp_path):
    """A tile that fits the default SBUF does not fit once the reserved area grows."""
    (tmp_path / "t.s").write_text(".sbuf t u8[128, 1024] @0:170000\n")
    assert cli("asm", "t.s").code == 0
    res = cli("asm", "t.s", "--set", "sbuf_reserved_bytes=32768")
    assert res.code == 1
    assert res.err.startswith("t.s:1:7: error: tile 't'"), res.err


def test_run_in_process(cli, tmp_path):
    (tmp_path / "mm.s").write_text(PROGRAMS["matmul_relu"])
    res = cli("run", "mm.s")
    assert res.code == 0, res.err
    assert re.search(r"\b9 instructions\b", res.out), res.out
    assert cli("asm", "mm.s").code == 0
    res = cli("run", "mm.o")  # an object runs too
    assert res.code == 0, res.err
    assert re.search(r"\b9 instructions\b", res.out), res.out


# --- end to end, as processes ---------------------------------------------------------------------


def test_end_to_end_processes(tmp_path):
    (tmp_path / "prog.s").write_text(PROGRAMS["vector_zoo"])
    res = run_ncsim("asm", "prog.s", "-o", "prog.o", cwd=tmp_path)
    assert res.code == 0, res.err
    n = sum(len(v) for v in assemble(PROGRAMS["vector_zoo"], "prog.s").lines.values())
    assert f", {n} instructions (" in res.out
    res = run_ncsim("disasm", "prog.o", "-o", "dis.s", cwd=tmp_path)
    assert res.code == 0, res.err
    res = run_ncsim("asm", "dis.s", "-o", "again.o", cwd=tmp_path)
    assert res.code == 0, res.err
    assert (tmp_path / "again.o").read_bytes() == (tmp_path / "prog.o").read_bytes()
    # the zoo ends waiting for s255 == 2**32 - 1, which nothing signals: running it is a deadlock report
    res = run_ncsim("run", "prog.s", cwd=tmp_path)
    assert res.code == 1, res.err
    assert res.err.startswith("prog.s:39:1: error: deadlock: 1 engine waits for semaphore values"), res.err
    assert "gpsimd engine waits at prog.s:39:1: sem_wait needs s255==4294967295 (s255 is 0)" in res.err
    assert "Traceback" not in res.err


def test_end_to_end_error_process(tmp_path):
    (tmp_path / "bad.s").write_text("sem_wait s1>=1\ntensor_tensr x\n")
    res = run_ncsim("asm", "bad.s", cwd=tmp_path)
    assert res.code == 1
    assert res.out == ""
    assert res.err.splitlines()[0] == "bad.s:2:1: error: unknown instruction 'tensor_tensr'"
    assert "Traceback" not in res.err
    assert not (tmp_path / "bad.o").exists()


def test_asm_shows_a_bar_on_a_terminal_unless_quiet(tmp_path):
    (tmp_path / "mm.s").write_text(PROGRAMS["matmul_relu"])
    env = dict(os.environ, NCSIM_PROGRESS_DELAY="0")  # assembling counts as long
    code, shown = run_in_pty(["asm", "mm.s"], tmp_path, env)
    assert code == 0 and "assembling mm.s: " in shown, shown
    code, shown = run_in_pty(["asm", "mm.s", "-q"], tmp_path, env)
    assert (code, shown) == (0, "")
    res = run_ncsim("asm", "mm.s", cwd=tmp_path)  # stderr a pipe: no bar either
    assert res.code == 0 and res.err == ""


# --- file names ---------------------------------------------------------------------------------------


def roundtrip_named(cli, tmp_path, filename: str) -> str:
    """asm FILENAME (a program without .kernel), disasm, asm again: the same bytes. Returns the kernel name."""
    (tmp_path / filename).write_text("sem_signal s1+=1\nsem_wait s1>=1, engine=vector\n")
    res = cli("asm", filename, "-o", "k.o")
    assert res.code == 0, res.err
    assert cli("disasm", "k.o", "-o", "dis.s").code == 0
    again = cli("asm", "dis.s", "-o", "again.o")
    assert again.code == 0, again.err
    assert (tmp_path / "again.o").read_bytes() == (tmp_path / "k.o").read_bytes()
    return read_elf((tmp_path / "k.o").read_bytes(), "k.o").kernel


@pytest.mark.parametrize(("filename", "kernel"), [("prog.s", "prog"), ("1st-try.s", "k_1st_try"),
                                                  ("with space.s", "with_space")])
def test_kernel_named_after_the_file(cli, tmp_path, filename, kernel):
    assert roundtrip_named(cli, tmp_path, filename) == kernel


def test_non_ascii_file_name_round_trips(cli, tmp_path):
    roundtrip_named(cli, tmp_path, "café.s")


def test_file_name_with_a_quote_round_trips(cli, tmp_path):
    roundtrip_named(cli, tmp_path, 'a"b.s')
