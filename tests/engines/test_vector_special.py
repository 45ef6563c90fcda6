"""The Vector engine's special instructions against their references, known answers and run-time errors:
bn_stats, bn_aggr, max8, nc_find_index8, nc_match_replace8, dropout, nc_stream_shuffle, the Vector
nc_transpose and the copies at a run-time offset."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ncsim import isa
from ncsim.config import DEFAULT as CONFIG
from ncsim.engines.vector_special import dropout_uniform, transpose_vector, transpose_vector_ref
from ncsim.errors import SimError
from ncsim.memory.access import Memory
from ncsim.numerics import from_f32, to_f32
from ncsim.runtime.machine import Machine
from tests.engines.harness import (
    Layout,
    assert_same,
    check,
    const,
    fill,
    make,
    one_instruction_object,
    random_raw,
    reference_of,
    run_one,
)

FLOATS = ("f32", "bf16", "f16", "fp8e4", "fp8e5", "tf32")
SOME_INTS = ("i32", "u8", "i16")
DTYPES = FLOATS + SOME_INTS
ROOT = Path(__file__).resolve().parents[2]
F = np.float32


def f32(values, shape=None) -> np.ndarray:
    a = np.array(values, F)
    return a.reshape(shape) if shape else a


def bits(a: np.ndarray) -> list[int]:
    a = np.asarray(a)
    return a.reshape(-1).view(f"u{a.dtype.itemsize}").tolist()


def sim_error(instr, rng=None, **given_values) -> str:
    """The message of the SimError that running `instr` raises."""
    init = fill(instr, rng or np.random.default_rng(0), **given_values)
    with pytest.raises(SimError) as info:
        run_one(instr, init)
    return info.value.message


def input_dims(min_last: int = 1) -> st.SearchStrategy:
    """Free dims of an input pattern: up to 2 of (step, count); the outer step -3..3 (0 repeats elements),
    the inner 0..3 (Layout.tile places a pattern correctly with at most one negative step)."""
    return st.tuples(st.lists(st.tuples(st.integers(-3, 3), st.integers(1, 6)), max_size=1),
                     st.integers(0, 3), st.integers(min_last, 40)).map(lambda t: (*t[0], (t[1], t[2])))


def count(dims) -> int:
    return int(np.prod([c for _, c in dims]))


def seq_sum(values) -> F:
    acc = F(0)
    for v in values:
        acc = F(acc + F(v))
    return acc


# ------------------------------------------------------------------ bn_stats
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 7, 64, 512])
def test_bn_stats_dtypes_and_sizes(dtype, n):
    lay = Layout()
    instr = make("bn_stats", dst=lay.tile("f32", 8, 6), data=lay.tile(dtype, 8, n))
    check(instr, np.random.default_rng(n), edges=0.05)


@pytest.mark.parametrize("out", ["bf16", "f16", "fp8e4"])
def test_bn_stats_narrow_output_and_strided_psum_input(out):
    lay = Layout()
    instr = make("bn_stats", dst=lay.tile(out, 32, 2, 3, partition=32),
                 data=lay.tile("f32", 32, dims=((-40, 5), (2, 20)), memory=Memory.PSUM, partition=32))
    check(instr, np.random.default_rng(1))


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(DTYPES), st.integers(1, 16), st.one_of(st.integers(1, 512), input_dims()),
       st.integers(0, 2**32 - 1))
def test_bn_stats_hypothesis(dtype, p, n_or_dims, seed):
    lay = Layout()
    data = lay.tile(dtype, p, n_or_dims) if isinstance(n_or_dims, int) else lay.tile(dtype, p, dims=n_or_dims)
    instr = make("bn_stats", dst=lay.tile("f32", p, 6), data=data)
    check(instr, np.random.default_rng(seed))


def test_bn_stats_known_answer():
    lay = Layout()
    instr = make("bn_stats", dst=lay.tile("f32", 2, 6), data=lay.tile("f32", 2, 4))
    data = f32([[1, 2, 3, 4], [5, -1, 5, -1]])
    out = check(instr, np.random.default_rng(0), data=data)["dst"]
    # even 1, 3: count 2, mean 2, m2 (1-2)^2 + (3-2)^2 = 2; odd 2, 4: 2, 3, 2
    assert out.tolist() == [[2, 2, 2, 2, 3, 2], [2, 5, 0, 2, -1, 0]]


def test_bn_stats_single_element_gives_an_empty_odd_group():
    lay = Layout()
    instr = make("bn_stats", dst=lay.tile("f32", 1, 6), data=lay.tile("f32", 1, 1))
    out = check(instr, np.random.default_rng(0), data=f32([[5]]))["dst"]
    assert out.tolist() == [[1, 5, 0, 0, 0, 0]]


def test_bn_stats_sums_left_to_right_from_plus_zero():
    lay = Layout()
    instr = make("bn_stats", dst=lay.tile("f32", 1, 6), data=lay.tile("f32", 1, 6))
    # even: 1e8, 1, -1e8: left to right (1e8 + 1) - 1e8 = 0 in fp32 (pairwise or exact would give 1);
    # odd: -0, -0, -0: the sum starts from +0.0, so the mean is +0 / 3 = +0.
    data = f32([[1e8, -0.0, 1, -0.0, -1e8, -0.0]])
    out = check(instr, np.random.default_rng(0), data=data)["dst"]
    mean_e = F(F(F(F(0) + F(1e8)) + F(1)) + F(-1e8)) / F(3)
    assert mean_e == 0.0 and out[0, 1] == mean_e
    d = [F(v - mean_e) for v in (1e8, 1, -1e8)]
    assert out[0, 2] == seq_sum(F(x * x) for x in d)
    assert bits(out[0, 3:5]) == [bits(f32(3))[0], 0]  # +0, not -0


def test_bn_stats_nan_is_canonical():
    lay = Layout()
    instr = make("bn_stats", dst=lay.tile("f32", 1, 6), data=lay.tile("f32", 1, 4))
    data = np.array([[1, 2, 3, 4]], F)
    data.view(np.uint32)[0, 0] = 0xFFC12345  # a negative NaN with a payload
    out = check(instr, np.random.default_rng(0), data=data)["dst"]
    assert bits(out[0, 1:3]) == [0x7FC00000, 0x7FC00000] and out[0, 4] == 3


def test_bn_stats_errors():
    lay = Layout()
    instr = make("bn_stats", dst=lay.tile("f32", 4, 6), data=lay.tile("f32", 4, 513))
    msg = sim_error(instr)
    assert "513" in msg and "512" in msg and "bn_stats_fmax" in msg
    lay = Layout()
    msg = sim_error(make("bn_stats", dst=lay.tile("f32", 4, 2), data=lay.tile("f32", 4, 16)))
    assert "'dst'" in msg and "4 partitions of 6" in msg and "[4, 2]" in msg


# ------------------------------------------------------------------ bn_aggr
def stats_tile(rng: np.random.Generator, p: int, k: int) -> np.ndarray:
    """k plausible (count, mean, m2) triples per partition, some with edge values."""
    counts = rng.integers(0, 300, (p, k)).astype(F)
    means = (rng.standard_normal((p, k)) * 10).astype(F)
    m2 = (rng.random((p, k)) * counts * 4).astype(F)
    out = np.stack([counts, means, m2], axis=2).reshape(p, 3 * k)
    pick = rng.random(out.shape) < 0.05
    out[pick] = rng.choice(f32([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e38]), int(pick.sum()))
    return out


@pytest.mark.parametrize("dtype", ("f32", "bf16", "f16", "tf32"))
@pytest.mark.parametrize("k", [1, 2, 5, 16])
def test_bn_aggr_dtypes(dtype, k):
    rng = np.random.default_rng(k)
    lay = Layout()
    instr = make("bn_aggr", dst=lay.tile(dtype, 16, 2), data=lay.tile(dtype, 16, 3 * k))
    stats = from_f32(stats_tile(rng, 16, k), instr["data"].dtype)
    check(instr, rng, data=stats)


@pytest.mark.parametrize("dtype", ("fp8e4", "fp8e5", "i32", "u16"))
def test_bn_aggr_random_contents(dtype):
    lay = Layout()
    instr = make("bn_aggr", dst=lay.tile("f32", 8, 2), data=lay.tile(dtype, 8, 2, 6))
    check(instr, np.random.default_rng(2))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 128), st.integers(1, 20), st.integers(0, 2**32 - 1))
def test_bn_aggr_hypothesis(p, k, seed):
    rng = np.random.default_rng(seed)
    lay = Layout()
    instr = make("bn_aggr", dst=lay.tile("f32", p, 2), data=lay.tile("f32", p, 3 * k))
    check(instr, rng, data=stats_tile(rng, p, k))


def test_bn_aggr_known_answer():
    # The bn_stats of 1, 2, 3, 4: (2, 2, 2) and (2, 3, 2); mean 2.5, population variance 1.25.
    lay = Layout()
    instr = make("bn_aggr", dst=lay.tile("f32", 2, 2), data=lay.tile("f32", 2, 6))
    data = f32([[2, 2, 2, 2, 3, 2], [0, 0, 0, 0, 0, 0]])
    out = check(instr, np.random.default_rng(0), data=data)["dst"]
    assert out[0].tolist() == [2.5, 1.25]
    assert np.isnan(out[1]).all()  # n = 0: 0 / 0


def test_bn_aggr_errors():
    lay = Layout()
    msg = sim_error(make("bn_aggr", dst=lay.tile("f32", 4, 2), data=lay.tile("f32", 4, 7)))
    assert "multiple of 3" in msg and "7" in msg
    lay = Layout()
    msg = sim_error(make("bn_aggr", dst=lay.tile("f32", 4, 3), data=lay.tile("f32", 4, 6)))
    assert "'dst'" in msg and "4 partitions of 2" in msg


def load_layernorm_sidecar():
    spec = importlib.util.spec_from_file_location("layernorm_sidecar", ROOT / "programs" / "layernorm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bn_stats_and_bn_aggr_match_the_layernorm_sidecar():
    """layernorm.s is bit-exact against its sidecar only if these two follow its definitions."""
    ln = load_layernorm_sidecar()
    x = ln.inputs(0)["x"][:32]  # the sidecar's edge rows (constant, far from zero, tiny variance) first
    lay = Layout()
    stats = lay.tile("f32", 32, 12)
    mv = lay.tile("f32", 32, 2)
    xt = lay.tile("f32", 32, ln.F)
    chunks = [make("bn_stats", dst=dataclasses.replace(stats, offset=stats.offset + 24 * c, dims=((1, 6),)),
                   data=dataclasses.replace(xt, offset=xt.offset + 4 * ln.CHUNK * c, dims=((1, ln.CHUNK),)))
              for c in range(ln.F // ln.CHUNK)]
    triples = []
    got_stats = []
    for c, instr in enumerate(chunks):
        got, _ = run_one(instr, {"data": x[:, c * ln.CHUNK:(c + 1) * ln.CHUNK]})
        got_stats.append(got["dst"])
        triples += ln.bn_stats(x[:, c * ln.CHUNK:(c + 1) * ln.CHUNK])
    want_stats = np.concatenate([np.stack([t for triple in triples[2 * c:2 * c + 2] for t in triple], axis=1)
                                 for c in range(len(chunks))], axis=1)
    assert_same({"dst": np.concatenate(got_stats, axis=1)}, {"dst": want_stats})
    got, _ = run_one(make("bn_aggr", dst=mv, data=stats), {"data": want_stats})
    mean, var = ln.bn_aggr(triples)
    assert_same(got, {"dst": np.stack([mean, var], axis=1)})


# ------------------------------------------------------------------ max8
@pytest.mark.parametrize("dtype", DTYPES)
def test_max8_dtypes(dtype):
    lay = Layout()
    instr = make("max8", dst=lay.tile("f32" if dtype in SOME_INTS else dtype, 16, 8), src=lay.tile(dtype, 16, 100))
    check(instr, np.random.default_rng(3), edges=0.2)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(DTYPES), st.sampled_from(DTYPES), st.integers(1, 32), input_dims(min_last=8),
       st.floats(0, 0.8), st.integers(0, 2**32 - 1))
def test_max8_hypothesis(d_src, d_dst, p, dims, edges, seed):
    lay = Layout()
    instr = make("max8", dst=lay.tile(d_dst, p, 8), src=lay.tile(d_src, p, dims=dims))
    check(instr, np.random.default_rng(seed), edges=edges)


def test_max8_many_ties_and_few_values():
    rng = np.random.default_rng(4)
    lay = Layout()
    instr = make("max8", dst=lay.tile("bf16", 8, 8), src=lay.tile("bf16", 8, 4, 10))
    src = from_f32(rng.integers(-2, 3, (8, 4, 10)).astype(F), instr["src"].dtype)
    check(instr, rng, src=src)


def test_max8_known_answer():
    lay = Layout()
    instr = make("max8", dst=lay.tile("f32", 3, 8), src=lay.tile("f32", 3, 10))
    nan = np.nan
    src = f32([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3],
               [1, nan, 2, -np.inf, np.inf, 0, 0, 0, 0, 0],
               [-0.0, 0.0, -1, -1, -1, -1, -1, -1, -1, -0.0]])
    out = check(instr, np.random.default_rng(0), src=src)["dst"]
    assert out[0].tolist() == [9, 6, 5, 5, 4, 3, 3, 2]  # a value present twice is listed twice
    assert np.isnan(out[1, 0]) and out[1, 1:].tolist() == [np.inf, 2, 1, 0, 0, 0, 0]
    # -0 and +0 rank equal, so they come in order of position: -0, +0, -0, then -1s
    assert bits(out[2, :3]) == [0x80000000, 0, 0x80000000] and out[2, 3:].tolist() == [-1] * 5


def test_max8_keeps_nan_payloads():
    lay = Layout()
    instr = make("max8", dst=lay.tile("bf16", 1, 8), src=lay.tile("bf16", 1, 8))
    src = from_f32(f32([[1, 2, 3, 4, 5, 6, 7, 8]]), instr["src"].dtype)
    src.view(np.uint16)[0, 3] = 0xFFC5  # negative NaN, payload 0x45
    out = check(instr, np.random.default_rng(0), src=src)["dst"]
    assert bits(out[0, :1]) == [0xFFC5]


def test_max8_errors():
    lay = Layout()
    msg = sim_error(make("max8", dst=lay.tile("f32", 4, 8), src=lay.tile("f32", 4, 7)))
    assert "8 to 16384" in msg and "not 7" in msg
    lay = Layout()
    msg = sim_error(make("max8", dst=lay.tile("f32", 4, 8), src=lay.tile("f32", 4, 16385)))
    assert "16385" in msg
    lay = Layout()
    msg = sim_error(make("max8", dst=lay.tile("f32", 2, 8), src=lay.tile("f32", 4, 16)))
    assert "'dst'" in msg and "4 partitions of 8" in msg


# ------------------------------------------------------------------ nc_find_index8
def values_from(rng: np.random.Generator, data: np.ndarray, absent: float = 0.2) -> np.ndarray:
    """8 values per partition: mostly taken from the partition's data, some not."""
    p = data.shape[0]
    flat = data.reshape(p, -1)
    picks = np.take_along_axis(flat, rng.integers(0, flat.shape[1], (p, 8)), axis=1)
    return np.where(rng.random((p, 8)) < absent, F(1234.5), picks).astype(F)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index_dtype", ["u16", "u32"])
