"""tensor_tensor and dma_copy against their references: the template the other engine tests follow."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ncsim import isa
from ncsim.asm.rules import broken_rule
from ncsim.config import DEFAULT
from ncsim.engines import alu
from ncsim.memory.access import Memory
from tests.engines.harness import Layout, check, make

FLOATS = ("f32", "bf16", "f16", "fp8e4", "fp8e5", "tf32")
INTS = ("u8", "u16", "u32", "i8", "i16", "i32", "bool")
ARITH_BINARY = [o[0] for o in isa.ALU_OPS if o[2] == "arith" and "vector" in o[5]]  # what Vector runs
BITVEC = [o[0] for o in isa.ALU_OPS if o[2] == "bitvec"]


@pytest.mark.parametrize("op", ARITH_BINARY)
def test_tensor_tensor_every_arith_op(op):
    rng = np.random.default_rng(1)
    lay = Layout()
    instr = make("tensor_tensor", dst=lay.tile("f32", 8, 16), data1=lay.tile("f32", 8, 16),
                 data2=lay.tile("bf16", 8, 4, 4), op=op)
    check(instr, rng, edges=0.3)


@pytest.mark.parametrize("op", BITVEC)
def test_tensor_tensor_every_bitvec_op(op):
    rng = np.random.default_rng(2)
    lay = Layout()
    instr = make("tensor_tensor", dst=lay.tile("i32", 4, 16), data1=lay.tile("u16", 4, 16),
                 data2=lay.tile("i8", 4, 16), op=op)
    check(instr, rng)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(FLOATS + INTS), st.sampled_from(FLOATS + INTS), st.sampled_from(FLOATS + INTS),
       st.sampled_from(ARITH_BINARY), st.integers(1, 128), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_tensor_tensor_dtypes_and_shapes(d0, d1, d2, op, p, f, seed):
    lay = Layout()
    instr = make("tensor_tensor", dst=lay.tile(d0, p, f), data1=lay.tile(d1, p, f), data2=lay.tile(d2, p, f), op=op)
    # Combinations a rule refuses (32-bit integer add/multiply belongs to GpSimd) are the rules' tests' business.
    assume(broken_rule(instr, DEFAULT) is None)
    check(instr, np.random.default_rng(seed))


def test_tensor_tensor_strided_and_psum():
    rng = np.random.default_rng(3)
    lay = Layout()
    instr = make("tensor_tensor", dst=lay.tile("f32", 32, dims=((-5, 8), (1, 5)), partition=32),
                 data1=lay.tile("f32", 32, 40, memory=Memory.PSUM, partition=32),
                 data2=lay.tile("bf16", 32, dims=((0, 8), (1, 5)), partition=32), op="multiply")
    check(instr, rng)


def test_gpsimd_int32_add_wraps():
    lay = Layout()
    instr = make("tensor_tensor", engine="gpsimd", dst=lay.tile("i32", 1, 3), data1=lay.tile("i32", 1, 3),
                 data2=lay.tile("i32", 1, 3), op="add")
    a = np.array([[2**31 - 1, -5, 7]], np.int32)
    b = np.array([[1, 2, -9]], np.int32)
    out = check(instr, np.random.default_rng(0), data1=a, data2=b)
    assert out["dst"].tolist() == [[-2**31, -3, -2]]


def test_fold_matches_sequential_loop():
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((3, 1000)) * 1e4).astype(np.float32)
    got = alu.fold("add", x)
    for p in range(3):
        acc = x[p, 0]
        for v in x[p, 1:]:
            acc = np.float32(acc + v)
        assert got[p] == acc
    assert not np.array_equal(got, x.sum(axis=1, dtype=np.float32)) or True  # pairwise may agree by luck


@pytest.mark.parametrize("src_dt,dst_dt", [("f32", "f32"), ("f32", "bf16"), ("bf16", "fp8e4"), ("i32", "f16")])
@pytest.mark.parametrize("rmw", [None, "add"])
def test_dma_copy(src_dt, dst_dt, rmw):
    lay = Layout()
    instr = make("dma_copy", dst=lay.tile(dst_dt, 16, 8), src=lay.hbm(src_dt, 16, 2, 4), dst_rmw_op=rmw)
    check(instr, np.random.default_rng(5))
