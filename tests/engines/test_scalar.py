"""activation and activation_reduce against their references, the activation functions' values at
known and edge points, the accumulator registers across instructions, and the run-time errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ncsim import isa
from ncsim.asm.instruction import Instruction, encode
from ncsim.asm.objfile import LineEntry, ObjectFile
from ncsim.engines import scalar
from ncsim.errors import SimError
from ncsim.memory.access import Memory
from ncsim.runtime.machine import Machine
from tests.engines.harness import DEFAULT, Layout, check, const, fill, make, reference_of, run_one

FUNCS = [f for f, _ in isa.ACTIVATION_FUNCS]
FLOATS = ("f32", "bf16", "f16", "fp8e4", "fp8e5", "tf32")
INTS = ("u8", "i8", "i16", "u16", "i32", "u32")
CMDS = ("idle", "reset", "reduce", "reset_reduce")
NAN_BITS = 0x7FC00000
REGS = scalar.REGS


def f32(*values) -> np.ndarray:
    return np.array(values, np.float32)


def bits(a) -> list:
    return np.asarray(a, np.float32).view(np.uint32).tolist()


def act(lay: Layout, op: str, p: int = 4, f: int = 8, dt: str = "f32", out: str = "f32", **kw) -> Instruction:
    return make("activation", dst=lay.tile(out, p, f), data=lay.tile(dt, p, f), op=op, **kw)


def one_row(op: str, values, **kw) -> np.ndarray:
    """activation `op` of a single partition holding `values` (f32 in and out): the stored results,
    checked against the reference too."""
    values = f32(*values)
    lay = Layout()
    instr = act(lay, op, 1, values.size, **kw)
    return check(instr, np.random.default_rng(0), data=values.reshape(1, -1))["dst"][0]


def run_stream(instrs: list[Instruction], init: dict) -> Machine:
    """Several Scalar instructions in order on one machine (tiles hold `init`: pattern -> values)."""
    obj = ObjectFile(kernel="stream")
    obj.streams["scalar"] = b"".join(encode(i) for i in instrs)
    obj.lines["scalar"] = [LineEntry(k, 0, k + 1, 1) for k in range(len(instrs))]
    obj.files = ["<test>"]
    m = Machine(obj, DEFAULT, "<test>")
    for ap, raw in init.items():
        m.mem.write(ap, np.asarray(raw, ap.dtype.storage).reshape(ap.shape))
    m.run()
    return m


def fails(instr: Instruction, *fragments: str) -> None:
    with pytest.raises(SimError) as e:
        run_one(instr, fill(instr, np.random.default_rng(0)))
    for f in fragments:
        assert f in str(e.value), (f, str(e.value))


# ------------------------------------------------------------------ against the reference
def test_the_kernel_knows_every_function_of_the_table():
    assert sorted(scalar.FUNCS) == sorted(FUNCS)


@pytest.mark.parametrize("op", FUNCS)
def test_every_function_with_edge_values(op):
    lay = Layout()
    check(act(lay, op, 8, 64), np.random.default_rng(1), edges=0.3)


@pytest.mark.parametrize("op", FUNCS)
def test_every_function_with_scale_and_bias_columns(op):
    lay = Layout()
    bias = None if op == "reciprocal" else lay.tile("f32", 16, 1)  # v2's reciprocal takes no bias (rule reciprocal-bias)
    instr = act(lay, op, 16, 24, "bf16", "f32", bias=bias, scale=lay.tile("f32", 16, 1))
    check(instr, np.random.default_rng(2), edges=0.1)


@pytest.mark.parametrize("dt", FLOATS + INTS)
@pytest.mark.parametrize("out", ["f32", "bf16", "fp8e4", "i16"])
def test_dtypes_in_and_out(dt, out):
    lay = Layout()
    check(act(lay, "gelu", 8, 16, dt, out, bias=lay.tile("bf16", 8, 1), scale=const(0.5)), np.random.default_rng(3))


@pytest.mark.parametrize("cmd", CMDS)
@pytest.mark.parametrize("with_res", [False, True])
def test_reduce_commands_against_the_reference(cmd, with_res):
    lay = Layout()
    res = lay.tile("f32", 32, 1, partition=32) if with_res else None
    instr = make("activation", dst=lay.tile("f32", 32, 40, partition=32), data=lay.tile("bf16", 32, 40, partition=32),
                 op="exp", reduce_cmd=cmd, reduce_res=res)
    regs = np.random.default_rng(4).standard_normal(DEFAULT.pmax).astype(np.float32)
    check(instr, np.random.default_rng(5), state={REGS: regs})


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(FUNCS), st.sampled_from(FLOATS + INTS), st.sampled_from(FLOATS + INTS),
       st.sampled_from([(0, 128), (0, 64), (64, 64), (32, 32), (96, 32), (0, 1)]), st.integers(1, 20),
       st.sampled_from(["const", "column"]), st.booleans(), st.sampled_from(CMDS), st.booleans(),
       st.integers(0, 2**32 - 1))
def test_activation_shapes_dtypes_and_commands(op, dt, out, part, f, scale_kind, with_bias, cmd, with_res, seed):
    start, p = part
    lay = Layout()
    rng = np.random.default_rng(seed)
    scale = const(float(np.float32(rng.standard_normal()))) if scale_kind == "const" else lay.tile(
        "f32", p, 1, partition=start)
    instr = make("activation", dst=lay.tile(out, p, f, partition=start), data=lay.tile(dt, p, f, partition=start),
                 op=op, scale=scale, bias=lay.tile("f16", p, 1, partition=start) if with_bias and op != "reciprocal"
                 else None,
                 reduce_cmd=cmd, reduce_res=lay.tile("f32", p, 1, partition=start) if with_res else None)
    state = {REGS: rng.standard_normal(DEFAULT.pmax).astype(np.float32)} if rng.random() < 0.7 else None
    check(instr, rng, state=state)


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(FUNCS), st.sampled_from(FLOATS), st.sampled_from(FLOATS + INTS), st.integers(1, 128),
       st.integers(1, 30), st.integers(0, 2**32 - 1))
def test_activation_reduce_shapes_and_dtypes(op, dt, out, p, f, seed):
    lay = Layout()
    instr = make("activation_reduce", dst=lay.tile(out, p, f), data=lay.tile(dt, p, f), op=op,
                 reduce_res=lay.tile("f32", p, 1), bias=None if op == "reciprocal" else lay.tile("f32", p, 1),
                 reduce_op="add")
    check(instr, np.random.default_rng(seed))


def test_reciprocal_activation_takes_no_bias():
    """nki.api.shared: activation(op=nl.reciprocal) doesn't support setting bias on NeuronCore-v2."""
    lay = Layout()
    fails(act(lay, "reciprocal", bias=lay.tile("f32", 4, 1)), "the reciprocal activation takes no bias on"
          " NeuronCore-v2", "(rule reciprocal-bias)")
    check(act(lay, "reciprocal", scale=const(2.0)), np.random.default_rng(0))


