"""Conversions between storage dtypes and fp32: widen exactly, narrow round-to-nearest-even.

The rules are ncsim's own, not published hardware facts (docs/hardware.md#numerics).

Every engine computes in IEEE fp32: it widens its inputs with `to_f32`, computes, and narrows the
result to the output dtype with `from_f32`. docs/numerics.md states the same rules; keep them in step.

- Widening is exact for every float dtype and for integers of 16 bits or less; 32-bit integers with
  |x| > 2**24 go to the nearest fp32, ties to even. bool reads as 0.0 or 1.0 (any nonzero byte is 1).
- Narrowing to a float dtype rounds to nearest, ties to even; a value that rounds past the format's
  largest finite value becomes inf (every v2 float format has inf; a format without one saturates
  to its largest finite value). bf16, f16, fp8 go through ml_dtypes/numpy, whose casts the tests
  check against an exact reference; tf32 is rounded here by integer arithmetic on the fp32 bits.
- NaN keeps its sign and the top bits of its payload (the bits that fit); if those bits are all
  zero the top mantissa bit is set so that it stays NaN. So every bit pattern of a narrow float
  survives a round trip, NaNs included (ml_dtypes' own casts would make every NaN canonical).
  (A format without inf has its own NaN encoding and keeps ml_dtypes' NaN; none is a v2 dtype.)
- Narrowing to an integer dtype rounds half to even, saturates to the type's range (inf too) and
  sends NaN to 0. bool is 1 for any nonzero number and 0 for zero and NaN.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from ncsim.dtypes import DType

# What `ulp_distance` reports for a NaN compared with a number: larger than any real distance.
NAN_ULP = np.iinfo(np.int64).max

_F32_MANTISSA = 23


def _check(arr: np.ndarray, expected: np.dtype, what: str) -> np.ndarray:
    arr = np.asarray(arr)
    if arr.dtype != expected:
        raise TypeError(f"{what}: expected an array of {expected}, got {arr.dtype}")
    return arr


def _uint(itemsize: int) -> np.dtype:
    return np.dtype(f"u{itemsize}")


def _is_tf32(dtype: DType) -> bool:
    """tf32 is the one float stored in a wider container (fp32 bits, low 13 mantissa bits zero)."""
    return dtype.is_float and dtype.storage == np.float32 and dtype.mantissa_bits < _F32_MANTISSA


def _narrow_float_layout(dtype: DType) -> tuple[int, int]:
    """(total bits, mantissa bits) of a float dtype stored in its own width (not f32, not tf32)."""
    return dtype.itemsize * 8, dtype.mantissa_bits


def to_f32(raw: np.ndarray, dtype: DType) -> np.ndarray:
    """Widen values stored as `dtype.storage` to float32 (exact except 32-bit integers above 2**24)."""
    raw = _check(raw, dtype.storage, f"to_f32({dtype})")
    if dtype.kind == "bool":
        return (raw != 0).astype(np.float32)
    if dtype.is_int:
        # Through float64 (exact for every integer of 32 bits or less), so the one rounding is the
        # float64 -> float32 cast, which is round-to-nearest-even.
        return raw.astype(np.float64).astype(np.float32)
    if dtype.storage == np.float32:  # f32, and tf32 which is already an fp32 bit pattern
        return raw.copy()
    with np.errstate(invalid="ignore"):  # ml_dtypes warns when it widens a NaN
        out = raw.astype(np.float32)
    return _widen_nans(raw, dtype, out) if _has_inf(dtype) else out


def _widen_nans(raw: np.ndarray, dtype: DType, out: np.ndarray) -> np.ndarray:
    """Give each widened NaN the sign and payload of the narrow one (payload shifted to the top)."""
    nan = np.isnan(out)
    if not nan.any():
        return out
    nbits, mbits = _narrow_float_layout(dtype)
    u = raw.view(_uint(dtype.itemsize)).astype(np.uint32)
    sign = (u >> (nbits - 1)) << 31
    payload = (u & ((1 << mbits) - 1)) << (_F32_MANTISSA - mbits)
    bits = out.view(np.uint32)
    bits[nan] = (sign | np.uint32(0x7F800000) | payload)[nan]
    return out


def from_f32(x: np.ndarray, dtype: DType) -> np.ndarray:
    """Narrow float32 values to `dtype.storage`: round to nearest even; see the module docstring."""
    x = _check(x, np.dtype(np.float32), f"from_f32(..., {dtype})")
    if dtype.kind == "bool":
        return ((x != 0) & ~np.isnan(x)).astype(dtype.storage)
    if dtype.is_int:
        return _f32_to_int(x, dtype)
    if dtype.storage == np.float32:
        return _round_tf32(x) if _is_tf32(dtype) else x.copy()
    import ml_dtypes  # a narrow float: dtype.storage has imported it

    info = ml_dtypes.finfo(dtype.storage)
    with np.errstate(over="ignore", invalid="ignore"):  # numpy warns on the overflow to inf
        if _has_inf(dtype):
            out = x.astype(dtype.storage)
        else:  # rounding a value of magnitude <= max never exceeds max, so clip then round saturates
            out = np.clip(x, -float(info.max), float(info.max)).astype(dtype.storage)
    # The NaN rule is for IEEE-like layouts (NaN = top exponent, nonzero mantissa); formats without
    # inf have other NaN encodings, so they keep the cast's NaN.
    return _narrow_nans(x, dtype, out) if _has_inf(dtype) else out


@cache
def _has_inf(dtype: DType) -> bool:
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isinf(np.array(np.inf, np.float32).astype(dtype.storage)))


def _narrow_nans(x: np.ndarray, dtype: DType, out: np.ndarray) -> np.ndarray:
    """Give each narrowed NaN the sign and top payload bits of the fp32 one (quiet bit if none)."""
    nan = np.isnan(x)
    if not nan.any():
        return out
    nbits, mbits = _narrow_float_layout(dtype)
    u = x.view(np.uint32)
    sign = (u >> 31) << (nbits - 1)
    payload = (u & 0x7FFFFF) >> (_F32_MANTISSA - mbits)
    payload = np.where(payload == 0, np.uint32(1 << (mbits - 1)), payload)
    exponent = ((1 << (nbits - 1)) - 1) & ~((1 << mbits) - 1)  # all exponent bits set
    bits = out.view(_uint(dtype.itemsize))
    bits[nan] = (sign | exponent | payload).astype(bits.dtype)[nan]
    return out


def _round_tf32(x: np.ndarray) -> np.ndarray:
    """Round fp32 bit patterns to 10 mantissa bits, ties to even; a carry out of the mantissa moves
    into the exponent, so the largest values round up to inf."""
    drop = _F32_MANTISSA - 10
    u = x.view(np.uint32)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    half = np.uint32((1 << (drop - 1)) - 1)
    lsb = (u >> drop) & 1
    mask = np.uint32(~((1 << drop) - 1) & 0xFFFFFFFF)
    rounded = (u + half + lsb) & mask
    nan_bits = u & mask
    nan_bits = np.where((nan_bits & 0x7FFFFF) == 0, nan_bits | np.uint32(1 << 22), nan_bits)
    return np.where(nan, nan_bits, rounded).astype(np.uint32).view(np.float32)


def _f32_to_int(x: np.ndarray, dtype: DType) -> np.ndarray:
    info = np.iinfo(dtype.storage)
    with np.errstate(invalid="ignore"):  # a signalling NaN warns on the cast; it becomes 0 below
        wide = np.rint(x.astype(np.float64))  # ties to even; every int32/uint32 bound is exact in float64
    wide = np.where(np.isnan(wide), 0.0, np.clip(wide, float(info.min), float(info.max)))
    return wide.astype(dtype.storage)


def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """True if a and b have the same shape, the same item size and the same bytes (NaNs included)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype.itemsize == b.dtype.itemsize and a.tobytes() == b.tobytes()


