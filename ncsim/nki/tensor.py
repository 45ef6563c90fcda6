"""NKI tensors while tracing: buffers placed by ncsim's allocator, and views of them.

A `Buffer` is one placed tensor (an `ncsim.asm.objfile.TensorEntry`): a kernel argument or output
in HBM, or a tile in SBUF or PSUM. A `View` is what NKI code holds: a buffer seen through a start
and one (step, count) per axis, in elements. On chip, axis 0 is the partition axis (a contiguous
range of partitions); every other axis is a free dimension of the access pattern. Indexing a view
(ints, slices, `nl.ds`, or the affine expressions of `ncsim.nki.indexing`) makes another view of
the same buffer; `ap()` turns a view into the hardware access pattern an instruction takes.

A view made by an `nl.*` call may still be *pending*: its instruction is known but its
destination is not yet placed. It is placed at its creation site when first used, or written
straight into the destination when it is assigned (`out[...] = nl.exp(x)`), so no copy is needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

import ml_dtypes
import numpy as np

from ncsim import dtypes
from ncsim.asm.fields import MAX_FREE_DIMS, MAX_HBM_DIMS
from ncsim.asm.objfile import TensorEntry
from ncsim.asm.slices import merge_dims
from ncsim.errors import AsmError
from ncsim.memory.access import AccessPattern, Memory
from ncsim.nki.indexing import Index, Mask

if TYPE_CHECKING:
    from ncsim.nki.tracer import Pending

MEMORY = {"hbm": Memory.HBM, "sbuf": Memory.SBUF, "psum": Memory.PSUM}


# ------------------------------------------------------------------ dtypes
class _TF32:
    """nl.tfloat32: numpy has no such type; ncsim stores it as float32 with 13 low bits zero."""

    name = "tfloat32"

    def __repr__(self) -> str:
        return "tfloat32"


tfloat32 = _TF32()
_NP_TO_SHORT = {np.dtype(np.uint8): "u8", np.dtype(np.uint16): "u16", np.dtype(np.uint32): "u32",
                np.dtype(np.int8): "i8", np.dtype(np.int16): "i16", np.dtype(np.int32): "i32",
                np.dtype(ml_dtypes.float8_e4m3): "fp8e4", np.dtype(ml_dtypes.float8_e5m2): "fp8e5",
                np.dtype(np.float16): "f16", np.dtype(ml_dtypes.bfloat16): "bf16",
                np.dtype(np.float32): "f32", np.dtype(np.bool_): "bool"}


def to_dtype(x: Any) -> dtypes.DType:
    """An NKI dtype (nl.float32, np.float32, 'bfloat16', an ncsim DType) as ncsim's DType."""
    if isinstance(x, dtypes.DType):
        return x
    if x is tfloat32:
        return dtypes.by_name("tf32")
    if isinstance(x, str) and dtypes.by_name(x) is not None:
        return dtypes.by_name(x)
    try:
        short = _NP_TO_SHORT.get(np.dtype(x))
    except TypeError:
        short = None
    if short is None:
        raise AsmError(f"{x!r} is not an NKI dtype; NKI has "
                       + ", ".join(d.name for d in dtypes.DTYPES))
    return dtypes.by_name(short)


def numpy_dtype(d: dtypes.DType) -> np.dtype:
    """The numpy dtype of a kernel's values of `d` (bool as np.bool_, tf32 as float32)."""
    return np.dtype(np.bool_) if d.kind == "bool" else d.storage


