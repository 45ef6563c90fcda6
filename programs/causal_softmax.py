"""Sidecar of causal_softmax.s: deterministic example inputs and a plain numpy reference.

The reference follows causal_softmax.s operation by operation, as ncsim defines them
(docs/hardware.md#numerics):
  sc[i, j] = q[0, i] * k[0, j] + q[1, i] * k[1, j] + ...  fp32 from +0.0, over d = 0..D-1 in order
                                                          (bf16 x bf16 products are exact in fp32)
  s = sc * SCALE                                          fp32 (activation copy: no bias, no add)
  s[i, j] = -inf for j > i                                the causal mask
  neg_m = -max(s[i, :])                                   exact
  e = exp(s * 1.0 + neg_m)                                multiply and add in fp32, exp in float64
                                                          rounded once to fp32
  sum = e[i, 0] + e[i, 1] + ...                           fp32, sequential, left to right
  p = e * (1 / sum)                                       fp32
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

S, D = 512, 64
SCALE = np.float32(0.125)


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    q_t = (rng.standard_normal((D, S), dtype=np.float32) * np.float32(2)).astype(ml_dtypes.bfloat16)
    k_t = rng.standard_normal((D, S), dtype=np.float32).astype(ml_dtypes.bfloat16)
    q_t[:, 3] = 0  # a query orthogonal to every key: uniform over its 4 keys
    return {"q_t": q_t, "k_t": k_t}


def row_sum(a: np.ndarray) -> np.ndarray:
    acc = np.zeros(a.shape[0], dtype=np.float32)
    for j in range(a.shape[1]):
        acc = acc + a[:, j]
    return acc


def reference(q_t: np.ndarray, k_t: np.ndarray) -> dict[str, np.ndarray]:
    q = q_t.astype(np.float32)
    k = k_t.astype(np.float32)
    sc = np.zeros((S, S), dtype=np.float32)
    for d in range(D):
        sc = sc + np.outer(q[d], k[d])
    s = sc * SCALE
    s[np.triu_indices(S, 1)] = -np.inf
    neg_m = -np.max(s, axis=1, keepdims=True)
    z = s * np.float32(1.0) + neg_m
    e = np.exp(z.astype(np.float64)).astype(np.float32)
    rs = np.float32(1) / row_sum(e)[:, None]
    return {"p": (e * rs).astype(np.float32)}