def _ordered(raw: np.ndarray, dtype: DType) -> np.ndarray:
    """Map float bit patterns to int64 so that neighbouring representable values differ by 1
    (sign-magnitude to two's complement; +0 and -0 both map to 0)."""
    u = raw.view(_uint(dtype.itemsize)).astype(np.int64)
    if _is_tf32(dtype):
        u = u >> (_F32_MANTISSA - dtype.mantissa_bits)
        nbits = 32 - (_F32_MANTISSA - dtype.mantissa_bits)
    else:
        nbits = dtype.itemsize * 8
    sign = np.int64(1) << (nbits - 1)
    magnitude = u & (sign - 1)
    return np.where(u & sign, -magnitude, magnitude)


def ulp_distance(a: np.ndarray, b: np.ndarray, dtype: DType) -> np.ndarray:
    """Per element, how many representable values of `dtype` apart a and b (stored values) are.

    Floats: the difference of the ordered bit patterns (so max finite to inf is 1); NaN against NaN
    is 0, NaN against a number is NAN_ULP. Integers: |a - b|; bool: 0 or 1."""
    a = _check(a, dtype.storage, f"ulp_distance({dtype})")
    b = _check(b, dtype.storage, f"ulp_distance({dtype})")
    if dtype.kind == "bool":
        return ((a != 0) != (b != 0)).astype(np.int64)
    if dtype.is_int:
        return np.abs(a.astype(np.int64) - b.astype(np.int64))
    dist = np.abs(_ordered(a, dtype) - _ordered(b, dtype))
    nan_a, nan_b = np.isnan(to_f32(a, dtype)), np.isnan(to_f32(b, dtype))
    return np.where(nan_a & nan_b, 0, np.where(nan_a | nan_b, NAN_ULP, dist)).astype(np.int64)
