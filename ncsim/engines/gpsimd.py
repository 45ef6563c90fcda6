"""GpSimd engine (POOL) instructions: iota, affine_select, tensor_partition_reduce and local_gather
(see ncsim/engines/__init__.py for the execute/reference contract).

GpSimd cannot reach PSUM: the assembler rejects such operands, and every instruction here checks again
at run time, so a hand-made object gets a SimError rather than a crash.

iota and affine_select compute an affine value per element in 32-bit integer arithmetic, wrapping
modulo 2**32:  v[p, i...] = offset + channel_multiplier * p + sum_k step_k * i_k, where p counts the
operand's partitions from 0 and i_k runs over the pattern's counts in row-major order (outermost
first); the pattern's counts must multiply to dst's elements per partition, which are visited in
dst's own iteration order.
"""

from __future__ import annotations

import numpy as np

from ncsim.asm.rules import GATHER_WIDTHS, PARTITION_REDUCE_OPS, gather_plan  # noqa: F401 - tests use them
from ncsim.config import Config
from ncsim.engines import alu, refalu, reference, semantics
from ncsim.engines.context import Context
from ncsim.numerics import from_f32, to_f32

CMP = {"equal": np.equal, "not_equal": np.not_equal, "greater": np.greater, "greater_equal": np.greater_equal,
       "less": np.less, "less_equal": np.less_equal}


def _wrap32(v: np.ndarray | int) -> np.ndarray | int:
    """Two's complement wrap of (int64 or Python) integers to int32's range."""
    return ((v + 2**31) % 2**32) - 2**31


def _affine(ctx: Context, p: int, f: int) -> np.ndarray:
    """The int32 affine values [p, f] of iota / affine_select (module docstring)."""
    dims = ctx["pattern"]  # rule affine-pattern: its counts multiply to f
    v = np.zeros((), np.int64)
    for step, count in dims:
        v = v[..., None] + _wrap32(np.arange(count, dtype=np.int64) * step)  # each term wrapped: no int64 overflow
    v = _wrap32(v.reshape(-1))
    lanes = _wrap32(np.arange(p, dtype=np.int64) * ctx["channel_multiplier"])
    return _wrap32(v[None, :] + lanes[:, None] + ctx["offset"]).astype(np.int32)


def _int32_to(values: np.ndarray, dtype) -> np.ndarray:
    """int32 values stored as `dtype`: integer dtypes get the exact value saturated to their range (bool:
    nonzero is 1), float dtypes the value rounded to fp32 and then narrowed (round to nearest even)."""
    if dtype.kind == "bool":
        return (values != 0).astype(dtype.storage)
    if dtype.is_int:
        info = np.iinfo(dtype.storage)
        return np.clip(values.astype(np.int64), int(info.min), int(info.max)).astype(dtype.storage)
    return from_f32(values.astype(np.float64).astype(np.float32), dtype)


@semantics("iota")
def iota(ctx: Context) -> None:
    # iota dst_sbuf, [[step, count], ...], offset, channel_multiplier=0
    dst = ctx.ap("dst")
    values = _affine(ctx, dst.partitions, dst.free_elements)
    ctx.write_raw("dst", _int32_to(values, dst.dtype))


def _affine_ref(instr, p: int) -> list[list[int]]:
    """The affine values, element by element, with Python integers wrapped to int32."""
    dims = instr["pattern"]
    index_lists: list[list[int]] = [[]]
    for _, count in dims:
        index_lists = [idx + [i] for idx in index_lists for i in range(count)]
    rows = []
    for lane in range(p):
        row = []
        for idx in index_lists:
            v = instr["offset"] + instr["channel_multiplier"] * lane + sum(s * i for (s, _), i in zip(dims, idx))
            row.append(_wrap32(v))
        rows.append(row)
    return rows


def _int32_to_ref(v: int, dtype) -> np.ndarray:
    if dtype.kind == "bool":
        return np.array(1 if v != 0 else 0, dtype.storage)
    if dtype.is_int:
        info = np.iinfo(dtype.storage)
        return np.array(min(max(v, int(info.min)), int(info.max)), dtype.storage)
    return from_f32(np.array(float(v), np.float32), dtype)


@reference("iota")
def iota_ref(instr, inputs, state):
    dst = instr["dst"]
    rows = _affine_ref(instr, dst.partitions)
    out = np.array([[_int32_to_ref(v, dst.dtype) for v in row] for row in rows], dst.dtype.storage)
    return {"dst": out.reshape(dst.shape)}


@semantics("affine_select")
def affine_select(ctx: Context) -> None:
    # affine_select dst_sbuf, [[step, count], ...], offset, channel_multiplier, on_true_tile_sbuf,
    #               on_false_value, cmp_op=equal
    p, f = ctx.rows("dst", "on_true_tile")
    dst, on_true = ctx.ap("dst"), ctx.ap("on_true_tile")
    keep = CMP[ctx["cmp_op"]](_affine(ctx, p, f), 0)
    false_value = from_f32(np.full((p, f), ctx["on_false_value"], np.float32), dst.dtype)
    raw = ctx.read_raw("on_true_tile").reshape(p, f)
    true_value = raw if on_true.dtype == dst.dtype else from_f32(to_f32(raw, on_true.dtype), dst.dtype)
    ctx.write_raw("dst", np.where(keep, true_value, false_value))


