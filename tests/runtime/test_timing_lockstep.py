"""The DMA engines in lockstep (timing._lockstep): runs of engines whose pieces are alike in every
transfer are simulated as one engine each; the result must be the one of the engines one by one, to
the bit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ncsim.config import Config
from ncsim.runtime import timing
from ncsim.runtime.races import find_races
from ncsim.runtime.report import report
from ncsim.runtime.timing import ENGINES, time_program
from tests.engines.harness import Layout, make
from tests.runtime.test_timing import check_schedule, dma_program, random_program, with_sync

CFG = Config()
FAST = dataclasses.replace(CFG, dma_engine_bandwidth=CFG.dma_engine_bandwidth * 4)  # HBM is the limit
COLUMNS = ("avail", "ready", "start", "end", "done", "extra_ticks", "extra_flags", "piece_ptr", "piece_start",
           "piece_end", "edge_signal", "edge_wait", "edge_sem", "hbm_time", "hbm_rate")


def timed(streams, config: Config, lockstep: bool, monkeypatch) -> tuple[timing.TimingResult, float]:
    monkeypatch.setattr(timing, "_LOCKSTEP", lockstep)
    profile: dict[str, float] = {}
    r = time_program(streams, config, profile=profile)
    return r, profile["dma_engines"]


def assert_same(a: timing.TimingResult, b: timing.TimingResult) -> None:
    """The same columns (in lockstep the pieces' times are written out from the class pieces'), and the
    same report and race check (in lockstep they read the class pieces, one per class of engines)."""
    assert a.total_ticks == b.total_ticks
    for name in COLUMNS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    ra, rb = report(a), report(b)
    for f in dataclasses.fields(ra):
        x, y = getattr(ra, f.name), getattr(rb, f.name)
        assert np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y, f.name
    assert ra.format() == rb.format()
    assert find_races(a).format() == find_races(b).format()


@st.composite
def wide_program(draw) -> dict[str, list]:
    """Transfers that cover every DMA engine with one alike piece each (128 partitions to or from
    SBUF, HBM to HBM of 16 rows or more) on three queues, from two issuing engines, with Vector work and
    waits between the three."""
    lay = Layout()
    streams: dict[str, list] = {"sync": [], "gpsimd": [], "vector": []}
    for _ in range(draw(st.integers(1, 30))):
        engine = draw(st.sampled_from(sorted(streams)))
        others = [o for o in streams if o != engine and streams[o]]
        waits: tuple[str, ...] = ()
        if others and draw(st.booleans()):
            other = draw(st.sampled_from(others))
            waits = (f"s{ENGINES.index(other)}>={draw(st.integers(1, len(streams[other])))}",)
        free = draw(st.sampled_from((1, 3, 64, 512, 2048)))
        if engine == "vector":
            instr = make("tensor_copy", "vector", dst=lay.tile("f32", 128, free), src=lay.tile("f32", 128, free))
        else:
            kind = draw(st.integers(0, 2))
            h = lay.hbm("f32", 128 if kind < 2 else draw(st.sampled_from((16, 32, 128))), free)
            t = lay.tile("f32", 128, free) if kind < 2 else lay.hbm("f32", *h.shape)
            dst, src = (t, h) if kind == 0 else (h, t)
            instr = make("dma_copy", engine, dst=dst, src=src, queue=draw(st.integers(0, 2)))
        streams[engine].append(with_sync(instr, wait=waits, signal=(f"s{ENGINES.index(engine)}+=1",)))
    return streams


@settings(max_examples=40, deadline=None)
@given(wide_program(), st.sampled_from((CFG, FAST)))
def test_dma_engines_in_lockstep_time_as_one_by_one(streams, config):
    with pytest.MonkeyPatch.context() as mp:
        one, used = timed(streams, config, True, mp)
        each, _ = timed(streams, config, False, mp)
    if one.pieces:
        assert used == 1.0  # every transfer has one alike piece on each engine: one class
    assert_same(one, each)
    check_schedule(one) if config is CFG else None


def test_a_transfer_on_some_dma_engines_splits_them_into_classes(monkeypatch):
    lay = Layout()
    full = make("dma_copy", "sync", dst=lay.tile("f32", 128, 512), src=lay.hbm("f32", 128, 512), queue=0)
    part = make("dma_copy", "sync", dst=lay.tile("f32", 16, 512), src=lay.hbm("f32", 16, 512), queue=1)
    assert timed({"sync": [full, full]}, CFG, True, monkeypatch)[1] == 1.0
    assert len(set(timed({"sync": [part]}, CFG, True, monkeypatch)[0].piece_engine)) == 2  # engines 0 and 1
    r, simulated = timed({"sync": [full, part, full]}, CFG, True, monkeypatch)
    assert simulated == 2.0  # engines 0-1 (alike in both transfers), engines 2-15
    assert_same(r, timed({"sync": [full, part, full]}, CFG, False, monkeypatch)[0])


@settings(max_examples=40, deadline=None)
@given(st.data(), st.sampled_from((CFG, FAST)))
def test_classes_of_dma_engines_time_as_one_by_one(data, config):
    """Random programs with transfers of few partitions (some engines only) and compute work."""
    streams = data.draw(dma_program()) if data.draw(st.booleans()) else random_program(data.draw)
    with pytest.MonkeyPatch.context() as mp:
        one, _ = timed(streams, config, True, mp)
        each, simulated = timed(streams, config, False, mp)
    assert simulated == config.dma_engines
    assert_same(one, each)


def test_engines_that_would_move_at_different_rates_are_timed_one_by_one(monkeypatch):
    """At this HBM bandwidth 16 pieces at their cap need exactly the cap; rounding gives the first
    DMA engines their cap and the others the fair level, a hair lower: the engines part, so the
    lockstep run gives up and the engines are timed one by one."""
    config = dataclasses.replace(CFG, hbm_bandwidth=220320000000.00003)
    lay = Layout()
    streams = {"sync": [make("dma_copy", "sync", dst=lay.tile("f32", 128, 512), src=lay.hbm("f32", 128, 512),
                             queue=q % 2) for q in range(6)]}
    one, used = timed(streams, config, True, monkeypatch)
    assert used == CFG.dma_engines
    assert_same(one, timed(streams, config, False, monkeypatch)[0])
    assert timed(streams, CFG, True, monkeypatch)[1] == 1.0  # at the usual bandwidth it is lockstep
