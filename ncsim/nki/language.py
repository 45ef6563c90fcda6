"""`nki.language` (nl) as ncsim traces it: tensors, loads and stores, and the tile operations.

Each function adds the instructions docs/nki.md lists for it, on the engine the engine policy there
gives (NKI leaves the choice to its compiler; ncsim's is fixed and documented, not a timing knob):
elementwise arithmetic and reductions on the Vector engine (`tensor_tensor`, `tensor_scalar`,
`tensor_reduce`), the activation-table functions on the Scalar engine (`activation`), matmul and
transpose on the Tensor engine, loads issued by the Sync engine and stores by GpSimd (`dma_copy`).
A function ncsim does not have fails with its name and the list of those it has.
"""

from __future__ import annotations

import builtins
import math
import weakref
from typing import Any

import ml_dtypes
import numpy as np

from ncsim import dtypes
from ncsim.config import DEFAULT
from ncsim.errors import AsmError
from ncsim.isa import ACTIVATION_FUNCS
from ncsim.nki import compiler as _compiler
from ncsim.nki import tracer as _tracer
from ncsim.nki.compiler import Direct as _Direct
from ncsim.nki.indexing import Mask, arange, ds, mgrid
from ncsim.nki.tensor import View, numpy_dtype, tfloat32, to_dtype
from ncsim.nki.tracer import constant, current, user_place

__all__ = ["arange", "ds", "mgrid", "tfloat32"]  # the rest are listed by NAMES below
_builtins = builtins  # the reductions below shadow max, min, sum and all in this module

# ------------------------------------------------------------------ dtypes (NKI: nki.api.shared, Supported Data Types)
bool_ = np.bool_
int8, int16, int32 = np.int8, np.int16, np.int32
uint8, uint16, uint32 = np.uint8, np.uint16, np.uint32
float16, float32 = np.float16, np.float32
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)


class fp32:
    """nl.fp32.min: the most negative finite float32 (bit pattern 0xff7fffff), NKI's masking value."""

    min = float(np.finfo(np.float32).min)


# ------------------------------------------------------------------ memories
class _Memory:
    def __init__(self, name: str, memory: str):
        self.name = name
        self.memory = memory

    def __repr__(self) -> str:
        return f"nl.{self.name}"


sbuf = _Memory("sbuf", "sbuf")
psum = _Memory("psum", "psum")
hbm = _Memory("hbm", "hbm")
private_hbm = _Memory("private_hbm", "hbm")
shared_hbm = _Memory("shared_hbm", "hbm")


class ParDim(int):
    """nl.par_dim(n): marks the partition dimension of a shape (the first, unless block dimensions
    come before it)."""


def par_dim(n: int) -> int:
    """nl.par_dim(n) marks the partition dimension of a shape. Dimensions before it are block
    dimensions: `nl.zeros((4, nl.par_dim(128), 512))` is 4 tiles of [128, 512] (BlockTensor)."""
    return ParDim(int(n))


class BlockTensor:
    """An on-chip tensor with block dimensions before its partition dimension (NKI: "block
    dimension", nki.api.shared): one tile per block, each placed by ncsim's allocator at the
    creation site (a site's pool grows to hold them all, as they stay reachable). Indexing gives the
    tile of the block indices, then indexes it as usual: `t[b, 0:128, 0:512]`, `t[b]`.

    A PSUM tensor is made lazily (NKI's allocator maps logical blocks onto fewer physical tiles): a
    block gets its tile when first indexed. When the memory is full, the tile used least recently
    gives up its place (Tracer.make_room): an SBUF block is spilled and reloaded when used again; a
    PSUM block is evicted, and indexing it to read it, or using a view of it taken before, is refused
    with the rule (DMA cannot reach PSUM, so ncsim does not spill it), while assigning to it whole
    makes it again."""

    def __init__(self, blocks: list[View | None], block_shape: tuple[int, ...], tile_shape: tuple[int, ...],
                 dtype: Any = None, maker: Any = None):
        self.blocks = blocks
        self.block_shape = block_shape
        self.tile_shape = tile_shape
        self._dtype = dtype if dtype is not None else blocks[0].dtype
        self.maker = maker  # (memory, DType, place) of a lazily made tensor, else None
        self.evicted: set[int] = set()
        self.ref = weakref.ref(self)  # what its blocks' buffers name it by (Buffer.block), not keeping it

    @property
    def shape(self) -> tuple[int, ...]:
        return self.block_shape + self.tile_shape

    @property
    def dtype(self) -> Any:
        return self._dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"<nki block tensor {list(self.shape)} of {len(self.blocks)} tiles>"

    def _pick(self, key: Any, write: bool = False) -> tuple[View, tuple]:
        keys = key if isinstance(key, tuple) else (key,)
        nb = len(self.block_shape)
        lead = keys[:nb]
        if len(lead) < nb or not _builtins.all(isinstance(k, (int, np.integer)) and not isinstance(k, bool)
                                                for k in lead):
            raise current().fail(f"a tensor with block dimensions {list(self.block_shape)} is indexed by an"
                                 f" integer per block dimension first (t[b, ...]); not {key!r}")
        flat = 0
        for k, n in zip(lead, self.block_shape):
            k = int(k) + (n if k < 0 else 0)
            if not 0 <= k < n:
                raise current().fail(f"block index {k} is out of range for a block dimension of {n}")
            flat = flat * n + k
        if self.maker is not None:
            return current().lazy_block(self, flat, write, tuple(int(k) for k in lead)), tuple(keys[nb:])
        return self.blocks[flat], tuple(keys[nb:])  # type: ignore[return-value]

    def __getitem__(self, key: Any) -> View:
        view, rest = self._pick(key)
        return view[rest] if rest else view

    def __setitem__(self, key: Any, value: Any) -> None:
        view, rest = self._pick(key, write=not (isinstance(key, tuple) and len(key) > len(self.block_shape)))
        assign(view[rest] if rest else view, value)


class tile_size:
    """NKI's tile size constants, from ncsim's configuration (ncsim/config.py)."""

    pmax = DEFAULT.pmax
    psum_fmax = DEFAULT.psum_fmax
    gemm_stationary_fmax = DEFAULT.gemm_stationary_fmax
    gemm_moving_fmax = DEFAULT.gemm_moving_fmax
    bn_stats_fmax = DEFAULT.bn_stats_fmax
    total_available_sbuf_size = DEFAULT.sbuf_usable_bytes
    psum_min_align = 4
    sbuf_min_align = 1


# ------------------------------------------------------------------ SPMD and loops
def program_id(axis: int = 0) -> int:
    """The index of this SPMD instance along `axis` of the launch grid (kernel[gx, gy](...))."""
    tr = current("nl.program_id")
    if not 0 <= axis < _builtins.max(len(tr.grid), 1):
        raise tr.fail(f"nl.program_id({axis}): the launch grid has {len(tr.grid)} dimensions")
    return tr.program_id[axis] if tr.grid else 0


