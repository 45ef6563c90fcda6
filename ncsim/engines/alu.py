"""The ALU operators of the instruction table (isa.ALU_OPS), as ncsim defines them (docs/numerics.md).

Two forms of each operator, which the tests keep bit-identical:
- `apply(op, a, b)`: elementwise over float32 numpy arrays (what elementwise instructions use);
- `scalar_op(code, a, b)`: one numba-compiled float32 operation (what the sequential kernels use:
  reductions and scans, `fold_rows`, `scan_rows`), `code` being the operator's index in ALU_OPS.

Arithmetic operators ("arith") compute in IEEE fp32, each result rounded to nearest even:
- add, subtract, multiply, divide, reciprocal (1/a): one fp32 operation; no fused multiply-add.
- maximum / minimum: IEEE 754-2019 maximum/minimum: NaN if either operand is NaN (the first NaN
  operand is returned), and max(-0, +0) = +0, min(-0, +0) = -0.
- power, rsqrt: computed in float64 from the fp32 operands and rounded once to fp32.
- comparisons and logical operators give 1.0 or 0.0; a NaN compares unequal to everything and
  counts as nonzero (true) for the logical operators.
- abs clears the sign bit. A unary operator placed where a binary one is allowed ignores its second
  operand.
- Every NaN an operator returns is the canonical quiet NaN, bits 0x7FC00000: NaN propagates, its
  sign and payload do not (so results do not depend on how the host CPU picks a NaN).

Bitwise operators ("bitvec") work on 32-bit patterns (`bitvec`): see `to_bits` for how each input
becomes a pattern; shifts are logical and a shift by 32 or more gives 0.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from ncsim.isa import ALU_OPS

F32 = np.float32
CODES = {name: i for i, (name, *_rest) in enumerate(ALU_OPS)}
ARITY = {name: arity for name, arity, *_rest in ALU_OPS}
IS_BITVEC = {name: cls == "bitvec" for name, _a, cls, *_rest in ALU_OPS}

_SIGN = np.uint32(0x80000000)
CANONICAL_NAN = np.uint32(0x7FC00000)


def canonical(r: np.ndarray) -> np.ndarray:
    """r with every NaN replaced by the canonical quiet NaN (in place when r is writable)."""
    r = np.asarray(r, dtype=F32)
    if r.size == 0 or not np.isnan(np.minimum.reduce(r, axis=None)):  # a NaN anywhere makes the minimum NaN
        return r
    nan = np.isnan(r)
    if np.any(nan):
        if not r.flags.writeable or r.ndim == 0:
            r = np.array(r)
        r.view(np.uint32)[nan] = CANONICAL_NAN
    return r


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(np.uint32)


def _ieee_max(a: np.ndarray, b: np.ndarray, largest: bool) -> np.ndarray:
    a, b = np.broadcast_arrays(np.asarray(a, F32), np.asarray(b, F32))
    shape = a.shape
    # numpy's maximum/minimum are several times slower on strided views than on contiguous copies
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    r = np.maximum(a, b) if largest else np.minimum(a, b)
    # numpy gives NaN when either is NaN, as IEEE maximum/minimum do. Equal operands decide the sign of
    # a zero by their bits: maximum(-0, +0) = +0 (and of the bits), minimum(-0, +0) = -0 (or).
    both = (_bits(a) & _bits(b)) if largest else (_bits(a) | _bits(b))
    np.copyto(r, both.view(F32), where=a == b)
    return r.reshape(shape)


def _bool(x: np.ndarray) -> np.ndarray:
    return x.astype(F32)


def apply(op: str, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """a op b elementwise (numpy broadcasting), a and b float32; the result is float32."""
    return canonical(_apply(op, a, b))


def _apply(op: str, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    with np.errstate(all="ignore"):
        if op == "add":
            return np.add(a, b, dtype=F32)
        if op == "subtract":
            return np.subtract(a, b, dtype=F32)
        if op == "multiply":
            return np.multiply(a, b, dtype=F32)
        if op == "divide":
            return np.divide(a, b, dtype=F32)
        if op == "maximum":
            return _ieee_max(*np.broadcast_arrays(a, b), largest=True)
        if op == "minimum":
            return _ieee_max(*np.broadcast_arrays(a, b), largest=False)
        if op == "power":
            return _power(a, b)
        if op == "equal":
            return _bool(a == b)
        if op == "not_equal":
            return _bool(a != b)
        if op == "greater":
            return _bool(a > b)
        if op == "greater_equal":
            return _bool(a >= b)
        if op == "less":
            return _bool(a < b)
        if op == "less_equal":
            return _bool(a <= b)
        if op == "logical_and":
            return _bool((a != 0) & (b != 0))
        if op == "logical_or":
            return _bool((a != 0) | (b != 0))
        if op == "logical_xor":
            return _bool((a != 0) != (b != 0))
        if op == "logical_not":
            return _bool(np.asarray(a) == 0)
        if op == "abs":
            return (_bits(np.array(a, dtype=F32)) & ~_SIGN).view(F32)
        if op == "rsqrt":
            return (1.0 / np.sqrt(np.asarray(a, np.float64))).astype(F32)
        if op == "reciprocal":
            return np.divide(F32(1), a, dtype=F32)
    raise ValueError(f"{op} is not an arithmetic ALU operator")


def _power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C's pow in float64, rounded once to fp32. numpy computes an exponent of exactly 0.5 as a square
    root, which differs from pow at two points: pow(-inf, 0.5) = +inf and pow(-0, 0.5) = +0."""
    a64, b64 = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    r = np.power(a64, b64)
    half = b64 == 0.5
    if np.any(half):
        r = np.where(half & (a64 == -np.inf), np.inf, np.where(half & (a64 == 0), 0.0, r))
    return np.asarray(r).astype(F32)