def test_nc_find_index8_dtypes(dtype, index_dtype):
    rng = np.random.default_rng(5)
    lay = Layout()
    instr = make("nc_find_index8", dst=lay.tile(index_dtype, 16, 8), data=lay.tile(dtype, 16, 3, 40),
                 vals=lay.tile("f32", 16, 2, 4))
    data = random_raw(dtype, (16, 3, 40), rng, edges=0.2)
    vals = values_from(rng, to_f32(data, instr["data"].dtype)).reshape(16, 2, 4)
    check(instr, rng, data=data, vals=vals)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(DTYPES), st.integers(1, 32), st.integers(8, 300), st.integers(0, 2**32 - 1))
def test_nc_find_index8_hypothesis(dtype, p, n, seed):
    rng = np.random.default_rng(seed)
    lay = Layout()
    instr = make("nc_find_index8", dst=lay.tile("u32", p, 8), data=lay.tile(dtype, p, n), vals=lay.tile(dtype, p, 8))
    data = random_raw(dtype, (p, n), rng)
    vals = from_f32(values_from(rng, to_f32(data, instr["data"].dtype)), instr["vals"].dtype)
    check(instr, rng, data=data, vals=vals)


def test_nc_find_index8_known_answer():
    lay = Layout()
    instr = make("nc_find_index8", dst=lay.tile("u16", 1, 8), data=lay.tile("f32", 1, 10), vals=lay.tile("f32", 1, 8))
    data = f32([[5, 7, 5, -0.0, np.nan, 9, 7, 1, 2, 3]])
    vals = f32([[5, 7, 9, 0.0, np.nan, 3, 42, 5]])
    out = check(instr, np.random.default_rng(0), data=data, vals=vals)["dst"]
    # first occurrences; +0 finds -0; NaN and 42 find nothing (0); 5 again finds the first 5
    assert out.tolist() == [[0, 1, 5, 3, 0, 9, 0, 0]]


