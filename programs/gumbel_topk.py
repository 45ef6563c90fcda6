"""Sidecar of gumbel_topk.s: deterministic example inputs and a plain numpy reference.

The reference follows gumbel_topk.s operation by operation:
  x = fmix32((n * V + v) ^ SEED)            uint32 arithmetic modulo 2**32 (MurmurHash3's finalizer)
  u = float32(x >> 8) * 2**-24              exact (24-bit integers)
  g1 = log(u)                               float64 from fp32, rounded once to fp32 (log(0) = -inf)
  g2 = log(g1 * -1.0)                       the multiply in fp32, the log as above
  z = logits - g2                           fp32
  top = the 8 largest z of each row, largest first
  idx[j] = the first position of top[j] in its row (so equal values share one index)
"""

from __future__ import annotations

import numpy as np

N, V = 256, 1024
SEED, C1, C2 = np.uint32(0x9E3779B9), np.uint32(0x85EBCA6B), np.uint32(0xC2B2AE35)


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((N, V), dtype=np.float32) * np.float32(2)
    logits[1, 100] = 50.0  # one token certain to be drawn first
    logits[2, :] = -np.inf  # a masked row but for 5 tokens: the last 3 draws are -inf
    logits[2, [3, 30, 300, 600, 1000]] = 0.0
    logits[3, :] = 0.0  # uniform: a draw of the hash alone
    return {"logits": logits}


def fmix32(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint32(16))
    x = x * C1
    x = x ^ (x >> np.uint32(13))
    x = x * C2
    return x ^ (x >> np.uint32(16))


def log32(a: np.ndarray) -> np.ndarray:
    """log of fp32 values in float64, rounded once to fp32; log(0) = -inf."""
    with np.errstate(divide="ignore"):
        return np.log(a.astype(np.float64)).astype(np.float32)


def reference(logits: np.ndarray) -> dict[str, np.ndarray]:
    counter = np.arange(N * V, dtype=np.uint32).reshape(N, V)
    x = fmix32(counter ^ SEED)
    u = (x >> np.uint32(8)).astype(np.float32) * np.float32(2.0**-24)
    g1 = log32(u)
    g2 = log32(g1 * np.float32(-1.0))
    z = logits.astype(np.float32) - g2
    top = -np.sort(-z, axis=1, kind="stable")[:, :8]
    idx = np.array([[np.flatnonzero(row == v)[0] for v in t] for row, t in zip(z, top)], dtype=np.uint32)
    return {"top": top.astype(np.float32), "idx": idx}
