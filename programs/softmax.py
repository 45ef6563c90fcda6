"""Sidecar of softmax.s: deterministic example inputs and a plain numpy reference of what it computes.

The reference follows softmax.s operation by operation, as ncsim defines them (docs/hardware.md#numerics):
  neg_m = -max(x[n, :])                            exact in fp32
  e = exp(x * 1.0 + neg_m)                         the multiply and add in fp32, exp in float64
                                                   rounded once to fp32
  s = e[n, 0] + e[n, 1] + ... + e[n, F-1]          fp32, sequential, left to right
  r = 1 / s                                        fp32 (IEEE division)
  y = e * r                                        fp32
"""

from __future__ import annotations

import numpy as np

N, F = 512, 1024


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, F), dtype=np.float32) * np.float32(4)
    x[1] = 7.0  # a constant row: y = 1/F exactly
    x[2] += np.float32(1e4)  # far from zero: exp(x) alone would overflow fp32
    x[3, ::2] = -np.inf  # masked entries: exp(-inf) = 0
    x[4, 5] = 90.0  # one dominant entry
    return {"x": x}


def row_sum(a: np.ndarray) -> np.ndarray:
    """Sum along axis 1, sequentially from the left, in fp32 (the Scalar engine's accumulator)."""
    acc = np.zeros(a.shape[0], dtype=np.float32)
    for j in range(a.shape[1]):
        acc = acc + a[:, j]
    return acc


def reference(x: np.ndarray) -> dict[str, np.ndarray]:
    x = x.astype(np.float32)
    neg_m = -np.max(x, axis=1, keepdims=True)
    z = x * np.float32(1.0) + neg_m
    e = np.exp(z.astype(np.float64)).astype(np.float32)
    r = np.float32(1) / row_sum(e)[:, None]
    return {"y": (e * r).astype(np.float32)}
