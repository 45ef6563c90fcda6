"""`ncsim.run` and `ncsim run`: inputs from files, sidecars or a seed; outputs saved; the bit-exact
check and its mismatch report; clear errors for bad inputs, broken rules and deadlocks; progress bars
on a terminal only."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ncsim
from ncsim import progress
from ncsim.errors import DeadlockError, InputError, NcsimError, SimError
from tests.asm.conftest import cli  # noqa: F401 - the fixture
from tests.test_startup import NCSIM, run_in_pty

# y = x1 + x2 elementwise, then z = y * y: two tiles of 128 rows.
ADD = """\
.kernel add
.hbm x1 f32[256, 64] in
.hbm x2 f32[256, 64] in
.hbm y  f32[256, 64] out
.hbm z  f32[256, 64] out
.sbuf a f32[128, 64]
.sbuf b f32[128, 64]
.sbuf s f32[128, 64]
.for i in 0..2
  dma_copy a, x1[i*128 : i*128 + 128, :]
  dma_copy b, x2[i*128 : i*128 + 128, :], queue=1
  tensor_tensor s, a, b, add
  dma_copy y[i*128 : i*128 + 128, :], s, queue=2
  tensor_tensor s, s, s, multiply
  dma_copy z[i*128 : i*128 + 128, :], s, queue=2
.end
"""

SIDECAR = """\
import numpy as np

def inputs(seed):
    rng = np.random.default_rng(seed)
    return {"x1": rng.standard_normal((256, 64), dtype=np.float32),
            "x2": rng.standard_normal((256, 64), dtype=np.float32)}

def reference(x1, x2):
    y = x1 + x2
    return {"y": y, "z": y * y}
"""


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    """Each test runs in its own directory, so programs are named as a user would name them."""
    monkeypatch.chdir(tmp_path)


def write(tmp_path: Path, name: str, text: str) -> Path:
    (tmp_path / name).write_text(text)
    return Path(name)


def test_run_with_sidecar_is_bit_exact(tmp_path):
    prog = write(tmp_path, "add.s", ADD)
    write(tmp_path, "add.py", SIDECAR)
    result = ncsim.run(prog)
    assert result.check is not None and result.check.ok
    assert result.check.report() == "bit-exact: 32768 of 32768 elements (y, z)"
    x1, x2 = result.inputs["x1"], result.inputs["x2"]
    assert np.array_equal(result.outputs["y"], x1 + x2)
    assert result.input_origin == {"x1": "sidecar (seed 0)", "x2": "sidecar (seed 0)"}
    assert result.warnings == []


def test_inputs_given_as_arrays_and_files(tmp_path):
    prog = write(tmp_path, "add.s", ADD)
    x1 = np.arange(256 * 64, dtype=np.float32).reshape(256, 64)
    np.save(tmp_path / "x2.npy", np.ones((256, 64), np.float32))
    result = ncsim.run(prog, {"x1": x1, "x2": tmp_path / "x2.npy"})
    assert result.check is None  # no sidecar, nothing to check against
    assert np.array_equal(result.outputs["y"], x1 + 1)
    assert result.input_origin["x2"].startswith("file ")


def test_random_inputs_are_seeded(tmp_path):
    prog = write(tmp_path, "add.s", ADD)
    a, b, c = ncsim.run(prog, seed=1), ncsim.run(prog, seed=1), ncsim.run(prog, seed=2)
    assert np.array_equal(a.outputs["z"], b.outputs["z"])
    assert not np.array_equal(a.outputs["z"], c.outputs["z"])
    assert a.input_origin["x1"] == "random (seed 1)"


def test_a_wrong_reference_gives_a_mismatch_report(tmp_path):
    prog = write(tmp_path, "add.s", ADD)
    write(tmp_path, "add.py", SIDECAR.replace('"z": y * y', '"z": np.where(y > 2, y * y + 1, y * y)'))
    result = ncsim.run(prog)
    assert not result.check.ok
    report = result.check.report()
    n = int(np.count_nonzero(result.outputs["y"] > 2))
    assert report.startswith(f"MISMATCH: {n} of 32768 elements differ from the reference")
    assert "y (f32): bit-exact" in report
    assert re.search(rf"z \(f32\): {n} of 16384 differ; largest distance \d+ ulp", report)
    first = result.check.outputs[1].first[0]
    i = first.index
    assert first.got == float(result.outputs["z"][i]) and first.expected == first.got + 1


@pytest.mark.parametrize(("value", "message"), [
    (np.zeros((256, 64), np.float64), "has dtype float64, but the kernel declares f32[256, 64]"),
    (np.zeros((128, 64), np.float32), "has shape [128, 64], but the kernel declares f32[256, 64]"),
])
def test_bad_inputs_are_clear_errors(tmp_path, value, message):
    prog = write(tmp_path, "add.s", ADD)
    with pytest.raises(InputError) as e:
        ncsim.run(prog, {"x1": value})
    assert message in str(e.value)


def test_unknown_and_unreadable_inputs(tmp_path):
    prog = write(tmp_path, "add.s", ADD)
    with pytest.raises(InputError, match=r"no input named 'w' \(its inputs: x1, x2\)"):
        ncsim.run(prog, {"w": np.zeros(3)})
    (tmp_path / "bad.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(InputError, match="not a readable .npy file"):
        ncsim.run(prog, {"x1": tmp_path / "bad.npy"})
    with pytest.raises(InputError, match="no such file"):
        ncsim.run(prog, {"x1": tmp_path / "missing.npy"})


def test_narrow_float_inputs_from_npy(tmp_path):
    src = """\
