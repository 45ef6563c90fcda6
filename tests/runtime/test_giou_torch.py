"""programs/giou.s against the same GIoU written with torch tensor ops on the CPU, bit for bit.

The first proof of "validating lowered kernels bit-exactly": torch computes the formula of giou.s
in fp32, one rounded operation at a time, with its own max/min/clamp and arithmetic; ncsim must
give exactly the same bits, on realistic boxes with integer corners in a 256 x 256 image.
"""

from __future__ import annotations

import numpy as np
import pytest

import ncsim

torch = pytest.importorskip("torch")

ROWS, COLS = 1024, 1024
EPS = 1e-5


def torch_giou(preds: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """preds, targets: f32[rows, 4 n] (n boxes per row) -> f32[rows, n]. Also the reference of the NKI
    GIoU (tests/nki/test_giou.py)."""
    a = torch.from_numpy(preds).reshape(len(preds), -1, 4)
    b = torch.from_numpy(targets).reshape(len(targets), -1, 4)
    return giou(a, b).numpy()


def giou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The eager GIoU as a plain torch function of boxes [..., 4] (x1, y1, x2, y2) -> [...]; also what
    ncsim.torch.lower lowers (tests/test_torch_giou.py)."""
    ax1, ay1, ax2, ay2 = a.unbind(-1)
    bx1, by1, bx2, by2 = b.unbind(-1)
    eps = torch.tensor(EPS, dtype=torch.float32)
    area_a = (ax2 - ax1) * (ay2 - ay1)
    area_b = (bx2 - bx1) * (by2 - by1)
    w = (torch.minimum(ax2, bx2) - torch.maximum(ax1, bx1)).clamp(min=0)
    h = (torch.minimum(ay2, by2) - torch.maximum(ay1, by1)).clamp(min=0)
    inter = w * h
    union = (area_a + area_b) - inter
    iou = inter / torch.maximum(union, eps)
    big_w = (torch.maximum(ax2, bx2) - torch.minimum(ax1, bx1)).clamp(min=0)
    big_h = (torch.maximum(ay2, by2) - torch.minimum(ay1, by1)).clamp(min=0)
    enclose = torch.maximum(big_w * big_h, eps)
    return iou - (enclose - union) / enclose


def boxes(rng: np.random.Generator, rows: int = ROWS, cols: int = COLS) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of boxes with integer corners in [0, 256]: random (mostly overlapping or disjoint),
    identical, touching along x and along y, nested, degenerate (zero width) and far apart."""
    def random_boxes() -> np.ndarray:
        c = rng.integers(0, 257, size=(rows, cols // 4, 4))
        x, y = np.sort(c[..., 0::2], axis=-1), np.sort(c[..., 1::2], axis=-1)
        return np.stack([x[..., 0], y[..., 0], x[..., 1], y[..., 1]], axis=-1).astype(np.float32)

    p, t = random_boxes(), random_boxes()
    t[0::8] = p[0::8]  # identical
    t[1::8, :, 0] = p[1::8, :, 2]  # touching along x
    t[1::8, :, 2] = np.maximum(t[1::8, :, 0], t[1::8, :, 2])
    t[2::8, :, 1] = p[2::8, :, 3]  # touching along y
    t[2::8, :, 3] = np.maximum(t[2::8, :, 1], t[2::8, :, 3])
    inner = p[3::8].copy()  # nested: shrink towards the centre by a quarter
    wq = np.floor((inner[..., 2] - inner[..., 0]) / 4)
    hq = np.floor((inner[..., 3] - inner[..., 1]) / 4)
    t[3::8] = np.stack([inner[..., 0] + wq, inner[..., 1] + hq, inner[..., 2] - wq, inner[..., 3] - hq], axis=-1)
    t[4::8, :, 2] = t[4::8, :, 0]  # zero width: area 0
    p[5::8] = np.array([0, 0, 10, 10], np.float32)  # disjoint and far apart
    t[5::8] = np.array([200, 200, 256, 256], np.float32)
    return p.reshape(rows, cols), t.reshape(rows, cols)


def test_giou_matches_torch_bit_for_bit():
    preds, targets = boxes(np.random.default_rng(2024))
    result = ncsim.run("programs/giou.s", {"preds": preds, "targets": targets}, check=True)
    want = torch_giou(preds, targets)
    got = result.outputs["out"]
    assert got.shape == want.shape == (ROWS, COLS // 4)
    diff = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert diff.size == 0, f"{diff.size} elements differ from torch; first {np.unravel_index(diff[0], got.shape)}"
    # the sidecar's numpy reference agrees too
    assert result.check is not None and result.check.ok, result.check.report()
    # and the cases are really there: identical boxes of positive area give 1, far-apart ones a
    # negative GIoU, nested ones the ratio of the areas
    p = preds.reshape(ROWS, COLS // 4, 4)
    area = (p[..., 2] - p[..., 0]) * (p[..., 3] - p[..., 1])
    same = np.zeros_like(area, dtype=bool)
    same[0::8] = area[0::8] > 0
    assert same.sum() > 10000 and np.all(got[same] == 1.0)
    assert np.all(got[5::8] < 0)
    assert np.count_nonzero((got[3::8] > 0) & (got[3::8] < 1)) > 10000