# ---------------------------------------------------------------- the same, one fp32 value at a time
@numba.njit(cache=True, error_model="numpy")
def scalar_op(code: int, a: np.float32, b: np.float32) -> np.float32:
    r = _scalar_op(code, a, b)
    if np.isnan(r):
        return np.array([np.uint32(0x7FC00000)]).view(np.float32)[0]
    return r


@numba.njit(cache=True, error_model="numpy")
def _scalar_op(code: int, a: np.float32, b: np.float32) -> np.float32:
    one, zero = np.float32(1.0), np.float32(0.0)
    if code == 0:
        return np.float32(a + b)
    if code == 1:
        return np.float32(a - b)
    if code == 2:
        return np.float32(a * b)
    if code == 3:
        return np.float32(a / b)
    if code == 4 or code == 5:
        if np.isnan(a) or np.isnan(b):
            return np.float32(np.nan)
        if a == b:
            ia = np.array([a]).view(np.uint32)[0]
            ib = np.array([b]).view(np.uint32)[0]
            r = (ia & ib) if code == 4 else (ia | ib)
            return np.array([r]).view(np.float32)[0]
        if code == 4:
            return max(b, a)
        return min(b, a)
    if code == 6:
        return np.float32(math.pow(np.float64(a), np.float64(b)))
    if code == 7:
        return one if a == b else zero
    if code == 8:
        return one if a != b else zero
    if code == 9:
        return one if a > b else zero
    if code == 10:
        return one if a >= b else zero
    if code == 11:
        return one if a < b else zero
    if code == 12:
        return one if a <= b else zero
    if code == 13:
        return one if (a != 0 and b != 0) else zero
    if code == 14:
        return one if (a != 0 or b != 0) else zero
    if code == 15:
        return one if ((a != 0) != (b != 0)) else zero
    if code == 16:
        return one if a == 0 else zero
    if code == 17:
        ia = np.array([a]).view(np.uint32)[0] & np.uint32(0x7FFFFFFF)
        return np.array([ia]).view(np.float32)[0]
    if code == 18:
        return np.float32(1.0 / math.sqrt(np.float64(a)))
    if code == 19:
        return np.float32(one / a)
    return np.float32(np.nan)


