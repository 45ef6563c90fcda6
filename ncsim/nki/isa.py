"""`nki.isa` (nisa), the SDK 2.2x forms: calls take tiles and return a new tile (no `dst`), except the
calls NKI gives a `dst` (`dma_copy`, `tensor_copy_predicated`, `tensor_copy_dynamic_dst`,
`nc_stream_shuffle`), which write the `dst` they are given. Each one becomes the ncsim instruction of
the same name (docs/nki.md lists the translations); `engine=` picks the engine where NKI has it.

The forms are those of the nki.isa reference of SDK 2.26 (aws-neuron-sdk v2.26.0,
general/nki/api/nki/isa/__init__.py; https://awsdocs-neuron.readthedocs-hosted.com/en/v2.26.1/nki/api/nki.isa.html).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ncsim import dtypes
from ncsim.errors import AsmError
from ncsim.isa import ACTIVATION_FUNCS, ALU_ALIASES, ALU_OPS
from ncsim.nki import language as nl
from ncsim.nki.indexing import Index, Mask
from ncsim.nki.tensor import View, to_dtype
from ncsim.nki.tracer import constant, current, user_place


class engine:
    """nisa.engine.*: the engine an instruction runs on (unknown: ncsim's default for it)."""

    tensor = "tensor"
    vector = "vector"
    scalar = "scalar"
    gpsimd = "gpsimd"
    sync = "sync"
    unknown = None


tensor_engine, vector_engine, scalar_engine, gpsimd_engine = engine.tensor, engine.vector, engine.scalar, engine.gpsimd
unknown_engine = engine.unknown


class reduce_cmd:
    """nisa.reduce_cmd.*: what activation does with the Scalar engine's accumulator registers."""

    idle = "idle"
    reset = "reset"
    reduce = "reduce"
    reset_reduce = "reset_reduce"


class dge_mode:
    unknown, none, swdge, hwdge = "unknown", "none", "swdge", "hwdge"


class oob_mode:
    error, skip = "error", "skip"


class nc_version:
    gen2, gen3 = 2, 3


def get_nc_version() -> int:
    """ncsim simulates one NeuronCore-v2 (Trn1/Inf2): nc_version.gen2."""
    return nc_version.gen2


fp32 = nl.fp32

# The [P, 1] operands: a mask narrows them along the partition axis only.
_COLUMNS = ("operand0", "operand1", "bias", "scale", "prob", "initial", "reduce_res")


_ALU_NAMES = {o[0] for o in ALU_OPS}
_ACTIVATION_NAMES = {f[0] for f in ACTIVATION_FUNCS}


def _op_name(op: Any) -> str:
    """An operator given as nl.add, np.add, nl.exp or 'add' -> its name in ncsim's tables; the aliases
    of ncsim.isa.ALU_ALIASES are resolved (np.max, np.amax and nl.max -> 'maximum', as the tutorials'
    `nisa.tensor_reduce(np.max, ...)` writes it), and a name in neither the ALU nor the activation
    table is refused with both lists."""
    name = op if isinstance(op, str) else getattr(op, "__name__", None)
    if not isinstance(name, str):
        raise current().fail(f"expected an operator such as nl.add or np.maximum, not {op!r}")
    name = ALU_ALIASES.get(name, name)
    if name not in _ALU_NAMES and name not in _ACTIVATION_NAMES:
        raise current().fail(f"{name!r} is not an operator ncsim has; ALU operators: {', '.join(sorted(_ALU_NAMES))};"
                             f" activation functions: {', '.join(sorted(_ACTIVATION_NAMES))}")
    return name


def _opt_op(op: Any) -> str | None:
    return None if op is None else _op_name(op)


_REDUCTIONS = {"sum": "add", "prod": "multiply"}  # np.sum, np.prod as a reduction's operator


def _reduce_op(op: Any) -> str:
    """A reduction's operator: as _op_name, and np.sum / np.prod name add / multiply (nki-samples'
    allocated attention writes `activation_reduce(..., reduce_op=np.sum)`)."""
    name = op if isinstance(op, str) else getattr(op, "__name__", None)
    return _op_name(_REDUCTIONS.get(name, op) if isinstance(name, str) else op)


def _opt_reduce_op(op: Any) -> str | None:
    return None if op is None else _reduce_op(op)


def _engine(e: Any, default: str) -> str:
    if e is None:
        return default
    name = getattr(e, "name", e)
    return default if name == "unknown" else str(name)


def _tile(x: Any, fn: str, what: str) -> View:
    return nl._tile(x, fn, what)


def _dt(dtype: Any, default: dtypes.DType) -> dtypes.DType:
    return to_dtype(dtype) if dtype is not None else default


def _result(shape: tuple[int, ...], dtype: Any, default: dtypes.DType, mnemonic: str, eng: str | None,
            mask: Any, memory: str = "sbuf", **operands: Any) -> View:
    tr = current(f"nisa.{mnemonic}")
    dt = _dt(dtype, default)
    iv = nl._intervals(mask)
    if iv is None:
        return nl._nothing(shape, dt)
    return tr.result(shape, dt, memory, mnemonic, eng, iv, **_clipped(operands, iv))


def _clipped(operands: dict[str, Any], iv: dict[int, Any]) -> dict[str, Any]:
    """The tile operands narrowed to the mask's intervals; [P, 1] operands follow the partition mask only."""
    columns = {0: iv[0]} if 0 in iv else {}
    return {k: (v.clip(columns if k in _COLUMNS else iv) if isinstance(v, View) else v) for k, v in operands.items()}


def _emit(mnemonic: str, eng: str | None, mask: Any, **operands: Any) -> None:
    """An instruction that writes a dst the kernel gave (NKI's dst= forms), narrowed by the mask."""
    tr = current(f"nisa.{mnemonic}")
    iv = nl._intervals(mask)
    if iv is None:
        return
    tr.emit(mnemonic, eng, **_clipped(operands, iv))


def _scalar_or_tile(x: Any) -> Any:
    return x if isinstance(x, View) else constant(x)


def _sbuf(x: View) -> View:
    """GpSimd reaches SBUF only: a PSUM operand is first copied to SBUF on Vector (docs/nki.md)."""
    return nl.copy(x) if x.memory == "psum" else x


# ------------------------------------------------------------------ Tensor engine
def nc_matmul(stationary: View, moving: View, *, is_stationary_onezero: bool = False, is_moving_onezero: bool = False,
              is_transpose: bool = False, mask: Any = None, **_: Any) -> View:
    """stationary.T @ moving into a new PSUM tile of fp32 (`psum += nisa.nc_matmul(...)` accumulates).
    is_transpose=True computes the same: on NeuronCore-v2 it is a hint that `moving` is an identity
    (the nki.isa.nc_matmul reference of SDK 2.21: "hints to the compiler that this is a transpose
    operation with moving as an identity matrix"; the Tensor engine's transpose mode starts with v3).
    mask= narrows the result [M, N]: its axis 0 is stationary's free axis, its axis 1 moving's."""
    stationary = nl._tile(stationary, "nc_matmul", "stationary")
    moving = nl._tile(moving, "nc_matmul", "moving")
    iv = nl._intervals(mask)
    if iv is None:
        return nl._nothing((stationary.free_elements, moving.free_elements), dtypes.FLOAT32)
    if iv and (stationary.ndim != 2 or moving.ndim != 2):
        raise current().fail("nisa.nc_matmul: a mask that keeps part of the result needs 2-D stationary and moving"
                             f" tiles; these are {list(stationary.shape)} and {list(moving.shape)}")
    return nl.nc_matmul_result(stationary, moving, iv)


def nc_transpose(data: View, *, engine: Any = None, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    """[P, F] -> [F, P]: on the Tensor engine (SBUF -> PSUM, up to 128 x 128) or Vector (up to 32 x 32)."""
    data = _tile(data, "nc_transpose", "data")
    eng = _engine(engine, "tensor")
    return _result((data.free_elements, data.partitions), dtype, data.nc_dtype, "nc_transpose", eng, mask,
                   "psum" if eng == "tensor" else "sbuf", data=data)


# ------------------------------------------------------------------ Scalar engine
def activation(op: Any, data: View, *, bias: View | None = None, scale: Any = 1.0, reduce_op: Any = None,
               reduce_res: View | None = None, reduce_cmd: Any = "idle", dtype: Any = None, mask: Any = None,
               **_: Any) -> View:
    """op(data * scale + bias) on the Scalar engine; reduce_cmd drives its accumulator registers and
    reduce_res (a [P, 1] tile, written in place) receives them."""
    data = _tile(data, "activation", "data")
    return _result(data.shape, dtype, data.nc_dtype, "activation", "scalar", mask, data=data, op=_op_name(op),
                   bias=bias, scale=_scalar_or_tile(scale), reduce_op=_opt_reduce_op(reduce_op), reduce_res=reduce_res,
                   reduce_cmd=str(getattr(reduce_cmd, "name", reduce_cmd)))


def activation_reduce(op: Any, data: View, *, reduce_op: Any, reduce_res: View, bias: View | None = None,
                      scale: Any = 1.0, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    """op(data * scale + bias), and its row sums into reduce_res (in place)."""
    data = _tile(data, "activation_reduce", "data")
    return _result(data.shape, dtype, data.nc_dtype, "activation_reduce", "scalar", mask, data=data,
                   op=_op_name(op), reduce_op=_reduce_op(reduce_op), reduce_res=reduce_res, bias=bias,
                   scale=_scalar_or_tile(scale))


# ------------------------------------------------------------------ Vector engine
def tensor_tensor(data1: View, data2: View, op: Any, *, dtype: Any = None, mask: Any = None, engine: Any = None,
                  **_: Any) -> View:
    data1, data2 = _tile(data1, "tensor_tensor", "data1"), _tile(data2, "tensor_tensor", "data2")
    return _result(data1.shape, dtype, nl.promote(data1.nc_dtype, data2.nc_dtype), "tensor_tensor",
                   _engine(engine, "vector"), mask, data1=data1, data2=data2, op=_op_name(op))


def tensor_scalar(data: View, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None, operand1: Any = None,
                  reverse1: bool = False, *, dtype: Any = None, mask: Any = None, engine: Any = None, **_: Any) -> View:
    data = _tile(data, "tensor_scalar", "data")
    return _result(data.shape, dtype, data.nc_dtype, "tensor_scalar", _engine(engine, "vector"), mask, data=data,
                   op0=_op_name(op0), operand0=operand0, reverse0=reverse0,
                   op1=_opt_op(op1), operand1=operand1, reverse1=reverse1)


def tensor_scalar_reduce(*, data: View, op0: Any, operand0: Any, reduce_op: Any, reduce_res: View,
                         reverse0: bool = False, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    """data op0 operand0, and its reduction along the free axes into reduce_res (in place)."""
    data = _tile(data, "tensor_scalar_reduce", "data")
    return _result(data.shape, dtype, data.nc_dtype, "tensor_scalar_reduce", "vector", mask, data=data,
                   op0=_op_name(op0), operand0=_scalar_or_tile(operand0), reduce_op=_reduce_op(reduce_op),
                   reduce_res=reduce_res, reverse0=reverse0)


def scalar_tensor_tensor(*, data: View, op0: Any, operand0: Any, op1: Any, operand1: View, reverse0: bool = False,
                         reverse1: bool = False, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    """(data op0 operand0) op1 operand1, operand1 a tile of data's shape."""
    data = _tile(data, "scalar_tensor_tensor", "data")
    operand1 = _tile(operand1, "scalar_tensor_tensor", "operand1")
    return _result(data.shape, dtype, data.nc_dtype, "scalar_tensor_tensor", "vector", mask, data=data,
                   op0=_op_name(op0), operand0=_scalar_or_tile(operand0), op1=_op_name(op1), operand1=operand1,
                   reverse0=reverse0, reverse1=reverse1)


def tensor_tensor_scan(data0: View, data1: View, initial: Any, op0: Any, op1: Any, reverse0: bool = False,
                       reverse1: bool = False, *, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    """res[i] = (data0[i] op0 res[i-1]) op1 data1[i] along the free axis, from `initial`."""
    data0, data1 = _tile(data0, "tensor_tensor_scan", "data0"), _tile(data1, "tensor_tensor_scan", "data1")
    return _result(data0.shape, dtype, nl.promote(data0.nc_dtype, data1.nc_dtype), "tensor_tensor_scan", "vector",
                   mask, data0=data0, data1=data1, initial=_scalar_or_tile(initial), op0=_op_name(op0),
                   op1=_op_name(op1), reverse0=reverse0, reverse1=reverse1)


def tensor_reduce(op: Any, data: View, axis: Any, *, negate: bool = False, keepdims: bool = False, dtype: Any = None,
                  mask: Any = None, **_: Any) -> View:
    data = _tile(data, "tensor_reduce", "data")
    axes = nl._axes(data, axis, "tensor_reduce")
    shape = tuple(1 if d in axes else s for d, s in enumerate(data.shape)) if keepdims else \
        tuple(s for d, s in enumerate(data.shape) if d not in axes)
    return _result(shape, dtype, data.nc_dtype, "tensor_reduce", "vector", mask, data=data, op=_reduce_op(op),
                   axis=axes, negate=negate)


def tensor_copy(src: View, *, dtype: Any = None, mask: Any = None, engine: Any = None, **_: Any) -> View:
    src = _tile(src, "tensor_copy", "src")
    return _result(src.shape, dtype, src.nc_dtype, "tensor_copy", _engine(engine, "vector"), mask, src=src)


def tensor_copy_predicated(*, src: Any, dst: View, predicate: View, reverse_pred: bool = False, mask: Any = None,
                           **_: Any) -> None:
    """dst = src where predicate (a uint8/16/32 tile) is nonzero; dst keeps its values elsewhere."""
    dst = _tile(dst, "tensor_copy_predicated", "dst")
    predicate = _tile(predicate, "tensor_copy_predicated", "predicate")
    _emit("tensor_copy_predicated", "vector", mask, dst=dst, src=_scalar_or_tile(src), predicate=predicate,
          reverse_pred=reverse_pred)


def _dynamic(v: View, fn: str, what: str) -> tuple[View, View]:
    """A view indexed with a tile element (`t[i_p, idx_tile[0, j] + i_f]`): the view at offset 0 and
    the int32 offset, in elements of the buffer (scaled on GpSimd when the indexed axis's step is not 1)."""
    tr = current(f"nisa.{fn}")
    v = _tile(v, fn, what)
    if v.dynamic is None:
        raise tr.fail(f"nisa.{fn}: {what} has no run-time index; index it with a tile element, as in"
                      " t[i_p, offsets[0, j] + i_f]")
    index, step = v.dynamic
    if index.free_elements != 1 or index.partitions != 1:
        raise tr.fail(f"nisa.{fn}: a run-time index is one element of a tile, not {list(index.shape)}")
    if step != 1:  # 32-bit integer multiply runs on GpSimd (nki.api.shared, the ALU table's note)
        index = tr.result((1, 1), dtypes.INT32, "sbuf", "tensor_scalar", "gpsimd", data=index, op0="multiply",
                          operand0=constant(step))
    return v, index


def tensor_copy_dynamic_src(src: View, *, dtype: Any = None, mask: Any = None, engine: Any = None, **_: Any) -> View:
    """A copy of src, whose index holds a tile element read at run time (tensor_copy_dynamic_src)."""
    src, index = _dynamic(src, "tensor_copy_dynamic_src", "src")
    return _result(src.shape, dtype, src.nc_dtype, "tensor_copy_dynamic_src", _engine(engine, "vector"), mask,
                   src=src, index=index)


def tensor_copy_dynamic_dst(*, dst: View, src: View, mask: Any = None, engine: Any = None, **_: Any) -> None:
    """dst[...] = src with dst's index holding a tile element read at run time (tensor_copy_dynamic_dst)."""
    dst, index = _dynamic(dst, "tensor_copy_dynamic_dst", "dst")
    src = _tile(src, "tensor_copy_dynamic_dst", "src")
    _emit("tensor_copy_dynamic_dst", _engine(engine, "vector"), mask, dst=dst, src=src, index=index)


def memset(shape: Any, value: Any, dtype: Any, *, mask: Any = None, engine: Any = None, **_: Any) -> View:
    tr = current("nisa.memset")
    t = nl.ndarray(shape, dtype, nl.sbuf)
    iv = nl._intervals(mask)
    if iv is not None:
        tr.emit("memset", _engine(engine, "vector"), dst=t.clip(iv), value=constant(value))
    return t


def reciprocal(data: View, *, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    """1 / data on the Vector engine (IEEE division in fp32)."""
    data = _tile(data, "reciprocal", "data")
    return _result(data.shape, dtype, data.nc_dtype, "reciprocal", "vector", mask, data=data)


def bn_stats(data: View, *, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    """[P, 6] statistics (count, mean, variance * count of the even and the odd elements)."""
    data = _tile(data, "bn_stats", "data")
    return _result((data.partitions, 6), dtype, data.nc_dtype, "bn_stats", "vector", mask, data=data)


def bn_aggr(data: View, *, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    """[P, 2]: the mean and the population variance of the groups bn_stats described."""
    data = _tile(data, "bn_aggr", "data")
    return _result((data.partitions, 2), dtype, data.nc_dtype, "bn_aggr", "vector", mask, data=data)


def max8(*, src: View, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    """[P, 8]: each partition's 8 largest values, largest first."""
    src = _tile(src, "max8", "src")
    return _result((src.partitions, 8), dtype, src.nc_dtype, "max8", "vector", mask, src=src)


def nc_find_index8(*, data: View, vals: View, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    """[P, 8] uint32 (or dtype=uint16): where each of vals first occurs in its partition of data."""
    data, vals = _tile(data, "nc_find_index8", "data"), _tile(vals, "nc_find_index8", "vals")
    return _result((data.partitions, 8), dtype, dtypes.by_name("u32"), "nc_find_index8", "vector", mask,
                   data=data, vals=vals)


def nc_match_replace8(*, data: View, vals: View, imm: float, dst_idx: View | None = None, dtype: Any = None,
                      mask: Any = None, **_: Any) -> View:
    """data with the first occurrence of each of vals replaced by imm; dst_idx (in place) the indices."""
    data, vals = _tile(data, "nc_match_replace8", "data"), _tile(vals, "nc_match_replace8", "vals")
    return _result(data.shape, dtype, data.nc_dtype, "nc_match_replace8", "vector", mask, data=data, vals=vals,
                   imm=float(np.float32(imm)), dst_idx=dst_idx)


def dropout(data: View, prob: Any, *, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    """data with each element zeroed with probability prob (ncsim's counter-based stream, seed 0)."""
    data = _tile(data, "dropout", "data")
    return _result(data.shape, dtype, data.nc_dtype, "dropout", "vector", mask, data=data,
                   prob=_scalar_or_tile(prob))


def nc_stream_shuffle(src: View, dst: View, shuffle_mask: Any, *, dtype: Any = None, mask: Any = None,
                      **_: Any) -> None:
    """dst[32q + i] = src[32q + shuffle_mask[i]] within each 32-partition quadrant (255: unchanged)."""
    tr = current("nisa.nc_stream_shuffle")
    src, dst = _tile(src, "nc_stream_shuffle", "src"), _tile(dst, "nc_stream_shuffle", "dst")
    entries = [int(m) for m in shuffle_mask]
    if len(entries) != 32:
        raise tr.fail(f"nisa.nc_stream_shuffle: shuffle_mask has 32 entries, not {len(entries)}")
    _emit("nc_stream_shuffle", "vector", mask, dst=dst, src=src, shuffle_mask=tuple(entries))


# ------------------------------------------------------------------ GpSimd engine
def _affine(expr: Index, shape: tuple[int, ...], fn: str, iv: dict[int, tuple[int, int]]
            ) -> tuple[tuple[tuple[int, int], ...], int, int]:
    """(pattern, offset, channel_multiplier) of an affine expression of the index grid over a tile of
    `shape` (grid dimension 0 its partitions, d its axis d), narrowed to a mask's intervals."""
    tr = current(f"nisa.{fn}")
    ext = expr.extents
    for d, n in ext.items():
        if d >= len(shape) or (n != shape[d] and n != 1):
            raise tr.fail(f"nisa.{fn}: the expression spans {n} positions on index dimension {d}, the tile"
                          f" {list(shape)}")
    coefs = expr.coefs
    offset = expr.const
    counts = list(shape)
    for d, (lo, hi) in iv.items():
        if d < len(counts):
            offset += coefs.get(d, 0) * lo
            counts[d] = min(hi, counts[d]) - lo
    pattern = tuple((coefs.get(d, 0), counts[d]) for d in range(1, len(shape))) or ((0, 1),)
    if len(pattern) > 4:
        raise tr.fail(f"nisa.{fn}: a tile of {len(shape)} dimensions; the affine pattern has at most 4 free ones")
    return pattern, offset, coefs.get(0, 0)


def iota(expr: Any, dtype: Any, *, mask: Any = None, **_: Any) -> View:
    """A tile holding an affine expression of nl.arange indices (`5 + 2 * i_p + i_f`), computed in
    32-bit integers on GpSimd: iota's pattern is the expression's coefficient per free axis, its
    channel_multiplier the partition coefficient, its offset the constant."""
    tr = current("nisa.iota")
    if not isinstance(expr, Index) or not expr.placed or expr.rank < 2:
        raise tr.fail("nisa.iota takes an affine expression of placed nl.arange indices, as in"
                      " nl.arange(128)[:, None] * 512 + nl.arange(512)[None, :]")
    shape = expr.shape
    dt = to_dtype(dtype)
    iv = nl._intervals(mask)
    if iv is None:
        return nl._nothing(shape, dt)
    pattern, offset, cm = _affine(expr, shape, "iota", iv)
    return tr.result(shape, dt, "sbuf", "iota", "gpsimd", iv, pattern=pattern, offset=offset,
                     channel_multiplier=cm)


_CMP = {"<": "less", "<=": "less_equal", ">": "greater", ">=": "greater_equal", "==": "equal", "!=": "not_equal"}


def affine_select(pred: Any, on_true_tile: View, on_false_value: float, *, dtype: Any = None, mask: Any = None,
                  **_: Any) -> View:
    """on_true_tile where the affine predicate holds, on_false_value elsewhere (GpSimd). The predicate
    `a op b` of nl.arange expressions becomes affine_select's value a - b (pattern: its coefficient
    per free axis, channel_multiplier: its partition coefficient, offset: its constant) compared with 0
    by op; NKI allows one comparison, not several joined by & or |."""
    tr = current("nisa.affine_select")
    if not isinstance(pred, Mask) or len(pred.terms) != 1:
        raise tr.fail("nisa.affine_select takes one comparison of nl.arange expressions (such as i_p >= i_f);"
                      " several joined by & or | are nl.where's job")
    on_true_tile = _sbuf(_tile(on_true_tile, "affine_select", "on_true_tile"))
    (expr, op), = pred.terms
    shape = on_true_tile.shape
    dt = _dt(dtype, on_true_tile.nc_dtype)
    iv = nl._intervals(mask)
    if iv is None:
        return nl._nothing(shape, dt)
    pattern, offset, cm = _affine(expr, shape, "affine_select", iv)
    return tr.result(shape, dt, "sbuf", "affine_select", "gpsimd", iv, pattern=pattern, offset=offset,
                     channel_multiplier=cm, on_true_tile=on_true_tile.clip(iv),
                     on_false_value=float(np.float32(on_false_value)), cmp_op=_CMP[op])


def tensor_partition_reduce(op: Any, data: View, *, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    """[1, F]: data reduced across its partitions (add, maximum, bitwise_or, bitwise_and) on GpSimd."""
    data = _sbuf(_tile(data, "tensor_partition_reduce", "data"))
    return _result((1,) + tuple(data.shape[1:]), dtype, data.nc_dtype, "tensor_partition_reduce", "gpsimd", mask,
                   data=data, op=_reduce_op(op))


def local_gather(src_buffer: View, index: View, num_elem_per_idx: int = 1, num_valid_indices: int | None = None, *,
                 mask: Any = None, **_: Any) -> View:
    """[P, V * E]: each GpSimd core's 16 partitions gather with the core's indices (V of them, E
    contiguous elements each) from their own rows of src_buffer."""
    src_buffer = _tile(src_buffer, "local_gather", "src_buffer")
    index = _tile(index, "local_gather", "index")
    per_core = index.free_elements * min(16, index.partitions)
    valid = per_core if num_valid_indices is None else int(num_valid_indices)
    return _result((src_buffer.partitions, valid * int(num_elem_per_idx)), None, src_buffer.nc_dtype,
                   "local_gather", "gpsimd", mask, src_buffer=src_buffer, index=index,
                   num_elem_per_idx=int(num_elem_per_idx), num_valid_indices=num_valid_indices)


# ------------------------------------------------------------------ DMA
def dma_copy(*, dst: View, src: View, mask: Any = None, **_: Any) -> None:
    """dst = src between HBM and SBUF (or within either), issued by the Sync engine (loads) or
    GpSimd (stores), as nl.load / nl.store are."""
    tr = current("nisa.dma_copy")
    iv = nl._intervals(mask)
    if iv is None:
        return
    if not isinstance(dst, View) or not isinstance(src, View):
        raise tr.fail("nisa.dma_copy copies a tensor into a tensor (dst=, src=)")
    tr.emit("dma_copy", "sync" if dst.on_chip else "gpsimd", dst=dst.clip(iv), src=src.clip(iv))


NAMES = tuple(sorted(n for n, v in globals().items() if not n.startswith("_") and (callable(v) or isinstance(v, type))
                     and getattr(v, "__module__", None) == __name__))


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise AsmError(f"nisa.{name} is not available in ncsim's NKI front end; it has: {', '.join(NAMES)}",
                   user_place().source_loc())
