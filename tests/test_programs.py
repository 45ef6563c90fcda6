"""Every program in programs/ assembles to a stable object (tests/golden/programs.json), computes its
sidecar's reference bit for bit, and takes a recorded simulated time (tests/golden/runs.json).

A change to the encoding, the language, automatic synchronisation, an instruction's arithmetic or the
cost model shows up as a diff of those files: refresh them with
`pytest tests/test_programs.py --refresh-golden` and review the diff.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from ncsim.asm.assembler import assemble
from ncsim.asm.elf import read_elf, write_elf

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = sorted((ROOT / "programs").glob("*.s"))
GOLDEN = Path(__file__).resolve().parent / "golden" / "programs.json"


def build(path: Path) -> bytes:
    # the name relative to the project, so the line table does not depend on where the clone lives
    return write_elf(assemble(path.read_text(), f"programs/{path.name}"))


def record(data: bytes) -> dict:
    obj = read_elf(data, "golden")
    return {
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
        "instructions": {e: len(v) for e, v in obj.lines.items() if v},
        "tensors": [f"{t.name} {t.memory} {t.dtype.short}{list(t.shape)} {t.kind} @{t.partition}:{t.address}"
                    for t in obj.tensors],
    }


def test_golden_records(request):
    current = {p.stem: record(build(p)) for p in PROGRAMS}
    if request.config.getoption("--refresh-golden"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
    golden = json.loads(GOLDEN.read_text())
    assert sorted(golden) == sorted(current), "programs added or removed: refresh with --refresh-golden"
    for name, rec in current.items():
        assert rec == golden[name], f"{name}.s assembles differently: refresh with --refresh-golden"


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_assembly_is_deterministic(path):
    assert build(path) == build(path)


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_sidecar_matches_the_declared_tensors(path):
    sidecar = path.with_suffix(".py")
    assert sidecar.exists(), f"{path.name} has no sidecar {sidecar.name}"
    spec = importlib.util.spec_from_file_location(f"sidecar_{path.stem}", sidecar)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    obj = read_elf(build(path), path.name)
    ins = {t.name: t for t in obj.tensors if t.kind in ("in", "inout")}
    outs = {t.name: t for t in obj.tensors if t.kind in ("out", "inout")}
    inputs = module.inputs(0)
    assert set(inputs) == set(ins)
    for name, array in inputs.items():
        assert array.shape == ins[name].shape and array.dtype == ins[name].dtype.storage, name
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(inputs.values(), module.inputs(0).values()))
    expected = module.reference(**inputs)
    assert set(expected) == set(outs)
    for name, array in expected.items():
        assert array.shape == outs[name].shape and array.dtype == outs[name].dtype.storage, name


# --- runs: every program computes its reference bit for bit, in a recorded simulated time ----------------

RUNS = Path(__file__).resolve().parent / "golden" / "runs.json"


def run_record(path: Path) -> dict:
    import ncsim

    result = ncsim.run(path, seed=0)
    assert result.check is not None, f"{path.name}: its sidecar has no reference"
    assert result.check.ok, f"{path.name}:\n" + result.check.report()
    return {
        "simulated_ticks": int(result.timing.total_ticks),
        "simulated_ns": round(result.timing.total_ns, 1),
        "outputs_sha256": {name: hashlib.sha256(a.tobytes()).hexdigest() for name, a in result.outputs.items()},
    }


def test_golden_runs(request, monkeypatch):
    """Outputs (by hash) and simulated time of every program on its sidecar's inputs (seed 0). A change
    of the cost model or of an instruction's arithmetic shows here as a diff to review:
    refresh with `pytest tests/test_programs.py --refresh-golden`."""
    monkeypatch.chdir(ROOT)  # programs are named as a user names them, so errors read the same
    current = {p.stem: run_record(Path("programs") / p.name) for p in PROGRAMS}
    if request.config.getoption("--refresh-golden"):
        RUNS.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
    golden = json.loads(RUNS.read_text())
    assert sorted(golden) == sorted(current), "programs added or removed: refresh with --refresh-golden"
    for name, rec in current.items():
        assert rec == golden[name], f"{name}.s runs differently: refresh with --refresh-golden and review"
