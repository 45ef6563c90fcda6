"""Sidecar of linear_gelu.s: deterministic example inputs and a plain numpy reference.

The reference follows linear_gelu.s operation by operation, as ncsim defines them (docs/hardware.md#numerics):
  acc[n, f] = x[n, 0] * w[0, f] + x[n, 1] * w[1, f] + ...   fp32 from +0.0, k = 0..K-1 in order (the
                                                            matmul of the second K slice accumulates
                                                            onto the first; bf16 products are exact)
  h = acc + b                                               fp32
  y = gelu(h) = h * (1 + erf(h / sqrt(2))) / 2              float64 from the fp32 h, rounded once
  y_t = y^T                                                 exact, except that -0 becomes +0: the
                                                            Tensor engine transposes by a matmul with
                                                            the identity, summing from +0.0
The bf16 transpose of x is exact (bf16 values in an fp32 sum of one nonzero term).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

N, K, F = 256, 256, 512


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    b = (0.5 * rng.standard_normal((1, F))).astype(np.float32)
    x = rng.standard_normal((N, K), dtype=np.float32).astype(ml_dtypes.bfloat16)
    w = (rng.standard_normal((K, F), dtype=np.float32) * np.float32(0.25)).astype(ml_dtypes.bfloat16)
    x[5] = 0  # a zero token: y = gelu(b)
    return {"b": b, "x": x, "w": w}


def gelu(h: np.ndarray) -> np.ndarray:
    """gelu of each fp32 value in float64, by the formula of docs/isa.md, rounded once to fp32."""
    sqrt2 = math.sqrt(2.0)
    f = np.vectorize(lambda v: v * (1.0 + math.erf(v / sqrt2)) / 2.0, otypes=[np.float64])
    return f(h.astype(np.float64)).astype(np.float32)


def reference(b: np.ndarray, x: np.ndarray, w: np.ndarray) -> dict[str, np.ndarray]:
    x32 = x.astype(np.float32)
    w32 = w.astype(np.float32)
    acc = np.zeros((N, F), dtype=np.float32)
    for k in range(K):
        acc = acc + np.outer(x32[:, k], w32[k])
    h = acc + b.astype(np.float32)
    y = gelu(h)
    y_t = np.ascontiguousarray(y.T) + np.float32(0)  # -0 + 0 = +0
    return {"y": y, "y_t": y_t}
