"""Lanes: one integer per unrolled iteration, so that a loop body is parsed once for all of them.

The template assembler (`ncsim.asm.template`) binds each loop variable to a `Lanes` value, an int64
array with one entry ("lane") per iteration, and runs the ordinary parser and rules once over the
whole body. Arithmetic is elementwise; a result that is the same in every lane collapses back to a
plain Python int, so whatever does not depend on the loop (a slice's count, a step, a partition
range) is an int again and every rule about it runs once.

Where the parser branches on a value (`if start >= size`, `min(stop, size)`, `accumulate=k > 0`), the
comparison gives a plain bool when all lanes agree. When they disagree, `bool()` raises `Diverge`
with the key that splits the lanes into groups that do agree; the template assembler parses each
group again, so every group follows one path through the parser, exactly as each iteration would
alone. Converting a non-uniform value to a Python int (`range()`, `int()`, `float()`) splits by the
value itself.

Integers stay exact: an operation whose result might not fit in 62 bits raises `Unvectorisable`
(the caller then assembles that loop one iteration at a time, where Python's integers are exact and
the usual 64-bit limits of `ncsim.asm.expr` apply).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

_SAFE = float(2**62)  # |values| below this stay exact through one +, -, * in int64


class Diverge(Exception):
    """The lanes disagree at a branch: `key` (one value per lane) groups those that agree."""

    def __init__(self, key: np.ndarray):
        super().__init__("lanes diverge")
        self.key = key


class Unvectorisable(Exception):
    """An operation that int64 lanes cannot carry out exactly."""


def lanes(values: np.ndarray) -> Lanes | int:
    """A Lanes of `values`, or a plain int when every lane holds the same value."""
    if values.shape[0] and (values == values[0]).all():
        return int(values[0])
    return Lanes(values)


def _bools(values: np.ndarray) -> LaneBool | bool:
    if values.shape[0] and (values == values[0]).all():
        return bool(values[0])
    return LaneBool(values)


def _arr(x: Any) -> np.ndarray | int:
    if isinstance(x, Lanes):
        return x.v
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, int):
        if not -(2**62) < x < 2**62:
            raise Unvectorisable(f"{x} is too large for int64 lanes")
        return x
    raise Unvectorisable(f"lanes cannot combine with {type(x).__name__}")


def _max_abs(x: np.ndarray | int) -> float:
    if isinstance(x, np.ndarray):
        return float(max(x.max(), -x.min())) if x.size else 0.0  # |values| < 2**62: no overflow
    return float(abs(x))


def _checked(a: np.ndarray | int, b: np.ndarray | int, op: str) -> Lanes | int:
    # The bound from the largest magnitudes (two passes, no temporaries) settles almost every case;
    # only when it fails is the bound taken lane by lane, which is what decides.
    ma, mb = _max_abs(a), _max_abs(b)
    if (ma * mb if op == "*" else ma + mb) >= _SAFE:
        fa, fb = np.abs(np.asarray(a, np.float64)), np.abs(np.asarray(b, np.float64))
        bound = fa * fb if op == "*" else fa + fb
        if np.max(bound) >= _SAFE:
            raise Unvectorisable("an integer expression may exceed 62 bits")
    if op == "+":
        r = a + b
    elif op == "-":
        r = a - b
    else:
        r = a * b
    return lanes(np.asarray(r, np.int64))


class Lanes:
    """An integer that has one value per lane (int64); see the module's docstring."""

    __slots__ = ("v",)

    def __init__(self, values: np.ndarray):
        self.v = values

    def __len__(self) -> int:
        return self.v.shape[0]

    # -- arithmetic
    def __add__(self, o: Any) -> Lanes | int:
        return _checked(self.v, _arr(o), "+")

    __radd__ = __add__

    def __sub__(self, o: Any) -> Lanes | int:
        return _checked(self.v, _arr(o), "-")

    def __rsub__(self, o: Any) -> Lanes | int:
        return _checked(_arr(o), self.v, "-")

    def __mul__(self, o: Any) -> Lanes | int:
        return _checked(self.v, _arr(o), "*")

    __rmul__ = __mul__

    def _divisor(self, o: Any) -> np.ndarray | int:
        d = _arr(o)
        if np.any(np.asarray(d) == 0):
            raise Unvectorisable("division by zero in some lane")
        return d

    def __floordiv__(self, o: Any) -> Lanes | int:
        return lanes(self.v // self._divisor(o))

    def __rfloordiv__(self, o: Any) -> Lanes | int:
        return lanes(_arr(o) // Lanes(self.v)._divisor(self))

    def __mod__(self, o: Any) -> Lanes | int:
        return lanes(self.v % self._divisor(o))

    def __rmod__(self, o: Any) -> Lanes | int:
        return lanes(_arr(o) % Lanes(self.v)._divisor(self))

    def __pow__(self, o: Any) -> Lanes | int:
        e = _arr(o)
        if np.any(np.asarray(e) < 0):
            raise Unvectorisable("negative power")
        big = np.abs(self.v.astype(np.float64)) ** np.asarray(e, np.float64)
        if np.max(big) >= _SAFE:
            raise Unvectorisable("a power may exceed 62 bits")
        return lanes(self.v ** e)

    def __rpow__(self, o: Any) -> Lanes | int:
        return Lanes(np.full_like(self.v, _arr(o))).__pow__(self)

    def __neg__(self) -> Lanes | int:
        return lanes(-self.v)

    def __pos__(self) -> Lanes:
        return self

    def __abs__(self) -> Lanes | int:
        return lanes(np.abs(self.v))

    def __and__(self, o: Any) -> Lanes | int:
        return lanes(self.v & _arr(o))

    __rand__ = __and__

    def __or__(self, o: Any) -> Lanes | int:
        return lanes(self.v | _arr(o))

    __ror__ = __or__

    # -- comparisons: a bool when every lane agrees, else a LaneBool
    def _cmp(self, o: Any, op: Callable[[Any, Any], Any]) -> LaneBool | bool:
        if isinstance(o, int) and not isinstance(o, bool) and not -(2**62) < o < 2**62:
            # exact against any Python int: one outside int64 is above (below) every lane; one inside
            # compares as an int64
            if not -(2**63) <= o < 2**63:
                return bool(op(0, 1) if o > 0 else op(1, 0))
            return _bools(op(self.v, np.int64(o)))
        return _bools(op(self.v, _arr(o)))

    def __lt__(self, o: Any) -> LaneBool | bool:
        return self._cmp(o, operator.lt)

    def __le__(self, o: Any) -> LaneBool | bool:
        return self._cmp(o, operator.le)

    def __gt__(self, o: Any) -> LaneBool | bool:
        return self._cmp(o, operator.gt)

    def __ge__(self, o: Any) -> LaneBool | bool:
        return self._cmp(o, operator.ge)

    def __eq__(self, o: object) -> LaneBool | bool:  # type: ignore[override]
        if not isinstance(o, (int, Lanes)):
            return False
        return self._cmp(o, operator.eq)

    def __ne__(self, o: object) -> LaneBool | bool:  # type: ignore[override]
        if not isinstance(o, (int, Lanes)):
            return True
        return self._cmp(o, operator.ne)

    def __hash__(self) -> int:
        return hash(self.v.tobytes())

    # -- the places where Python needs one value: split the lanes by it
    def __bool__(self) -> bool:
        raise Diverge(self.v != 0)

    def __index__(self) -> int:
        raise Diverge(self.v)

    __int__ = __index__

    def __float__(self) -> float:
        raise Diverge(self.v)

    def bit_length(self) -> int:
        return int(max(int(self.v.max()).bit_length(), int(self.v.min()).bit_length()))

    def __repr__(self) -> str:
        return f"Lanes({self.v.tolist()[:4]}{'...' if len(self.v) > 4 else ''})"

    __str__ = __repr__


class LaneBool:
    """A comparison whose lanes disagree: using it as a bool splits the lanes (`Diverge`)."""

    __slots__ = ("v",)

    def __init__(self, values: np.ndarray):
        self.v = values

    def __bool__(self) -> bool:
        raise Diverge(self.v)

    def as_int(self) -> Lanes:
        return Lanes(self.v.astype(np.int64))

    def __hash__(self) -> int:
        return hash(self.v.tobytes())


def is_int(x: Any) -> bool:
    """An integer, in one lane or many."""
    return isinstance(x, (int, Lanes))