@reference("affine_select")
def affine_select_ref(instr, inputs, state):
    dst, on_true = instr["dst"], instr["on_true_tile"]
    p, f = dst.partitions, dst.free_elements
    raw = inputs["on_true_tile"].reshape(p, f)
    cmp = {"equal": lambda v: v == 0, "not_equal": lambda v: v != 0, "greater": lambda v: v > 0,
           "greater_equal": lambda v: v >= 0, "less": lambda v: v < 0, "less_equal": lambda v: v <= 0}[instr["cmp_op"]]
    false_value = from_f32(np.array(instr["on_false_value"], np.float32), dst.dtype)
    out = np.empty((p, f), dst.dtype.storage)
    for i, row in enumerate(_affine_ref(instr, p)):
        for j, v in enumerate(row):
            if not cmp(v):
                out[i, j] = false_value
            elif on_true.dtype == dst.dtype:
                out[i, j] = raw[i, j]
            else:
                out[i, j] = from_f32(to_f32(raw[i, j:j + 1], on_true.dtype), dst.dtype)[0]
    return {"dst": out.reshape(dst.shape)}


@semantics("tensor_partition_reduce")
def tensor_partition_reduce(ctx: Context) -> None:
    # tensor_partition_reduce dst_sbuf[1, F], op, data_sbuf[P, F]
    op, data = ctx["op"], ctx.ap("data")  # rules reduce-operator, partition-reduce-shape held
    p, f = data.partitions, data.free_elements
    if alu.IS_BITVEC[op]:
        bits = ctx.read_bits("data").reshape(p, f)
        ctx.write_bits("dst", alu.fold(op, bits.T).reshape(1, f))
    else:
        ctx.write("dst", alu.fold(op, ctx.read2d("data").T).reshape(1, f))


@reference("tensor_partition_reduce")
def tensor_partition_reduce_ref(instr, inputs, state):
    dst, data, op = instr["dst"], instr["data"], instr["op"]
    p, f = data.partitions, data.free_elements
    raw = inputs["data"].reshape(p, f)
    if alu.IS_BITVEC[op]:
        bits = alu.to_bits(raw, data.dtype)
        out = np.empty(f, np.uint32)
        for i in range(f):
            acc = int(bits[0, i])
            for k in range(1, p):
                acc = refalu.bitop(op, acc, int(bits[k, i]))
            out[i] = acc
        return {"dst": alu.from_bits(out, dst.dtype).reshape(dst.shape)}
    x = to_f32(raw, data.dtype)
    out = np.empty(f, np.float32)
    for i in range(f):
        acc = x[0, i]
        for k in range(1, p):
            acc = refalu.op(op, acc, x[k, i])
        out[i] = acc
    return {"dst": from_f32(out, dst.dtype).reshape(dst.shape)}


# ------------------------------------------------------------------ local_gather
@semantics("local_gather")
def local_gather(ctx: Context) -> None:
    # local_gather dst_sbuf, src_buffer_sbuf, index_u16_sbuf, num_elem_per_idx=1, num_valid_indices=none
    src = ctx.ap("src_buffer")
    width, per_core = ctx["num_elem_per_idx"], ctx.config.gpsimd_partitions_per_core
    count = gather_plan(ctx.instr, ctx.config)[0]  # rule local-gather held; the index values are checked here
    cores, f = src.partitions // per_core, src.free_elements
    data = ctx.read_raw("src_buffer").reshape(cores, per_core, f)
    # each core's indices, partition first: the core's [16, W] block read column by column
    idx = ctx.read_raw("index").reshape(cores, per_core, -1).transpose(0, 2, 1).reshape(cores, -1)[:, :count]
    idx = idx.astype(np.int64)
    bad = idx + width > f
    if bad.any():
        c, j = (int(v) for v in np.argwhere(bad)[0])
        raise ctx.fail(f"core {src.partition // per_core + c} index {j} (partition {src.partition + c * per_core + j % per_core},"
                       f" element {j // per_core} of 'index') is {idx[c, j]}: with num_elem_per_idx={width} it reads"
                       f" elements {idx[c, j]}..{idx[c, j] + width - 1}, past the {f} elements per partition of 'src_buffer'")
    cols = (idx[:, :, None] + np.arange(width)).reshape(cores, 1, -1)  # [core, 1, count * width]
    out = np.take_along_axis(data, np.broadcast_to(cols, (cores, per_core, cols.shape[-1])), axis=2)
    ctx.write_raw("dst", out.reshape(src.partitions, -1))


@reference("local_gather")
def local_gather_ref(instr, inputs, state):
    src, index, dst = instr["src_buffer"], instr["index"], instr["dst"]
    width = instr["num_elem_per_idx"]
    per_core = Config().gpsimd_partitions_per_core  # references run on the default configuration
    valid = instr["num_valid_indices"]
    count = per_core * index.free_elements if valid is None else valid
    p, f = src.partitions, src.free_elements
    data = inputs["src_buffer"].reshape(p, f)
    idx_rows = inputs["index"].reshape(p, -1)
    out = np.empty((p, count * width), src.dtype.storage)
    for core in range(p // per_core):
        base = core * per_core
        indices = [int(idx_rows[base + j % per_core, j // per_core]) for j in range(count)]
        for lane in range(base, base + per_core):
            for j, start in enumerate(indices):
                for e in range(width):
                    out[lane, j * width + e] = data[lane, start + e]
    return {"dst": out.reshape(dst.shape)}
