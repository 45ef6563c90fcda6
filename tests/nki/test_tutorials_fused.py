"""The NKI tutorials' softmax, LayerNorm (both versions) and fused self-attention (Stable Diffusion,
with its causal mask) kernels, written here from the algorithms the tutorials document (aws-neuron-sdk
v2.26 general/nki/tutorials/layernorm.rst and fused-self-attn.rst; the softmax kernel of
nki-samples src/nki_samples/tutorials/softmax), run on ncsim and checked against numpy: bit for bit
where the reference follows ncsim's documented arithmetic step by step (docs/isa.md, docs/numerics.md),
within a stated fp32 ulp bound where it cannot (the attention's matmuls). Shapes are reduced."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import ncsim.nki.isa as nisa
import ncsim.nki.language as nl
from ncsim import dtypes, nki
from ncsim.errors import AsmError
from ncsim.numerics import ulp_distance

F32, F64 = np.float32, np.float64
BF16 = ml_dtypes.bfloat16


def fold(x: np.ndarray, op=np.add) -> np.ndarray:
    """op folded along the last axis, left to right, each step rounded to fp32 (tensor_reduce, the
    activation accumulator, bn_stats)."""
    acc = x[..., 0].astype(F32)
    for j in range(1, x.shape[-1]):
        acc = op(acc, x[..., j]).astype(F32)
    return acc


def exp32(x: np.ndarray) -> np.ndarray:
    """An activation function: computed in float64, rounded once to fp32."""
    return np.exp(x.astype(F64)).astype(F32)


def rsqrt32(x: np.ndarray) -> np.ndarray:
    return (1.0 / np.sqrt(x.astype(F64))).astype(F32)


# ------------------------------------------------------------------ softmax (rows of 128, the last one partial)
@nki.jit
def softmax_rows(a):
    """softmax along each row: the row maximum subtracted, exponentials, divided by their row sum;
    128 rows per tile, the rows past the end masked off."""
    rows, cols = a.shape
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_r, i_c = nl.mgrid[0:128, 0:cols]
    for t in nl.affine_range(math.ceil(rows / 128)):
        live = t * 128 + i_r < rows
        x = nl.load(a[t * 128 + i_r, i_c], mask=live)
        top = nl.max(x, axis=[1], keepdims=True, mask=live)
        e = nl.exp(nl.subtract(x, top, mask=live), mask=live)
        total = nl.sum(e, axis=[1], keepdims=True, mask=live)
        nl.store(out[t * 128 + i_r, i_c], value=nl.divide(e, total, mask=live), mask=live)
    return out


def test_softmax_tutorial_bit_for_bit():
    a = np.random.default_rng(20).standard_normal((200, 96)).astype(F32) * F32(4)
    got = softmax_rows(a)
    e = exp32(a - a.max(axis=1, keepdims=True))
    want = e / fold(e)[:, None]
    np.testing.assert_array_equal(got, want)
    assert np.allclose(got.sum(axis=1), 1.0, rtol=1e-5)


# ------------------------------------------------------------------ LayerNorm v1: nki.language only
EPS = 1e-5


@nki.jit
def layernorm_v1(x, gamma, beta):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta per row, with nl.mean for the mean and the
    variance; gamma and beta loaded once and broadcast across the partitions; 128 rows per tile, the
    last tile masked."""
    rows, cols = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.load(gamma.reshape((1, cols))).broadcast_to((128, cols))
    b = nl.load(beta.reshape((1, cols))).broadcast_to((128, cols))
    i_r, i_c = nl.mgrid[0:128, 0:cols]
    for t in nl.affine_range(math.ceil(rows / 128)):
        live = t * 128 + i_r < rows
        tile = nl.load(x[t * 128 + i_r, i_c], mask=live)
        mean = nl.mean(tile, axis=[1], keepdims=True, mask=live)
        centred = nl.subtract(tile, mean, mask=live)
        var = nl.mean(nl.square(centred, mask=live), axis=[1], keepdims=True, mask=live)
        rstd = nl.rsqrt(nl.add(var, EPS, mask=live), mask=live)
        y = nl.multiply(centred, rstd, mask=live)
        y = nl.add(nl.multiply(y, g, mask=live), b, mask=live)
        nl.store(out[t * 128 + i_r, i_c], value=y, mask=live)
    return out


