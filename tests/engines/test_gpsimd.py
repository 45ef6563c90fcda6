"""iota, affine_select, tensor_partition_reduce and local_gather against their references, known
answers that pin the definitions (int32 wrap, conversions, sequential partition order, NKI's gather
example), and the run-time errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ncsim import dtypes
from ncsim.asm.instruction import Instruction
from ncsim.engines import gpsimd
from ncsim.engines.context import Context
from ncsim.errors import SimError
from ncsim.memory.access import AccessPattern, Memory
from ncsim.runtime.machine import Machine
from tests.engines.harness import DEFAULT, Layout, check, fill, make, one_instruction_object, run_one

FLOATS = ("f32", "bf16", "f16", "fp8e4", "fp8e5", "tf32")
INTS = ("u8", "u16", "u32", "i8", "i16", "i32", "bool")
CMPS = ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")
NAN_BITS = 0x7FC00000
steps = st.integers(-2**31, 2**31 - 1) | st.integers(-5, 5)


def f32(*rows) -> np.ndarray:
    return np.array(rows, np.float32)


def fails(instr: Instruction, *fragments: str, **given) -> None:
    with pytest.raises(SimError) as e:
        run_one(instr, fill(instr, np.random.default_rng(0), **given))
    for f in fragments:
        assert f in str(e.value), (f, str(e.value))


@st.composite
def patterns(draw, max_elements: int = 64) -> tuple[tuple[int, int], ...]:
    dims, total = [], 1
    for _ in range(draw(st.integers(1, 4))):
        count = draw(st.integers(1, max(1, max_elements // total)))
        dims.append((draw(steps), count))
        total *= count
    return tuple(dims)


def free_of(dims) -> int:
    return int(np.prod([c for _, c in dims]))


# ------------------------------------------------------------------ iota
@pytest.mark.parametrize("dt", FLOATS + INTS)
def test_iota_every_dtype(dt):
    lay = Layout()
    check(make("iota", dst=lay.tile(dt, 32, 6, 5), pattern=((1000, 6), (-7, 5)), offset=-300,
               channel_multiplier=77), np.random.default_rng(0))


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(FLOATS + INTS), patterns(), st.integers(1, 128), steps, steps)
def test_iota_patterns(dt, dims, p, offset, cm):
    lay = Layout()
    check(make("iota", dst=lay.tile(dt, p, free_of(dims)), pattern=dims, offset=offset, channel_multiplier=cm),
          np.random.default_rng(0))


def test_iota_known_values_and_int32_wrap():
    lay = Layout()
    got = check(make("iota", dst=lay.tile("i32", 3, 2, 3), pattern=((10, 2), (1, 3)), offset=5,
                     channel_multiplier=100), np.random.default_rng(0))
    assert got["dst"].tolist() == [[[5, 6, 7], [15, 16, 17]], [[105, 106, 107], [115, 116, 117]],
                                   [[205, 206, 207], [215, 216, 217]]]
    got = check(make("iota", dst=lay.tile("i32", 2, 2), pattern=((1, 2),), offset=2**31 - 1, channel_multiplier=2**31 - 1),
                np.random.default_rng(0))
    assert got["dst"].tolist() == [[2**31 - 1, -2**31], [-2, -1]]  # 32-bit arithmetic wraps


def test_iota_conversions():
    lay = Layout()
    got = check(make("iota", dst=lay.tile("u8", 1, 4), pattern=((150, 4),), offset=-150), np.random.default_rng(0))
    assert got["dst"].tolist() == [[0, 0, 150, 255]]  # integers saturate
    got = check(make("iota", dst=lay.tile("bf16", 1, 3), pattern=((1, 3),), offset=256), np.random.default_rng(0))
    assert got["dst"].astype(np.float32).tolist() == [[256, 256, 258]]  # 257 ties to even
    got = check(make("iota", dst=lay.tile("i32", 1, 2), pattern=((1, 2),), offset=2**24 + 1), np.random.default_rng(0))
    assert got["dst"].tolist() == [[2**24 + 1, 2**24 + 2]]  # integer outputs do not go through fp32
    got = check(make("iota", dst=lay.tile("bool", 1, 3), pattern=((1, 3),), offset=-1), np.random.default_rng(0))
    assert got["dst"].tolist() == [[1, 0, 1]]


def test_iota_pattern_must_fill_dst():
    lay = Layout()
    fails(make("iota", dst=lay.tile("f32", 4, 10), pattern=((1, 3), (1, 4)), offset=0),
          "gives 12 values per partition (3 x 4)",
          "'dst' has 10 elements per partition")


# ------------------------------------------------------------------ affine_select
@pytest.mark.parametrize("cmp", CMPS)
@pytest.mark.parametrize("dt,out", [("f32", "f32"), ("bf16", "bf16"), ("f32", "bf16"), ("i32", "f16"), ("u8", "u8"),
                                    ("fp8e5", "f32")])
def test_affine_select_ops_and_dtypes(cmp, dt, out):
    lay = Layout()
    instr = make("affine_select", dst=lay.tile(out, 32, 24), on_true_tile=lay.tile(dt, 32, 24), pattern=((-1, 24),),
                 on_false_value=-3.0e38, offset=3, channel_multiplier=1, cmp_op=cmp)
    check(instr, np.random.default_rng(1), edges=0.3)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(FLOATS + INTS), st.sampled_from(FLOATS + INTS), patterns(), st.sampled_from([1, 16, 32, 64, 128]),
       st.integers(-20, 20), st.integers(-3, 3), st.sampled_from(CMPS),
       st.sampled_from([0.0, -np.inf, np.nan, -1.5, 65504.0]), st.integers(0, 2**32 - 1))
def test_affine_select_patterns(dt, out, dims, p, offset, cm, cmp, false_value, seed):
    lay = Layout()
    f = free_of(dims)
    instr = make("affine_select", dst=lay.tile(out, p, f), on_true_tile=lay.tile(dt, p, f), pattern=dims,
                 on_false_value=float(false_value), offset=offset, channel_multiplier=cm, cmp_op=cmp)
    check(instr, np.random.default_rng(seed))


def test_affine_select_causal_mask():
    lay = Layout()
    instr = make("affine_select", dst=lay.tile("f32", 4, 4), on_true_tile=lay.tile("f32", 4, 4), pattern=((-1, 4),),
                 on_false_value=float("-inf"), channel_multiplier=1, cmp_op="greater_equal", offset=0)
    data = f32([1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16])
    got = check(instr, np.random.default_rng(0), on_true_tile=data)
    ninf = -np.inf
    # keep where p - i >= 0: the lower triangle
    assert got["dst"].tolist() == [[1, ninf, ninf, ninf], [5, 6, ninf, ninf], [9, 10, 11, ninf], [13, 14, 15, 16]]


def test_affine_select_copies_bits_when_dtypes_match():
    lay = Layout()
    instr = make("affine_select", dst=lay.tile("u32", 1, 2), on_true_tile=lay.tile("u32", 1, 2), pattern=((1, 2),),
                 on_false_value=7.0, cmp_op="equal", offset=0, channel_multiplier=0)
    got = check(instr, np.random.default_rng(0), on_true_tile=np.array([[2**32 - 1, 2**32 - 1]], np.uint32))
    assert got["dst"].tolist() == [[2**32 - 1, 7]]  # exact above 2**24: no trip through fp32
    instr = make("affine_select", dst=lay.tile("f32", 1, 2), on_true_tile=lay.tile("f32", 1, 2), pattern=((1, 2),),
                 on_false_value=0.0, cmp_op="equal", offset=0, channel_multiplier=0)
    payload = np.array([[0x7FA00001, 0xFFC00002]], np.uint32).view(np.float32)
    got = check(instr, np.random.default_rng(0), on_true_tile=payload)
    assert got["dst"].view(np.uint32).tolist() == [[0x7FA00001, 0]]


def test_affine_select_errors():
    lay = Layout()
    fails(make("affine_select", dst=lay.tile("f32", 4, 8), on_true_tile=lay.tile("f32", 4, 6), pattern=((1, 8),),
               on_false_value=0.0, offset=0, channel_multiplier=0), "shapes disagree")
    fails(make("affine_select", dst=lay.tile("f32", 4, 8), on_true_tile=lay.tile("f32", 4, 8), pattern=((1, 9),),
               on_false_value=0.0, offset=0, channel_multiplier=0), "gives 9 values per partition")


# ------------------------------------------------------------------ tensor_partition_reduce
@pytest.mark.parametrize("op", gpsimd.PARTITION_REDUCE_OPS)
@pytest.mark.parametrize("dt,out", [("f32", "f32"), ("bf16", "f32"), ("f32", "bf16"), ("i32", "i32"), ("u8", "u16"),
                                    ("i16", "i8"), ("fp8e4", "f16")])
def test_partition_reduce_ops_and_dtypes(op, dt, out):
    if op.startswith("bitwise") and not (dt in INTS and out in INTS):
        dt, out = "u16", "i32"  # bitwise operators take integer tiles (rule bitwise-integers)
    lay = Layout()
    instr = make("tensor_partition_reduce", dst=lay.tile(out, 1, 5, 4), data=lay.tile(dt, 128, 5, 4), op=op)
    check(instr, np.random.default_rng(2), edges=0.2)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(gpsimd.PARTITION_REDUCE_OPS), st.sampled_from(FLOATS + INTS), st.sampled_from(FLOATS + INTS),
       st.sampled_from([(0, 1), (0, 16), (32, 32), (64, 64), (0, 128)]), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_partition_reduce_shapes(op, dt, out, part, f, seed):
    if op.startswith("bitwise") and not (dt in INTS and out in INTS):
        dt, out = "u32", "i16"  # bitwise operators take integer tiles (rule bitwise-integers)
    start, p = part
    lay = Layout()
    instr = make("tensor_partition_reduce", dst=lay.tile(out, 1, f), data=lay.tile(dt, p, f, partition=start), op=op)
    check(instr, np.random.default_rng(seed))


def test_partition_reduce_is_sequential_over_partitions():
    lay = Layout()
    instr = make("tensor_partition_reduce", dst=lay.tile("f32", 1, 3), data=lay.tile("f32", 4, 3), op="add")
    data = f32([1, 1, 0], [2**24, 1, -0.0], [1, 1, -0.0], [-2**24, 1, -0.0])
    got = check(instr, np.random.default_rng(0), data=data)
    # 1 + 2**24 rounds to 2**24, + 1 rounds back, - 2**24 = 0 (pairwise: 1); 0 + -0 + ... = +0
    assert got["dst"].view(np.uint32).tolist() == [[0, np.float32(4).view(np.uint32), 0]]
    instr = make("tensor_partition_reduce", dst=lay.tile("f32", 1, 2), data=lay.tile("f32", 3, 2), op="maximum")
    got = check(instr, np.random.default_rng(0), data=f32([1, -0.0], [np.nan, 0.0], [5, -0.0]))
    assert got["dst"].view(np.uint32).tolist() == [[NAN_BITS, 0]]  # NaN wins; max(-0, +0) = +0


def test_partition_reduce_bitwise_on_the_bits():
    lay = Layout()
    instr = make("tensor_partition_reduce", dst=lay.tile("u32", 1, 2), data=lay.tile("i16", 3, 2), op="bitwise_or")
    got = check(instr, np.random.default_rng(0), data=np.array([[1, -1], [2, 0], [4, 0]], np.int16))
    assert got["dst"].tolist() == [[7, 0xFFFFFFFF]]  # i16 -1 sign-extends to 32 bits
    instr = make("tensor_partition_reduce", dst=lay.tile("i32", 1, 1), data=lay.tile("i32", 2, 1), op="bitwise_and")
    got = check(instr, np.random.default_rng(0), data=np.array([[0b1100], [0b1010]], np.int32))
    assert got["dst"].tolist() == [[0b1000]]


def test_partition_reduce_errors():
    lay = Layout()
    fails(make("tensor_partition_reduce", dst=lay.tile("f32", 1, 8), data=lay.tile("f32", 4, 8), op="multiply"),
          "reduces with add, maximum, bitwise_or, bitwise_and, not multiply")
    fails(make("tensor_partition_reduce", dst=lay.tile("f32", 2, 8), data=lay.tile("f32", 4, 8), op="add"),
          "'dst' must be [1, 8]", "not [2, 8]")
    fails(make("tensor_partition_reduce", dst=lay.tile("f32", 1, 7), data=lay.tile("f32", 4, 8), op="add"),
          "'dst' must be [1, 8]")


# ------------------------------------------------------------------ local_gather
def gather(lay: Layout, p: int, src_free: tuple[int, ...], index_free: int, width: int = 1, valid: int = 0,
           dt: str = "f32", index_dt: str = "u16", out_dt: str | None = None, out_free: int | None = None,
           start: int = 0) -> Instruction:
    count = valid or 16 * index_free
    return make("local_gather", dst=lay.tile(out_dt or dt, p, out_free if out_free is not None else count * width,
                                             partition=start),
                src_buffer=lay.tile(dt, p, *src_free, partition=start),
                index=lay.tile(index_dt, p, index_free, partition=start), num_elem_per_idx=width,
                num_valid_indices=valid or None)


def indices(rng: np.random.Generator, p: int, w: int, high: int) -> np.ndarray:
    return rng.integers(0, high, (p, w)).astype(np.uint16)


def test_local_gather_nki_example():
    """NKI's own example: src [128, 512, 4], 16x4 indices per core tiled over the 8 cores, 4 elements
    per index (the hardware index is in elements: index * 4), 64 valid indices, out [128, 4, 16, 4]."""
    rng = np.random.default_rng(3)
    src = rng.random((128, 512, 4)).astype(np.float32)
    per_core = rng.integers(0, 512, (16, 4)).astype(np.uint16)
    index = np.tile(per_core, (8, 1))
    lay = Layout()
    instr = make("local_gather", dst=lay.tile("f32", 128, 4, 16, 4), src_buffer=lay.tile("f32", 128, 512, 4),
                 index=lay.tile("u16", 128, 4), num_elem_per_idx=4, num_valid_indices=64)
    got = check(instr, rng, src_buffer=src, index=index * 4)
    want = np.empty((128, 64, 4), np.float32)
    for core in range(8):
        rows = slice(16 * core, 16 * core + 16)
        want[rows] = np.take(src[rows], index[rows].flatten(order="F")[:64], axis=1)
    assert np.array_equal(got["dst"], want.reshape(128, 4, 16, 4))


@pytest.mark.parametrize("dt", FLOATS + INTS)
@pytest.mark.parametrize("width", gpsimd.GATHER_WIDTHS)
def test_local_gather_dtypes_and_widths(dt, width):
    rng = np.random.default_rng(4)
    lay = Layout()
    instr = gather(lay, 32, (40, 2), 3, width, valid=37, dt=dt)
    check(instr, rng, edges=0.3, index=indices(rng, 32, 3, 80 - width + 1))


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(FLOATS + INTS), st.sampled_from([(0, 16), (32, 16), (0, 32), (64, 64), (0, 128), (96, 32)]),
       st.integers(1, 5), st.sampled_from(gpsimd.GATHER_WIDTHS), st.integers(0, 80), st.integers(33, 100),
       st.integers(0, 2**32 - 1))
def test_local_gather_shapes(dt, part, w, width, valid, f, seed):
    start, p = part
    valid = min(valid, 16 * w)
    rng = np.random.default_rng(seed)
    lay = Layout()
    instr = gather(lay, p, (f,), w, width, valid, dt=dt, start=start)
    check(instr, rng, index=indices(rng, p, w, f - width + 1))


def test_local_gather_index_order_is_partition_first_per_core():
    lay = Layout()
    instr = gather(lay, 32, (8,), 2, 1, valid=3)
    src = np.arange(32 * 8, dtype=np.float32).reshape(32, 8)
    index = np.zeros((32, 2), np.uint16)
    index[0] = [5, 7]  # core 0: j=0 is partition 0 column 0, j=1 partition 1 column 0, j=16 partition 0 column 1
    index[1] = [2, 6]
    index[16] = [1, 3]  # core 1
    index[17] = [4, 0]
    got = check(instr, np.random.default_rng(0), src_buffer=src, index=index)["dst"]
    assert got[0].tolist() == [5, 2, 0] and got[15].tolist() == [15 * 8 + 5, 15 * 8 + 2, 15 * 8 + 0]
    assert got[16].tolist() == [16 * 8 + 1, 16 * 8 + 4, 16 * 8 + 0]


def test_local_gather_errors():
    lay = Layout()
    index = np.zeros((16, 2), np.uint16)
    index[3, 1] = 7
    fails(gather(lay, 16, (8,), 2, width=2), "core 0 index 19 (partition 3, element 1 of 'index') is 7",
          "elements 7..8, past the 8 elements", index=index)
    fails(gather(lay, 16, (8,), 2, index_dt="u32"), "'index' must be u16, not u32")
    fails(gather(lay, 16, (8,), 2, out_dt="bf16"), "dtype of 'src_buffer' (f32", "not bf16")
    fails(gather(lay, 16, (8,), 2, width=3, out_free=96), "num_elem_per_idx must be one of 1, 2, 4, 8, 16, 32, not 3")
    fails(gather(lay, 8, (8,), 2, out_free=32), "start and count multiples of 16")
    fails(gather(lay, 16, (8,), 2, out_free=31), "'dst' must hold 32 indices x 1 elements = 32 elements")
    fails(gather(lay, 16, (8,), 2, valid=33, out_free=33), "num_valid_indices=33", "hold 32 indices")
    fails(make("local_gather", dst=lay.tile("f32", 16, 32), src_buffer=lay.tile("f32", 16, 8),
               index=lay.tile("u16", 16, 2, partition=32)), "'index' covers partitions 32:48 and 'src_buffer' 0:16")
    many = gather(lay, 16, (8,), 257, out_free=16 * 257)
    fails(many, "4112 indices; at most 4096", index=np.zeros((16, 257), np.uint16))


# ------------------------------------------------------------------ GpSimd never touches PSUM
@pytest.mark.parametrize("mnemonic", ["iota", "affine_select", "tensor_partition_reduce", "local_gather"])
def test_psum_operands_are_a_sim_error(mnemonic):
    """The decoder already refuses them; the execute functions check again (a hand-built context)."""
    lay = Layout()
    psum = AccessPattern(Memory.PSUM, dtypes.FLOAT32, 0, 16, 0, ((1, 16),))
    sbuf = lay.tile("f32", 16, 16)
    base = {"iota": make("iota", dst=sbuf, pattern=((1, 16),), offset=0),
            "affine_select": make("affine_select", dst=sbuf, on_true_tile=sbuf, pattern=((1, 16),), on_false_value=0.0,
                                            offset=0, channel_multiplier=0),
            "tensor_partition_reduce": make("tensor_partition_reduce", dst=lay.tile("f32", 1, 16), data=sbuf, op="add"),
            "local_gather": make("local_gather", dst=sbuf, src_buffer=sbuf, index=lay.tile("u16", 16, 1))}[mnemonic]
    m = Machine(one_instruction_object(base), DEFAULT, "<test>")
    name = next((n for n in base.operands if n != "dst" and isinstance(base.operands[n], AccessPattern)), "dst")
    bad = Instruction(base.spec, "gpsimd", {**base.operands, name: psum})
    with pytest.raises(SimError, match=f"operand '{name}' is in PSUM, which the GpSimd engine cannot reach"
                                       r" \(rule gpsimd-memory\)"):
        base.spec.slots["execute"](Context(m, "gpsimd", 0, bad))
