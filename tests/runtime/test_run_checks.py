"""What `ncsim run` checks before it runs and how it ends: an object held to the run's configuration
on the timing-only path as on the values path (ncsim.runtime.verify), configuration values out of
range, seeds, configuration files, and the exit status of a racy program whose outputs differ."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ncsim
from ncsim import dtypes, isa
from ncsim.asm.assembler import assemble
from ncsim.asm.instruction import Instruction
from ncsim.asm.rules import check_instruction, check_tensor
from ncsim.config import DEFAULT, load_config
from ncsim.errors import AsmError, NcsimError, SimError
from ncsim.memory.access import AccessPattern, Immediate, Memory
from ncsim.program import Program
from ncsim.runtime.verify import verify_program
from tests.asm.conftest import cli  # noqa: F401 - the fixture
from tests.runtime.test_run import ADD, RACY, SIDECAR, write

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def no_crash(res) -> None:
    assert "Traceback" not in res.err and "internal error" not in res.err, res.err


# --- the object re-checked against the run's configuration, timing-only too -------------------------


@pytest.mark.parametrize("timing_only", [False, True], ids=["values", "timing-only"])
@pytest.mark.parametrize(("setting", "message"), [
    ("pmax=64", "tile 'a' covers partitions 0:128, past the 64 partitions"),
    ("dma_queues_per_engine=1", "dma_copy: queue 1 does not exist; each DMA engine has 1 queues"),
])
def test_an_object_is_checked_against_the_runs_configuration(cli, tmp_path, setting, message,  # noqa: F811
                                                              timing_only):
    write(tmp_path, "add.s", ADD)
    assert cli("asm", "add.s").code == 0
    res = cli("run", "add.o", "--set", setting, *(["--timing-only"] if timing_only else []))
    no_crash(res)
    assert res.code == 1 and message in res.err, res.err
    assert "deadlock" not in res.err and "timing report" not in res.out


def test_timing_only_refuses_the_bad_queue_instead_of_a_deadlock(cli, tmp_path):  # noqa: F811
    """The issue's case: relu.s names queue 2; with two queues per engine the object must be refused."""
    assert cli("asm", str(ROOT / "programs" / "relu.s"), "-o", "relu.o").code == 0
    res = cli("run", "relu.o", "--timing-only", "--set", "dma_queues_per_engine=2")
    no_crash(res)
    assert res.code == 1 and "queue 2 does not exist; each DMA engine has 2 queues" in res.err
    assert "relu.s:" in res.err  # placed at the source line


def brute_force(prog: Program, config) -> bool:
    """Whether any tensor or instruction breaks a rule, every instruction checked one by one."""
    try:
        for t in prog.tensors:
            check_tensor(t, config)
        for k in range(prog.count):
            check_instruction(prog.instruction(k), config)
    except AsmError:
        return False
    return True


def verified(prog: Program, config) -> bool:
    try:
        verify_program(prog, config)
    except SimError:
        return False
    return True


CONFIGS = ["", "pmax=64", "pmax=32", "sbuf_reserved_bytes=131072", "sbuf_reserved_bytes=180000",
           "psum_num_banks=16", "psum_partition_bytes=8192", "psum_partition_bytes=4096",
           "dma_queues_per_engine=1", "dma_queues_per_engine=3", "semaphores=3", "semaphores=8",
           "hbm_bytes=1048576", "free_elements_max_sbuf=256", "pe_cols=64"]


@pytest.mark.parametrize("path", sorted((ROOT / "programs").glob("*.s")), ids=lambda p: p.stem)
def test_the_reduced_check_finds_what_checking_every_instruction_finds(path):
    prog = Program.from_object(assemble(path.read_text(), str(path)), str(path))
    for setting in CONFIGS:
        config = load_config(sets=[setting] if setting else [])
        assert verified(prog, config) == brute_force(prog, config), setting


LOOP_TILES = """\
.kernel k
.for i in 0..16
  memset sbuf.f32[0:128, @(i * 4096), [1, 64]], 1.0
.end
"""


def test_a_later_instruction_of_a_body_past_the_end_is_found(tmp_path):
    """Every memset has one body; only those from offset 40 KiB on are past a 40 KiB SBUF."""
    prog = Program.from_object(assemble(LOOP_TILES, "loop.s"), "loop.s")
    assert len(prog.body_first) == 1
    config = load_config(sets=[f"sbuf_reserved_bytes={192 * 1024 - 40 * 1024}"])
    assert not brute_force(prog, config)
    with pytest.raises(SimError, match="past the end of sbuf"):
        verify_program(prog, config)
    verify_program(prog, DEFAULT)