def test_activation_reduce_strided_multi_axis_from_psum():
    lay = Layout()
    instr = make("activation_reduce", dst=lay.tile("bf16", 64, 4, 6, memory=Memory.PSUM),
                 data=lay.tile("f32", 64, dims=((-1, 4), (8, 6)), partition=64), op="silu",
                 reduce_res=lay.tile("f32", 64, 1, partition=64), scale=lay.tile("f32", 64, 1, partition=64),
                 reduce_op="add")
    check(instr, np.random.default_rng(6), edges=0.2)


# ------------------------------------------------------------------ known answers
def test_known_function_values():
    assert one_row("copy", [1.5, -0.0]).tolist() == [1.5, -0.0]
    assert bits(one_row("relu", [-0.0, -2, 3])) == bits(f32(0.0, 0.0, 3))  # relu(-0) is +0
    assert one_row("square", [3, -0.5]).tolist() == [9, 0.25]
    assert one_row("sigmoid", [0, -1000, 1000]).tolist() == [0.5, 0.0, 1.0]
    assert one_row("exp", [0, 1, 89, -np.inf]).tolist() == [1.0, np.float32(math.e), np.inf, 0.0]  # e**89 > fp32 max
    assert one_row("log", [1, 0, -0.0, np.inf]).tolist() == [0.0, -np.inf, -np.inf, np.inf]
    assert bits(one_row("log", [-1])) == [NAN_BITS]
    assert one_row("sqrt", [4, 2]).tolist() == [2.0, np.float32(math.sqrt(2))]
    assert bits(one_row("sqrt", [-0.0, -4])) == [0x80000000, NAN_BITS]
    assert one_row("rsqrt", [4, 0, -0.0, np.inf]).tolist() == [0.5, np.inf, -np.inf, 0.0]
    assert one_row("reciprocal", [4, -0.0, 3]).tolist() == [0.25, -np.inf, np.float32(1 / 3)]
    assert bits(one_row("sign", [-3, -0.0, 0.0, 2])) == bits(f32(-1, 0, 0, 1))  # sign(±0) is +0
    assert bits(one_row("abs", [-0.0, -2])) == bits(f32(0.0, 2))
    assert one_row("erf", [0, np.inf, -np.inf, 1]).tolist() == [0.0, 1.0, -1.0, np.float32(math.erf(1))]
    assert one_row("arctan", [np.inf]).tolist() == [np.float32(math.pi / 2)]
    assert bits(one_row("sin", [np.inf])) == [NAN_BITS]
    assert one_row("tanh", [np.inf, -np.inf]).tolist() == [1.0, -1.0]
    assert one_row("gelu", [0, 1]).tolist() == [0.0, np.float32(0.5 * (1 + math.erf(1 / math.sqrt(2))))]


