"""The Vector engine's elementwise, reduction, scan, copy and fill instructions: each against its plain
reference (random contents with edge values, every dtype, hypothesis over shapes and patterns),
hand-computed answers that pin the definitions, and the run-time errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ncsim import dtypes, isa
from ncsim.asm.rules import first_problem
from ncsim.errors import SimError
from ncsim.memory.access import Memory
from tests.engines.harness import DEFAULT, Layout, check, const, fill, make, run_one

FLOATS = ("f32", "bf16", "f16", "fp8e4", "fp8e5", "tf32")
INTS = ("u8", "u16", "u32", "i8", "i16", "i32", "bool")
ALL = FLOATS + INTS
# The arithmetic operators the Vector engine runs (isa.ALU_OPS' engines column; power and rsqrt are GpSimd's)
ARITH = [o[0] for o in isa.ALU_OPS if o[2] == "arith" and "vector" in o[5]]
ARITH_BINARY = [o[0] for o in isa.ALU_OPS if o[2] == "arith" and o[1] == 2 and "vector" in o[5]]
BITVEC = [o[0] for o in isa.ALU_OPS if o[2] == "bitvec"]
REDUCIBLE = [o[0] for o in isa.ALU_OPS if o[3]]
REDUCE_OPS = ["add", "subtract", "multiply", "maximum", "minimum"]
F32 = np.float32


def legal(instr) -> None:
    """Hypothesis: draw again if the instruction breaks a rule (32-bit integer add on Vector, ...)."""
    assume(first_problem(instr, DEFAULT) is None)


def f32(*values: float) -> np.ndarray:
    return np.array(values, F32)


def fails(instr, match: str, seed: int = 0, **given_values: np.ndarray) -> None:
    init = fill(instr, np.random.default_rng(seed), **given_values)
    with pytest.raises(SimError, match=match):
        run_one(instr, init)


def seq_fold(op, values):
    """An explicit left-to-right fold in fp32 (never numpy's pairwise reductions)."""
    acc = values[0]
    for v in values[1:]:
        acc = op(acc, v)
    return acc


# ---------------------------------------------------------------------------------- tensor_scalar
@pytest.mark.parametrize("op", ARITH)
@pytest.mark.parametrize("reverse", [False, True])
def test_tensor_scalar_every_arith_op_with_a_constant(op, reverse):
    lay = Layout()
    instr = make("tensor_scalar", dst=lay.tile("f32", 8, 16), data=lay.tile("f32", 8, 16), op0=op,
                 operand0=const(-0.75), reverse0=reverse)
    check(instr, np.random.default_rng(1), edges=0.3)


@pytest.mark.parametrize("op1", ARITH)
@pytest.mark.parametrize("reverse1", [False, True])
def test_tensor_scalar_two_ops_with_columns(op1, reverse1):
    lay = Layout()
    instr = make("tensor_scalar", dst=lay.tile("bf16", 16, 4, 5), data=lay.tile("f32", 16, 20), op0="subtract",
                 operand0=lay.tile("f32", 16, 1), reverse0=True, op1=op1, operand1=lay.tile("bf16", 16, 1),
                 reverse1=reverse1)
    check(instr, np.random.default_rng(2), edges=0.3)


@pytest.mark.parametrize("src_dt", ALL)
@pytest.mark.parametrize("dst_dt", ["f32", "bf16", "fp8e4", "i16", "u8"])
def test_tensor_scalar_dtypes(src_dt, dst_dt):
    lay = Layout()
    instr = make("tensor_scalar", dst=lay.tile(dst_dt, 32, 24, partition=32), data=lay.tile(src_dt, 32, 24,
                 partition=32), op0="multiply", operand0=lay.tile("f16", 32, 1, partition=32), op1="add",
                 operand1=const(1.5))
    check(instr, np.random.default_rng(3))


@pytest.mark.parametrize("op0", BITVEC)
@pytest.mark.parametrize("op1", [None, "bitwise_xor", "right_shift"])
@pytest.mark.parametrize("reverse", [False, True])
def test_tensor_scalar_bitvec(op0, op1, reverse):
    lay = Layout()
    instr = make("tensor_scalar", dst=lay.tile("i16", 8, 12), data=lay.tile("u32", 8, 12), op0=op0,
                 operand0=const(3, "i32"), reverse0=reverse, op1=op1,
                 operand1=lay.tile("i8", 8, 1) if op1 else None, reverse1=reverse)
    check(instr, np.random.default_rng(4))


def test_tensor_scalar_hand_computed():
    lay = Layout()
    # (10 - x) * column, reversed subtract
    instr = make("tensor_scalar", dst=lay.tile("f32", 2, 3), data=lay.tile("f32", 2, 3), op0="subtract",
                 operand0=const(10.0), reverse0=True, op1="multiply", operand1=lay.tile("f32", 2, 1))
    out = check(instr, np.random.default_rng(0), data=f32(1, 2, 3, -1, 0, 20).reshape(2, 3),
                operand1=f32(2, -0.5).reshape(2, 1))
    assert out["dst"].tolist() == [[18, 16, 14], [-5.5, -5, 5]]
    # giou.s: maximum with a constant; NaN propagates (canonical), -0 vs +0 per IEEE maximum
    instr = make("tensor_scalar", dst=lay.tile("f32", 1, 4), data=lay.tile("f32", 1, 4), op0="maximum",
                 operand0=const(1e-5))
    out = check(instr, np.random.default_rng(0), data=f32(0.0, 3.0, -2.0, math.nan).reshape(1, 4))
    assert out["dst"][0, :3].tolist() == [F32(1e-5), 3.0, F32(1e-5)]
    assert out["dst"][0].view(np.uint32)[3] == 0x7FC00000
    # each op rounds to fp32: 1e20 * 1e20 overflows before the second multiply could bring it back
    instr = make("tensor_scalar", dst=lay.tile("f32", 1, 1), data=lay.tile("f32", 1, 1), op0="multiply",
                 operand0=const(1e20), op1="multiply", operand1=const(1e-20))
    out = check(instr, np.random.default_rng(0), data=f32(1e20).reshape(1, 1))
    assert np.isinf(out["dst"][0, 0])
    # ... but the intermediate is not narrowed to dst's dtype: (1 + 2**-10) - 1 into bf16
    instr = make("tensor_scalar", dst=lay.tile("bf16", 1, 1), data=lay.tile("f32", 1, 1), op0="add",
                 operand0=const(2.0**-10), op1="subtract", operand1=const(1.0))
    out = check(instr, np.random.default_rng(0), data=f32(1.0).reshape(1, 1))
    assert out["dst"].astype(F32)[0, 0] == 2.0**-10
    # bitwise: (x & 0xF0) >> 4 on the integer bits
    instr = make("tensor_scalar", dst=lay.tile("u8", 1, 3), data=lay.tile("u8", 1, 3), op0="bitwise_and",
                 operand0=const(0xF0, "i32"), op1="right_shift", operand1=const(4, "i32"))
    out = check(instr, np.random.default_rng(0), data=np.array([[0xAB, 0x0F, 0xFF]], np.uint8))
    assert out["dst"].tolist() == [[0xA, 0x0, 0xF]]
    # a unary operator applies to the tile and ignores its operand and reverse flag
    instr = make("tensor_scalar", dst=lay.tile("f32", 1, 2), data=lay.tile("f32", 1, 2), op0="abs",
                 operand0=const(7.0), reverse0=True)
    out = check(instr, np.random.default_rng(0), data=f32(-2, 3).reshape(1, 2))
    assert out["dst"].tolist() == [[2, 3]]


def test_power_half_of_minus_inf_and_minus_zero():
    """pow, not sqrt: (-inf) ** 0.5 = +inf and (-0) ** 0.5 = +0 (numpy's power alone gives NaN and -0)."""
    lay = Layout()
    instr = make("tensor_scalar", engine="gpsimd", dst=lay.tile("f32", 1, 2), data=lay.tile("f32", 1, 2),
                 op0="power", operand0=const(0.5))
    out = check(instr, np.random.default_rng(0), data=f32(-np.inf, -0.0).reshape(1, 2))
    assert out["dst"].view(np.uint32).tolist() == [[0x7F800000, 0]]


def test_tensor_scalar_layernorm_step():
    """layernorm.s: (x - mean) * rstd with both operands [P, 1] columns, each op rounded to fp32."""
    rng = np.random.default_rng(5)
    lay = Layout()
    instr = make("tensor_scalar", dst=lay.tile("f32", 128, 64), data=lay.tile("f32", 128, 64), op0="subtract",
                 operand0=lay.tile("f32", 128, dims=((2, 1),)), op1="multiply", operand1=lay.tile("f32", 128, 1))
    x = rng.standard_normal((128, 64), dtype=F32)
    mean, rstd = rng.standard_normal((128, 1), dtype=F32), rng.random((128, 1), dtype=F32)
    out = check(instr, rng, data=x, operand0=mean, operand1=rstd)
    assert np.array_equal(out["dst"], (x - mean) * rstd)


@pytest.mark.parametrize("pair", [("rsqrt", None), ("reciprocal", "abs"), ("abs", None)])
def test_tensor_scalar_on_scalar_engine(pair):
    """NeuronCore-v2's Scalar engine runs the operators the ALU table gives it: abs, rsqrt, reciprocal."""
    lay = Layout()
    op0, op1 = pair
    instr = make("tensor_scalar", engine="scalar", dst=lay.tile("bf16", 8, 8), data=lay.tile("f32", 8, 8),
                 op0=op0, operand0=const(0.5), op1=op1, operand1=lay.tile("f32", 8, 1) if op1 else None)
    check(instr, np.random.default_rng(6), edges=0.2)


@pytest.mark.parametrize("pair", [("multiply", "add"), ("multiply", None), ("add", None)])
def test_tensor_scalar_add_multiply_on_scalar_is_v3(pair):
    """nki.api.shared: add and multiply run on the Scalar engine only from NeuronCore-v3 (the pairs nki.isa
    lists for Scalar's tensor_scalar are trn2's): refused on v2, naming the engines that do run them."""
    lay = Layout()
    op0, op1 = pair
    instr = make("tensor_scalar", engine="scalar", dst=lay.tile("bf16", 8, 8), data=lay.tile("f32", 8, 8),
                 op0=op0, operand0=const(0.5), op1=op1, operand1=lay.tile("f32", 8, 1) if op1 else None)
    fails(instr, rf"op0={op0} does not run on the scalar engine of NeuronCore-v2 \(the Scalar engine runs add and"
          rf" multiply from NeuronCore-v3 on\); {op0} runs on vector and gpsimd \(rule alu-engine\)")


def test_int32_add_on_vector_is_refused_and_exact_on_gpsimd():
    """32-bit integer add and multiply run only on GpSimd (nki.api.shared): on Vector, 16777217 + 0 would go
    through fp32 and come back 16777216. GpSimd adds the integers, modulo 2**32."""
    lay = Layout()
    data = np.array([[16777217, 2**31 - 1, -5]], np.int32)
    for engine in ("vector", "gpsimd"):
        instr = make("tensor_scalar", engine=engine, dst=lay.tile("i32", 1, 3), data=lay.tile("i32", 1, 3),
                     op0="add", operand0=const(0, "i32"), op1="multiply", operand1=const(3, "i32"))
        if engine == "vector":
            fails(instr, r"add of 32-bit integer tiles \('dst', 'data'\) runs only on the GpSimd engine.*"
                         r"\(rule int32-add-multiply\)", data=data)
            continue
        out = check(instr, np.random.default_rng(0), data=data)
        assert out["dst"].tolist() == [[16777217 * 3, (2**31 - 1) * 3 - 2**32, -15]]
    instr = make("tensor_tensor", dst=lay.tile("i32", 1, 3), data1=lay.tile("i32", 1, 3), data2=lay.tile("i32", 1, 3),
                 op="add")
    fails(instr, r"\(rule int32-add-multiply\)")
    fails(make("tensor_scalar", engine="gpsimd", dst=lay.tile("i32", 1, 3), data=lay.tile("i32", 1, 3), op0="add",
               operand0=const(0.5)), r"32-bit integer add takes integer constants; 'operand0' is 0.5")


def test_tensor_scalar_rsqrt_on_gpsimd():
    lay = Layout()
    instr = make("tensor_scalar", engine="gpsimd", dst=lay.tile("f32", 16, 8), data=lay.tile("f32", 16, 8),
                 op0="rsqrt", operand0=const(0.0))
    check(instr, np.random.default_rng(7), edges=0.3)


def test_tensor_scalar_errors():
    lay = Layout()
    d, s = lay.tile("f32", 4, 8), lay.tile("f32", 4, 8)
    fails(make("tensor_scalar", dst=d, data=s, op0="add", operand0=const(1.0), op1="multiply"),
          "op1 is given without operand1")
    fails(make("tensor_scalar", dst=d, data=s, op0="add", operand0=const(1.0), operand1=const(2.0)),
          "operand1 is given without op1")
    fails(make("tensor_scalar", dst=lay.tile("i32", 4, 8), data=lay.tile("i32", 4, 8), op0="bitwise_and",
               operand0=const(1, "i32"), op1="add", operand1=const(1.0)),
          r"op0 \(bitwise_and\) and op1 \(add\) must both be arithmetic or both bitwise")
    fails(make("tensor_scalar", dst=lay.tile("i32", 4, 8), data=s, op0="bitwise_or", operand0=const(1, "i32")),
          "bitwise operator bitwise_or needs integer tiles; 'data' is f32")
    fails(make("tensor_scalar", dst=lay.tile("i32", 4, 8), data=lay.tile("i32", 4, 8), op0="bitwise_or",
               operand0=const(1.5)), "integer constants; 'operand0' is 1.5")
    fails(make("tensor_scalar", dst=lay.tile("i32", 4, 8), data=lay.tile("i32", 4, 8), op0="bitwise_or",
               operand0=const(math.nan)), "integer constants; 'operand0' is nan")
    fails(make("tensor_scalar", engine="scalar", dst=d, data=s, op0="subtract", operand0=const(1.0)),
          r"op0=subtract does not run on the scalar engine of NeuronCore-v2; subtract runs on vector \(rule alu-engine\)")
    fails(make("tensor_scalar", dst=d, data=s, op0="add", operand0=lay.tile("f32", 4, 2)),
          r"'operand0' must be a \[4, 1\] column \(one value per partition\), not \[4, 2\]")
    fails(make("tensor_scalar", dst=lay.tile("f32", 4, 9), data=s, op0="add", operand0=const(1.0)),
          r"shapes disagree: 'dst' is \[4, 9\] and 'data' is \[4, 8\]")


# ---------------------------------------------------------------------------------- tensor_scalar_reduce
@pytest.mark.parametrize("reduce_op", ["add", "subtract", "multiply", "maximum", "minimum"])
@pytest.mark.parametrize("dtypes", [("f32", "f32", "f32"), ("bf16", "bf16", "f16"), ("fp8e5", "i8", "bf16")])
def test_tensor_scalar_reduce(reduce_op, dtypes):
    lay = Layout()
    src, dst, res = dtypes
    instr = make("tensor_scalar_reduce", dst=lay.tile(dst, 16, 2, 9), data=lay.tile(src, 16, 18), op0="multiply",
                 operand0=lay.tile("f32", 16, 1), reduce_op=reduce_op, reduce_res=lay.tile(res, 16, 1),
                 reverse0=True)
    check(instr, np.random.default_rng(10), edges=0.05)


def test_tensor_scalar_reduce_is_sequential_on_fp32_results():
    lay = Layout()
    instr = make("tensor_scalar_reduce", dst=lay.tile("bf16", 1, 4), data=lay.tile("f32", 1, 4), op0="add",
                 operand0=const(0.0), reduce_op="add", reduce_res=lay.tile("f32", 1, 1))
    x = f32(1e8, 1, -1e8, 1)
    out = check(instr, np.random.default_rng(0), data=x.reshape(1, 4))
    assert out["reduce_res"][0, 0] == seq_fold(lambda a, b: F32(a + b), list(x)) == 1.0  # pairwise gives 0
    # the sum is over the fp32 values, not the bf16 ones stored in dst
    instr = make("tensor_scalar_reduce", dst=lay.tile("bf16", 1, 2), data=lay.tile("f32", 1, 2), op0="add",
                 operand0=const(0.0), reduce_op="subtract", reduce_res=lay.tile("f32", 1, 1))
    out = check(instr, np.random.default_rng(0), data=f32(1.00390625, 1.0).reshape(1, 2))
    assert out["reduce_res"][0, 0] == F32(0.00390625)  # bf16 would round 1.00390625 to 1.0


def test_tensor_scalar_reduce_errors():
    lay = Layout()
    d, s = lay.tile("f32", 4, 8), lay.tile("f32", 4, 8)
    fails(make("tensor_scalar_reduce", dst=d, data=s, op0="add", operand0=const(1.0), reduce_op="logical_or",
               reduce_res=lay.tile("f32", 4, 1)),
          "reduce_op must be one of add, subtract, multiply, maximum, minimum, not logical_or")
    fails(make("tensor_scalar_reduce", dst=lay.tile("i32", 4, 8), data=lay.tile("i32", 4, 8), op0="bitwise_and",
               operand0=const(1, "i32"), reduce_op="add", reduce_res=lay.tile("f32", 4, 1)),
          r"op0 is the bitwise operator bitwise_and; tensor_scalar_reduce takes arithmetic operators")
    fails(make("tensor_scalar_reduce", dst=d, data=s, op0="add", operand0=const(1.0), reduce_op="add",
               reduce_res=lay.tile("f32", 4, 2)), r"'reduce_res' must be a \[4, 1\] column")


# ---------------------------------------------------------------------------------- scalar_tensor_tensor
@pytest.mark.parametrize("op0", ARITH)
@pytest.mark.parametrize("op1", ["add", "subtract", "multiply", "divide", "maximum", "greater", "abs"])
def test_scalar_tensor_tensor_ops(op0, op1):
    lay = Layout()
    instr = make("scalar_tensor_tensor", dst=lay.tile("f32", 8, 8), data=lay.tile("f32", 8, 8), op0=op0,
                 operand0=lay.tile("bf16", 8, 1), op1=op1, operand1=lay.tile("f32", 8, 8), reverse0=True,
                 reverse1=op1 in ("subtract", "divide"))
    check(instr, np.random.default_rng(11), edges=0.3)


@pytest.mark.parametrize("dt", ALL)
def test_scalar_tensor_tensor_dtypes(dt):
    lay = Layout()
    instr = make("scalar_tensor_tensor", dst=lay.tile(dt, 8, 16), data=lay.tile(dt, 8, 4, 4), op0="subtract",
                 operand0=const(0.25), op1="multiply", operand1=lay.tile("bf16", 8, 16, memory=Memory.PSUM))
    check(instr, np.random.default_rng(12))


def test_scalar_tensor_tensor_relu_backward():
    """relu.s: dx = (x > 0) * dy."""
    lay = Layout()
    instr = make("scalar_tensor_tensor", dst=lay.tile("f32", 1, 5), data=lay.tile("f32", 1, 5), op0="greater",
                 operand0=const(0.0), op1="multiply", operand1=lay.tile("f32", 1, 5))
    out = check(instr, np.random.default_rng(0), data=f32(-1, 0, 2, -0.0, 5).reshape(1, 5),
                operand1=f32(3, 4, 5, 6, -7).reshape(1, 5))
    assert out["dst"].tolist() == [[0, 0, 5, 0, -7]]
    # reversed: operand1 - (operand0 / data)
    instr = make("scalar_tensor_tensor", dst=lay.tile("f32", 1, 2), data=lay.tile("f32", 1, 2), op0="divide",
                 operand0=const(1.0), op1="subtract", operand1=lay.tile("f32", 1, 2), reverse0=True, reverse1=True)
    out = check(instr, np.random.default_rng(0), data=f32(4, 0.5).reshape(1, 2), operand1=f32(1, 1).reshape(1, 2))
    assert out["dst"].tolist() == [[0.75, -1]]


def test_scalar_tensor_tensor_errors():
    lay = Layout()
    fails(make("scalar_tensor_tensor", dst=lay.tile("i32", 2, 4), data=lay.tile("i32", 2, 4), op0="bitwise_and",
               operand0=const(1, "i32"), op1="add", operand1=lay.tile("i32", 2, 4)),
          "op0 is the bitwise operator bitwise_and; scalar_tensor_tensor takes arithmetic operators")
    fails(make("scalar_tensor_tensor", dst=lay.tile("f32", 2, 4), data=lay.tile("f32", 2, 4), op0="add",
               operand0=const(1.0), op1="add", operand1=lay.tile("f32", 2, 5)),
          r"'dst' is \[2, 4\] and 'operand1' is \[2, 5\]")


# ---------------------------------------------------------------------------------- tensor_reduce
@pytest.mark.parametrize("op", REDUCIBLE)
@pytest.mark.parametrize("negate", [False, True])
def test_tensor_reduce_every_op(op, negate):
    bitwise = op in BITVEC
    if bitwise and negate:
        pytest.skip("negate is for arithmetic reductions (tested as an error)")
    lay = Layout()
    src, dst = ("i16", "i32") if bitwise else ("f32", "bf16")
    instr = make("tensor_reduce", dst=lay.tile(dst, 8, 3), data=lay.tile(src, 8, 3, 2, 5), op=op, axis=(2, 3),
                 negate=negate)
    check(instr, np.random.default_rng(20), edges=0.2)


@pytest.mark.parametrize("free,axis,kept", [
    ((40,), (1,), 1), ((4, 10), (2,), 4), ((4, 10), (1, 2), 1), ((2, 3, 4), (3,), 6), ((2, 3, 4), (2, 3), 2),
    ((2, 3, 4, 5), (1, 2, 3, 4), 1), ((2, 3, 4, 5), (4, 3), 6)])
@pytest.mark.parametrize("dt", ["f32", "bf16", "fp8e4", "i16", "u8"])
def test_tensor_reduce_axes(free, axis, kept, dt):
    lay = Layout()
    instr = make("tensor_reduce", dst=lay.tile(dt, 16, kept), data=lay.tile(dt, 16, *free), op="add", axis=axis)
    check(instr, np.random.default_rng(21))


def test_tensor_reduce_hand_computed():
    lay = Layout()
    instr = make("tensor_reduce", dst=lay.tile("f32", 2, 1), data=lay.tile("f32", 2, 4), op="add", axis=(1,))
    x = f32(1e8, 1, -1e8, 1, 0.1, 0.2, 0.3, 0.4).reshape(2, 4)
    out = check(instr, np.random.default_rng(0), data=x)
    for p in range(2):
        assert out["dst"][p, 0] == seq_fold(lambda a, b: F32(a + b), list(x[p]))
    assert out["dst"][0, 0] == 1.0  # pairwise (1e8 + 1) + (-1e8 + 1) would give 0
    # subtract folds from the first element: x0 - x1 - x2 - x3
    instr = make("tensor_reduce", dst=lay.tile("f32", 1, 1), data=lay.tile("f32", 1, 4), op="subtract", axis=(1,))
    out = check(instr, np.random.default_rng(0), data=f32(10, 1, 2, 3).reshape(1, 4))
    assert out["dst"][0, 0] == 4.0
    # softmax.s: -(row maximum), with the -inf entries of a masked row
    instr = make("tensor_reduce", dst=lay.tile("f32", 2, 1), data=lay.tile("f32", 2, 3), op="maximum", negate=True, axis=(1,))
    out = check(instr, np.random.default_rng(0), data=f32(-np.inf, 2.5, -np.inf, -0.0, -0.0, -1).reshape(2, 3))
    assert out["dst"][:, 0].tolist() == [-2.5, 0.0]
    assert not np.signbit(out["dst"][1, 0])  # max of -0s is -0; negated: +0
    # the reduced axes are the innermost ones: [P, 2, 3] over axis 2 sums each row of 3
    instr = make("tensor_reduce", dst=lay.tile("i16", 1, 2), data=lay.tile("i16", 1, 2, 3), op="add", axis=(2,))
    out = check(instr, np.random.default_rng(0), data=np.arange(6, dtype=np.int16).reshape(1, 2, 3))
    assert out["dst"].tolist() == [[3, 12]]
    # bitwise reduction on the integer bits
    instr = make("tensor_reduce", dst=lay.tile("u16", 1, 1), data=lay.tile("u16", 1, 3), op="bitwise_or", axis=(1,))
    out = check(instr, np.random.default_rng(0), data=np.array([[0x0101, 0x1000, 0x8000]], np.uint16))
    assert out["dst"][0, 0] == 0x9101


def test_tensor_reduce_softmax_row_max():
    """softmax.s's tensor_reduce on a whole [128, 1024] tile equals -max per row, exactly."""
    rng = np.random.default_rng(22)
    lay = Layout()
    instr = make("tensor_reduce", dst=lay.tile("f32", 128, 1), data=lay.tile("f32", 128, 1024), op="maximum",
                 negate=True, axis=(1,))
    x = rng.standard_normal((128, 1024), dtype=F32) * F32(4)
    x[3, ::2] = -np.inf
    out = check(instr, rng, data=x)
    assert np.array_equal(out["dst"][:, 0], -np.max(x, axis=1))


def test_tensor_reduce_errors():
    lay = Layout()
    s = lay.tile("f32", 4, 3, 5)
    fails(make("tensor_reduce", dst=lay.tile("f32", 4, 5), data=s, op="add", axis=(1,)),
          r"axis \[1\] must be distinct free axes ending at the innermost: 'data' is \[4, 3, 5\], whose free"
          r" axes are 1..2; reducing 1 of them means axis=\[2\]")
    fails(make("tensor_reduce", dst=lay.tile("f32", 4, 1), data=s, op="add", axis=(2, 2)),
          r"axis \[2, 2\] must be distinct")
    fails(make("tensor_reduce", dst=lay.tile("f32", 4, 1), data=s, op="add", axis=(1, 2, 3)),
          "it has only 2")
    fails(make("tensor_reduce", dst=lay.tile("f32", 4, 5), data=s, op="add", axis=(2,)),
          r"'dst' is \[4, 5\] but reducing \[4, 3, 5\] over axis \[2\] leaves \[4, 3\]")
    fails(make("tensor_reduce", dst=lay.tile("i32", 4, 1), data=lay.tile("i32", 4, 8), op="bitwise_and",
               negate=True, axis=(1,)), "negate applies to arithmetic reductions, not to the bitwise operator bitwise_and")
    fails(make("tensor_reduce", dst=lay.tile("i32", 4, 1), data=lay.tile("f32", 4, 8), op="bitwise_xor", axis=(1,)),
          "bitwise_xor needs integer tiles; 'data' is f32")
    fails(make("tensor_reduce", dst=lay.tile("f32", 4, 1), data=lay.tile("f32", 4, 8), op="divide", axis=(1,)),
          "divide is not a reduction operator")


# ---------------------------------------------------------------------------------- tensor_tensor_scan
@pytest.mark.parametrize("op0", ARITH_BINARY)
@pytest.mark.parametrize("op1", ["add", "multiply", "maximum", "subtract"])
def test_tensor_tensor_scan_ops(op0, op1):
    lay = Layout()
    instr = make("tensor_tensor_scan", dst=lay.tile("f32", 8, 12), data0=lay.tile("f32", 8, 12),
                 data1=lay.tile("bf16", 8, 3, 4), initial=lay.tile("f32", 8, 1), op0=op0, op1=op1,
                 reverse0=op0 in ("subtract", "divide"), reverse1=op1 == "subtract")
    check(instr, np.random.default_rng(30), edges=0.1)


@pytest.mark.parametrize("dt", ALL)
@pytest.mark.parametrize("reverse", [(False, False), (True, False), (False, True), (True, True)])
def test_tensor_tensor_scan_dtypes(dt, reverse):
    lay = Layout()
    instr = make("tensor_tensor_scan", dst=lay.tile(dt, 4, 16), data0=lay.tile(dt, 4, 16),
                 data1=lay.tile("f32", 4, 16, memory=Memory.PSUM), initial=const(0.5), op0="multiply",
                 op1="subtract", reverse0=reverse[0], reverse1=reverse[1])
    check(instr, np.random.default_rng(31))


def test_tensor_tensor_scan_hand_computed():
    lay = Layout()
    # running sum: res[i] = (data0[i] + res[i-1]) * 1
    instr = make("tensor_tensor_scan", dst=lay.tile("f32", 2, 4), data0=lay.tile("f32", 2, 4),
                 data1=lay.tile("f32", 2, 4), initial=lay.tile("f32", 2, 1), op0="add", op1="multiply")
    out = check(instr, np.random.default_rng(0), data0=f32(1, 2, 3, 4, 1, 1, 1, 1).reshape(2, 4),
                data1=np.ones((2, 4), F32), initial=f32(0, 10).reshape(2, 1))
    assert out["dst"].tolist() == [[1, 3, 6, 10], [11, 12, 13, 14]]
    # decay recurrence h[i] = a[i] * h[i-1] + b[i], and reverse0: res[i-1] - data0[i]
    instr = make("tensor_tensor_scan", dst=lay.tile("f32", 1, 3), data0=lay.tile("f32", 1, 3),
                 data1=lay.tile("f32", 1, 3), initial=const(2.0), op0="multiply", op1="add")
    out = check(instr, np.random.default_rng(0), data0=f32(0.5, 0.5, 2).reshape(1, 3),
                data1=f32(1, 0, -1).reshape(1, 3))
    assert out["dst"].tolist() == [[2, 1, 1]]
    instr = make("tensor_tensor_scan", dst=lay.tile("f32", 1, 3), data0=lay.tile("f32", 1, 3),
                 data1=lay.tile("f32", 1, 3), initial=const(10.0), op0="subtract", op1="subtract",
                 reverse0=True, reverse1=True)
    out = check(instr, np.random.default_rng(0), data0=f32(1, 2, 3).reshape(1, 3), data1=f32(0, 0, 0).reshape(1, 3))
    assert out["dst"].tolist() == [[-9, 11, -8]]  # r = 0 - (r - a): -(10 - 1), -(-9 - 2), -(11 - 3)
    # the running value stays fp32 when dst is bf16: 1 + k * 2**-8 rounds (ties to even) to
    # 1, 1 + 2**-7, 1 + 2**-6, 1 + 2**-6; a bf16 running value would stay at 1 (1 + 2**-8 ties to 1)
    instr = make("tensor_tensor_scan", dst=lay.tile("bf16", 1, 4), data0=lay.tile("f32", 1, 4),
                 data1=lay.tile("f32", 1, 4), initial=const(1.0), op0="add", op1="add")
    out = check(instr, np.random.default_rng(0), data0=np.full((1, 4), 2.0**-8, F32), data1=np.zeros((1, 4), F32))
    assert out["dst"].astype(F32).tolist() == [[1.0, 1 + 2.0**-7, 1 + 2.0**-6, 1 + 2.0**-6]]


def test_tensor_tensor_scan_errors():
    lay = Layout()
    t = lay.tile("f32", 2, 4)
    fails(make("tensor_tensor_scan", dst=t, data0=lay.tile("f32", 2, 4), data1=lay.tile("f32", 2, 4),
               initial=const(0.0), op0="abs", op1="add"), "op0 must be a binary arithmetic operator, not abs")
    fails(make("tensor_tensor_scan", dst=lay.tile("i32", 2, 4), data0=lay.tile("i32", 2, 4),
               data1=lay.tile("i32", 2, 4), initial=const(0.0), op0="add", op1="bitwise_or"),
          "op1 is the bitwise operator bitwise_or; tensor_tensor_scan takes arithmetic operators")
    fails(make("tensor_tensor_scan", dst=t, data0=lay.tile("f32", 2, 4), data1=lay.tile("f32", 2, 3),
               initial=const(0.0), op0="add", op1="add"), r"'dst' is \[2, 4\] and 'data1' is \[2, 3\]")
    fails(make("tensor_tensor_scan", dst=t, data0=lay.tile("f32", 2, 4), data1=lay.tile("f32", 2, 4),
               initial=lay.tile("f32", 1, 1), op0="add", op1="add"), r"'initial' must be a \[2, 1\] column")


# ---------------------------------------------------------------------------------- tensor_copy
@pytest.mark.parametrize("src_dt", ALL)
@pytest.mark.parametrize("dst_dt", ALL)
def test_tensor_copy_dtypes(src_dt, dst_dt):
    lay = Layout()
    instr = make("tensor_copy", dst=lay.tile(dst_dt, 4, 6), src=lay.tile(src_dt, 4, 2, 3))
    check(instr, np.random.default_rng(40), edges=0.3)


@pytest.mark.parametrize("engine", ["vector", "gpsimd", "scalar"])
@pytest.mark.parametrize("dts", [("f32", "f32"), ("bf16", "bf16"), ("i32", "i32"), ("f32", "fp8e5"), ("u8", "f16")])
def test_tensor_copy_engines(engine, dts):
    lay = Layout()
    memory = Memory.SBUF if engine == "gpsimd" else Memory.PSUM
    instr = make("tensor_copy", engine=engine, dst=lay.tile(dts[1], 32, 16), src=lay.tile(dts[0], 32, 16,
                 memory=memory))
    check(instr, np.random.default_rng(41), edges=0.3)


def test_tensor_copy_hand_computed():
    lay = Layout()
    big = np.array([[16777217, -7]], np.int32)
    for engine, want in (("vector", [16777217, -7]), ("gpsimd", [16777217, -7]), ("scalar", [16777216, -7])):
        instr = make("tensor_copy", engine=engine, dst=lay.tile("i32", 1, 2), src=lay.tile("i32", 1, 2))
        assert check(instr, np.random.default_rng(0), src=big)["dst"].tolist() == [want]
    # a NaN's payload survives a same-dtype copy
    nan = np.array([[0x7F81, 0xFFC3]], np.uint16).view(dtypes.BFLOAT16.storage)
    instr = make("tensor_copy", dst=lay.tile("bf16", 1, 2), src=lay.tile("bf16", 1, 2))
    out = check(instr, np.random.default_rng(0), src=nan)
    assert out["dst"].view(np.uint16).tolist() == [[0x7F81, 0xFFC3]]
    # matmul.s: PSUM fp32 to SBUF; and narrowing rounds to nearest even, overflowing to inf
    instr = make("tensor_copy", dst=lay.tile("fp8e4", 1, 3), src=lay.tile("f32", 1, 3, memory=Memory.PSUM))
    out = check(instr, np.random.default_rng(0), src=f32(248, 247.99998, -0.0).reshape(1, 3))
    assert out["dst"].astype(F32).tolist() == [[np.inf, 240, -0.0]]


def test_tensor_copy_errors():
    lay = Layout()
    fails(make("tensor_copy", dst=lay.tile("f32", 4, 8), src=lay.tile("f32", 8, 4)),
          r"shapes disagree: 'dst' is \[4, 8\] and 'src' is \[8, 4\]")


# ---------------------------------------------------------------------------------- tensor_copy_predicated
@pytest.mark.parametrize("dt", ALL)
@pytest.mark.parametrize("pred_dt", ["u8", "u16", "u32", "bool"])
@pytest.mark.parametrize("reverse", [False, True])
def test_tensor_copy_predicated(dt, pred_dt, reverse):
    lay = Layout()
    instr = make("tensor_copy_predicated", dst=lay.tile(dt, 8, 10), src=lay.tile(dt, 8, 2, 5, memory=Memory.PSUM),
                 predicate=lay.tile(pred_dt, 8, 10), reverse_pred=reverse)
    check(instr, np.random.default_rng(50), edges=0.3)


@pytest.mark.parametrize("dt", ALL)
@pytest.mark.parametrize("value", [const(-2.5), const(300, "i32"), const(4294967295, "u32"), const(math.nan)])
def test_tensor_copy_predicated_constant(dt, value):
    lay = Layout()
    instr = make("tensor_copy_predicated", dst=lay.tile(dt, 8, 10), src=value, predicate=lay.tile("u16", 8, 10))
    check(instr, np.random.default_rng(51))


def test_tensor_copy_predicated_hand_computed():
    lay = Layout()
    instr = make("tensor_copy_predicated", dst=lay.tile("f32", 1, 4), src=lay.tile("f32", 1, 4),
                 predicate=lay.tile("u32", 1, 4))
    out = check(instr, np.random.default_rng(0), dst=f32(1, 2, 3, 4).reshape(1, 4),
                src=f32(9, 9, 9, 9).reshape(1, 4), predicate=np.array([[0, 1, 2**31, 0]], np.uint32))
    assert out["dst"].tolist() == [[1, 9, 9, 4]]
    instr = make("tensor_copy_predicated", dst=lay.tile("i8", 1, 3), src=const(-1000, "i32"),
                 predicate=lay.tile("u8", 1, 3), reverse_pred=True)
    out = check(instr, np.random.default_rng(0), dst=np.array([[5, 6, 7]], np.int8),
                predicate=np.array([[0, 1, 0]], np.uint8))
    assert out["dst"].tolist() == [[-128, 6, -128]]


def test_tensor_copy_predicated_errors():
    lay = Layout()
    fails(make("tensor_copy_predicated", dst=lay.tile("f32", 4, 8), src=lay.tile("f32", 4, 8),
               predicate=lay.tile("f32", 4, 8)), "'predicate' must be a uint8, uint16 or uint32 tile, not f32")
    fails(make("tensor_copy_predicated", dst=lay.tile("f32", 4, 8), src=lay.tile("bf16", 4, 8),
               predicate=lay.tile("u8", 4, 8)), r"'src' \(bf16\) and 'dst' \(f32\) must have the same dtype")
    fails(make("tensor_copy_predicated", dst=lay.tile("f32", 4, 8), src=const(1.0),
               predicate=lay.tile("u8", 4, 7)), r"'dst' is \[4, 8\] and 'predicate' is \[4, 7\]")


# ---------------------------------------------------------------------------------- memset
@pytest.mark.parametrize("dt", ALL)
@pytest.mark.parametrize("value", [const(0.0), const(-0.0), const(1e-5), const(-2.5), const(248.0), const(1e30),
                                   const(math.inf), const(math.nan), const(7, "i32"), const(-1, "i32"),
                                   const(16777217, "i32"), const(4294967295, "u32")])
def test_memset(dt, value):
    lay = Layout()
    check(make("memset", dst=lay.tile(dt, 8, dims=((3, 4), (1, 2))), value=value), np.random.default_rng(60))


@pytest.mark.parametrize("dt,value,want", [
    ("u8", const(300, "i32"), 255), ("u8", const(-1, "i32"), 0), ("i32", const(16777217, "i32"), 16777217),
    ("f32", const(16777217, "i32"), 16777216.0), ("i32", const(2.5), 2), ("i32", const(3.5), 4),
    ("u32", const(4294967295, "u32"), 4294967295), ("i32", const(4294967295, "u32"), 2147483647),
    ("bool", const(0.25), 1), ("bool", const(math.nan), 0), ("fp8e4", const(248.0), np.inf),
    ("bf16", const(1.00390625), 1.0), ("i16", const(math.nan), 0), ("i8", const(-math.inf), -128)])
def test_memset_hand_computed(dt, value, want):
    lay = Layout()
    out = check(make("memset", dst=lay.tile(dt, 2, 3), value=value), np.random.default_rng(0))["dst"]
    got = out.astype(np.float64) if out.dtype.kind not in "iub" else out.astype(np.int64)
    assert (got == want).all(), (got, want)


def test_memset_layernorm_eps():
    lay = Layout()
    out = check(make("memset", dst=lay.tile("f32", 128, 1), value=const(1e-5)), np.random.default_rng(0))["dst"]
    assert (out == F32(1e-5)).all()


# ---------------------------------------------------------------------------------- reciprocal
@pytest.mark.parametrize("src_dt", ALL)
@pytest.mark.parametrize("dst_dt", ["f32", "bf16", "f16", "i32"])
def test_reciprocal(src_dt, dst_dt):
    lay = Layout()
    check(make("reciprocal", dst=lay.tile(dst_dt, 16, 12), data=lay.tile(src_dt, 16, 3, 4)),
          np.random.default_rng(70), edges=0.3)


def test_reciprocal_hand_computed():
    lay = Layout()
    instr = make("reciprocal", dst=lay.tile("f32", 1, 6), data=lay.tile("f32", 1, 6))
    out = check(instr, np.random.default_rng(0), data=f32(0.0, -0.0, 3.0, np.inf, 1e-45, 4.0).reshape(1, 6))
    assert out["dst"].tolist()[0][:4] == [np.inf, -np.inf, F32(1) / F32(3), 0.0]
    assert np.isinf(out["dst"][0, 4]) and out["dst"][0, 5] == 0.25  # 1 / (smallest subnormal) overflows


def test_reciprocal_errors():
    lay = Layout()
    fails(make("reciprocal", dst=lay.tile("f32", 4, 8), data=lay.tile("f32", 4, 9)),
          r"shapes disagree: 'dst' is \[4, 8\] and 'data' is \[4, 9\]")


# ---------------------------------------------------------------------------------- hypothesis
PARTITION_SHAPES = st.sampled_from([(1, 0), (7, 0), (32, 32), (64, 64), (100, 0), (128, 0)])


@st.composite
def free_dims(draw, count: int, broadcast: bool) -> tuple[tuple[int, int], ...]:
    """An input pattern over `count` elements: row-major, reversed, strided or (inputs only) broadcast."""
    kind = draw(st.sampled_from(["rows", "reversed", "strided"] + (["broadcast"] if broadcast else [])))
    if kind == "rows":
        return ((1, count),)
    if kind == "reversed":
        return ((-1, count),)
    if kind == "strided":
        return ((draw(st.integers(2, 3)), count),)
    return ((0, count),)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(ALL), st.sampled_from(ALL), st.sampled_from(ARITH),
       st.sampled_from([None] + ARITH), st.booleans(), st.booleans(), st.booleans(), PARTITION_SHAPES,
       st.integers(1, 40), st.data())
