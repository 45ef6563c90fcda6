"""The select-and-scatter kernel of aws-neuron/nki-samples (src/nki_samples/reference/vision.py,
`select_and_scatter_kernel`, the backward pass of a 3 x 3 max pool), written here from the algorithm
its docstring and step comments document, for the latency bound of
test/unit/test_select_and_scatter.py (tests/nki/published_latencies.toml):

- windows of 3 x 3 at stride 2 over the operand padded by 1 on each side (the padding holds the
  dtype's most negative value); each source element is added at the first position, in row-major
  order, of its window's maximum; everything else is 0;
- two images of 64 channels share the 128 partitions (channels of image 2b in partitions 0-63, of
  image 2b + 1 in 64-127);
- per output row of windows: the row's windows are copied out of the padded operand as one [P, W', 3, 3]
  view, their maxima found, the positions equal to the maximum marked, and the first of those kept
  by taking the least window index (an iota of 0..8) among the marked positions;
- per window position (9 of them): the source times that position's mark is written at its strided
  place in a zeroed padded tile, whose interior goes to an HBM scratch tensor; the nine are loaded
  back and summed into the output tile, which is stored.
"""

from __future__ import annotations

import numpy as np

import ncsim.nki.isa as nisa
import ncsim.nki.language as nl
from ncsim import nki
from ncsim.nki.typing import tensor

WIN, STRIDE, PAD = 3, 2, 1


@nki.jit
def select_and_scatter(operand, source):
    n, c, h, w = operand.shape
    sh, sw = source.shape[2:]
    assert c == 64 and n % 2 == 0 and h == w and sh == sw == (h + 2 * PAD - WIN) // STRIDE + 1
    dt = operand.dtype
    hp, wp = h + 2 * PAD, w + 2 * PAD
    out = nl.ndarray((n, c, h, w), dtype=dt, buffer=nl.shared_hbm)
    for pair in nl.affine_range(n // 2):
        marks = nl.ndarray((nl.par_dim(128), sh, sw, WIN, WIN), dtype=nl.uint8, buffer=nl.sbuf)
        padded = nl.full((nl.par_dim(128), hp, wp), dtype=dt, buffer=nl.sbuf, fill_value=nl.finfo(dt).min)
        for half in nl.affine_range(2):
            padded[half * 64:(half + 1) * 64, PAD:PAD + h, PAD:PAD + w] = nl.load(operand[2 * pair + half], dtype=dt)
        for row in nl.affine_range(sh):
            g = nl.mgrid[0:128, 0:sw, 0:WIN, 0:WIN]  # partition, window, window row, window column
            wins = nl.copy(padded[g.p, STRIDE * row + g.y, STRIDE * g.x + g.z])
            top = nl.max(wins, axis=[2, 3], dtype=dt, keepdims=True)
            at_top = nl.equal(top, wins, dtype=nl.int8)
            order = nisa.iota(WIN * g.y + g.z, dtype=nl.uint32)
            candidates = nl.where(at_top, order, WIN * WIN, dtype=nl.uint32)
            first = nl.min(candidates, axis=[2, 3], dtype=nl.uint32, keepdims=True)
            marks[0:128, row, 0:sw, 0:WIN, 0:WIN] = nl.equal(first, order, dtype=nl.uint8)
        src = nl.ndarray((nl.par_dim(128), sh, sw), dtype=dt, buffer=nl.sbuf)
        for half in nl.affine_range(2):
            src[half * 64:(half + 1) * 64, 0:sh, 0:sw] = nl.load(source[2 * pair + half], dtype=dt)
        parts = nl.ndarray((WIN, WIN, nl.par_dim(128), h, w), dtype=dt, buffer=nl.private_hbm)
        for dy in nl.affine_range(WIN):
            for dx in nl.affine_range(WIN):
                s = nl.mgrid[0:128, 0:sh, 0:sw]
                part = nl.zeros((nl.par_dim(128), hp, wp), dtype=dt, buffer=nl.sbuf)
                part[s.p, STRIDE * s.x + dy, STRIDE * s.y + dx] = nl.multiply(
                    src, marks[s.p, s.x, s.y, dy, dx], dtype=dt)
                nl.store(parts[dy, dx, 0:128, 0:h, 0:w], value=part[0:128, PAD:PAD + h, PAD:PAD + w])
        # (one name for the spread tiles and the loaded ones, as the documented kernel has: which tiles
        # the kernel still holds decides ncsim's buffers, docs/nki.md "Buffer policy")
        total = nl.zeros((nl.par_dim(128), h, w), dtype=dt, buffer=nl.sbuf)
        for dy in nl.affine_range(WIN):
            for dx in nl.affine_range(WIN):
                part = nl.load(parts[dy, dx, 0:128, 0:h, 0:w])
                total += part
        for half in nl.affine_range(2):
            nl.store(out[2 * pair + half], value=total[half * 64:(half + 1) * 64, 0:h, 0:w])
    return out


def reference(operand: np.ndarray, source: np.ndarray) -> np.ndarray:
    """The select-and-scatter above in float64 numpy (the tests' reference)."""
    n, c, h, w = operand.shape
    pad = np.full((n, c, h + 2 * PAD, w + 2 * PAD), -np.inf)
    pad[:, :, PAD:PAD + h, PAD:PAD + w] = operand
    out = np.zeros_like(pad)
    rows, cols = np.indices((n, c))
    for i in range(source.shape[2]):
        for j in range(source.shape[3]):
            win = pad[:, :, STRIDE * i:STRIDE * i + WIN, STRIDE * j:STRIDE * j + WIN].reshape(n, c, WIN * WIN)
            dy, dx = np.divmod(win.argmax(axis=2), WIN)  # argmax: the first maximum in row-major order
            out[rows, cols, STRIDE * i + dy, STRIDE * j + dx] += source[:, :, i, j]
    return out[:, :, PAD:PAD + h, PAD:PAD + w]


# test/unit/test_select_and_scatter.py's perf case: N, C, H, W of the operand, of the source, dtype
CASES = {
    "n8_c64_112": lambda: (select_and_scatter, (tensor[[8, 64, 112, 112], nl.float32],
                                                tensor[[8, 64, 56, 56], nl.float32])),
}
