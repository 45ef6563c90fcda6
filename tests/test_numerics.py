"""ncsim.numerics against an exact reference written with Python fractions (docs/hardware.md#numerics).

The reference rounds a real number to a float format with p mantissa bits by the textbook rule:
scale by the quantum of its binade, round to the nearest integer with ties to even (Python's
`round` on a Fraction), and overflow to inf when the result exceeds the largest finite value.
It shares no code with ml_dtypes, numpy's casts or ncsim's bit arithmetic.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ncsim.dtypes import DTYPES, DType, by_name
from ncsim.numerics import NAN_ULP, bits_equal, from_f32, to_f32, ulp_distance

FLOATS = [d for d in DTYPES if d.is_float]
NARROW = [by_name(n) for n in ("fp8e4", "fp8e5", "f16", "bf16")]
ROUNDED = NARROW + [by_name("tf32")]
# (exponent bits, mantissa bits) of each format; all are IEEE-like (top exponent is inf/NaN).
LAYOUT = {"fp8e4": (4, 3), "fp8e5": (5, 2), "f16": (5, 10), "bf16": (8, 7), "tf32": (8, 10), "f32": (8, 23)}
F32 = by_name("f32")


def ref_round(x: float, ebits: int, mbits: int, saturate: bool = False) -> float:
    """x (any float) rounded to the nearest value of the format, ties to even, as a Python float."""
    if math.isnan(x) or math.isinf(x) or x == 0:
        return x
    bias = (1 << (ebits - 1)) - 1
    emin, emax = 1 - bias, bias
    largest = (2 - Fraction(1, 1 << mbits)) * Fraction(2) ** emax
    v = Fraction(abs(x))
    exponent = max(math.frexp(abs(x))[1] - 1, emin)  # below emin the quantum stays fixed: subnormals
    quantum = Fraction(2) ** (exponent - mbits)
    r = round(v / quantum) * quantum
    if r > largest:
        r = largest if saturate else math.inf
    return math.copysign(float(r), x)


def assert_matches_reference(x: np.ndarray, d: DType) -> None:
    got = from_f32(x, d).astype(np.float64)
    want = np.array([ref_round(float(v), *LAYOUT[d.short]) for v in x], np.float64)
    same = (got == want) & (np.signbit(got) == np.signbit(want)) | (np.isnan(got) & np.isnan(want))
    bad = np.nonzero(~same)[0][:5]
    assert not len(bad), [(float(x[i]), got[i], want[i]) for i in bad]


def all_patterns(d: DType) -> np.ndarray:
    u = np.dtype(f"u{d.itemsize}")
    return np.arange(1 << (8 * d.itemsize), dtype=np.uint64).astype(u).view(d.storage)


def finite_values(d: DType) -> np.ndarray:
    """Every non-negative finite value of a narrow float, ascending, as float32."""
    f = to_f32(all_patterns(d), d)
    return np.unique(f[np.isfinite(f) & (f >= 0)])


def tie_points(values: np.ndarray, d: DType) -> np.ndarray:
    """Midpoints of neighbouring values (exact in fp32), the overflow midpoint, their fp32 neighbours
    on both sides, all with both signs."""
    top = 2.0 ** (1 << (LAYOUT[d.short][0] - 1))  # 2**(emax+1): the next value if the exponent were unbounded
    v = np.append(values.astype(np.float64), top)
    mid = ((v[:-1] + v[1:]) / 2).astype(np.float32)
    assert np.array_equal(mid.astype(np.float64), (v[:-1] + v[1:]) / 2)  # the ties are exact in fp32
    pts = np.concatenate([mid, np.nextafter(mid, np.float32(0)), np.nextafter(mid, np.float32(np.inf))])
    return np.concatenate([pts, -pts])


# ---- round trips ----

@pytest.mark.parametrize("d", [d for d in DTYPES if d.itemsize <= 2], ids=str)
def test_round_trip_every_pattern(d):
    raw = all_patterns(d)
    if d.kind == "bool":
        raw = np.array([0, 1], np.uint8)
    assert bits_equal(from_f32(to_f32(raw, d), d), raw)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=64))
def test_round_trip_f32_tf32(patterns):
    raw = np.array(patterns, np.uint32)
    for d, mask in ((F32, 0xFFFFFFFF), (by_name("tf32"), 0xFFFFE000)):
        r = (raw & np.uint32(mask)).view(np.float32)
        assert bits_equal(from_f32(to_f32(r, d), d), r)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(2**24), 2**24), min_size=1, max_size=64))
def test_round_trip_int32_up_to_2_24(values):
    for d in (by_name("i32"), by_name("u32")):
        raw = np.array([abs(v) if d.kind == "uint" else v for v in values], d.storage)
        assert bits_equal(from_f32(to_f32(raw, d), d), raw)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=64))
def test_wide_integers_widen_to_nearest_f32(values):
    for d in (by_name("i32"), by_name("u32")):
        ints = [v - 2**31 if d.kind == "int" else v for v in values]
        got = to_f32(np.array(ints, d.storage), d)
        assert [float(g) for g in got] == [ref_round(float(v), 8, 23) for v in ints]


# ---- narrowing against the reference ----

@pytest.mark.parametrize("d", NARROW, ids=str)
def test_ties_and_neighbours_match_reference(d):
    pts = tie_points(finite_values(d), d)
    if d.itemsize == 2:  # 16-bit formats: every 7th point keeps this fast; 7 is odd so ties go both ways
        pts = pts[::7]
    assert_matches_reference(pts, d)


def test_tf32_ties_match_reference():
    rng = np.random.default_rng(6)
    base = (rng.integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32) & np.uint32(0xFFFFE000))
    ties = (base | np.uint32(0x1000)).view(np.float32)  # exactly halfway between two tf32 values
    ties = ties[np.isfinite(ties)]
    near = np.concatenate([ties, np.nextafter(ties, np.float32(0)), np.nextafter(ties, np.float32(np.inf))])
    assert_matches_reference(near, by_name("tf32"))


@pytest.mark.parametrize("d", ROUNDED, ids=str)
@settings(max_examples=100, deadline=None)
@given(xs=st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=32))
def test_random_f32_match_reference(d, xs):
    assert_matches_reference(np.array(xs, np.float32), d)


@pytest.mark.parametrize("d", ROUNDED, ids=str)
def test_random_bit_patterns_match_reference(d):
    rng = np.random.default_rng(d.code)
    x = rng.integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    assert_matches_reference(x[~np.isnan(x)], d)


def test_bf16_tie_goes_to_even():
    # 1 + 2**-8 is halfway between bf16 1.0 (mantissa ...0) and 1 + 2**-7 (...1): goes down to 1.0.
    # 1 + 3 * 2**-8 is halfway between 1 + 2**-7 (odd) and 1 + 2**-6 (even): goes up.
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8)], np.float32)
    assert from_f32(x, by_name("bf16")).view(np.uint16).tolist() == [0x3F80, 0x3F82, 0xBF80]


@pytest.mark.parametrize("name,largest,tie_to_inf", [
    ("fp8e4", 240.0, 248.0), ("fp8e5", 57344.0, 61440.0), ("f16", 65504.0, 65520.0),
    ("bf16", float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), 2.0**128 - 2.0**119),
    ("tf32", (2 - 2**-10) * 2.0**127, 2.0**128 - 2.0**116),
])
def test_overflow_to_inf(name, largest, tie_to_inf):
    d = by_name(name)
    below = np.nextafter(np.float32(tie_to_inf), np.float32(0))
    x = np.array([largest, below, tie_to_inf, 3.4028235e38, np.inf, -tie_to_inf, -np.inf], np.float32)
    got = from_f32(x, d).astype(np.float64)
    assert got.tolist() == [largest, largest, np.inf, np.inf, np.inf, -np.inf, -np.inf]


def test_format_without_inf_saturates():
    d = DType(99, "float8_e4m3fn", "e4m3fn", np.dtype(ml_dtypes.float8_e4m3fn), "float", 3)
    x = np.array([448, 464, 1e6, np.inf, -np.inf, 1.0625, np.nan], np.float32)
    got = from_f32(x, d).astype(np.float64)
    assert got[:6].tolist() == [448, 448, 448, 448, -448, 1.0] and np.isnan(got[6])


@pytest.mark.parametrize("d", ROUNDED, ids=str)
def test_subnormals(d):
    ebits, mbits = LAYOUT[d.short]
    emin = 2 - (1 << (ebits - 1))
    tiny = 2.0 ** (emin - mbits)  # the smallest subnormal
    x = np.array([tiny, tiny / 2, tiny * 0.75, tiny * 1.5, tiny * 2.5, -tiny / 2, 2.0**emin - tiny / 2], np.float32)
    got = from_f32(x, d).astype(np.float64)
    assert got.tolist() == [tiny, 0.0, tiny, 2 * tiny, 2 * tiny, -0.0, 2.0**emin]
    assert np.signbit(got[5])  # -tiny/2 rounds to -0


@pytest.mark.parametrize("d", FLOATS, ids=str)
def test_nan_stays_nan_and_keeps_sign(d):
    x = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001], np.uint32).view(np.float32)
    got = to_f32(from_f32(x, d), d)
    assert np.isnan(got).all() and np.signbit(got).tolist() == [False, True, False, True]


# ---- integers ----

def test_integer_rounding_and_saturation():
    x = np.array([2.5, 3.5, -0.5, -2.5, 1e10, -1e10, np.nan, np.inf, -np.inf, 0.49999997], np.float32)
    assert from_f32(x, by_name("i32")).tolist() == [2, 4, 0, -2, 2**31 - 1, -(2**31), 0, 2**31 - 1, -(2**31), 0]
    assert from_f32(x, by_name("u8")).tolist() == [2, 4, 0, 0, 255, 0, 0, 255, 0, 0]
    assert from_f32(x, by_name("i8")).tolist() == [2, 4, 0, -2, 127, -128, 0, 127, -128, 0]
    assert from_f32(np.array([-1, 65535.5, 4294967296], np.float32), by_name("u32")).tolist() == [0, 65536, 2**32 - 1]
    assert from_f32(np.array([-1, 65535.5, 70000], np.float32), by_name("u16")).tolist() == [0, 65535, 65535]
    assert from_f32(np.array([-40000, 1.5], np.float32), by_name("i16")).tolist() == [-32768, 2]


def test_every_nan_becomes_integer_zero():
    """Quiet and signalling NaNs of both signs (what a widened narrow-float NaN can be) narrow to 0."""
    nans = np.array([0x7FC00000, 0x7F800001, 0xFF800001, 0x7FBFFFFF], np.uint32).view(np.float32)
    for name in ("i32", "u8", "i16", "u32"):
        assert from_f32(nans, by_name(name)).tolist() == [0, 0, 0, 0]


def test_bool():
    b = by_name("bool")
    x = np.array([0.0, -0.0, 0.3, -2.0, np.inf, np.nan], np.float32)
    assert from_f32(x, b).tolist() == [0, 0, 1, 1, 1, 0] and from_f32(x, b).dtype == np.uint8
    assert to_f32(np.array([0, 1, 7], np.uint8), b).tolist() == [0.0, 1.0, 1.0]


def test_wrong_storage_is_an_error():
    with pytest.raises(TypeError, match="expected an array of float32, got float64"):
        from_f32(np.zeros(2), by_name("bf16"))
    with pytest.raises(TypeError, match="bfloat16"):
        to_f32(np.zeros(2, np.float32), by_name("bf16"))


# ---- comparison helpers ----

@pytest.mark.parametrize("d", FLOATS, ids=str)
def test_ulp_distance_of_neighbours(d):
    raw = from_f32(np.array([1.0, -1.0, 0.0, 2.0], np.float32), d)
    step = np.float32(2.0 ** -LAYOUT[d.short][1])
    nxt = from_f32(np.array([1 + step, -1 + step / 2, -0.0, 2 - step], np.float32), d)
    assert ulp_distance(raw, nxt, d).tolist() == [1, 1, 0, 1]  # -0 and +0 are the same value
    if d.mantissa_bits < 23:  # the fp32 neighbours of +/-1 round back to +/-1
        up = from_f32(np.nextafter(np.array([1.0, -1.0], np.float32), np.float32(np.inf)), d)
        assert ulp_distance(raw[:2], up, d).tolist() == [0, 0]
    ebits, mbits = LAYOUT[d.short]
    largest = from_f32(np.array([(2 - 2.0**-mbits) * 2.0 ** ((1 << (ebits - 1)) - 1)], np.float32), d)
    assert ulp_distance(largest, from_f32(np.array([np.inf], np.float32), d), d).tolist() == [1]
    nan = from_f32(np.array([np.nan, np.nan], np.float32), d)
    assert ulp_distance(nan, np.concatenate([nan[:1], raw[:1]]), d).tolist() == [0, NAN_ULP]


def test_ulp_distance_across_zero_and_integers():
    d = by_name("bf16")
    tiny = np.array([1, 0x8001], np.uint16).view(ml_dtypes.bfloat16)  # +/- smallest subnormal
    assert ulp_distance(tiny[:1], tiny[1:], d).tolist() == [2]
    assert ulp_distance(np.array([-5, 7], np.int8), np.array([5, 7], np.int8), by_name("i8")).tolist() == [10, 0]
    assert ulp_distance(np.array([0, 2], np.uint8), np.array([1, 1], np.uint8), by_name("bool")).tolist() == [1, 0]


def test_bits_equal():
    a = np.array([0x7FC00000, 0], np.uint32).view(np.float32)
    assert bits_equal(a, a.copy())  # NaN equals itself bit for bit
    assert not bits_equal(a, np.array([0x7FC00000, 0x80000000], np.uint32).view(np.float32))  # -0 differs
    assert not bits_equal(a, a[:1]) and not bits_equal(a, a.view(np.uint16))


def test_dtype_sizes_and_lazy_narrow_storage():
    """The narrow floats are named by their ml_dtypes type and size (ml_dtypes is imported when one is
    first used): the size given is the storage's, and the storage is ml_dtypes' type."""
    for d in DTYPES:
        assert d.itemsize == d.storage.itemsize, d
    assert by_name("bf16").storage == np.dtype(ml_dtypes.bfloat16)
    assert by_name("fp8e4").storage == np.dtype(ml_dtypes.float8_e4m3)
    assert by_name("fp8e5").storage == np.dtype(ml_dtypes.float8_e5m2)
    assert by_name("f32").storage_spec == np.dtype(np.float32) and by_name("bf16").storage_spec == "bfloat16"
