"""A write of a whole SBUF tile that holds data starts a new lifetime of the tile, which takes the
tile's other buffer when the pool has one or may grow and the memory has room (Tracer.renew;
docs/nki.md "Buffer policy"): the load of the next window need not wait for the sum of the last.
Values stay those of the written program; partial writes, in-place updates, direct allocation and a
full memory keep the tile where it is."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import ncsim.nki.compiler as ncc
import ncsim.nki.isa as nisa
import ncsim.nki.language as nl
from ncsim import dtypes, nki
from ncsim.asm.objfile import TensorEntry
from ncsim.nki.tensor import Buffer, View
from ncsim.nki.tracer import _covers

F32 = np.float32


def _x() -> np.ndarray:
    return np.random.default_rng(3).standard_normal((128, 1024)).astype(F32)


def _sums(x: np.ndarray) -> np.ndarray:
    return x.reshape(128, 4, 256).sum(axis=2, dtype=F32)


@nki.jit
def windows(x):
    """Four windows loaded in turn into one block of a block tensor, each summed into a column."""
    out = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.shared_hbm)
    win = nl.ndarray((1, nl.par_dim(128), 256), dtype=x.dtype, buffer=nl.sbuf)
    part = nl.ndarray((nl.par_dim(128), 4), dtype=x.dtype, buffer=nl.sbuf)
    for j in range(4):
        nisa.dma_copy(dst=win[0], src=x[:, j * 256:(j + 1) * 256])
        part[:, j:j + 1] = nisa.tensor_reduce(np.add, win[0], axis=1, keepdims=True)
    nl.store(out, part)
    return out


@nki.jit
def half_windows(x):
    """windows, each load filling half of the block."""
    out = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.shared_hbm)
    win = nl.ndarray((1, nl.par_dim(128), 512), dtype=x.dtype, buffer=nl.sbuf)
    part = nl.ndarray((nl.par_dim(128), 4), dtype=x.dtype, buffer=nl.sbuf)
    for j in range(4):
        nisa.dma_copy(dst=win[0, :, 0:256], src=x[:, j * 256:(j + 1) * 256])
        part[:, j:j + 1] = nisa.tensor_reduce(np.add, win[0, :, 0:256], axis=1, keepdims=True)
    nl.store(out, part)
    return out


def _load_places(run) -> list[int]:
    return [i.operands["dst"].offset for i in run.program.instructions
            if i.mnemonic == "dma_copy" and i.operands["dst"].memory.name.lower() == "sbuf"]


def test_a_tile_loaded_whole_again_takes_its_other_buffer_and_keeps_its_values():
    x = _x()
    renewed = nki.simulate(windows, (x,), {})
    kept = nki.simulate(windows, (x,), {}, renew=False)
    np.testing.assert_array_equal(renewed.outputs, kept.outputs)
    np.testing.assert_allclose(renewed.outputs, _sums(x), rtol=1e-5, atol=1e-4)
    places = _load_places(renewed)
    assert len(set(places)) == 2 and places[0] != places[1] and places[0] == places[2], places
    assert len(set(_load_places(kept))) == 1
    # the loads no longer wait for the sums before them
    assert renewed.latency_us < 0.8 * kept.latency_us


def test_a_partial_write_keeps_the_tile_in_its_buffer():
    x = _x()
    run = nki.simulate(half_windows, (x,), {})
    np.testing.assert_allclose(run.outputs, _sums(x), rtol=1e-5, atol=1e-4)
    assert len(set(_load_places(run))) == 1


def test_an_in_place_update_reads_what_it_writes_and_is_not_renewed():
    @nki.jit
    def bump(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        for _ in range(3):
            t[...] = nisa.tensor_scalar(t, np.add, 1.0)
        nl.store(out, t)
        return out

    x = _x()[:, :64]
    run = nki.simulate(bump, (x,), {})
    np.testing.assert_array_equal(run.outputs, ((x + F32(1)) + F32(1)) + F32(1))
    places = {i.operands["dst"].offset for i in run.program.instructions if i.mnemonic == "tensor_scalar"}
    assert len(places) == 1


def test_a_view_taken_before_the_rewrite_reads_the_new_contents():
    @nki.jit
    def stale_view(x):
        out = nl.ndarray((2, 128, 256), dtype=x.dtype, buffer=nl.shared_hbm)
        win = nl.ndarray((1, nl.par_dim(128), 256), dtype=x.dtype, buffer=nl.sbuf)
        view = win[0, :, :]
        for j in range(2):
            nisa.dma_copy(dst=win[0], src=x[:, j * 256:(j + 1) * 256])
            nl.store(out[j], nl.copy(view))
        return out

    x = _x()
    run = nki.simulate(stale_view, (x,), {})
    assert len(set(_load_places(run))) == 2
    np.testing.assert_array_equal(run.outputs, x[:, :512].reshape(128, 2, 256).transpose(1, 0, 2))


def test_a_tile_too_large_for_two_buffers_stays_and_spills_nothing():
    @nki.jit
    def big_windows(x):
        out = nl.ndarray((128, 2), dtype=x.dtype, buffer=nl.shared_hbm)
        win = nl.ndarray((1, nl.par_dim(128), 28 * 1024), dtype=x.dtype, buffer=nl.sbuf)  # 112 KiB a partition
        part = nl.ndarray((nl.par_dim(128), 2), dtype=x.dtype, buffer=nl.sbuf)
        for j in range(2):
            nisa.dma_copy(dst=win[0], src=x[:, j * 28 * 1024:(j + 1) * 28 * 1024])
            part[:, j:j + 1] = nisa.tensor_reduce(np.add, win[0], axis=1, keepdims=True)
        nl.store(out, part)
        return out

    x = np.random.default_rng(4).standard_normal((128, 56 * 1024)).astype(F32)
    run = nki.simulate(big_windows, (x,), {})
    np.testing.assert_allclose(run.outputs, x.reshape(128, 2, -1).sum(axis=2, dtype=F32), rtol=1e-4, atol=1e-2)
    loads = [i for i in run.program.instructions if i.mnemonic == "dma_copy"]
    assert len(loads) == 3  # two loads and the store: no spill
    assert len(set(_load_places(run))) == 1


def test_directly_allocated_tiles_keep_their_places():
    @nki.jit
    def placed(x):
        out = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        win = nl.ndarray((1, nl.par_dim(128), 256), dtype=x.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        part = nl.ndarray((nl.par_dim(128), 4), dtype=x.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
        for j in range(4):
            nisa.dma_copy(dst=win[0], src=x[:, j * 256:(j + 1) * 256])
            part[:, j:j + 1] = nisa.tensor_reduce(np.add, win[0], axis=1, keepdims=True)
        nl.store(out, part)
        return out

    x = _x()
    run = nki.simulate(placed, (x,), {})
    np.testing.assert_allclose(run.outputs, _sums(x), rtol=1e-5, atol=1e-4)
    assert set(_load_places(run)) == {0}


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_only_a_view_of_every_byte_once_counts_as_a_whole_write(data):
    """_covers (the whole-write rule renew and spills follow) against the elements a view touches, listed one by one: a view it takes for whole
    touches every element of every partition exactly once (sound), and every such view with positive
    steps is taken for whole (complete; reversed views are left in place, which is only slower)."""
    parts = data.draw(st.sampled_from([1, 2, 4]))
    free = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    entry = TensorEntry("t", "sbuf", dtypes.FLOAT32, (parts, *free), 0, 0, "tile")
    buf = Buffer(entry, "t", stored=True)
    per = int(np.prod(free))
    if data.draw(st.booleans()):  # random patterns
        p0 = data.draw(st.integers(0, parts - 1))
        pn = data.draw(st.integers(1, parts - p0))
        dims = tuple(data.draw(st.lists(st.tuples(st.integers(-4, 12), st.integers(1, 6)), min_size=1, max_size=3)))
        offset = data.draw(st.integers(0, per))
    else:  # the tile's own layout, its axes in any order, an axis of one maybe added, then maybe one change
        p0, pn, offset = 0, parts, 0
        steps = [int(np.prod(free[i + 1:])) for i in range(len(free))]
        dims = data.draw(st.permutations(list(zip(steps, free))))
        if data.draw(st.booleans()):
            dims.insert(data.draw(st.integers(0, len(dims))), (data.draw(st.integers(-3, 9)), 1))
        change = data.draw(st.sampled_from(["none", "step", "count", "offset", "partition"]))
        i = data.draw(st.integers(0, len(dims) - 1))
        if change == "step":
            dims[i] = (dims[i][0] + data.draw(st.sampled_from([-1, 1])), dims[i][1])
        elif change == "count" and dims[i][1] > 1:
            dims[i] = (dims[i][0], dims[i][1] - 1)
        elif change == "offset":
            offset = 1
        elif change == "partition" and parts > 1:
            p0, pn = 1, parts - 1
        dims = tuple(dims)
    view = View(buf, p0, offset, ((0, pn), *dims), dtypes.FLOAT32)
    touched = sorted(offset + sum(s * i for (s, _), i in zip(dims, idx))
                     for idx in itertools.product(*(range(c) for _, c in dims)))
    whole = p0 == 0 and pn == parts and touched == list(range(per))
    got = _covers(view, {"dst": view}, "dst")
    if got:
        assert whole, (dims, offset, p0, pn)
    if whole and all(s > 0 for s, c in dims if c > 1):
        assert got, (dims, offset)
    # another operand viewing the same tile (an in-place update) is never renewed
    assert not _covers(view, {"dst": view, "data": View.of(buf)}, "dst")