# ------------------------------------------------------------------ buffers
@dataclass(eq=False)
class Buffer:
    """One placed tensor and what the tracer knows of its contents."""

    entry: TensorEntry
    name: str
    # PSUM accumulation (ncsim.nki.language's `+=`): `zeroed`, the buffer holds zeros (or, when it had
    # held nothing, nothing) except where nc_matmul results were written since (those patterns
    # accumulate; elsewhere a matmul starts the accumulation); `zero_pending` while the memset that
    # makes the zeros has not been emitted (a matmul that overwrites all of it makes it unneeded).
    zeroed: bool = False
    zero_pending: bool = False
    matmul_written: set[AccessPattern] = field(default_factory=set)
    stored: bool = False  # some instruction wrote the tensor
    # automatic allocation under pressure (Tracer.make_room): when the buffer was last used, the block
    # of a lazily made block tensor it holds (a weak reference to the tensor, the block), and, once its
    # tile was given to another, what it was (using it is then refused)
    last_use: int = 0
    block: Any = None
    evicted: str = ""
    spilled: Any = None  # an SBUF tile whose place was taken: (its store's program-order place or None, where) until reloaded
    # spill choice (Tracer.make_room): the tile's number among the tiles the kernel made (-1: a
    # reload's), and, while the tile holds what a DMA copied whole from HBM and neither was written
    # since, (the copy's destination partition, offset, dims and dtype, its source view, the source
    # tensor's version then). An HBM tensor's version counts the writes to it.
    seq: int = -1
    source: Any = None
    version: int = 0

    @property
    def memory(self) -> str:
        return self.entry.memory

    @property
    def dtype(self) -> dtypes.DType:
        return self.entry.dtype

    @property
    def on_chip(self) -> bool:
        return self.entry.memory != "hbm"

    def extent(self) -> tuple[int, int]:
        """(partitions, elements per partition) on chip; (1, elements) in HBM."""
        shape = self.entry.shape
        if self.on_chip:
            return shape[0], math.prod(shape[1:])
        return 1, math.prod(shape)

    def whole(self) -> View:
        return View.of(self)


def row_major(shape: tuple[int, ...], on_chip: bool) -> tuple[tuple[int, int], ...]:
    """(step, count) per axis of a row-major tensor; the partition axis's step is 0 (unused)."""
    dims = []
    step = 1
    for i in range(len(shape) - 1, -1, -1):
        dims.append((0 if on_chip and i == 0 else step, shape[i]))
        if not (on_chip and i == 0):
            step *= shape[i]
    return tuple(reversed(dims))


