"""Sidecar of layernorm.s: deterministic example inputs and a plain numpy reference of what it computes.

The reference follows layernorm.s operation by operation. Every operation is an fp32 operation
rounded to fp32 (docs/hardware.md#numerics); every sum is sequential, left to right, starting from
+0.0. The docs give bn_stats and bn_aggr only in words, so this file states the definitions that
ncsim implements:

bn_stats of a [P, n] chunk (n <= 512) splits each partition's elements by the parity of their
position in the chunk (flattened free axis), and for each group g of the even and the odd ones writes
    count_g = len(g)                        (exact in fp32)
    mean_g  = (g[0] + g[1] + ...) / count_g
    m2_g    = d[0]*d[0] + d[1]*d[1] + ...    with d[i] = g[i] - mean_g   (variance * count)
as [count_even, mean_even, m2_even, count_odd, mean_odd, m2_odd].

bn_aggr of k triples (count_j, mean_j, m2_j), j = 1..k in the order they lie in the free axis,
pools them into the mean and population variance of the union:
    n    = count_1 + ... + count_k
    mean = (count_1 * mean_1 + ... + count_k * mean_k) / n
    var  = ((m2_1 + count_1 * ((mean_1 - mean) * (mean_1 - mean))) + ...
            + (m2_k + count_k * ((mean_k - mean) * (mean_k - mean)))) / n
Here k = 4: columns 0:512 even, 0:512 odd, 512:1024 even, 512:1024 odd.

Then, as layernorm.s does it:
    rstd = rsqrt(var * 1.0 + EPS)           the multiply and add in fp32 (EPS rounded to fp32),
                                            1 / sqrt in float64 rounded once to fp32
    y    = (((x - mean) * rstd) * gamma) + beta
"""

from __future__ import annotations

import numpy as np

N, F = 512, 1024
CHUNK = 512
EPS = np.float32(1e-5)


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    scale = rng.uniform(0.1, 10, size=(N, 1)).astype(np.float32)
    shift = rng.uniform(-5, 5, size=(N, 1)).astype(np.float32)
    x = rng.standard_normal((N, F), dtype=np.float32) * scale + shift
    x[0] = 3.0  # a constant row: variance 0, rstd = 1 / sqrt(EPS)
    x[1] = rng.standard_normal(F, dtype=np.float32) + np.float32(1000)  # mean far from zero
    x[2] = rng.standard_normal(F, dtype=np.float32) * np.float32(1e-3)  # variance near EPS
    gamma = (1 + 0.1 * rng.standard_normal((1, F))).astype(np.float32)
    beta = (0.1 * rng.standard_normal((1, F))).astype(np.float32)
    return {"gamma": gamma, "beta": beta, "x": x}


def seq_sum(terms: list[np.ndarray]) -> np.ndarray:
    """fp32 sum of equal-shaped arrays, sequentially in list order, starting from +0.0."""
    acc = np.zeros_like(terms[0], dtype=np.float32)
    for t in terms:
        acc = acc + t
    return acc


def bn_stats(chunk: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The (count, mean, m2) triples of the even and the odd positions of each row of `chunk`."""
    triples = []
    for group in (chunk[:, 0::2], chunk[:, 1::2]):
        count = np.full(group.shape[0], group.shape[1], dtype=np.float32)
        mean = seq_sum(list(group.T)) / count
        d = group - mean[:, None]
        m2 = seq_sum(list((d * d).T))
        triples.append((count, mean, m2))
    return triples


def bn_aggr(triples: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Pooled mean and population variance of the groups, combined in order."""
    n = seq_sum([count for count, _, _ in triples])
    mean = seq_sum([count * m for count, m, _ in triples]) / n
    m2 = seq_sum([m2_j + count * ((m - mean) * (m - mean)) for count, m, m2_j in triples])
    return mean, m2 / n


def reference(gamma: np.ndarray, beta: np.ndarray, x: np.ndarray) -> dict[str, np.ndarray]:
    x = x.astype(np.float32)
    triples = []
    for c in range(0, F, CHUNK):
        triples += bn_stats(x[:, c : c + CHUNK])
    mean, var = bn_aggr(triples)
    v = var * np.float32(1.0) + EPS
    rstd = (1.0 / np.sqrt(v.astype(np.float64))).astype(np.float32)
    t = (x - mean[:, None]) * rstd[:, None]
    t = t * gamma.astype(np.float32)
    return {"y": (t + beta.astype(np.float32)).astype(np.float32)}
