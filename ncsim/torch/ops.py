"""ncsim kernels registered as torch operators with torch.library (imported only when torch is there).

`torch.library.custom_op` makes the operator (its schema written from the kernel's inputs and
outputs), `register_fake` gives its output shapes and dtypes from the kernel's declarations, and
`register_autograd` its gradient through a backward kernel, itself registered as the operator
NAME_backward. docs/torch.md describes the rules.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ncsim import dtypes
from ncsim.config import Config
from ncsim.torch import log
from ncsim.torch.arrays import TORCH_NAMES, to_numpy, to_torch
from ncsim.torch.kernels import AsmKernel, KernelError, NkiKernel

# ncsim's dtypes that torch has (arrays.TORCH_NAMES), by short name
TORCH_DTYPES: dict[str, torch.dtype] = {short: getattr(torch, name) for name, short in TORCH_NAMES.items()}
FROM_TORCH = {v: dtypes.by_name(k) for k, v in TORCH_DTYPES.items()}


def make_kernel(kernel: Any, config: Config | None, params: Mapping[str, int] | None, outputs: int) -> Any:
    if isinstance(kernel, (str, Path)):
        return AsmKernel(kernel, config, params)
    if callable(kernel):
        if params:
            raise KernelError("params= is for assembly kernels (.s): an NKI kernel takes its sizes from its arguments")
        return NkiKernel(kernel, outputs)
    raise KernelError(f"a kernel is a path to an assembly program (.s) or object (.o), or an NKI kernel"
                      f" (@ncsim.nki.jit), not {type(kernel).__name__}")


def kernel_input(op: str, k: Any, index: int, t: torch.Tensor) -> np.ndarray:
    """A torch tensor as the array ncsim stores for its dtype, its dtype checked against the kernel's
    (bf16 through its bits, arrays.to_numpy; bool as 0/1 u8 for an assembly kernel)."""
    k.check_dtype(op, index, FROM_TORCH.get(t.dtype), str(t.dtype))
    a = to_numpy(t)
    return a.view(np.uint8) if (t.dtype == torch.bool and isinstance(k, AsmKernel)) else a


def torch_dtype(op: str, name: str, d: dtypes.DType) -> torch.dtype:
    if d.short not in TORCH_DTYPES:
        raise KernelError(f"{op}: output '{name}' is {d.short}, which has no torch dtype here"
                          f" (torch dtypes: {', '.join(TORCH_DTYPES)})")
    return TORCH_DTYPES[d.short]


def _schema(inputs: list[str], n_out: int) -> str:
    outs = "Tensor" if n_out == 1 else "(" + ", ".join(["Tensor"] * n_out) + ")"
    return "(" + ", ".join(f"Tensor {n}" for n in inputs) + ") -> " + outs


def register(name: str, kernel: Any, *, backward: Any = None, params: Mapping[str, int] | None = None,
             config: Config | None = None, outputs: int = 1) -> Any:
    k = make_kernel(kernel, config, params, outputs)
    op = _register_one(name, k)
    if backward is not None:
        bk = make_kernel(backward, config, params, len(k.input_names))
        bop = _register_one(name + "_backward", bk)
        _register_backward(name, op, k, bop, bk)
    return op


def _register_one(name: str, k: Any) -> Any:
    for n in k.input_names:
        if not n.isidentifier():
            raise KernelError(f"{name}: input '{n}' cannot name a torch argument")

    def impl(*tensors: torch.Tensor) -> Any:
        arrays = [kernel_input(name, k, i, t) for i, t in enumerate(tensors)]
        start = time.perf_counter()
        ran = k.run(name, arrays)
        seconds = time.perf_counter() - start
        in_dtypes = [FROM_TORCH[t.dtype] for t in tensors]
        out_dtypes = k.output_dtypes(name, [a.shape for a in arrays], in_dtypes)
        device = tensors[0].device if tensors else torch.device("cpu")
        outs = [to_torch(a, TORCH_DTYPES.get(d.short), device) for a, d in zip(ran.outputs, out_dtypes)]
        log.record(log.OpCall(name, k.name, tuple(tuple(a.shape) for a in arrays), ran.report.total_ns,
                              ran.instructions, ran.report.verdict.text, seconds, ran.report))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def fake(*tensors: torch.Tensor) -> Any:
        for i, t in enumerate(tensors):
            k.check_dtype(name, i, FROM_TORCH.get(t.dtype), str(t.dtype))
        shapes = [tuple(t.shape) for t in tensors]
        in_dtypes = [FROM_TORCH[t.dtype] for t in tensors]
        out_shapes = k.output_shapes(name, shapes, in_dtypes)
        out_dtypes = k.output_dtypes(name, shapes, in_dtypes)
        like = tensors[0] if tensors else torch.empty(0)
        outs = [like.new_empty(s, dtype=torch_dtype(name, n, d))
                for s, d, n in zip(out_shapes, out_dtypes, k.output_names)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    op = torch.library.custom_op(name, impl, mutates_args=(), schema=_schema(k.input_names, len(k.output_names)))
    op.register_fake(fake)
    return op


def _register_backward(name: str, op: Any, k: Any, bop: Any, bk: Any) -> None:
    """The backward kernel's inputs by name: an input or an output of the forward kernel, or `d` and an
    output's name (that output's gradient); its outputs `d` and an input's name (that input's gradient;
    an NKI backward kernel returns one gradient per forward input, in order)."""
    ins, outs = k.input_names, k.output_names
    sources = []
    for n in bk.input_names:
        if n in ins:
            sources.append(("input", ins.index(n)))
        elif n in outs:
            sources.append(("output", outs.index(n)))
        elif n.startswith("d") and n[1:] in outs:
            sources.append(("grad", outs.index(n[1:])))
        else:
            raise KernelError(f"{name}: the backward kernel's input '{n}' is no input ({', '.join(ins)}) or output"
                              f" ({', '.join(outs)}) of the forward kernel, nor an output's gradient"
                              f" ({', '.join('d' + o for o in outs)})")
    if isinstance(bk, NkiKernel):
        targets = list(range(len(ins)))
    else:
        targets = []
        for n in bk.output_names:
            if not (n.startswith("d") and n[1:] in ins):
                raise KernelError(f"{name}: the backward kernel's output '{n}' is no input's gradient"
                                  f" ({', '.join('d' + i for i in ins)})")
            targets.append(ins.index(n[1:]))
    needs_in = sorted({i for kind, i in sources if kind == "input"})
    needs_out = sorted({i for kind, i in sources if kind == "output"})

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        outputs = output if isinstance(output, tuple) else (output,)
        ctx.save_for_backward(*(inputs[i] for i in needs_in), *(outputs[i] for i in needs_out))
        ctx.out_like = [(o.shape, o.dtype) for o in outputs]

    def backward(ctx: Any, *grads: Any) -> tuple:
        saved = ctx.saved_tensors
        saved_in = dict(zip(needs_in, saved[:len(needs_in)]))
        saved_out = dict(zip(needs_out, saved[len(needs_in):]))
        args = []
        for kind, i in sources:
            if kind == "input":
                args.append(saved_in[i])
            elif kind == "output":
                args.append(saved_out[i])
            else:
                g = grads[i]
                shape, dtype = ctx.out_like[i]
                args.append(torch.zeros(shape, dtype=dtype) if g is None else g.contiguous())
        got = bop(*args)
        got = got if isinstance(got, tuple) else (got,)
        result: list[Any] = [None] * len(ins)
        for target, g in zip(targets, got):
            result[target] = g
        return tuple(result)

    op.register_autograd(backward, setup_context=setup_context)


def register_lowered(fn: Any, name: str, outputs: int, config: Config | None) -> Any:
    """`fn`, a torch function of tensors, as the torch operator `name` whose calls run `fn` lowered by
    ncsim.torch.lower (lowered once per set of input shapes and dtypes, then kept) on the simulated
    core. Its fake implementation is `fn` itself on fake tensors (torch code runs on them), each
    output a fresh tensor of that shape and dtype."""
    import inspect

    from ncsim.torch.lower import LoweringError, lower

    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        raise KernelError(f"{name}: cannot read the parameters of {fn!r}") from None
    for n in params:
        if not n.isidentifier():
            raise KernelError(f"{name}: parameter '{n}' cannot name a torch argument")
    programs: dict[tuple, Any] = {}

    def impl(*tensors: torch.Tensor) -> Any:
        key = tuple((tuple(t.shape), t.dtype) for t in tensors)
        if key not in programs:
            # export traces plain example tensors of the same shapes and dtypes
            programs[key] = lower(fn, *(torch.zeros(s, dtype=d) for s, d in key), config=config)
        prog = programs[key]
        start = time.perf_counter()
        r = prog.run(*tensors)
        seconds = time.perf_counter() - start
        if len(r.outputs) != outputs:
            raise LoweringError(f"{name}: {getattr(fn, '__name__', 'fn')} gives {len(r.outputs)} outputs; the"
                                f" operator was declared with outputs={outputs}")
        log.record(log.OpCall(name, prog.name, tuple(tuple(t.shape) for t in tensors), r.report.total_ns,
                              r.instructions, r.report.verdict.text, seconds, r.report))
        device = tensors[0].device if tensors else torch.device("cpu")
        outs = [o.to(device) for o in r.outputs]
        return outs[0] if outputs == 1 else tuple(outs)

    def fake(*tensors: torch.Tensor) -> Any:
        got = fn(*tensors)
        got = [got] if isinstance(got, torch.Tensor) else list(got)
        outs = [g.new_empty(g.shape) for g in got]
        return outs[0] if outputs == 1 else tuple(outs)

    op = torch.library.custom_op(name, impl, mutates_args=(), schema=_schema(params, outputs))
    op.register_fake(fake)
    return op
