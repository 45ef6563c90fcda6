"""Vector engine (DVE) instructions, and those Vector shares with GpSimd and Scalar.

Each instruction: an `execute(ctx)` over whole tiles (numpy, numba for sequential loops) and a
plain `reference` computed element by element from the definition (`ncsim.engines.refalu`).
"""

from __future__ import annotations

import numpy as np

from ncsim import isa
from ncsim.asm.rules import tensor_scalar_operators
from ncsim.engines import alu, refalu, reference, semantics
from ncsim.engines.context import Context
from ncsim.memory.access import AccessPattern, Immediate
from ncsim.numerics import from_f32, to_f32

WRAP_INT_OPS = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply}


def _int32_wrap(ctx: Context, *names: str) -> bool:
    """GpSimd's 32-bit integer add/subtract/multiply: all operands 32-bit integers -> wrap modulo 2**32."""
    return (ctx.engine == "gpsimd" and ctx["op"] in WRAP_INT_OPS
            and all(ctx.ap(n).dtype.short in ("i32", "u32") for n in names))


@semantics("tensor_tensor")
def tensor_tensor(ctx: Context) -> None:
    op = ctx["op"]
    p, f = ctx.rows("dst", "data1", "data2")
    if alu.IS_BITVEC[op]:
        a, b = (ctx.read_bits(n).reshape(p, f) for n in ("data1", "data2"))
        ctx.write_bits("dst", alu.bitvec(op, a, b))
    elif _int32_wrap(ctx, "dst", "data1", "data2"):
        a, b = (ctx.read_raw(n).reshape(p, f).astype(np.int64) for n in ("data1", "data2"))
        ctx.write_bits("dst", (WRAP_INT_OPS[op](a, b) & 0xFFFFFFFF).astype(np.uint32))
    else:
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
    if instr.engine == "gpsimd" and op in WRAP_INT_OPS and all(
            x.dtype.short in ("i32", "u32") for x in (d1, d2, dst)):
        py = {"add": lambda x, y: x + y, "subtract": lambda x, y: x - y, "multiply": lambda x, y: x * y}[op]
        out = np.array([py(int(x), int(y)) & 0xFFFFFFFF for x, y in zip(a_raw, b_raw)], np.uint32)
        return {"dst": out.view(dst.dtype.storage).reshape(dst.shape)}
    a, b = to_f32(a_raw, d1.dtype), to_f32(b_raw, d2.dtype)
    out = np.array([refalu.op(op, x, y) for x, y in zip(a, b)], np.float32)
    return {"dst": from_f32(out, dst.dtype).reshape(dst.shape)}


# ---------------------------------------------------------------------------------- shared helpers
REDUCE_OPS = ("add", "subtract", "multiply", "maximum", "minimum")  # NKI tensor_scalar_reduce's reduce_op


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


def _need_int(ctx: Context, op: str, *names: str) -> None:
    """NKI: a bitwise operator takes integer tiles (their bits, no casting)."""
    for name in names:
        v = ctx[name]
        if isinstance(v, AccessPattern) and not v.dtype.is_int:
            raise ctx.fail(f"bitwise operator {op} needs integer tiles; '{name}' is {v.dtype}")


def _scalar_bits(ctx: Context, name: str, partitions: int) -> np.ndarray:
    """A constant-or-column operand as uint32 patterns, broadcastable against [partitions, ...]."""
    v = ctx[name]
    if isinstance(v, Immediate):
        if not float(v.value).is_integer():
            raise ctx.fail(f"bitwise operators take integer constants; '{name}' is {v.value}")
        return ctx.read_bits(name)
    ap = ctx.ap(name)
    ctx.check_column(name, ap, partitions)
    return ctx.read_bits(ap).reshape(partitions, 1)


def _check_operator_pair(ctx: Context) -> None:
    """tensor_scalar's operator rules (ncsim.asm.rules.tensor_scalar_operators, which the assembler
    checks too): here again for objects made elsewhere."""
    problem = tensor_scalar_operators(ctx.instr)
    if problem:
        raise ctx.fail(problem)


def _check_reduce_op(ctx: Context, op: str, allowed: tuple[str, ...], what: str) -> None:
    if op not in allowed:
        raise ctx.fail(f"{what} must be one of {', '.join(allowed)}, not {op}")


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
    _check_operator_pair(ctx)
    p, f = ctx.rows("dst", "data")
    steps = [(op0, "operand0", ctx["reverse0"])] + ([(op1, "operand1", ctx["reverse1"])] if op1 else [])
    if alu.IS_BITVEC[op0]:
        _need_int(ctx, op0, "dst", "data", "operand0", "operand1")
        x = ctx.read_bits("data").reshape(p, f)
        for op, name, rev in steps:
            x = _bits(op, x, _scalar_bits(ctx, name, p), rev)
        ctx.write_bits("dst", x)
    else:
        x = ctx.read2d_view("data")
        for op, name, rev in steps:
            x = _arith(op, x, ctx.scalar(name, p), rev)
        ctx.write("dst", x)