def num_programs(axes: int | None = None) -> int:
    tr = current("nl.num_programs")
    if axes is None:
        return math.prod(tr.grid) if tr.grid else 1
    return tr.grid[axes] if tr.grid else 1


def program_ndim() -> int:
    return len(current("nl.program_ndim").grid)


class _Range:
    """The range of an nl.affine_range / sequential_range loop: its body runs in Python once per
    iteration (the loop unrolls; iterations overlap through the buffer policy and the scheduler,
    ncsim.nki.schedule), and the tracer counts the loops running, so that a direct allocation in the
    body keeps the places of its first run (ncsim.nki.compiler). `directives=ncc.no_reorder()` makes
    the whole loop one no_reorder block. It reads as the range it holds."""

    __slots__ = ("keep_order", "r")

    def __init__(self, r: range, keep_order: bool = False):
        self.r = r
        self.keep_order = keep_order

    def __iter__(self) -> Any:
        tr = _tracer._current
        if tr is None:
            return iter(self.r)
        it = tr.loop(self.r, user_place().site)
        return _in_block(tr, it) if self.keep_order else it

    def __len__(self) -> int:
        return len(self.r)

    def __getitem__(self, i: Any) -> Any:
        return self.r[i]

    def __reversed__(self) -> Any:
        return reversed(self.r)

    def __contains__(self, x: Any) -> bool:
        return x in self.r

    def __eq__(self, other: object) -> bool:
        return self.r == (other.r if isinstance(other, _Range) else other)

    def __hash__(self) -> int:
        return hash(self.r)

    def __repr__(self) -> str:
        return repr(self.r)


def _in_block(tr: Any, it: Any) -> Any:
    tr.no_reorder(True)
    try:
        yield from it
    finally:
        tr.no_reorder(False)


def affine_range(*args: int, directives: Any = None, **_: Any) -> Any:
    """Loops run in Python while tracing (they unroll); iterations overlap through the buffer policy and
    the scheduler. directives=ncc.no_reorder() keeps the loop's instructions in program order."""
    return _Range(range(*(int(a) for a in args)), isinstance(directives, _compiler.no_reorder))


sequential_range = affine_range
no_reorder = _compiler.no_reorder  # nl.no_reorder(): a `with` block whose instructions keep their order


def static_range(*args: int, **_: Any) -> range:
    """A loop NKI unrolls while tracing: a Python range."""
    return range(*(int(a) for a in args))


# ------------------------------------------------------------------ type promotion
_FLOAT_ORDER = ("fp8e4", "fp8e5", "bf16", "f16", "f32")  # new widened types, narrowest first
_FLOAT_SHAPE = {"fp8e4": (4, 3), "fp8e5": (5, 2), "f16": (5, 10), "bf16": (8, 7), "tf32": (8, 10), "f32": (8, 23)}
_INT_ORDER = ("u8", "i8", "u16", "i16", "u32", "i32")


def _int_range(d: dtypes.DType) -> tuple[int, int]:
    if d.kind == "bool":
        return 0, 1
    info = np.iinfo(d.storage)
    return int(info.min), int(info.max)


def promote(a: dtypes.DType, b: dtypes.DType) -> dtypes.DType:
    """NKI Type Promotion (nki.api.shared): (float, int) -> the float; (float, float) -> the wider,
    or a new type that holds both ranges; (int, int) -> likewise, (int32, uint32) -> float32."""
    if a == b:
        return a
    if a.is_float != b.is_float:
        return a if a.is_float else b
    if a.is_float:
        ea, ma = _FLOAT_SHAPE[a.short]
        eb, mb = _FLOAT_SHAPE[b.short]
        if (ea, ma) >= (eb, mb) and ma >= mb:
            return a
        if eb >= ea and mb >= ma:
            return b
        need = (_builtins.max(ea, eb), _builtins.max(ma, mb))
        for short in _FLOAT_ORDER:
            e, m = _FLOAT_SHAPE[short]
            if e >= need[0] and m >= need[1]:
                return dtypes.by_name(short)
        return dtypes.FLOAT32
    lo = _builtins.min(_int_range(a)[0], _int_range(b)[0])
    hi = _builtins.max(_int_range(a)[1], _int_range(b)[1])
    for short in _INT_ORDER:
        d = dtypes.by_name(short)
        if _int_range(d)[0] <= lo and hi <= _int_range(d)[1]:
            return d
    return dtypes.FLOAT32


def _scalar_dtype(x: Any) -> dtypes.DType:
    """NKI: a weakly typed scalar is bool -> uint8, int -> int32, float -> float32; a numpy scalar
    keeps its dtype."""
    if isinstance(x, np.generic):
        return to_dtype(x.dtype)
    if isinstance(x, bool):
        return dtypes.UINT8
    if isinstance(x, int):
        return dtypes.INT32
    return dtypes.FLOAT32


def _dtype_of(x: Any) -> dtypes.DType:
    return x.nc_dtype if isinstance(x, View) else _scalar_dtype(x)


# ------------------------------------------------------------------ helpers
def _intervals(mask: Any) -> dict[int, tuple[int, int]] | None:
    """A mask's kept interval per grid dimension ({} without a mask); None when it keeps nothing."""
    if mask is None:
        return {}
    if isinstance(mask, (bool, np.bool_)):
        # a condition on loop variables only (NKI traces it as an expression; ncsim's loop variables
        # are integers, so it is decided here): True keeps everything, False nothing
        return {} if mask else None
    if not isinstance(mask, Mask):
        raise current().fail(f"mask= takes a comparison of nl.arange expressions, not {type(mask).__name__}")
    try:
        return mask.intervals()
    except AsmError as e:
        raise current().fail(e.message) from None


def _tile(x: Any, fn: str, what: str = "its input") -> View:
    if not isinstance(x, View):
        raise current().fail(f"nl.{fn}: {what} must be a tile, not {type(x).__name__}")
    if not x.on_chip:
        raise current().fail(f"nl.{fn}: {what} is in HBM; load it into SBUF first (nl.load)")
    return x


def _nothing(shape: tuple[int, ...], dtype: dtypes.DType) -> View:
    """The result of an instruction its mask removed entirely: a pending result with no instruction.
    Assigned to a tensor it writes nothing; read, it is an unwritten tile of the right shape."""
    return current().result(shape, dtype, "sbuf", "")


def _column(v: View, partitions: int) -> bool:
    """A [P, 1] operand: one value per partition, broadcast along the free axes."""
    return v.on_chip and v.partitions == partitions and v.free_elements == 1