def test_tensor_scalar_hypothesis(src_dt, dst_dt, op0, op1, rev0, rev1, column, parts, f, data):
    p, start = parts
    lay = Layout()
    constant = const(data.draw(st.sampled_from([0.5, -3.0, 0.0])))
    operand = lay.tile("f32", p, 1, partition=start) if column else constant
    instr = make("tensor_scalar", dst=lay.tile(dst_dt, p, f, partition=start),
                 data=lay.tile(src_dt, p, dims=data.draw(free_dims(f, True)), partition=start), op0=op0,
                 operand0=operand, reverse0=rev0, op1=op1, operand1=const(2.0) if op1 else None, reverse1=rev1)
    legal(instr)
    check(instr, np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))))


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(ALL), st.sampled_from(ALL), st.sampled_from(REDUCIBLE), st.booleans(),
       st.lists(st.integers(1, 6), min_size=1, max_size=4), st.integers(1, 4), st.integers(1, 64),
       st.integers(0, 2**32 - 1))
def test_tensor_reduce_hypothesis(src_dt, dst_dt, op, negate, free, k, p, seed):
    if op in BITVEC:
        negate = False
        src_dt = src_dt if src_dt in INTS else "i32"
        dst_dt = dst_dt if dst_dt in INTS else "u16"
    k = min(k, len(free))
    kept = int(np.prod(free[:len(free) - k]))
    lay = Layout()
    axis = tuple(range(len(free) - k + 1, len(free) + 1))
    instr = make("tensor_reduce", dst=lay.tile(dst_dt, p, kept), data=lay.tile(src_dt, p, *free), op=op,
                 axis=axis, negate=negate)
    legal(instr)
    check(instr, np.random.default_rng(seed))


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(ALL), st.sampled_from(ALL), st.sampled_from(ARITH_BINARY),
       st.sampled_from(ARITH_BINARY),
       st.booleans(), st.booleans(), st.integers(1, 128), st.integers(1, 50), st.booleans(), st.data())