def test_nc_find_index8_errors():
    lay = Layout()
    msg = sim_error(make("nc_find_index8", dst=lay.tile("f32", 4, 8), data=lay.tile("f32", 4, 16),
                         vals=lay.tile("f32", 4, 8)))
    assert "'dst' must be u16 or u32, not f32" in msg
    lay = Layout()
    msg = sim_error(make("nc_find_index8", dst=lay.tile("u32", 4, 8), data=lay.tile("f32", 4, 16),
                         vals=lay.tile("f32", 4, 4)))
    assert "'vals'" in msg and "4 partitions of 8" in msg


# ------------------------------------------------------------------ nc_match_replace8
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_idx", [False, True])
def test_nc_match_replace8_dtypes(dtype, with_idx):
    rng = np.random.default_rng(6)
    lay = Layout()
    instr = make("nc_match_replace8", dst=lay.tile(dtype, 16, 60), data=lay.tile(dtype, 16, 60),
                 vals=lay.tile("f32", 16, 8), imm=-1e30,
                 dst_idx=lay.tile("u32", 16, 8) if with_idx else None)
    data = random_raw(dtype, (16, 60), rng, edges=0.2)
    check(instr, rng, data=data, vals=values_from(rng, to_f32(data, instr["data"].dtype)))


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(DTYPES), st.sampled_from(DTYPES), st.integers(1, 32), st.integers(1, 200),
       st.sampled_from([0.0, -1e30, float("-inf"), float("nan"), 3.0]), st.integers(0, 2**32 - 1))
