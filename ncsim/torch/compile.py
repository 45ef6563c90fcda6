"""`torch.compile(fn, backend="ncsim")`: every graph Dynamo captures runs on the simulated core.

The backend is registered by name through the `torch_dynamo_backends` entry point of pyproject.toml
(torch's registry, torch/_dynamo/backends/registry.py, reads that group when a backend name is not
one of its own). It is torch's `aot_autograd` with the core ATen decompositions: AOT Autograd
traces the forward and, for training, the backward graph, and hands each to `_compile`, which lowers
it with `ncsim.torch.lower.lower_graph` (the node mapping of `ncsim.torch.lower`). Each call of a
compiled graph runs its program on the simulated NeuronCore and is logged as an ncsim op call
(`ncsim.torch.op_log()`, `last_report()`), named `compiled:N.forward` / `compiled:N.backward`.

A graph holding an op the lowering refuses runs in eager torch instead, with one NcsimFallbackWarning
naming the op and the line of the user's code that used it.
"""

from __future__ import annotations

import itertools
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from ncsim.config import Config
from ncsim.errors import NcsimError
from ncsim.torch import log

_graphs = itertools.count()


class NcsimFallbackWarning(UserWarning):
    """A graph torch.compile gave the ncsim backend runs in eager torch: ncsim cannot lower it."""


def backend(gm: Any, example_inputs: Sequence[Any], config: Config | None = None) -> Callable[..., Any]:
    """The torch.compile backend "ncsim" (a Dynamo backend: an FX graph and its example inputs in, a
    callable out). `functools.partial(backend, config=Config(...))` runs on other hardware parameters."""
    from torch._decomp import core_aten_decompositions
    from torch._dynamo.backends.common import aot_autograd

    n = next(_graphs)
    compile_with = aot_autograd(fw_compiler=_compiler(f"compiled:{n}.forward", config),
                                bw_compiler=_compiler(f"compiled:{n}.backward", config),
                                decompositions=core_aten_decompositions())
    return compile_with(gm, example_inputs)


def _compiler(name: str, config: Config | None) -> Callable[[Any, Sequence[Any]], Callable[..., Any]]:
    def compile_graph(gm: Any, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        return _compile(name, gm, example_inputs, config)
    return compile_graph


def _compile(name: str, gm: Any, example_inputs: Sequence[Any], config: Config | None) -> Callable[..., Any]:
    """One graph of AOT Autograd (core ATen ops; every input a tensor, a tuple out): its lowered
    program as a boxed function (AOT Autograd calls it with the list of inputs), or the graph itself
    in eager torch when ncsim cannot lower it."""
    from torch._functorch.aot_autograd import make_boxed_func

    from ncsim.torch.lower import lower_graph

    try:
        prog = lower_graph(gm, list(example_inputs), name.replace(":", "_").replace(".", "_"), config)
    except NcsimError as e:
        op = getattr(e, "op", None)
        where = f" ({e.loc.file}:{e.loc.line})" if e.loc is not None else ""
        if op and "is not supported" in e.message:  # the op alone says it (the list is supported_ops())
            why = "ncsim.torch.supported_ops() lists the ops it lowers"
        else:
            why = e.message
        what = f"op {op}{where}" if op else f"the graph{where}"
        warnings.warn(NcsimFallbackWarning(f"ncsim cannot lower {what}: {name} runs in eager torch; {why}"),
                      stacklevel=2)
        return make_boxed_func(gm.forward)

    def run(args: list[Any]) -> list[Any]:
        tensors = list(args)
        args.clear()  # the boxed convention: the inputs are ours to free
        start = time.perf_counter()
        r = prog.run(*tensors)
        seconds = time.perf_counter() - start
        log.record(log.OpCall(name, prog.name, tuple(tuple(t.shape) for t in tensors), r.report.total_ns,
                              r.instructions, r.report.verdict.text, seconds, r.report))
        outs = iter(r.outputs)
        return [next(outs) if present else None for present in prog.graph_outputs]

    run._boxed_call = True  # type: ignore[attr-defined]
    run.program = prog  # type: ignore[attr-defined]
    return run
