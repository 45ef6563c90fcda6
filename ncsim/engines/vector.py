"""Vector engine (DVE) instructions, and those Vector shares with GpSimd and Scalar.

Each instruction: an `execute(ctx)` over whole tiles (numpy, numba for sequential loops) and a
plain `reference` computed element by element from the definition (`ncsim.engines.refalu`).
"""

from __future__ import annotations

import numpy as np

from ncsim import isa
from ncsim.asm.rules import reduce_axes
from ncsim.engines import alu, refalu, reference, semantics
from ncsim.engines.context import DST, Context
from ncsim.memory.access import AccessPattern, Immediate
from ncsim.numerics import from_f32, to_f32

WRAP_INT_OPS = {"add": np.add, "multiply": np.multiply}  # isa.INT32_GPSIMD_OPS
INT32 = ("i32", "u32")


def _int32_wrap(ctx: Context, *names: str) -> bool:
    """GpSimd's 32-bit integer add/multiply (rule int32-add-multiply): dst and data 32-bit integers ->
    computed on the integers, modulo 2**32."""
    return ctx.engine == "gpsimd" and all(ctx.ap(n).dtype.short in INT32 for n in names)


@semantics("tensor_tensor")
def tensor_tensor(ctx: Context) -> None:
    op = ctx["op"]
    p, f = ctx.rows("dst", "data1", "data2")
    if alu.IS_BITVEC[op]:
        a, b = (ctx.read_bits(n).reshape(p, f) for n in ("data1", "data2"))
        ctx.write_bits("dst", alu.bitvec(op, a, b))
    elif op in WRAP_INT_OPS and _int32_wrap(ctx, "dst", "data1", "data2"):
        a, b = (ctx.read_raw(n).reshape(p, f).astype(np.int64) for n in ("data1", "data2"))
        ctx.write_bits("dst", (WRAP_INT_OPS[op](a, b) & 0xFFFFFFFF).astype(np.uint32))
    elif not ctx.fp32_into("dst", [(op, "data1", "data2")]):
        ctx.write("dst", alu.apply(op, ctx.read2d_view("data1"), ctx.read2d_view("data2")))


@reference("tensor_tensor")
def tensor_tensor_ref(instr, inputs, state):
    op = instr["op"]
    d1, d2, dst = instr["data1"], instr["data2"], instr["dst"]
    a_raw, b_raw = inputs["data1"].ravel(), inputs["data2"].ravel()
    if alu.IS_BITVEC[op]:
        a, b = alu.to_bits(a_raw, d1.dtype), alu.to_bits(b_raw, d2.dtype)
        out = np.array([refalu.bitop(op, int(x), int(y)) for x, y in zip(a, b)], np.uint32)
        return {"dst": alu.from_bits(out, dst.dtype).reshape(dst.shape)}
    if instr.engine == "gpsimd" and op in WRAP_INT_OPS and all(x.dtype.short in INT32 for x in (d1, d2, dst)):
        out = np.array([_ref_int(op, int(x), int(y)) for x, y in zip(a_raw, b_raw)], np.uint32)
        return {"dst": out.view(dst.dtype.storage).reshape(dst.shape)}
    a, b = to_f32(a_raw, d1.dtype), to_f32(b_raw, d2.dtype)
    out = np.array([refalu.op(op, x, y) for x, y in zip(a, b)], np.float32)
    return {"dst": from_f32(out, dst.dtype).reshape(dst.shape)}


# ---------------------------------------------------------------------------------- shared helpers
def _is_unary(op: str) -> bool:
    return alu.ARITY[op] == 1


def _arith(op: str, x: np.ndarray, operand: np.ndarray, reverse: bool) -> np.ndarray:
    """x op operand (operand op x when reversed) in fp32; a unary op applies to x alone."""
    if _is_unary(op):
        return alu.apply(op, x)
    return alu.apply(op, operand, x) if reverse else alu.apply(op, x, operand)


def _bits(op: str, x: np.ndarray, operand: np.ndarray, reverse: bool) -> np.ndarray:
    """_arith for a bitwise operator on uint32 patterns."""
    if _is_unary(op):
        return alu.bitvec(op, x)
    return alu.bitvec(op, operand, x) if reverse else alu.bitvec(op, x, operand)


