"""Sidecar of giou_gpsimd.s: giou.s's inputs and reference (programs/giou.py), so the two programs are
checked against the same values bit for bit."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("giou_sidecar", Path(__file__).with_name("giou.py"))
_giou = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_giou)

ROWS, COLS, EPS = _giou.ROWS, _giou.COLS, _giou.EPS
inputs = _giou.inputs
reference = _giou.reference