def test_tensor_tensor_scan_hypothesis(dt0, dst_dt, op0, op1, rev0, rev1, p, f, column, data):
    lay = Layout()
    initial = lay.tile("bf16", p, 1) if column else const(1.0)
    instr = make("tensor_tensor_scan", dst=lay.tile(dst_dt, p, f), data0=lay.tile(dt0, p, dims=data.draw(
                 free_dims(f, True))), data1=lay.tile("f32", p, f), initial=initial, op0=op0, op1=op1,
                 reverse0=rev0, reverse1=rev1)
    legal(instr)
    check(instr, np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))))


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(ALL), st.sampled_from(ARITH), st.sampled_from(ARITH), st.booleans(),
       st.booleans(), st.integers(1, 128), st.integers(1, 40), st.data())
def test_scalar_tensor_tensor_hypothesis(dt, op0, op1, rev0, rev1, p, f, data):
    lay = Layout()
    instr = make("scalar_tensor_tensor", dst=lay.tile(dt, p, f), data=lay.tile(dt, p, dims=data.draw(
                 free_dims(f, True))), op0=op0, operand0=lay.tile("f32", p, 1), op1=op1,
                 operand1=lay.tile("bf16", p, dims=data.draw(free_dims(f, True))), reverse0=rev0, reverse1=rev1)
    legal(instr)
    check(instr, np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))))


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(ALL), st.sampled_from(ALL), st.sampled_from(["vector", "gpsimd", "scalar"]),
       st.integers(1, 128), st.integers(1, 40), st.data())