def _scalar_bits(ctx: Context, name: str, partitions: int) -> np.ndarray:
    """A constant-or-column operand as uint32 patterns, broadcastable against [partitions, ...]
    (rules bitwise-integers and column have checked it)."""
    v = ctx[name]
    if isinstance(v, Immediate):
        return ctx.read_bits(name)
    return ctx.read_bits(ctx.ap(name)).reshape(partitions, 1)


def _scalar_ints(ctx: Context, name: str, partitions: int) -> np.ndarray:
    """A constant-or-column operand of 32-bit integer arithmetic as int64, broadcastable against
    [partitions, ...] (rule int32-add-multiply: an integer constant or a 32-bit integer column)."""
    v = ctx[name]
    if isinstance(v, Immediate):
        return np.asarray(int(v.value), np.int64)
    return ctx.read_raw(name).reshape(partitions, 1).astype(np.int64)


def _const_raw(value: float, dtype) -> np.ndarray:
    """A constant stored as `dtype` (shape (1,)): an integer constant into an integer dtype saturates
    exactly (bool: nonzero is 1); anything else is rounded to fp32 and narrowed with from_f32."""
    if isinstance(value, int) and dtype.is_int:
        if dtype.kind == "bool":
            return np.array([value != 0], np.uint8)
        info = np.iinfo(dtype.storage)
        return np.array([min(max(value, int(info.min)), int(info.max))], dtype.storage)
    return from_f32(np.array([np.float64(value)], np.float32), dtype)


# ---------------------------------------------------------------------------------- elementwise
@semantics("tensor_scalar")
def tensor_scalar(ctx: Context) -> None:
    # tensor_scalar dst, data, op0, operand0, reverse0=false, op1=none, operand1=none, reverse1=false
    op0, op1 = ctx["op0"], ctx["op1"]
    p, f = ctx.rows("dst", "data")
    steps = [(op0, "operand0", ctx["reverse0"])] + ([(op1, "operand1", ctx["reverse1"])] if op1 else [])
    if op0 in WRAP_INT_OPS and _int32_wrap(ctx, "dst", "data"):
        x = ctx.read_raw("data").reshape(p, f).astype(np.int64)
        for op, name, _rev in steps:  # add and multiply commute: reverse changes nothing
            x = WRAP_INT_OPS[op](x, _scalar_ints(ctx, name, p)) & 0xFFFFFFFF
        ctx.write_bits("dst", x.astype(np.uint32))
    elif alu.IS_BITVEC[op0]:
        x = ctx.read_bits("data").reshape(p, f)
        for op, name, rev in steps:
            x = _bits(op, x, _scalar_bits(ctx, name, p), rev)
        ctx.write_bits("dst", x)
    elif not ctx.fp32_into("dst", [(op, name, x) if rev else (op, x, name) for x, (op, name, rev)
                                   in zip(("data", DST), steps)], scalars=("operand0", "operand1")):
        x = ctx.read2d_view("data")
        for op, name, rev in steps:
            x = _arith(op, x, ctx.scalar(name, p), rev)
        ctx.write("dst", x)


@semantics("tensor_scalar_reduce")
def tensor_scalar_reduce(ctx: Context) -> None:
    # tensor_scalar_reduce dst, data, op0, operand0, reduce_op, reduce_res, reverse0=false
    op0, reduce_op = ctx["op0"], ctx["reduce_op"]
    p = ctx.rows("dst", "data")[0]
    out = _arith(op0, ctx.read2d("data"), ctx.scalar("operand0", p), ctx["reverse0"])
    ctx.write("dst", out)
    ctx.write("reduce_res", alu.fold(reduce_op, out).reshape(p, 1))


@semantics("scalar_tensor_tensor")
def scalar_tensor_tensor(ctx: Context) -> None:
    # scalar_tensor_tensor dst, data, op0, operand0, op1, operand1, reverse0=false, reverse1=false
    op0, op1 = ctx["op0"], ctx["op1"]
    p = ctx.rows("dst", "data", "operand1")[0]
    tmp = _arith(op0, ctx.read2d("data"), ctx.scalar("operand0", p), ctx["reverse0"])
    ctx.write("dst", _arith(op1, tmp, ctx.read2d("operand1"), ctx["reverse1"]))


@semantics("reciprocal")
def reciprocal(ctx: Context) -> None:
    # reciprocal dst, data
    ctx.rows("dst", "data")
    ctx.write("dst", alu.apply("reciprocal", ctx.read2d("data")))


