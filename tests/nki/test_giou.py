"""programs/nki/giou.py, the NKI GIoU kernel, against the eager torch GIoU of
tests/runtime/test_giou_torch.py, bit for bit, at a reduced size; and the script run by `ncsim nki`."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ncsim import nki
from ncsim.nki.alias import install_alias, remove_alias

pytest.importorskip("torch")
from tests.runtime.test_giou_torch import boxes, torch_giou

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "programs" / "nki" / "giou.py"


@pytest.fixture(scope="module")
def giou():
    """The script as a module (its `import neuronxcc.nki` needs the alias while it is imported)."""
    install_alias()
    try:
        spec = importlib.util.spec_from_file_location("nki_giou", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        remove_alias()
    return module


def test_nki_giou_matches_torch_bit_for_bit(giou):
    rows, cols = 256, 1024  # 2 x 2 tiles of [128, 512]
    preds, targets = boxes(np.random.default_rng(7), rows, cols)
    # both boxes empty and at the same point: the enclosing area is 0, clamped to epsilon before the
    # union is subtracted (torch's order), so GIoU = 0 - (eps - 0) / eps = -1; subtracting first (the
    # programmability article's kernel) would give 0
    p, t = preds.reshape(rows, -1, 4), targets.reshape(rows, -1, 4)
    p[6::8] = t[6::8] = np.array([5, 7, 5, 7], np.float32)
    got = giou.giou_kernel(preds, targets)
    want = torch_giou(preds, targets)
    assert got.shape == want.shape == (rows, cols // 4)
    diff = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert diff.size == 0, f"{diff.size} elements differ from torch; first {np.unravel_index(diff[0], got.shape)}"
    assert np.all(got[6::8] == -1.0)
    assert np.all(got[5::8] < 0) and np.count_nonzero(got[0::8] == 1.0) > 1000
    run = nki.last_run()
    assert run.kernel == "giou_kernel" and run.result.instructions == 4 * 35  # per tile: 2 loads, 32 ops, a store
    assert "Vector" in run.report.verdict.text


def test_ncsim_nki_runs_the_giou_script_as_the_readme_says():
    """`ncsim nki programs/nki/giou.py` at its full size: values bit for bit, and the simulated time the
    README shows beside programs/giou.s's."""
    done = subprocess.run([str(Path(sys.executable).parent / "ncsim"), "nki", str(SCRIPT)],
                          check=False, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "giou: 1024 x 256 pairs of boxes; 262144 of 262144 equal the fp32 reference bit for bit" in done.stdout
    got = re.search(r"ncsim: kernel giou_kernel: 560 instructions, ([0-9.]+) µs simulated", done.stderr)
    assert got, done.stderr
    readme = (ROOT / "README.md").read_text()
    assert f"| `programs/nki/giou.py` (NKI, traced by ncsim) | 560: Vector 512, Sync 32, GpSimd 16 | {got.group(1)} µs |" \
        in readme
    # and giou.s's time beside it is the one its report in the README shows (tests/test_docs.py keeps that true)
    asm = re.search(r"total +[0-9.]+ ns = ([0-9.]+) µs", readme)
    assert asm and f"| `programs/giou.s` (hand-written assembly) | 560: Vector 448, Scalar 64, Sync 32, GpSimd 16 |" \
        f" {asm.group(1)} µs |" in readme
