"""Scalar engine instructions (see ncsim/engines/__init__.py for the execute/reference contract)."""

from __future__ import annotations