# ------------------------------------------------------------------ creating tensors
def _shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def ndarray(shape: Any, dtype: Any = np.float32, buffer: Any = None, name: str = "", **_: Any) -> View:
    """A new tensor: a tile in SBUF (the default) or PSUM, or a tensor in HBM (shared_hbm: the
    kernel's output when it returns it)."""
    tr = current("nl.ndarray")
    shape_arg = shape
    shape, dt = _shape(shape), to_dtype(dtype)
    if isinstance(buffer, _Direct) and tr.force_auto:  # ncc.force_auto_alloc
        buffer = sbuf if buffer.memory == "sbuf" else psum
    mem = buffer.memory if isinstance(buffer, (_Memory, _Direct)) else "sbuf"
    if buffer is not None and not isinstance(buffer, (_Memory, _Direct)):
        raise tr.fail(f"buffer= takes nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm, nl.private_hbm or a direct"
                      f" allocation (ncc.sbuf.mod_alloc(...), ncc.psum.alloc(...), ...), not {buffer!r}")
    place = user_place()
    if mem == "hbm":
        if buffer is shared_hbm:
            return View.of(tr.shared_hbm(dt, shape, place))
        tr.check_hbm_scratch(place)
        return View.of(tr.hbm_tensor(name or "hbm", dt, shape, "scratch"))
    given = tuple(shape_arg) if isinstance(shape_arg, (tuple, list)) else ()
    k = next((i for i, d in enumerate(given) if isinstance(d, ParDim)), 0)
    if isinstance(buffer, _Direct):
        tiles = [View.of(b) for b in tr.direct_tiles(buffer, dt, shape[:k], shape[k:], place)]
        return BlockTensor(tiles, shape[:k], shape[k:]) if k > 0 else tiles[0]  # type: ignore[return-value]
    if k > 0:  # block dimensions before the partition dimension: one tile per block
        n = math.prod(shape[:k])
        if mem == "psum":  # PSUM's 8 banks: its blocks are logical from the start (BlockTensor)
            tr.check_tile(mem, dt, shape[k:], place)
            return BlockTensor([None] * n, shape[:k], shape[k:], numpy_dtype(dt), (mem, dt, place))  # type: ignore[return-value]
        # (SBUF blocks that do not all fit are spilled while they are made, unwritten: no data moves)
        blocks = [View.of(tr.tile(mem, dt, shape[k:], place)) for _ in range(n)]
        return BlockTensor(blocks, shape[:k], shape[k:])  # type: ignore[return-value]
    return View.of(tr.tile(mem, dt, shape, place))


def shared_constant(constant: Any, dtype: Any = None, **_: Any) -> View:
    """An HBM tensor holding `constant` (a numpy array, or what np.asarray takes) converted to
    `dtype` (its own dtype when not given) when the kernel starts; equal constants share one tensor.
    ncsim gives it to the run as an input (a kernel saved as .s or an object has it as an input
    tensor named const...)."""
    tr = current("nl.shared_constant")
    arr = np.asarray(constant)
    if arr.dtype == np.float64 and dtype is None:
        raise tr.fail("nl.shared_constant: the constant is float64, which NKI does not have: give dtype=")
    dt = to_dtype(dtype if dtype is not None else arr.dtype)
    values = np.ascontiguousarray(arr.astype(numpy_dtype(dt)))
    return View.of(tr.shared_constant(values.view(np.uint8) if values.dtype == np.bool_ else values, dt))


def full(shape: Any, fill_value: Any, dtype: Any = np.float32, buffer: Any = None, **kw: Any) -> View:
    if (buffer is None or buffer is sbuf) and not (isinstance(shape, (tuple, list)) and _builtins.any(
            isinstance(d, ParDim) for d in list(shape)[1:])):
        # An SBUF tile filled with a constant is a pending memset: placed at first use, so that a tile
        # made again in a loop can take the buffer of the one it replaces (buffer policy).
        return current("nl.full").result(_shape(shape), to_dtype(dtype), "sbuf", "memset", "vector",
                                         value=constant(fill_value))
    t = ndarray(shape, dtype, buffer, **kw)
    if isinstance(t, BlockTensor):
        for b in t.blocks:
            _fill(b, fill_value)
        return t  # type: ignore[return-value]
    return _fill(t, fill_value)


def _fill(t: View, fill_value: Any) -> View:
    if not t.on_chip:
        raise current().fail("nl.full/zeros/ones make tiles in SBUF or PSUM, not HBM")
    if t.memory == "psum" and float(fill_value) == 0.0:
        t.buf.zero_pending = True  # emitted when first read or partly written (tracer.emit_zeros)
        t.buf.zeroed = True
        return t
    current().emit("memset", "vector", dst=t, value=constant(fill_value))
    return t


def zeros(shape: Any, dtype: Any = np.float32, buffer: Any = None, **kw: Any) -> View:
    return full(shape, 0.0, dtype, buffer, **kw)


def ones(shape: Any, dtype: Any = np.float32, buffer: Any = None, **kw: Any) -> View:
    return full(shape, 1.0, dtype, buffer, **kw)


def _like(a: View, dtype: Any, buffer: Any) -> tuple[tuple[int, ...], Any, Any]:
    return a.shape, dtype if dtype is not None else a.nc_dtype, buffer if buffer is not None else (
        psum if a.memory == "psum" else hbm if a.memory == "hbm" else sbuf)


def zeros_like(a: View, dtype: Any = None, buffer: Any = None, **kw: Any) -> View:
    return zeros(*_like(a, dtype, buffer), **kw)


def ones_like(a: View, dtype: Any = None, buffer: Any = None, **kw: Any) -> View:
    return ones(*_like(a, dtype, buffer), **kw)


def full_like(a: View, fill_value: Any, dtype: Any = None, buffer: Any = None, **kw: Any) -> View:
    shape, dt, buf = _like(a, dtype, buffer)
    return full(shape, fill_value, dt, buf, **kw)


def empty_like(a: View, dtype: Any = None, buffer: Any = None, **kw: Any) -> View:
    return ndarray(*_like(a, dtype, buffer), **kw)


# ------------------------------------------------------------------ moving data
def load(src: View, *, mask: Any = None, dtype: Any = None, **_: Any) -> View:
    """HBM -> a new SBUF tile of src's shape (partition dimension first): dma_copy issued by Sync."""
    tr = current("nl.load")
    if not isinstance(src, View) or src.on_chip:
        raise tr.fail("nl.load reads a tensor in HBM (a kernel argument or an HBM ndarray)")
    dt = to_dtype(dtype) if dtype is not None else src.nc_dtype
    iv = _intervals(mask)
    if iv is None:
        return _nothing(src.shape, dt)
    return tr.result(src.shape, dt, "sbuf", "dma_copy", "sync", intervals=iv, src=src.clip(iv))


def load_transpose2d(src: View, *, mask: Any = None, dtype: Any = None, **_: Any) -> View:
    """HBM [F, P] -> a new SBUF tile [P, F] holding its transpose (nki.language.load_transpose2d,
    https://awsdocs-neuron.readthedocs-hosted.com/en/v2.26.1/nki/api/generated/nki.language.load_transpose2d.html):
    one dma_copy issued by Sync whose HBM access pattern walks src by columns (partition p reads
    column p, element f of it is row f)."""
    tr = current("nl.load_transpose2d")
    if not isinstance(src, View) or src.on_chip:
        raise tr.fail("nl.load_transpose2d reads a tensor in HBM (a kernel argument or an HBM ndarray)")
    if src.ndim != 2:
        raise tr.fail(f"nl.load_transpose2d takes a 2-D tensor [F, P], not {list(src.shape)}")
    i_p, i_f = mgrid[0:src.shape[1], 0:src.shape[0]]
    return load(src[i_f, i_p], mask=mask, dtype=dtype)