# ------------------------------------------------------------------ views
class View:
    """An NKI tensor, tile or view while tracing (see the module docstring)."""

    __array_priority__ = 1000  # numpy scalars on the left defer to our operators
    __slots__ = ("__weakref__", "_ap", "_buf", "_dtype", "dims", "dynamic", "offset", "partition", "pending")

    def __init__(self, buf: Buffer | None, partition: int, offset: int, dims: tuple[tuple[int, int], ...],
                 dtype: dtypes.DType, pending: Pending | None = None):
        self._buf = buf
        self.partition = partition  # first partition, relative to the buffer (on chip)
        self.offset = offset  # elements from the buffer's start (in each partition on chip)
        self.dims = dims  # (step, count) per axis; on chip axis 0 is partitions (its step unused)
        self._dtype = dtype
        self.pending = pending
        # (index tile element, element step) when an index holds a tile element read at run time
        # (nisa.tensor_copy_dynamic_src/_dst): the view is then the one at run-time offset 0.
        self.dynamic: tuple[View, int] | None = None
        self._ap: tuple | None = None  # (buf, partition, offset, dims, its AccessPattern): see ap()

    @classmethod
    def of(cls, buf: Buffer) -> View:
        return cls(buf, 0, 0, row_major(buf.entry.shape, buf.on_chip), buf.dtype)

    # ---------------------------------------------------------------- what NKI code reads
    @property
    def buf(self) -> Buffer:
        if self._buf is None:
            assert self.pending is not None
            self.pending.tracer.place(self)
        assert self._buf is not None
        return self._buf

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(c for _, c in self.dims)

    @property
    def dtype(self) -> Any:
        return numpy_dtype(self._dtype) if self._dtype.short != "tf32" else tfloat32

    @property
    def nc_dtype(self) -> dtypes.DType:
        return self._dtype

    @property
    def ndim(self) -> int:
        return len(self.dims)

    @property
    def memory(self) -> str:
        return self.pending.memory if self._buf is None and self.pending is not None else self.buf.memory

    @property
    def on_chip(self) -> bool:
        return self.memory != "hbm"

    @property
    def partitions(self) -> int:
        return self.dims[0][1] if self.on_chip else 1

    @property
    def free_elements(self) -> int:
        return math.prod(c for _, c in (self.dims[1:] if self.on_chip else self.dims))

    def __len__(self) -> int:
        return self.dims[0][1]

    def __repr__(self) -> str:
        where = self.memory if self._buf is not None or self.pending is not None else "?"
        return f"<nki tensor {self._dtype.name}{list(self.shape)} in {where}>"

    def __bool__(self) -> bool:
        raise AsmError("a tile has no truth value while tracing: its values are computed later, by the simulation")

    def __iter__(self):
        raise AsmError("a tile cannot be iterated while tracing; index it with nl.arange or slices")

    # ---------------------------------------------------------------- making views
    def derive(self, partition: int, offset: int, dims: tuple[tuple[int, int], ...],
               dtype: dtypes.DType | None = None) -> View:
        return View(self.buf, partition, offset, dims, dtype or self._dtype)

    def __getitem__(self, key: Any) -> View:
        return index_view(self, key)

    def reshape(self, shape: Any) -> View:
        """The same elements with another shape; the view must be contiguous (row-major)."""
        shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        if math.prod(shape) != math.prod(self.shape):
            raise AsmError(f"cannot reshape {list(self.shape)} ({math.prod(self.shape)} elements) into"
                           f" {list(shape)} ({math.prod(shape)} elements)")
        if self.on_chip:
            if shape[0] != self.partitions:
                raise AsmError(f"a tile's reshape keeps its {self.partitions} partitions, not {shape[0]}")
            free = self.dims[1:]
        else:
            free = self.dims
        step = 1
        for s, c in reversed(free):
            if c != 1 and s != step:
                raise AsmError(f"reshape needs a contiguous view; this one is {list(self.shape)} with steps"
                               f" {[s for s, _ in self.dims]}")
            step *= c
        return self.derive(self.partition, self.offset, row_major(shape, self.on_chip))

    def broadcast_to(self, shape: Any) -> View:
        from ncsim.nki import language

        return language.broadcast_to(self, shape)

    @property
    def T(self) -> View:
        from ncsim.nki import language

        return language.transpose(self)

    def ap(self) -> AccessPattern:
        """The access pattern of this view, checked against its buffer's bounds. Kept with the view
        (a tile is read by several instructions) while its buffer, start and dims stay those it was
        made from (ncsim.nki.language points pending views at their destination)."""
        c = self._ap
        if c is not None and c[0] is self._buf and c[1] == self.partition and c[2] == self.offset and c[3] is self.dims \
                and c[5] is self._buf.entry:
            return c[4]
        ap = self._make_ap()
        self._ap = (self._buf, self.partition, self.offset, self.dims, ap, self._buf.entry if self._buf else None)
        return ap

    def _make_ap(self) -> AccessPattern:
        buf = self.buf
        e = buf.entry
        memory = MEMORY[e.memory]
        size = e.dtype.itemsize
        lo = self.offset + sum(s * (c - 1) for s, c in self.dims[1 if buf.on_chip else 0:] if s < 0)
        hi = self.offset + sum(s * (c - 1) for s, c in self.dims[1 if buf.on_chip else 0:] if s > 0)
        parts, per = buf.extent()
        if lo < 0 or hi >= per or (buf.on_chip and not 0 <= self.partition <= self.partition + self.dims[0][1] <= parts):
            raise AsmError(f"index out of bounds: this view of {buf.name} {list(e.shape)} reaches "
                           + (f"partitions {self.partition}..{self.partition + self.dims[0][1] - 1} and " if buf.on_chip
                              else "") + f"elements {lo}..{hi} of {per}")
        if buf.on_chip:
            free = [(s, c) for s, c in self.dims[1:]] or [(1, 1)]
            dims = merge_dims(free, MAX_FREE_DIMS)
            if len(dims) > MAX_FREE_DIMS:
                raise AsmError(f"this view of {buf.name} needs {len(dims)} free dimensions; an access pattern"
                               f" on chip has at most {MAX_FREE_DIMS}")
            return AccessPattern(memory, e.dtype, e.partition + self.partition, self.dims[0][1],
                                 e.address + self.offset * size, tuple(dims))
        dims = merge_dims(list(self.dims) or [(1, 1)], MAX_HBM_DIMS)
        if len(dims) > MAX_HBM_DIMS:
            raise AsmError(f"this view of {buf.name} needs {len(dims)} dimensions; an HBM access pattern has"
                           f" at most {MAX_HBM_DIMS}")
        return AccessPattern(memory, e.dtype, 0, 0, e.address + self.offset * size, tuple(dims))

    def clip(self, intervals: dict[int, tuple[int, int]]) -> View:
        """This view with axis d narrowed to positions [lo, hi) for each (d, (lo, hi)) (a mask)."""
        if not intervals:
            return self
        dims = list(self.dims)
        partition, offset = self.partition, self.offset
        for d, (lo, hi) in intervals.items():
            if d >= len(dims):
                continue  # a dimension this operand does not have (a broadcast column)
            step, count = dims[d]
            if count == 1:
                continue
            hi = min(hi, count)
            if self.on_chip and d == 0:
                partition += lo
            else:
                offset += step * lo
            dims[d] = (step, hi - lo)
        return View(self.buf, partition, offset, tuple(dims), self._dtype)

    # ---------------------------------------------------------------- assignment and operators
    def __setitem__(self, key: Any, value: Any) -> None:
        from ncsim.nki import language

        language.assign(self[key], value)

    def _binary(self, name: str, other: Any, reverse: bool = False) -> View:
        from ncsim.nki import language

        fn = getattr(language, name)
        return fn(other, self) if reverse else fn(self, other)

    def __add__(self, o: Any) -> View:
        if isinstance(o, Index):
            return Dynamic(self, o)  # type: ignore[return-value]
        return self._binary("add", o)

    def __radd__(self, o: Any) -> View:
        if isinstance(o, Index):
            return Dynamic(self, o)  # type: ignore[return-value]
        return self._binary("add", o, True)

    def __sub__(self, o: Any) -> View:
        return self._binary("subtract", o)

    def __rsub__(self, o: Any) -> View:
        return self._binary("subtract", o, True)

    def __mul__(self, o: Any) -> View:
        return self._binary("multiply", o)

    def __rmul__(self, o: Any) -> View:
        return self._binary("multiply", o, True)

    def __truediv__(self, o: Any) -> View:
        return self._binary("divide", o)

    def __rtruediv__(self, o: Any) -> View:
        return self._binary("divide", o, True)

    def __pow__(self, o: Any) -> View:
        return self._binary("power", o)

    def __rpow__(self, o: Any) -> View:
        return self._binary("power", o, True)

    def __neg__(self) -> View:
        from ncsim.nki import language

        return language.negative(self)

    def __abs__(self) -> View:
        from ncsim.nki import language

        return language.abs(self)

    def __and__(self, o: Any) -> View:
        return self._binary("bitwise_and", o)

    def __or__(self, o: Any) -> View:
        return self._binary("bitwise_or", o)

    def __xor__(self, o: Any) -> View:
        return self._binary("bitwise_xor", o)

    def __invert__(self) -> View:
        from ncsim.nki import language

        return language.invert(self)

    def __lshift__(self, o: Any) -> View:
        return self._binary("left_shift", o)

    def __rshift__(self, o: Any) -> View:
        return self._binary("right_shift", o)

    def __lt__(self, o: Any) -> View:
        return self._binary("less", o)

    def __le__(self, o: Any) -> View:
        return self._binary("less_equal", o)

    def __gt__(self, o: Any) -> View:
        return self._binary("greater", o)

    def __ge__(self, o: Any) -> View:
        return self._binary("greater_equal", o)

    def __eq__(self, o: object) -> View:  # type: ignore[override]
        return self._binary("equal", o)

    def __ne__(self, o: object) -> View:  # type: ignore[override]
        return self._binary("not_equal", o)

    __hash__ = object.__hash__

    def _inplace(self, name: str, other: Any) -> View:
        from ncsim.nki import language

        return language.update(self, name, other)

    def __iadd__(self, o: Any) -> Self:
        return self._inplace("add", o)

    def __isub__(self, o: Any) -> Self:
        return self._inplace("subtract", o)

    def __imul__(self, o: Any) -> Self:
        return self._inplace("multiply", o)

    def __itruediv__(self, o: Any) -> Self:
        return self._inplace("divide", o)


