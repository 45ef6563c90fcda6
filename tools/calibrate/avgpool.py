"""The adaptive average pooling kernel of aws-neuron/nki-samples (src/nki_samples/reference/vision.py,
`adaptive_avg_pool2d_kernel`), written here from the algorithm its docstring and test document, for
the latency bounds of test/unit/test_adaptive_avg_pool2d.py (tests/nki/published_latencies.toml):

- the input [N, C, H, W] is seen as [N*C, H, W], N*C cut into tiles of 128 rows (partitions);
- output position (oh, ow) averages rows [oh*H // OH, ceil((oh+1)*H / OH)) and the columns likewise
  (PyTorch's AdaptiveAvgPool2d);
- for each tile and each output position in turn: its pooling window (at most 128 x 128 elements per
  piece) is copied by DMA from HBM into the tile's window buffer, summed over both free axes on Vector,
  and the sums added into an fp32 [P, 1] accumulator; the accumulator divided by the window's element
  count is written into the tile's [P, OH, OW] output buffer;
- each tile's output buffer is stored once, after its last position.

Each tile has one window buffer and one output buffer (buffers indexed by the tile, as the documented
kernel allocates them), so within a tile each window's load waits until the previous window has been
summed, while tiles may overlap.
"""

from __future__ import annotations

import numpy as np

import ncsim.nki.isa as nisa
import ncsim.nki.language as nl
from ncsim import nki
from ncsim.nki.typing import tensor

PIECE = 128  # the largest window piece per axis (the documented kernel's spatial tile)


def _bounds(size: int, out: int) -> list[tuple[int, int]]:
    """[start, end) of each of `out` pooling windows over `size` elements (PyTorch's adaptive rule)."""
    return [(o * size // out, -(-(o + 1) * size // out)) for o in range(out)]


@nki.jit
def adaptive_avg_pool2d(x, oh: int, ow: int):
    n, c, h, w = x.shape
    rows = n * c
    p = min(rows, nl.tile_size.pmax)
    hb, wb = _bounds(h, oh), _bounds(w, ow)
    wh = min(max(e - s for s, e in hb), PIECE)
    ww = min(max(e - s for s, e in wb), PIECE)
    flat = x.reshape((rows, h, w))
    out = nl.ndarray((n, c, oh, ow), dtype=x.dtype, buffer=nl.shared_hbm)
    out_flat = out.reshape((rows, oh, ow))
    tiles = rows // p
    window = nl.ndarray((tiles, nl.par_dim(p), wh, ww), dtype=x.dtype, buffer=nl.sbuf)
    result = nl.ndarray((tiles, nl.par_dim(p), oh, ow), dtype=x.dtype, buffer=nl.sbuf)
    for t in nl.affine_range(tiles):
        r = slice(t * p, (t + 1) * p)
        for i, (h0, h1) in enumerate(hb):
            for j, (w0, w1) in enumerate(wb):
                acc = nl.zeros((p, 1), dtype=nl.float32, buffer=nl.sbuf)
                for a in range(h0, h1, PIECE):
                    for b in range(w0, w1, PIECE):
                        dh, dw = min(PIECE, h1 - a), min(PIECE, w1 - b)
                        nisa.dma_copy(dst=window[t, 0:p, 0:dh, 0:dw], src=flat[r, a:a + dh, b:b + dw])
                        part = nisa.tensor_reduce(np.add, window[t, 0:p, 0:dh, 0:dw], axis=(1, 2),
                                                  dtype=nl.float32)
                        acc = nisa.tensor_tensor(acc, part, op=np.add)
                result[t, 0:p, i, j:j + 1] = nl.divide(acc, (h1 - h0) * (w1 - w0))
        nl.store(out_flat[r, 0:oh, 0:ow], result[t, 0:p, 0:oh, 0:ow])
    return out


def reference(x: np.ndarray, oh: int, ow: int) -> np.ndarray:
    """PyTorch's AdaptiveAvgPool2d of x [N, C, H, W] to [N, C, oh, ow], in float64 (the tests' reference)."""
    hb, wb = _bounds(x.shape[2], oh), _bounds(x.shape[3], ow)
    out = np.zeros((*x.shape[:2], oh, ow))
    for i, (h0, h1) in enumerate(hb):
        for j, (w0, w1) in enumerate(wb):
            out[:, :, i, j] = x[:, :, h0:h1, w0:w1].astype(np.float64).mean(axis=(2, 3))
    return out


def _case(n: int, c: int, h: int, w: int, oh: int, ow: int, dtype=nl.float32):
    return lambda: (adaptive_avg_pool2d, (tensor[[n, c, h, w], dtype], oh, ow))


# test/unit/test_adaptive_avg_pool2d.py's perf cases: N, C, H, W, output size, dtype
CASES = {
    "n1_c64_56_to_7": _case(1, 64, 56, 56, 7, 7),
    "n2_c128_28_to_7": _case(2, 128, 28, 28, 7, 7),
    "n1_c256_14_to_7_f16": _case(1, 256, 14, 14, 7, 7, nl.float16),
    "n4_c64_56_to_7": _case(4, 64, 56, 56, 7, 7),
    "n2_c128_28_to_14": _case(2, 128, 28, 28, 14, 14),
    "n1_c512_7_to_1": _case(1, 512, 7, 7, 1, 1),
    "n8_c64_32_to_4_f16": _case(8, 64, 32, 32, 4, 4, nl.float16),
    "n2_c2048_32_to_3": _case(2, 2048, 32, 32, 3, 3),
    "n2_c64_256_to_1": _case(2, 64, 256, 256, 1, 1),
}