def test_tensor_copy_hypothesis(src_dt, dst_dt, engine, p, f, data):
    lay = Layout()
    instr = make("tensor_copy", engine=engine, dst=lay.tile(dst_dt, p, dims=data.draw(free_dims(f, False))),
                 src=lay.tile(src_dt, p, dims=data.draw(free_dims(f, True))))
    check(instr, np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))))


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(INTS), st.sampled_from(INTS), st.sampled_from(BITVEC), st.sampled_from([None] + BITVEC),
       st.booleans(), st.booleans(), st.integers(1, 128), st.integers(1, 40), st.data())
def test_tensor_scalar_bitvec_hypothesis(src_dt, dst_dt, op0, op1, rev0, rev1, p, f, data):
    lay = Layout()
    instr = make("tensor_scalar", dst=lay.tile(dst_dt, p, f), data=lay.tile(src_dt, p, dims=data.draw(
                 free_dims(f, True))), op0=op0, operand0=lay.tile(data.draw(st.sampled_from(INTS)), p, 1),
                 reverse0=rev0, op1=op1, operand1=const(data.draw(st.integers(-2**31, 2**31 - 1)), "i32") if op1
                 else None, reverse1=rev1)
    check(instr, np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))))


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(ALL), st.sampled_from(["u8", "u16", "u32", "bool"]), st.booleans(), st.booleans(),
       st.integers(1, 128), st.integers(1, 40), st.data())
def test_tensor_copy_predicated_hypothesis(dt, pred_dt, reverse, constant, p, f, data):
    lay = Layout()
    src = const(-1.5) if constant else lay.tile(dt, p, dims=data.draw(free_dims(f, True)))
    instr = make("tensor_copy_predicated", dst=lay.tile(dt, p, f), src=src,
                 predicate=lay.tile(pred_dt, p, dims=data.draw(free_dims(f, True))), reverse_pred=reverse)
    check(instr, np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))))


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(ALL), st.sampled_from(ALL), st.sampled_from(ARITH), st.sampled_from(REDUCE_OPS),
       st.booleans(), st.integers(1, 128), st.integers(1, 40), st.data())
def test_tensor_scalar_reduce_hypothesis(src_dt, dst_dt, op0, reduce_op, reverse, p, f, data):
    lay = Layout()
    instr = make("tensor_scalar_reduce", dst=lay.tile(dst_dt, p, f), data=lay.tile(src_dt, p, dims=data.draw(
                 free_dims(f, True))), op0=op0, operand0=const(0.5), reduce_op=reduce_op,
                 reduce_res=lay.tile(data.draw(st.sampled_from(ALL)), p, 1), reverse0=reverse)
    legal(instr)
    check(instr, np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))))