# ------------------------------------------------------------------ indexing
@dataclass(frozen=True, eq=False)
class Dynamic:
    """`tile_element + index_expression` in an index: an offset read at run time (NKI's dynamic
    access, nisa.tensor_copy_dynamic_src / _dst) plus a static affine part."""

    element: View
    expr: Index


def _dynamic_key(v: View, keys: list[Any]) -> View:
    """An index with one run-time part (a tile element, or a Dynamic): the view at run-time offset 0,
    remembering the element and the element step of its axis."""
    found = [i for i, k in enumerate(keys) if isinstance(k, (View, Dynamic))]
    if len(found) != 1:
        raise AsmError("an index may hold one run-time value (a tile element); this one holds"
                       f" {len(found)}")
    axis = found[0]
    k = keys[axis]
    element = k if isinstance(k, View) else k.element
    if math.prod(element.shape) != 1:
        raise AsmError(f"index of dimension {axis}: a run-time index is one tile element (as t[i_p, offs[0, j] + i_f]);"
                       f" this one is a tile of {list(element.shape)}, a gather of rows by a tile of indices, which"
                       " ncsim does not implement")
    if v.on_chip and axis == 0:
        raise AsmError("a run-time index moves a view along its free axes, not across partitions")
    static = list(keys)
    static[axis] = k.expr if isinstance(k, Dynamic) else 0
    out = index_view(v, tuple(static))
    out.dynamic = (element, v.dims[axis][0])
    return out