def store(dst: View, value: Any, *, mask: Any = None, **_: Any) -> None:
    """A tile -> HBM: dma_copy issued by GpSimd (an engine with no loads to issue, so a store that
    waits for its data holds up no load); a PSUM tile is first copied to SBUF (tensor_copy)."""
    tr = current("nl.store")
    if not isinstance(dst, View) or dst.on_chip:
        raise tr.fail("nl.store writes a tensor in HBM")
    iv = _intervals(mask)
    if iv is None:
        return
    if not isinstance(value, View):
        value = full(dst.shape, value, dst.nc_dtype)
    value = _tile(value, "store", "the value")
    if value.memory == "psum":
        # "If the tile is in PSUM, an extra copy will be performed to move the tile to SBUF first"
        # (nki.language.store): tensor_copy on Vector, as nl.copy
        value = copy(value, mask=mask)
    tr.emit("dma_copy", "gpsimd", dst=dst.clip(iv), src=value.clip(iv))


def assign(target: View, value: Any) -> None:
    """target[...] = value: a pending result is written straight into target; a tile is copied
    (tensor_copy on Vector, or dma_copy when HBM is involved); a number fills it (memset)."""
    tr = current("assignment to a tensor")
    if not isinstance(value, View):
        if not target.on_chip:
            raise tr.fail("assigning a number to an HBM tensor: store a tile into it instead")
        tr.emit("memset", "vector", dst=target, value=constant(value))
        return
    if value.pending is not None and value._buf is None and _squeezed(value.shape) == _squeezed(target.shape) and (
            target.on_chip or value.pending.mnemonic == "dma_copy") and not (
            value.pending.memory == "psum" and target.memory != "psum"):
        # (a result that must be made in PSUM, a Tensor engine transpose's or matmul's, assigned to an
        # SBUF tensor is made in PSUM, then copied: what NKI's compiler does with such an assignment;
        # shapes that differ only in axes of size 1, a [P] reduction into t[i_p, 0] of [P, 1], match)
        p = tr.take(value)
        tr.emit_pending(p, target)
        value._buf, value.partition, value.offset = target.buf, target.partition, target.offset
        value.dims = target.dims if value.shape == target.shape else _dims_as(value.shape, target.dims)
        value.pending = None
        return
    if value.buf is target.buf and value.ap() == target.ap():
        return
    if target.on_chip and value.on_chip:
        tr.emit("tensor_copy", "vector", dst=target, src=value)
    else:
        tr.emit("dma_copy", "sync" if target.on_chip else "gpsimd", dst=target, src=value)


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape without its axes of size 1 (the first, a tile's partition axis, kept)."""
    return shape[:1] + tuple(n for n in shape[1:] if n != 1)


def _dims_as(shape: tuple[int, ...], dims: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """`dims` (of a view whose shape squeezes to the same as `shape`) with the axes of size 1 that
    `shape` has, and without those it has not."""
    rest = iter(d for d in dims[1:] if d[1] != 1)
    return dims[:1] + tuple((1, 1) if n == 1 else next(rest) for n in shape[1:])


def copy(x: View, dtype: Any = None, *, mask: Any = None, **_: Any) -> View:
    """A copy of a tile (tensor_copy on Vector: bit-exact when the dtype stays)."""
    tr = current("nl.copy")
    x = _tile(x, "copy")
    dt = to_dtype(dtype) if dtype is not None else x.nc_dtype
    iv = _intervals(mask)
    if iv is None:
        return _nothing(x.shape, dt)
    return tr.result(x.shape, dt, "sbuf", "tensor_copy", "vector", intervals=iv, src=x.clip(iv))


def broadcast_to(x: View, shape: Any) -> View:
    """x repeated to `shape` (numpy rules): along free axes a view with step 0 (no instruction); in
    HBM likewise (DMA repeats data); across partitions of a tile, on the Tensor engine when it can
    (_pe_broadcast: an fp32 [1, N] SBUF row), else an SBUF-to-SBUF dma_copy that reads the one
    partition again for each."""
    tr = current("broadcast_to")
    shape = _shape(shape)
    src = tuple(x.shape)
    if x.on_chip and len(src) == 1 < len(shape):
        # A tile of its partition axis only (a reduction without keepdims) holds one value per
        # partition: it is repeated along the new free axes, as a [P, 1] column would be (NKI's own
        # kernels broadcast row sums so: nki-samples' Stable Diffusion attention, [128] to [128, 64]).
        x = x.derive(x.partition, x.offset, x.dims + ((0, 1),) * (len(shape) - 1))
        src = tuple(x.shape)
    if len(src) < len(shape):
        src = (1,) * (len(shape) - len(src)) + src
        x = x.derive(x.partition, x.offset, ((0, 1),) * (len(shape) - len(x.shape)) + x.dims) if not x.on_chip else x
    if len(src) != len(shape) or any(s not in (1, t) for s, t in zip(src, shape)):
        raise tr.fail(f"cannot broadcast {list(x.shape)} to {list(shape)}")
    dims = list(x.dims)
    if len(dims) != len(shape):
        raise tr.fail(f"cannot broadcast {list(x.shape)} to {list(shape)}: give the tile {len(shape)} dimensions")
    for d, (n, t) in enumerate(zip(src, shape)):
        if n != t and not (x.on_chip and d == 0):
            dims[d] = (0, t)
    view = x.derive(x.partition, x.offset, tuple(dims))
    if x.on_chip and src[0] != shape[0]:
        if _pe_broadcast_fits(x, src, shape):
            return _pe_broadcast(tr, x, shape)
        rep = view.derive(view.partition, view.offset, ((0, 1), (0, shape[0])) + tuple(view.dims[1:]))
        return tr.result(shape, x.nc_dtype, "sbuf", "dma_copy", "sync", src=rep)
    return view


def _pe_broadcast_fits(x: View, src: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """A partition broadcast the Tensor engine does: one fp32 row in SBUF, only the partition axis
    repeated, its free size within one matmul's moving operand (the result fills one PSUM bank)."""
    cfg = current().config
    return (x.memory == "sbuf" and x.nc_dtype == dtypes.FLOAT32 and len(shape) == 2 and src[0] == 1
            and tuple(src[1:]) == tuple(shape[1:]) and shape[0] <= cfg.gemm_stationary_fmax
            and shape[1] <= cfg.gemm_moving_fmax)


def _pe_broadcast(tr: Any, x: View, shape: tuple[int, ...]) -> View:
    """The partition broadcast NKI does "under the hood" (Trainium/Inferentia2 Architecture Guide,
    TensorE "Alternative Use Case",
    https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/guides/architecture/trainium_inferentia2_arch.html:
    `x.broadcast_to((M, N))` is nc_matmul(ones [1, M], x, is_stationary_onezero=True)): the row is the
    moving operand, a [1, M] tile of ones the stationary one, the result an fp32 [M, N] PSUM tile
    (every value x's, except that -0.0 becomes +0.0 and a NaN the canonical NaN, as any fp32 matmul).
    The ones tile is made once per kernel (a memset on GpSimd) and kept, like a compiler's constant."""
    m = shape[0]
    ones = tr.pe_ones.get(m)
    if ones is None:
        ones = View.of(tr.tile("sbuf", dtypes.FLOAT32, (1, m), user_place()))
        tr.emit("memset", "gpsimd", dst=ones, value=constant(1.0))
        tr.pe_ones[m] = ones
    out = tr.result((m, shape[1]), dtypes.FLOAT32, "psum", "nc_matmul", "tensor", stationary=ones, moving=x,
                    is_stationary_onezero=True)
    tr.place(out)  # a tile of its own now: assigning it anywhere copies it (a matmul writes only PSUM)
    return out


# ------------------------------------------------------------------ elementwise
BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "equal", "not_equal",
          "greater", "greater_equal", "less", "less_equal", "logical_and", "logical_or", "logical_xor",
          "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift")
ACTIVATIONS = tuple(f for f, _ in ACTIVATION_FUNCS if f != "copy")


def _binary(op: str, x: Any, y: Any, dtype: Any = None, mask: Any = None) -> View:
    tr = current(f"nl.{op}")
    xt, yt = isinstance(x, View), isinstance(y, View)
    if not xt and not yt:
        raise tr.fail(f"nl.{op}: at least one operand must be a tile")
    dt = to_dtype(dtype) if dtype is not None else promote(_dtype_of(x), _dtype_of(y))
    iv = _intervals(mask)
    if xt and yt:
        x, y = _tile(x, op, "x"), _tile(y, op, "y")
        if x.memory == "psum" and y.memory == "psum":
            y = copy(y)  # tensor_tensor reads at most one operand from PSUM
        if _column(y, x.partitions) and not _column(x, y.partitions):
            shape = x.shape
            if iv is None:
                return _nothing(shape, dt)
            return tr.result(shape, dt, "sbuf", "tensor_scalar", "vector", iv, data=x.clip(iv), op0=op,
                             operand0=y.clip({0: iv[0]} if 0 in iv else {}))
        if _column(x, y.partitions) and not _column(y, x.partitions):
            shape = y.shape
            if iv is None:
                return _nothing(shape, dt)
            return tr.result(shape, dt, "sbuf", "tensor_scalar", "vector", iv, data=y.clip(iv), op0=op,
                             operand0=x.clip({0: iv[0]} if 0 in iv else {}), reverse0=True)
        if x.shape != y.shape:
            shape = None
            if len(x.shape) == len(y.shape):
                try:
                    shape = np.broadcast_shapes(x.shape, y.shape)
                except ValueError:
                    pass
            elif x.on_chip and y.on_chip and 1 in (len(x.shape), len(y.shape)) and x.shape[0] == y.shape[0]:
                # a tile of its partition axis only (a reduction without keepdims) is a [P, 1] column
                # here too (nki-samples' adaptive average pool adds its [P] window sums to a [P, 1] tile)
                shape = x.shape if len(x.shape) > 1 else y.shape
            if shape is None:
                raise tr.fail(f"nl.{op}: shapes {list(x.shape)} and {list(y.shape)} do not broadcast")
            x = broadcast_to(x, shape) if x.shape != shape else x
            y = broadcast_to(y, shape) if y.shape != shape else y
        if iv is None:
            return _nothing(x.shape, dt)
        return tr.result(x.shape, dt, "sbuf", "tensor_tensor", "vector", iv, data1=x.clip(iv), data2=y.clip(iv),
                         op=op)
    t, s, reverse = (x, y, False) if xt else (y, x, True)
    t = _tile(t, op)
    if iv is None:
        return _nothing(t.shape, dt)
    return tr.result(t.shape, dt, "sbuf", "tensor_scalar", "vector", iv, data=t.clip(iv), op0=op,
                     operand0=constant(s), reverse0=reverse)


def _make_binary(op: str) -> Any:
    def fn(x: Any, y: Any, *, dtype: Any = None, mask: Any = None, **_: Any) -> View:
        return _binary(op, x, y, dtype, mask)

    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = f"nl.{op}(x, y): elementwise on the Vector engine (tensor_tensor, or tensor_scalar with a number or a [P, 1] column)."
    return fn


def _activation(func: str, x: View, dtype: Any = None, mask: Any = None) -> View:
    tr = current(f"nl.{func}")
    x = _tile(x, func)
    dt = to_dtype(dtype) if dtype is not None else x.nc_dtype
    iv = _intervals(mask)
    if iv is None:
        return _nothing(x.shape, dt)
    return tr.result(x.shape, dt, "sbuf", "activation", "scalar", iv, data=x.clip(iv), op=func)


def _make_activation(func: str) -> Any:
    def fn(x: View, *, dtype: Any = None, mask: Any = None, **_: Any) -> View:
        return _activation(func, x, dtype, mask)

    fn.__name__ = fn.__qualname__ = func
    fn.__doc__ = f"nl.{func}(x): the Scalar engine's activation function {func}."
    return fn


def _unary_alu(op: str, x: View, dtype: Any = None, mask: Any = None, operand: float = 0.0) -> View:
    tr = current(f"nl.{op}")
    x = _tile(x, op)
    dt = to_dtype(dtype) if dtype is not None else x.nc_dtype
    iv = _intervals(mask)
    if iv is None:
        return _nothing(x.shape, dt)
    return tr.result(x.shape, dt, "sbuf", "tensor_scalar", "vector", iv, data=x.clip(iv), op0=op,
                     operand0=constant(operand))


def negative(x: View, *, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    """-x: tensor_scalar multiply by -1.0 on the Vector engine (exact)."""
    return _unary_alu("multiply", x, dtype, mask, -1.0)


def logical_not(x: View, *, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    return _unary_alu("logical_not", x, dtype, mask)


def invert(x: View, *, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    return _unary_alu("invert", x, dtype, mask, 0)


def update(target: View, op: str, other: Any) -> View:
    """target op= other. `psum_tile += nl.matmul(...)` (or nisa.nc_matmul) accumulates in PSUM: the
    nc_matmul writes target with accumulate=false where target holds nl.zeros or nothing yet (a new
    nl.ndarray) and with accumulate=true where earlier matmuls wrote it; otherwise target = target op
    other on Vector."""
    tr = current("an in-place operator")
    if isinstance(other, View) and other.pending is not None and other._buf is None and not other.pending.mnemonic:
        return target  # `psum += nisa.nc_matmul(..., mask=...)` whose mask removed it: removed with it
    if (op == "add" and isinstance(other, View) and other.pending is not None and other._buf is None
            and other.pending.mnemonic == "nc_matmul" and target.on_chip and target.memory == "psum"
            and target.shape == other.shape and target.nc_dtype == dtypes.FLOAT32):
        buf = target.buf
        dst = target.clip(other.pending.intervals)  # (the part a mask keeps)
        ap = dst.ap()
        if ap in buf.matmul_written:
            acc = True
        elif (buf.zeroed or not buf.stored) and not any(_overlap(ap, w) for w in buf.matmul_written):
            # (a tile nothing has written, a new nl.ndarray: the first matmul starts the accumulation,
            # as into nl.zeros; nki-samples' allocated attention kernel accumulates so)
            acc = False
        else:
            acc = None
        if acc is not None:
            p = tr.take(other)
            if buf.zero_pending and ap != buf.whole().ap():
                tr.emit_zeros(buf, p.place)  # the rest of the tile must read as zeros
            buf.zero_pending = False
            tr.emit("nc_matmul", "tensor", place=p.place, accumulating=True, flush=False, dst=dst,
                    accumulate=acc, **p.operands)
            buf.zeroed = True if not acc else buf.zeroed
            buf.matmul_written.add(ap)
            other._buf, other.partition, other.offset, other.dims = buf, target.partition, target.offset, target.dims
            other.pending = None
            return target
    assign(target, _binary(op, target, other))
    return target


def _overlap(a: Any, b: Any) -> bool:
    (alo, ahi), (blo, bhi) = a.byte_span(), b.byte_span()
    return alo < bhi and blo < ahi and a.partition < b.partition + b.partitions and b.partition < a.partition + a.partitions


# ------------------------------------------------------------------ reductions
def _free_axes_last(x: View, axis: Any) -> tuple[View, Any]:
    """nl.sum(t[i0, 2 * i1 + i2, 2 * i3 + i4], axis=[2, 4]) (the average-pool tutorial): reduced free
    axes that are not the last ones are moved last in the view's access pattern (the reduction reads
    them in that order; a pending result is placed first). Returns the view and the axes to reduce."""
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(sorted(int(a) + (x.ndim if a < 0 else 0) for a in axes))
    if not axes or axes[0] < 1 or axes[-1] >= x.ndim or axes == tuple(range(axes[0], x.ndim)):
        return x, axis
    keep = [d for d in range(x.ndim) if d not in axes]
    order = keep + list(axes)
    view = x.derive(x.partition, x.offset, tuple(x.dims[d] for d in order))
    return view, tuple(range(len(keep), x.ndim))


def _axes(x: View, axis: Any, fn: str) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(sorted(int(a) + (x.ndim if a < 0 else 0) for a in axes))
    n = x.ndim
    if not axes or axes[0] < 1 or axes != tuple(range(axes[0], n)):
        raise current().fail(f"nl.{fn}: axis must be the last free axes, ending at the innermost"
                             f" ([1], [1, 2], ... of a {n}-dimensional tile); not {list(axes)}",
                             notes=("the partition axis (0) is reduced with nki.isa.tensor_partition_reduce",))
    return axes


def _reduce(op: str, fn: str, x: View, axis: Any, dtype: Any, mask: Any, keepdims: bool,
            out_dtype: dtypes.DType | None = None) -> View:
    tr = current(f"nl.{fn}")
    x = _tile(x, fn)
    if not keepdims:
        x, axis = _free_axes_last(x, axis)
    axes = _axes(x, axis, fn)
    shape = tuple(1 if d in axes else s for d, s in enumerate(x.shape)) if keepdims else \
        tuple(s for d, s in enumerate(x.shape) if d not in axes)
    dt = to_dtype(dtype) if dtype is not None else out_dtype or x.nc_dtype
    iv = _intervals(mask)
    if iv is None:
        return _nothing(shape, dt)
    return tr.result(shape, dt, "sbuf", "tensor_reduce", "vector", {0: iv[0]} if 0 in iv else {},
                     data=x.clip(iv), op=op, axis=axes)


def sum(x: View, axis: Any, *, dtype: Any = None, mask: Any = None, keepdims: bool = False, **_: Any) -> View:
    """Sum along free axes: tensor_reduce add on Vector, a left-to-right fold in fp32."""
    return _reduce("add", "sum", x, axis, dtype, mask, keepdims)


def max(x: View, axis: Any, *, dtype: Any = None, mask: Any = None, keepdims: bool = False, **_: Any) -> View:
    return _reduce("maximum", "max", x, axis, dtype, mask, keepdims)


def min(x: View, axis: Any, *, dtype: Any = None, mask: Any = None, keepdims: bool = False, **_: Any) -> View:
    return _reduce("minimum", "min", x, axis, dtype, mask, keepdims)


def prod(x: View, axis: Any, *, dtype: Any = None, mask: Any = None, keepdims: bool = False, **_: Any) -> View:
    return _reduce("multiply", "prod", x, axis, dtype, mask, keepdims)


def all(x: View, axis: Any, *, dtype: Any = None, mask: Any = None, keepdims: bool = False, **_: Any) -> View:
    return _reduce("logical_and", "all", x, axis, dtype, mask, keepdims, dtypes.by_name("bool"))


def mean(x: View, axis: Any, *, dtype: Any = None, mask: Any = None, keepdims: bool = False, **_: Any) -> View:
    """The sum (tensor_reduce add, fp32) divided by the element count (tensor_scalar divide)."""
    x = _tile(x, "mean")
    if not keepdims:
        x, axis = _free_axes_last(x, axis)
    axes = _axes(x, axis, "mean")
    n = math.prod(x.shape[a] for a in axes)
    total = _reduce("add", "mean", x, axis, dtypes.FLOAT32, mask, keepdims)
    return _binary("divide", total, float(n), dtype if dtype is not None else x.nc_dtype, None)


# ------------------------------------------------------------------ Tensor engine
def transpose(x: View, *, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    """[P, F] -> [F, P] by nc_transpose on the Tensor engine (SBUF in, PSUM out, up to 128 x 128)."""
    tr = current("nl.transpose")
    x = _tile(x, "transpose")
    if x.ndim != 2:
        raise tr.fail(f"nl.transpose takes a 2-D tile, not {list(x.shape)}")
    if x.memory == "psum":
        x = copy(x)
    dt = to_dtype(dtype) if dtype is not None else x.nc_dtype
    return tr.result((x.shape[1], x.shape[0]), dt, "psum", "nc_transpose", "tensor", data=x)


def matmul(x: View, y: View, *, transpose_x: bool = False, mask: Any = None, **_: Any) -> View:
    """x @ y (x.T @ y with transpose_x=True) by nc_matmul into a PSUM tile of fp32. Without
    transpose_x, x is first transposed on the Tensor engine and copied back to SBUF (NKI inserts the
    same transpose); an operand in PSUM is copied to SBUF (tensor_copy)."""
    tr = current("nl.matmul")
    x, y = _tile(x, "matmul", "x"), _tile(y, "matmul", "y")
    if x.ndim != 2 or y.ndim != 2:
        raise tr.fail(f"nl.matmul takes 2-D tiles, not {list(x.shape)} and {list(y.shape)}")
    if not transpose_x:
        x = copy(transpose(x))
    # the Tensor engine reads SBUF: an operand in PSUM (an nl.transpose result) is copied there first
    x, y = (copy(t) if t.memory == "psum" else t for t in (x, y))
    return nc_matmul_result(x, y)


def nc_matmul_result(stationary: View, moving: View, intervals: dict[int, tuple[int, int]] | None = None) -> View:
    """stationary.T @ moving as a pending fp32 PSUM result; `intervals` (a mask over the result's
    axes) narrow its destination, stationary's free axis (axis 0) and moving's (axis 1)."""
    tr = current()
    cfg = tr.config
    k, m = stationary.shape[0], stationary.free_elements
    k2, n = moving.shape[0], moving.free_elements
    if k != k2:
        raise tr.fail(f"matmul: the contraction (partition) sizes differ: {k} and {k2}")
    if m > cfg.gemm_stationary_fmax or n > cfg.gemm_moving_fmax or k > cfg.pmax:
        raise tr.fail(f"matmul: the Tensor engine takes stationary [K <= {cfg.pmax}, M <= {cfg.gemm_stationary_fmax}]"
                      f" and moving [K, N <= {cfg.gemm_moving_fmax}]; got [{k}, {m}] and [{k2}, {n}]"
                      " (nl.tile_size.gemm_stationary_fmax, gemm_moving_fmax)")
    if intervals:  # the result keeps its full shape; its instruction reads and writes the kept part
        stationary = stationary.clip({1: intervals[0]} if 0 in intervals else {})
        moving = moving.clip({1: intervals[1]} if 1 in intervals else {})
    return tr.result((m, n), dtypes.FLOAT32, "psum", "nc_matmul", "tensor", intervals, stationary=stationary,
                     moving=moving)


# ------------------------------------------------------------------ composite functions
def where(condition: View, x: Any, y: Any, *, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    """x where condition is nonzero, else y: y is copied (tensor_copy, or memset for a number) into the
    result and x copied over it by tensor_copy_predicated (Vector), whose predicate is an unsigned
    integer tile (a float or signed condition is first converted to uint8: tensor_copy). Bit-exact."""
    tr = current("nl.where")
    condition = _tile(condition, "where", "condition")
    if not isinstance(x, View) and not isinstance(y, View):
        raise tr.fail("nl.where: x or y must be a tile")
    shape = condition.shape
    dt = to_dtype(dtype) if dtype is not None else promote(_dtype_of(x), _dtype_of(y))
    iv = _intervals(mask)
    if iv is None:
        return _nothing(shape, dt)
    out = ndarray(shape, dt, sbuf)
    if isinstance(y, View):
        tr.emit("tensor_copy", "vector", dst=out.clip(iv), src=broadcast_to(_tile(y, "where", "y"), shape).clip(iv))
    else:
        tr.emit("memset", "vector", dst=out.clip(iv), value=constant(y))
    if isinstance(x, View):
        x = broadcast_to(_tile(x, "where", "x"), shape)
        if x.nc_dtype != dt:
            x = copy(x, dt)
    pred = condition if condition.nc_dtype.short in ("u8", "u16", "u32") else copy(condition, uint8)
    tr.emit("tensor_copy_predicated", "vector", dst=out.clip(iv), src=x.clip(iv) if isinstance(x, View) else
            constant(x), predicate=pred.clip(iv))
    return out


def _rows(x: View, axis: Any, fn: str) -> View:
    """x with the reduced axes (the last free axes) flattened into one, for bn_stats and softmax."""
    axes = _axes(x, axis, fn)
    if axes != tuple(range(1, x.ndim)):
        raise current().fail(f"nl.{fn}: axis must be all the free axes of the tile ([1], [1, 2], ...)")
    return x if x.ndim == 2 else x.reshape((x.shape[0], x.free_elements))


def var(x: View, axis: Any, *, dtype: Any = None, mask: Any = None, keepdims: bool = False, **_: Any) -> View:
    """The population variance along the free axes: bn_stats on each chunk of at most
    nl.tile_size.bn_stats_fmax elements into one [P, 6k] tile, then bn_aggr (Vector), both in fp32."""
    tr = current("nl.var")
    x = _tile(x, "var")
    flat = _rows(x, axis, "var")
    iv = _intervals(mask)
    dt = to_dtype(dtype) if dtype is not None else x.nc_dtype
    shape = (x.partitions, 1) if keepdims else (x.partitions,)
    if iv is None:
        return _nothing(shape, dt)
    rows = {0: iv[0]} if 0 in iv else {}
    fmax = tr.config.bn_stats_fmax
    n = flat.shape[1]
    chunks = (n + fmax - 1) // fmax
    stats = ndarray((x.partitions, 6 * chunks), dtypes.FLOAT32, sbuf)
    for c in range(chunks):
        part = flat[:, c * fmax:_builtins.min(n, (c + 1) * fmax)]
        tr.emit("bn_stats", "vector", dst=stats[:, 6 * c:6 * c + 6].clip(rows), data=part.clip(rows))
    aggr = tr.result((x.partitions, 2), dtypes.FLOAT32, "sbuf", "bn_aggr", "vector", rows, data=stats)
    variance = aggr[:, 1:2] if keepdims else aggr[:, 1]
    return variance if dt == dtypes.FLOAT32 else copy(variance, dt)


def softmax(x: View, axis: Any, *, dtype: Any = None, compute_dtype: Any = None, mask: Any = None,
            **_: Any) -> View:
    """exp(x - max(x)) / sum(exp(x - max(x))) along the free axes, in fp32: tensor_reduce maximum with
    negate (Vector) gives -max per row, activation_reduce exp with that bias (Scalar) the exponentials
    and their row sums, tensor_scalar divide (Vector) the quotient."""
    tr = current("nl.softmax")
    x = _tile(x, "softmax")
    flat = _rows(x, axis, "softmax")
    dt = to_dtype(dtype or compute_dtype) if (dtype or compute_dtype) is not None else x.nc_dtype
    iv = _intervals(mask)
    if iv is None:
        return _nothing(x.shape, dt)
    rows = {0: iv[0]} if 0 in iv else {}
    f32 = dtypes.FLOAT32
    neg_max = tr.result((x.partitions, 1), f32, "sbuf", "tensor_reduce", "vector", rows, data=flat.clip(rows),
                        op="maximum", axis=(1,), negate=True)
    sums = ndarray((x.partitions, 1), f32, sbuf)
    e = tr.result(flat.shape, f32, "sbuf", "activation_reduce", "scalar", rows, data=flat.clip(rows), op="exp",
                  bias=neg_max.clip(rows), reduce_op="add", reduce_res=sums.clip(rows))
    out = tr.result(flat.shape, dt, "sbuf", "tensor_scalar", "vector", rows, data=e.clip(rows), op0="divide",
                    operand0=sums.clip(rows))
    return out if x.ndim == 2 else out.reshape(x.shape)


def rms_norm(x: View, w: View, axis: Any, n: int, epsilon: float = 1e-6, *, dtype: Any = None,
             compute_dtype: Any = None, mask: Any = None, **_: Any) -> View:
    """x / sqrt(sum(x^2) / n + epsilon) * w along the free axes, in fp32: activation_reduce square
    (Scalar) gives the row sums of squares, tensor_scalar (Vector) divides by n and adds epsilon,
    activation rsqrt (Scalar) the reciprocal root, and scalar_tensor_tensor (Vector) the two products
    x * r * w (w broadcast to x's shape)."""
    tr = current("nl.rms_norm")
    x = _tile(x, "rms_norm")
    flat = _rows(x, axis, "rms_norm")
    dt = to_dtype(dtype or compute_dtype) if (dtype or compute_dtype) is not None else x.nc_dtype
    iv = _intervals(mask)
    if iv is None:
        return _nothing(x.shape, dt)
    rows = {0: iv[0]} if 0 in iv else {}
    f32 = dtypes.FLOAT32
    sums = ndarray((x.partitions, 1), f32, sbuf)
    squares = tr.result(flat.shape, f32, "sbuf", "activation_reduce", "scalar", rows, data=flat.clip(rows),
                        op="square", reduce_op="add", reduce_res=sums.clip(rows))
    tr.place(squares)  # emitted now: nothing reads the squares, but the row sums they leave in `sums`
    ms = tr.result((x.partitions, 1), f32, "sbuf", "tensor_scalar", "vector", rows, data=sums.clip(rows),
                   op0="divide", operand0=constant(float(n)), op1="add", operand1=constant(float(epsilon)))
    r = tr.result((x.partitions, 1), f32, "sbuf", "activation", "scalar", rows, data=ms.clip(rows), op="rsqrt")
    w = _tile(w, "rms_norm", "w")
    if w.shape != x.shape:
        w = broadcast_to(w, x.shape)
    wf = w if w.ndim == 2 else w.reshape(flat.shape)
    out = tr.result(flat.shape, dt, "sbuf", "scalar_tensor_tensor", "vector", rows, data=flat.clip(rows),
                    op0="multiply", operand0=r.clip(rows), op1="multiply", operand1=wf.clip(rows))
    return out if x.ndim == 2 else out.reshape(x.shape)


def dropout(x: View, rate: Any, *, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    """x with each element zeroed with probability rate (the dropout instruction, Vector; not rescaled)."""
    tr = current("nl.dropout")
    x = _tile(x, "dropout")
    dt = to_dtype(dtype) if dtype is not None else x.nc_dtype
    iv = _intervals(mask)
    if iv is None:
        return _nothing(x.shape, dt)
    prob = rate.clip({0: iv[0]} if 0 in iv else {}) if isinstance(rate, View) else constant(rate)
    return tr.result(x.shape, dt, "sbuf", "dropout", "vector", iv, data=x.clip(iv), prob=prob)


def finfo(dtype: Any) -> Any:
    """The limits of a floating-point dtype (numpy's `finfo`; bfloat16 and the fp8 types through
    ml_dtypes): `nl.finfo(nl.float32).min` fills a tile with the most negative value (nki-samples'
    select-and-scatter pads so)."""
    return ml_dtypes.finfo(numpy_dtype(to_dtype(dtype)))


def iinfo(dtype: Any) -> Any:
    """The limits of an integer dtype (numpy's `iinfo`)."""
    return np.iinfo(numpy_dtype(to_dtype(dtype)))


def static_cast(x: View, dtype: Any) -> View:
    """x converted to dtype (tensor_copy, Vector)."""
    return copy(x, dtype)


def gelu_apprx_sigmoid(x: View, *, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    """x * sigmoid(1.702 x): activation sigmoid with scale 1.702 (Scalar), then a multiply by x (Vector)."""
    tr = current("nl.gelu_apprx_sigmoid")
    x = _tile(x, "gelu_apprx_sigmoid")
    dt = to_dtype(dtype) if dtype is not None else x.nc_dtype
    iv = _intervals(mask)
    if iv is None:
        return _nothing(x.shape, dt)
    s = tr.result(x.shape, dtypes.FLOAT32, "sbuf", "activation", "scalar", iv, data=x.clip(iv), op="sigmoid",
                  scale=constant(1.702))
    return tr.result(x.shape, dt, "sbuf", "tensor_tensor", "vector", iv, data1=x.clip(iv), data2=s.clip(iv),
                     op="multiply")


def device_print(prefix: str, x: View, *, mask: Any = None, **_: Any) -> None:
    """Print `prefix` and the tile's values as they are at this point of the simulated run, after the
    run (stdout). ncsim copies the tile into an HBM tensor of its own here (a dma_copy issued by
    GpSimd, after a tensor_copy to SBUF for a PSUM tile); under a timing-only run one note says the
    values were not computed."""
    tr = current("nl.device_print")
    if not isinstance(x, View):
        raise tr.fail(f"nl.device_print prints a tile or tensor, not {type(x).__name__}")
    iv = _intervals(mask)
    if iv is None:
        return
    x = x.clip(iv)
    snap = tr.hbm_tensor("device_print", x.nc_dtype, x.shape, "out")
    src = copy(x) if x.on_chip and x.memory == "psum" else x
    tr.emit("dma_copy", "gpsimd", dst=View.of(snap), src=src)
    tr.prints.append((str(prefix), snap.entry.name, user_place()))


def show_prints(tracer: Any, outputs: dict[str, np.ndarray] | None) -> None:
    """After a run: what nl.device_print captured, in program order (or one note under timing-only)."""
    if not tracer.prints:
        return
    if outputs is None:
        print(f"nl.device_print: {len(tracer.prints)} print(s) not shown: a timing-only run computes no values")
        return
    for prefix, name, _place in tracer.prints:
        print(prefix, outputs[name])


# ------------------------------------------------------------------ the table of functions
for _op in BINARY:
    globals()[_op] = _make_binary(_op)
for _f in ACTIVATIONS:
    globals()[_f] = _make_activation(_f)

NAMES = sorted(n for n, v in globals().items() if not n.startswith("_") and n not in (
    "annotations", "builtins", "math", "ml_dtypes", "np", "dtypes", "DEFAULT", "AsmError", "ACTIVATION_FUNCS",
    "Index", "Mask", "View", "numpy_dtype", "to_dtype", "constant", "current", "user_place", "Any", "NAMES",
    "BINARY", "ACTIVATIONS", "promote", "update", "assign", "nc_matmul_result", "show_prints", "BlockTensor",
    "ParDim"))


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise AsmError(f"nl.{name} is not available in ncsim's NKI front end; it has: {', '.join(NAMES)}",
                   user_place().source_loc())


