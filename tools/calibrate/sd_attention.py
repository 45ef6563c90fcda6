"""The fused self-attention kernel for the small heads of Stable Diffusion of aws-neuron/nki-samples
(src/nki_samples/reference/attention.py, `fused_self_attn_for_SD_small_head_size`, before the
reference kernels left the repository in January 2026), written here from the algorithm its docstring
and comments document, for the latency bounds of test/unit/test_SD_attention_small_head.py
(tests/nki/published_latencies.toml). out = softmax(0.125 * Q^T K^T) V for one batch sample:

- q is [d_head, seq], k and v [seq, d_head], out [seq, d_head]; d_head <= 128, the sequence cut into
  tiles of 128; the Tensor engine's inputs in bf16 (the kernel's default mixed precision), the
  scores, their maxima and sums in the input dtype, the matmuls accumulating in fp32 PSUM;
- before the main loop, every tile of v is loaded (resident in SBUF for the whole kernel), every
  tile of q loaded and multiplied by 0.125, and every tile of k loaded transposed ([d_head, 128]);
- for each tile of 128 queries: 32 matmuls (contracting d_head) each into a PSUM tile copied into the
  row of scores [128, seq], and the negated maximum of each such block taken on Vector as it comes;
  the minimum of those (minus the row's maximum), one exp over the whole row on Scalar with it as
  bias, its sum, a bf16 copy, the reciprocal of the sum broadcast to [128, d_head]; each 128 x 128
  block of the bf16 row transposed on the Tensor engine, then the matmuls with v's tiles
  accumulating [d_head, 128] in PSUM (contracting the keys); that copied out, multiplied by the
  transposed reciprocals and stored transposed into out's [128, d_head] rows.

The documented kernel's comments say it counts on the compiler to merge the exponential with the
sum into one Scalar instruction, and leave the PSUM copy of each score block separate from its
maximum, as a copy a TensorScalarCacheReduce instruction would save; ncsim emits each call as
written, the copies on Vector (docs/nki.md, engine policy). The suite's cases are that kernel.

`attention_kernel(...)` builds the same kernel with decisions NKI's compiler may make written out
(docs/timing.md "Calibration" gives the evidence for each): `merge_exp_sum` (the exponential and its
row sum in one `activation_reduce`, as the kernel's comment assumes), `scores_on_scalar` (each score
block's PSUM copy by the Scalar engine, `activation` copy, the v2 form of nki.isa.tensor_copy on
Scalar, whose default engine the compiler "selects ... based on engine workload"),
`transposes_on_scalar` (every second block's transposed probabilities copied out of PSUM by Scalar,
the rest by Vector) and `merge_max` (the copy and the block's maximum in one `tensor_scalar_reduce`,
the comment's TODO, which the compiler does not do for it). Their values are the written kernel's.

    .venv/bin/python tools/calibrate/sd_attention.py   # the three cases under each set of decisions
"""

from __future__ import annotations

import numpy as np

import ncsim.nki.isa as nisa
import ncsim.nki.language as nl
from ncsim import nki
from ncsim.nki.typing import tensor

TILE = 128  # queries, keys and values per tile (the kernel's fixed tile size)
SCALE = 0.125  # the softmax scale, multiplied onto q