.hbm x bf16[128, 8] in
.hbm y bf16[128, 8] out
.sbuf t bf16[128, 8]
dma_copy t, x
tensor_tensor t, t, t, add
dma_copy y, t
"""
    prog = write(tmp_path, "b.s", src)
    x = np.linspace(-4, 4, 1024, dtype=np.float32).reshape(128, 8).astype(ml_dtypes.bfloat16)
    np.save(tmp_path / "raw.npy", x)  # numpy writes bf16 as raw 'V2' bytes
    np.save(tmp_path / "f32.npy", x.astype(np.float32))  # or as float32 values bf16 holds exactly
    for f in ("raw.npy", "f32.npy"):
        out = ncsim.run(prog, {"x": tmp_path / f}).outputs["y"]
        assert out.dtype == ml_dtypes.bfloat16 and np.array_equal(out, x + x)
    np.save(tmp_path / "inexact.npy", np.full((128, 8), 0.1, np.float32))
    with pytest.raises(InputError, match="bf16 cannot hold exactly"):
        ncsim.run(prog, {"x": tmp_path / "inexact.npy"})


def test_deadlock_names_the_waiting_engine(tmp_path):
    src = """\
.sync manual
.sbuf t f32[128, 8]
memset t, 0.0, wait=[s3>=1]
sem_wait s4>=2, engine=scalar
"""
    prog = write(tmp_path, "d.s", src)
    with pytest.raises(DeadlockError) as e:
        ncsim.run(prog)
    text = e.value.format()
    assert text.startswith("d.s:3:1: error: deadlock: 2 engines wait")
    assert "vector engine waits at d.s:3:1: memset needs s3>=1 (s3 is 0)" in text
    assert "scalar engine waits at d.s:4:1: sem_wait needs s4>=2 (s4 is 0)" in text


def test_reading_unwritten_memory_warns_with_the_source_line(tmp_path):
    src = """\
