"""Sidecar of scan.s: deterministic example inputs and a plain numpy reference.

The reference follows scan.s element by element, in fp32 (each operation rounded), left to right:
  h[:, t] = a[:, t] * h[:, t-1] + b[:, t]     from h[:, -1] = h0 (the multiply, then the add)
  m[:, t] = max(max(b[:, t], m[:, t-1]), b[:, t])   from m[:, -1] = -inf
Chaining the chunks through their last column changes nothing: the running value is fp32 throughout.
"""

from __future__ import annotations

import numpy as np

N, T = 256, 2048


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.8, 1.0, size=(N, T)).astype(np.float32)
    b = rng.standard_normal((N, T), dtype=np.float32)
    h0 = rng.standard_normal((N, 1), dtype=np.float32)
    a[1] = 1.0  # a plain prefix sum of b, from h0
    a[2] = 0.0  # no memory: h = b
    a[3, ::2] = -1.0  # alternating sign
    b[4] = -np.inf  # the running maximum stays -inf; h is -inf too
    b[5, 700] = 1e30  # one huge value, carried across chunk boundaries
    return {"a": a, "b": b, "h0": h0}


def reference(a: np.ndarray, b: np.ndarray, h0: np.ndarray) -> dict[str, np.ndarray]:
    h = np.empty((N, T), dtype=np.float32)
    m = np.empty((N, T), dtype=np.float32)
    hp = h0[:, 0].astype(np.float32)
    mp = np.full(N, -np.inf, dtype=np.float32)
    for t in range(T):
        hp = a[:, t] * hp + b[:, t]
        mp = np.maximum(np.maximum(b[:, t], mp), b[:, t])
        h[:, t] = hp
        m[:, t] = mp
    return {"h": h, "m": m}
