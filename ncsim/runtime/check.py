"""Bit-exact comparison of a kernel's outputs with its reference, and the mismatch report.

Two values match when their stored bytes are identical: NaN matches a NaN with the same bits, and
-0.0 does not match +0.0. A mismatch is reported with its index, the expected and the obtained value,
and their distance in units in the last place of the output dtype (`ncsim.numerics.ulp_distance`).
A NaN is shown with its bits (`nan 0x7fc00000`); a NaN against a number has no distance (`nan`),
and a NaN against a NaN of other bits is its own kind of mismatch (`nan bits`), never "0 ulp".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ncsim.asm.objfile import TensorEntry
from ncsim.numerics import NAN_ULP, to_f32, ulp_distance

SHOWN = 10  # mismatches listed per output


@dataclass(frozen=True)
class Mismatch:
    index: tuple[int, ...]
    expected: float | int
    got: float | int
    ulp: int  # NAN_ULP: a NaN against a number; 0 with both NaN (their bits differ)
    expected_bits: int = 0  # the stored bits, shown for NaN
    got_bits: int = 0
    bits_width: int = 8  # hex digits of the stored bits

    @property
    def both_nan(self) -> bool:
        return _is_nan(self.expected) and _is_nan(self.got)


@dataclass
class OutputCheck:
    name: str
    dtype: str
    elements: int
    mismatches: int
    first: list[Mismatch] = field(default_factory=list)
    max_ulp: int = 0  # the largest distance between two numbers (NaNs are counted below)
    nan_vs_number: int = 0  # mismatches of a NaN against a number
    nan_vs_nan: int = 0  # mismatches of two NaNs with different bits

    @property
    def ok(self) -> bool:
        return self.mismatches == 0


@dataclass
class CheckResult:
    outputs: list[OutputCheck]
    missing: list[str] = field(default_factory=list)  # outputs the reference does not give

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs)

    @property
    def elements(self) -> int:
        return sum(o.elements for o in self.outputs)

    @property
    def mismatches(self) -> int:
        return sum(o.mismatches for o in self.outputs)

    def report(self) -> str:
        """`bit-exact: N of N elements`, or the mismatch report."""
        lines = []
        if self.ok:
            names = ", ".join(o.name for o in self.outputs)
            lines.append(f"bit-exact: {self.elements} of {self.elements} elements ({names})")
        else:
            lines.append(f"MISMATCH: {self.mismatches} of {self.elements} elements differ from the reference")
            for o in self.outputs:
                if o.ok:
                    lines.append(f"  {o.name} ({o.dtype}): bit-exact, {o.elements} elements")
                    continue
                lines.append(f"  {o.name} ({o.dtype}): {o.mismatches} of {o.elements} differ; {_kinds(o)}")
                lines.append(f"    {'index':<16} {'expected':>16} {'got':>16} {'ulp':>8}")
                for m in o.first:
                    ulp = "nan bits" if m.both_nan else "nan" if m.ulp == NAN_ULP else str(m.ulp)
                    idx = "[" + ", ".join(str(i) for i in m.index) + "]"
                    expected = _fmt(m.expected, m.expected_bits, m.bits_width)
                    got = _fmt(m.got, m.got_bits, m.bits_width)
                    lines.append(f"    {idx:<16} {expected:>16} {got:>16} {ulp:>8}")
                if o.mismatches > len(o.first):
                    lines.append(f"    ... and {o.mismatches - len(o.first)} more")
        for name in self.missing:
            lines.append(f"  {name}: not checked (the reference does not give it)")
        return "\n".join(lines)


def _kinds(o: OutputCheck) -> str:
    """What kinds of difference an output has: the largest distance between numbers, and how many
    NaNs met a number or a NaN of other bits."""
    numbers = o.mismatches - o.nan_vs_number - o.nan_vs_nan
    parts = [f"largest distance {o.max_ulp} ulp"] if numbers else []
    if o.nan_vs_number:
        parts.append(f"{o.nan_vs_number} NaN against a number")
    if o.nan_vs_nan:
        parts.append(f"{o.nan_vs_nan} NaN against a NaN of other bits")
    return "; ".join(parts)


def _is_nan(v: float) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _fmt(v: float, bits: int = 0, width: int = 8) -> str:
    if _is_nan(v):
        return f"nan 0x{bits:0{width}x}"
    if isinstance(v, float):
        return f"{v:.9g}"
    return str(v)


def compare(tensors: Mapping[str, TensorEntry], got: Mapping[str, np.ndarray],
            expected: Mapping[str, np.ndarray], shown: int = SHOWN) -> CheckResult:
    """Compare every output the reference gives, bit for bit."""
    checks = []
    for name, t in tensors.items():
        if name not in expected:
            continue
        g, e = np.asarray(got[name]), np.asarray(expected[name])
        width = f"u{t.dtype.itemsize}"
        diff = g.reshape(-1).view(width) != e.reshape(-1).view(width)
        bad = np.flatnonzero(diff)
        oc = OutputCheck(name, t.dtype.short, int(g.size), int(bad.size))
        if bad.size:
            ulps = ulp_distance(g.reshape(-1)[bad], e.reshape(-1)[bad], t.dtype)
            numbers = np.ones(bad.size, bool)
            if t.dtype.is_float:
                nan_g = np.isnan(to_f32(g.reshape(-1)[bad], t.dtype))
                nan_e = np.isnan(to_f32(e.reshape(-1)[bad], t.dtype))
                oc.nan_vs_nan = int(np.count_nonzero(nan_g & nan_e))
                oc.nan_vs_number = int(np.count_nonzero(nan_g ^ nan_e))
                numbers = ~(nan_g | nan_e)
            oc.max_ulp = int(ulps[numbers].max(initial=0))
            g_bits, e_bits = g.reshape(-1).view(width), e.reshape(-1).view(width)
            for i, flat in enumerate(bad[:shown]):
                index = tuple(int(x) for x in np.unravel_index(flat, g.shape))
                oc.first.append(Mismatch(index, _value(e, flat, t), _value(g, flat, t), int(ulps[i]),
                                         int(e_bits[flat]), int(g_bits[flat]), 2 * t.dtype.itemsize))
        checks.append(oc)
    missing = [name for name in tensors if name not in expected]
    return CheckResult(checks, missing)


def _value(a: np.ndarray, flat: int, t: TensorEntry) -> float | int:
    raw = a.reshape(-1)[flat : flat + 1]
    if t.dtype.is_int:
        return int(raw[0])
    return float(to_f32(raw, t.dtype)[0])
