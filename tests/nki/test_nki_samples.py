"""Opt-in: the unmodified tutorial kernel files of a local checkout of aws-neuron/nki-samples, run
with `ncsim nki` (NKI_SAMPLES=/path/to/nki-samples pytest tests/nki). Skipped when NKI_SAMPLES is
unset. Each script's own check (NKI against numpy) must pass; the simulated latency of the kernels
in tests/nki/published_latencies.toml that name a script is printed beside the published one (docs/nki.md)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = os.environ.get("NKI_SAMPLES")
TUTORIALS = Path(SAMPLES or ".") / "src" / "nki_samples" / "tutorials"
PUBLISHED = tomllib.loads((Path(__file__).parent / "published_latencies.toml").read_text())

pytestmark = pytest.mark.skipif(not SAMPLES, reason="NKI_SAMPLES (a checkout of aws-neuron/nki-samples) is not set")

# The tutorial scripts in the 2.2x dialect whose __main__ checks NKI against numpy, and what it prints
# when they agree.
SCRIPTS = {
    "tensor_addition/tensor_addition_nki_kernels.py": "NKI and NumPy match",
    "tensor_addition/spmd_tensor_addition_nki_kernels.py": "NKI and NumPy match",
    "transpose2d/transpose2d_nki_kernels.py": "NKI and NumPy match",
    "average_pool2d/average_pool2d_nki_kernels.py": "NKI and NumPy match",
    "fused_mamba/mamba_nki_kernels.py": "mamba v3 matches? True",
}


def _ncsim_nki(script: Path, args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "ncsim"), "nki", str(script), *args], check=False,
                          capture_output=True, text=True, cwd=ROOT, timeout=600)


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_tutorial_script_runs_unmodified(script):
    path = TUTORIALS / script
    assert path.is_file(), f"{path} is missing from the checkout"
    done = _ncsim_nki(path, [])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert SCRIPTS[script] in done.stdout
    assert "differ" not in done.stdout and "False" not in done.stdout


@pytest.mark.parametrize("name", sorted(n for n, e in PUBLISHED.items() if "script" in e))
def test_simulated_beside_published_latency(name):
    entry = PUBLISHED[name]
    done = _ncsim_nki(TUTORIALS / entry["script"], list(entry["args"]))
    assert done.returncode == 0, done.stderr[-2000:]
    got = re.search(rf"kernel {entry['kernel']}: \d+ instructions, ([0-9.]+) µs simulated", done.stderr)
    assert got, done.stderr[-2000:]
    simulated = float(got.group(1))
    print(f"{name}: simulated {simulated:.1f} µs, published {entry['published_us']} µs ({entry['source']})")
    assert simulated > 0
