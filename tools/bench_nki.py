"""Benchmark of the NKI front end: the NKI matmul tutorial's kernels traced, built and timed.

    .venv/bin/python tools/bench_nki.py                   # the published size and a small one
    .venv/bin/python tools/bench_nki.py --sizes 4096,8192,8192 --repeat 3
    .venv/bin/python tools/bench_nki.py --variants tiled,optimized --profile trace.prof

The four kernels of the NKI tutorial "Matrix multiplication" (aws-neuron-sdk,
general/nki/tutorials/matrix_multiplication.rst), written here from the algorithms the tutorial
describes (its code is not copied), in the 2.2x dialect (`nl.load`, `nl.matmul`, `nl.store`):

- tiled: for each 128-row tile of M and 512-column tile of N, accumulate over K in PSUM, loading
  both operand tiles inside the K loop (two loads per matmul);
- hoisted ("Optimization 1: removing redundant loads"): the K column of lhsT tiles is loaded once
  per M tile, the K column of rhs tiles once per (M, N) tile;
- blocked free dimension ("Optimization 2"): blocks of 2 M tiles and 2 N tiles; each block's
  operand tiles are loaded once and used by every tile pair of the block;
- fully optimised ("Optimization 3"): blocks of 16 M tiles, 2 N tiles and 8 K tiles; wide loads
  ([128, 2048] of lhsT, [128, 1024] of rhs), partial sums over a K block added into SBUF result
  tiles (bf16, as the tutorial keeps them) on Vector, the results packed 1024 wide and stored once.

The published size is lhsT [8192, 4096] x rhs [8192, 8192] in bf16, the size of the tutorial's
benchmark. Arguments are `nki.typing.tensor` placeholders, so each run is
timing-only (what `nki.benchmark` at that size does). Printed per kernel and size: the instruction
count and the host seconds of each phase of `ncsim.nki.simulate` (trace: the kernel's Python on the
tracer; build: synchronisation and encoding; schedule: the scheduler's reordering, ncsim.nki.schedule,
with its second build and the two timings that choose the order; load: the decoded program from the encoded arrays;
timing: the timing model; races: the race check; report: the timing report), the total, the
instructions per second, and the simulated latency. Each figure is the best of --repeat runs, after
one warm-up run of a small size (numba's compile or cache load is not counted).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import ncsim.nki.language as nl
from ncsim import nki
from ncsim.nki.typing import tensor

TILE_K, TILE_M, TILE_N = 128, 128, 512  # nl.tile_size.pmax, gemm_stationary_fmax, gemm_moving_fmax


@nki.jit
def matmul_tiled(lhs_t, rhs):
    k_size, m_size = lhs_t.shape
    n_size = rhs.shape[1]
    out = nl.ndarray((m_size, n_size), dtype=lhs_t.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_size // TILE_M):
        for n in nl.affine_range(n_size // TILE_N):
            acc = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_size // TILE_K):
                a = nl.load(lhs_t[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
                b = nl.load(rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])
                acc += nl.matmul(a, b, transpose_x=True)
            nl.store(out[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N], value=nl.copy(acc, dtype=out.dtype))
    return out


@nki.jit
def matmul_hoisted(lhs_t, rhs):
    k_size, m_size = lhs_t.shape
    n_size = rhs.shape[1]
    kt = k_size // TILE_K
    out = nl.ndarray((m_size, n_size), dtype=lhs_t.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_size // TILE_M):
        a = [nl.load(lhs_t[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M]) for k in range(kt)]
        for n in nl.affine_range(n_size // TILE_N):
            b = [nl.load(rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N]) for k in range(kt)]
            acc = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(kt):
                acc += nl.matmul(a[k], b[k], transpose_x=True)
            nl.store(out[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N], value=nl.copy(acc, dtype=out.dtype))
            del b
        del a
    return out


@nki.jit
def matmul_block_free(lhs_t, rhs, tiles_m=2, tiles_n=2):
    k_size, m_size = lhs_t.shape
    n_size = rhs.shape[1]
    kt = k_size // TILE_K
    block_m, block_n = TILE_M * tiles_m, TILE_N * tiles_n
    out = nl.ndarray((m_size, n_size), dtype=lhs_t.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_size // block_m):
        a = [[nl.load(lhs_t[k * TILE_K:(k + 1) * TILE_K, m * block_m + i * TILE_M:m * block_m + (i + 1) * TILE_M])
              for k in range(kt)] for i in range(tiles_m)]
        for n in nl.affine_range(n_size // block_n):
            b = [[nl.load(rhs[k * TILE_K:(k + 1) * TILE_K, n * block_n + j * TILE_N:n * block_n + (j + 1) * TILE_N])
                  for k in range(kt)] for j in range(tiles_n)]
            for i in nl.affine_range(tiles_m):
                for j in nl.affine_range(tiles_n):
                    acc = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(kt):
                        acc += nl.matmul(a[i][k], b[j][k], transpose_x=True)
                    r0, c0 = m * block_m + i * TILE_M, n * block_n + j * TILE_N
                    nl.store(out[r0:r0 + TILE_M, c0:c0 + TILE_N], value=nl.copy(acc, dtype=out.dtype))
            del b
        del a
    return out


@nki.jit
def matmul_optimized(lhs_t, rhs, tiles_m=16, tiles_n=2, tiles_k=8):
    k_size, m_size = lhs_t.shape
    n_size = rhs.shape[1]
    block_m, block_n, block_k = TILE_M * tiles_m, TILE_N * tiles_n, TILE_K * tiles_k
    nbm, nbn, nbk = m_size // block_m, n_size // block_n, k_size // block_k
    out = nl.ndarray((m_size, n_size), dtype=lhs_t.dtype, buffer=nl.shared_hbm)
    for n in nl.affine_range(nbn):
        # the partial sums of this N block, in SBUF (the output's dtype), from zero
        res = [[[nl.zeros((TILE_M, TILE_N), dtype=lhs_t.dtype) for _ in range(tiles_n)] for _ in range(tiles_m)]
               for _ in range(nbm)]
        for k in nl.sequential_range(nbk):
            b = [nl.load(rhs[(k * tiles_k + t) * TILE_K:(k * tiles_k + t + 1) * TILE_K, n * block_n:(n + 1) * block_n])
                 for t in range(tiles_k)]
            for m in nl.affine_range(nbm):
                a = [nl.load(lhs_t[(k * tiles_k + t) * TILE_K:(k * tiles_k + t + 1) * TILE_K,
                                   m * block_m:(m + 1) * block_m]) for t in range(tiles_k)]
                for j in nl.affine_range(tiles_n):
                    for i in nl.affine_range(tiles_m):
                        acc = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
                        for t in nl.affine_range(tiles_k):
                            acc += nl.matmul(a[t][:, i * TILE_M:(i + 1) * TILE_M],
                                             b[t][:, j * TILE_N:(j + 1) * TILE_N], transpose_x=True)
                        res[m][i][j][...] = nl.add(res[m][i][j], acc)
                del a
            del b
        for m in nl.affine_range(nbm):
            for i in nl.affine_range(tiles_m):
                packed = nl.ndarray((TILE_M, block_n), dtype=lhs_t.dtype)
                for j in nl.affine_range(tiles_n):
                    packed[:, j * TILE_N:(j + 1) * TILE_N] = nl.copy(res[m][i][j])
                r0 = (m * tiles_m + i) * TILE_M
                nl.store(out[r0:r0 + TILE_M, n * block_n:(n + 1) * block_n], value=packed)
        del res
    return out


VARIANTS = {"tiled": matmul_tiled, "hoisted": matmul_hoisted, "block_free": matmul_block_free,
            "optimized": matmul_optimized}
PUBLISHED = (4096, 8192, 8192)  # M, K, N: lhs [4096, 8192] x rhs [8192, 8192]
SMALL = (2048, 2048, 2048)
PHASES = ("trace", "build", "schedule", "load", "timing", "races", "report")


def run_once(kernel, size: tuple[int, int, int]) -> nki.NkiRun:
    m, k, n = size
    return nki.simulate(kernel, (tensor[[k, m], nl.bfloat16], tensor[[k, n], nl.bfloat16]), {}, values=False)


def measure(kernel, size: tuple[int, int, int], repeat: int) -> tuple[dict[str, float], nki.NkiRun]:
    best: dict[str, float] = {}
    r = None
    for _ in range(repeat):
        start = time.perf_counter()
        r = run_once(kernel, size)
        t0 = time.perf_counter()
        r.report.verdict  # noqa: B018 (the report is made when first read)
        secs = dict(r.seconds)
        secs["report"] = time.perf_counter() - t0
        secs["total"] = time.perf_counter() - start
        for key, v in secs.items():
            best[key] = min(best.get(key, v), v)
    assert r is not None
    return best, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default=None, help="M,K,N[;M,K,N...] (default: the published size and 2048^3)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated: " + ", ".join(VARIANTS))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--profile", default=None, help="write cProfile stats of one run per kernel to this file")
    args = ap.parse_args()
    sizes = [tuple(int(x) for x in s.split(",")) for s in args.sizes.split(";")] if args.sizes else [SMALL, PUBLISHED]
    variants = [v for v in args.variants.split(",") if v]

    run_once(matmul_tiled, (256, 256, 512))  # warm-up: numba's compile or cache load, imports
    head = f"{'kernel':<11} {'M,K,N':>14} {'instrs':>7} " + " ".join(f"{p:>7}" for p in PHASES) + \
        f" {'total s':>8} {'instr/s':>8} {'sim ms':>8}"
    print(head)
    for size in sizes:
        for name in variants:
            kernel = VARIANTS[name]
            if args.profile:
                prof = cProfile.Profile()
                prof.enable()
                run_once(kernel, size).report.verdict  # noqa: B018
                prof.disable()
                path = f"{args.profile}.{name}.{'x'.join(map(str, size))}"
                prof.dump_stats(path)
                pstats.Stats(path).sort_stats("cumulative").print_stats(25)
            secs, r = measure(kernel, size, args.repeat)
            count = r.result.instructions
            print(f"{name:<11} {','.join(map(str, size)):>14} {count:>7} "
                  + " ".join(f"{secs.get(p, 0.0):7.2f}" for p in PHASES)
                  + f" {secs['total']:8.2f} {count / secs['total']:8.0f} {r.latency_us / 1000:8.3f}", flush=True)


if __name__ == "__main__":
    main()
