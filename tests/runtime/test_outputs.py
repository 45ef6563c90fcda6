"""`ncsim run`'s outputs and what it refuses before running: --trace's value, --timeline's formats,
output paths checked first, the trace and timeline of a deadlocked run, `.sem` names in the deadlock
report, sidecars that exit or give unknown inputs, `-i NAME=DIR`, and NaN in the mismatch report."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import ncsim
from ncsim import dtypes
from ncsim.asm.objfile import TensorEntry
from ncsim.errors import DeadlockError, InputError
from ncsim.runtime.check import compare
from tests.asm.conftest import cli  # noqa: F401 - the fixture

RELU = """\
.hbm x f32[128, 64] in
.hbm y f32[128, 64] out
.sbuf t f32[128, 64]
dma_copy t, x
tensor_scalar t, t, maximum, 0.0
dma_copy y, t
"""

# The DMA and the first memset run; the second memset waits on a named semaphore nothing signals,
# and the Scalar engine on s4.
DEADLOCK = """\
.sync manual
.hbm x f32[128, 8] in
.sbuf t f32[128, 8]
.sem ready
dma_copy t, x, signal=[s1+=1]
memset t, 0.0, wait=[s1>=1]
memset t, 1.0, wait=[ready>=1]
sem_wait s4>=2, engine=scalar
"""


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def write(name: str, text: str) -> Path:
    Path(name).write_text(text)
    return Path(name)


# --- --trace and --timeline ----------------------------------------------------------------------

def test_trace_before_the_program_does_not_take_it(cli):  # noqa: F811
    write("relu.s", RELU)
    res = cli("run", "--trace", "relu.s")
    assert res.code == 0, res.err
    assert "trace: relu.trace.json (" in res.out and Path("relu.trace.json").is_file()
    assert not Path("relu.s.trace.json").exists() and Path("relu.s").read_text() == RELU
    # a .json after --trace is its file; --trace=FILE names any file; the program may come first too
    assert cli("run", "--trace", "t1.json", "relu.s").code == 0 and Path("t1.json").is_file()
    assert cli("run", "--trace=t2.trace", "relu.s").code == 0 and Path("t2.trace").is_file()
    assert cli("run", "relu.s", "--trace").code == 0
    json.loads(Path("t2.trace").read_text())


@pytest.mark.parametrize(("suffix", "magic"), [(".svg", b"<?xml"), (".pdf", b"%PDF"), (".PNG", b"\x89PNG")])
def test_timeline_writes_the_format_of_its_extension(cli, suffix, magic):  # noqa: F811
    write("relu.s", RELU)
    assert cli("run", "relu.s", "--timeline", f"a{suffix}").code == 0
    assert Path(f"a{suffix}").read_bytes().startswith(magic)
    assert cli("run", "relu.s", "--timeline", f"b{suffix}").code == 0
    assert Path(f"a{suffix}").read_bytes() == Path(f"b{suffix}").read_bytes()  # no dates, no random ids


def test_timeline_of_another_format_is_an_error_before_the_run(cli):  # noqa: F811
    write("relu.s", RELU)
    res = cli("run", "relu.s", "--timeline", "a.jpg")
    assert res.code == 1 and res.out == ""
    assert res.err.strip() == "a.jpg: error: --timeline draws .png, .svg, .pdf pictures, by the file's extension;" \
                              " not '.jpg'"


@pytest.mark.parametrize(("option", "path", "why"), [
    ("--out", "nodir/y.npz", "--out: no directory 'nodir' to write it in"),
    ("--trace=", "nodir/t.json", "--trace: no directory 'nodir' to write it in"),
    ("--timeline", "nodir/t.png", "--timeline: no directory 'nodir' to write it in"),
    ("--out", "adir", "--out: is a directory, not a file"),
    ("--trace=", "adir", "--trace: is a directory, not a file"),
    ("--timeline", "adir", "--timeline: is a directory, not a file"),
])
def test_output_paths_are_checked_before_the_run(cli, option, path, why):  # noqa: F811
    write("relu.s", RELU)
    Path("adir").mkdir()
    args = [option + path] if option.endswith("=") else [option, path]
    res = cli("run", "relu.s", *args)
    assert res.code == 1 and res.out == "", res.out  # nothing ran: no report, no outputs
    assert res.err.strip() == f"{path}: error: {why}"
    assert not Path("relu.npz").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_unwritable_directory_is_refused(cli):  # noqa: F811
    write("relu.s", RELU)
    Path("ro").mkdir(mode=0o555)
    res = cli("run", "relu.s", "--out", "ro/y.npz")
    assert res.code == 1 and "--out: cannot write it (permission denied)" in res.err


# --- deadlocks ---------------------------------------------------------------------------------------

def test_a_deadlocked_run_writes_its_trace_and_timeline_up_to_the_deadlock(cli):  # noqa: F811
    write("d.s", DEADLOCK)
    res = cli("run", "--trace", "d.s", "--timeline", "d.png")
    assert res.code == 1
    assert "error: deadlock: 2 engines wait" in res.err
    assert "trace (up to the deadlock): d.trace.json (" in res.out
    assert "timeline (up to the deadlock): d.png" in res.out
    assert Path("d.png").read_bytes()[:4] == b"\x89PNG"
    events = json.loads(Path("d.trace.json").read_text())["traceEvents"]
    slices = [e for e in events if e.get("ph") == "X" and "instr" in e.get("args", {})]
    # what ran (the DMA and the first memset), not the two instructions that wait
    assert {e["args"]["instr"] for e in slices} == {"sync[0]", "vector[0]"}


def test_the_partial_timing_is_the_schedule_up_to_the_deadlock():
    write("d.s", DEADLOCK)
    with pytest.raises(DeadlockError) as e:
        ncsim.run("d.s")
    partial = e.value.partial()
    assert partial.count == 2 and [partial.mnemonic(k) for k in range(2)] == ["memset", "dma_copy"]
    # its end is the time at which the deadlock was found
    assert f"at simulated time {partial.total_ns:.1f} ns ({partial.total_ticks} ticks)" in e.value.format()
    assert partial.start[0] >= partial.done[1]  # the memset waited for the DMA


def test_the_partial_timing_of_a_program_given_as_instructions():
    from ncsim.asm.assembler import assemble
    from ncsim.asm.disasm import decode_object
    from ncsim.runtime.timing import time_program

    with pytest.raises(DeadlockError) as e:
        time_program(decode_object(assemble(DEADLOCK, "d.s")))
    partial = e.value.partial()
    assert partial.count == 2 and partial.obj is None


def test_the_deadlock_report_names_semaphores_by_their_sem_names():
    write("d.s", DEADLOCK)
    for timing in (True, False):  # the timing model's report, and the functional machine's
        with pytest.raises(DeadlockError) as e:
            ncsim.run("d.s", timing=timing)
        text = e.value.format()
        assert "vector engine waits at d.s:7:1: memset needs ready>=1 (ready, s0, is 0)" in text, text
        assert "scalar engine waits at d.s:8:1: sem_wait needs s4>=2 (s4 is 0)" in text


def test_a_deadlocked_object_names_its_semaphores(cli):  # noqa: F811
    write("d.s", DEADLOCK)
    assert cli("asm", "d.s", "-o", "d.o").code == 0
    res = cli("run", "d.o")
    assert res.code == 1
    assert "vector engine waits at d.s:7:1: memset needs ready>=1 (ready, s0, is 0)" in res.err, res.err
    assert "sem_wait needs s4>=2 (s4 is 0)" in res.err


# --- sidecars and inputs -----------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "what"), [
    ("import sys\nsys.exit(0)\n", "the sidecar called sys.exit(0) while it was imported"),
    ("import sys\ndef inputs(seed):\n    sys.exit()\n", "the sidecar's inputs() called sys.exit()"),
    ("import sys\ndef reference(x):\n    sys.exit('done')\n", "the sidecar's reference() called sys.exit('done')"),
])
def test_a_sidecar_that_exits_is_an_error_naming_it(cli, body, what):  # noqa: F811
    write("relu.s", RELU)
    write("relu.py", body)
    with pytest.raises(InputError, match=r"^relu\.py: error: " + what.replace("(", r"\(").replace(")", r"\)")):
        ncsim.run("relu.s")
    res = cli("run", "relu.s")
    assert res.code == 1 and res.err.startswith(f"relu.py: error: {what}"), res.err


def test_inputs_that_the_kernel_does_not_declare_are_an_error():
    write("relu.s", RELU)
    write("relu.py", "import numpy as np\ndef inputs(seed):\n"
                     "    return {'x': np.zeros((128, 64), np.float32), 'w': np.zeros(3), 'y': np.zeros(1)}\n")
    with pytest.raises(InputError) as e:
        ncsim.run("relu.s")
    assert e.value.format() == ("relu.py: error: the sidecar's inputs() gives ['w', 'y'], which are not inputs"
                                " of the kernel (its inputs: x)")


def test_an_input_that_is_a_directory_says_so(cli):  # noqa: F811
    write("relu.s", RELU)
    Path("xs").mkdir()
    res = cli("run", "relu.s", "-i", "x=xs")
    assert res.code == 1 and res.err.strip() == "xs: error: input 'x': is a directory, not a .npy file"


# --- NaN in the mismatch report ----------------------------------------------------------------------

def f32_bits(*bits: int) -> np.ndarray:
    return np.array(bits, np.uint32).view(np.float32)


def check(got: np.ndarray, expected: np.ndarray, dtype: str = "f32") -> str:
    t = TensorEntry("y", "hbm", dtypes.by_name(dtype), got.shape, 0, 0, "out")
    return compare({"y": t}, {"y": got}, {"y": expected}).report()


def test_a_nan_against_a_nan_of_other_bits_is_not_zero_ulp():
    report = check(f32_bits(0x7FC00000, 0x3F800000), f32_bits(0xFFC00000, 0x3F800000))
    assert "0 ulp" not in report
    assert report.splitlines() == [
        "MISMATCH: 1 of 2 elements differ from the reference",
        "  y (f32): 1 of 2 differ; 1 NaN against a NaN of other bits",
        "    index                    expected              got      ulp",
        "    [0]                nan 0xffc00000   nan 0x7fc00000 nan bits",
    ]


def test_the_report_shows_nan_bits_and_each_kind_of_difference():
    got = f32_bits(0x7FC00000, 0x7FC00000, 0x3F800001, 0x7FC00000)
    expected = f32_bits(0x7FA00001, 0x3F800000, 0x3F800000, 0x7FC00000)
    lines = check(got, expected).splitlines()
    assert lines[1] == "  y (f32): 3 of 4 differ; largest distance 1 ulp; 1 NaN against a number;" \
                       " 1 NaN against a NaN of other bits"
    assert lines[3].split() == ["[0]", "nan", "0x7fa00001", "nan", "0x7fc00000", "nan", "bits"]
    assert lines[4].split() == ["[1]", "1", "nan", "0x7fc00000", "nan"]
    assert lines[5].split() == ["[2]", "1", "1.00000012", "1"]


def test_bf16_nan_bits_are_shown_in_their_width():
    import ml_dtypes

    got = np.array([0x7FC0], np.uint16).view(ml_dtypes.bfloat16)
    expected = np.array([0xFFC1], np.uint16).view(ml_dtypes.bfloat16)
    assert check(got, expected, "bf16").splitlines()[-1].split() == ["[0]", "nan", "0xffc1", "nan", "0x7fc0", "nan",
                                                                      "bits"]
