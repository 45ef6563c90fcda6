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


# The directly allocated reference kernels (src/nki_samples/reference/, removed from nki-samples at
# c4b806e: check out c4b806e^ to run these) against the calibration suite's kernels written from their
# algorithms (tools/calibrate/): the same instructions, the same simulated time, and numpy's values.
REFERENCE = Path(SAMPLES or ".") / "src" / "nki_samples" / "reference"


def _load(path: Path, name: str):
    """The unmodified module at `path`, its `import neuronxcc.nki...` lines resolved to ncsim.nki."""
    import importlib.util

    from ncsim.nki.alias import install_alias, remove_alias

    install_alias()  # for the module's imports only
    try:
        spec = importlib.util.spec_from_file_location(f"nki_samples_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        remove_alias()
    return module


def _reference_module(name: str):
    path = REFERENCE / f"{name}.py"
    if not path.is_file():
        pytest.skip(f"{path} is not in this checkout (nki-samples removed its reference kernels at c4b806e)")
    return _load(path, name)


def _as_calibration_kernel(ref, module: str, case: str) -> None:
    """The reference kernel as written makes the same instructions and time as the calibration
    suite's kernel of `module:case`, at that case's arguments."""
    from ncsim import nki

    if str(ROOT / "tools") not in sys.path:
        sys.path.insert(0, str(ROOT / "tools"))
    from calibrate import case as calibrate_case

    kernel, args = calibrate_case(f"{module}:{case}")()
    nki.simulate_kernel(kernel, *args, values=False)
    ours = nki.last_run()
    nki.simulate_kernel(ref, *args, values=False)
    theirs = nki.last_run()
    assert theirs.result.instructions == ours.result.instructions
    assert theirs.latency_us == pytest.approx(ours.latency_us, rel=1e-9)


@pytest.mark.parametrize("case", ["s4096_f32", "s4096_bf16", "s5120_bf16"])
def test_allocated_attention_as_written_runs_as_the_calibration_kernel(case):
    import numpy as np

    ref = _reference_module("allocated_attention").allocated_fused_self_attn_for_SD_small_head_size
    _as_calibration_kernel(ref[1], "sd_attention_allocated", case)
    if case == "s4096_f32":  # values at a smaller shape
        rng = np.random.default_rng(0)
        q, k = (rng.random((1, 128, 1024)).astype(np.float32) for _ in range(2))
        v = rng.random((1, 1024, 128)).astype(np.float32)
        got = ref[1](q, k, v)
        s = 0.125 * q[0].astype(np.float64).T @ k[0]
        p = np.exp(s - s.max(axis=1, keepdims=True))
        np.testing.assert_allclose(got[0], ((p / p.sum(axis=1, keepdims=True)) @ v[0]).T, rtol=0, atol=3e-3)


@pytest.mark.parametrize("case", ["s128_d512_h512_f16", "s512_d1024_h384_bf16", "s128_d1024_h512_bf16"])
def test_allocated_rmsnorm_qkv_as_written_runs_as_the_calibration_kernel(case):
    ref = _reference_module("allocated_fused_linear").allocated_fused_rms_norm_qkv
    _as_calibration_kernel(ref, "rmsnorm_qkv_allocated", case)


@pytest.mark.parametrize("case", ["n1_c64_56_to_7", "n2_c128_28_to_7", "n1_c256_14_to_7_f16", "n1_c512_7_to_1",
                                  "n2_c2048_32_to_3", "n2_c64_256_to_1"])
def test_adaptive_avg_pool_as_written_runs_as_the_calibration_kernel(case):
    """vision.py's adaptive_avg_pool2d_kernel as written: the calibration kernel's time (its windows'
    loads, sums and renewed window buffers alike; the 12 x 12 windows of [2, 2048, 32, 32] within
    0.1%) with two more instructions a tile (it zeroes its two buffers), and PyTorch's values."""
    import numpy as np

    from ncsim import nki

    ref = _reference_module("vision").adaptive_avg_pool2d_kernel
    if str(ROOT / "tools") not in sys.path:
        sys.path.insert(0, str(ROOT / "tools"))
    from calibrate import case as calibrate_case

    kernel, (x, oh, ow) = calibrate_case(f"avgpool:{case}")()
    nki.simulate_kernel(kernel, x, oh, ow, values=False)
    ours = nki.last_run()
    nki.simulate_kernel(ref, x, (oh, ow), values=False)
    theirs = nki.last_run()
    tiles = -(-x.shape[0] * x.shape[1] // 128)
    assert theirs.result.instructions == ours.result.instructions + 2 * tiles
    assert theirs.latency_us == pytest.approx(ours.latency_us, rel=1e-3)
    if case == "n1_c64_56_to_7":  # values at smaller shapes, uneven windows included
        from calibrate.avgpool import reference

        rng = np.random.default_rng(0)
        for shape, (oh, ow) in (((2, 128, 13, 10), (6, 4)), ((1, 2, 130, 3), (1, 2))):
            a = rng.standard_normal(shape).astype(np.float32)
            np.testing.assert_allclose(ref(a, (oh, ow)), reference(a, oh, ow), rtol=1e-5, atol=1e-6)


def test_select_and_scatter_as_written_runs_as_the_calibration_kernel():
    """vision.py's select_and_scatter_kernel as written: the calibration kernel's instructions and
    time at the published shape, and the reference's values at a smaller one."""
    import numpy as np

    ref = _reference_module("vision").select_and_scatter_kernel
    _as_calibration_kernel(ref, "select_and_scatter", "n8_c64_112")
    from calibrate.select_and_scatter import reference

    rng = np.random.default_rng(0)
    op, src = rng.random((2, 64, 12, 12)).astype(np.float32), rng.random((2, 64, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(ref(op, src), reference(op, src), rtol=1e-5, atol=1e-6)


# The attention tutorial's kernels (src/nki_samples/tutorials/attention_fwd_performance), unmodified,
# against numpy: v9 and v10 place their tiles with nki.compiler direct allocation; v8a and v11 declare
# PSUM tensors of more blocks than PSUM has banks, made block by block (docs/nki.md "Buffer policy").
# v3 holds all its blocks at once, which needs spilling: refused where it reads an evicted block.
ATTENTION = ["attn_fwd_v1", "attn_fwd_v2", "attn_fwd_v4", "attn_fwd_v5", "attn_fwd_v6", "attn_fwd_v7",
             "attn_fwd_v8", "attn_fwd_v8a", "attn_fwd_v9", "attn_fwd_v10", "attn_fwd_v11"]


@pytest.mark.parametrize("name", ATTENTION)
def test_attention_tutorial_kernel_runs_unmodified(name):
    import numpy as np

    path = TUTORIALS / "attention_fwd_performance" / "attention_kernels.py"
    assert path.is_file(), f"{path} is missing from the checkout"
    module = _load(path, "attention_kernels")
    seq = 128 if name in ("attn_fwd_v1", "attn_fwd_v2") else 1024  # the tutorial's test: v1, v2 untiled
    rng = np.random.default_rng(0)
    q, k, v = (((rng.random((128, seq)) - 0.5) * 2).astype(np.float32) for _ in range(3))
    got = getattr(module, name)(q, k, v)
    s = q.T.astype(np.float64) @ k
    p = np.exp(s - s.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, (p / p.sum(axis=1, keepdims=True)) @ v.T, rtol=0, atol=1e-2)
