"""The calibration suite of ncsim's cost model (docs/timing.md "Calibration").

Each case is a kernel of a published NKI tutorial, written here from the algorithm the tutorial
documents (its code is not copied), with the arguments of the published measurement. The published
latencies, their sources and conditions, and which cases are fitted and which held out, are in the
one table tests/nki/published_latencies.toml: its entries with a `calibrate = "module:case"` key
name a case of this package. `tools/validate_timing.py` times them all.

A case is a function of no arguments returning (kernel, args): args are `nki.typing.tensor`
placeholders, so a run is timing-only, as `nki.benchmark` times a kernel on the chip.
"""

from __future__ import annotations

import importlib
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

Case = Callable[[], tuple[Any, tuple]]
TABLE = Path(__file__).resolve().parents[2] / "tests" / "nki" / "published_latencies.toml"


def read_table() -> dict[str, dict]:
    """The one table of published latencies (TABLE), its entries by name."""
    return tomllib.loads(TABLE.read_text())


def published(module: str) -> dict[str, float]:
    """The published figure (µs) of each case of tools/calibrate/<module>.py that the table names, by case name."""
    return {e["calibrate"].partition(":")[2]: e["published_us"] for e in read_table().values()
            if e.get("calibrate", "").startswith(f"{module}:")}


def case(ref: str) -> Case:
    """The case named `module:name` (e.g. "mamba:v1_256"), from tools/calibrate/<module>.py's CASES."""
    module, sep, name = ref.partition(":")
    if not sep:
        raise ValueError(f"calibration case {ref!r}: expected module:name, e.g. mamba:v1_256")
    cases = importlib.import_module(f"calibrate.{module}").CASES
    if name not in cases:
        raise ValueError(f"calibration case {ref!r}: tools/calibrate/{module}.py has {', '.join(sorted(cases))}")
    return cases[name]
