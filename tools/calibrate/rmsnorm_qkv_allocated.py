"""The directly allocated RMSNorm + QKV projection kernel of aws-neuron/nki-samples
(src/nki_samples/reference/allocated_fused_linear.py, `allocated_fused_rms_norm_qkv`, before the
reference kernels left the repository in January 2026), written here from the algorithm its docstring
and comments document, for the latency bounds of test/unit/test_rmsnorm_qkv.py
(tests/nki/published_latencies.toml). out = RMSNorm(hidden) @ w, the norm's gamma already in w:

- hidden is [batch, seq, dim] (fp16 or bf16), w [dim, head_dim <= 512], out [batch, seq, head_dim];
  the norm in fp32 (sum of squares, mean, epsilon, reciprocal root);
- every SBUF and PSUM tensor placed by hand (ncsim.nki.compiler): a 128 x 128 identity (a shared
  constant) at byte 0, a zero bias column after it, the rows of hidden double buffered, one set of
  per-tile buffers (the squares, the norm's column, the normalised rows, the output row) after them,
  the weights last; the transposes' PSUM tiles all in bank 0, the product's in bank 7;
- per batch sample, every 128-row tile of w loaded first; per pair of 128-row tiles of hidden, per
  tile of the pair that lies in seq (of one past it, only the copy of the product's bank, the one
  step the documented kernel leaves unmasked): the rows loaded, one activation_reduce (square, summed) on
  Scalar, the mean plus epsilon on Vector, its reciprocal root on Scalar; per 512 columns, the rows
  times that column on Vector into the input dtype, four 128 x 128 transposes by matmul against the
  identity (is_transpose) into one PSUM bank, copied back over the same columns; then dim / 128
  matmuls accumulating [128, head_dim] in PSUM, copied to SBUF and stored.
"""

from __future__ import annotations

import numpy as np

import ncsim.nki.compiler as ncc
import ncsim.nki.isa as nisa
import ncsim.nki.language as nl
from ncsim import nki
from ncsim.nki.typing import tensor

P = 128  # partitions: rows of hidden per tile, rows of w per tile
F = 512  # columns per PSUM bank of fp32 (nl.tile_size.psum_fmax)
EPS = 1e-6


@nki.jit
def rmsnorm_qkv_allocated(hidden, w):
    batch, seq, dim = hidden.shape
    heads = w.shape[1]
    m_tiles, f_blocks, s_tiles = dim // P, dim // F, -(-seq // P)
    dt = hidden.dtype
    out = nl.ndarray((batch, seq, heads), dtype=dt, buffer=nl.shared_hbm)

    # SBUF bytes per partition, in order: identity, zero column, two input rows, squares, the norm's
    # column, normalised rows, output row, weights
    a_in = P * 2 + 4
    a_sq = a_in + 2 * dim * 2
    a_col = a_sq + dim * 4
    a_norm = a_col + 4
    a_out = a_norm + dim * 2
    a_w = a_out + F * 2

    eye = nl.shared_constant(np.identity(P, dtype=np.int8), dtype=w.dtype)
    eye_sb = nl.ndarray((nl.par_dim(P), P), dtype=w.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    eye_sb[...] = nl.load(eye, dtype=w.dtype)
    zero = nl.ndarray((nl.par_dim(P), 1), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=P * 2))
    zero[...] = 0

    for b in nl.affine_range(batch):
        w_sb = nl.ndarray((m_tiles, nl.par_dim(P), F), dtype=w.dtype,
                          buffer=ncc.sbuf.mod_alloc(base_addr=a_w, num_free_tiles=(m_tiles,)))
        ip, jf = nl.mgrid[0:P, 0:F]
        for m in nl.affine_range(m_tiles):
            w_sb[m, ip, jf] = nl.load(w[m * P + ip, jf], mask=jf < heads)
        for pair in nl.affine_range(-(-s_tiles // 2)):
            rows = nl.ndarray((2, nl.par_dim(P), dim), dtype=dt, buffer=ncc.sbuf.mod_alloc(base_addr=a_in,
                                                                                           num_free_tiles=(2,)))
            for g in nl.affine_range(2):
                t = pair * 2 + g
                squares = nl.ndarray((nl.par_dim(P), dim), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=a_sq))
                col = nl.ndarray((nl.par_dim(P), 1), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=a_col))
                norm = nl.ndarray((nl.par_dim(P), dim), dtype=w.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=a_norm))
                res = nl.ndarray((nl.par_dim(P), F), dtype=w.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=a_out))
                tp_ps = nl.ndarray((f_blocks, nl.par_dim(P), F), dtype=nl.float32,
                                   buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(1,)))
                acc_ps = nl.ndarray((1, nl.par_dim(P), F), dtype=nl.float32,
                                    buffer=ncc.psum.mod_alloc(base_bank=7, num_bank_tiles=(1,)))

                if t >= s_tiles:
                    # the second tile of the last pair lies past seq: the documented kernel masks
                    # every step of it but the copy of the product's bank, which the chip runs
                    res[...] = nl.copy(acc_ps[0], dtype=dt)
                    continue
                rows[g] = nl.load(hidden[b, t * P:(t + 1) * P, 0:dim])
                squares[...] = nisa.activation_reduce(op=nl.square, data=rows[g], reduce_op=np.add,
                                                      reduce_res=col[...], bias=zero[...])
                col[...] = nisa.tensor_scalar(col[...], np.multiply, 1.0 / dim, op1=np.add, operand1=EPS)
                col[...] = nisa.activation(op=nl.rsqrt, data=col[...], bias=zero[...])
                for c in nl.affine_range(f_blocks):
                    norm[0:P, c * F:(c + 1) * F] = nl.multiply(rows[g, 0:P, c * F:(c + 1) * F], col[...],
                                                               dtype=w.dtype)
                    for o in nl.affine_range(F // P):
                        k = c * (F // P) + o
                        tp_ps[c, 0:P, o * P:(o + 1) * P] = nisa.nc_matmul(norm[0:P, k * P:(k + 1) * P], eye_sb[...],
                                                                          is_transpose=True)
                    norm[0:P, c * F:(c + 1) * F] = nl.copy(tp_ps[c], dtype=dt)
                for m in nl.affine_range(m_tiles):
                    acc_ps[0] += nisa.nc_matmul(norm[0:P, m * P:(m + 1) * P], w_sb[m])
                res[...] = nl.copy(acc_ps[0], dtype=dt)
                nl.store(out[b, t * P + ip, jf], value=res[ip, jf], mask=jf < heads)
    return out


def reference(hidden: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The kernel's result in numpy (float64): hidden / sqrt(mean(hidden^2) + eps) @ w."""
    h = hidden.astype(np.float64)
    return (h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + EPS)) @ w.astype(np.float64)


def _case(seq: int, dim: int, heads: int, dtype):
    return lambda: (rmsnorm_qkv_allocated, (tensor[[1, seq, dim], dtype], tensor[[dim, heads], dtype]))


# test/unit/test_rmsnorm_qkv.py's perf cases: batch 1, seqlen, dim, d_head, dtype
CASES = {
    "s128_d512_h512_f16": _case(128, 512, 512, nl.float16),
    "s512_d1024_h384_bf16": _case(512, 1024, 384, nl.bfloat16),
    "s128_d1024_h512_bf16": _case(128, 1024, 512, nl.bfloat16),
}
