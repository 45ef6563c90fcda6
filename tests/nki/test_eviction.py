"""Automatic allocation when the memory is full (docs/nki.md "Buffer policy"): PSUM block tensors
made block by block, tiles the kernel no longer uses evicted to make room, and an evicted tile used
again refused at its line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ncsim.nki.isa as nisa
import ncsim.nki.language as nl
from ncsim import nki
from ncsim.config import Config
from ncsim.errors import AsmError

F32 = np.float32
HERE = Path(__file__).resolve()


def line_of(fragment: str) -> int:
    return next(n for n, text in enumerate(HERE.read_text().splitlines(), 1) if fragment in text)


@nki.jit
def streaming_blocks(a, b):
    """a^T b for 16 column blocks of b, each in a block of a PSUM tensor of 16 banks' worth (PSUM has
    8): each block is written, copied out and never read again."""
    n = b.shape[1] // 512
    out = nl.ndarray((a.shape[1], b.shape[1]), F32, buffer=nl.shared_hbm)
    ps = nl.ndarray((n, nl.par_dim(a.shape[1]), 512), F32, buffer=nl.psum)
    sa = nl.load(a)
    for j in nl.affine_range(n):
        ps[j] = nisa.nc_matmul(sa, nl.load(b[:, j * 512:(j + 1) * 512]))
        nl.store(out[:, j * 512:(j + 1) * 512], nl.copy(ps[j]))
    return out


def test_a_psum_tensor_of_more_blocks_than_banks_runs_when_used_a_few_at_a_time():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((128, 64)).astype(F32), rng.standard_normal((128, 16 * 512)).astype(F32)
    np.testing.assert_allclose(streaming_blocks(a, b), a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    psum = [e for e in nki.last_run().program.tensors.values() if e.memory == "psum"]
    assert all(e.address + 2048 <= 16384 for e in psum)


@nki.jit
def all_blocks_then_read(a, b):
    n = b.shape[1] // 512
    out = nl.ndarray((a.shape[1], 512), F32, buffer=nl.shared_hbm)
    ps = nl.ndarray((n, nl.par_dim(a.shape[1]), 512), F32, buffer=nl.psum)
    sa = nl.load(a)
    for j in nl.affine_range(n):
        ps[j] = nisa.nc_matmul(sa, nl.load(b[:, j * 512:(j + 1) * 512]))
    nl.store(out, nl.copy(ps[0]))  # block 0 was evicted for block 8
    return out


def test_reading_an_evicted_block_is_refused_at_its_line():
    with pytest.raises(AsmError) as e:
        all_blocks_then_read(np.zeros((128, 64), F32), np.zeros((128, 16 * 512), F32))
    assert e.value.loc.file == str(HERE) and e.value.loc.line == line_of("# block 0 was evicted")
    assert "block [0] of the [16, 64, 512] tensor" in e.value.message
    assert "ncsim spills SBUF tiles to HBM, not PSUM ones" in e.value.message


@nki.jit
def leftover_then_big(a, b):
    """The tutorial attention kernels' habit: a transpose's PSUM tile left in a variable after its loop
    (its Python reference keeps it live), then a tensor that needs every bank."""
    out = nl.ndarray((128, 8 * 512 + 256), F32, buffer=nl.shared_hbm)
    sa, sb = nl.load(a), nl.load(b)
    for j in nl.affine_range(2):
        t = nisa.nc_transpose(sa)  # t outlives the loop
        nl.store(out[:, 4096 + j * 128:4096 + (j + 1) * 128], nl.copy(t))
    ps = nl.ndarray((8, nl.par_dim(128), 512), F32, buffer=nl.psum)
    for j in nl.affine_range(8):
        ps[j] = nisa.nc_matmul(sa, sb)
    for j in nl.affine_range(8):
        nl.store(out[:, j * 512:(j + 1) * 512], nl.copy(ps[j]))
    return out


@nki.jit
def leftover_used_again(a, b):
    out = nl.ndarray((128, 128), F32, buffer=nl.shared_hbm)
    sa, sb = nl.load(a), nl.load(b)
    t = nisa.nc_transpose(sa)
    big = nl.ndarray((8, nl.par_dim(128), 512), F32, buffer=nl.psum)
    for j in nl.affine_range(8):
        big[j] = nisa.nc_matmul(sa, sb)
    nl.store(out, nl.copy(t))  # t was evicted for the blocks
    return out


def test_a_tile_left_in_a_variable_is_evicted_and_refused_only_if_used_again():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((128, 128)).astype(F32), rng.standard_normal((128, 512)).astype(F32)
    got = leftover_then_big(a, b)
    np.testing.assert_allclose(got[:, 4096:4224], a.T, rtol=1e-6)
    np.testing.assert_allclose(got[:, 3584:4096], a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    with pytest.raises(AsmError) as e:
        leftover_used_again(a, b)
    assert e.value.loc.line == line_of("# t was evicted for the blocks")
    assert "which was evicted: PSUM was full" in e.value.message


@nki.jit
def more_tiles_than_sbuf(a):
    """Twelve [128, 4096] fp32 tiles (16 KiB a partition each, 192 KiB in all) held at once in a list:
    SBUF (176 KiB usable) holds eleven, so the least recently used are spilled to HBM and reloaded
    when the stores read them."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    tiles = []
    for i in range(a.shape[0] // 128):
        tiles.append(nl.multiply(nl.load(a[i * 128:(i + 1) * 128, :]), 2.0))
    for i in reversed(range(a.shape[0] // 128)):
        nl.store(out[i * 128:(i + 1) * 128, :], tiles[i])
    return out


def test_sbuf_tiles_that_do_not_fit_are_spilled_and_reloaded():
    a = np.random.default_rng(2).standard_normal((12 * 128, 4096)).astype(F32)
    np.testing.assert_array_equal(more_tiles_than_sbuf(a), 2 * a)
    run = nki.last_run()
    spills = [e for e in run.program.tensors.values() if e.name.startswith("spill")]
    assert spills, "a spill to HBM was expected"
    t = run.result.timing
    dmas = sum(t.mnemonic(i) == "dma_copy" for i in range(run.result.instructions))
    assert dmas == 12 + 12 + 2 * len(spills)  # loads, stores, and a store and a load per spilled tile
    # each instruction its own chunk (the spill's store at its reserved place either way): the same run
    from ncsim.nki import simulate

    unbatched = simulate(more_tiles_than_sbuf, (a,), {}, batch=False)
    np.testing.assert_array_equal(unbatched.outputs, 2 * a)
    assert unbatched.latency_us == run.latency_us


@nki.jit
def spilled_then_overwritten(a):
    """more_tiles_than_sbuf's twelve tiles, each then loaded anew, whole, before it is stored: a
    spilled tile's next use overwrites all of it, so its old contents are dead and move nowhere."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    tiles = []
    for i in range(a.shape[0] // 128):
        tiles.append(nl.multiply(nl.load(a[i * 128:(i + 1) * 128, :]), 2.0))
    for i in range(a.shape[0] // 128):
        nisa.dma_copy(dst=tiles[i], src=a[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], tiles[i])
    return out


def test_a_spilled_tile_overwritten_whole_is_neither_stored_nor_loaded():
    a = np.random.default_rng(4).standard_normal((12 * 128, 4096)).astype(F32)
    np.testing.assert_array_equal(spilled_then_overwritten(a), a)
    run = nki.last_run()
    assert not [e for e in run.program.tensors.values() if e.name.startswith("spill")]
    t = run.result.timing
    assert sum(t.mnemonic(i) == "dma_copy" for i in range(run.result.instructions)) == 36  # 12 + 12 loads, 12 stores


@nki.jit
def spilled_but_never_read(a):
    """The same tiles, each stored as soon as it is made: those spilled are never read again, so no
    data moves for them (NKI's compiler, knowing their lifetimes, would not spill them)."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    tiles = []
    for i in range(a.shape[0] // 128):
        tiles.append(nl.multiply(nl.load(a[i * 128:(i + 1) * 128, :]), 2.0))
        nl.store(out[i * 128:(i + 1) * 128, :], tiles[i])
    return out


def test_a_spilled_tile_never_used_again_moves_no_data():
    a = np.random.default_rng(3).standard_normal((12 * 128, 4096)).astype(F32)
    np.testing.assert_array_equal(spilled_but_never_read(a), 2 * a)
    run = nki.last_run()
    assert not [e for e in run.program.tensors.values() if e.name.startswith("spill")]
    t = run.result.timing
    assert sum(t.mnemonic(i) == "dma_copy" for i in range(run.result.instructions)) == 24


@nki.jit
def sbuf_blocks_beyond_capacity(a):
    """An SBUF tensor of 12 blocks of [128, 4096] fp32 (192 KiB a partition, SBUF has 176), each block
    written, stored and never read again: its blocks spill while they are made, unwritten, so the
    kernel runs with its loads, multiplies and stores only."""
    n = a.shape[0] // 128
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((n, nl.par_dim(128), a.shape[1]), a.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(n):
        t[i] = nl.multiply(nl.load(a[i * 128:(i + 1) * 128, :]), 2.0)
        nl.store(out[i * 128:(i + 1) * 128, :], t[i])
    return out


def test_an_sbuf_block_tensor_larger_than_sbuf_runs_when_used_a_block_at_a_time():
    a = np.random.default_rng(4).standard_normal((12 * 128, 4096)).astype(F32)
    np.testing.assert_array_equal(sbuf_blocks_beyond_capacity(a), 2 * a)
    run = nki.last_run()
    assert not [e for e in run.program.tensors.values() if e.name.startswith("spill")]
    assert run.result.instructions == 36


@nki.jit
def dead_tiles_held(a):
    """Six tiles kept for the end, four made and never used again but still held in a list, then
    three more that need room (SBUF holds eleven of these [128, 4096] fp32 tiles)."""
    out = nl.ndarray((13 * 128, a.shape[1]), a.dtype, buffer=nl.shared_hbm)
    keep = [nl.multiply(nl.load(a[i * 128:(i + 1) * 128, :]), 2.0) for i in range(6)]
    junk = [nl.multiply(nl.load(a[i * 128:(i + 1) * 128, :]), 3.0) for i in range(6, 10)]  # noqa: F841
    for i in range(10, 13):
        nl.store(out[i * 128:(i + 1) * 128, :], nl.add(nl.load(a[i * 128:(i + 1) * 128, :]), 1.0))
    for i in range(6):
        nl.store(out[i * 128:(i + 1) * 128, :], keep[i])
    return out


def test_the_spill_choice_takes_the_tile_used_farthest_ahead_a_dead_one_first():
    """The kernel is traced twice when tiles spill: the second trace takes the tile whose next use is
    farthest (the first trace's record), here a held tile never used again, which moves no data; the
    least recently used one (plan_spills=False) is one of the six still needed: stored and reloaded."""
    a = np.random.default_rng(5).standard_normal((13 * 128, 4096)).astype(F32)
    counts = {}
    for plan in (True, False):
        run = nki.simulate(dead_tiles_held, (a,), {}, plan_spills=plan)
        np.testing.assert_array_equal(run.outputs[:768], 2 * a[:768])
        np.testing.assert_array_equal(run.outputs[1280:], a[1280:] + 1)
        spills = [e for e in run.program.tensors.values() if e.name.startswith("spill")]
        counts[plan] = (sum(i.mnemonic == "dma_copy" for i in run.program.instructions), len(spills))
    assert counts[True] == (13 + 9, 0)  # loads and stores only
    assert counts[False] == (13 + 9 + 2, 1)  # and a store and a load of the spilled tile


@nki.jit
def loaded_tiles_held(a):
    """Twelve loaded tiles held at once, each unchanged since its load, stored in reverse order."""
    print("tracing loaded_tiles_held")
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    tiles = [nl.load(a[i * 128:(i + 1) * 128, :]) for i in range(a.shape[0] // 128)]
    for i in reversed(range(a.shape[0] // 128)):
        nl.store(out[i * 128:(i + 1) * 128, :], tiles[i])
    return out


def test_a_spilled_tile_that_holds_a_load_is_loaded_again_not_stored(capsys):
    """A spilled tile holding what a DMA copied whole from HBM, neither written since, is loaded again
    from there when used: one more load, no store, no spill tensor. The kernel's print shows once
    though the kernel was traced twice."""
    a = np.random.default_rng(6).standard_normal((12 * 128, 4096)).astype(F32)
    np.testing.assert_array_equal(loaded_tiles_held(a), a)
    run = nki.last_run()
    assert not [e for e in run.program.tensors.values() if e.name.startswith("spill")]
    loads = [i for i in run.program.instructions if i.mnemonic == "dma_copy" and i["dst"].memory.label == "sbuf"]
    assert len(loads) == 13 and sum(i.mnemonic == "dma_copy" for i in run.program.instructions) == 25
    assert capsys.readouterr().out.count("tracing loaded_tiles_held") == 1


@nki.jit
def source_overwritten(a):
    """loaded_tiles_held, but the first rows of `a` are overwritten after the loads: the tile spilled
    (the first, used last) no longer matches its source, so it is stored and loaded back."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    tiles = [nl.load(a[i * 128:(i + 1) * 128, :]) for i in range(a.shape[0] // 128)]
    nl.store(a[0:128, :], nl.multiply(tiles[11], 0.0))
    for i in reversed(range(a.shape[0] // 128)):
        nl.store(out[i * 128:(i + 1) * 128, :], tiles[i])
    return out


def test_a_spilled_load_whose_source_was_written_since_is_stored_first():
    a = np.random.default_rng(7).standard_normal((12 * 128, 4096)).astype(F32)
    original = a.copy()
    np.testing.assert_array_equal(source_overwritten(a), original)
    assert not a[:128].any()  # the kernel wrote its argument
    run = nki.last_run()
    assert [e for e in run.program.tensors.values() if e.name.startswith("spill")]


SMALL_SBUF = Config().with_overrides({"sbuf_partition_bytes": 32 * 1024})  # 16 KiB usable: eight [128, 512] fp32


@given(n=st.integers(6, 12), ops=st.lists(st.tuples(st.sampled_from(["store", "scale", "clobber"]), st.integers(0, 11)),
                                         min_size=4, max_size=24), plan=st.booleans())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_spilling_keeps_every_value_whatever_the_order_of_uses(n, ops, plan):
    """n loaded tiles held at once where eight fit, then stores, scalings (a tile replaced by a new,
    computed one) and overwrites of the input rows a tile was loaded from by another tile's values
    (its source changes under it), in any order: every store writes what numpy says, with either
    spill choice."""
    ops = [(k, i % n) for k, i in ops]

    @nki.jit
    def kernel(a):
        out = nl.ndarray((len(ops) * 128, 512), a.dtype, buffer=nl.shared_hbm)
        tiles = [nl.load(a[i * 128:(i + 1) * 128, :]) for i in range(n)]
        for j, (kind, i) in enumerate(ops):
            if kind == "store":
                nl.store(out[j * 128:(j + 1) * 128, :], tiles[i])
            elif kind == "scale":
                tiles[i] = nl.multiply(tiles[i], 2.0)
            else:
                nl.store(a[i * 128:(i + 1) * 128, :], nl.multiply(tiles[(i + 1) % n], -1.0))
        return out

    a = np.random.default_rng(n).standard_normal((n * 128, 512)).astype(F32)
    tiles = [a[i * 128:(i + 1) * 128].copy() for i in range(n)]
    want = np.zeros((len(ops) * 128, 512), F32)
    for j, (kind, i) in enumerate(ops):
        if kind == "store":
            want[j * 128:(j + 1) * 128] = tiles[i]
        elif kind == "scale":
            tiles[i] = tiles[i] * F32(2)
    run = nki.simulate(kernel, (a.copy(),), {}, config=SMALL_SBUF, plan_spills=plan)
    stored = [j for j, (kind, _) in enumerate(ops) if kind == "store"]  # (the other rows of out are never written)
    for j in stored:
        np.testing.assert_array_equal(run.outputs[j * 128:(j + 1) * 128], want[j * 128:(j + 1) * 128])


DEAD_TILES_SCRIPT = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

@nki.jit
def dead_tiles_held(a):
    print("tracing dead_tiles_held")
    out = nl.ndarray((13 * 128, a.shape[1]), a.dtype, buffer=nl.shared_hbm)
    keep = [nl.multiply(nl.load(a[i * 128:(i + 1) * 128, :]), 2.0) for i in range(6)]
    junk = [nl.multiply(nl.load(a[i * 128:(i + 1) * 128, :]), 3.0) for i in range(6, 10)]
    for i in range(10, 13):
        nl.store(out[i * 128:(i + 1) * 128, :], nl.add(nl.load(a[i * 128:(i + 1) * 128, :]), 1.0))
    for i in range(6):
        nl.store(out[i * 128:(i + 1) * 128, :], keep[i])
    return out

dead_tiles_held(np.ones((13 * 128, 4096), np.float32))
"""


def test_ncsim_nki_no_plan_spills_takes_the_least_recently_used_tile(tmp_path):
    """`ncsim nki` traces a kernel that spills twice by default (the dead tile is taken: no spill
    DMAs); --no-plan-spills keeps the one trace's least-recently-used choice (a live tile stored and
    loaded back). The kernel's print shows once either way."""
    import re
    import subprocess
    import sys

    (tmp_path / "dead.py").write_text(DEAD_TILES_SCRIPT)
    ncsim = str(Path(sys.executable).parent / "ncsim")
    counts = []
    for flags in ([], ["--no-plan-spills"]):
        done = subprocess.run([ncsim, "nki", "--timing-only", *flags, str(tmp_path / "dead.py")], check=False,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.count("tracing dead_tiles_held") == 1, done.stdout
        counts.append(int(re.search(r"kernel dead_tiles_held: (\d+) instructions", done.stderr).group(1)))
    assert counts[1] == counts[0] + 2  # a store and a load of the spilled live tile


@nki.jit
def computed_tiles_read_twice(a):
    """Twelve computed tiles held at once (eleven fit), each stored twice, in order both times: with
    the least recently used taken, each tile loaded back pushes out the next, and a tile loaded
    back from its spill tensor and pushed out again unchanged is not stored again."""
    out = nl.ndarray((2 * a.shape[0], a.shape[1]), a.dtype, buffer=nl.shared_hbm)
    n = a.shape[0] // 128
    tiles = [nl.multiply(nl.load(a[i * 128:(i + 1) * 128, :]), 2.0) for i in range(n)]
    for j in range(2):
        for i in range(n):
            nl.store(out[(j * n + i) * 128:(j * n + i + 1) * 128, :], tiles[i])
    return out


def test_a_tile_loaded_back_and_spilled_again_unchanged_is_not_stored_again():
    a = np.random.default_rng(8).standard_normal((12 * 128, 4096)).astype(F32)
    run = nki.simulate(computed_tiles_read_twice, (a,), {}, plan_spills=False)
    np.testing.assert_array_equal(run.outputs, np.concatenate([2 * a, 2 * a]))
    spills = [e for e in run.program.tensors.values() if e.name.startswith("spill")]
    dmas = sum(i.mnemonic == "dma_copy" for i in run.program.instructions)
    loads_back = dmas - 12 - 24 - len(spills)  # loads, stores, one store per spill tensor
    assert spills and loads_back > len(spills)  # tiles came back from their spill tensors more than once
