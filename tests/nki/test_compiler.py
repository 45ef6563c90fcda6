"""nki.compiler direct allocation (ncsim.nki.compiler): where tiles are placed, the rules refused at
the declaration's line, loops traced once, force_auto_alloc; and the forms the allocated kernels of
nki-samples use beside it: nl.shared_constant, nc_matmul(is_transpose=True), a matmul += into a new
PSUM ndarray, masks that are Python bools."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ncsim.nki.compiler as ncc
import ncsim.nki.isa as nisa
import ncsim.nki.language as nl
from ncsim import nki
from ncsim.errors import AsmError

F32 = np.float32
HERE = Path(__file__).resolve()


def line_of(fragment: str) -> int:
    return next(n for n, text in enumerate(HERE.read_text().splitlines(), 1) if fragment in text)


def tiles() -> dict[str, tuple[int, int]]:
    """(partition, address) of each on-chip tensor of the last run, by name."""
    return {e.name: (e.partition, e.address) for e in nki.last_run().program.tensors.values() if e.memory != "hbm"}


# ------------------------------------------------------------------ the modulo formula
def _reference_place(base: int, tiles_: tuple[int, ...], scale: int, idx: tuple[int, ...]) -> int:
    """The guide's formula as written out: the index modulo the tile counts, linearised over them."""
    shape = tiles_ or (1,) * len(idx)
    mod = [i % s for i, s in zip(idx, shape)]
    return base + scale * sum(m * math.prod(shape[d + 1:]) for d, m in enumerate(mod))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=0, max_size=3), st.lists(st.integers(1, 5), max_size=3),
       st.integers(0, 4096), st.integers(1, 2048), st.integers(0, 3))
def test_mod_alloc_places_blocks_by_the_documented_formula(idx, counts, base, fbytes, bank):
    idx, counts = tuple(idx), tuple(counts)
    p, a = ncc.sbuf.mod_alloc(base_addr=base, num_free_tiles=counts).func(idx, 128, fbytes)
    assert (p, a) == (0, _reference_place(base, counts, fbytes, idx))
    b, p, a = ncc.psum.mod_alloc(base_bank=bank, num_bank_tiles=counts).func(idx, 128, fbytes)
    assert (b, p, a) == (_reference_place(bank, counts, 1, idx), 0, 0)
    p, _ = ncc.sbuf.mod_alloc(base_addr=0, base_partition=32, num_par_tiles=counts).func(idx, 32, fbytes)
    assert p == _reference_place(32, counts, 32, idx)


def test_the_guides_modulo_example():
    """NKI Direct Allocation Developer Guide, "Modulo Allocation Example": (4, par_dim(128), 512)
    bf16 with base_addr=0 and num_free_tiles=(2,) puts blocks 0..3 at bytes 0, 1024, 0, 1024."""
    alloc = ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,))
    assert [alloc.func((i,), 128, 512 * 2) for i in range(4)] == [(0, 0), (0, 1024), (0, 0), (0, 1024)]