def layernorm_v1_reference(x, gamma, beta):
    n = F32(x.shape[1])
    mean = fold(x) / n
    centred = x - mean[:, None]
    var = fold(centred * centred) / n
    rstd = rsqrt32(var + F32(EPS))
    return (centred * rstd[:, None]) * gamma + beta


def _layernorm_inputs(seed: int):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((200, 600)) * 3 + 1).astype(F32)
    return x, rng.standard_normal(600).astype(F32), rng.standard_normal(600).astype(F32)


def test_layernorm_v1_tutorial_bit_for_bit():
    x, g, b = _layernorm_inputs(21)
    got = layernorm_v1(x, g, b)
    np.testing.assert_array_equal(got, layernorm_v1_reference(x, g, b))


# ------------------------------------------------------------------ LayerNorm v2: bn_stats/bn_aggr, one tensor_scalar
@nki.jit
def layernorm_v2(x, gamma, beta):
    """As v1, but the mean and the variance come from nisa.bn_stats on chunks of at most
    nl.tile_size.bn_stats_fmax elements and nisa.bn_aggr, and the shift and scale are one
    nisa.tensor_scalar (subtract the mean, multiply by the reciprocal root)."""
    rows, cols = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.load(gamma.reshape((1, cols))).broadcast_to((128, cols))
    b = nl.load(beta.reshape((1, cols))).broadcast_to((128, cols))
    fmax = nl.tile_size.bn_stats_fmax
    chunks = math.ceil(cols / fmax)
    i_p = nl.arange(128)[:, None]
    i_c = nl.arange(cols)[None, :]
    i_s = nl.arange(6)[None, :]
    for t in nl.affine_range(math.ceil(rows / 128)):
        live = t * 128 + i_p < rows
        tile = nl.load(x[t * 128 + i_p, i_c], mask=live)
        stats = nl.ndarray((128, 6 * chunks), dtype=nl.float32)
        for c in nl.affine_range(chunks):
            i_w = nl.arange(min(fmax, cols - c * fmax))[None, :]
            stats[i_p, c * 6 + i_s] = nisa.bn_stats(tile[i_p, c * fmax + i_w], mask=live)
        agg = nisa.bn_aggr(stats, mask=live)
        rstd = nl.rsqrt(nl.add(agg[:, 1:2], EPS, mask=live), mask=live)
        y = nisa.tensor_scalar(tile, op0=np.subtract, operand0=agg[:, 0:1], op1=np.multiply, operand1=rstd,
                               mask=live)
        y = nl.add(nl.multiply(y, g, mask=live), b, mask=live)
        nl.store(out[t * 128 + i_p, i_c], value=y, mask=live)
    return out


def bn_stats_reference(chunk):
    """docs/isa.md bn_stats: (count, mean, m2) of the even and of the odd columns, fp32 folds from +0."""
    out = []
    for group in (chunk[:, 0::2], chunk[:, 1::2]):
        count = F32(group.shape[1])
        mean = fold(np.concatenate([np.zeros((len(group), 1), F32), group], axis=1)) / count
        d = group - mean[:, None]
        m2 = fold(np.concatenate([np.zeros((len(group), 1), F32), d * d], axis=1))
        out.append((np.full(len(group), count, F32), mean, m2))
    return out


def layernorm_v2_reference(x, gamma, beta, fmax=512):
    triples = [t for c in range(0, x.shape[1], fmax) for t in bn_stats_reference(x[:, c:c + fmax])]
    zero = np.zeros(len(x), F32)
    n, total = zero, zero
    for count, _, _ in triples:
        n = n + count
    for count, mean_j, _ in triples:
        total = total + count * mean_j
    mean = total / n
    m2 = zero
    for count, mean_j, m2_j in triples:
        d = mean_j - mean
        m2 = m2 + (m2_j + count * (d * d))
    var = m2 / n
    rstd = rsqrt32(var + F32(EPS))
    return ((x - mean[:, None]) * rstd[:, None]) * gamma + beta


