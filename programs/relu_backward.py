"""Sidecar of relu_backward.s: example inputs and the reference, the gradient torch gives torch.relu
(threshold_backward of the output: 0 where y <= 0, else dy) in numpy."""

from __future__ import annotations

import numpy as np

N, F = 300, 2500  # the program's .param defaults


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, F), dtype=np.float32)
    x[0, :9] = [0.0, -0.0, 1e-45, -1e-45, np.inf, -np.inf, np.nan, 3.0, -3.0]
    y = np.where(x < 0, np.float32(0), x)  # the forward's output
    dy = rng.standard_normal((N, F), dtype=np.float32)
    dy[0, 9:13] = [np.inf, -np.inf, np.nan, -0.0]
    return {"dy": dy, "y": y}


def reference(dy: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    return {"dx": np.where(y <= 0, np.float32(0), dy)}
