"""More of the NKI tutorials' kernels, written here from their documented algorithms (aws-neuron-sdk
"NKI tutorials": average pool 2D, fused Mamba v1), run on ncsim and checked against numpy bit for bit.
Shapes are reduced."""

from __future__ import annotations

import numpy as np

import ncsim.nki.isa as nisa
import ncsim.nki.language as nl
from ncsim import nki

F32 = np.float32


# ------------------------------------------------------------------ average pool 2D (mgrid, reduce over axes 2 and 4)
@nki.jit
def avg_pool(x, k):
    """Channels on partitions; every [k, k] window of each channel's image averaged: the image seen
    as a 5-D grid (channel, out row, row in window, out column, column in window) and summed over
    the two window axes, which are not the last ones."""
    c, h, w = x.shape
    out = nl.ndarray((c, h // k, w // k), dtype=x.dtype, buffer=nl.shared_hbm)
    ic, ir, iwr, icol, iwc = nl.mgrid[0:c, 0:h // k, 0:k, 0:w // k, 0:k]
    t = nl.load(x)
    nl.store(out, nl.sum(t[ic, k * ir + iwr, k * icol + iwc], axis=[2, 4]) / (k * k))
    return out


def test_average_pool_reduces_two_inner_axes():
    x = np.random.default_rng(10).standard_normal((8, 12, 12)).astype(F32)
    got = avg_pool(x, 3)
    win = x.reshape(8, 4, 3, 4, 3).transpose(0, 1, 3, 2, 4).reshape(8, 4, 4, 9)
    acc = np.zeros((8, 4, 4), F32)
    for i in range(9):  # tensor_reduce folds the window row by row, in fp32
        acc = acc + win[..., i]
    np.testing.assert_array_equal(got, acc / F32(9))


# ------------------------------------------------------------------ fused Mamba v1 (block dimensions, scan)
@nki.jit
def mamba(delta, u, a, b, c):
    """out[ch, t] = sum over states s of C[s, t] * h_s[ch, t], with h_s[t] = exp(delta * A[ch, s]) *
    h_s[t-1] + delta * u * B[s, t]: one scan per state and channel tile, summed into a tensor with a
    block dimension (one tile per channel tile)."""
    channels, seq = delta.shape
    states = a.shape[1]
    out = nl.ndarray((channels, seq), dtype=delta.dtype, buffer=nl.shared_hbm)
    tiles = channels // 128
    acc = nl.zeros((tiles, nl.par_dim(128), seq), dtype=delta.dtype)
    for s in nl.affine_range(states):
        for i in nl.affine_range(tiles):
            rows = slice(i * 128, (i + 1) * 128)
            d = nl.load(delta[rows, 0:seq])
            decay = nisa.activation(op=nl.exp, data=d, scale=nl.load(a[rows, s]))
            bs = nl.load(b[s:s + 1, 0:seq]).broadcast_to((128, seq))
            drive = nisa.tensor_tensor(nisa.tensor_tensor(d, nl.load(u[rows, 0:seq]), op=nl.multiply), bs,
                                       op=nl.multiply)
            h = nisa.tensor_tensor_scan(decay, drive, initial=0, op0=np.multiply, op1=np.add)
            cs = nl.load(c[s:s + 1, 0:seq]).broadcast_to((128, seq))
            acc[i, 0:128, 0:seq] += nisa.tensor_tensor(h, cs, op=nl.multiply)
    for i in nl.affine_range(tiles):
        nl.store(out[i * 128:(i + 1) * 128, 0:seq], acc[i, 0:128, 0:seq])
    return out


def test_mamba_v1_with_a_block_dimension():
    rng = np.random.default_rng(11)
    ch, seq, st = 256, 64, 3
    delta = (rng.random((ch, seq)) * 0.1).astype(F32)
    u = rng.standard_normal((ch, seq)).astype(F32)
    a = -rng.random((ch, st)).astype(F32)
    b = rng.standard_normal((st, seq)).astype(F32)
    c = rng.standard_normal((st, seq)).astype(F32)
    got = mamba(delta, u, a, b, c)
    want = np.zeros((ch, seq), F32)
    for s in range(st):
        decay = np.exp((delta * a[:, s:s + 1]).astype(np.float64)).astype(F32)
        drive = (delta * u) * b[s]
        h, hs = np.zeros(ch, F32), []
        for t in range(seq):
            h = decay[:, t] * h + drive[:, t]
            hs.append(h)
        want = want + np.stack(hs, 1) * c[s]
    np.testing.assert_array_equal(got, want)
    names = {t.name for t in nki.last_run().program.tensors.values()}
    assert sum(n.startswith("test_tutorials_more_") and "sbuf" in n for n in names) >= 2  # one tile per block