# ------------------------------------------------------------------ placement in a kernel
@nki.jit
def double_buffered_exp(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    n = a.shape[0] // 128
    t = nl.ndarray((n, nl.par_dim(128), a.shape[1]), dtype=a.dtype,
                   buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
    r = nl.ndarray((n, nl.par_dim(128), a.shape[1]), dtype=a.dtype,
                   buffer=ncc.sbuf.alloc(lambda idx, p, f: (0, 4096 + (idx[0] % 3) * f)))
    for i in nl.affine_range(n):
        t[i] = nl.load(a[i * 128:(i + 1) * 128, :])
        r[i] = nl.exp(t[i])
        nl.store(out[i * 128:(i + 1) * 128, :], r[i])
    return out


def test_blocks_share_the_physical_tiles_their_function_gives_and_compute_as_numpy():
    a = np.random.default_rng(0).standard_normal((768, 256)).astype(F32)
    got = double_buffered_exp(a)
    np.testing.assert_allclose(got, np.exp(a), rtol=1e-6)
    placed = sorted(tiles().values())
    assert placed == [(0, 0), (0, 1024), (0, 4096), (0, 5120), (0, 6144)]  # 2 + 3 physical tiles for 6 blocks


@nki.jit
def quarter_partitions(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((4, nl.par_dim(32), a.shape[1]), dtype=a.dtype,
                   buffer=ncc.sbuf.mod_alloc(base_addr=64, num_par_tiles=(4,)))
    for i in nl.affine_range(4):
        t[i] = nl.load(a[i * 32:(i + 1) * 32, :])
        nl.store(out[i * 32:(i + 1) * 32, :], t[i])
    return out


def test_tiles_of_32_partitions_start_at_the_partitions_the_function_gives():
    a = np.arange(128 * 8, dtype=F32).reshape(128, 8)
    np.testing.assert_array_equal(quarter_partitions(a), a)
    assert sorted(tiles().values()) == [(0, 64), (32, 64), (64, 64), (96, 64)]


@nki.jit
def psum_banks(a, b):
    """a^T b by 128-row blocks, each block's product into the bank `banks` gives, summed on Vector."""
    out = nl.ndarray((a.shape[1], b.shape[1]), F32, buffer=nl.shared_hbm)
    sa = nl.ndarray((2, nl.par_dim(128), a.shape[1]), F32, buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
    sb = nl.ndarray((2, nl.par_dim(128), b.shape[1]), F32,
                    buffer=ncc.sbuf.mod_alloc(base_addr=2048, num_free_tiles=(2,)))
    acc = nl.ndarray((nl.par_dim(a.shape[1]), b.shape[1]), F32, buffer=ncc.sbuf.mod_alloc(base_addr=8192))
    ps = nl.ndarray((2, nl.par_dim(a.shape[1]), b.shape[1]), F32,
                    buffer=ncc.psum.alloc(lambda idx, p, f: ({(0,): 3, (1,): 6}[idx], 0, 0)))
    for i in nl.affine_range(2):
        sa[i] = nl.load(a[i * 128:(i + 1) * 128, :])
        sb[i] = nl.load(b[i * 128:(i + 1) * 128, :])
        ps[i] = nisa.nc_matmul(sa[i], sb[i])
    acc[...] = nl.copy(ps[0])  # (tensor_tensor reads at most one operand from PSUM)
    acc[...] = nl.add(acc, ps[1])
    nl.store(out, acc)
    return out


def test_psum_tiles_go_to_the_banks_the_function_names():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((256, 64)).astype(F32), rng.standard_normal((256, 128)).astype(F32)
    np.testing.assert_allclose(psum_banks(a, b), a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    psum = sorted(e.address for e in nki.last_run().program.tensors.values() if e.memory == "psum")
    assert psum == [3 * 2048, 6 * 2048]


# ------------------------------------------------------------------ loops traced once
@nki.jit
def running_address(a):
    """The allocated attention kernel's habit: a running address advanced inside an affine loop."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    addr = 0
    for i in nl.affine_range(a.shape[0] // 128):
        t = nl.ndarray((nl.par_dim(128), a.shape[1]), a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=addr))
        addr += a.shape[1] * 4  # NKI runs this once; ncsim once per iteration
        t[...] = nl.load(a[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], t)
    for j in range(2):  # a Python loop unrolls in NKI too: each run places anew
        u = nl.ndarray((nl.par_dim(128), a.shape[1]), a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=addr))
        addr += a.shape[1] * 4
        u[...] = nl.load(a[0:128, :])
    return out


def test_a_declaration_in_an_affine_loop_keeps_its_first_iterations_places():
    a = np.random.default_rng(3).standard_normal((512, 64)).astype(F32)
    np.testing.assert_array_equal(running_address(a), a)
    # one tile for the four iterations of the affine loop (at 0); then the Python loop's two, each at
    # the address the loop variable has reached (4 x 256 bytes, then one more)
    assert sorted(tiles().values()) == [(0, 0), (0, 1024), (0, 1280)]


@nki.jit
def python_loop_in_affine_loop(a):
    """NKI traces the affine loop once and unrolls the Python loop in it: two tensors per trace, at
    the addresses j gives; the inner affine loop inside the Python one is traced once per j."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        for j in range(2):
            t = nl.ndarray((nl.par_dim(128), 64), F32, buffer=ncc.sbuf.mod_alloc(base_addr=j * 1024))
            t[...] = nl.load(a[(2 * i + j) * 128:(2 * i + j + 1) * 128, :])
            for m in nl.affine_range(2):
                u = nl.ndarray((nl.par_dim(128), 64), F32, buffer=ncc.sbuf.mod_alloc(base_addr=4096 + 1024 * j + 256 * m))
                u[...] = nl.multiply(t, 2.0)
                nl.store(out[(2 * i + j) * 128:(2 * i + j + 1) * 128, :], u)
    return out


def test_a_python_loop_inside_an_affine_loop_declares_anew_each_run():
    a = np.random.default_rng(10).standard_normal((512, 64)).astype(F32)
    np.testing.assert_array_equal(python_loop_in_affine_loop(a), 2 * a)
    # t at 0 and 1024 (j); u at 4096 + 1024 j (m's first iteration fixes it: 256 m is never added)
    assert sorted(tiles().values()) == [(0, 0), (0, 1024), (0, 4096), (0, 5120)]


@nki.jit
def changes_shape_in_loop(a):
    for i in nl.affine_range(2):
        nl.ndarray((nl.par_dim(128), 64 * (i + 1)), F32, buffer=ncc.sbuf.mod_alloc(base_addr=0))  # shape varies


@nki.jit
def placed_by_hand_then_auto(a):
    t = nl.ndarray((nl.par_dim(128), 64), F32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    t[...] = nl.load(a)
    u = nl.exp(t)  # its result would be placed automatically
    nl.store(a, u)


@nki.jit
def auto_then_placed_by_hand(a):
    t = nl.load(a)
    nl.store(a, t)
    nl.ndarray((nl.par_dim(128), 64), F32, buffer=ncc.sbuf.mod_alloc(base_addr=0))  # after an automatic tile


@nki.jit
def scratch_hbm_in_allocated(a):
    nl.ndarray((nl.par_dim(128), 64), F32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    nl.ndarray((128, 64), F32, buffer=nl.hbm)  # not an output


@nki.jit
def allocated_after_scratch_hbm(a):
    nl.ndarray((128, 64), F32, buffer=nl.private_hbm)
    nl.ndarray((nl.par_dim(128), 64), F32, buffer=ncc.sbuf.mod_alloc(base_addr=0))  # after private_hbm


@nki.jit
def bad_start_partition(a):
    nl.ndarray((2, nl.par_dim(64), 64), F32, buffer=ncc.sbuf.mod_alloc(base_addr=0, base_partition=32))  # 64 parts at 32


@nki.jit
def past_sbuf(a):
    nl.ndarray((nl.par_dim(128), 1024), F32, buffer=ncc.sbuf.mod_alloc(base_addr=176 * 1024 - 1024))  # ends past usable


@nki.jit
def misaligned(a):
    nl.ndarray((nl.par_dim(128), 64), F32, buffer=ncc.sbuf.mod_alloc(base_addr=6))  # fp32 at byte 6


@nki.jit
def psum_offset(a):
    nl.ndarray((nl.par_dim(128), 128), F32, buffer=ncc.psum.mod_alloc(base_bank=1, base_addr=512))  # not at byte 0


@nki.jit
def psum_bank_nine(a):
    nl.ndarray((2, nl.par_dim(128), 128), F32, buffer=ncc.psum.mod_alloc(base_bank=7, num_bank_tiles=(2,)))  # bank 8


@nki.jit
def function_fails(a):
    nl.ndarray((2, nl.par_dim(128), 64), F32, buffer=ncc.sbuf.alloc(lambda idx, p, f: {(0,): (0, 0)}[idx]))  # no (1,)


@nki.jit
def function_returns_one(a):
    nl.ndarray((nl.par_dim(128), 64), F32, buffer=ncc.sbuf.alloc(lambda idx, p, f: 0))  # not a pair


@pytest.mark.parametrize("kernel, fragment, rule", [
    (changes_shape_in_loop, "# shape varies", "NKI traces a loop's body once"),
    (placed_by_hand_then_auto, "# its result would be placed", "all directly or all automatically"),
    (auto_then_placed_by_hand, "# after an automatic tile", "already has a SBUF tile allocated automatically"),
    (scratch_hbm_in_allocated, "# not an output", "Non IO HBM tensor is not supported in allocated NKI kernel"),
    (allocated_after_scratch_hbm, "# after private_hbm", "declares an HBM tensor that is not an output"),
    (bad_start_partition, "# 64 parts at 32", "a tile of 64 partitions starts at partition 0 or 64"),
    (past_sbuf, "# ends past usable", "outside SBUF's usable"),
    (misaligned, "# fp32 at byte 6", "not a multiple of float32's 4 bytes"),
    (psum_offset, "# not at byte 0", "starts at partition 0 and byte 0 of its bank"),
    (psum_bank_nine, "# bank 8", "PSUM has banks 0 to 7, not 8"),
    (function_fails, "# no (1,)", "failed for block (1,): KeyError"),
    (function_returns_one, "# not a pair", "returns (start_partition, byte_addr), integers"),
])
def test_a_broken_allocation_rule_is_an_error_at_the_declaration(kernel, fragment, rule):
    with pytest.raises(AsmError) as e:
        kernel(np.zeros((128, 64), F32))
    assert e.value.loc.file == str(HERE)
    assert e.value.loc.line == line_of(fragment)
    assert rule in e.value.message


def test_force_auto_alloc_places_by_the_buffer_policy():
    @nki.jit
    @ncc.force_auto_alloc
    def forced(a):
        return placed_by_hand_then_auto.func(a)

    a = np.random.default_rng(4).standard_normal((128, 64)).astype(F32)
    forced(a)  # the same kernel body as placed_by_hand_then_auto, which mixes: accepted now
    assert all(addr % 64 == 0 for _, addr in tiles().values())
    assert ncc.skip_middle_end_transformations(forced) is forced
    assert ncc.enable_stack_allocator(forced) is forced
    assert ncc.sbuf.auto_alloc() is nl.sbuf and ncc.psum.auto_alloc() is nl.psum


# ------------------------------------------------------------------ the forms the allocated kernels use
@nki.jit
def transpose_by_identity(a):
    out = nl.ndarray((a.shape[1], a.shape[0]), a.dtype, buffer=nl.shared_hbm)
    eye = nl.shared_constant(np.identity(128, dtype=np.int8), dtype=nl.float32)
    eye2 = nl.shared_constant(np.identity(128, dtype=np.int8), dtype=nl.float32)  # the same constant
    e = nl.ndarray((nl.par_dim(128), 128), F32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    e[...] = nl.load(eye)
    x = nl.ndarray((nl.par_dim(128), a.shape[1]), F32, buffer=ncc.sbuf.mod_alloc(base_addr=512))
    x[...] = nl.load(a)
    ps = nl.ndarray((nl.par_dim(a.shape[1]), 128), F32, buffer=ncc.psum.mod_alloc(base_bank=0))
    ps[...] = nisa.nc_matmul(x, e, is_transpose=True)
    acc = nl.ndarray((nl.par_dim(a.shape[1]), 128), F32, buffer=ncc.psum.mod_alloc(base_bank=1))
    for _ in nl.affine_range(3):
        acc += nisa.nc_matmul(x, e)  # a new ndarray: the first matmul starts the accumulation
    t = nl.ndarray((nl.par_dim(a.shape[1]), 128), F32, buffer=ncc.sbuf.mod_alloc(base_addr=1024))
    t[...] = nl.copy(ps)
    t[...] = nl.add(t, acc)
    nl.store(out, t)
    assert eye2.buf is eye.buf
    return out


def test_shared_constants_is_transpose_and_a_fresh_psum_accumulation():
    a = np.random.default_rng(5).standard_normal((128, 96)).astype(F32)
    np.testing.assert_allclose(transpose_by_identity(a), 4 * a.T, rtol=1e-6)
    consts = [e for e in nki.last_run().program.tensors.values() if e.name.startswith("const")]
    assert len(consts) == 1 and consts[0].kind == "in"


@nki.jit
def bool_masks(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:a.shape[1]]
    for i in nl.affine_range(3):
        live = i < 2  # a condition on a loop variable: a bool in ncsim
        t = nl.load(a[ip, jf], mask=live)
        nl.store(out[ip, jf], nl.multiply(t, float(i + 1), mask=live), mask=(jf < 32) & live)
    return out


def test_a_bool_mask_keeps_everything_or_nothing():
    a = np.random.default_rng(6).standard_normal((128, 64)).astype(F32)
    got = bool_masks(a)
    np.testing.assert_array_equal(got[:, :32], 2 * a[:, :32])  # the second iteration's store; the third's is masked
    assert nki.last_run().result.instructions == 6  # two iterations of load, multiply, store


@nki.jit
def allocated_softmax_rows(a):
    """Forms of nki-samples' allocated attention kernel: a PSUM allocation function taking its bank map
    through functools.partial (so called by keyword), np.sum as a reduction's operator, a [P]
    reduction assigned to t[i_p, 0] of a [P, 1] tensor, and a masked matmul += that its mask removes."""
    import functools

    def bank_of(bank_map, idx, pdim_size, fdim_size):
        return (bank_map[idx], 0, 0)

    out = nl.ndarray(a.shape, F32, buffer=nl.shared_hbm)
    x = nl.ndarray((nl.par_dim(128), a.shape[1]), F32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    e = nl.ndarray((nl.par_dim(128), a.shape[1]), F32, buffer=ncc.sbuf.mod_alloc(base_addr=1024))
    m = nl.ndarray((2, nl.par_dim(128), 1), F32, buffer=ncc.sbuf.mod_alloc(base_addr=2048, num_free_tiles=(2,)))
    ps = nl.ndarray((1, nl.par_dim(128), a.shape[1]), F32,
                    buffer=ncc.psum.alloc(functools.partial(bank_of, bank_map={(0,): 5})))
    ip = nl.arange(128)[:, None]
    x[...] = nl.load(a)
    m[0, ip, 0] = nisa.tensor_reduce(np.max, data=x, axis=(1,), negate=True)  # [128] into [128, 1]
    e[...] = nisa.activation_reduce(np.exp, data=x, bias=m[0], reduce_op=np.sum, reduce_res=m[1])
    ps[0] += nisa.nc_matmul(x[:, 0:128], x, mask=a.shape[0] < 128)  # removed: 128 < 128 is False
    x[...] = nl.divide(e, m[1])
    nl.store(out, x)
    return out


def test_the_allocated_attention_kernels_forms():
    a = np.random.default_rng(7).standard_normal((128, 200)).astype(F32)
    want = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(allocated_softmax_rows(a), want / want.sum(axis=1, keepdims=True), rtol=1e-5)
    mnemonics = {nki.last_run().result.timing.mnemonic(i) for i in range(nki.last_run().result.instructions)}
    assert "nc_matmul" not in mnemonics
    assert [e.address for e in nki.last_run().program.tensors.values() if e.memory == "psum"] == [5 * 2048]


@nki.jit
def masked_matmul(a, b):
    out = nl.ndarray((a.shape[1], b.shape[1]), F32, buffer=nl.shared_hbm)
    res = nl.zeros((a.shape[1], b.shape[1]), F32, buffer=nl.sbuf)
    i, j = nl.mgrid[0:a.shape[1], 0:b.shape[1]]
    ps = nl.zeros((a.shape[1], b.shape[1]), F32, buffer=nl.psum)
    ps[i, j] += nisa.nc_matmul(nl.load(a), nl.load(b), mask=(i < 40) & (j >= 100))
    res[...] = nl.copy(ps)
    nl.store(out, res)
    return out


def test_a_mask_narrows_a_matmul_to_the_kept_rows_and_columns():
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((128, 64)).astype(F32), rng.standard_normal((128, 300)).astype(F32)
    want = np.zeros((64, 300))
    want[:40, 100:] = (a.T.astype(np.float64) @ b)[:40, 100:]
    np.testing.assert_allclose(masked_matmul(a, b), want, rtol=1e-4, atol=1e-4)


@nki.jit
def matmul_from_psum(a):
    t = nl.transpose(nl.load(a))
    return nisa.nc_matmul(t, nl.load(a))  # stationary in PSUM


def test_an_operand_in_the_wrong_memory_is_refused_at_the_kernels_line():
    """The operand kinds of the instruction table (an nc_matmul reads SBUF) are checked while tracing,
    not first when the program is encoded, where the error had no line of the kernel."""
    with pytest.raises(AsmError) as e:
        matmul_from_psum(np.zeros((128, 128), F32))
    assert e.value.loc.file == str(HERE) and e.value.loc.line == line_of("# stationary in PSUM")
    assert "nc_matmul operand 'stationary': this operand must be in sbuf, not psum" in e.value.message


@nki.jit
def store_and_matmul_psum(a, b):
    out = nl.ndarray((a.shape[1], b.shape[0]), F32, buffer=nl.shared_hbm)
    bt = nl.transpose(nl.load(b))  # [64, 128] in PSUM
    nl.store(out, nl.matmul(nl.load(a), bt, transpose_x=True))  # a PSUM operand and a PSUM value
    return out


def test_nl_matmul_and_nl_store_copy_a_psum_tile_to_sbuf_first():
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((64, 96)).astype(F32), rng.standard_normal((128, 64)).astype(F32)
    np.testing.assert_allclose(store_and_matmul_psum(a, b), a.T.astype(np.float64) @ b.T, rtol=1e-4, atol=1e-4)


@nki.jit
def lifetime_conflict(a):
    """The guide's "Lifetime Conflicts" example: eight logical tiles on two physical ones, all loaded
    before any is read."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((8, nl.par_dim(128), a.shape[1]), a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
    r = nl.ndarray((nl.par_dim(128), a.shape[1]), a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
    for i in nl.affine_range(8):
        t[i] = nl.load(a[i * 128:(i + 1) * 128, :])  # loads all eight
    for i in nl.affine_range(8):
        r[...] = nl.exp(t[i])  # t[0] was overwritten by t[2]
        nl.store(out[i * 128:(i + 1) * 128, :], r)
    return out


def test_a_lifetime_conflict_is_refused_where_the_lost_tile_is_read():
    with pytest.raises(AsmError) as e:
        lifetime_conflict(np.zeros((1024, 64), F32))
    assert e.value.loc.line == line_of("# t[0] was overwritten by t[2]")
    assert "shares its physical tile" in e.value.message
    assert f"test_compiler.py:{line_of('# loads all eight')}" in e.value.message


@nki.jit
def not_a_function(a):
    nl.ndarray((nl.par_dim(128), 64), F32, buffer=ncc.sbuf.alloc(0))  # an int


@nki.jit
def zero_tiles(a):
    nl.ndarray((2, nl.par_dim(128), 64), F32, buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(0,)))  # none


@pytest.mark.parametrize("kernel, fragment, rule", [
    (not_a_function, "buffer=ncc.sbuf.alloc(0))  # an int", "ncc.sbuf.alloc takes a function"),
    (zero_tiles, "num_free_tiles=(0,)))  # none", "num_free_tiles takes a tuple of positive tile counts"),
])
def test_a_malformed_allocation_is_refused_at_the_kernels_line(kernel, fragment, rule):
    with pytest.raises(AsmError) as e:
        kernel(np.zeros((128, 64), F32))
    assert e.value.loc.line == line_of(fragment)
    assert rule in e.value.message
    with pytest.raises(TypeError):  # outside a kernel: Python's error
        ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(0,))
