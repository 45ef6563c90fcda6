"""nisa.* in the SDK 2.2x forms (docs/nki.md, "nisa"): each call traced to its ncsim instruction and
checked against a numpy reference of ncsim's documented arithmetic, bit for bit. The kernels follow
the examples of the nki.isa reference (SDK 2.26), written here."""

from __future__ import annotations

import numpy as np
import pytest

import ncsim.nki.isa as nisa
import ncsim.nki.language as nl
from ncsim import nki
from ncsim.errors import AsmError

F32 = np.float32


def _mnemonics() -> list[str]:
    return [i.mnemonic for i in nki.last_run().program.instructions]


# ------------------------------------------------------------------ iota and affine_select: expressions of aranges
@nki.jit
def iota_kernel():
    i_f = nl.arange(0, 64)[None, :]
    i_p = nl.arange(0, 128)[:, None]
    t = nisa.iota(5 + i_f * -1 + i_p * 2, dtype=nl.int32)
    out = nl.ndarray([128, 64], dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out[i_p, i_f], t)
    return out


def test_iota_takes_an_affine_expression():
    got = iota_kernel()
    np.testing.assert_array_equal(got, 5 - np.arange(64)[None, :] + 2 * np.arange(128)[:, None])
    instr = nki.last_run().program.instructions[0]
    assert (instr.mnemonic, instr.engine) == ("iota", "gpsimd")
    assert instr.operands["pattern"] == ((-1, 64),)
    assert (instr.operands["offset"], instr.operands["channel_multiplier"]) == (5, 2)


@nki.jit
def causal(a, row0):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:128, 0:96]
    t = nl.load(a[ix, iy])
    nl.store(out[ix, iy], nisa.affine_select(pred=(row0 + ix >= iy), on_true_tile=t[ix, iy],
                                             on_false_value=nl.fp32.min))
    return out


@pytest.mark.parametrize("row0", [0, 17])
def test_affine_select_takes_a_predicate_of_aranges(row0):
    a = np.random.default_rng(2).standard_normal((128, 96)).astype(F32)
    got = causal(a, row0)
    keep = row0 + np.arange(128)[:, None] >= np.arange(96)[None, :]
    np.testing.assert_array_equal(got, np.where(keep, a, np.finfo(F32).min))
    instr = nki.last_run().program.instructions[1]
    # row0 + p - i >= 0: channel multiplier 1, step -1, offset row0
    assert instr.operands["pattern"] == ((-1, 96),)
    assert (instr.operands["channel_multiplier"], instr.operands["offset"], instr.operands["cmp_op"]) == \
        (1, row0, "greater_equal")