def test_infinite_inputs_give_the_limits_of_the_gelu_silu_and_mish_formulas():
    for op in ("gelu", "gelu_apprx_tanh", "silu", "mish"):
        assert bits(one_row(op, [np.inf, -np.inf, -1000.0])) == bits(f32(np.inf, -0.0, -0.0)), op
    for op in ("gelu_dx", "silu_dx"):
        assert bits(one_row(op, [np.inf, -np.inf])) == bits(f32(1, 0)), op


def test_softplus_is_evaluated_stably():
    # log(1 + exp(x)) in float64 would give 0 at -40 and inf past 709; the value is neither
    got = one_row("softplus", [-40, 0, 100, 1e30, -np.inf])
    assert got.tolist() == [np.float32(math.exp(-40)), np.float32(math.log(2)), 100.0, np.float32(1e30), 0.0]


def test_nan_in_gives_the_canonical_nan_out():
    for op in FUNCS:
        assert bits(one_row(op, [-np.nan, np.nan])) == [NAN_BITS, NAN_BITS], op


def test_multiply_and_add_are_separate_fp32_operations():
    lay = Layout()
    a = 1 + 2**-23
    instr = act(lay, "copy", 1, 1, bias=lay.tile("f32", 1, 1), scale=const(a))
    # a*a rounds to 1 + 2**-22; adding -(1 + 2**-22) gives 0 (a fused multiply-add would give 2**-46)
    got = check(instr, np.random.default_rng(0), data=f32([a]), bias=f32([-(1 + 2**-22)]))
    assert got["dst"].tolist() == [[0.0]]
    # no bias: no addition, so -0 keeps its sign (adding +0 would make it +0)
    assert bits(one_row("copy", [-0.0])) == [0x80000000]


def test_activation_reduce_sums_sequentially_in_fp32():
    lay = Layout()
    instr = make("activation_reduce", dst=lay.tile("bf16", 1, 4), data=lay.tile("f32", 1, 4), op="copy",
                 reduce_res=lay.tile("f32", 1, 1), reduce_op="add")
    # +0 + 1 + 2**24 rounds to 2**24, + 1 again, - 2**24 = 0 (pairwise: 1). The sum is of the fp32
    # results, not of the bf16 values stored in dst.
    got = check(instr, np.random.default_rng(0), data=f32([1, 2**24, 1, -2**24]))
    assert got["reduce_res"].tolist() == [[0.0]]


def test_softmax_step_as_softmax_s_uses_it():
    lay = Layout()
    instr = make("activation_reduce", dst=lay.tile("f32", 2, 3), data=lay.tile("f32", 2, 3), op="exp",
                 reduce_res=lay.tile("f32", 2, 1), bias=lay.tile("f32", 2, 1), reduce_op="add")
    x = f32([1, 2, 3], [0, -np.inf, 0])
    got = check(instr, np.random.default_rng(0), data=x, bias=f32([-3], [0]))
    e = [np.float32(math.exp(v)) for v in (-2, -1, 0)]
    assert got["dst"].tolist() == [e, [1.0, 0.0, 1.0]]
    assert got["reduce_res"].tolist() == [[np.float32(np.float32(e[0] + e[1]) + e[2])], [2.0]]


