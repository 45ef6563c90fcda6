"""torch.compile(fn, backend="ncsim") and ncsim.torch.custom_op_from (issue 13 items 3 and 5): graphs
Dynamo captures lowered by ncsim.torch.lower's node mapping and run on the simulated core, the
eager fallback's warning, lowered functions as torch operators, and the MLP of
examples/mlp_relu.py trained under torch.compile against eager torch."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F

import ncsim.torch as nt

_spec = importlib.util.spec_from_file_location("mlp_relu_compiled", Path(__file__).resolve().parent.parent
                                               / "examples" / "mlp_relu.py")
mlp_relu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mlp_relu)

GEN = torch.Generator().manual_seed(23)


def rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=GEN)


def test_the_backend_is_found_by_name_through_its_entry_point():
    assert "ncsim" in torch._dynamo.list_backends()
    from torch._dynamo.backends.registry import lookup_backend

    from ncsim.torch.compile import backend
    assert lookup_backend("ncsim") is backend


def test_a_compiled_function_runs_on_the_simulated_core_bit_for_bit():
    def f(x, y):
        return torch.where(x > y, x - y, y * 2.0), torch.maximum(x, y).clamp(min=0)

    cf = torch.compile(f, backend="ncsim")
    x, y = rand(130, 70), rand(130, 70)
    nt.clear_op_log()
    got = cf(x, y)
    for g, w in zip(got, f(x, y)):
        assert torch.equal(g.view(torch.int32), w.view(torch.int32))
    calls = nt.op_log()
    assert len(calls) == 1 and calls[0].op.endswith(".forward") and calls[0].simulated_ns > 0
    assert nt.last_report() is calls[0].report and calls[0].shapes == ((130, 70), (130, 70))


def test_a_graph_ncsim_cannot_lower_runs_in_eager_torch_with_one_warning_naming_the_op():
    def f(x):
        return torch.cumsum(x * 2.0, dim=-1)

    cf = torch.compile(f, backend="ncsim")
    x = rand(6, 9)
    nt.clear_op_log()
    with pytest.warns(nt.NcsimFallbackWarning, match=r"aten\.cumsum\.default") as record:
        first = cf(x)
    second = cf(x)  # no second warning (the suite makes warnings errors): the graph was compiled once
    assert len(record) == 1 and __file__ in str(record[0].message) and "eager torch" in str(record[0].message)
    assert torch.equal(first, f(x)) and torch.equal(second, f(x))
    assert nt.op_log() == []  # nothing ran on the simulated core


def train(compiled: bool, steps: int = 3, batch: int = 8) -> tuple[list[float], torch.nn.Module]:
    torch.manual_seed(0)
    model = mlp_relu.MLP(torch.relu)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    run = torch.compile(model, backend="ncsim") if compiled else model
    losses = []
    for images, labels in mlp_relu.synthetic_mnist(steps, batch):
        opt.zero_grad()
        loss = F.nll_loss(run(images), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def test_the_mlp_trains_under_torch_compile_with_forward_and_backward_on_the_simulated_core():
    nt.clear_op_log()
    losses, model = train(True)  # a warning (a fallback) would fail the test: the suite runs with -W error
    calls = nt.op_log()
    kinds = [c.op.rsplit(".", 1)[1] for c in calls]
    assert kinds == ["forward", "backward"] * 3  # each step: the whole forward, then the whole backward
    assert all(c.simulated_ns > 0 for c in calls)
    eager, eager_model = train(False)
    # docs/torch.md: the matmuls sum K in another order (PSUM tiles of 128) and log_softmax's exp and
    # log are the Scalar engine's tables, so the loss follows eager torch to a relative 1e-5
    for a, b in zip(losses, eager):
        assert abs(a - b) <= 1e-5 * abs(b)
    for p, q in zip(model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)


def test_backward_ops_of_a_linear_layer_against_eager_torch():
    # what AOT Autograd's backward graph of the MLP holds: mm with transposed operands, the bias
    # gradient's sum over the batch axis, threshold_backward (decomposed to le + where)
    dy, x, y = rand(40, 84), rand(40, 120), torch.relu(rand(40, 84))
    for fn in (lambda dy, x: torch.mm(dy.t(), x), lambda dy, x: dy.sum(0, keepdim=True)):
        v = nt.validate(fn, dy, x)
        torch.testing.assert_close(v.run.outputs[0], fn(dy, x), rtol=1e-4, atol=1e-5)
    v = nt.validate(lambda dy, y: torch.ops.aten.threshold_backward(dy, y, 0.0), dy, y)
    assert v.bit_exact, v.format()


@nt.custom_op_from(name="ncsim_test::relu_fw")
def relu_fw(x):
    return torch.relu(x)


@nt.custom_op_from(name="ncsim_test::relu_bw")
def relu_bw(dy, y):
    return torch.where(y <= 0, 0.0, dy)


class LoweredReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = relu_fw(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return relu_bw(dy, y)


def test_custom_op_from_inside_an_autograd_function_is_torch_relu_bit_for_bit():
    x = rand(130, 20)
    x[0, :3] = torch.tensor([-0.0, 0.0, float("nan")])
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    nt.clear_op_log()
    ya = LoweredReLU.apply(a) * 3.0  # the operator's output used by torch code
    ya.sum().backward()
    yb = torch.relu(b) * 3.0
    yb.sum().backward()
    assert torch.equal(ya.view(torch.int32), yb.view(torch.int32))
    assert torch.equal(a.grad.view(torch.int32), b.grad.view(torch.int32))
    assert [c.op for c in nt.op_log()] == ["ncsim_test::relu_fw", "ncsim_test::relu_bw"]
    assert torch.ops.ncsim_test.relu_fw.default is not None


def test_custom_op_from_with_two_outputs_lowers_once_per_shape():
    @nt.custom_op_from(name="ncsim_test::minmax", outputs=2)
    def minmax(x, y):
        return torch.minimum(x, y), torch.maximum(x, y)

    x, y = rand(5, 7), rand(5, 7)
    lo, hi = minmax(x, y)
    assert torch.equal(lo, torch.minimum(x, y)) and torch.equal(hi, torch.maximum(x, y))
    lo, hi = minmax(y, x)
    assert torch.equal(hi, torch.maximum(x, y))
    with pytest.raises(nt.LoweringError, match="gives 2 outputs; the operator was declared with outputs=1"):
        nt.custom_op_from(lambda x, y: (x + y, x - y), name="ncsim_test::two")(x, y)


def test_custom_op_from_operators_pass_opcheck():
    # opcheck's schema test calls the operator from inside SchemaCheckMode: the lowering (torch.export)
    # happens there on the first call of a shape, and must not see that mode's dispatch state
    @nt.custom_op_from(name="ncsim_test::lo_hi", outputs=2)
    def lo_hi(x, y):
        return torch.minimum(x, y), torch.maximum(x, y).clamp(min=0)

    x, y = rand(5, 7), rand(5, 7)
    torch.library.opcheck(relu_fw, (x,))
    torch.library.opcheck(relu_bw, (x, torch.relu(y)))
    torch.library.opcheck(lo_hi, (x, y))
    lo, hi = lo_hi(x, y)  # the program lowered inside opcheck is the right one
    assert torch.equal(lo, torch.minimum(x, y)) and torch.equal(hi, torch.maximum(x, y).clamp(min=0))



def test_custom_op_from_gives_a_bf16_result_as_bf16():
    """A bf16 result is a bf16 tensor, as the operator's fake implementation says (it was the int16
    tensor of its bits)."""
    double = nt.custom_op_from(lambda x: x + x, name="ncsim_test::double_bf16")
    x = rand(5, 7).to(torch.bfloat16)
    got = double(x)
    assert got.dtype == torch.bfloat16 and torch.equal(got, x + x)
    torch.library.opcheck(double, (x,))


# ------------------------------------------------------------------ ncsim lower FILE.py:FUNCTION --shape ...
def ncsim_cli(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    from ncsim.cli import main

    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["ncsim", *args])
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    return code, capsys.readouterr().err


def test_ncsim_lower_writes_the_s_of_a_function_for_the_given_shapes(tmp_path, monkeypatch, capsys):
    import numpy as np

    from ncsim.asm.assembler import assemble
    from ncsim.runtime.run import run as ncsim_run

    (tmp_path / "fns.py").write_text("import torch\n\n\ndef f(x, y):\n    return torch.where(x > y, x - y, y * 2.0)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    code, err = ncsim_cli(monkeypatch, capsys, "lower", "fns.py:f", "--shape", "130,70", "--shape", "130,70:f32")
    assert code == 0, err
    text = (tmp_path / "f.s").read_text()
    x, y = rand(130, 70), rand(130, 70)
    r = ncsim_run(assemble(text, "f.s"), {"x": x.numpy(), "y": y.numpy()}, sidecar=False, check=False)
    want = torch.where(x > y, x - y, y * 2.0)
    assert np.array_equal(r.outputs["out"].view(np.uint32), want.numpy().view(np.uint32))
    code, err = ncsim_cli(monkeypatch, capsys, "lower", "fns.py:f", "--shape", "4,4:bf16", "--shape", "4,4:bf16",
                          "-o", "g.s", "-q")
    assert code == 0 and (tmp_path / "g.s").read_text().count("bf16") > 0 and err == ""


@pytest.mark.parametrize(("args", "message"), [
    (["fns.py:g", "--shape", "4"], "fns.py defines no function g"),
    (["fns.py:f", "--shape", "4,x"], "dimensions are integers"),
    (["fns.py:f", "--shape", "4:f64"], "dtype 'f64' is none of f32, f16, bf16, bool"),
    (["fns.py", "--shape", "4"], "give the function as FILE.py:FUNCTION"),
    (["nothere.py:f"], "no such file"),
])
def test_ncsim_lower_errors_are_messages(tmp_path, monkeypatch, capsys, args, message):
    (tmp_path / "fns.py").write_text("def f(x):\n    return x + 1.0\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    code, err = ncsim_cli(monkeypatch, capsys, "lower", *args)
    assert code == 1 and message in err and "Traceback" not in err