.hbm y f32[128, 4] out
.sbuf t f32[128, 4]
.sbuf u f32[128, 4]
tensor_tensor u, t, t, add
dma_copy y, u
"""
    prog = write(tmp_path, "w.s", src)
    result = ncsim.run(prog)
    assert np.isnan(result.outputs["y"]).all()
    assert result.warnings == [("w.s:4:1: warning: tensor_tensor reads 512 elements of 'data1' that nothing wrote;"
                               " they read as the sentinel (NaN for floats)"),
                               ("w.s:4:1: warning: tensor_tensor reads 512 elements of 'data2' that nothing wrote;"
                               " they read as the sentinel (NaN for floats)")]


def test_object_is_checked_against_the_run_config(tmp_path, cli):  # noqa: F811 - the fixture
    write(tmp_path, "t.s", ".sbuf t u8[128, 1024] @0:170000\nmemset t, 1\n")
    assert cli("asm", "t.s").code == 0
    res = cli("run", "t.o", "--set", "sbuf_reserved_bytes=32768")
    assert res.code == 1
    assert "error: tile 't' needs bytes 170000..171024 of each partition" in res.err


def test_cli_run_saves_and_checks(cli, tmp_path):  # noqa: F811
    write(tmp_path, "add.s", ADD)
    write(tmp_path, "add.py", SIDECAR)
    res = cli("run", "add.s")
    assert res.code == 0, res.err
    assert "inputs: x1, x2 from sidecar (seed 0)" in res.out
    assert "outputs: y float32[256, 64], z float32[256, 64] -> add.npz" in res.out
    assert "bit-exact: 32768 of 32768 elements (y, z)" in res.out
    saved = np.load(tmp_path / "add.npz")
    assert sorted(saved.files) == ["y", "z"]
    res = cli("run", "add.s", "--out", "o.npz", "--seed", "3", "-i", "x1=add.npz")
    assert res.code == 1 and "the .npz holds ['y', 'z'], none named 'x1'" in res.err


def test_cli_run_of_a_source_never_encodes_it_again(cli, tmp_path, monkeypatch):  # noqa: F811
    """The assembler's program keeps no words (ncsim.program); saving the outputs, the trace and the
    timeline take the tensors and the kernel's name from the program instead of asking for an object,
    which encoded every instruction again (two of ncsim run giou.s --trace's kernel loads)."""
    from ncsim.program import Program

    def refuse(self):
        raise AssertionError("encoded again")

    monkeypatch.setattr(Program, "encoded", refuse)
    write(tmp_path, "add.s", ADD)
    write(tmp_path, "add.py", SIDECAR)
    res = cli("run", "add.s", "--trace", "--timeline", "add.png")
    assert res.code == 0, res.err
    assert sorted(np.load(tmp_path / "add.npz").files) == ["y", "z"]
    meta = json.loads((tmp_path / "add.trace.json").read_text())["otherData"]
    assert meta["kernel"] == "add" and (tmp_path / "add.png").stat().st_size > 0


def test_cli_mismatch_exits_3(cli, tmp_path):  # noqa: F811
    write(tmp_path, "add.s", ADD)
    write(tmp_path, "add.py", SIDECAR.replace('"z": y * y', '"z": y'))
    res = cli("run", "add.s")
    assert res.code == 3
    assert "MISMATCH" in res.out


@pytest.mark.parametrize(("args", "message"), [
    (["-i", "x1"], "--input takes NAME=FILE.npy, not 'x1'"),
    (["-i", "x1=a.npy", "-i", "x1=b.npy"], "--input gives 'x1' twice"),
    (["-i", "x1=missing.npy"], "input 'x1': no such file"),
])
def test_cli_bad_input_options(cli, tmp_path, args, message):  # noqa: F811
    write(tmp_path, "add.s", ADD)
    res = cli("run", "add.s", *args)
    assert res.code == 1 and message in res.err and "Traceback" not in res.err


def test_sidecar_that_raises_is_reported_as_the_sidecars(tmp_path):
    prog = write(tmp_path, "add.s", ADD)
    write(tmp_path, "add.py", "def inputs(seed):\n    raise RuntimeError('boom')\n")
    with pytest.raises(NcsimError, match=r"the sidecar's inputs\(\) failed: RuntimeError: boom"):
        ncsim.run(prog)


def test_rule_error_is_placed(tmp_path):
    src = ".hbm x f32[128, 8] in\n.sbuf t f32[128, 4]\ndma_copy t, x\n"
    with pytest.raises(NcsimError) as e:
        ncsim.run(write(tmp_path, "r.s", src))
    assert e.value.format().startswith("r.s:3:1: error: dma_copy: 'dst' has 512 elements")


def test_runtime_rule_error_is_placed(tmp_path):
    """An offset read at run time is only known to the functional run."""
    src = """\
.sbuf t f32[128, 8]
.sbuf i i32[1, 1]
memset t, 1.0
memset i, 100000
tensor_copy_dynamic_src t, t, i
"""
    with pytest.raises(SimError) as e:
        ncsim.run(write(tmp_path, "r.s", src))
    assert e.value.format().startswith("r.s:5:1: error: tensor_copy_dynamic_src: 'index' holds offset 100000")


# --- timing: the report, the trace, the timeline, races -------------------------------------------------

def test_cli_run_reports_and_writes_trace_and_timeline(cli, tmp_path):  # noqa: F811
    write(tmp_path, "add.s", ADD)
    write(tmp_path, "add.py", SIDECAR)
    res = cli("run", "add.s", "--trace", "--timeline", "add.png")
    assert res.code == 0, res.err
    assert "timing report: add.s (kernel add)" in res.out
    assert re.search(r"^verdict  bound by ", res.out, re.MULTILINE), res.out
    assert "trace: add.trace.json (" in res.out and "timeline: add.png" in res.out
    trace = json.loads((tmp_path / "add.trace.json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"tensor_tensor", "dma_copy"} <= names
    assert (tmp_path / "add.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = cli("run", "add.s", "--trace", "named.json")
    assert res.code == 0 and (tmp_path / "named.json").exists()


def test_trace_is_identical_when_repeated(cli, tmp_path):  # noqa: F811
    write(tmp_path, "add.s", ADD)
    assert cli("run", "add.s", "--trace", "a.json").code == 0
    assert cli("run", "add.s", "--trace", "b.json").code == 0
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_timing_only(cli, tmp_path):  # noqa: F811
    write(tmp_path, "add.s", ADD)
    res = cli("run", "add.s", "--timing-only")
    assert res.code == 0, res.err
    assert "(--timing-only: no values)" in res.out and "verdict" in res.out
    assert not (tmp_path / "add.npz").exists()
    res = cli("run", "add.s", "--timing-only", "-i", "x1=x.npy")
    assert res.code == 1 and "--timing-only computes no values" in res.err
    result = ncsim.run(Path("add.s"), values=False)
    assert result.outputs == {} and result.machine is None and result.timing.total_ticks > 0


RACY = """\
.sync manual
.hbm x f32[128, 64] in
.hbm y f32[128, 64] out
.sbuf a f32[128, 64]
.sbuf b f32[128, 64]
dma_copy a, x, signal=[s1+=1]
tensor_tensor b, a, a, add
dma_copy y, b, wait=[s1>=1]
"""


def test_a_race_is_reported_and_exits_4(cli, tmp_path):  # noqa: F811
    write(tmp_path, "r.s", RACY)
    result = ncsim.run(Path("r.s"))
    assert result.races and result.races.total >= 1
    res = cli("run", "r.s")
    assert res.code == 4
    # the functional run happened to run the read first (it reads unwritten memory): a race's values
    # depend on timing; the race report names both lines
    assert "r.s:6:1: error: race on sbuf partitions 0..127" in res.err, res.err
    assert "note: r.s:7:1: tensor_tensor b, a, a, add" in res.err
    # ordered by the semaphore, it is race-free
    fixed = RACY.replace("tensor_tensor b, a, a, add", "tensor_tensor b, a, a, add, wait=[s1>=1], signal=[s2+=1]")
    fixed = fixed.replace("dma_copy y, b, wait=[s1>=1]", "dma_copy y, b, wait=[s2>=1]")
    write(tmp_path, "ok.s", fixed)
    assert not ncsim.run(Path("ok.s")).races
    assert cli("run", "ok.s").code == 0


def test_deadlock_is_reported_with_simulated_time(tmp_path):
    src = ".sync manual\n.sbuf t f32[128, 8]\nmemset t, 0.0\nsem_wait s4>=1, engine=scalar\n"
    with pytest.raises(DeadlockError) as e:
        ncsim.run(write(tmp_path, "d.s", src))
    assert "at simulated time" in e.value.format()


# --- progress bars --------------------------------------------------------------------------------

class Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_progress_bar_shows_after_its_delay_and_is_erased():
    term = Terminal()
    with progress.enable_bars(True):
        with progress.Progress(100, "simulating k.s", unit="instr", stream=term, delay=0) as bar:
            bar.update(40)
            bar.set(50)
            shown = term.getvalue()
        assert "simulating k.s:" in shown and "instr" in shown
        assert term.getvalue().endswith("\r")  # erased: the line is blank again
        quick = Terminal()
        with progress.Progress(None, "assembling", stream=quick, delay=30) as bar:
            bar.update()
        assert quick.getvalue() == ""  # a step quicker than the delay prints nothing


def test_progress_bar_is_off_from_python_in_a_pipe_and_when_quiet(capsys):
    term = Terminal()
    with progress.Progress(10, "x", stream=term, delay=0) as bar:  # ncsim used from Python: off
        bar.update(5)
    with progress.enable_bars(False), progress.Progress(10, "x", stream=term, delay=0) as bar:  # --quiet
        bar.update(5)
    with progress.enable_bars(True), progress.Progress(10, "x", stream=io.StringIO(), delay=0) as bar:  # a pipe
        assert not bar.enabled
    assert term.getvalue() == ""
    progress.write("a line")
    assert capsys.readouterr().err == "a line\n"


def test_progress_delay_from_the_environment(monkeypatch):
    monkeypatch.setenv("NCSIM_PROGRESS_DELAY", "0.5")
    assert progress.delay_seconds() == 0.5
    monkeypatch.setenv("NCSIM_PROGRESS_DELAY", "soon")
    assert progress.delay_seconds() == progress.DEFAULT_DELAY


def test_run_shows_bars_on_a_terminal_but_not_quiet_or_in_a_pipe(tmp_path):
    write(tmp_path, "add.s", ADD)
    env = dict(os.environ, NCSIM_PROGRESS_DELAY="0")  # every step "long"
    code, shown = run_in_pty(["run", "add.s"], tmp_path, env)
    assert code == 0, shown
    for step in ("assembling add.s: ", "timing add.s: ", "simulating add.s: "):
        assert step in shown, shown
    code, shown = run_in_pty(["run", "add.s", "--timing-only"], tmp_path, env)
    assert code == 0 and "timing add.s: " in shown and "simulating" not in shown, shown
    code, shown = run_in_pty(["run", "add.s", "--quiet"], tmp_path, env)
    assert (code, shown) == (0, "")
    done = subprocess.run([str(NCSIM), "run", "add.s"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr


HEAP_PROBE = """
import sys
from ncsim.runtime import heap
calls = []
heap.keep_freed_memory = lambda: calls.append(1)
if sys.argv[1] == "library":
    import ncsim
    ncsim.run(sys.argv[2], values=False)
else:
    from ncsim.cli import main
    sys.argv = ["ncsim", *sys.argv[1:]]
    try:
        main()
    except SystemExit as e:
        assert not e.code, e.code
print(len(calls))
"""


@pytest.mark.parametrize("how", ["run", "sweep", "nki", "library"])
def test_the_ncsim_command_keeps_the_memory_its_phases_free(tmp_path, how):
    """`ncsim run`, `ncsim sweep` and `ncsim nki` ask glibc to keep freed memory for the next phase
    (ncsim.runtime.heap); ncsim used as a library leaves the process's malloc alone."""
    write(tmp_path, "add.s", ADD)
    (tmp_path / "k.py").write_text("print('no kernel')\n")
    args = {"run": ["run", "add.s", "--timing-only", "-q"], "library": ["library", "add.s"],
            "sweep": ["sweep", "add.s", "--grid", "hbm_bandwidth=205e9",
                      "--workers", "1", "--no-cache", "-q", "--out", "s.csv"],
            "nki": ["nki", "-q", "k.py"]}[how]
    import sys

    done = subprocess.run([sys.executable, "-c", HEAP_PROBE, *args], check=False, cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == ("0" if how == "library" else "1")


def test_the_ncsim_commands_memory_policy_turns_numpys_huge_page_advice_off():
    """keep_freed_memory (what `ncsim run`, `nki` and `sweep` call) also turns off numpy's huge-page
    advice, whose synchronous compaction cost the 10^6-instruction timing-only path 0.84 s against
    0.53 s (ncsim.runtime.heap); a process that only imports ncsim keeps numpy's default."""
    import sys

    probe = ("import numpy as np\nfrom ncsim.runtime import heap\nswitch = heap._huge_pages_switch()\n"
             "if switch is None: print('none')\nelse:\n    before = switch(True); switch(before)\n"
             "    {call}\n    print(before, switch(True))\n")
    outs = [subprocess.run([sys.executable, "-c", probe.format(call=call)], check=False, capture_output=True,
                           text=True, timeout=120) for call in ("pass", "heap.keep_freed_memory()")]
    assert all(o.returncode == 0 for o in outs), [o.stderr for o in outs]
    if outs[0].stdout.strip() == "none":
        pytest.skip("this numpy has no switch for its huge-page advice")
    assert outs[0].stdout.split() == ["True", "True"]  # numpy's default, left alone
    assert outs[1].stdout.split() == ["True", "False"]  # turned off
