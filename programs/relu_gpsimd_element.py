"""Sidecar of relu_gpsimd_element.s: example inputs and the reference, torch.relu's values in numpy."""

from __future__ import annotations

import numpy as np

N, F = 32, 4096  # the program's .param defaults


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, F), dtype=np.float32)
    # edges: signed zeros, subnormals, infinities, NaN of both signs (torch.relu keeps -0 and NaN)
    x[0, :10] = [0.0, -0.0, 1e-45, -1e-45, np.inf, -np.inf, np.nan, -np.nan, 3.0, -3.0]
    return {"x": x}


def reference(x: np.ndarray) -> dict[str, np.ndarray]:
    return {"y": np.where(x < 0, np.float32(0), x)}
