"""The directly allocated fused self-attention kernel for the small heads of Stable Diffusion of
aws-neuron/nki-samples (src/nki_samples/reference/allocated_attention.py,
`allocated_fused_self_attn_for_SD_small_head_size`, before the reference kernels left the
repository in January 2026), written here from the algorithm its docstring and comments document,
for the latency bounds of test/unit/test_allocated_SD_attention_small_head.py
(tests/nki/published_latencies.toml). out = (softmax(0.125 * Q^T K) V)^T for one batch sample:

- q and k are [d_head = 128, seq], v [seq, d_head], out [d_head, seq]; seq a multiple of 1024; the
  Tensor engine's inputs in bf16 (the kernel's default mixed precision), everything else in fp32;
- every SBUF and PSUM tensor placed by hand (ncsim.nki.compiler): SBUF tensors one after another from
  byte 0 of each partition, the per-query-tile ones with two physical tiles (double buffering),
  except the scores' one (the kernel's comment: double buffering it made the scheduler stall); PSUM
  banks 0-3 and 4-7 for the two interleaved query tiles' score blocks and transposes, banks 1 and 5,
  2 and 7 for their outputs and their transposed reciprocals;
- a 128 x 128 identity (a shared constant) loaded in bf16 and in fp32, every tile of v, q (scaled
  by 0.125 in place) and k loaded before the main loop;
- per pair of query tiles, per tile of the pair: for each 512-key block one matmul into PSUM and one
  tensor_scalar_reduce that copies it to the row of scores while taking its maximum; the maximum of
  those negated; per 1024 keys one activation_reduce (exp with the negated maximum as bias, and the
  sum) into a bf16 row; the sum of the partial sums, its reciprocal, broadcast to [128, d_head] and
  copied; each 128 x 128 block of the bf16 row transposed by a matmul against the identity, four
  into one PSUM bank, each bank copied to SBUF; 32 matmuls with v's tiles accumulating
  [d_head, 128] in PSUM; that copied out on Vector, the reciprocals transposed by a matmul against
  the fp32 identity, the product of the two, stored into out's columns.
"""

from __future__ import annotations

import numpy as np

import ncsim.nki.compiler as ncc
import ncsim.nki.isa as nisa
import ncsim.nki.language as nl
from ncsim import nki
from ncsim.nki.typing import tensor

TILE = 128  # queries, values and transposed blocks per tile
KBLOCK = 512  # keys per score matmul (one PSUM bank of fp32)
RBLOCK = 1024  # keys per exp-and-sum instruction
SCALE = 0.125  # the softmax scale, multiplied onto q


class _Arena:
    """SBUF bytes per partition handed out in order (the kernel's running address)."""

    def __init__(self) -> None:
        self.addr = 0

    def take(self, nbytes: int, tiles: int = 1) -> ncc.Direct:
        alloc = ncc.sbuf.mod_alloc(base_addr=self.addr, num_free_tiles=(tiles,))
        self.addr += nbytes * tiles
        return alloc


def _bank(banks: dict[tuple[int, ...], int]):
    """A PSUM allocation function putting block idx in bank banks[idx]."""
    return lambda idx, pdim_size, fdim_size: (banks[tuple(idx)], 0, 0)


