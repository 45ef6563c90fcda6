"""The GpSimd programs of programs/ against docs/gpsimd.md: the three ReLU steps each faster than the
one before in simulated time, and the docs' table quoting their simulated times (the README's and the
docs' figures are re-measured here, never hard-coded)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import ncsim

ROOT = Path(__file__).resolve().parents[2]
RELU_STEPS = ("relu_gpsimd_element", "relu_gpsimd_tcm", "relu_gpsimd_tcm8")


def simulated_us(name: str) -> float:
    result = ncsim.run(ROOT / "programs" / f"{name}.s", seed=0)
    assert result.check is not None and result.check.ok, result.check.report() if result.check else name
    return result.timing.total_ns / 1e3


@pytest.fixture(scope="module")
def relu_times() -> dict[str, float]:
    return {name: simulated_us(name) for name in RELU_STEPS}


def test_relu_steps_each_faster_than_the_last(relu_times):
    times = [relu_times[n] for n in RELU_STEPS]
    assert times[0] > times[1] > times[2], times


def test_docs_table_quotes_the_relu_runs(relu_times):
    doc = (ROOT / "docs" / "gpsimd.md").read_text()
    for name in RELU_STEPS:
        row = re.search(rf"^\| {name}\.s \| ([0-9.]+) µs \| ([0-9.]+) \|", doc, re.MULTILINE)
        assert row, f"docs/gpsimd.md has no table row for {name}.s"
        assert float(row.group(1)) == round(relu_times[name], 1), f"{name}: docs say {row.group(1)} µs"
        per_elem = relu_times[name] * 1e3 / (32 * 4096) * 1.4  # cycles at 1.4 GHz
        assert float(row.group(2)) == pytest.approx(per_elem, abs=0.006), name


def test_giou_gpsimd_rows_quote_the_runs():
    """giou_gpsimd.s: bit for bit giou.s's reference (its sidecar is giou.py's); the README's table row
    and docs/gpsimd.md's giou table give the simulated times and verdicts of both programs as run."""
    readme = (ROOT / "README.md").read_text()
    doc = (ROOT / "docs" / "gpsimd.md").read_text()
    for name in ("giou", "giou_gpsimd"):
        result = ncsim.run(ROOT / "programs" / f"{name}.s", seed=0)
        assert result.check is not None and result.check.ok, name
        us = result.timing.total_ns / 1e3
        verdict = re.match(r"(bound by the \w+ engine): busy (\d+)%", result.report.verdict.text)
        assert verdict, result.report.verdict.text
        quoted = f"| {us:.3f} µs | {verdict.group(1)} (busy {verdict.group(2)}%) |"
        assert f"| {name}.s {quoted}" in doc, f"docs/gpsimd.md: {quoted}"
        if name == "giou_gpsimd":
            assert f"| 64: Sync 32, Scalar 16, GpSimd 16 {quoted}" in readme, f"README: {quoted}"


@pytest.mark.parametrize("name", RELU_STEPS)
def test_relu_programs_are_torch_ops(name):
    """docs/gpsimd.md#torch: each ReLU step as a torch operator, bit for bit torch.relu at a shape whose
    elements are neither whole blocks nor whole vectors (3 x 1000: partial block, partial vector)."""
    torch = pytest.importorskip("torch")
    import ncsim.torch

    op = ncsim.torch.custom_op(f"gpsimd_test::{name}", str(ROOT / "programs" / f"{name}.s"))
    x = torch.randn(3, 1000, generator=torch.Generator().manual_seed(0))
    x[0, :4] = torch.tensor([-0.0, float("nan"), float("-inf"), float("inf")])
    assert torch.equal(op(x).view(torch.int32), torch.relu(x).view(torch.int32))