@semantics("tensor_scalar_reduce")
def tensor_scalar_reduce(ctx: Context) -> None:
    # tensor_scalar_reduce dst, data, op0, operand0, reduce_op, reduce_res, reverse0=false
    op0, reduce_op = ctx["op0"], ctx["reduce_op"]
    _check_reduce_op(ctx, op0, tuple(o for o in alu.CODES if not alu.IS_BITVEC[o]), "op0 (an arithmetic operator)")
    _check_reduce_op(ctx, reduce_op, REDUCE_OPS, "reduce_op")
    p = ctx.rows("dst", "data")[0]
    ctx.check_column("reduce_res", ctx.ap("reduce_res"), p)
    out = _arith(op0, ctx.read2d("data"), ctx.scalar("operand0", p), ctx["reverse0"])
    ctx.write("dst", out)
    ctx.write("reduce_res", alu.fold(reduce_op, out).reshape(p, 1))


@semantics("scalar_tensor_tensor")
def scalar_tensor_tensor(ctx: Context) -> None:
    # scalar_tensor_tensor dst, data, op0, operand0, op1, operand1, reverse0=false, reverse1=false
    op0, op1 = ctx["op0"], ctx["op1"]
    for name, op in (("op0", op0), ("op1", op1)):
        if alu.IS_BITVEC[op]:
            raise ctx.fail(f"{name} is the bitwise operator {op}; scalar_tensor_tensor takes arithmetic operators")
    p = ctx.rows("dst", "data", "operand1")[0]
    tmp = _arith(op0, ctx.read2d("data"), ctx.scalar("operand0", p), ctx["reverse0"])
    ctx.write("dst", _arith(op1, tmp, ctx.read2d("operand1"), ctx["reverse1"]))


@semantics("reciprocal")
def reciprocal(ctx: Context) -> None:
    # reciprocal dst, data
    ctx.rows("dst", "data")
    ctx.write("dst", alu.apply("reciprocal", ctx.read2d("data")))


# ---------------------------------------------------------------------------------- reductions, scans
def _reduce_axes(ctx: Context) -> tuple[int, int]:
    """tensor_reduce's axis list checked against data: (kept elements, reduced elements) per partition."""
    data = ctx.ap("data")
    axes, n = list(ctx["axis"]), len(data.dims)
    want = list(range(n - len(axes) + 1, n + 1))
    if len(axes) > n or sorted(axes) != want:
        hint = f"reducing {len(axes)} of them means axis={want}" if len(axes) <= n else f"it has only {n}"
        raise ctx.fail(f"axis {axes} must be distinct free axes ending at the innermost: 'data' is"
                       f" {list(data.shape)}, whose free axes are 1..{n}; {hint}")
    kept = int(np.prod(data.free_shape[:n - len(axes)], dtype=np.int64))
    return kept, data.free_elements // kept


@semantics("tensor_reduce")
def tensor_reduce(ctx: Context) -> None:
    # tensor_reduce dst, data, op, axis=[1], negate=false
    op, dst, data = ctx["op"], ctx.ap("dst"), ctx.ap("data")
    if not isa.alu_info(op)[3]:
        raise ctx.fail(f"{op} is not a reduction operator")
    kept, reduced = _reduce_axes(ctx)
    p = data.partitions
    if dst.partitions != p or dst.free_elements != kept:
        raise ctx.fail(f"'dst' is {list(dst.shape)} but reducing {list(data.shape)} over axis {list(ctx['axis'])}"
                       f" leaves [{p}, {kept}] ({p} partitions of {kept} element{'s' if kept != 1 else ''})")
    if alu.IS_BITVEC[op]:
        if ctx["negate"]:
            raise ctx.fail(f"negate applies to arithmetic reductions, not to the bitwise operator {op}")
        _need_int(ctx, op, "dst", "data")
        ctx.write_bits("dst", alu.fold(op, ctx.read_bits("data").reshape(p * kept, reduced)).reshape(p, kept))
        return
    r = alu.fold(op, ctx.read2d("data").reshape(p * kept, reduced))
    if ctx["negate"]:
        r = alu.apply("multiply", r, np.float32(-1))
    ctx.write("dst", r.reshape(p, kept))


@semantics("tensor_tensor_scan")
def tensor_tensor_scan(ctx: Context) -> None:
    # tensor_tensor_scan dst, data0, data1, initial, op0, op1, reverse0=false, reverse1=false
    for name in ("op0", "op1"):
        op = ctx[name]
        if alu.IS_BITVEC[op] or _is_unary(op):
            raise ctx.fail(f"{name} must be a binary arithmetic operator, not {op}")
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
    dst, pred, src = ctx.ap("dst"), ctx.ap("predicate"), ctx["src"]
    if pred.dtype.short not in ("u8", "u16", "u32", "bool"):
        raise ctx.fail(f"'predicate' must be a uint8, uint16 or uint32 tile, not {pred.dtype}")
    if isinstance(src, AccessPattern):
        if src.dtype != dst.dtype:
            raise ctx.fail(f"'src' ({src.dtype}) and 'dst' ({dst.dtype}) must have the same dtype")
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