# ---------------------------------------------------------------------------------- reductions, scans
@semantics("tensor_reduce")
def tensor_reduce(ctx: Context) -> None:
    # tensor_reduce dst, op, data, axis, negate=false, keepdims=false
    op, data = ctx["op"], ctx.ap("data")
    kept, reduced = reduce_axes(data, ctx["axis"])  # rules reduce-operator, reduce-axes, reduce-negate held
    p = data.partitions
    if alu.IS_BITVEC[op]:
        ctx.write_bits("dst", alu.fold(op, ctx.read_bits("data").reshape(p * kept, reduced)).reshape(p, kept))
        return
    r = alu.fold(op, ctx.read2d("data").reshape(p * kept, reduced))
    if ctx["negate"]:
        r = alu.apply("multiply", r, np.float32(-1))
    ctx.write("dst", r.reshape(p, kept))


@semantics("tensor_tensor_scan")
def tensor_tensor_scan(ctx: Context) -> None:
    # tensor_tensor_scan dst, data0, data1, initial, op0, op1, reverse0=false, reverse1=false
    p = ctx.rows("dst", "data0", "data1")[0]
    init = np.broadcast_to(ctx.scalar("initial", p), (p, 1)).reshape(p).astype(np.float32)
    out = alu.scan_rows(ctx.read2d("data0"), ctx.read2d("data1"), init, alu.CODES[ctx["op0"]],
                        alu.CODES[ctx["op1"]], bool(ctx["reverse0"]), bool(ctx["reverse1"]))
    ctx.write("dst", out)


# ---------------------------------------------------------------------------------- copies, fills
@semantics("tensor_copy")
def tensor_copy(ctx: Context) -> None:
    # tensor_copy dst, src, engine=vector
    ctx.rows("dst", "src")
    if ctx.ap("dst").dtype == ctx.ap("src").dtype and ctx.engine != "scalar":
        ctx.write_raw("dst", ctx.read_raw("src"))
    else:
        ctx.write("dst", ctx.read("src"))


@semantics("tensor_copy_predicated")
def tensor_copy_predicated(ctx: Context) -> None:
    # tensor_copy_predicated dst, src, predicate, reverse_pred=false
    dst, src = ctx.ap("dst"), ctx["src"]
    if isinstance(src, AccessPattern):
        p, f = ctx.rows("dst", "src", "predicate")
        new = ctx.read_raw("src").reshape(p, f)
    else:
        p, f = ctx.rows("dst", "predicate")
        new = _const_raw(src.value, dst.dtype).reshape(1, 1)
    copy = (ctx.read_raw("predicate").reshape(p, f) != 0) != bool(ctx["reverse_pred"])
    ctx.write_raw("dst", np.where(copy, new, ctx.read_raw("dst").reshape(p, f)))


@semantics("memset")
def memset(ctx: Context) -> None:
    # memset dst, value
    dst = ctx.ap("dst")
    one = _const_raw(ctx["value"].value, dst.dtype)
    ctx.write_raw("dst", np.repeat(one, dst.num_elements).reshape(dst.partitions, dst.free_elements))


# ---------------------------------------------------------------------------------- references
# Written from the rows' semantics, element by element, with refalu for every operator.
def _ref_arity(op: str) -> int:
    return isa.alu_info(op)[1]


def _ref_apply(op: str, x, operand, reverse: bool):
    if _ref_arity(op) == 1:
        return refalu.op(op, x)
    return refalu.op(op, operand, x) if reverse else refalu.op(op, x, operand)


def _ref_bitop(op: str, x: int, operand: int, reverse: bool) -> int:
    if _ref_arity(op) == 1:
        return refalu.bitop(op, x)
    return refalu.bitop(op, operand, x) if reverse else refalu.bitop(op, x, operand)


def _ref_column(instr, inputs, name: str, partitions: int) -> list:
    """The constant-or-column operand's fp32 value for each partition."""
    v = instr[name]
    if isinstance(v, Immediate):
        return [np.float32(v.value)] * partitions
    return list(to_f32(inputs[name].reshape(-1), v.dtype))


def _ref_column_bits(instr, inputs, name: str, partitions: int) -> list[int]:
    v = instr[name]
    if isinstance(v, Immediate):
        return [int(v.value) & 0xFFFFFFFF] * partitions
    return [int(b) for b in alu.to_bits(inputs[name].reshape(-1), v.dtype)]