def test_nc_match_replace8_hypothesis(d_data, d_dst, p, n, imm, seed):
    rng = np.random.default_rng(seed)
    lay = Layout()
    instr = make("nc_match_replace8", dst=lay.tile(d_dst, p, n), data=lay.tile(d_data, p, n),
                 vals=lay.tile("f32", p, 8), imm=imm, dst_idx=lay.tile("u32", p, 8))
    data = random_raw(d_data, (p, n), rng)
    check(instr, rng, data=data, vals=values_from(rng, to_f32(data, instr["data"].dtype)))


def test_nc_match_replace8_known_answer():
    lay = Layout()
    instr = make("nc_match_replace8", dst=lay.tile("f32", 1, 10), data=lay.tile("f32", 1, 10),
                 vals=lay.tile("f32", 1, 8), imm=-7.0, dst_idx=lay.tile("u32", 1, 8))
    data = f32([[9, 3, 9, 4, 9, -0.0, 1, 2, 8, 9]])
    vals = f32([[9, 9, 0.0, 42, 9, 8, np.nan, 2]])
    out = check(instr, np.random.default_rng(0), data=data, vals=vals)
    # the three 9s match the first three 9s in turn; 0 finds -0; 42 and NaN match nothing (index 0)
    assert out["dst_idx"].tolist() == [[0, 2, 5, 0, 4, 8, 0, 7]]
    assert out["dst"].tolist() == [[-7, 3, -7, 4, -7, -7, 1, -7, -7, 9]]


def test_nc_match_replace8_a_replaced_element_is_not_matched_again():
    lay = Layout()
    instr = make("nc_match_replace8", dst=lay.tile("f32", 1, 8), data=lay.tile("f32", 1, 8),
                 vals=lay.tile("f32", 1, 8), imm=5.0, dst_idx=lay.tile("u32", 1, 8))
    data = f32([[1, 5, 2, 3, 4, 6, 7, 8]])
    vals = f32([[1, 5, 5, 42, 42, 42, 42, 42]])
    out = check(instr, np.random.default_rng(0), data=data, vals=vals)
    # 1 becomes 5 (imm), but the next 5 matches the original 5 at index 1, not the replaced one
    assert out["dst_idx"].tolist()[0][:3] == [0, 1, 0]
    assert out["dst"].tolist() == [[5, 5, 2, 3, 4, 6, 7, 8]]


