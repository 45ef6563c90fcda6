"""The NKI tutorials' kernels, written here from their documented algorithms (aws-neuron-sdk
"NKI tutorials": tensor addition, transpose2d, RMSNorm, matrix multiplication), run on ncsim through
ncsim.nki and checked against numpy: bit for bit, with references that follow ncsim's documented
arithmetic where rounding matters (docs/nki.md, docs/numerics.md). Shapes are reduced."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ncsim.nki.language as nl
from ncsim import nki

F32 = np.float32


# ------------------------------------------------------------------ tensor addition (SPMD grid)
@nki.jit
def add_tiles(a, b):
    """Each SPMD instance adds one [128, 256] tile, placed by its program ids."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    rows = nl.program_id(0) * 128
    cols = nl.program_id(1) * 256
    ip = nl.arange(128)[:, None]
    jf = nl.arange(256)[None, :]
    x = nl.load(a[rows + ip, cols + jf])
    y = nl.load(b[rows + ip, cols + jf])
    nl.store(out[rows + ip, cols + jf], value=x + y)
    return out


def test_tensor_addition_on_an_spmd_grid():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((256, 512)).astype(F32)
    b = rng.standard_normal((256, 512)).astype(F32)
    got = add_tiles[2, 2](a, b)
    np.testing.assert_array_equal(got, a + b)
    run = nki.last_run()
    assert run.result.instructions == 4 * 4  # per instance: two loads, an add, a store
    assert run.latency_us > 0
    assert run.report.verdict.text


# ------------------------------------------------------------------ transpose2d
@nki.jit
def transpose_rows(x, shape2d):
    """Every row of x holds an [r, c] matrix, row-major; transpose each one with one copy whose two
    access patterns walk the matrix in opposite orders."""
    rows, cols = shape2d
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    ip = nl.arange(x.shape[0])[:, None, None]
    i1 = nl.arange(rows)[None, :, None]
    i2 = nl.arange(cols)[None, None, :]
    res = nl.ndarray((x.shape[0], rows * cols), dtype=x.dtype)
    res[ip, i2 * rows + i1] = nl.copy(t[ip, i1 * cols + i2])
    nl.store(out, value=res)
    return out


def test_transpose2d_int8_is_exact():
    p, r, c = 5, 3, 4
    a = np.arange(p * r * c, dtype=np.int8).reshape(p, r * c)
    got = transpose_rows(a, (r, c))
    np.testing.assert_array_equal(got, a.reshape(p, r, c).transpose(0, 2, 1).reshape(p, r * c))
    # the copy went straight into res: one tensor_copy, no second copy
    assert [i.mnemonic for i in nki.last_run().program.instructions] == ["dma_copy", "tensor_copy", "dma_copy"]


# ------------------------------------------------------------------ RMSNorm (masks, broadcast, output argument)
def rmsnorm(a, g, out):
    """out = a / sqrt(mean(a^2 along rows)) * g, 128 rows at a time; the last tile is partial (masks)."""
    n, d = a.shape
    ip = nl.arange(128)[:, None]
    jf = nl.arange(d)[None, :]
    g_row = nl.load(g.reshape((1, d)))
    g_all = g_row.broadcast_to((128, d))
    for i in nl.affine_range((n + 127) // 128):
        rows = i * 128 + ip
        live = rows < n
        x = nl.load(a[rows, jf], mask=live)
        sq = nl.square(x, mask=live)
        total = nl.sum(sq, axis=[1], mask=live)
        mean = nl.divide(total, d, mask=live)
        inv = nl.rsqrt(mean, mask=live)
        y = nl.multiply(x, inv, mask=live)
        y[...] = nl.multiply(y, g_all, mask=live)
        nl.store(out[rows, jf], value=y, mask=live)


def rmsnorm_reference(a: np.ndarray, g: np.ndarray) -> np.ndarray:
    """ncsim's arithmetic: squares rounded to fp32, a left-to-right fp32 sum, an fp32 division, rsqrt
    in float64 rounded once (the activation table's rule), then two fp32 products."""
    sq = a * a
    total = np.zeros(a.shape[0], F32)
    for j in range(a.shape[1]):
        total = total + sq[:, j]
    mean = total / F32(a.shape[1])
    inv = (1.0 / np.sqrt(mean.astype(np.float64))).astype(F32)
    return (a * inv[:, None]) * g[None, :]


def test_rmsnorm_with_a_partial_tile_fills_the_output_argument():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((200, 96)).astype(F32)
    g = rng.standard_normal(96).astype(F32)
    out = np.zeros_like(a)
    assert nki.baremetal(rmsnorm)(a, g, out) is None
    np.testing.assert_array_equal(out, rmsnorm_reference(a, g))
    names = {t.name: t.kind for t in nki.last_run().obj.tensors if t.memory == "hbm"}
    assert names == {"a": "in", "g": "in", "out": "inout"}


# ------------------------------------------------------------------ matrix multiplication
@nki.jit
def matmul_tiled(lhs_t, rhs):
    """result[M, N] = lhs_t.T @ rhs, tiles of 128 (K, M) x 512 (N), accumulated in PSUM."""
    k_size, m_size = lhs_t.shape
    _, n_size = rhs.shape
    result = nl.ndarray((m_size, n_size), dtype=lhs_t.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_size // 128):
        for n in nl.affine_range(n_size // 512):
            acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_size // 128):
                lt = nl.load(lhs_t[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                rt = nl.load(rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                acc += nl.matmul(lt, rt, transpose_x=True)
            nl.store(result[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], value=nl.copy(acc, dtype=result.dtype))
    return result


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_tiled_matmul_accumulates_in_psum(dtype):
    rng = np.random.default_rng(3)
    a = rng.integers(-8, 9, (384, 256)).astype(dtype)  # small integers: every sum is exact
    b = rng.integers(-8, 9, (384, 1024)).astype(dtype)
    got = matmul_tiled(a, b)
    want = (a.astype(np.float64).T @ b.astype(np.float64)).astype(dtype)
    np.testing.assert_array_equal(got, want)
    instrs = nki.last_run().program.instructions
    mm = [i for i in instrs if i.mnemonic == "nc_matmul"]
    assert len(mm) == 2 * 2 * 3
    assert [bool(i["accumulate"]) for i in mm[:3]] == [False, True, True]  # nl.zeros needs no memset
    assert not any(i.mnemonic == "memset" for i in instrs)


@nki.jit
def matmul_untransposed(x, y):
    out = nl.ndarray((x.shape[0], y.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.copy(nl.matmul(nl.load(x), nl.load(y))))
    return out


def test_matmul_without_transpose_x_transposes_on_the_tensor_engine():
    rng = np.random.default_rng(4)
    x = rng.integers(-8, 9, (64, 128)).astype(F32)
    y = rng.integers(-8, 9, (128, 256)).astype(F32)
    np.testing.assert_array_equal(matmul_untransposed(x, y), x @ y)
    assert "nc_transpose" in [i.mnemonic for i in nki.last_run().program.instructions]
