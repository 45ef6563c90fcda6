"""Sidecar of giou.s: deterministic example inputs and a plain numpy reference of what it computes.

Boxes have integer corners in a 256 x 256 image (x1 <= x2, y1 <= y2); the mix includes disjoint,
touching and nested pairs. The reference follows the exact order of operations of giou.s, each
operation an fp32 numpy operation (rounded to fp32), with EPS = 1e-5 as fp32.
"""

from __future__ import annotations

import numpy as np

ROWS, COLS = 1024, 1024
EPS = np.float32(1e-5)


def random_boxes(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """f32[rows, 4 * boxes]: each box (x1, y1, x2, y2) with integer corners in [0, 256]."""
    rows, cols = shape
    corners = rng.integers(0, 257, size=(rows, cols // 4, 4)).astype(np.float32)
    boxes = np.empty_like(corners)
    np.minimum(corners[..., 0], corners[..., 2], out=boxes[..., 0])  # each pair of corners in order
    np.minimum(corners[..., 1], corners[..., 3], out=boxes[..., 1])
    np.maximum(corners[..., 0], corners[..., 2], out=boxes[..., 2])
    np.maximum(corners[..., 1], corners[..., 3], out=boxes[..., 3])
    return boxes.reshape(rows, cols)


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    preds = random_boxes(rng, (ROWS, COLS))
    targets = random_boxes(rng, (ROWS, COLS))
    # make some pairs nested, touching and identical
    t = targets.reshape(ROWS, COLS // 4, 4)
    p = preds.reshape(ROWS, COLS // 4, 4)
    t[::7] = p[::7]  # identical
    t[1::7, :, 0] = p[1::7, :, 2]  # touching at x: target starts where the prediction ends
    t[1::7, :, 2] = np.maximum(t[1::7, :, 0], t[1::7, :, 2])
    return {"preds": preds, "targets": targets}


def reference(preds: np.ndarray, targets: np.ndarray) -> dict[str, np.ndarray]:
    a = preds.astype(np.float32).reshape(len(preds), -1, 4)
    b = targets.astype(np.float32).reshape(len(targets), -1, 4)
    ax1, ay1, ax2, ay2 = (a[..., i] for i in range(4))
    bx1, by1, bx2, by2 = (b[..., i] for i in range(4))
    zero = np.float32(0)
    area_a = (ax2 - ax1) * (ay2 - ay1)
    area_b = (bx2 - bx1) * (by2 - by1)
    w = np.maximum(np.minimum(ax2, bx2) - np.maximum(ax1, bx1), zero)
    h = np.maximum(np.minimum(ay2, by2) - np.maximum(ay1, by1), zero)
    inter = w * h
    union = (area_a + area_b) - inter
    iou = inter / np.maximum(union, EPS)
    big_w = np.maximum(np.maximum(ax2, bx2) - np.minimum(ax1, bx1), zero)
    big_h = np.maximum(np.maximum(ay2, by2) - np.minimum(ay1, by1), zero)
    enclose = np.maximum(big_w * big_h, EPS)
    giou = iou - (enclose - union) / enclose
    return {"out": giou.astype(np.float32)}
