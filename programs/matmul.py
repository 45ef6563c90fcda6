"""Sidecar of matmul.s: example inputs and a plain numpy reference.

The reference is the matmul ncsim defines (docs/hardware.md#numerics): each product formed in fp32
(exact for bf16 inputs), accumulated in fp32 sequentially over k = 0..K-1.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

M, N, K = 256, 1024, 512


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    a_t = rng.standard_normal((K, M), dtype=np.float32).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((K, N), dtype=np.float32).astype(ml_dtypes.bfloat16)
    return {"a_t": a_t, "b": b}


def reference(a_t: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    a32 = a_t.astype(np.float32)
    b32 = b.astype(np.float32)
    c = np.zeros((M, N), dtype=np.float32)
    for k in range(K):  # sequential fp32 accumulation, in order
        c += np.outer(a32[k], b32[k])  # bf16 x bf16 products are exact in fp32
    return {"c": c}