def test_affine_select_refuses_a_compound_predicate():
    @nki.jit
    def bad(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ix, iy = nl.mgrid[0:128, 0:8]
        t = nl.load(a)
        nl.store(out, nisa.affine_select(pred=(ix > iy) & (iy > 2), on_true_tile=t, on_false_value=0.0))
        return out

    with pytest.raises(AsmError, match="one comparison"):
        bad(np.zeros((128, 8), F32))


# ------------------------------------------------------------------ dynamic copies
@nki.jit
def gather_columns(src, offsets):
    out = nl.ndarray([128, offsets.shape[1]], dtype=src.dtype, buffer=nl.shared_hbm)
    s = nl.load(src)
    o = nl.load(offsets)
    res = nl.ndarray([128, offsets.shape[1]], dtype=src.dtype, buffer=nl.sbuf)
    ix, iy = nl.mgrid[0:128, 0:1]
    for j in nl.affine_range(offsets.shape[1]):
        res[ix, j] = nisa.tensor_copy_dynamic_src(s[ix, o[0, j] + iy])
    nl.store(out, value=res)
    return out


@nki.jit
def gather_rows3(src, offsets):
    n = offsets.shape[1]
    out = nl.ndarray([128, n, 4], dtype=src.dtype, buffer=nl.shared_hbm)
    s = nl.load(src)
    o = nl.load(offsets)
    res = nl.ndarray([128, n, 4], dtype=src.dtype, buffer=nl.sbuf)
    ix, _, iz = nl.mgrid[0:128, 0:1, 0:4]
    for j in nl.affine_range(n):
        res[ix, j, iz] = nisa.tensor_copy_dynamic_src(s[ix, o[0, j], iz])
    nl.store(out, value=res)
    return out


@nki.jit
def scatter_columns(src, offsets):
    out = nl.ndarray([128, 32], dtype=src.dtype, buffer=nl.shared_hbm)
    s = nl.load(src)
    o = nl.load(offsets)
    res = nl.zeros([128, 32], dtype=src.dtype)
    ix, iy = nl.mgrid[0:128, 0:1]
    for j in nl.affine_range(offsets.shape[1]):
        nisa.tensor_copy_dynamic_dst(dst=res[ix, o[0, j] + iy], src=s[ix, j + iy])
    nl.store(out, value=res)
    return out


def test_dynamic_copies_read_their_offsets_at_run_time():
    rng = np.random.default_rng(3)
    src = rng.standard_normal((128, 40)).astype(F32)
    idx = rng.permutation(40)[:6].astype(np.int32)[None, :]
    np.testing.assert_array_equal(gather_columns(src, idx), src[:, idx[0]])
    assert _mnemonics().count("tensor_copy_dynamic_src") == 6
    # an axis whose elements are 4 apart: the offset is multiplied by 4 on GpSimd (int32 multiply)
    src3 = rng.standard_normal((128, 10, 4)).astype(F32)
    idx3 = np.array([[7, 0, 3]], np.int32)
    np.testing.assert_array_equal(gather_rows3(src3, idx3), src3[:, idx3[0]])
    assert _mnemonics().count("tensor_scalar") == 3
    cols = np.array([[31, 2, 9]], np.int32)
    want = np.zeros((128, 32), F32)
    want[:, cols[0]] = src[:, :3]
    np.testing.assert_array_equal(scatter_columns(src, cols), want)


@nki.jit
def gather_rows_by_tile(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(128)[:, None], nl.arange(64)[None, :]
    rows = nisa.iota(i_p * 2, dtype=nl.int32)
    nl.store(out[i_p, i_f], nl.load(x[rows, i_f]))
    return out


def test_a_tile_of_indices_is_refused_at_its_index():
    """A run-time index is one tile element; a whole tile of row indices (a DMA gather, as
    nki-samples' resize kernel loads) is refused where the index is written, not read as its first
    element (which gave a [1, 64] load and a shape error at the store)."""
    with pytest.raises(AsmError, match=r"test_isa.py:\d+:\d+: .*run-time index is one tile element.*tile of"
                                       r" \[128, 1\], a gather of rows"):
        nki.simulate_kernel(gather_rows_by_tile, np.zeros((256, 64), F32))


# ------------------------------------------------------------------ Vector and Scalar forms with reductions
@nki.jit
def vector_forms(a, b):
    outs = [nl.ndarray(shape, dtype=dt, buffer=nl.shared_hbm) for shape, dt in (
        ((128, 64), nl.float32), ((128, 1), nl.float32), ((128, 64), nl.float32), ((128, 1), nl.float32),
        ((128, 64), nl.float32), ((128, 64), nl.float32), ((128, 64), nl.float32), ((128, 2), nl.float32),
        ((128, 8), nl.float32), ((128, 8), nl.uint32), ((128, 64), nl.float32), ((1, 64), nl.float32),
        ((128, 64), nl.float32), ((128, 64), nl.float32), ((128, 1), nl.float32))]
    x = nl.load(a)
    y = nl.load(b)
    s = nl.ndarray([128, 1], dtype=nl.float32)
    nl.store(outs[0], nisa.activation(op=nl.exp, data=x, scale=0.5, reduce_op=nl.add, reduce_res=s,
                                      reduce_cmd=nisa.reduce_cmd.reset_reduce))
    nl.store(outs[1], s)
    s2 = nl.ndarray([128, 1], dtype=nl.float32)
    nl.store(outs[2], nisa.tensor_scalar_reduce(data=x, op0=np.multiply, operand0=2.0, reduce_op=np.add,
                                                reduce_res=s2))
    nl.store(outs[3], s2)
    nl.store(outs[4], nisa.scalar_tensor_tensor(data=x, op0=nl.subtract, operand0=1.0, op1=nl.multiply, operand1=y))
    nl.store(outs[5], nisa.tensor_tensor_scan(x, y, 0.0, np.multiply, np.add))
    pred = nisa.tensor_copy(nl.greater(x, y), dtype=nl.uint8)
    z = nl.zeros([128, 64], dtype=nl.float32)
    nisa.tensor_copy_predicated(src=x, dst=z, predicate=pred)
    nl.store(outs[6], z)
    nl.store(outs[7], nisa.bn_aggr(nisa.bn_stats(x)))
    top = nisa.max8(src=x)
    nl.store(outs[8], top)
    nl.store(outs[9], nisa.nc_find_index8(data=x, vals=top))
    nl.store(outs[10], nisa.nc_match_replace8(data=x, vals=top, imm=-1.0))
    nl.store(outs[11], nisa.tensor_partition_reduce(np.add, x))
    nl.store(outs[12], nisa.reciprocal(y))
    s3 = nl.ndarray([128, 1], dtype=nl.float32)
    nl.store(outs[13], nisa.activation_reduce(op=nl.tanh, data=x, reduce_op=nl.add, reduce_res=s3))
    nl.store(outs[14], s3)
    return tuple(outs)


def _fold(cols):
    acc = np.zeros(cols.shape[0], F32)
    for i in range(cols.shape[1]):
        acc = acc + cols[:, i]
    return acc


def test_vector_and_scalar_forms_bit_for_bit():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((128, 64)).astype(F32)
    b = (rng.standard_normal((128, 64)) + 3).astype(F32)
    r = vector_forms(a, b)
    e = np.exp((a * F32(0.5)).astype(np.float64)).astype(F32)
    np.testing.assert_array_equal(r[0], e)
    np.testing.assert_array_equal(r[1][:, 0], _fold(e))
    np.testing.assert_array_equal(r[2], a * 2)
    np.testing.assert_array_equal(r[3][:, 0], _fold(a * 2))
    np.testing.assert_array_equal(r[4], (a - 1) * b)
    run, scan = np.zeros(128, F32), []
    for i in range(64):
        run = a[:, i] * run + b[:, i]
        scan.append(run)
    np.testing.assert_array_equal(r[5], np.stack(scan, 1))
    np.testing.assert_array_equal(r[6], np.where(a > b, a, 0))
    np.testing.assert_allclose(r[7][:, 0], a.mean(1), atol=1e-6)
    np.testing.assert_allclose(r[7][:, 1], a.var(1), rtol=1e-5)
    order = np.argsort(-a, 1, kind="stable")[:, :8]
    np.testing.assert_array_equal(r[8], np.take_along_axis(a, order, 1))
    np.testing.assert_array_equal(r[9], order)
    replaced = a.copy()
    np.put_along_axis(replaced, order, -1.0, 1)
    np.testing.assert_array_equal(r[10], replaced)
    np.testing.assert_array_equal(r[11][0], _fold(a.T))
    np.testing.assert_array_equal(r[12], F32(1) / b)
    t = np.tanh(a.astype(np.float64)).astype(F32)
    np.testing.assert_array_equal(r[13], t)
    np.testing.assert_array_equal(r[14][:, 0], _fold(t))
    engines = {i.mnemonic: i.engine for i in nki.last_run().program.instructions}
    assert engines["tensor_partition_reduce"] == "gpsimd" and engines["activation_reduce"] == "scalar"


@nki.jit
def engines_and_dropout(a):
    o = nl.ndarray([128, 64], dtype=nl.float32, buffer=nl.shared_hbm)
    o2 = nl.ndarray([128, 64], dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    nl.store(o, nisa.dropout(x, 0.5))
    t = nisa.memset((128, 64), 2.0, nl.float32, engine=nisa.gpsimd_engine)
    nl.store(o2, nisa.tensor_copy(t, engine=nisa.engine.scalar))
    return o, o2


def test_engine_argument_and_dropout():
    a = np.random.default_rng(5).standard_normal((128, 64)).astype(F32) + 10
    dropped, twos = engines_and_dropout(a)
    kept = dropped != 0
    assert 0.3 < kept.mean() < 0.7
    np.testing.assert_array_equal(dropped[kept], a[kept])
    np.testing.assert_array_equal(twos, np.full((128, 64), 2, F32))
    engines = {i.mnemonic: i.engine for i in nki.last_run().program.instructions}
    assert engines["memset"] == "gpsimd" and engines["tensor_copy"] == "scalar"


# ------------------------------------------------------------------ nc_stream_shuffle and local_gather
@nki.jit
def shuffle(a):
    out = nl.ndarray((128, 16), dtype=np.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    b = nl.ndarray((128, 16), dtype=np.float32)
    g = nl.mgrid[0:128, 0:16]
    nisa.nc_stream_shuffle(src=t[g.p, g.x], dst=b[g.p, g.x], shuffle_mask=[(i - 1) % 32 for i in range(32)])
    nl.store(out, value=b)
    return out


def test_nc_stream_shuffle_writes_its_dst():
    a = np.random.default_rng(6).standard_normal((128, 16)).astype(F32)
    want = np.concatenate([a[[(i - 1) % 32 + 32 * q for i in range(32)]] for q in range(4)])
    np.testing.assert_array_equal(shuffle(a), want)


@nki.jit
def gather(src, index):
    out = nl.ndarray((128, 64 * 4), dtype=src.dtype, buffer=nl.shared_hbm)
    g = nisa.local_gather(nl.load(src), nl.load(index), 4, 64)
    nl.store(out, g)
    return out


def test_local_gather_per_core():
    rng = np.random.default_rng(7)
    src = rng.standard_normal((128, 64, 4)).astype(F32)
    per_core = rng.integers(0, 64, size=(16, 4)).astype(np.uint16)
    index = np.tile(per_core, (8, 1))
    got = gather(src, index * 4).reshape(128, 64, 4)
    for c in range(8):
        flat = index[16 * c:16 * c + 16].flatten(order="F")[:64]
        np.testing.assert_array_equal(got[16 * c:16 * c + 16], src[16 * c:16 * c + 16][:, flat])


def test_an_isa_call_ncsim_lacks_names_what_it_has():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nisa.range_select(on_true_tile=nl.load(a)))
        return out

    with pytest.raises(AsmError, match=r"nisa.range_select is not available.*affine_select"):
        k(np.zeros((4, 4), F32))
