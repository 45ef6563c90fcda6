"""Issue 13 item 6: the eager GIoU of tests/runtime/test_giou_torch.py (the same function) lowered by
ncsim.torch.lower and run bit for bit against eager torch, at a reduced size (the full [1024, 256, 4]
run is examples/giou_lowered.py, its time in the README)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ncsim.torch as nt
from tests.runtime.test_giou_torch import boxes, giou

ROOT = Path(__file__).resolve().parent.parent


def test_lowered_giou_is_bit_exact_on_every_kind_of_box_pair():
    preds, targets = boxes(np.random.default_rng(7), 256, 4 * 200)  # 200 boxes: a partial chunk
    a = torch.from_numpy(preds).reshape(256, 200, 4)
    b = torch.from_numpy(targets).reshape(256, 200, 4)
    v = nt.validate(giou, a, b)
    assert v.bit_exact, v.format()
    got = v.run.outputs[0]
    assert got.shape == (256, 200) and (got == 1).any() and (got < 0).any()  # identical and far-apart pairs
    asm = nt.lower(giou, a, b).asm()
    # the four corners of each input come from one contiguous load read with a step of 4 in SBUF
    assert "activation" not in asm and asm.count("\nnc_matmul") == 0


def test_the_example_prints_the_lowered_time_beside_the_nki_kernel():
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "giou_lowered.py"), "--rows", "128",
                          "--boxes", "128"], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "bit-exact" in out and "ncsim.torch.lower" in out and "programs/nki/giou.py" in out
