"""The NKI front end's scheduler (ncsim.nki.schedule): the dependencies it finds against a pairwise
reference, its order a topological one, kernels scheduled giving the written order's values bit for
bit, independent chains interleaved, no_reorder blocks kept in order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ncsim.nki.compiler as ncc
import ncsim.nki.isa as nisa
import ncsim.nki.language as nl
from ncsim import nki
from ncsim.nki.schedule import dependencies, list_schedule

F32 = np.float32


# ------------------------------------------------------------------ dependencies, against a reference
def _footprints(draw_rows: list[list[tuple[int, int, int, int, int, bool]]]):
    rows = [r for rs in draw_rows for r in rs]
    ptr = np.zeros(len(draw_rows) + 1, np.int64)
    np.cumsum([len(rs) for rs in draw_rows], out=ptr[1:])
    col = (lambda i, dt: np.array([r[i] for r in rows], dt))
    mem, p0, pn, lo, size, w = (col(0, np.int8), col(1, np.int64), col(2, np.int64), col(3, np.int64),
                                col(4, np.int64), col(5, np.bool_))
    pn = np.where(mem == 3, 0, pn)  # HBM: no partitions
    access = np.where(w, 2, 1).astype(np.int8)
    return ptr, mem, p0, pn, lo, lo + size, access


def _meet(a, b) -> bool:
    """Two footprint rows (mem, p0, partitions, lo, hi, write) conflict: same memory, partitions and
    bytes overlapping, one writing."""
    if a[0] != b[0] or not (a[5] or b[5]):
        return False
    ap1, bp1 = a[1] + max(a[2], 1), b[1] + max(b[2], 1)
    return a[1] < bp1 and b[1] < ap1 and a[3] < b[4] and b[3] < a[4]


def _reach(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    r = np.eye(n, dtype=bool)
    for b in range(n):  # edges go forward in program order: one pass in order closes them
        for a in src[dst == b]:
            r[:, b] |= r[:, a]
    return r


_row = st.tuples(st.integers(1, 3), st.integers(0, 6), st.integers(1, 3), st.integers(0, 12), st.integers(1, 6),
                 st.booleans())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_row, min_size=0, max_size=3), min_size=1, max_size=14), st.data())
def test_every_conflict_is_ordered_and_every_edge_is_one(instrs, data):
    n = len(instrs)
    barrier = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool) & (
        np.arange(n) % 5 == 4)
    region = np.full(n, -1, np.int64)
    ptr, mem, p0, pn, lo, hi, access = _footprints(instrs)
    ks = np.arange(n, dtype=np.int64)
    src, dst = dependencies(ks, ptr, mem, p0, pn, lo, hi, access, barrier, region)
    assert (src < dst).all()
    reach = _reach(n, src, dst)
    rows = [[(m, a, b, c, c + s, w) for (m, a, b, c, s, w) in rs] for rs in instrs]
    rows = [[(m, a, 0 if m == 3 else b, c, d, w) for (m, a, b, c, d, w) in rs] for rs in rows]
    for b in range(n):
        for a in range(b):
            if barrier[a] or barrier[b] or any(_meet(x, y) for x in rows[a] for y in rows[b]):
                assert reach[a, b], (a, b)
    between_barriers = ~barrier[src] & ~barrier[dst]
    for a, b in zip(src[between_barriers], dst[between_barriers]):
        if not np.any(barrier[a:b]):  # (an edge from the last barrier is not a conflict)
            assert any(_meet(x, y) for x in rows[a] for y in rows[b]), (a, b)


def test_no_reorder_blocks_chain_their_instructions():
    n = 6
    ptr = np.zeros(n + 1, np.int64)  # no footprints: only the blocks order anything
    empty = np.zeros(0, np.int64)
    region = np.array([0, -1, 0, 1, 0, 1], np.int64)
    src, dst = dependencies(np.arange(n, dtype=np.int64), ptr, empty.astype(np.int8), empty, empty, empty, empty,
                            empty.astype(np.int8), np.zeros(n, bool), region)
    assert sorted(zip(src.tolist(), dst.tolist())) == [(0, 2), (2, 4), (3, 5)]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 30), st.data())
def test_the_list_schedule_is_a_topological_order(n, data):
    edges = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    pairs = sorted({(min(a, b), max(a, b)) for a, b in edges if a != b})
    src = np.array([a for a, _ in pairs], np.int64)
    dst = np.array([b for _, b in pairs], np.int64)
    succ_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=succ_ptr[1:])
    succ = dst[np.argsort(src, kind="stable")]
    npred = np.bincount(dst, minlength=n).astype(np.int64)
    stream = np.array(data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), np.int64)
    busy = np.array(data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n)), np.int64)
    is_dma = np.zeros(n, bool)
    zeros = np.zeros(n, np.int64)
    order = list_schedule(stream, busy, is_dma, zeros, zeros, np.zeros(n + 1, np.int64), np.zeros(0, np.int64), 1,
                          5, succ_ptr, succ, npred)
    assert sorted(order.tolist()) == list(range(n))
    place = np.empty(n, np.int64)
    place[order] = np.arange(n)
    assert (place[src] < place[dst]).all()


# ------------------------------------------------------------------ kernels
@nki.jit
def two_chains(x):
    """Two tiles, each a chain: a window is loaded into the tile's own buffer, summed into a column of
    the tile's own result, and the next window waits until the sum has read the buffer (the windows
    fill half of the buffer: a load of all of it would take the tile's other buffer, Tracer.renew,
    and not wait)."""
    out = nl.ndarray((2, 128, 4), dtype=x.dtype, buffer=nl.shared_hbm)
    win = nl.ndarray((2, nl.par_dim(128), 512), dtype=x.dtype, buffer=nl.sbuf)
    part = nl.ndarray((2, nl.par_dim(128), 4), dtype=x.dtype, buffer=nl.sbuf)
    for t in nl.affine_range(2):
        for j in range(4):
            nisa.dma_copy(dst=win[t, :, 0:256], src=x[t, :, j * 256:(j + 1) * 256])
            part[t, :, j:j + 1] = nisa.tensor_reduce(np.add, win[t, :, 0:256], axis=1, keepdims=True)
        nl.store(out[t], part[t])
    return out


@nki.jit
def two_chains_kept(x):
    """two_chains with its loop a no_reorder block."""
    out = nl.ndarray((2, 128, 4), dtype=x.dtype, buffer=nl.shared_hbm)
    win = nl.ndarray((2, nl.par_dim(128), 512), dtype=x.dtype, buffer=nl.sbuf)
    part = nl.ndarray((2, nl.par_dim(128), 4), dtype=x.dtype, buffer=nl.sbuf)
    for t in nl.affine_range(2, directives=ncc.no_reorder()):
        for j in range(4):
            nisa.dma_copy(dst=win[t, :, 0:256], src=x[t, :, j * 256:(j + 1) * 256])
            part[t, :, j:j + 1] = nisa.tensor_reduce(np.add, win[t, :, 0:256], axis=1, keepdims=True)
        nl.store(out[t], part[t])
    return out


@nki.jit
def two_chains_with(x):
    """two_chains with its loop inside `with nl.no_reorder()`."""
    out = nl.ndarray((2, 128, 4), dtype=x.dtype, buffer=nl.shared_hbm)
    win = nl.ndarray((2, nl.par_dim(128), 512), dtype=x.dtype, buffer=nl.sbuf)
    part = nl.ndarray((2, nl.par_dim(128), 4), dtype=x.dtype, buffer=nl.sbuf)
    with nl.no_reorder():
        for t in nl.affine_range(2):
            for j in range(4):
                nisa.dma_copy(dst=win[t, :, 0:256], src=x[t, :, j * 256:(j + 1) * 256])
                part[t, :, j:j + 1] = nisa.tensor_reduce(np.add, win[t, :, 0:256], axis=1, keepdims=True)
            nl.store(out[t], part[t])
    return out


def _x() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((2, 128, 1024)).astype(F32)


def _reference(x: np.ndarray) -> np.ndarray:
    return x.reshape(2, 128, 4, 256).sum(axis=3, dtype=F32)


def test_independent_chains_interleave_and_keep_their_values():
    x = _x()
    written = nki.simulate(two_chains, (x,), {}, schedule=False)
    scheduled = nki.simulate(two_chains, (x,), {}, schedule=True)
    np.testing.assert_array_equal(scheduled.outputs, written.outputs)
    np.testing.assert_allclose(scheduled.outputs, _reference(x), rtol=1e-5, atol=1e-4)
    # written, Sync issues tile 0's loads and then tile 1's, each load waiting for the sum before it;
    # scheduled, the two chains' loads alternate and their waits overlap
    assert scheduled.latency_us < 0.75 * written.latency_us
    sync = [i for i in scheduled.program.instructions if i.engine == "sync"]
    tiles = [int(i.operands["src"].offset >= 128 * 1024 * 4) for i in sync]
    assert tiles[:4] != [0, 0, 0, 0], tiles


@pytest.mark.parametrize("kernel", [two_chains_kept, two_chains_with], ids=["directives", "with"])
def test_a_no_reorder_block_keeps_the_written_order(kernel):
    x = _x()
    written = nki.simulate(two_chains, (x,), {}, schedule=False)
    kept = nki.simulate(kernel, (x,), {}, schedule=True)
    assert kept.latency_us == written.latency_us
    np.testing.assert_array_equal(kept.outputs, written.outputs)


def test_scheduled_kernels_compute_the_written_orders_values():
    """A kernel with matmuls accumulating in PSUM, Scalar and Vector work and rotating buffers: the
    scheduled program's outputs are the written program's, bit for bit."""

    @nki.jit
    def mixed(a, b):
        out = nl.ndarray((256, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        for m in nl.affine_range(2):
            acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(2):
                at = nl.load(a[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                bt = nl.load(b[k * 128:(k + 1) * 128, :])
                acc += nisa.nc_matmul(at, bt)
            r = nl.exp(nl.multiply(acc, 0.01))
            nl.store(out[m * 128:(m + 1) * 128, :], nl.add(r, nl.max(r, axis=1, keepdims=True)))
        return out

    rng = np.random.default_rng(2)
    a = rng.standard_normal((256, 256)).astype(F32)
    b = rng.standard_normal((256, 512)).astype(F32)
    written = nki.simulate(mixed, (a, b), {}, schedule=False)
    scheduled = nki.simulate(mixed, (a, b), {}, schedule=True)
    np.testing.assert_array_equal(scheduled.outputs, written.outputs)
    assert scheduled.latency_us <= written.latency_us


CHAINS_SCRIPT = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

@nki.jit
def chains(x):
    out = nl.ndarray((2, 128, 4), dtype=x.dtype, buffer=nl.shared_hbm)
    win = nl.ndarray((2, nl.par_dim(128), 512), dtype=x.dtype, buffer=nl.sbuf)
    part = nl.ndarray((2, nl.par_dim(128), 4), dtype=x.dtype, buffer=nl.sbuf)
    for t in nl.affine_range(2):
        for j in range(4):
            nisa.dma_copy(dst=win[t, :, 0:256], src=x[t, :, j * 256:(j + 1) * 256])
            part[t, :, j:j + 1] = nisa.tensor_reduce(np.add, win[t, :, 0:256], axis=1, keepdims=True)
        nl.store(out[t], part[t])
    return out

chains(np.ones((2, 128, 1024), np.float32))
"""


def test_ncsim_nki_no_schedule_times_the_written_order(tmp_path):
    import re
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "chains.py").write_text(CHAINS_SCRIPT)
    ncsim = str(Path(sys.executable).parent / "ncsim")
    times = []
    for flags in ([], ["--no-schedule"]):
        done = subprocess.run([ncsim, "nki", "--timing-only", *flags, str(tmp_path / "chains.py")], check=False,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        times.append(float(re.search(r"instructions, ([0-9.]+) µs", done.stderr).group(1)))
    x = _x()
    assert times[1] == pytest.approx(nki.simulate(two_chains, (x,), {}, values=False, schedule=False).latency_us,
                                     abs=1e-3)
    assert times[0] == pytest.approx(nki.simulate(two_chains, (x,), {}, values=False, schedule=True).latency_us,
                                     abs=1e-3)
    assert times[0] < times[1]
