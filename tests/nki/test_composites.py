"""nl.where, nl.var, nl.softmax, nl.rms_norm, nl.dropout, nl.gelu_apprx_sigmoid and nl.device_print
(docs/nki.md, engine policy): each checked bit for bit against a numpy reference of the instructions
they become, in ncsim's documented arithmetic (docs/numerics.md, docs/isa.md)."""

from __future__ import annotations

import numpy as np

import ncsim.nki.language as nl
from ncsim import nki

F32 = np.float32


def _fold(cols: np.ndarray) -> np.ndarray:
    """Left-to-right fp32 sum of the columns, from +0."""
    acc = np.zeros(cols.shape[0], F32)
    for i in range(cols.shape[1]):
        acc = acc + cols[:, i]
    return acc


def _bn_var(a: np.ndarray, fmax: int = 512) -> np.ndarray:
    """bn_stats on each chunk of fmax elements (even and odd positions), then bn_aggr (docs/isa.md)."""
    triples = []
    for c in range(0, a.shape[1], fmax):
        chunk = a[:, c:c + fmax]
        for g in (chunk[:, 0::2], chunk[:, 1::2]):
            count = F32(g.shape[1])
            mean = _fold(g) / count
            m2 = _fold((g - mean[:, None]) * (g - mean[:, None]))
            triples.append((np.full_like(mean, count), mean, m2))
    n = _fold(np.stack([t[0] for t in triples], 1))
    mean = _fold(np.stack([t[0] * t[1] for t in triples], 1)) / n
    acc = np.zeros_like(mean)
    for count, m, m2 in triples:
        acc = acc + (m2 + count * ((m - mean) * (m - mean)))
    return acc / n


@nki.jit
def composites(a, b, w):
    outs = [nl.ndarray(shape, dtype=nl.float32, buffer=nl.shared_hbm)
            for shape in ((128, 600), (128, 1), (128, 600), (128, 600), (128, 600), (128, 600))]
    x, y, g = nl.load(a), nl.load(b), nl.load(w)
    nl.store(outs[0], nl.where(x > y, x, y))
    nl.store(outs[1], nl.var(x, axis=1, keepdims=True))
    nl.store(outs[2], nl.softmax(x, axis=1))
    nl.store(outs[3], nl.rms_norm(x, g, axis=1, n=600))
    nl.store(outs[4], nl.where(x > 0.0, x, -1.0))
    nl.store(outs[5], nl.gelu_apprx_sigmoid(x))
    return tuple(outs)


def test_composites_bit_for_bit():
    rng = np.random.default_rng(8)
    a = rng.standard_normal((128, 600)).astype(F32)
    b = rng.standard_normal((128, 600)).astype(F32)
    w = rng.standard_normal((1, 600)).astype(F32)
    where, var, soft, rms, where_number, gelu = composites(a, b, w)
    np.testing.assert_array_equal(where, np.maximum(a, b))
    np.testing.assert_array_equal(var[:, 0], _bn_var(a))  # two bn_stats (512 + 88 elements), one bn_aggr
    e = np.exp((a + -a.max(1, keepdims=True)).astype(np.float64)).astype(F32)
    np.testing.assert_array_equal(soft, e / _fold(e)[:, None])
    ss = _fold(np.square(a.astype(np.float64)).astype(F32))
    r = (1 / np.sqrt((ss / F32(600) + F32(1e-6)).astype(np.float64))).astype(F32)
    np.testing.assert_array_equal(rms, (a * r[:, None]) * w)
    np.testing.assert_array_equal(where_number, np.where(a > 0, a, F32(-1)))
    s = (1 / (1 + np.exp(-(a * F32(1.702)).astype(np.float64)))).astype(F32)
    np.testing.assert_array_equal(gelu, a * s)
    mnemonics = [i.mnemonic for i in nki.last_run().program.instructions]
    assert mnemonics.count("bn_stats") == 2 and "tensor_copy_predicated" in mnemonics


@nki.jit
def dropout_kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.dropout(nl.load(a), 0.25))
    return out


def test_nl_dropout_is_the_dropout_instruction():
    a = np.random.default_rng(9).standard_normal((128, 256)).astype(F32) + 10
    got = dropout_kernel(a)
    kept = got != 0
    assert 0.65 < kept.mean() < 0.85
    np.testing.assert_array_equal(got[kept], a[kept])


@nki.jit
def printing(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    nl.device_print("before:", x[0:2, 0:3])
    x[...] = nl.multiply(x, 2.0)
    nl.device_print("after:", x[0:2, 0:3])
    nl.store(out, x)
    return out


def test_device_print_shows_the_values_at_that_point(capsys):
    a = np.arange(32, dtype=F32).reshape(4, 8)
    np.testing.assert_array_equal(printing(a), a * 2)
    text = capsys.readouterr().out
    assert text.index("before:") < text.index("after:")
    before, after = text.split("after:")
    assert "[[ 0.  1.  2.]\n [ 8.  9. 10.]]" in before
    assert "[[ 0.  2.  4.]\n [16. 18. 20.]]" in after
    nki.simulate_kernel(printing, a, values=False)
    assert capsys.readouterr().out.count("not shown: a timing-only run computes no values") == 1