# ---------------------------------------------------------------- straight into memory
# The operators `apply_into` computes, with its own codes (fixed here, not the table's order, which
# the compiled kernel does not see).
INTO_CODES = {"add": 0, "subtract": 1, "multiply": 2, "divide": 3, "maximum": 4, "minimum": 5}


@numba.njit(cache=True, error_model="numpy")
def apply_into(code: int, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """out = a op b elementwise, as `apply` computes it, written into `out` (float32 arrays of five
    axes, all of out's shape; a size-1 operand is a stride-0 view), for the operators of INTO_CODES.

    Used by the engines to compute straight into the destination's memory (no result array, no copy,
    no second pass for NaNs). Elements are visited in row-major order, each read before its result
    is written, so `out` may be `a` or `b` itself but must not overlap them otherwise (the caller
    checks). Bit-identical to `apply` (the tests compare them): each result is one fp32 operation;
    maximum/minimum select without branches, NaN if either operand is NaN, and two zeros give the
    sign IEEE asks for (+0 + -0 = +0 for maximum, -(-x + -y) for minimum); NaN results canonical."""
    nan = np.array([np.uint32(0x7FC00000)]).view(np.float32)[0]
    zero = np.float32(0)
    n0, n1, n2, n3, n4 = out.shape
    for i0 in range(n0):
        for i1 in range(n1):
            for i2 in range(n2):
                for i3 in range(n3):
                    # The operator is chosen once a row: each row's loop is then branch-free and the
                    # compiler vectorises it (about 3x faster for add and multiply than choosing it
                    # per element).
                    ra, rb, ro = a[i0, i1, i2, i3], b[i0, i1, i2, i3], out[i0, i1, i2, i3]
                    if code == 0:
                        for i in range(n4):
                            r = ra[i] + rb[i]
                            ro[i] = nan if np.isnan(r) else r
                    elif code == 1:
                        for i in range(n4):
                            r = ra[i] - rb[i]
                            ro[i] = nan if np.isnan(r) else r
                    elif code == 2:
                        for i in range(n4):
                            r = ra[i] * rb[i]
                            ro[i] = nan if np.isnan(r) else r
                    elif code == 3:
                        for i in range(n4):
                            r = ra[i] / rb[i]
                            ro[i] = nan if np.isnan(r) else r
                    elif code == 4:
                        for i in range(n4):
                            x, y = ra[i], rb[i]
                            m = x if (x > y) | np.isnan(x) else y
                            r = x + y if (x == zero) & (y == zero) else m
                            ro[i] = nan if np.isnan(r) else r
                    else:
                        for i in range(n4):
                            x, y = ra[i], rb[i]
                            m = x if (x < y) | np.isnan(x) else y
                            r = -((-x) + (-y)) if (x == zero) & (y == zero) else m
                            ro[i] = nan if np.isnan(r) else r


# ---------------------------------------------------------------- bit patterns
def to_bits(raw: np.ndarray, dtype) -> np.ndarray:
    """The 32-bit pattern (uint32) a bitwise operator sees for stored values of `dtype`: signed
    integers sign-extended, unsigned integers and bool zero-extended, floats their raw bits
    zero-extended (bf16 0x3F80 -> 0x00003F80)."""
    raw = np.asarray(raw)
    if dtype.kind == "int":
        return raw.astype(np.int64).astype(np.uint32)
    if dtype.is_int:
        return raw.astype(np.uint32)
    return raw.view(f"u{dtype.itemsize}").astype(np.uint32)


def from_bits(bits: np.ndarray, dtype) -> np.ndarray:
    """Store 32-bit patterns as `dtype`: the low bits that fit, as raw bits (bool: nonzero is 1)."""
    bits = np.asarray(bits, np.uint32)
    if dtype.kind == "bool":
        return (bits != 0).astype(np.uint8)
    return bits.astype(f"u{dtype.itemsize}").view(dtype.storage)


def bitvec(op: str, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """a op b on uint32 patterns, elementwise."""
    a = np.asarray(a, np.uint32)
    if op == "invert":
        return ~a
    b = np.asarray(b, np.uint32)
    if op == "bitwise_and":
        return a & b
    if op == "bitwise_or":
        return a | b
    if op == "bitwise_xor":
        return a ^ b
    if op in ("left_shift", "right_shift"):
        big = b >= 32
        s = np.where(big, 0, b).astype(np.uint32)
        r = (a << s) if op == "left_shift" else (a >> s)
        return np.where(big, np.uint32(0), r).astype(np.uint32)
    raise ValueError(f"{op} is not a bitwise ALU operator")


@numba.njit(cache=True)
def scalar_bits(code: int, a: np.uint32, b: np.uint32) -> np.uint32:
    if code == 20:
        return np.uint32(a & b)
    if code == 21:
        return np.uint32(a | b)
    if code == 22:
        return np.uint32(a ^ b)
    if code == 23:
        return np.uint32(~a)
    if code == 24:
        return np.uint32(0) if b >= 32 else np.uint32(a << b)
    if code == 25:
        return np.uint32(0) if b >= 32 else np.uint32(a >> b)
    return np.uint32(0)


# ---------------------------------------------------------------- sequential kernels
@numba.njit(cache=True, error_model="numpy")
def fold_rows(x: np.ndarray, code: int) -> np.ndarray:
    """out[p] = x[p, 0] op x[p, 1] op ... op x[p, n-1], left to right in fp32 (x: float32 [P, n], n >= 1)."""
    rows, n = x.shape
    out = np.empty(rows, np.float32)
    for p in range(rows):
        acc = x[p, 0]
        for i in range(1, n):
            acc = scalar_op(code, acc, x[p, i])
        out[p] = acc
    return out


@numba.njit(cache=True)
def fold_rows_bits(x: np.ndarray, code: int) -> np.ndarray:
    """fold_rows for a bitwise operator over uint32 patterns."""
    rows, n = x.shape
    out = np.empty(rows, np.uint32)
    for p in range(rows):
        acc = x[p, 0]
        for i in range(1, n):
            acc = scalar_bits(code, acc, x[p, i])
        out[p] = acc
    return out


@numba.njit(cache=True, error_model="numpy")
def scan_rows(a: np.ndarray, b: np.ndarray, init: np.ndarray, code0: int, code1: int,
              reverse0: bool, reverse1: bool) -> np.ndarray:
    """out[p, i] = (a[p, i] op0 r) op1 b[p, i] with r = out[p, i-1] (init[p] before i = 0), in fp32,
    left to right; reverse0 gives r op0 a[p, i], reverse1 gives b[p, i] op1 tmp (a, b: float32 [P, n])."""
    rows, n = a.shape
    out = np.empty((rows, n), np.float32)
    for p in range(rows):
        r = init[p]
        for i in range(n):
            t = scalar_op(code0, r, a[p, i]) if reverse0 else scalar_op(code0, a[p, i], r)
            r = scalar_op(code1, b[p, i], t) if reverse1 else scalar_op(code1, t, b[p, i])
            out[p, i] = r
    return out


def fold(op: str, x: np.ndarray) -> np.ndarray:
    """Sequential fold of each row of a 2-D array: float32 for arithmetic operators, uint32 patterns
    for bitwise ones."""
    if IS_BITVEC[op]:
        return fold_rows_bits(np.ascontiguousarray(x, np.uint32), CODES[op])
    return fold_rows(np.ascontiguousarray(x, np.float32), CODES[op])
