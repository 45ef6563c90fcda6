"""Sidecar of relu.s: example inputs and a plain numpy reference (fp32, each op rounded)."""

from __future__ import annotations

import numpy as np

N, F = 512, 1024


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, F), dtype=np.float32)
    x[0, :8] = [0.0, -0.0, 1e-45, -1e-45, np.inf, -np.inf, 3.0, -3.0]  # edges: zeros, subnormals, infinities
    dy = rng.standard_normal((N, F), dtype=np.float32)
    return {"x": x, "dy": dy}


def reference(x: np.ndarray, dy: np.ndarray) -> dict[str, np.ndarray]:
    y = np.maximum(x, np.float32(0))
    mask = (x > np.float32(0)).astype(np.float32)
    return {"y": y.astype(np.float32), "dx": (mask * dy).astype(np.float32)}
