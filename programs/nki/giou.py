"""Generalized IoU of pairs of boxes, written in NKI (the neuronxcc.nki dialect of SDK 2.20-2.26).

    ncsim nki programs/nki/giou.py                 # 1024 x 256 pairs, checked bit for bit, timed
    ncsim nki programs/nki/giou.py --rows 256      # fewer rows

The kernel follows the style of the NKI GIoU example of Chaim Rand's "On the Programmability of AWS
Trainium and Inferentia" (Towards Data Science, 2024-11-01): boxes [rows, n, 4] viewed as
[rows, 4 n], tiles of 128 rows (nl.tile_size.pmax) x 512 values (nl.tile_size.psum_fmax, 128 boxes),
each corner plane read from the loaded tile by advanced indexing `4 * i_f + k`, the clamps as
nl.maximum / nl.minimum, the quotients as divisions, epsilon 1e-5. Its order of operations is the
one of the eager torch GIoU (tests/runtime/test_giou_torch.py) and of programs/giou.s: the enclosing
area is clamped at epsilon *before* the union is subtracted from it (the article's kernel subtracts
first, which differs from torch when both boxes are empty).

The same inputs and numpy reference as programs/giou.s (its sidecar programs/giou.py): integer
corners in a 256 x 256 image, every operation rounded to fp32.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import neuronxcc.nki as nki  # noqa: PLR0402 - the import NKI's documentation writes
import neuronxcc.nki.language as nl
import numpy as np

EPSILON = 1e-5


@nki.jit
def giou_kernel(preds, targets):
    """preds, targets: f32[rows, 4 n], each box (x1, y1, x2, y2); returns f32[rows, n]."""
    tile_m = nl.tile_size.pmax  # 128 rows, one per partition
    tile_n = nl.tile_size.psum_fmax  # 512 values: 128 boxes
    rows, cols = preds.shape
    assert rows % tile_m == 0 and cols % tile_n == 0 and targets.shape == preds.shape
    out = nl.ndarray((rows, cols // 4), dtype=preds.dtype, buffer=nl.shared_hbm)

    i_p = nl.arange(tile_m)[:, None]
    i_f = nl.arange(tile_n // 4)[None, :]

    for m in nl.affine_range(rows // tile_m):
        for n in nl.affine_range(cols // tile_n):
            p = nl.load(preds[m * tile_m:(m + 1) * tile_m, n * tile_n:(n + 1) * tile_n])
            t = nl.load(targets[m * tile_m:(m + 1) * tile_m, n * tile_n:(n + 1) * tile_n])
            p_x1, p_y1, p_x2, p_y2 = (p[i_p, 4 * i_f + k] for k in range(4))
            t_x1, t_y1, t_x2, t_y2 = (t[i_p, 4 * i_f + k] for k in range(4))

            area_p = (p_x2 - p_x1) * (p_y2 - p_y1)
            area_t = (t_x2 - t_x1) * (t_y2 - t_y1)

            # the intersection: its width and height clamped at 0
            w = nl.maximum(nl.minimum(p_x2, t_x2) - nl.maximum(p_x1, t_x1), 0.0)
            h = nl.maximum(nl.minimum(p_y2, t_y2) - nl.maximum(p_y1, t_y1), 0.0)
            inter = w * h
            union = (area_p + area_t) - inter
            iou = inter / nl.maximum(union, EPSILON)

            # the smallest enclosing box, its area clamped at epsilon
            big_w = nl.maximum(nl.maximum(p_x2, t_x2) - nl.minimum(p_x1, t_x1), 0.0)
            big_h = nl.maximum(nl.maximum(p_y2, t_y2) - nl.minimum(p_y1, t_y1), 0.0)
            enclose = nl.maximum(big_w * big_h, EPSILON)

            giou = iou - (enclose - union) / enclose
            nl.store(out[m * tile_m:(m + 1) * tile_m, n * (tile_n // 4):(n + 1) * (tile_n // 4)], value=giou)
    return out


def _sidecar():
    """programs/giou.py, the sidecar of programs/giou.s: its inputs and its numpy reference."""
    path = Path(__file__).resolve().parent.parent / "giou.py"
    spec = importlib.util.spec_from_file_location("giou_sidecar", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def boxes(rows: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two sets of [rows, n, 4] boxes with integer corners in [0, 256], some pairs identical and some
    touching: programs/giou.py's generator, so that 1024 x 256 boxes of seed 0 are the inputs
    `ncsim run programs/giou.s` takes from its sidecar."""
    sidecar = _sidecar()
    rng = np.random.default_rng(seed)
    p = sidecar.random_boxes(rng, (rows, 4 * n)).reshape(rows, n, 4)
    t = sidecar.random_boxes(rng, (rows, 4 * n)).reshape(rows, n, 4)
    t[::7] = p[::7]  # identical
    t[1::7, :, 0] = p[1::7, :, 2]  # touching along x
    t[1::7, :, 2] = np.maximum(t[1::7, :, 0], t[1::7, :, 2])
    return p, t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1024, help="rows of boxes (a multiple of 128)")
    ap.add_argument("--boxes", type=int, default=256, help="boxes per row (a multiple of 128)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    p, t = boxes(args.rows, args.boxes, args.seed)
    got = giou_kernel(p.reshape(args.rows, -1), t.reshape(args.rows, -1))
    run = nki.last_run() if hasattr(nki, "last_run") else None
    if got is None:  # a timing-only run (ncsim nki --timing-only) computes no values
        print(f"giou: {args.rows} x {args.boxes} pairs of boxes timed, no values")
    else:
        want = _sidecar().reference(p.reshape(args.rows, -1), t.reshape(args.rows, -1))["out"]
        differ = int(np.count_nonzero(got.view(np.uint32) != want.view(np.uint32)))
        print(f"giou: {args.rows} x {args.boxes} pairs of boxes; {got.size - differ} of {got.size} equal the"
              f" fp32 reference bit for bit" + (f", {differ} differ" if differ else ""))
        if differ:
            raise SystemExit(3)
    if run is not None:
        print(f"simulated {run.latency_us:.3f} µs; {run.report.verdict.text}")


if __name__ == "__main__":
    main()