def test_layernorm_v2_tutorial_bit_for_bit():
    x, g, b = _layernorm_inputs(22)
    got = layernorm_v2(x, g, b)
    np.testing.assert_array_equal(got, layernorm_v2_reference(x, g, b))
    mnemonics = [i.mnemonic for i in nki.last_run().program.instructions]
    assert mnemonics.count("bn_stats") == 2 * 2 and mnemonics.count("bn_aggr") == 2  # 600 = 512 + 88, two tiles
    # and both versions compute the same LayerNorm, up to their different roundings
    np.testing.assert_allclose(got, layernorm_v1(x, g, b), rtol=1e-5, atol=2e-5)


# ------------------------------------------------------------------ fused self-attention (Stable Diffusion), causal
SCALE = 0.125  # the tutorial's softmax scale, 1 / sqrt(d_head = 64), multiplied onto Q
MASKED = -9984.0  # the tutorial's stand-in for -inf on masked scores


@nki.jit
def sd_attention(q, k, v, causal=False):
    """softmax(Q K^T * scale) V for one head, [seqlen, d_head] in and out, 128 query rows at a time:
    the scores of a query tile against every key tile (Tensor engine, bf16 in, fp32 in PSUM), the
    causal mask by nisa.affine_select, the row maximum as the minimum of per-tile negated maxima, the
    exponentials with that bias (Scalar), their row sums, the transposed probabilities times V
    accumulated in PSUM, and the division by the row sums delayed to the [d_head, 128] result."""
    seqlen, d_head = q.shape
    tiles = seqlen // 128
    pe = nl.bfloat16
    out = nl.ndarray((seqlen, d_head), dtype=q.dtype, buffer=nl.shared_hbm)

    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(128)[None, :]
    i_d = nl.arange(d_head)[None, :]
    i_dp = nl.arange(d_head)[:, None]

    # V as [key row in tile, key tile, d_head]; Q^T (scaled) and K^T as one [d_head, 128] tile per tile
    v_sb = nl.ndarray((nl.par_dim(128), tiles, d_head), dtype=pe)
    q_t = nl.ndarray((tiles, nl.par_dim(d_head), 128), dtype=pe)
    k_t = nl.ndarray((tiles, nl.par_dim(d_head), 128), dtype=pe)
    for j in nl.affine_range(tiles):
        v_sb[i_p, j, i_d] = nl.load(v[j * 128 + i_p, i_d], dtype=pe)
        q_t[j, i_dp, i_f] = nl.load_transpose2d(q[j * 128 + i_p, i_d], dtype=pe) * SCALE
        k_t[j, i_dp, i_f] = nl.load_transpose2d(k[j * 128 + i_p, i_d], dtype=pe)

    for i in nl.affine_range(tiles):
        scores = nl.ndarray((nl.par_dim(128), seqlen), dtype=q.dtype)
        neg_max = nl.ndarray((nl.par_dim(128), tiles), dtype=q.dtype)
        for j in nl.affine_range(tiles):
            s = nisa.nc_matmul(q_t[i, i_dp, i_f], k_t[j, i_dp, i_f])  # [query, key] in PSUM
            if causal:
                scores[i_p, j * 128 + i_f] = nisa.affine_select(pred=(i * 128 + i_p >= j * 128 + i_f),
                                                                on_true_tile=s, on_false_value=MASKED,
                                                                dtype=q.dtype)
            else:
                scores[i_p, j * 128 + i_f] = nl.copy(s, dtype=q.dtype)
            neg_max[i_p, j] = nisa.tensor_reduce(np.max, data=scores[i_p, j * 128 + i_f], axis=(1,),
                                                 negate=True, keepdims=True)
        row_neg_max = nisa.tensor_reduce(np.min, data=neg_max, axis=(1,), keepdims=True)
        e = nisa.activation(np.exp, data=scores, bias=row_neg_max, scale=1.0)
        row_sum = nisa.tensor_reduce(np.add, data=e, axis=(1,), keepdims=True)
        probs = nl.copy(e, dtype=pe)
        inv = (1.0 / row_sum).broadcast_to((128, d_head))

        acc = nl.zeros((nl.par_dim(d_head), 128), dtype=nl.float32, buffer=nl.psum)
        for j in nl.affine_range(tiles):
            p_t = nl.copy(nisa.nc_transpose(probs[i_p, j * 128 + i_f]), dtype=pe)  # [key, query]
            acc += nisa.nc_matmul(v_sb[i_p, j, i_d], p_t)  # [d_head, query]
        res = nl.copy(acc, dtype=q.dtype) * nisa.nc_transpose(nl.copy(inv, dtype=q.dtype))
        nl.store(out[i * 128 + i_f, i_dp], value=res)
    return out