def _ref_column_ints(instr, inputs, name: str, partitions: int) -> list[int]:
    """The integer constant or 32-bit integer column of GpSimd's integer arithmetic, per partition."""
    v = instr[name]
    if isinstance(v, Immediate):
        return [int(v.value)] * partitions
    return [int(x) for x in inputs[name].reshape(-1)]


def _ref_int(op: str, x: int, y: int) -> int:
    """32-bit integer add or multiply, modulo 2**32 (Python integers are exact)."""
    return (x + y if op == "add" else x * y) & 0xFFFFFFFF


def _ref_rows(instr, inputs, name: str) -> np.ndarray:
    """An input tile's fp32 values as [partitions, elements per partition]."""
    ap = instr[name]
    return to_f32(inputs[name], ap.dtype).reshape(ap.partitions, -1)


def _ref_out(values: list, ap) -> np.ndarray:
    return from_f32(np.array(values, np.float32), ap.dtype).reshape(ap.shape)


@reference("tensor_scalar")
def tensor_scalar_ref(instr, inputs, state):
    dst, data = instr["dst"], instr["data"]
    op0, op1 = instr["op0"], instr["op1"]
    parts = data.partitions
    if instr.engine == "gpsimd" and op0 in WRAP_INT_OPS and all(x.dtype.short in INT32 for x in (dst, data)):
        x = inputs["data"].reshape(parts, -1)
        c0 = _ref_column_ints(instr, inputs, "operand0", parts)
        c1 = _ref_column_ints(instr, inputs, "operand1", parts) if op1 else None
        out = []
        for p in range(parts):
            for v in x[p]:
                t = _ref_int(op0, int(v), c0[p])
                if op1:
                    t = _ref_int(op1, t, c1[p])
                out.append(t)
        return {"dst": np.array(out, np.uint32).view(dst.dtype.storage).reshape(dst.shape)}
    if alu.IS_BITVEC[op0]:
        x = alu.to_bits(inputs["data"].reshape(-1), data.dtype).reshape(parts, -1)
        c0 = _ref_column_bits(instr, inputs, "operand0", parts)
        c1 = _ref_column_bits(instr, inputs, "operand1", parts) if op1 else None
        out = []
        for p in range(parts):
            for v in x[p]:
                t = _ref_bitop(op0, int(v), c0[p], instr["reverse0"])
                if op1:
                    t = _ref_bitop(op1, t, c1[p], instr["reverse1"])
                out.append(t)
        return {"dst": alu.from_bits(np.array(out, np.uint32), dst.dtype).reshape(dst.shape)}
    x = _ref_rows(instr, inputs, "data")
    c0 = _ref_column(instr, inputs, "operand0", parts)
    c1 = _ref_column(instr, inputs, "operand1", parts) if op1 else None
    out = []
    for p in range(parts):
        for v in x[p]:
            t = _ref_apply(op0, v, c0[p], instr["reverse0"])
            if op1:
                t = _ref_apply(op1, t, c1[p], instr["reverse1"])
            out.append(t)
    return {"dst": _ref_out(out, dst)}


def _ref_fold(op: str, values) -> np.float32:
    acc = None
    for v in values:
        acc = v if acc is None else refalu.op(op, acc, v)
    return acc


@reference("tensor_scalar_reduce")
def tensor_scalar_reduce_ref(instr, inputs, state):
    dst, data, res = instr["dst"], instr["data"], instr["reduce_res"]
    parts = data.partitions
    x = _ref_rows(instr, inputs, "data")
    c0 = _ref_column(instr, inputs, "operand0", parts)
    out, sums = [], []
    for p in range(parts):
        row = [_ref_apply(instr["op0"], v, c0[p], instr["reverse0"]) for v in x[p]]
        out += row
        sums.append(_ref_fold(instr["reduce_op"], row))
    return {"dst": _ref_out(out, dst), "reduce_res": _ref_out(sums, res)}


@reference("scalar_tensor_tensor")
def scalar_tensor_tensor_ref(instr, inputs, state):
    dst, data = instr["dst"], instr["data"]
    parts = data.partitions
    x, y = _ref_rows(instr, inputs, "data"), _ref_rows(instr, inputs, "operand1")
    c0 = _ref_column(instr, inputs, "operand0", parts)
    out = []
    for p in range(parts):
        for v, w in zip(x[p], y[p]):
            t = _ref_apply(instr["op0"], v, c0[p], instr["reverse0"])
            out.append(_ref_apply(instr["op1"], t, w, instr["reverse1"]))
    return {"dst": _ref_out(out, dst)}