LOOP_MATMUL = """\
.kernel k
.sbuf s bf16[128, 128]
.sbuf m bf16[128, 192]
memset s, 1.0
memset m, 1.0
.for i in 0..2
  nc_matmul psum.f32[0:128, @(i * 768), [1, 192]], s, m
.end
"""


def test_a_matmul_output_across_a_smaller_bank_is_found(tmp_path):
    """Outputs at bytes 0 and 768, 768 bytes wide: inside 2 KiB banks, the second across a 1 KiB one."""
    prog = Program.from_object(assemble(LOOP_MATMUL, "mm.s"), "mm.s")
    config = load_config(sets=["psum_num_banks=16"])
    assert not brute_force(prog, config)
    with pytest.raises(SimError, match="bank boundary") as e:
        verify_program(prog, config)
    assert e.value.loc is not None and e.value.loc.line == 7
    verify_program(prog, DEFAULT)


def test_a_constant_of_one_instruction_of_a_body_is_checked():
    """Two tensor_scalars of one body but for the constant: the second's is no integer, which a
    bitwise operator refuses. Only the values differ, so only checking each distinct one finds it."""
    tile = AccessPattern(Memory.SBUF, dtypes.INT32, 0, 128, 0, ((1, 64),))
    spec = isa.BY_MNEMONIC["tensor_scalar"]

    def make(value: float) -> Instruction:
        ops = {o.name: o.default for o in spec.operands}
        ops.update(dst=tile, data=tile, op0="bitwise_and", operand0=Immediate(value, dtypes.FLOAT32))
        return Instruction(spec, "vector", ops)

    try:
        check_instruction(make(1.5), DEFAULT)
    except AsmError:
        pass
    else:
        pytest.skip("no rule on this constant today")
    prog = Program.from_instructions({"vector": [make(1.0), make(1.5)]})
    assert len(prog.body_first) == 1
    with pytest.raises(SimError):
        verify_program(prog, DEFAULT)


def reference_candidates(prog: Program, config) -> list[int]:
    """verify.candidates' rule, instruction by instruction in Python: each body's first instruction; per
    (body, footprint slot) the first instruction whose footprint ends furthest and the first whose PSUM
    footprint starts latest in its bank; per (body, constant slot) the first instruction with each
    distinct value; the first naming a semaphore the configuration lacks (waits, then signals)."""
    picks = set(prog.body_first.tolist())
    end, start, furthest, latest, seen = {}, {}, {}, {}, {}
    bank = config.psum_bank_bytes
    for k in range(prog.count):
        b = int(prog.body[k])
        for j, r in enumerate(range(int(prog.fp_ptr[k]), int(prog.fp_ptr[k + 1]))):
            if prog.fp_hi[r] > end.get((b, j), -1):
                end[b, j], furthest[b, j] = int(prog.fp_hi[r]), k
            if prog.fp_memory[r] == Memory.PSUM and prog.fp_lo[r] % bank > start.get((b, j), -1):
                start[b, j], latest[b, j] = int(prog.fp_lo[r] % bank), k
        for j in prog.constant_slots(k):
            seen.setdefault((b, j, int(prog.ap_value[prog.ap_ptr[k] + j])), k)
    picks |= set(furthest.values()) | set(latest.values()) | set(seen.values())
    for ptr, sem in ((prog.wait_ptr, prog.wait_sem), (prog.signal_ptr, prog.signal_sem)):
        bad = [x for x in range(len(sem)) if sem[x] >= config.semaphores]
        if bad:
            picks.add(int(np.searchsorted(ptr, bad[0], side="right")) - 1)
    return sorted(picks)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "multiply", "maximum"]), st.sampled_from([0.5, 1.0, 2.0, 3.0]),
                          st.integers(0, 6)), min_size=1, max_size=30))
def test_the_candidates_are_the_rules_picks(instrs):
    """candidates (one compiled pass, a hash table for the constants) picks what the rule, followed
    instruction by instruction in Python, picks: tensor_scalars of a few bodies whose constants repeat
    and whose tiles lie at different offsets."""
    from ncsim.runtime.verify import candidates

    spec = isa.BY_MNEMONIC["tensor_scalar"]

    def make(op: str, value: float, at: int) -> Instruction:
        tile = AccessPattern(Memory.SBUF, dtypes.FLOAT32, 0, 128, 256 * at, ((1, 64),))
        ops = {o.name: o.default for o in spec.operands}
        ops.update(dst=tile, data=tile, op0=op, operand0=Immediate(value, dtypes.FLOAT32))
        return Instruction(spec, "vector", ops)

    prog = Program.from_instructions({"vector": [make(*i) for i in instrs]})
    for config in (DEFAULT, load_config(sets=["semaphores=3"])):
        assert candidates(prog, config).tolist() == reference_candidates(prog, config)


