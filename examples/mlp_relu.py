"""The custom-operator MLP: a 784-120-84-10 classifier whose ReLU forward and backward are ncsim kernels.

The Neuron SDK's tutorial for custom C++ operators trains this network with its ReLU written as two
custom operators called from a torch.autograd.Function. Here the two operators are the assembly
kernels programs/relu_forward.s and programs/relu_backward.s, registered with ncsim.torch.custom_op:
every call runs on the simulated NeuronCore, and the simulated time of each is logged. The data is
synthetic and seeded, shaped like MNIST (28x28 images, 10 classes): nothing is downloaded.

    python examples/mlp_relu.py                   # 2 epochs of 8 steps, batch 32
    python examples/mlp_relu.py --compare         # and the same model with torch.relu beside it
    python examples/mlp_relu.py --compile         # torch.relu model under torch.compile(backend="ncsim")

ReLU is exact, so the loss equals that of the same model with torch.relu at every step
(tests/test_torch_mlp.py checks it, and the outputs and gradients of the ReLUs bit for bit).
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import ncsim.torch

PROGRAMS = Path(__file__).resolve().parent.parent / "programs"


@functools.cache
def relu_ops(namespace: str = "my_ops") -> tuple[Any, Any]:
    """The two ncsim operators, registered once: NAMESPACE::relu_forward(x) and ::relu_backward(dy, y)."""
    forward = ncsim.torch.custom_op(f"{namespace}::relu_forward", PROGRAMS / "relu_forward.s")
    backward = ncsim.torch.custom_op(f"{namespace}::relu_backward", PROGRAMS / "relu_backward.s")
    return forward, backward


class NcsimReLU(torch.autograd.Function):
    """ReLU whose forward and backward run on the simulated NeuronCore."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = relu_ops()[0](x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return relu_ops()[1](dy.contiguous(), y)


class MLP(nn.Module):
    def __init__(self, relu: Any):
        super().__init__()
        self.fc1 = nn.Linear(28 * 28, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)
        self.relu = relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.fc1(x.flatten(1)))
        x = self.relu(self.fc2(x))
        return F.log_softmax(self.fc3(x), dim=1)


def synthetic_mnist(steps: int, batch: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Seeded 28x28 images in [0, 1) with labels a fixed random linear map of them makes learnable."""
    g = torch.Generator().manual_seed(seed)
    images = torch.rand(steps * batch, 1, 28, 28, generator=g)
    w = torch.randn(28 * 28, 10, generator=g)
    labels = (images.flatten(1) @ w).argmax(dim=1)
    return [(images[i * batch:(i + 1) * batch], labels[i * batch:(i + 1) * batch]) for i in range(steps)]


def train(relu: Any, epochs: int = 2, steps: int = 8, batch: int = 32, seed: int = 0,
          report: bool = False, compile: bool = False) -> list[float]:
    """Train a freshly seeded MLP with SGD (lr 0.01); the loss of every step. compile: the model runs
    under torch.compile(model, backend="ncsim") (forward and backward graphs on the simulated core)."""
    torch.manual_seed(seed)
    model = MLP(relu)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if compile:
        model = torch.compile(model, backend="ncsim")
    data = synthetic_mnist(steps, batch, seed)
    losses = []
    for epoch in range(epochs):
        ncsim.torch.clear_op_log()
        for images, labels in data:
            opt.zero_grad()
            loss = F.nll_loss(model(images), labels)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        if report:
            mean = sum(losses[-steps:]) / steps
            print(f"epoch {epoch + 1}: loss {mean:.6f}; ncsim ops {ncsim.torch.op_time_ns() / 1000:.3f} µs simulated")
            for line in ncsim.torch.format_op_log().splitlines():
                print("    " + line)
    return losses


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8, help="steps (batches) per epoch")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--compare", action="store_true", help="also train with torch.relu and compare the losses")
    parser.add_argument("--compile", action="store_true",
                        help="train the torch.relu model under torch.compile(backend='ncsim') against eager torch")
    args = parser.parse_args(argv)
    if args.compile:
        losses = train(torch.relu, args.epochs, args.steps, args.batch, report=True, compile=True)
        eager = train(torch.relu, args.epochs, args.steps, args.batch)
        worst = max(abs(a - b) / abs(b) for a, b in zip(losses, eager))
        print(f"eager torch: worst relative loss difference {worst:.2e} over {len(losses)} steps")
        return
    losses = train(NcsimReLU.apply, args.epochs, args.steps, args.batch, report=True)
    if args.compare:
        eager = train(torch.relu, args.epochs, args.steps, args.batch)
        same = sum(a == b for a, b in zip(losses, eager))
        print(f"torch.relu: the same loss at {same} of {len(losses)} steps; last {eager[-1]:.6f}")


if __name__ == "__main__":
    main()