@nki.jit
def sd_attention_allocated(q, k, v):
    d, seq = q.shape[1], q.shape[2]
    pe, f32 = nl.bfloat16, nl.float32
    nq, nk, nr = seq // TILE, seq // KBLOCK, seq // RBLOCK
    b = nl.program_id(axis=0)
    out = nl.ndarray((q.shape[0], d, seq), dtype=q.dtype, buffer=nl.shared_hbm)
    sb = _Arena()

    eye = nl.shared_constant(np.identity(TILE, dtype=np.int8), dtype=pe)
    eye_pe = nl.ndarray((nl.par_dim(TILE), TILE), dtype=pe, buffer=sb.take(TILE * 2))
    eye_pe[...] = nl.load(eye)
    eye_f32 = nl.ndarray((nl.par_dim(TILE), TILE), dtype=f32, buffer=sb.take(TILE * 4))
    eye_f32[...] = nl.load(eye, dtype=f32)

    v_sb = nl.ndarray((nq, nl.par_dim(TILE), d), dtype=pe, buffer=sb.take(d * 2, nq))
    for j in nl.affine_range(nq):
        v_sb[j] = nl.load(v[b, j * TILE:(j + 1) * TILE, 0:d], dtype=pe)
    q_sb = nl.ndarray((nq, nl.par_dim(d), TILE), dtype=pe, buffer=sb.take(TILE * 2, nq))
    for i in nl.affine_range(nq):
        q_sb[i] = nl.load(q[b, 0:d, i * TILE:(i + 1) * TILE], dtype=pe)
        q_sb[i] = nl.multiply(q_sb[i], SCALE)
    k_sb = nl.ndarray((nk, nl.par_dim(d), KBLOCK), dtype=pe, buffer=sb.take(KBLOCK * 2, nk))
    for j in nl.affine_range(nk):
        k_sb[j] = nl.load(k[b, 0:d, j * KBLOCK:(j + 1) * KBLOCK], dtype=pe)

    for pair in nl.affine_range(nq // 2):
        scores = nl.ndarray((2, nl.par_dim(TILE), seq), dtype=f32, buffer=sb.take(seq * 4, 1))
        exps = nl.ndarray((2, nl.par_dim(TILE), seq), dtype=pe, buffer=sb.take(seq * 2, 2))
        probs_t = nl.ndarray((2, nl.par_dim(TILE), seq), dtype=pe, buffer=sb.take(seq * 2, 2))
        inv_wide = nl.ndarray((2, nl.par_dim(TILE), d), dtype=f32, buffer=sb.take(d * 4, 2))
        inv_bcast = nl.ndarray((2, nl.par_dim(TILE), d), dtype=f32, buffer=sb.take(d * 4, 2))
        res = nl.ndarray((2, nl.par_dim(d), TILE), dtype=f32, buffer=sb.take(TILE * 4, 2))
        res_div = nl.ndarray((2, nl.par_dim(TILE), d), dtype=f32, buffer=sb.take(d * 4, 2))
        block_max = nl.ndarray((2, nl.par_dim(TILE), nk), dtype=f32, buffer=sb.take(nk * 4, 2))
        part_sum = nl.ndarray((2, nl.par_dim(TILE), nr), dtype=f32, buffer=sb.take(nr * 4, 2))
        neg_max = nl.ndarray((2, nl.par_dim(TILE), 1), dtype=f32, buffer=sb.take(4, 2))
        total = nl.ndarray((2, nl.par_dim(TILE), 1), dtype=f32, buffer=sb.take(4, 2))
        inv = nl.ndarray((2, nl.par_dim(TILE), 1), dtype=f32, buffer=sb.take(4, 2))

        qk_ps = nl.ndarray((2, nk, nl.par_dim(TILE), KBLOCK), dtype=f32,
                           buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(2, 4)))
        tp_ps = nl.ndarray((2, nk, nl.par_dim(TILE), KBLOCK), dtype=f32,
                           buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(2, 4)))
        out_ps = nl.ndarray((2, nl.par_dim(d), TILE), dtype=f32, buffer=ncc.psum.alloc(_bank({(0,): 1, (1,): 5})))
        inv_ps = nl.ndarray((2, nl.par_dim(TILE), d), dtype=f32, buffer=ncc.psum.alloc(_bank({(0,): 2, (1,): 7})))

        for g in nl.affine_range(2):
            qt = pair * 2 + g
            for j in nl.affine_range(nk):
                qk_ps[g, j] = nisa.nc_matmul(stationary=q_sb[qt], moving=k_sb[j])
                scores[g, 0:TILE, j * KBLOCK:(j + 1) * KBLOCK] = nisa.tensor_scalar_reduce(
                    data=qk_ps[g, j], op0=np.multiply, operand0=1.0, reduce_op=np.max,
                    reduce_res=block_max[g, 0:TILE, j:j + 1], dtype=f32)
            neg_max[g] = nisa.tensor_reduce(np.max, data=block_max[g], axis=(1,), dtype=f32, negate=True,
                                            keepdims=True)
            for r in nl.affine_range(nr):
                exps[g, 0:TILE, r * RBLOCK:(r + 1) * RBLOCK] = nisa.activation_reduce(
                    np.exp, data=scores[g, 0:TILE, r * RBLOCK:(r + 1) * RBLOCK], reduce_op=np.add,
                    reduce_res=part_sum[g, 0:TILE, r:r + 1], bias=neg_max[g], scale=1.0)
            total[g] = nisa.tensor_reduce(np.add, data=part_sum[g], axis=(1,), dtype=f32, keepdims=True)
            inv[g] = nl.divide(1.0, total[g])
            inv_wide[g] = inv[g].broadcast_to((TILE, d))
            inv_bcast[g] = nl.copy(inv_wide[g], dtype=f32)

            for c in nl.affine_range(nk):  # transposes, four 128-key blocks to a PSUM bank
                for o in nl.affine_range(KBLOCK // TILE):
                    kt = c * (KBLOCK // TILE) + o
                    tp_ps[g, c, 0:TILE, o * TILE:(o + 1) * TILE] = nisa.nc_matmul(
                        exps[g, 0:TILE, kt * TILE:(kt + 1) * TILE], eye_pe)
                probs_t[g, 0:TILE, c * KBLOCK:(c + 1) * KBLOCK] = nl.copy(tp_ps[g, c])

            for j in nl.affine_range(nq):  # [d_head, queries] += v_j^T probs_j^T, contracting 128 keys
                out_ps[g] += nisa.nc_matmul(stationary=v_sb[j], moving=probs_t[g, 0:TILE, j * TILE:(j + 1) * TILE])
            res[g] = nisa.tensor_copy(out_ps[g], dtype=f32, engine=nisa.vector_engine)
            inv_ps[g] = nisa.nc_matmul(inv_bcast[g], eye_f32)
            res_div[g] = res[g] * inv_ps[g]
            nl.store(out[b, 0:d, qt * TILE:(qt + 1) * TILE], value=res_div[g])
    return out


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The kernel's result in numpy (float64): (softmax(0.125 * q^T k) v)^T per batch sample."""
    s = np.einsum("bdq,bdk->bqk", q.astype(np.float64) * SCALE, k.astype(np.float64))
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("bqk,bkd->bdq", p, v.astype(np.float64))


def _case(seq: int, dtype):
    return lambda: (sd_attention_allocated[1], (tensor[[1, 128, seq], dtype], tensor[[1, 128, seq], dtype],
                                                tensor[[1, seq, 128], dtype]))


# test/unit/test_allocated_SD_attention_small_head.py's perf cases: batch 1, seq_len, d_head 128, dtype
CASES = {
    "s4096_f32": _case(4096, nl.float32),
    "s4096_bf16": _case(4096, nl.bfloat16),
    "s5120_bf16": _case(5120, nl.bfloat16),
}
