"""NKI index expressions: `nl.arange`, `nl.mgrid`, `nl.ds`, and the masks built from them.

An index expression is affine in the positions of an index grid: `const + sum_d coef[d] * pos_d`,
where grid dimension d runs over `pos_d = 0 .. extent[d] - 1`. `nl.arange(128)[:, None]` is
grid dimension 0 (the partition dimension of the tile it makes) with extent 128;
`nl.arange(512)[None, :]` is dimension 1. Arithmetic with integers and other expressions stays
affine (`4 * i_f + 1`, `i * 128 + i_p`); anything else is refused. Comparisons make a `Mask`: a
conjunction (`&`) of affine conditions, each on one grid dimension, which narrows that dimension
to an interval when an instruction is made (NKI: "NKI API Masking", nki.api.shared).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import numpy as np

from ncsim.errors import AsmError


@dataclass(frozen=True)
class Index:
    """An affine index expression over grid dimensions (see the module docstring)."""

    const: int
    coef: tuple[tuple[int, int], ...]  # (grid dimension, coefficient), sorted, no zero coefficients
    extent: tuple[tuple[int, int], ...]  # (grid dimension, extent) of every dimension it spans
    rank: int  # the rank of the index array it stands for ([:, None] makes 2)
    placed: bool = field(default=True, compare=False)  # False for a bare nl.arange (not yet [:, None])

    # ---------------------------------------------------------------- structure
    @property
    def coefs(self) -> dict[int, int]:
        return dict(self.coef)

    @property
    def extents(self) -> dict[int, int]:
        return dict(self.extent)

    @property
    def shape(self) -> tuple[int, ...]:
        ext = self.extents
        return tuple(ext.get(d, 1) for d in range(self.rank))

    def __getitem__(self, key: object) -> Index:
        """`nl.arange(n)[:, None]` and `[None, :]`: place a 1-D range on one axis of a grid."""
        keys = key if isinstance(key, tuple) else (key,)
        if self.placed and self.rank != 1 or len(self.extent) != 1:
            raise AsmError("only a 1-D nl.arange(...) can be placed with [:, None] or [None, :]")
        full = [i for i, k in enumerate(keys) if isinstance(k, slice) and k == slice(None)]
        if len(full) != 1 or any(k is not None for i, k in enumerate(keys) if i != full[0]):
            raise AsmError(f"an nl.arange is placed with one ':' and Nones, as in [:, None]; not {key!r}")
        d = full[0]
        (_old, n), = self.extent
        coef = tuple((d, c) for _, c in self.coef)
        return Index(self.const, coef, ((d, n),), len(keys))

    # ---------------------------------------------------------------- arithmetic
    def _combine(self, other: object, sign: int) -> Index:
        if isinstance(other, (bool, np.bool_)):
            raise AsmError("an index expression is affine: booleans do not add to it")
        if isinstance(other, (int, np.integer)):
            return Index(self.const + sign * int(other), self.coef, self.extent, self.rank)
        if not isinstance(other, Index):
            return NotImplemented
        coef = dict(self.coef)
        for d, c in other.coef:
            coef[d] = coef.get(d, 0) + sign * c
        ext = dict(self.extent)
        for d, n in other.extent:
            if ext.get(d, n) != n and 1 not in (ext.get(d), n):
                raise AsmError(f"index expressions disagree on grid dimension {d}: extents {ext[d]} and {n}")
            ext[d] = max(ext.get(d, 1), n)
        return Index(self.const + sign * other.const, _clean(coef), tuple(sorted(ext.items())),
                     max(self.rank, other.rank))

    def __add__(self, other: object) -> Index:
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other: object) -> Index:
        return self._combine(other, -1)

    def __rsub__(self, other: object) -> Index:
        return (-self)._combine(other, 1)

    def __neg__(self) -> Index:
        return self * -1

    def __mul__(self, other: object) -> Index:
        if isinstance(other, Index):
            raise AsmError("an index expression is affine: two index expressions cannot be multiplied")
        if not isinstance(other, (int, np.integer)) or isinstance(other, (bool, np.bool_)):
            return NotImplemented
        k = int(other)
        return Index(self.const * k, _clean({d: c * k for d, c in self.coef}), self.extent, self.rank)

    __rmul__ = __mul__

    # ---------------------------------------------------------------- comparisons make masks
    def _cmp(self, other: object, op: str) -> Mask:
        diff = self - other
        if diff is NotImplemented:
            return NotImplemented
        return Mask(((diff, op),))

    def __lt__(self, other: object) -> Mask:
        return self._cmp(other, "<")

    def __le__(self, other: object) -> Mask:
        return self._cmp(other, "<=")

    def __gt__(self, other: object) -> Mask:
        return self._cmp(other, ">")

    def __ge__(self, other: object) -> Mask:
        return self._cmp(other, ">=")

    def __eq__(self, other: object) -> Mask:  # type: ignore[override]
        return self._cmp(other, "==")

    def __ne__(self, other: object) -> Mask:  # type: ignore[override]
        return self._cmp(other, "!=")

    def __hash__(self) -> int:
        return hash((self.const, self.coef, self.extent, self.rank))

    def __bool__(self) -> bool:
        raise AsmError("an index expression has no truth value while tracing: use it in a mask= instead")


def _clean(coef: dict[int, int]) -> tuple[tuple[int, int], ...]:
    return tuple(sorted((d, c) for d, c in coef.items() if c))


_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
        "!=": operator.ne}


@dataclass(frozen=True)
class Mask:
    """A conjunction of `expr op 0` conditions, each affine in one grid dimension."""

    terms: tuple[tuple[Index, str], ...]

    def __and__(self, other: object) -> Mask:
        if isinstance(other, (bool, np.bool_)):  # a condition on loop variables: an int in ncsim's loops
            return self if other else Mask(self.terms + ((Index(-1, (), (), 0), ">="),))
        if not isinstance(other, Mask):
            return NotImplemented
        return Mask(self.terms + other.terms)

    __rand__ = __and__

    def __bool__(self) -> bool:
        raise AsmError("a mask has no truth value while tracing: pass it as mask=")

    def intervals(self) -> dict[int, tuple[int, int]] | None:
        """The positions [lo, hi) each masked grid dimension keeps, or None when nothing is kept."""
        out: dict[int, tuple[int, int]] = {}
        for expr, op in self.terms:
            if len(expr.coef) > 1:
                raise AsmError("a mask condition may involve one index dimension; this one involves"
                               f" {len(expr.coef)} (a triangle is nki.isa.affine_select's job)")
            if not expr.coef:
                if not _OPS[op](expr.const, 0):
                    return None
                continue
            (d, c), = expr.coef
            n = expr.extents.get(d, 1)
            pos = np.arange(n, dtype=np.int64)
            keep = np.flatnonzero(_OPS[op](c * pos + expr.const, 0))
            if keep.size == 0:
                return None
            lo, hi = int(keep[0]), int(keep[-1]) + 1
            if hi - lo != keep.size:
                raise AsmError(f"the mask condition '{op}' keeps positions that are not one interval")
            plo, phi = out.get(d, (0, n))
            lo, hi = max(lo, plo), min(hi, phi)
            if lo >= hi:
                return None
            out[d] = (lo, hi)
        return out


def arange(*args: int) -> Index:
    """nl.arange(stop) or nl.arange(start, stop): a 1-D range, placed with [:, None] or [None, :]."""
    if len(args) == 1:
        start, stop = 0, args[0]
    elif len(args) == 2:
        start, stop = args
    else:
        raise AsmError(f"nl.arange takes (stop) or (start, stop), not {len(args)} arguments")
    start, stop = int(start), int(stop)
    if stop <= start:
        raise AsmError(f"nl.arange({start}, {stop}) is empty")
    return Index(start, ((0, 1),), ((0, stop - start),), 1, placed=False)


class Grid(tuple):
    """What nl.mgrid returns: the index expressions, also named by axis (`.p` the partition axis, then
    `.x`, `.y`, `.z`), as NKI's examples use them (`g = nl.mgrid[0:32, 0:128]; t[g.p, g.x]`)."""

    @property
    def p(self) -> Index:
        return self[0]

    @property
    def x(self) -> Index:
        return self[1]

    @property
    def y(self) -> Index:
        return self[2]

    @property
    def z(self) -> Index:
        return self[3]


class _MGrid:
    """nl.mgrid[0:128, 0:512]: one index expression per slice, each on its own grid dimension."""

    def __getitem__(self, key: object) -> Index | Grid:
        keys = key if isinstance(key, tuple) else (key,)
        out = []
        for d, k in enumerate(keys):
            if not isinstance(k, slice) or k.stop is None:
                raise AsmError(f"nl.mgrid takes slices start:stop[:step], not {k!r}")
            start, step = k.start or 0, k.step or 1
            n = len(range(start, k.stop, step))
            if n <= 0 or step <= 0:
                raise AsmError(f"nl.mgrid slice {start}:{k.stop}:{step} is empty")
            out.append(Index(start, ((d, step),), ((d, n),), len(keys)))
        return out[0] if len(out) == 1 else Grid(out)


mgrid = _MGrid()


def ds(start: int, size: int) -> slice:
    """nl.ds(start, size): the slice start:start + size."""
    return slice(int(start), int(start) + int(size))