def test_nc_match_replace8_copies_bits_when_dtypes_match():
    lay = Layout()
    instr = make("nc_match_replace8", dst=lay.tile("i32", 1, 9), data=lay.tile("i32", 1, 9),
                 vals=lay.tile("f32", 1, 8), imm=-1.0)
    big = 2**30 + 1  # not an fp32 value: a trip through fp32 would change it
    data = np.array([[big, 1, 2, 3, 4, 5, 6, 7, 8]], np.int32)
    vals = f32([[1, 2, 3, 4, 5, 6, 7, 8]])
    out = check(instr, np.random.default_rng(0), data=data, vals=vals)["dst"]
    assert out.tolist() == [[big] + [-1] * 8]


def test_nc_match_replace8_errors():
    lay = Layout()
    msg = sim_error(make("nc_match_replace8", dst=lay.tile("f32", 4, 16), data=lay.tile("f32", 4, 12),
                         vals=lay.tile("f32", 4, 8), imm=0.0))
    assert "shapes disagree" in msg and "[4, 16]" in msg and "[4, 12]" in msg
    lay = Layout()
    msg = sim_error(make("nc_match_replace8", dst=lay.tile("f32", 4, 16), data=lay.tile("f32", 4, 16),
                         vals=lay.tile("f32", 4, 8), imm=0.0, dst_idx=lay.tile("u16", 4, 8)))
    assert "'dst_idx' must be u32, not u16" in msg


# ------------------------------------------------------------------ dropout
def test_dropout_uniform_pinned_values():
    """u(seed, p, i) * 2**24 for a few arguments, so the stream cannot change unnoticed."""
    assert (dropout_uniform(0, 2, 4) * 2**24).astype(np.int64).tolist() == [
        [6565680, 16468450, 8382915, 1563519], [16260639, 789581, 1082091, 3089928]]
    assert (dropout_uniform(12345, 1, 3) * 2**24).astype(np.int64).tolist() == [[14488126, 15851026, 8588368]]
    assert (dropout_uniform(2**32 - 1, 1, 2) * 2**24).astype(np.int64).tolist() == [[8408623, 13427195]]


def test_dropout_uniform_is_uniform_and_independent_of_shape():
    u = dropout_uniform(7, 128, 4096)
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.002
    counts = np.histogram(u, bins=16, range=(0, 1))[0]
    assert np.all(np.abs(counts / u.size - 1 / 16) < 0.002)
    assert np.array_equal(dropout_uniform(7, 3, 10), u[:3, :10])
    assert not np.array_equal(dropout_uniform(8, 3, 10), u[:3, :10])


@pytest.mark.parametrize("dtype", DTYPES)
def test_dropout_dtypes(dtype):
    lay = Layout()
    instr = make("dropout", dst=lay.tile(dtype, 16, 50), data=lay.tile(dtype, 16, 50), prob=const(0.3), seed=99)
    check(instr, np.random.default_rng(8), edges=0.2)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(DTYPES), st.sampled_from(DTYPES), st.integers(1, 64), input_dims(),
       st.booleans(), st.integers(0, 2**32 - 1))
def test_dropout_hypothesis(d_data, d_dst, p, dims, column, seed):
    rng = np.random.default_rng(seed)
    lay = Layout()
    prob = lay.tile("f32", p, 1) if column else const(float(F(rng.random())))
    instr = make("dropout", dst=lay.tile(d_dst, p, count(dims)), data=lay.tile(d_data, p, dims=dims), prob=prob,
                 seed=seed)
    given_values = {"prob": rng.random((p, 1)).astype(F)} if column else {}
    check(instr, rng, **given_values)


def test_dropout_known_answers():
    lay = Layout()
    instr = make("dropout", dst=lay.tile("f32", 4, 256), data=lay.tile("f32", 4, 256), prob=lay.tile("f32", 4, 1),
                 seed=3)
    data = np.full((4, 256), 2.5, F)
    prob = f32([[0.0], [1.0], [0.25], [np.nan]])
    out = check(instr, np.random.default_rng(0), data=data, prob=prob)["dst"]
    assert np.all(out[0] == 2.5) and bits(out[1]) == [0] * 256 and np.all(out[3] == 2.5)
    u = dropout_uniform(3, 4, 256)[2]
    assert np.array_equal(out[2] == 0, u < F(0.25)) and 30 < np.count_nonzero(out[2] == 0) < 100


def test_dropout_fraction_dropped():
    lay = Layout()
    instr = make("dropout", dst=lay.tile("bf16", 128, 1024), data=lay.tile("bf16", 128, 1024), prob=const(0.3))
    data = from_f32(np.full((128, 1024), 1.0, F), instr["data"].dtype)
    got, _ = run_one(instr, {"data": data})
    assert abs(np.count_nonzero(to_f32(got["dst"], instr["dst"].dtype) == 0) / data.size - 0.3) < 0.005


def test_dropout_keeps_bits_when_dtypes_match():
    lay = Layout()
    instr = make("dropout", dst=lay.tile("i32", 1, 64), data=lay.tile("i32", 1, 64), prob=const(0.5), seed=1)
    data = np.arange(2**30, 2**30 + 64, dtype=np.int32).reshape(1, 64)
    out = check(instr, np.random.default_rng(0), data=data)["dst"]
    kept = out != 0
    assert 10 < kept.sum() < 54 and np.array_equal(out[kept], data[kept])