@pytest.mark.parametrize("path", sorted((ROOT / "programs").glob("*.s"))[:6], ids=lambda p: p.stem)
def test_the_candidates_of_the_programs_are_the_rules_picks(path):
    from ncsim.runtime.verify import candidates

    prog = Program.from_object(assemble(path.read_text(), str(path)), str(path))
    assert candidates(prog, DEFAULT).tolist() == reference_candidates(prog, DEFAULT)


def test_a_semaphore_the_configuration_lacks_is_found(tmp_path):
    """Two memsets of one body but for the semaphore they signal: the second's the core lacks."""
    src = ".sync manual\n.sbuf t f32[128, 8]\nmemset t, 0.0, signal=[s1+=1]\nmemset t, 0.0, signal=[s5+=1]\n"
    prog = Program.from_object(assemble(src, "s.s"), "s.s")
    assert len(prog.body_first) == 1
    with pytest.raises(SimError, match="semaphore s5 does not exist"):
        verify_program(prog, load_config(sets=["semaphores=4"]))


# --- configuration values through the command line -------------------------------------------------


@pytest.mark.parametrize("setting", [
    "pmax=100000000", "sbuf_partition_bytes=1e12", "dma_engines=1e9", "dma_queues_per_engine=1e9",
    "semaphores=1000000000", "hbm_bandwidth=1e-30", "dma_latency_ns=1e18",
])
def test_absurd_settings_are_refused_before_the_run(cli, tmp_path, setting):  # noqa: F811
    write(tmp_path, "add.s", ADD)
    start = time.perf_counter()
    res = cli("run", "add.s", "--set", setting)
    assert time.perf_counter() - start < 30  # semaphores=1e9 used to hang
    no_crash(res)
    name = setting.split("=")[0]
    assert res.code == 1 and f"error: {name} = " in res.err and "outside its valid range" in res.err, res.err
    assert res.out == ""  # refused before anything ran


def test_a_negative_seed_is_an_error(cli, tmp_path):  # noqa: F811
    write(tmp_path, "add.s", ADD)  # no sidecar: the seed goes to the random inputs
    res = cli("run", "add.s", "--seed", "-1")
    no_crash(res)
    assert res.code == 1 and "seed -1: a seed is a non-negative integer" in res.err
    with pytest.raises(NcsimError, match="seed -1"):
        ncsim.run(Path("add.s"), seed=-1)


def test_a_config_file_that_is_not_utf8_is_named(cli, tmp_path):  # noqa: F811
    write(tmp_path, "add.s", ADD)
    (tmp_path / "hw.toml").write_bytes("# r\xe9glage\ndma_engines = 8\n".encode("latin-1"))
    res = cli("run", "add.s", "--config", "hw.toml")
    no_crash(res)
    assert res.code == 1 and "hw.toml: error: not UTF-8 text" in res.err


def test_a_second_config_file_merges_over_the_first(cli, tmp_path):  # noqa: F811
    (tmp_path / "a.toml").write_text("dma_engines = 8\nhbm_bandwidth = 820e9\n")
    (tmp_path / "b.toml").write_text("dma_engines = 4\n")
    res = cli("config", "--config", "a.toml", "--config", "b.toml")
    assert res.code == 0, res.err
    lines = {line.split()[1]: line for line in res.out.splitlines() if line.startswith("* ")}
    assert " 4 " in lines["dma_engines"] and "820 GB/s" in lines["hbm_bandwidth"]


def test_ncsim_config_shows_the_ranges(cli):  # noqa: F811
    res = cli("config")
    assert res.code == 0 and "valid range" in res.out
    assert any(line.split()[:5] == ["semaphores", "256", "1", "to", "256"] for line in res.out.splitlines())


# --- exit status --------------------------------------------------------------------------------------


def test_a_racy_program_whose_outputs_differ_exits_4_and_prints_both(cli, tmp_path):  # noqa: F811
    write(tmp_path, "r.s", RACY)
    write(tmp_path, "r.py", "import numpy as np\n\ndef reference(x):\n    return {'y': x + x + 1}\n")
    res = cli("run", "r.s")
    no_crash(res)
    assert res.code == 4, (res.code, res.out, res.err)
    assert "MISMATCH" in res.out
    assert "error: race on sbuf" in res.err


def test_a_mismatch_without_a_race_still_exits_3(cli, tmp_path):  # noqa: F811
    write(tmp_path, "add.s", ADD)
    write(tmp_path, "add.py", SIDECAR.replace('"z": y * y', '"z": y'))
    assert cli("run", "add.s").code == 3
