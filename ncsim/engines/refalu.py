"""The ALU operators one value at a time in plain Python: the references' definition of each operator.

Written independently of `ncsim.engines.alu` (which is vectorised and compiled) from the rules in
docs/numerics.md, so that the tests compare two implementations of one definition. Values are
numpy float32 scalars; each arithmetic operation is one fp32 operation; power and rsqrt go through
float64 and are rounded once.
"""

from __future__ import annotations

import math

import numpy as np

F = np.float32
ZERO = F(0)


def bits(x: np.float32) -> int:
    return int(np.array([x], F).view(np.uint32)[0])


def from_bits(u: int) -> np.float32:
    return np.array([u & 0xFFFFFFFF], np.uint32).view(F)[0]


CANONICAL_NAN = 0x7FC00000


def op(name: str, a: np.float32, b: np.float32 = ZERO) -> np.float32:
    """`name` applied to fp32 values; every NaN result is the canonical quiet NaN (bits 0x7FC00000)."""
    r = _op(name, F(a), F(b))
    return from_bits(CANONICAL_NAN) if math.isnan(r) else r


def _op(name: str, a: np.float32, b: np.float32) -> np.float32:
    with np.errstate(all="ignore"):
        match name:
            case "add":
                return F(a + b)
            case "subtract":
                return F(a - b)
            case "multiply":
                return F(a * b)
            case "divide":
                return F(a / b)
            case "maximum" | "minimum":
                if math.isnan(a) or math.isnan(b):
                    return F(math.nan)
                if a == b:  # same value; only the sign of a zero can differ
                    ba, bb = bits(a), bits(b)
                    return from_bits(ba & bb if name == "maximum" else ba | bb)
                bigger = max(b, a)
                smaller = min(a, b)
                return bigger if name == "maximum" else smaller
            case "power":
                try:
                    return F(math.pow(float(a), float(b)))
                except (ValueError, OverflowError):
                    return F(np.power(np.float64(a), np.float64(b)))
            case "equal":
                return F(1.0 if a == b else 0.0)
            case "not_equal":
                return F(1.0 if a != b else 0.0)
            case "greater":
                return F(1.0 if a > b else 0.0)
            case "greater_equal":
                return F(1.0 if a >= b else 0.0)
            case "less":
                return F(1.0 if a < b else 0.0)
            case "less_equal":
                return F(1.0 if a <= b else 0.0)
            case "logical_and":
                return F(1.0 if (a != 0 and b != 0) else 0.0)
            case "logical_or":
                return F(1.0 if (a != 0 or b != 0) else 0.0)
            case "logical_xor":
                return F(1.0 if ((a != 0) != (b != 0)) else 0.0)
            case "logical_not":
                return F(1.0 if a == 0 else 0.0)
            case "abs":
                return from_bits(bits(a) & 0x7FFFFFFF)
            case "rsqrt":
                x = float(a)
                if x < 0 or math.isnan(x):
                    return F(math.nan)
                if x == 0:
                    return F(math.copysign(math.inf, x))
                return F(1.0 / math.sqrt(x))
            case "reciprocal":
                return F(F(1) / a)
    raise ValueError(name)


def bitop(name: str, a: int, b: int = 0) -> int:
    """The bitwise operators on 32-bit patterns (Python ints in 0..2**32-1)."""
    mask = 0xFFFFFFFF
    match name:
        case "bitwise_and":
            return a & b
        case "bitwise_or":
            return a | b
        case "bitwise_xor":
            return a ^ b
        case "invert":
            return ~a & mask
        case "left_shift":
            return (a << b) & mask if b < 32 else 0
        case "right_shift":
            return a >> b if b < 32 else 0
    raise ValueError(name)
