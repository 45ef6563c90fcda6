"""ncsim and torch: ncsim kernels as torch operators (docs/torch.md).

    import ncsim.torch
    relu = ncsim.torch.custom_op("my_ops::relu_forward", "programs/relu_forward.s",
                                 backward="programs/relu_backward.s")
    y = relu(x)                               # runs on the simulated NeuronCore: values and time
    ncsim.torch.last_report().format()        # that call's timing report
    print(ncsim.torch.format_op_log())        # simulated time per operator, over the calls so far

torch is an optional extra (`pip install -e '.[torch]'`): this package imports without it, and
custom_op says how to install it when it is missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ncsim.config import Config
from ncsim.errors import NcsimError
from ncsim.torch.compile import NcsimFallbackWarning
from ncsim.torch.kernels import KernelError
from ncsim.torch.log import OpCall, clear_op_log, format_op_log, last_report, op_log, op_time_ns
from ncsim.torch.lower import Lowered, LoweringError, Validation, lower, supported_ops, validate

__all__ = ["KernelError", "Lowered", "LoweringError", "NcsimFallbackWarning", "OpCall", "Validation", "clear_op_log",
           "custom_op", "custom_op_from", "format_op_log", "last_report", "lower", "op_log", "op_time_ns",
           "supported_ops", "validate"]

INSTALL = "pip install -e '.[torch]' in the ncsim checkout (torch==2.13.0; the CPU wheel is enough)"


def require_torch() -> Any:
    """torch, or an NcsimError that says how to install it."""
    try:
        import torch
    except ImportError:
        raise NcsimError(f"ncsim.torch needs torch, which is not installed: {INSTALL}") from None
    return torch


def custom_op(name: str, kernel: str | Path | Any, *, backward: str | Path | Any = None,
              params: Mapping[str, int] | None = None, config: Config | None = None, outputs: int = 1) -> Any:
    """Register `kernel` as the torch operator `name` ("namespace::name") and return it (a
    torch.library CustomOpDef: call it with tensors; torch.ops.namespace.name is the same operator).

    kernel: an assembly program (.s: `in` tensors are the inputs in declaration order, `out` tensors
    the outputs; `.param`s named as an input's dimension take its size), an object (.o), or an NKI
    kernel of ncsim.nki (its positional parameters are the inputs; it returns `outputs` tensors).
    backward: the kernel of the gradient, registered as the operator NAME_backward: its inputs are
    named as the forward's inputs, outputs, or `d` + an output (that output's gradient), its outputs
    `d` + an input (that input's gradient). params: values of .param names no input binds.
    config: the hardware parameters (ncsim.config.Config) of the simulated core.
    """
    require_torch()
    from ncsim.torch.ops import register

    return register(name, kernel, backward=backward, params=params, config=config, outputs=outputs)


def custom_op_from(fn: Any = None, *, name: str | None = None, outputs: int = 1, config: Config | None = None) -> Any:
    """A torch function of tensors as a torch operator running on the simulated core: each call runs
    `fn` lowered by `lower` (once per set of input shapes and dtypes, then kept) and is logged as
    custom_op's calls are. A decorator, bare or with arguments:

        @ncsim.torch.custom_op_from(name="my_ops::giou")
        def giou(a, b): ...

    name: "namespace::name" (default "ncsim_lowered::" + fn's name); outputs: how many tensors fn
    returns (the operator's schema is written before any call). Usable in torch code and inside a
    torch.autograd.Function (an operator for the forward, another for the backward)."""
    def make(f: Any) -> Any:
        require_torch()
        from ncsim.torch.ops import register_lowered

        return register_lowered(f, name or f"ncsim_lowered::{getattr(f, '__name__', 'fn')}", outputs, config)
    return make(fn) if fn is not None else make