# ------------------------------------------------------------------ accumulator registers across instructions
def test_registers_persist_across_instructions():
    lay = Layout()
    data, out, res = lay.tile("f32", 2, 3), lay.tile("f32", 2, 3), lay.tile("f32", 2, 1)
    a = make("activation", dst=out, data=data, op="copy", reduce_cmd="reset_reduce")
    b = make("activation", dst=out, data=data, op="square", reduce_cmd="reduce")
    c = make("activation", dst=out, data=data, op="copy", reduce_res=res)  # idle: only reads out
    m = run_stream([a, b, c], {data: f32([1, 2, 3], [-1, 0.5, 4])})
    assert m.mem.read(res).tolist() == [[6 + 14], [3.5 + 17.25]]
    assert m.engine_state["scalar"][REGS][:2].tolist() == [20, 20.75]
    d = make("activation", dst=out, data=data, op="copy", reduce_cmd="reset", reduce_res=res)
    m = run_stream([a, d], {data: f32([1, 2, 3], [-1, 0.5, 4])})
    assert m.mem.read(res).tolist() == [[0.0], [0.0]]


def test_registers_are_per_partition_and_hold_nan_until_reset():
    lay = Layout()
    res = lay.tile("f32", 32, 1, partition=32)
    instr = make("activation", dst=lay.tile("f32", 32, 2, partition=32), data=lay.tile("f32", 32, 2, partition=32),
                 op="copy", reduce_cmd="reduce", reduce_res=res)
    got, m = run_one(instr, fill(instr, np.random.default_rng(0)))
    assert bits(got["reduce_res"]) == [[NAN_BITS]] * 32  # never reset: NaN, like memory nothing wrote
    regs = m.engine_state["scalar"][REGS]
    assert np.isnan(regs).all() and regs.shape == (DEFAULT.pmax,)


def test_reference_updates_the_state_it_is_given():
    lay = Layout()
    instr = make("activation", dst=lay.tile("f32", 2, 2, partition=64), data=lay.tile("f32", 2, 2, partition=64),
                 op="copy", reduce_cmd="reduce")
    regs = np.arange(DEFAULT.pmax, dtype=np.float32)
    init = fill(instr, np.random.default_rng(0), data=f32([1, 2], [3, 4]))
    state = {REGS: regs}
    reference_of(instr, init, state)  # reference_of passes a copy of the dict
    after = {REGS: regs.copy()}
    instr.spec.slots["reference"](instr, init, after)
    assert after[REGS][64:66].tolist() == [64 + 3, 65 + 7]
    assert regs[64] == 64  # the array given is not changed in place
    _, m = run_one(instr, init, state=state)
    assert np.array_equal(m.engine_state["scalar"][REGS], after[REGS])


# ------------------------------------------------------------------ errors
def test_errors():
    lay = Layout()
    fails(make("activation", dst=lay.tile("f32", 4, 8), data=lay.tile("f32", 4, 6), op="exp"), "shapes disagree")
    fails(act(lay, "exp", bias=lay.tile("f32", 4, 2)), "'bias' must be a [4, 1] column", "not [4, 2]")
    fails(act(lay, "exp", bias=lay.tile("i32", 4, 1)), "'bias' must be f32, f16, bf16, not i32")
    fails(act(lay, "exp", scale=lay.tile("bf16", 4, 1)), "'scale' column must be f32, not bf16")
    fails(act(lay, "exp", scale=lay.tile("f32", 2, 1)), "'scale' must be a [4, 1] column")
    fails(act(lay, "exp", reduce_cmd="reduce", reduce_res=lay.tile("f32", 4, 3)), "'reduce_res' must be a [4, 1]")
    fails(make("activation_reduce", dst=lay.tile("f32", 4, 8), data=lay.tile("f32", 4, 8), op="exp",
               reduce_res=lay.tile("f32", 8, 1), reduce_op="add"), "'reduce_res' must be a [4, 1] column", "not [8, 1]")
