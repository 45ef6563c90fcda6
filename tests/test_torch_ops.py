"""ncsim.torch.custom_op: ncsim kernels as torch operators (issue 13, item 1)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ncsim.runtime.run
import ncsim.torch
from ncsim import nki
from ncsim.errors import NcsimError
from ncsim.nki import language as nl

ROOT = Path(__file__).resolve().parent.parent
FORWARD = ROOT / "programs" / "relu_forward.s"
BACKWARD = ROOT / "programs" / "relu_backward.s"
EDGES = [0.0, -0.0, 1e-45, -1e-45, float("inf"), -float("inf"), float("nan"), 3.0, -3.0]


@pytest.fixture(scope="module")
def relu():
    return ncsim.torch.custom_op("ncsim_test::relu", FORWARD, backward=BACKWARD)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().view(torch.int32)


def test_values_and_gradients_are_torch_relu_bit_for_bit(relu):
    # 130 rows: a full tile of 128 partitions and a partial one; the first row holds the edge values
    x = torch.randn(130, 9, generator=torch.Generator().manual_seed(1))
    x[0] = torch.tensor(EDGES)
    dy = torch.randn(130, 9, generator=torch.Generator().manual_seed(2))
    dy[1] = torch.tensor(EDGES)
    xs, xt = x.clone().requires_grad_(), x.clone().requires_grad_()
    ys, yt = relu(xs), torch.relu(xt)
    assert torch.equal(bits(ys), bits(yt))
    ys.backward(dy)
    yt.backward(dy)
    assert torch.equal(bits(xs.grad), bits(xt.grad))
    assert torch.ops.ncsim_test.relu.default(x).shape == (130, 9)  # the same operator through torch.ops


def test_opcheck_forward_and_backward(relu):
    x = torch.randn(3, 5, requires_grad=True)
    torch.library.opcheck(relu, (x,))
    torch.library.opcheck(torch.ops.ncsim_test.relu_backward.default, (torch.randn(3, 5), torch.relu(x).detach()))


def test_every_call_is_logged_with_its_report(relu):
    ncsim.torch.clear_op_log()
    relu(torch.randn(4, 6))
    relu(torch.randn(4, 6))
    calls = ncsim.torch.op_log()
    assert [c.op for c in calls] == ["ncsim_test::relu"] * 2
    report = ncsim.torch.last_report()
    assert report is calls[-1].report and report.total_ns == calls[-1].simulated_ns > 0
    assert calls[0].shapes == ((4, 6),) and calls[0].instructions > 0
    assert ncsim.torch.op_time_ns("ncsim_test::relu") == pytest.approx(2 * calls[0].simulated_ns)
    assert ncsim.torch.format_op_log().startswith("ncsim_test::relu: 2 calls, ")
    ncsim.torch.clear_op_log()
    assert ncsim.torch.last_report() is None and ncsim.torch.format_op_log() == "no ncsim operator calls"


def test_assembled_once_per_shape(monkeypatch):
    calls = []
    real = ncsim.runtime.run.load_program

    def counting(program, config, params=None):
        if isinstance(program, Path):  # assembling (each run also loads the decoded program it is given)
            calls.append(dict(params or {}))
        return real(program, config, params)

    monkeypatch.setattr(ncsim.runtime.run, "load_program", counting)
    op = ncsim.torch.custom_op("ncsim_test::relu_cached", FORWARD)
    for shape in [(2, 3), (2, 3), (5, 3), (2, 3)]:
        op(torch.randn(*shape))
    assert calls == [{"N": 2, "F": 3}, {"N": 5, "F": 3}]


def test_errors_name_the_operator_and_the_tensor(relu):
    with pytest.raises(NcsimError, match=r"ncsim_test::relu: input 'x' is torch.float64, but the kernel declares"
                                         r" f32\[N, F\]"):
        relu(torch.randn(2, 3, dtype=torch.float64))
    with pytest.raises(NcsimError, match=r"ncsim_test::relu: input 'x' has 3 dimensions \[2, 3, 4\], but the kernel"
                                         r" declares 2"):
        relu(torch.randn(2, 3, 4))
    with pytest.raises(NcsimError, match=r"ncsim_test::relu_backward: input 'y' has shape \[2, 4\]: its dimension 1"
                                         r" is F = 3 by 'dy' dimension 1, not 4"):
        torch.ops.ncsim_test.relu_backward(torch.randn(2, 3), torch.randn(2, 4))


def test_output_shapes_from_expressions_and_given_params(tmp_path):
    (tmp_path / "tile.s").write_text("""\
.param N
.param R
.hbm x f32[N, 4] in
.hbm y f32[R * N, 4] out
.sbuf t f32[128, 4]
.for r in 0..R
  dma_copy t[0:N, :], x
  dma_copy y[r*N : r*N + N, :], t[0:N, :]
.end
""")
    tile = ncsim.torch.custom_op("ncsim_test::tile", tmp_path / "tile.s", params={"R": 3})
    x = torch.randn(5, 4)
    assert torch.equal(tile(x), x.repeat(3, 1))
    with pytest.raises(NcsimError, match=r"ncsim_test::tile: input 'x' has shape \[5, 3\], but the kernel declares"
                                         r" f32\[5, 4\] \(with R = 3, N = 5\)"):
        tile(torch.randn(5, 3))


def test_registration_errors(tmp_path):
    (tmp_path / "io.s").write_text(".hbm x f32[4] inout\n")
    with pytest.raises(NcsimError, match="tensor 'x' is declared inout"):
        ncsim.torch.custom_op("ncsim_test::io", tmp_path / "io.s")
    (tmp_path / "bw.s").write_text(".param N\n.param F\n.hbm dz f32[N, F] in\n.hbm dx f32[N, F] out\n")
    with pytest.raises(NcsimError, match=r"the backward kernel's input 'dz' is no input \(x\) or output \(y\)"):
        ncsim.torch.custom_op("ncsim_test::bad_backward", FORWARD, backward=tmp_path / "bw.s")
    with pytest.raises(NcsimError, match="params gives \\['Q'\\], which the kernel does not declare"):
        ncsim.torch.custom_op("ncsim_test::bad_params", FORWARD, params={"Q": 1})
    with pytest.raises(NcsimError, match="no such kernel file"):
        ncsim.torch.custom_op("ncsim_test::missing", tmp_path / "missing.s")


def test_without_torch_it_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    with pytest.raises(NcsimError, match=r"ncsim.torch needs torch, which is not installed: pip install -e '.\[torch\]'"):
        ncsim.torch.custom_op("ncsim_test::never", FORWARD)


@nki.jit
def nki_relu(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.maximum(nl.load(x), 0.0))
    return out


def test_an_nki_kernel_as_an_operator():
    op = ncsim.torch.custom_op("ncsim_test::nki_relu", nki_relu)
    x = torch.randn(8, 16)
    x[0, :3] = 0.5
    y = op(x)
    assert torch.equal(y, torch.relu(x))
    assert ncsim.torch.op_log()[-1].kernel == "nki_relu"
    torch.library.opcheck(op, (torch.randn(4, 8),))
    np.testing.assert_array_equal(y.numpy(), np.maximum(x.numpy(), 0))
