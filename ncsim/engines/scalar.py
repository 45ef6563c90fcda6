"""Scalar engine (ACT) instructions: activation and activation_reduce (see ncsim/engines/__init__.py
for the execute/reference contract).

    x   = data * scale            one fp32 multiply (scale: a constant or a [P, 1] fp32 column)
    x   = x + bias                one fp32 add, only when a bias column is given
    out = op(x)                   evaluated in float64 from the fp32 x, rounded once to fp32

The functions are the formulas of isa.ACTIVATION_FUNCS, evaluated in float64 in the order they are
written, with these rules: a NaN in gives NaN out (stored as the canonical quiet NaN 0x7FC00000);
outside a function's domain the result is NaN (log, sqrt, rsqrt of a negative number, sin of an
infinity); 1/±0 is ±inf and log(±0) is -inf; where a formula would multiply an infinite x by 0 (gelu,
gelu_dx, gelu_apprx_tanh, silu, silu_dx, mish at x = ±inf) the result is what the formula gives for
large finite x of that sign (+inf or 1 at +inf, -0 or +0 at -inf); sign(±0) is +0.

The engine keeps one fp32 accumulator register per lane (partition), `reduce_regs` in the engine
state, indexed by absolute partition number. They hold NaN until something resets them, like memory
nothing wrote. With reduce_cmd reset or reset_reduce a lane's register becomes +0; with reduce or
reset_reduce it then adds that lane's results one at a time, left to right over the flattened free
axes, each addition in fp32 (the results before they are narrowed to dst's dtype). reduce_res, when
given, receives the registers of the instruction's lanes after that.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from ncsim import isa
from ncsim.engines import alu, refalu, reference, semantics
from ncsim.engines.context import DST, Context
from ncsim.memory.access import Immediate
from ncsim.numerics import from_f32, to_f32

REGS = "reduce_regs"  # the key of the accumulator registers in the Scalar engine's state

# The kernel's function codes. Kept here rather than taken from the table's order so that numba's
# cache (keyed on this file) never holds a kernel compiled for another order; the check below keeps
# the two lists in step.
FUNCS = ("copy", "square", "sigmoid", "relu", "gelu", "gelu_dx", "gelu_apprx_tanh", "silu", "silu_dx", "tanh",
         "softplus", "mish", "erf", "erf_dx", "exp", "log", "sin", "arctan", "sqrt", "rsqrt", "reciprocal", "sign",
         "abs")
assert sorted(FUNCS) == sorted(f for f, _ in isa.ACTIVATION_FUNCS), "scalar.FUNCS and isa.ACTIVATION_FUNCS differ"
CODES = {name: i for i, name in enumerate(FUNCS)}
(COPY, SQUARE, SIGMOID, RELU, GELU, GELU_DX, GELU_TANH, SILU, SILU_DX, TANH, SOFTPLUS, MISH, ERF, ERF_DX, EXP, LOG,
 SIN, ARCTAN, SQRT, RSQRT, RECIPROCAL, SIGN, ABS) = range(len(FUNCS))

SQRT2 = math.sqrt(2.0)
SQRT_2PI = math.sqrt(2.0 * math.pi)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
GELU_CUBIC = 0.044715


# ------------------------------------------------------------------ compiled: one float64 value at a time
@numba.njit(cache=True, error_model="numpy")
def _softplus(x: float) -> float:
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


@numba.njit(cache=True, error_model="numpy")
def act64(code: int, x: float) -> float:
    """Activation `code` of the float64 value x (exactly an fp32 value), in float64."""
    if math.isnan(x):
        return x
    if math.isinf(x):
        if code == GELU or code == GELU_TANH or code == SILU or code == MISH:
            return x if x > 0 else -0.0
        if code == GELU_DX or code == SILU_DX:
            return 1.0 if x > 0 else 0.0
    if code == COPY:
        return x
    if code == SQUARE:
        return x * x
    if code == SIGMOID:
        return 1.0 / (1.0 + math.exp(-x))
    if code == RELU:
        return x if x > 0 else 0.0
    if code == GELU:
        return x * (1.0 + math.erf(x / SQRT2)) / 2.0
    if code == GELU_DX:
        return (1.0 + math.erf(x / SQRT2)) / 2.0 + x * math.exp(-(x * x) / 2.0) / SQRT_2PI
    if code == GELU_TANH:
        return x * (1.0 + math.tanh(SQRT_2_OVER_PI * (x + GELU_CUBIC * (x * x * x)))) / 2.0
    if code == SILU:
        return x / (1.0 + math.exp(-x))
    if code == SILU_DX:
        s = 1.0 / (1.0 + math.exp(-x))
        return s + x * s * (1.0 - s)
    if code == TANH:
        return math.tanh(x)
    if code == SOFTPLUS:
        return _softplus(x)
    if code == MISH:
        return x * math.tanh(_softplus(x))
    if code == ERF:
        return math.erf(x)
    if code == ERF_DX:
        return TWO_OVER_SQRT_PI * math.exp(-(x * x))
    if code == EXP:
        return math.exp(x)
    if code == LOG:
        if x < 0:
            return math.nan
        return -math.inf if x == 0 else math.log(x)
    if code == SIN:
        return math.nan if math.isinf(x) else math.sin(x)
    if code == ARCTAN:
        return math.atan(x)
    if code == SQRT:
        return math.nan if x < 0 else math.sqrt(x)
    if code == RSQRT:
        if x < 0:
            return math.nan
        return 1.0 / math.sqrt(x)
    if code == RECIPROCAL:
        return 1.0 / x
    if code == SIGN:
        return 1.0 if x > 0 else (-1.0 if x < 0 else 0.0)
    return abs(x)  # ABS


@numba.njit(cache=True, error_model="numpy")
def activation_kernel(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, has_bias: bool, code: int) -> np.ndarray:
    """out[p, i] = fp32(act64(code, x[p, i] * scale[p] (+ bias[p]))), x float32 [P, F], scale and bias
    float32 [P]; NaN results canonical."""
    rows, n = x.shape
    out = np.empty((rows, n), np.float32)
    nan_bits = np.array([np.uint32(0x7FC00000)]).view(np.float32)[0]
    for p in range(rows):
        for i in range(n):
            v = x[p, i] * scale[p]
            if has_bias:
                v = v + bias[p]
            r = np.float32(act64(code, np.float64(v)))
            out[p, i] = nan_bits if np.isnan(r) else r
    return out


@numba.njit(cache=True, error_model="numpy")
def accumulate_rows(regs: np.ndarray, out: np.ndarray) -> np.ndarray:
    """regs[p] + out[p, 0] + out[p, 1] + ..., left to right in fp32 (regs float32 [P], out [P, F])."""
    rows, n = out.shape
    res = np.empty(rows, np.float32)
    for p in range(rows):
        acc = regs[p]
        for i in range(n):
            acc = acc + out[p, i]
        res[p] = acc
    return res


def _copy_or_relu(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, has_bias: bool, relu: bool) -> np.ndarray:
    """activation_kernel for copy and relu, vectorised (a third of its time on a 128 x 128 tile): the
    function of an fp32 value is that value (copy) or x if x > 0 else +0 (relu) exactly, so rounding
    its float64 once to fp32 changes nothing, and NaN stays NaN (made canonical)."""
    with np.errstate(all="ignore"):
        # x * 1 is x (a NaN's payload aside, and NaNs end canonical): skip the default scale
        v = x if not has_bias and np.all(scale == 1) else np.multiply(x, scale[:, None], dtype=np.float32)
        if has_bias:
            v = np.add(v, bias[:, None], dtype=np.float32)
        if relu:  # max(v, 0) keeps NaN; + 0 turns the -0 that max may give for v <= 0 into +0
            v = np.maximum(v, np.float32(0))
            np.add(v, np.float32(0), out=v)
    return alu.canonical(v)


def _copy_or_relu_into(ctx: Context, has_bias: bool) -> bool:
    """_copy_or_relu computed straight into dst's memory with the ALU's fp32 operators, where
    Context.fp32_into can: x * scale (x * 1 is x), + bias, and relu as IEEE maximum(v, +0), which is
    v for v > 0, +0 for -0 and below, NaN for NaN (all made canonical)."""
    scale = ctx["scale"]
    one = isinstance(scale, Immediate) and scale.value == 1  # x * 1 is x: no pass for it (NaNs end canonical)
    steps = [] if one else [("multiply", "data", "scale")]
    if has_bias:
        steps.append(("add", DST if steps else "data", "bias"))
    if ctx["op"] == "relu":
        steps.append(("maximum", DST if steps else "data", 0.0))
    if not steps:  # copy: x * 1 makes NaNs canonical
        steps.append(("multiply", "data", "scale"))
    return ctx.fp32_into("dst", steps, scalars=("scale", "bias"))


# ------------------------------------------------------------------ the instructions
def _activate(ctx: Context, reduce_cmd: str) -> None:
    p, _ = ctx.rows("dst", "data")  # rules column, activation-dtypes and reciprocal-bias held
    has_bias = ctx["bias"] is not None
    # copy and relu straight into dst's memory where the accumulators do not need the results
    if not (ctx["op"] in ("copy", "relu") and reduce_cmd in ("idle", "reset") and _copy_or_relu_into(ctx, has_bias)):
        scale = np.broadcast_to(ctx.scalar("scale", p).reshape(-1), (p,)).astype(np.float32)
        bias = ctx.scalar("bias", p).reshape(p) if has_bias else np.zeros(p, np.float32)
        if ctx["op"] in ("copy", "relu"):
            out = _copy_or_relu(ctx.read2d_view("data"), scale, bias, has_bias, ctx["op"] == "relu")
        else:
            out = activation_kernel(ctx.read2d("data"), scale, bias, has_bias, CODES[ctx["op"]])
        ctx.write("dst", out)
    lanes = slice(ctx.ap("data").partition, ctx.ap("data").partition + p)
    regs = ctx.state.get(REGS)
    regs = np.full(ctx.config.pmax, np.nan, np.float32) if regs is None else regs.copy()  # never in place
    if reduce_cmd in ("reset", "reset_reduce"):
        regs[lanes] = 0.0
    if reduce_cmd in ("reduce", "reset_reduce"):
        regs[lanes] = alu.canonical(accumulate_rows(regs[lanes], out))
    ctx.state[REGS] = regs
    if ctx["reduce_res"] is not None:
        ctx.write("reduce_res", regs[lanes].reshape(p, 1))


@semantics("activation")
def activation(ctx: Context) -> None:
    # activation dst, op, data, bias=none, scale=1.0, reduce_op=none, reduce_res=none, reduce_cmd=idle
    _activate(ctx, ctx["reduce_cmd"])


@semantics("activation_reduce")
def activation_reduce(ctx: Context) -> None:
    # activation_reduce dst, op, data, reduce_op, reduce_res, bias=none, scale=1.0
    _activate(ctx, "reset_reduce")


# ------------------------------------------------------------------ reference: plain Python, value by value
def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _div(a: float, b: float) -> float:
    if b == 0:
        return math.copysign(math.inf, a) * math.copysign(1.0, b) if a != 0 else math.nan
    return a / b


def _sigmoid(x: float) -> float:
    return _div(1.0, 1.0 + _exp(-x))


def _softplus_ref(x: float) -> float:
    return (x if x > 0 else 0.0) + math.log1p(_exp(-abs(x)))


def _limit_at_inf(name: str, x: float) -> float | None:
    """The value of the gelu/silu/mish families at ±inf (their formulas would multiply inf by 0)."""
    if not math.isinf(x):
        return None
    if name in ("gelu", "gelu_apprx_tanh", "silu", "mish"):
        return x if x > 0 else -0.0
    if name in ("gelu_dx", "silu_dx"):
        return 1.0 if x > 0 else 0.0
    return None


def act_ref(name: str, x: float) -> float:
    """Activation `name` of the float64 x, in float64, from isa.ACTIVATION_FUNCS' formulas."""
    if math.isnan(x):
        return x
    limit = _limit_at_inf(name, x)
    if limit is not None:
        return limit
    match name:
        case "copy":
            return x
        case "square":
            return x * x
        case "sigmoid":
            return _sigmoid(x)
        case "relu":
            return x if x > 0 else 0.0  # max(x, +0): relu(-0) is +0
        case "gelu":
            return x * (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0
        case "gelu_dx":
            return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0 + x * _exp(-(x * x) / 2.0) / math.sqrt(2.0 * math.pi)
        case "gelu_apprx_tanh":
            inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * (x * x * x))
            return x * (1.0 + math.tanh(inner)) / 2.0
        case "silu":
            return _div(x, 1.0 + _exp(-x))
        case "silu_dx":
            s = _sigmoid(x)
            return s + x * s * (1.0 - s)
        case "tanh":
            return math.tanh(x)
        case "softplus":
            return _softplus_ref(x)
        case "mish":
            return x * math.tanh(_softplus_ref(x))
        case "erf":
            return math.erf(x)
        case "erf_dx":
            return 2.0 / math.sqrt(math.pi) * _exp(-(x * x))
        case "exp":
            return _exp(x)
        case "log":
            return math.nan if x < 0 else (-math.inf if x == 0 else math.log(x))
        case "sin":
            return math.nan if math.isinf(x) else math.sin(x)
        case "arctan":
            return math.atan(x)
        case "sqrt":
            return math.nan if x < 0 else math.sqrt(x)
        case "rsqrt":
            return math.nan if x < 0 else _div(1.0, math.sqrt(x))
        case "reciprocal":
            return _div(1.0, x)
        case "sign":
            return 1.0 if x > 0 else -1.0 if x < 0 else 0.0
        case "abs":
            return abs(x)
    raise ValueError(name)


