"""The eager-torch GIoU of tests/runtime/test_giou_torch.py lowered by ncsim.torch.lower, run on the
simulated core bit for bit against eager torch, and its simulated time beside the hand-written
programs/giou.s and the NKI kernel programs/nki/giou.py (issue 13 item 6).

    python examples/giou_lowered.py                 # [1024, 256, 4] boxes, as giou.s
    python examples/giou_lowered.py --rows 256      # fewer rows
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np
import torch

import ncsim
import ncsim.torch as nt
from ncsim import nki

ROOT = Path(__file__).resolve().parent.parent


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--boxes", type=int, default=256)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.runtime.test_giou_torch import boxes, giou  # the eager GIoU, reused as it is

    preds, targets = boxes(np.random.default_rng(0), args.rows, 4 * args.boxes)
    a = torch.from_numpy(preds).reshape(args.rows, args.boxes, 4)
    b = torch.from_numpy(targets).reshape(args.rows, args.boxes, 4)
    v = nt.validate(giou, a, b)
    print(f"lowered torch GIoU [{args.rows}, {args.boxes}, 4]: {v.outputs[0].line()}")
    print(f"  ncsim.torch.lower          {v.run.latency_us:10.3f} us simulated, {v.run.instructions} instructions")
    nki.install_alias()
    kernel = _module(ROOT / "programs" / "nki" / "giou.py", "giou_nki").giou_kernel
    nki.simulate_kernel(kernel, preds, targets, values=False)
    print(f"  programs/nki/giou.py       {nki.last_run().latency_us:10.3f} us simulated,"
          f" {nki.last_run().result.instructions} instructions")
    if (args.rows, args.boxes) == (1024, 256):  # giou.s is written for this size
        r = ncsim.run(ROOT / "programs" / "giou.s", sidecar=False, check=False, values=False)
        print(f"  programs/giou.s            {r.report.total_ns / 1000:10.3f} us simulated, {r.instructions} instructions")
    if not v.bit_exact:
        sys.exit(1)


if __name__ == "__main__":
    main()