def attention_kernel(*, merge_exp_sum: bool = False, scores_on_scalar: bool = False,
                     transposes_on_scalar: bool = False, merge_max: bool = False):
    """The kernel, with the compiler decisions named (module docstring) written out; all False: as written."""

    def score_copy(block, dt):
        if scores_on_scalar:
            return nisa.activation(nl.copy, data=block, dtype=dt)
        return nl.copy(block, dtype=dt)

    @nki.jit
    def sd_attention(q, k, v):
        d, seq = q.shape[1], q.shape[2]
        dt = q.dtype
        pe = nl.bfloat16  # the Tensor engine's inputs (mixed precision)
        n = seq // TILE
        b = nl.program_id(axis=0)
        out = nl.ndarray((q.shape[0], seq, d), dtype=dt, buffer=nl.shared_hbm)

        v_sb = nl.ndarray((nl.par_dim(TILE), n, d), dtype=pe)  # [keys, tile, d_head]
        for j in nl.affine_range(n):
            v_sb[0:TILE, j, 0:d] = nl.load(v[b, j * TILE:(j + 1) * TILE, 0:d], dtype=pe)
        q_sb = nl.ndarray((n, nl.par_dim(d), TILE), dtype=pe)
        for i in nl.affine_range(n):
            q_sb[i, 0:d, 0:TILE] = nl.load(q[b, 0:d, i * TILE:(i + 1) * TILE], dtype=pe) * SCALE
        kt_sb = nl.ndarray((n, nl.par_dim(d), TILE), dtype=pe)
        for j in nl.affine_range(n):
            kt_sb[j, 0:d, 0:TILE] = nl.load_transpose2d(k[b, j * TILE:(j + 1) * TILE, 0:d], dtype=pe)

        for i in nl.affine_range(n):
            scores = nl.ndarray((nl.par_dim(TILE), seq), dtype=dt)
            neg_max = nl.ndarray((nl.par_dim(TILE), n), dtype=dt)  # block maxima when merge_max
            for j in nl.affine_range(n):
                block = nl.zeros((nl.par_dim(TILE), TILE), dtype=np.float32, buffer=nl.psum)
                block[0:TILE, 0:TILE] += nisa.nc_matmul(stationary=q_sb[i, 0:d, 0:TILE], moving=kt_sb[j, 0:d, 0:TILE])
                if merge_max:
                    scores[0:TILE, j * TILE:(j + 1) * TILE] = nisa.tensor_scalar_reduce(
                        data=block, op0=np.multiply, operand0=1.0, reduce_op=np.max,
                        reduce_res=neg_max[0:TILE, j:j + 1], dtype=dt)
                else:
                    scores[0:TILE, j * TILE:(j + 1) * TILE] = score_copy(block, dt)
                    neg_max[0:TILE, j:j + 1] = nisa.tensor_reduce(np.max, data=scores[0:TILE, j * TILE:(j + 1) * TILE],
                                                                  axis=(1,), dtype=dt, negate=True)
            if merge_max:
                row_neg_max = nisa.tensor_reduce(np.max, data=neg_max, axis=(1,), dtype=dt, negate=True)
            else:
                row_neg_max = nisa.tensor_reduce(np.min, data=neg_max, axis=(1,), dtype=dt)
            probs = nl.ndarray((nl.par_dim(TILE), seq), dtype=pe)
            if merge_exp_sum:
                sums = nl.ndarray((nl.par_dim(TILE), 1), dtype=dt)
                probs[0:TILE, 0:seq] = nisa.activation_reduce(np.exp, data=scores, bias=row_neg_max, scale=1.0,
                                                              reduce_op=np.add, reduce_res=sums, dtype=pe)
            else:
                exps = nisa.activation(np.exp, data=scores, bias=row_neg_max, scale=1.0)
                sums = nisa.tensor_reduce(np.add, data=exps, axis=(1,), dtype=dt)
                probs[0:TILE, 0:seq] = nl.copy(exps, dtype=pe)
            inv = nl.ndarray((nl.par_dim(TILE), d), dtype=dt)
            inv[0:TILE, 0:d] = nl.copy((1.0 / sums).broadcast_to((TILE, d)), dtype=dt)

            probs_t = nl.ndarray((nl.par_dim(TILE), n, TILE), dtype=pe)  # [keys, tile, queries]
            for j in nl.affine_range(n):
                if transposes_on_scalar and j % 2:
                    tp = nl.ndarray((nl.par_dim(TILE), TILE), dtype=pe, buffer=nl.psum)
                    tp[0:TILE, 0:TILE] = nisa.nc_transpose(probs[0:TILE, j * TILE:(j + 1) * TILE])
                    probs_t[0:TILE, j, 0:TILE] = nisa.activation(nl.copy, data=tp, dtype=pe)
                else:
                    probs_t[0:TILE, j, 0:TILE] = nisa.nc_transpose(probs[0:TILE, j * TILE:(j + 1) * TILE])
            acc = nl.zeros((nl.par_dim(d), TILE), dtype=np.float32, buffer=nl.psum)  # [d_head, queries]
            for j in nl.affine_range(n):
                acc[0:d, 0:TILE] += nisa.nc_matmul(stationary=v_sb[0:TILE, j, 0:d], moving=probs_t[0:TILE, j, 0:TILE])
            res = nl.copy(acc, dtype=dt) * nisa.nc_transpose(inv)
            ip, jf = nl.arange(d)[:, None], nl.arange(TILE)[None, :]
            nl.store(out[b, i * TILE + jf, ip], value=res)  # [d_head, queries] into [queries, d_head] rows
        return out

    return sd_attention


sd_attention = attention_kernel()  # the kernel as written: the suite's cases


def _case(seq: int, d: int, dtype):
    return lambda: (sd_attention[1], (tensor[[1, d, seq], dtype], tensor[[1, seq, d], dtype],
                                      tensor[[1, seq, d], dtype]))


# test/unit/test_SD_attention_small_head.py's perf cases: batch 1, seq_len, d_head, dtype
CASES = {
    "s4096_d128_f32": _case(4096, 128, nl.float32),
    "s4096_d128_bf16": _case(4096, 128, nl.bfloat16),
    "s4096_d64_f16": _case(4096, 64, nl.float16),
}

# The sets of compiler decisions `python tools/calibrate/sd_attention.py` times (docs/timing.md).
DECISIONS = (
    ("as written", {}),
    ("exp and sum merged", {"merge_exp_sum": True}),
    ("... and the score copies on Scalar", {"merge_exp_sum": True, "scores_on_scalar": True}),
    ("... and half the transposes' copies on Scalar",
     {"merge_exp_sum": True, "scores_on_scalar": True, "transposes_on_scalar": True}),
    ("both merges (exp and sum, copy and max), copies on Vector", {"merge_exp_sum": True, "merge_max": True}),
)


def main(argv: list[str] | None = None) -> None:
    import argparse

    argparse.ArgumentParser(description="Time the attention bounds' three cases under each set of compiler decisions"
                            " (DECISIONS) and print ncsim's time, its ratio to the bound and what bounds the run."
                            ).parse_args(argv)
    from calibrate import published

    figures = published("sd_attention")
    for label, decisions in DECISIONS:
        kernel = attention_kernel(**decisions)
        cells = []
        for name, make in CASES.items():
            _, args = make()
            run = nki.simulate(kernel[1], args, {}, values=False)
            cells.append(f"{name} {run.latency_us:7.1f} us ({run.latency_us / figures[name]:.3f}, "
                         f"{run.report.verdict.text.split(':')[0]})")
        print(f"{label}:\n    " + "\n    ".join(cells), flush=True)


if __name__ == "__main__":
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/, where the calibrate package is
    main()