@reference("reciprocal")
def reciprocal_ref(instr, inputs, state):
    x = _ref_rows(instr, inputs, "data").reshape(-1)
    return {"dst": _ref_out([refalu.op("reciprocal", v) for v in x], instr["dst"])}


@reference("tensor_reduce")
def tensor_reduce_ref(instr, inputs, state):
    dst, data, op = instr["dst"], instr["data"], instr["op"]
    shape = data.free_shape
    k = len(instr["axis"])
    kept_shape, red_shape = shape[:len(shape) - k], shape[len(shape) - k:]
    bitwise = alu.IS_BITVEC[op]
    if bitwise:
        x = alu.to_bits(inputs["data"], data.dtype)
    else:
        x = to_f32(inputs["data"], data.dtype)
    out = []
    for p in range(data.partitions):
        for kept in np.ndindex(*kept_shape):
            acc = None
            for red in np.ndindex(*red_shape):  # row-major: the innermost axis fastest
                v = x[(p, *kept, *red)]
                if bitwise:
                    acc = int(v) if acc is None else refalu.bitop(op, acc, int(v))
                else:
                    acc = v if acc is None else refalu.op(op, acc, v)
            if instr["negate"]:
                acc = refalu.op("multiply", acc, np.float32(-1))
            out.append(acc)
    if bitwise:
        return {"dst": alu.from_bits(np.array(out, np.uint32), dst.dtype).reshape(dst.shape)}
    return {"dst": _ref_out(out, dst)}


@reference("tensor_tensor_scan")
def tensor_tensor_scan_ref(instr, inputs, state):
    dst, op0, op1 = instr["dst"], instr["op0"], instr["op1"]
    parts = dst.partitions
    a, b = _ref_rows(instr, inputs, "data0"), _ref_rows(instr, inputs, "data1")
    init = _ref_column(instr, inputs, "initial", parts)
    out = []
    for p in range(parts):
        r = init[p]  # res[p, -1]
        for i in range(a.shape[1]):
            t = refalu.op(op0, r, a[p, i]) if instr["reverse0"] else refalu.op(op0, a[p, i], r)
            r = refalu.op(op1, b[p, i], t) if instr["reverse1"] else refalu.op(op1, t, b[p, i])
            out.append(r)
    return {"dst": _ref_out(out, dst)}


@reference("tensor_copy")
def tensor_copy_ref(instr, inputs, state):
    dst, src = instr["dst"], instr["src"]
    raw = inputs["src"].reshape(-1)
    if src.dtype == dst.dtype and instr.engine != "scalar":
        return {"dst": raw.copy().reshape(dst.shape)}
    return {"dst": _ref_out(list(to_f32(raw, src.dtype)), dst)}


def _ref_const(value, dtype) -> np.ndarray:
    """memset's conversion, one value: integers into integer dtypes exactly (clamped), else via fp32."""
    if isinstance(value, int) and dtype.is_int:
        if dtype.kind == "bool":
            return np.array([1 if value != 0 else 0], np.uint8)
        info = np.iinfo(dtype.storage)
        if value > info.max:
            value = info.max
        elif value < info.min:
            value = info.min
        return np.array([value], dtype.storage)
    return from_f32(np.array([float(value)], np.float32), dtype)


@reference("tensor_copy_predicated")
def tensor_copy_predicated_ref(instr, inputs, state):
    dst, src = instr["dst"], instr["src"]
    old = inputs["dst"].reshape(-1)
    pred = inputs["predicate"].reshape(-1)
    if isinstance(src, Immediate):
        new = np.repeat(_ref_const(src.value, dst.dtype), old.size)
    else:
        new = inputs["src"].reshape(-1)
    out = old.copy()
    for i in range(old.size):
        holds = int(pred[i]) != 0
        if holds != instr["reverse_pred"]:
            out[i] = new[i]
    return {"dst": out.reshape(dst.shape)}


@reference("memset")
def memset_ref(instr, inputs, state):
    dst = instr["dst"]
    value = _ref_const(instr["value"].value, dst.dtype)[0]
    out = np.empty(dst.num_elements, dst.dtype.storage)
    for i in range(out.size):
        out[i] = value
    return {"dst": out.reshape(dst.shape)}
