"""Smoke test of tools/bench_pipeline.py: its program assembles to the count it states, and every
phase runs on a one-block program with no race (the assembler's .sync auto must order everything)."""

import importlib.util
import tempfile
from pathlib import Path

from ncsim.asm.assembler import Assembler

TOOL = Path(__file__).resolve().parent.parent / "tools" / "bench_pipeline.py"


def load_tool():
    spec = importlib.util.spec_from_file_location("bench_pipeline", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_program_counts():
    bp = load_tool()
    for blocks in (1, 3):
        asm = Assembler()
        asm.assemble(bp.program_text(blocks), "bench.s")
        assert asm.program.count == bp.PROLOGUE + blocks * bp.BLOCK
    assert [bp.blocks_for(n) for n in (10**4, 10**5, 10**6)] == [12, 123, 1225]


def test_pipeline_runs_without_races():
    bp = load_tool()
    with tempfile.TemporaryDirectory() as tmp:
        count, rows, notes = bp.run_pipeline(bp.program_text(1), Path(tmp), {"values"}, values_max=0,
                                             memory=bp.PeakMemory())
    assert count == bp.PROLOGUE + bp.BLOCK
    assert {n: r["status"] for n, r in rows.items()} == {n: "skipped" if n == "values" else "ok" for n in bp.PHASES}
    assert notes["races"] == 0
    assert notes["trace_bytes"] > 0
