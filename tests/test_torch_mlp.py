"""examples/mlp_relu.py: the custom-operator MLP trains as it does with torch.relu (issue 13, item 5)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("mlp_relu_example", ROOT / "examples" / "mlp_relu.py")
mlp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mlp)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().view(torch.int32)


def test_relu_outputs_and_gradients_in_the_model_are_bit_exact():
    torch.manual_seed(0)
    model = mlp.MLP(torch.relu)
    images, _ = mlp.synthetic_mnist(1, 16)[0]
    for layer in (model.fc1(images.flatten(1)).detach(), model.fc2(torch.rand(16, 120)).detach()):
        a, b = layer.clone().requires_grad_(), layer.clone().requires_grad_()
        ya, yb = mlp.NcsimReLU.apply(a), torch.relu(b)
        assert torch.equal(bits(ya), bits(yb))
        dy = torch.randn_like(layer)
        ya.backward(dy)
        yb.backward(dy)
        assert torch.equal(bits(a.grad), bits(b.grad))


def test_losses_equal_torch_relu_step_for_step():
    ours = mlp.train(mlp.NcsimReLU.apply, epochs=1, steps=3, batch=16)
    eager = mlp.train(torch.relu, epochs=1, steps=3, batch=16)
    assert ours == eager
    assert len(ours) == 3 and ours[-1] < ours[0]


def test_main_prints_loss_and_simulated_time_per_epoch(capsys):
    mlp.main(["--epochs", "2", "--steps", "2", "--batch", "8", "--compare"])
    out = capsys.readouterr().out.splitlines()
    epochs = [line for line in out if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in epochs] == ["epoch 1", "epoch 2"]
    assert all("µs simulated" in line and "loss " in line for line in epochs)
    assert any(line.strip().startswith("my_ops::relu_forward: 4 calls") for line in out)
    assert any(line.strip().startswith("my_ops::relu_backward: 4 calls") for line in out)
    assert out[-1].startswith("torch.relu: the same loss at 4 of 4 steps")


def test_the_docs_quote_the_simulated_time_of_each_call(capsys):
    """docs/torch.md's example output: each operator's time per call at the default batch."""
    mlp.main(["--epochs", "1", "--steps", "1"])
    out = capsys.readouterr().out
    doc = (ROOT / "docs" / "torch.md").read_text()
    for op in ("relu_forward", "relu_backward"):
        each = re.search(rf"my_ops::{op}: 2 calls, [0-9.]+ µs simulated \(([0-9.]+) µs each\)", out)
        assert each, out
        assert re.search(rf"my_ops::{op}: 16 calls, [0-9.]+ µs simulated \({re.escape(each.group(1))} µs each\)", doc), \
            f"docs/torch.md: {op} at {each.group(1)} µs a call"