def attention_reference(q, k, v, causal):
    """The kernel's roundings (bf16 operands of both matmuls, fp32 scores, exponentials rounded once,
    fp32 row sums and reciprocal) with the matmuls' sums in float64: the kernel's fp32 PSUM sums
    differ from these by rounding only."""
    qs = (q.astype(BF16).astype(F32) * F32(SCALE)).astype(BF16).astype(F64)
    s = (qs @ k.astype(BF16).astype(F64).T).astype(F32)
    if causal:
        s = np.where(np.tri(len(q), dtype=bool), s, F32(MASKED))
    e = exp32(s - s.max(axis=1, keepdims=True))
    inv = F32(1) / fold(e)
    r = (e.astype(BF16).astype(F64) @ v.astype(BF16).astype(F64)).astype(F32)
    return r * inv[:, None]


def test_sd_attention_tutorial_with_and_without_the_causal_mask():
    rng = np.random.default_rng(23)
    q, k, v = (rng.random((256, 64)).astype(F32) for _ in range(3))
    for causal in (False, True):
        got = sd_attention(q, k, v, causal)
        want = attention_reference(q, k, v, causal)
        # the PSUM sums are fp32 (the reference's float64), and a score one ulp off can round its
        # probability to the neighbouring bf16: measured at most 13 fp32 ulps apart
        assert int(ulp_distance(got, want, dtypes.FLOAT32).max()) <= 32
        mnemonics = [i.mnemonic for i in nki.last_run().program.instructions]
        assert mnemonics.count("affine_select") == (4 if causal else 0)  # 2 query tiles x 2 key tiles
    np.testing.assert_array_equal(got[0], v[0].astype(BF16).astype(F32))  # causal: row 0 sees key 0 only


@nki.jit
def transposed_load(x):
    out = nl.ndarray((x.shape[1], x.shape[0]), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load_transpose2d(x, dtype=nl.bfloat16))
    return out


def test_load_transpose2d_is_one_dma():
    x = np.random.default_rng(24).standard_normal((96, 40)).astype(F32)
    np.testing.assert_array_equal(transposed_load(x), x.T.astype(BF16))
    assert [i.mnemonic for i in nki.last_run().program.instructions] == ["dma_copy", "dma_copy"]


@nki.jit
def reduce_with(x, op):
    out = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.tensor_reduce(op, data=nl.load(x), axis=(1,), keepdims=True))
    return out


def test_numpy_reductions_name_alu_operators():
    x = np.random.default_rng(25).standard_normal((16, 8)).astype(F32)
    for op, want in ((np.max, x.max(1)), (np.amin, x.min(1)), (nl.max, x.max(1))):
        np.testing.assert_array_equal(reduce_with(x, op)[:, 0], want)
    with pytest.raises(AsmError, match=r"'mean' is not an operator ncsim has; ALU operators: .*maximum"):
        reduce_with(x, np.mean)


@nki.jit
def bad_reshape(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, value=t.reshape((128, 7)))
    return out


def test_an_error_raised_without_a_place_points_at_the_kernels_line():
    """Indexing and reshape raise their errors without a place; the tracer puts them at the kernel's
    line (they had none: `error: cannot reshape ...`, no file, no line)."""
    with pytest.raises(AsmError) as e:
        bad_reshape(np.ones((128, 8), F32))
    assert e.value.loc is not None and e.value.loc.file == __file__
    assert "t.reshape((128, 7))" in e.value.loc.text and "cannot reshape [128, 8]" in e.value.message
