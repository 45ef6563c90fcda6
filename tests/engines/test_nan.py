"""Every NaN an operation produces is the canonical quiet NaN, bits 0x7FC00000 (docs/numerics.md):
whatever the operands' NaN signs and payloads, and for NaNs made from numbers (inf - inf, 0 * inf,
log(-1)), where the host CPU would give its own NaN (x86: 0xFFC00000). Over every arithmetic ALU
operator on each engine and instruction that runs it, the sequential form of the reductions, and
every activation function with and without scale and bias."""

from __future__ import annotations

import numpy as np
import pytest

from ncsim import isa
from ncsim.engines import alu
from ncsim.errors import NcsimError
from tests.engines.harness import Layout, make, run_one

NAN_BITS = 0x7FC00000
# Numbers that make NaNs together, and NaNs of both signs with payloads (quiet and signalling).
SPECIAL = np.array([0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0xC0000000, 0x3F000000, 0x40000000,
                    0x7F800000, 0xFF800000, 0x7E967699, 0x7FC00000, 0xFFC00000, 0x7FA00001, 0xFF800001],
                   np.uint32).view(np.float32)
N = len(SPECIAL)
ARITH = [name for name, _arity, cls, *_ in isa.ALU_OPS if cls == "arith"]
# Operators whose result is 1.0 or 0.0: never NaN, whatever the operands.
BOOLEAN = {"equal", "not_equal", "greater", "greater_equal", "less", "less_equal", "logical_and", "logical_or",
           "logical_xor", "logical_not"}
FUNCS = [f for f, _ in isa.ACTIVATION_FUNCS]


def nan_bits(a: np.ndarray) -> set[int]:
    """The bit patterns of the NaNs in an f32 array."""
    a = np.asarray(a, np.float32)
    return set(a[np.isnan(a)].view(np.uint32).tolist())


def pairs() -> tuple[np.ndarray, np.ndarray]:
    """[N, N] tiles a, b with (a[p, i], b[p, i]) = (SPECIAL[p], SPECIAL[i]): every pair."""
    return np.repeat(SPECIAL[:, None], N, 1), np.repeat(SPECIAL[None, :], N, 0)


def test_the_operands_hold_nans_the_host_would_pass_on():
    # the premise: numpy on the host keeps a NaN operand's sign and payload, and makes -NaN from numbers
    a, b = pairs()
    with np.errstate(all="ignore"):
        assert nan_bits(a + b) - {NAN_BITS}


@pytest.mark.parametrize("op", ARITH)
def test_every_arithmetic_operator_gives_the_canonical_nan(op):
    a, b = pairs()
    results = {"alu.apply": alu.apply(op, a, b)}
    results["alu.scalar_op"] = np.array([[alu.scalar_op(alu.CODES[op], x, y) for x, y in zip(ra, rb, strict=True)]
                                         for ra, rb in zip(a, b, strict=True)], np.float32)
    for engine in isa.BY_MNEMONIC["tensor_tensor"].engines:
        lay = Layout()
        instr = make("tensor_tensor", engine, dst=lay.tile("f32", N, N), data1=lay.tile("f32", N, N),
                     data2=lay.tile("f32", N, N), op=op)
        try:
            results[f"tensor_tensor on {engine}"] = run_one(instr, {"data1": a, "data2": b})[0]["dst"]
        except NcsimError:
            pass  # the engine does not run this operator
    for engine in isa.BY_MNEMONIC["tensor_scalar"].engines:
        lay = Layout()
        instr = make("tensor_scalar", engine, dst=lay.tile("f32", N, N), data=lay.tile("f32", N, N), op0=op,
                     operand0=lay.tile("f32", N, 1))
        try:
            results[f"tensor_scalar on {engine}"] = run_one(instr, {"data": a, "operand0": SPECIAL[:, None]})[0]["dst"]
        except NcsimError:
            pass
    assert len(results) > 2, f"no instruction ran {op}"
    for where, r in results.items():
        if op in BOOLEAN:
            assert not nan_bits(r), (op, where)
        else:
            assert nan_bits(r) == {NAN_BITS}, (op, where, [hex(x) for x in nan_bits(r)])


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "maximum", "minimum"])
def test_reductions_give_the_canonical_nan(op):
    # rows of every special value in turn: inf + -inf, 0 * inf and NaN operands of all kinds
    data = np.stack([np.roll(SPECIAL, p) for p in range(N)])
    lay = Layout()
    instr = make("tensor_reduce", dst=lay.tile("f32", N, 1), op=op, data=lay.tile("f32", N, N), axis=(1,))
    out = run_one(instr, {"data": data})[0]["dst"]
    assert nan_bits(out) == {NAN_BITS}


@pytest.mark.parametrize("func", FUNCS)
def test_every_activation_function_gives_the_canonical_nan(func):
    a, _ = pairs()
    lay = Layout()
    plain = make("activation", dst=lay.tile("f32", 1, N), op=func, data=lay.tile("f32", 1, N))
    got = {"plain": run_one(plain, {"data": SPECIAL[None, :]})[0]["dst"]}
    # x * scale + bias with every pair: 0 * inf, inf + -inf and NaN operands before the function
    for with_bias in (True, False):
        lay = Layout()
        bias = {"bias": lay.tile("f32", N, 1)} if with_bias else {}
        full = make("activation", dst=lay.tile("f32", N, N), op=func, data=lay.tile("f32", N, N),
                    scale=lay.tile("f32", N, 1), **bias)
        init = {"data": a.T, "scale": SPECIAL[:, None], "bias": np.roll(SPECIAL, 3)[:, None]}
        try:
            got[f"scale{' and bias' if with_bias else ''}"] = run_one(full, init)[0]["dst"]
        except NcsimError:
            assert with_bias, func  # a function that takes no bias (reciprocal on v2)
    for where, r in got.items():
        assert nan_bits(r) == {NAN_BITS}, (func, where, [hex(x) for x in nan_bits(r)])


def test_a_nan_narrowed_to_bf16_is_the_canonical_bf16_nan():
    # the canonical NaN keeps its top bits when narrowed: 0x7FC0 in bf16
    lay = Layout()
    instr = make("tensor_tensor", dst=lay.tile("bf16", 1, 2), data1=lay.tile("f32", 1, 2),
                 data2=lay.tile("f32", 1, 2), op="add")
    out = run_one(instr, {"data1": np.array([[np.inf, 1]], np.float32),
                          "data2": np.array([[-np.inf, SPECIAL[11]]], np.float32)})[0]["dst"]
    assert out.view(np.uint16).tolist() == [[0x7FC0, 0x7FC0]]
