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