def test_dropout_errors():
    lay = Layout()
    msg = sim_error(make("dropout", dst=lay.tile("f32", 4, 8), data=lay.tile("f32", 4, 8),
                         prob=lay.tile("f32", 4, 2)))
    assert "'prob'" in msg and "[4, 1]" in msg
    lay = Layout()
    msg = sim_error(make("dropout", dst=lay.tile("f32", 4, 8), data=lay.tile("f32", 2, 8), prob=const(0.5)))
    assert "shapes disagree" in msg


# ------------------------------------------------------------------ nc_stream_shuffle
def random_mask(rng: np.random.Generator, keep: float = 0.2, sources: int = 32) -> tuple[int, ...]:
    """A mask of source partitions below `sources`, some entries 255 (keep)."""
    mask = rng.integers(0, sources, 32)
    return tuple(int(m) for m in np.where(rng.random(32) < keep, 255, mask))


@pytest.mark.parametrize("dtype", ("f32", "bf16", "fp8e5", "i32", "u8"))
@pytest.mark.parametrize(("partitions", "start"), [(128, 0), (64, 64), (32, 96), (16, 32), (96, 0)])
def test_nc_stream_shuffle_sizes(dtype, partitions, start):
    rng = np.random.default_rng(partitions)
    lay = Layout()
    instr = make("nc_stream_shuffle", dst=lay.tile(dtype, partitions, 12, partition=start),
                 src=lay.tile(dtype, partitions, 3, 4, memory=Memory.PSUM, partition=start),
                 shuffle_mask=random_mask(rng) if partitions >= 32 else tuple(range(15, -1, -1)) + (255,) * 16)
    check(instr, rng, edges=0.3)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([(128, 0, 128, 0), (64, 0, 64, 64), (32, 32, 32, 64), (32, 0, 64, 0), (64, 64, 40, 64)]),
       st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_nc_stream_shuffle_hypothesis(placement, n, seed):
    p_dst, dst_start, p_src, src_start = placement
    rng = np.random.default_rng(seed)
    lay = Layout()
    instr = make("nc_stream_shuffle", dst=lay.tile("f16", p_dst, n, partition=dst_start),
                 src=lay.tile("f16", p_src, n, partition=src_start),
                 shuffle_mask=random_mask(rng, sources=min(32, p_src - 32 * ((max(p_src, p_dst) - 1) // 32))))
    check(instr, rng)


def test_nc_stream_shuffle_known_answer_in_place():
    lay = Layout()
    tile = lay.tile("f32", 64, 2)
    mask = (1, 0) + tuple(range(2, 30)) + (255, 5)  # swap 0 and 1, keep 30, 31 <- 5
    instr = make("nc_stream_shuffle", dst=tile, src=tile, shuffle_mask=mask)
    data = np.arange(128, dtype=F).reshape(64, 2)
    out = check(instr, np.random.default_rng(0), dst=data, src=data)["dst"]
    want = data.copy()
    for q in (0, 32):  # the same mask in each quadrant; in place reads all of src first
        want[q + 0], want[q + 1], want[q + 31] = data[q + 1], data[q + 0], data[q + 5]
    assert np.array_equal(out, want)


def test_nc_stream_shuffle_writes_only_the_moved_partitions():
    lay = Layout()
    instr = make("nc_stream_shuffle", dst=lay.tile("f32", 32, 4), src=lay.tile("f32", 32, 4),
                 shuffle_mask=(3,) + (255,) * 30 + (0,))
    src = np.arange(128, dtype=F).reshape(32, 4)
    got, machine = run_one(instr, {"src": src})  # dst was never written
    assert not machine.warnings()  # the kept partitions of dst were not read
    assert np.array_equal(got["dst"][0], src[3]) and np.array_equal(got["dst"][31], src[0])
    assert np.isnan(got["dst"][1:31]).all()  # still the sentinel
    writes = [(f.partition, f.partitions) for f in machine.footprints if f.write]
    assert writes == [(0, 1), (31, 1)]


def test_nc_stream_shuffle_errors():
    lay = Layout()
    msg = sim_error(make("nc_stream_shuffle", dst=lay.tile("f32", 32, 4), src=lay.tile("bf16", 32, 4),
                         shuffle_mask=tuple(range(32))))
    assert "same dtype" in msg and "f32 and bf16" in msg
    lay = Layout()
    msg = sim_error(make("nc_stream_shuffle", dst=lay.tile("f32", 32, 4), src=lay.tile("f32", 32, 4),
                         shuffle_mask=(40,) + tuple(range(1, 32))))
    assert "0..31 or 255" in msg and "40" in msg
    lay = Layout()
    msg = sim_error(make("nc_stream_shuffle", dst=lay.tile("f32", 32, 4), src=lay.tile("f32", 16, 4),
                         shuffle_mask=tuple(range(31, -1, -1))))
    assert "shuffle_mask[0] = 31" in msg and "src has 16 partitions" in msg
    lay = Layout()
    msg = sim_error(make("nc_stream_shuffle", dst=lay.tile("f32", 16, 4, partition=32), src=lay.tile("f32", 64, 4),
                         shuffle_mask=tuple(range(32))))
    assert "64 active partitions" in msg and "'dst' may not start at partition 32" in msg
    lay = Layout()
    msg = sim_error(make("nc_stream_shuffle", dst=lay.tile("f32", 32, 4), src=lay.tile("f32", 32, 5),
                         shuffle_mask=tuple(range(32))))
    assert "same elements per partition" in msg


# ------------------------------------------------------------------ nc_transpose on the Vector engine
@pytest.fixture
def vector_transpose(monkeypatch):
    """Run nc_transpose through this module's functions (the Tensor module owns the mnemonic's slots)."""
    slots = isa.BY_MNEMONIC["nc_transpose"].slots
    monkeypatch.setitem(slots, "execute", transpose_vector)
    monkeypatch.setitem(slots, "reference", transpose_vector_ref)


@pytest.mark.parametrize("dtype", FLOATS + SOME_INTS + ("bool",))
def test_transpose_vector_dtypes(vector_transpose, dtype):
    lay = Layout()
    instr = make("nc_transpose", engine="vector", dst=lay.tile(dtype, 24, 32), data=lay.tile(dtype, 32, 24))
    check(instr, np.random.default_rng(9), edges=0.3)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 32), st.integers(1, 32), st.booleans(), st.booleans(), st.integers(0, 2**32 - 1))
def test_transpose_vector_hypothesis(p, f, data_psum, dst_psum, seed):
    with pytest.MonkeyPatch.context() as mp:
        slots = isa.BY_MNEMONIC["nc_transpose"].slots
        mp.setitem(slots, "execute", transpose_vector)
        mp.setitem(slots, "reference", transpose_vector_ref)
        lay = Layout()
        mem = {True: Memory.PSUM, False: Memory.SBUF}
        instr = make("nc_transpose", engine="vector", dst=lay.tile("bf16", f, p, memory=mem[dst_psum]),
                     data=lay.tile("bf16", p, f, memory=mem[data_psum]))
        check(instr, np.random.default_rng(seed))


def test_transpose_vector_known_answer(vector_transpose):
    lay = Layout()
    instr = make("nc_transpose", engine="vector", dst=lay.tile("f32", 6, 2), data=lay.tile("f32", 2, 2, 3))
    data = f32([[[1, 2, 3], [4, 5, 6]], [[7, 8, 9], [10, 11, 12]]])
    out = check(instr, np.random.default_rng(0), data=data)["dst"]
    assert out.tolist() == [[1, 7], [2, 8], [3, 9], [4, 10], [5, 11], [6, 12]]


def test_transpose_vector_errors():
    lay = Layout()
    msg = sim_error(make("nc_transpose", engine="vector", dst=lay.tile("f32", 33, 4), data=lay.tile("f32", 4, 33)))
    assert "32x32" in msg and "4x33" in msg
    lay = Layout()
    msg = sim_error(make("nc_transpose", engine="vector", dst=lay.tile("f32", 4, 8), data=lay.tile("f32", 4, 8)))
    assert "'dst' must be [F, P] = [8, 4]" in msg and "[4, 8]" in msg
    lay = Layout()
    msg = sim_error(make("nc_transpose", engine="vector", dst=lay.tile("bf16", 8, 4), data=lay.tile("f32", 4, 8)))
    assert "the dtype of 'data' (f32), not bf16" in msg


def test_transpose_vector_through_the_registered_dispatcher():
    slots = isa.BY_MNEMONIC["nc_transpose"].slots
    if "execute" not in slots or "reference" not in slots:
        pytest.skip("the Tensor engine module has not registered nc_transpose yet")
    lay = Layout()
    instr = make("nc_transpose", engine="vector", dst=lay.tile("f16", 5, 7), data=lay.tile("f16", 7, 5))
    check(instr, np.random.default_rng(10), edges=0.3)


# ------------------------------------------------------------------ copies at a run-time offset
ENGINES = ("vector", "gpsimd", "scalar")


def dynamic_case(mnemonic: str, engine: str, d_src: str, d_dst: str, p: int = 4, n: int = 6):
    """An instruction whose moving operand has 100 free elements of room after it, and the index tile."""
    lay = Layout()
    if mnemonic == "tensor_copy_dynamic_src":
        src = lay.tile(d_src, p, n)
        lay.tile(d_src, p, 100)  # room to move into
        dst = lay.tile(d_dst, p, n)
    else:
        dst = lay.tile(d_dst, p, n)
        lay.tile(d_dst, p, 100)
        src = lay.tile(d_src, p, n)
    return make(mnemonic, engine=engine, dst=dst, src=src, index=lay.tile("i32", 1, 1))


def run_dynamic(instr, k: int, src: np.ndarray, old_dst: np.ndarray):
    """Run with the offset k; return (what the machine stored, what the reference says) at the moved pattern."""
    m = Machine(one_instruction_object(instr), CONFIG, "<test>")
    moved_name = "src" if instr.mnemonic == "tensor_copy_dynamic_src" else "dst"
    ap = instr[moved_name]
    moved = dataclasses.replace(ap, offset=ap.offset + k * ap.dtype.itemsize)
    m.mem.write(instr["index"], np.array([[k]], np.int32))
    m.mem.write(moved if moved_name == "src" else instr["src"], src)
    m.mem.write(moved if moved_name == "dst" else instr["dst"], old_dst)
    m.run()
    got = m.mem.read(moved if moved_name == "dst" else instr["dst"])
    want = reference_of(instr, {"src": src, "index": np.array([[k]], np.int32), "dst": old_dst})
    return got, want["dst"]


@pytest.mark.parametrize("mnemonic", ["tensor_copy_dynamic_src", "tensor_copy_dynamic_dst"])
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("d_src", "d_dst"), [("f32", "f32"), ("bf16", "bf16"), ("i32", "i32"), ("f32", "fp8e4"),
                                              ("u8", "f16")])
@pytest.mark.parametrize("k", [0, 1, 37, 100])
def test_dynamic_copy_against_reference(mnemonic, engine, d_src, d_dst, k):
    rng = np.random.default_rng(k)
    instr = dynamic_case(mnemonic, engine, d_src, d_dst)
    src = random_raw(d_src, (4, 6), rng, edges=0.3)
    got, want = run_dynamic(instr, k, src, random_raw(d_dst, (4, 6), rng))
    assert_same({"dst": got}, {"dst": want}, instr)


@pytest.mark.parametrize("mnemonic", ["tensor_copy_dynamic_src", "tensor_copy_dynamic_dst"])
def test_dynamic_copy_offset_zero_through_the_harness(mnemonic):
    instr = dynamic_case(mnemonic, "vector", "f16", "f16")
    check(instr, np.random.default_rng(0), index=np.zeros((1, 1), np.int32))


def test_dynamic_src_known_answer():
    lay = Layout()
    window = lay.tile("f32", 2, 20)
    src = dataclasses.replace(window, dims=((2, 3),))  # elements 0, 2, 4 of each partition
    instr = make("tensor_copy_dynamic_src", dst=lay.tile("f32", 2, 3), src=src, index=lay.tile("i32", 1, 1))
    m = Machine(one_instruction_object(instr), CONFIG, "<test>")
    m.mem.write(window, np.arange(40, dtype=F).reshape(2, 20))
    m.mem.write(instr["index"], np.array([[5]], np.int32))
    m.run()
    assert m.mem.read(instr["dst"]).tolist() == [[5, 7, 9], [25, 27, 29]]
    assert [(f.lo, f.hi) for f in m.footprints if not f.write and f.memory == Memory.SBUF][-1] == (20, 40)


def test_dynamic_dst_negative_offset():
    lay = Layout()
    window = lay.tile("f32", 1, 16)
    dst = dataclasses.replace(window, offset=window.offset + 8 * 4, dims=((1, 4),))  # elements 8..11
    instr = make("tensor_copy_dynamic_dst", dst=dst, src=lay.tile("f32", 1, 4), index=lay.tile("i32", 1, 1))
    m = Machine(one_instruction_object(instr), CONFIG, "<test>")
    m.mem.write(window, np.zeros((1, 16), F))
    m.mem.write(instr["src"], f32([[1, 2, 3, 4]]))
    m.mem.write(instr["index"], np.array([[-6]], np.int32))
    m.run()
    assert m.mem.read(window).tolist() == [[0, 0, 1, 2, 3, 4] + [0] * 10]


def test_dynamic_copy_scalar_goes_through_fp32():
    big = 2**30 + 1
    for engine, want in (("vector", big), ("gpsimd", big), ("scalar", 2**30)):
        instr = dynamic_case("tensor_copy_dynamic_src", engine, "i32", "i32", p=1, n=1)
        got, ref = run_dynamic(instr, 2, np.array([[big]], np.int32), np.zeros((1, 1), np.int32))
        assert got.tolist() == ref.tolist() == [[want]], engine


@pytest.mark.parametrize("mnemonic", ["tensor_copy_dynamic_src", "tensor_copy_dynamic_dst"])
def test_dynamic_copy_offset_out_of_range(mnemonic):
    instr = dynamic_case(mnemonic, "vector", "f32", "f32")
    moved = instr["src" if mnemonic.endswith("src") else "dst"]
    limit = CONFIG.sbuf_usable_bytes
    k_max = (limit - moved.byte_span()[1]) // 4
    k_min = -(moved.byte_span()[0] // 4)
    for k in (k_max + 1, k_min - 1, 2**31 - 1, -2**31):
        msg = sim_error(instr, index=np.array([[k]], np.int32))
        assert f"offset {k}" in msg and f"offsets {k_min}..{k_max}" in msg and str(limit) in msg
    got, want = run_dynamic(instr, k_max, np.ones((4, 6), F), np.zeros((4, 6), F))  # the last offset that fits
    assert_same({"dst": got}, {"dst": want})


def test_dynamic_copy_psum_limit():
    lay = Layout()
    instr = make("tensor_copy_dynamic_src", dst=lay.tile("f32", 4, 4), src=lay.tile("f32", 4, 4, memory=Memory.PSUM),
                 index=lay.tile("i32", 1, 1))
    msg = sim_error(instr, index=np.array([[4096]], np.int32))
    assert f"the {CONFIG.psum_partition_bytes} bytes of psum" in msg


def test_dynamic_copy_errors():
    lay = Layout()
    instr = make("tensor_copy_dynamic_src", dst=lay.tile("f32", 4, 4), src=lay.tile("f32", 4, 4),
                 index=lay.tile("u32", 1, 1))
    assert "'index' must be one int32 element, not u32 [1, 1]" in sim_error(instr)
    lay = Layout()
    instr = make("tensor_copy_dynamic_dst", dst=lay.tile("f32", 4, 4), src=lay.tile("f32", 4, 4),
                 index=lay.tile("i32", 1, 2))
    assert "'index' must be one int32 element, not i32 [1, 2]" in sim_error(instr)
    lay = Layout()
    instr = make("tensor_copy_dynamic_src", dst=lay.tile("f32", 4, 5), src=lay.tile("f32", 4, 4),
                 index=lay.tile("i32", 1, 1))
    assert "shapes disagree" in sim_error(instr, index=np.zeros((1, 1), np.int32))