def _to_f32(x: float) -> np.float32:
    """float64 -> fp32, round to nearest even (past the range: inf); NaN -> the canonical NaN."""
    if math.isnan(x):
        return refalu.from_bits(refalu.CANONICAL_NAN)
    with np.errstate(over="ignore"):
        return np.float32(x)


def _activation_ref(instr, inputs, state, reduce_cmd: str):
    data, dst = instr["data"], instr["dst"]
    p, f = data.partitions, data.free_elements
    x = to_f32(inputs["data"], data.dtype).reshape(p, f)
    scale_op, bias_op = instr["scale"], instr["bias"]
    if isinstance(scale_op, Immediate):
        scale = [np.float32(scale_op.value)] * p
    else:
        scale = list(to_f32(inputs["scale"], scale_op.dtype).reshape(p))
    bias = None if bias_op is None else list(to_f32(inputs["bias"], bias_op.dtype).reshape(p))
    out = np.empty((p, f), np.float32)
    for i in range(p):
        for j in range(f):
            v = refalu.op("multiply", x[i, j], scale[i])
            if bias is not None:
                v = refalu.op("add", v, bias[i])
            out[i, j] = _to_f32(act_ref(instr["op"], float(v)))
    regs = state.get(REGS)
    regs = np.array([], np.float32) if regs is None else np.array(regs, np.float32)
    first = data.partition
    if regs.size < first + p:
        regs = np.concatenate([regs, np.full(first + p - regs.size, np.nan, np.float32)])
    for i in range(p):
        if reduce_cmd in ("reset", "reset_reduce"):
            regs[first + i] = np.float32(0.0)
        if reduce_cmd in ("reduce", "reset_reduce"):
            acc = regs[first + i]
            for j in range(f):
                acc = refalu.op("add", acc, out[i, j])
            regs[first + i] = acc
    state[REGS] = regs
    result = {"dst": from_f32(out, dst.dtype).reshape(dst.shape)}
    res = instr["reduce_res"]
    if res is not None:
        result["reduce_res"] = from_f32(regs[first:first + p].copy(), res.dtype).reshape(res.shape)
    return result


@reference("activation")
def activation_ref(instr, inputs, state):
    return _activation_ref(instr, inputs, state, instr["reduce_cmd"])


@reference("activation_reduce")
def activation_reduce_ref(instr, inputs, state):
    return _activation_ref(instr, inputs, state, "reset_reduce")
