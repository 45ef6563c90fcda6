"""The nearest-neighbour resize kernel of aws-neuron/nki-samples (src/nki_samples/reference/vision.py,
`resize_nearest_fixed_dma_kernel`, as it was from August 2024 until 83a3630 made it a gather by
computed indices in August 2025, under the same bounds), written here from the algorithm its
docstring and test document, for the latency bounds of test/unit/test_resize_nearest.py
(tests/nki/published_latencies.toml):

- the input [B, H, W, C] is seen as [B, H*W, C] and the output [B, OH, OW, C] as [B, OH*OW, C];
- output pixel (y, x) takes input pixel (floor(y * H / OH), floor(x * W / OW)), the scales computed
  in float32 (the test's golden function); the map of source rows is a compile-time constant;
- for each output pixel in turn, one DMA loads that source row of every batch image, [B, C] (batch
  in the partitions, channels along the free axis), into SBUF, and one DMA stores it to the output
  row: 2 x OH*OW transfers of B partitions x C elements, no compute.

So the kernel is a stream of small DMA transfers of few partitions (one partition for B = 1), the
case docs/timing.md "Calibration" discusses for it. `resize_nearest_direct` is the same resize as
HBM-to-HBM copies (what a compiler that forwards each load to its store would issue), and

    .venv/bin/python tools/calibrate/resize_nearest.py

prints the figures docs/timing.md#resize gives: the cases as the suite times them, with 8 and 32
buffers a site, with the DMA figure's transfer level taken away, and as HBM-to-HBM copies.
"""

from __future__ import annotations

import numpy as np

import ncsim.nki.isa as nisa
import ncsim.nki.language as nl
from ncsim import nki
from ncsim.nki.typing import tensor


def source_rows(h: int, w: int, oh: int, ow: int) -> list[int]:
    """Flat input row of each flat output row (row-major), the scales in float32 as the test's golden."""
    hs, ws = np.float32(h / oh), np.float32(w / ow)
    return [int(np.floor(np.float32(y) * hs)) * w + int(np.floor(np.float32(x) * ws))
            for y in range(oh) for x in range(ow)]


def _pixels(data, out_shape):
    """The output tensor, and per output pixel (the [B, C] row of each image it writes, the row it reads)."""
    b, h, w, c = data.shape
    ob, oh, ow, oc = out_shape
    assert ob == b and oc == c, "the batch and channel counts stay"
    out = nl.ndarray((b, oh, ow, c), dtype=data.dtype, buffer=nl.shared_hbm)
    src = data.reshape((b, h * w, c))
    dst = out.reshape((b, oh * ow, c))
    return out, [(dst[0:b, i, 0:c], src[0:b, row, 0:c]) for i, row in enumerate(source_rows(h, w, oh, ow))]


@nki.jit
def resize_nearest(data, out_shape):
    out, pixels = _pixels(data, out_shape)
    for to, frm in pixels:
        pixel = nl.load(frm)
        nl.store(to, value=pixel)
    return out


@nki.jit
def resize_nearest_direct(data, out_shape):
    """The same resize, each output pixel copied from its source pixel by one HBM-to-HBM DMA."""
    out, pixels = _pixels(data, out_shape)
    for to, frm in pixels:
        nisa.dma_copy(dst=to, src=frm)
    return out


def reference(data: np.ndarray, oh: int, ow: int) -> np.ndarray:
    """The resized [B, OH, OW, C] array, by numpy indexing with the same map."""
    b, h, w, c = data.shape
    rows = np.array(source_rows(h, w, oh, ow))
    return data.reshape(b, h * w, c)[:, rows, :].reshape(b, oh, ow, c)


def _case(b: int, dtype):
    return lambda: (resize_nearest, (tensor[[b, 30, 20, 1280], dtype], (b, 59, 38, 1280)))


# test/unit/test_resize_nearest.py's perf cases: [B, 30, 20, 1280] to [B, 59, 38, 1280]
CASES = {
    "b10_f32": _case(10, nl.float32),
    "b1_f16": _case(1, nl.float16),
    "b1_bf16": _case(1, nl.bfloat16),
}


def main(argv: list[str] | None = None) -> None:
    import argparse

    from ncsim.config import Config

    argparse.ArgumentParser(description="Time the resize bounds' cases as the suite does and taken apart (buffers"
                            " a site, the DMA figure's transfer level, HBM-to-HBM copies)").parse_args(argv)
    from calibrate import published

    figures = published("resize_nearest")
    buffer_level = Config().with_overrides({"dma_efficiency_table": "[[32, 1.0], [64, 1.0]]"})
    rows = (("as the suite times it", resize_nearest, {}),
            ("8 buffers a site", resize_nearest, {"buffers": 8}),
            ("the buffer level alone (no transfer level)", resize_nearest, {"config": buffer_level}),
            ("... and 8 buffers a site", resize_nearest, {"config": buffer_level, "buffers": 8}),
            ("... and 32 buffers a site", resize_nearest, {"config": buffer_level, "buffers": 32}),
            ("as HBM-to-HBM copies", resize_nearest_direct, {}))
    for label, kernel, how in rows:
        cells = []
        for name in ("b10_f32", "b1_f16"):
            _, args = CASES[name]()
            run = nki.simulate(kernel, args, {}, values=False, **how)
            cells.append(f"{name} {run.latency_us:8.1f} us ({run.latency_us / figures[name]:.3f})")
        print(f"{label}:\n    " + "\n    ".join(cells), flush=True)


if __name__ == "__main__":
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/, where the calibrate package is
    main()
