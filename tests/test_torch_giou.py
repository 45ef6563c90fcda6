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


def test_the_readme_quotes_the_lowered_giou_as_it_runs():
    """The README's table row: the lowered GIoU at giou.s's size, [1024, 256, 4], timed (no values)."""
    a, b = (torch.zeros(1024, 256, 4) for _ in range(2))
    run = nt.lower(giou, a, b).run(a, b, values=False)
    engines = sorted((e for e in run.report.engines if e.instructions), key=lambda e: -e.instructions)
    counts = ", ".join(f"{'GpSimd' if e.name == 'gpsimd' else e.name.capitalize()} {e.instructions}" for e in engines)
    verdict = run.report.verdict.text
    busy = verdict.split("busy ")[1].split("%")[0]
    row = (f"| the eager torch GIoU lowered by `ncsim.torch.lower` | {run.instructions}: {counts} |"
           f" {run.latency_us:.3f} µs | {verdict.split(':')[0]} (busy {busy}%) |")
    assert row in (ROOT / "README.md").read_text(), row