def _normalise(key: Any, ndim: int) -> list[Any]:
    keys = list(key) if isinstance(key, tuple) else [key]
    if any(k is Ellipsis for k in keys):
        if sum(k is Ellipsis for k in keys) > 1:
            raise AsmError("an index may hold one '...'")
        i = next(i for i, k in enumerate(keys) if k is Ellipsis)
        keys[i:i + 1] = [slice(None)] * (ndim - len(keys) + 1)
    if len(keys) > ndim:
        raise AsmError(f"too many indices: the tensor has {ndim} dimensions, the index {len(keys)}")
    return keys + [slice(None)] * (ndim - len(keys))


def index_view(v: View, key: Any) -> View:
    """v[key]: basic indexing (ints, slices, nl.ds) or advanced (nl.arange / nl.mgrid expressions)."""
    if isinstance(key, Mask):
        raise AsmError("a mask goes in mask=, not in the index")
    keys = _normalise(key, v.ndim)
    on_chip = v.on_chip
    if any(isinstance(k, (View, Dynamic)) for k in keys):
        return _dynamic_key(v, keys)
    if any(isinstance(k, Index) for k in keys):
        return _advanced(v, keys)
    partition, offset = v.partition, v.offset
    dims: list[tuple[int, int]] = []
    for axis, (k, (step, count)) in enumerate(zip(keys, v.dims)):
        if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            i = int(k) + (count if k < 0 else 0)
            if not 0 <= i < count:
                raise AsmError(f"index {int(k)} is out of range for dimension {axis} of size {count}")
            if on_chip and axis == 0:
                partition += i
                dims.append((0, 1))  # a tile keeps its partition axis
            else:
                offset += step * i
            continue
        if not isinstance(k, slice):
            raise AsmError(f"index {k!r} of dimension {axis}: NKI takes ints, slices, nl.ds(...) and nl.arange"
                           " expressions")
        start, stop, stride = k.indices(count)
        n = len(range(start, stop, stride))
        if n <= 0:
            raise AsmError(f"the slice {start}:{stop}:{stride} of dimension {axis} (size {count}) is empty")
        if on_chip and axis == 0:
            if stride != 1:
                raise AsmError(f"a step of {stride} across partitions: partitions are taken as a contiguous range")
            partition += start
            dims.append((0, n))
        else:
            offset += step * start
            dims.append((step * stride, n))
    return v.derive(partition, offset, tuple(dims))


def _advanced(v: View, keys: list[Any]) -> View:
    """Index with affine expressions: the result's axes are the index grid's dimensions."""
    on_chip = v.on_chip
    exprs: list[Index] = []
    for axis, k in enumerate(keys):
        if isinstance(k, Index):
            exprs.append(k)
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            exprs.append(Index(int(k), (), (), 0))
        elif isinstance(k, slice) and k == slice(None) and axis > 0:
            raise AsmError("mixing ':' with nl.arange indices is not supported yet: index every dimension with"
                           " nl.arange / nl.mgrid expressions (or integers)")
        else:
            raise AsmError(f"index {k!r} of dimension {axis}: with nl.arange indices, the others must be nl.arange"
                           " expressions or integers")
    rank = max(e.rank for e in exprs)
    extent: dict[int, int] = {}
    for e in exprs:
        for d, n in e.extent:
            if extent.get(d, n) != n:
                raise AsmError(f"the index expressions disagree on dimension {d}: {extent[d]} and {n} values")
            extent[d] = n
    partition, offset = v.partition, v.offset
    steps = [0] * rank
    for axis, (e, (step, _)) in enumerate(zip(exprs, v.dims)):
        if on_chip and axis == 0:
            coefs = e.coefs
            if coefs and (set(coefs) != {0} or coefs[0] != 1):
                raise AsmError("the partition index must be c + nl.arange(n)[:, None] (one step per partition,"
                               " on the index grid's first dimension)")
            partition += e.const
            continue
        if on_chip and 0 in e.coefs:
            raise AsmError(f"index of dimension {axis} uses the index grid's first (partition) dimension; only the"
                           " first index may")
        offset += step * e.const
        for d, c in e.coef:
            steps[d] += step * c
    dims = tuple((0 if on_chip and d == 0 else steps[d], extent.get(d, 1)) for d in range(rank))
    return v.derive(partition, offset, dims)
