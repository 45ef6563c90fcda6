"""torch functions lowered to ncsim programs through the NKI front end (docs/torch.md, 'Lowering').

`lower(fn, *example_inputs)` exports `fn` with `torch.export.export`, decomposes the graph to core
ATen (`ExportedProgram.run_decompositions()`), and turns every node into calls of `ncsim.nki`'s
language (`nl.load`, `nl.store`, `nl.add`, `nl.exp`, `nl.matmul`, ...) inside one NKI kernel, traced
by the NKI tracer into an ncsim program. No second emitter: the engine of each operation is the NKI
front end's engine policy (docs/nki.md).

Every tensor of the graph lives in HBM (the inputs, an HBM scratch tensor per computed node, the
outputs); a view (`slice`, `select`, `permute`, `view`, `expand`, `squeeze`, ...) is an access
pattern on its source, no instruction. A computed node loops over tiles of at most 128 partitions
and free-dimension chunks of at most CHUNK elements: it loads its operands' tiles (DMA), computes
(Vector / Scalar / Tensor engine instructions, one per torch operation, in torch's order: a
multiply and an add are never fused) and stores the tile. Rows of a reduction, softmax or
layer norm are whole rows in one tile.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import math
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ncsim.config import Config
from ncsim.errors import NcsimError
from ncsim.torch.arrays import ncsim_dtype, to_numpy, to_torch

CHUNK = 512  # free-dimension elements per tile of an elementwise operation
MAX_GATHER = 8  # a view reading every k-th element (k <= this) loads the contiguous span and steps in SBUF
MAX_ROW = 8192  # elements of the row a reduction, softmax or layer norm keeps in one tile


class LoweringError(NcsimError):
    """A torch function ncsim cannot lower: the op, the line of the function that used it."""

    op: str | None = None  # the torch op refused ("aten.cumsum.default"), when one op is the reason


# ------------------------------------------------------------------ values while lowering
@dataclass
class Tensor:
    """A tensor of the graph: an HBM view (ncsim.nki View) with torch's logical shape."""

    view: Any
    dtype: Any  # torch dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(c for _, c in self.view.dims)


@dataclass(eq=False)
class Lazy:
    """An elementwise node's value not yet in HBM: its operands and how a tile of it is computed
    (`_Lowering.elementwise`); `tensor` once written."""

    shape: tuple[int, ...]
    dtype: Any
    operands: list[Any]
    compute: Callable[[list[Any], tuple[int, int]], Any]
    name: str
    tensor: Tensor | None = None
    source: tuple[str, int, int, int] | None = None  # the node's place in the user's code (node_place)


def _dims_of(t: Tensor) -> list[tuple[int, int]]:
    return list(t.view.dims)


def _derive(t: Tensor, offset: int, dims: list[tuple[int, int]], dtype: Any = None) -> Tensor:
    v = t.view
    return Tensor(v.derive(0, offset, tuple(dims)), dtype if dtype is not None else t.dtype)


def _broadcast_dims(t: Tensor, shape: tuple[int, ...]) -> list[tuple[int, int]]:
    dims = _dims_of(t)
    dims = [(0, 1)] * (len(shape) - len(dims)) + dims
    return [(s if c == n else 0, n) for (s, c), n in zip(dims, shape)]


def _reshape_dims(dims: list[tuple[int, int]], shape: tuple[int, ...]) -> list[tuple[int, int]] | None:
    """The (step, count) dims of a view reshaped to `shape` without copying, or None when the access
    pattern cannot express it (numpy's rule: each group of old axes merged into new ones must be
    contiguous among itself)."""
    old = [(s, c) for s, c in dims if c != 1]
    new = [n for n in shape]
    out: list[tuple[int, int]] = []
    i = 0
    j = 0
    while j < len(new) or i < len(old):
        if j < len(new) and new[j] == 1:
            out.append((0, 1))
            j += 1
            continue
        if i >= len(old) or j >= len(new):
            return None
        # take old axes until their product equals the product of new axes taken
        oi, nj = [old[i]], [new[j]]
        po, pn = old[i][1], new[j]
        i += 1
        j += 1
        while po != pn:
            if po < pn:
                if i >= len(old):
                    return None
                oi.append(old[i])
                po *= old[i][1]
                i += 1
            else:
                if j >= len(new):
                    return None
                nj.append(new[j])
                pn *= new[j]
                j += 1
        for (s0, _), (s1, c1) in itertools.pairwise(oi):
            if s0 != s1 * c1:
                return None
        step = oi[-1][0]
        group = []
        for n in reversed(nj):
            group.append((step, n))
            step *= n
        out.extend(reversed(group))
    return out if len(out) == len(shape) else None


def _collapse(views: list[list[tuple[int, int]]]) -> list[list[tuple[int, int]]]:
    """Adjacent axes merged where every view allows it (dims of count 1 dropped), as numpy's
    iterator does; the views share their counts."""
    n = len(views[0])
    keep = [d for d in range(n) if views[0][d][1] != 1]
    vs = [[v[d] for d in keep] for v in views]
    if not vs[0]:
        return vs
    out: list[list[tuple[int, int]]] = [[v[0]] for v in vs]
    for d in range(1, len(vs[0])):
        if all(o[-1][0] == v[d][0] * v[d][1] for o, v in zip(out, vs)):
            for o, v in zip(out, vs):
                o[-1] = (v[d][0], o[-1][1] * v[d][1])
        else:
            for o, v in zip(out, vs):
                o.append(v[d])
    return out


def _split_rows(views: list[list[tuple[int, int]]]) -> list[list[tuple[int, int]]]:
    """At least two axes: a single axis of N is split into [p, N / p] (p the largest divisor of N
    up to 128) so that its elements spread over partitions."""
    if not views[0]:
        return [[(0, 1), (0, 1)] for _ in views]
    if len(views[0]) > 1:
        return views
    n = views[0][0][1]
    p = max(d for d in range(1, min(128, n) + 1) if n % d == 0)
    return [[(s * (n // p), p), (s, n // p)] for [(s, _)] in views]


# ------------------------------------------------------------------ the program
@dataclass
class LoweredRun:
    """One run of a lowered program: torch outputs, ncsim's report (`.format()`, `.verdict`)."""

    outputs: list[Any]
    nki_run: Any = field(repr=False)

    @property
    def report(self) -> Any:
        return self.nki_run.report

    @property
    def latency_us(self) -> float:
        return self.nki_run.latency_us

    @property
    def instructions(self) -> int:
        return self.nki_run.result.instructions


class Lowered:
    """A torch function lowered to an ncsim program: `str(p)` / `p.asm()` is its `.s`, `p(*tensors)`
    runs it on the simulated core and returns torch tensors, `p.run(*tensors)` also the report."""

    def __init__(self, fn: Any, exported: Any, kernel: Callable[..., Any], input_names: list[str],
                 example: list[Any], constants: list[np.ndarray], config: Config):
        self.fn = fn
        self.exported = exported
        self.kernel = kernel
        self.input_names = input_names
        self.example = example
        self.constants = constants
        self.config = config
        self.last: LoweredRun | None = None
        self._asm: str | None = None

    @property
    def name(self) -> str:
        return self.kernel.__name__

    def _arrays(self, tensors: tuple[Any, ...]) -> list[np.ndarray]:
        if len(tensors) != len(self.example):
            raise LoweringError(f"{self.name} was lowered for {len(self.example)} inputs, called with {len(tensors)}")
        arrays = []
        for i, (t, ex) in enumerate(zip(tensors, self.example)):
            if tuple(t.shape) != tuple(ex.shape) or t.dtype != ex.dtype:
                raise LoweringError(f"{self.name}: input {i} ({self.input_names[i]}) is {t.dtype}{list(t.shape)};"
                                    f" the program was lowered for {ex.dtype}{list(ex.shape)}: lower it again")
            arrays.append(np.atleast_1d(to_numpy(t)))  # a 0-d tensor as one element
        return arrays + self.constants

    def run(self, *tensors: Any, values: bool = True) -> LoweredRun:
        """Run the program on these tensors (the shapes and dtypes it was lowered for)."""
        from ncsim import nki

        arrays = self._arrays(tensors)
        r = nki.simulate(self.kernel, tuple(arrays), {}, values=values, config=self.config)
        outs = r.outputs if isinstance(r.outputs, (tuple, list)) else [r.outputs]
        got = [to_torch(o, dtype).reshape(shape) for o, (shape, dtype) in zip(outs, self.output_specs)] if values else []
        self.last = LoweredRun(got, r)
        return self.last

    def __call__(self, *tensors: Any) -> Any:
        out = self.run(*tensors).outputs
        return out[0] if self.single else tuple(out)

    def asm(self) -> str:
        """The program as ncsim assembly (the NKI front end's emit path: `ncsim asm` assembles it)."""
        if self._asm is None:
            from ncsim import nki
            from ncsim.nki.emit import asm_text
            from ncsim.nki.typing import Placeholder

            args = [Placeholder(tuple(ex.shape) or (1,), _nc(ex.dtype)) for ex in self.example] + self.constants
            self._asm = asm_text(nki.simulate(self.kernel, tuple(args), {}, values=False, config=self.config))
        return self._asm

    def __str__(self) -> str:
        return self.asm()

    def save(self, path: Any) -> None:
        from pathlib import Path

        Path(path).write_text(self.asm())

    output_specs: list[Any]
    single: bool
    graph_outputs: list[bool]  # per output of the graph: a tensor the program gives (False: None)


def _torch() -> Any:
    from ncsim.torch import require_torch

    return require_torch()


# ------------------------------------------------------------------ lowering
_SUPPORTED: dict[str, Callable[..., Any]] = {}
_FUSABLE: set[Callable[..., Any]] = set()  # handlers whose operands may be Lazy (elementwise nodes)


def _op(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def reg(f: Callable[..., Any]) -> Callable[..., Any]:
        for n in names:
            _SUPPORTED[n] = f
        return f
    return reg


def supported_ops() -> list[str]:
    """The core ATen operators ncsim's lowering maps onto the NKI front end's operations."""
    return sorted(_SUPPORTED)


def _op_name(target: Any) -> str:
    if type(target).__name__ == "OpOverload":  # aten.add.Tensor, aten.maximum.default
        return str(target)
    return getattr(target, "__name__", str(target))


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n(.*)')


@functools.cache
def _library_dirs() -> tuple[str, ...]:
    """The folders of ncsim and torch (their frames are no place in the user's code)."""
    import os

    import ncsim

    return tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (ncsim, _torch()))


def node_source(node: Any) -> tuple[str | None, int | None, str]:
    """The file, line and text of the user's code that made an FX node (its stack trace metadata)."""
    trace = node.meta.get("stack_trace") or ""
    # torch leaves out frames of code without a source file (exec); what remains of ncsim or torch is no
    # place of the user's
    frames = [f for f in _FRAME.findall(trace) if not f[0].startswith(_library_dirs())]
    if not frames:
        return None, None, ""
    file, line, _fn, text = frames[-1]
    return file, int(line), text.strip()


def node_place(node: Any) -> tuple[str, int, int, int] | None:
    """The (file, line, column, length) of the user's code that made an FX node, for the place of
    its instructions (`Tracer.source`: their `.loc`, errors, the trace and the report)."""
    import linecache

    file, line, text = node_source(node)
    if file is None or line is None:
        return None
    raw = linecache.getline(file, line)
    col = len(raw) - len(raw.lstrip()) + 1 if raw.strip() else 1
    return file, line, col, max(len(text), 1)


def _at(source: tuple[str, int, int, int] | None) -> Any:
    """The NKI tracer's source(...) context for a node's place, or nothing when the node has none."""
    if source is None:
        return contextlib.nullcontext()
    from ncsim.nki.tracer import current

    return current().source(*source)


def _fail(node: Any, message: str) -> LoweringError:
    from ncsim.errors import SourceLoc

    file, line, text = node_source(node)
    loc = SourceLoc(file, line, 1, text, max(len(text), 1)) if file is not None and line is not None else None
    err = LoweringError(message, loc)
    err.op = _op_name(node.target) if node.op == "call_function" else None
    return err


def lower(fn: Any, *example_inputs: Any, config: Config | None = None) -> Lowered:
    """Lower `fn` (a function of tensors, or an nn.Module) for inputs shaped like `example_inputs`:
    torch.export, core ATen decompositions, one NKI kernel of ncsim.nki operations (see the module
    docstring). Raises LoweringError at fn's line for an op ncsim does not lower."""
    torch = _torch()
    module = fn if isinstance(fn, torch.nn.Module) else _Wrap(fn)
    with outside_modes(), warnings.catch_warnings():
        # torch 2.13's own export deprecates a check it makes itself; the user can do nothing about it
        warnings.filterwarnings("ignore", r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning)
        try:
            ep = torch.export.export(module, tuple(example_inputs), strict=True)  # strict: stack traces reach fn
        except Exception as e:  # noqa: BLE001  (torch's own message says what export could not trace)
            raise LoweringError(f"torch.export could not export {_fname(fn)}: {type(e).__name__}: {e}") from None
        ep = ep.run_decompositions()
        return _build(fn, ep, list(example_inputs), config or Config())


_PRISTINE: list[Any] = []  # the dispatch key sets a thread starts with (outside_modes)


@contextlib.contextmanager
def outside_modes() -> Iterator[None]:
    """Run the body as at the top of a fresh thread: no torch dispatch mode (FakeTensorMode,
    SchemaCheckMode, ...) active and the thread's dispatch key sets as a new thread has them.
    A custom op's implementation runs below the dispatcher's keys it was reached through (opcheck's
    test_schema reaches it from inside SchemaCheckMode with the Python and functionalisation keys
    excluded): torch.export traced there does not see the function's operations, and its graph
    returns a lifted constant (a FakeTensor) instead."""
    import threading

    from torch.utils._python_dispatch import _disable_current_modes

    torch = _torch()
    if not _PRISTINE:
        def read() -> None:
            _PRISTINE[:] = [torch._C._dispatch_tls_local_include_set(), torch._C._dispatch_tls_local_exclude_set()]
        t = threading.Thread(target=read)
        t.start()
        t.join()
    with _disable_current_modes(), torch._C._ForceDispatchKeyGuard(*_PRISTINE):
        yield


def _fname(fn: Any) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


class _Wrap:  # replaced by a torch.nn.Module subclass on first use (torch is imported lazily)
    def __new__(cls, fn: Any) -> Any:
        torch = _torch()

        class Wrapped(torch.nn.Module):
            def __init__(self, f: Any):
                super().__init__()
                self.f = f

            def forward(self, *args: Any) -> Any:
                return self.f(*args)

        return Wrapped(fn)


def _build(fn: Any, ep: Any, example: list[Any], config: Config) -> Lowered:
    """The Lowered program of an ExportedProgram (its parameters, buffers and constants are
    constants of the program)."""
    from torch.export.graph_signature import InputKind

    torch = _torch()
    nodes = list(ep.graph_module.graph.nodes)
    _check_nodes(nodes)
    specs = {s.arg.name: s for s in ep.graph_signature.input_specs}
    user_nodes, const_nodes = [], []
    for node in nodes:
        if node.op != "placeholder":
            continue
        spec = specs[node.name]
        if spec.kind == InputKind.USER_INPUT:
            user_nodes.append(node)
            continue
        if spec.kind == InputKind.PARAMETER or spec.kind == InputKind.BUFFER:
            value = ep.state_dict.get(spec.target) if spec.target in ep.state_dict else ep.constants[spec.target]
        else:
            value = ep.constants[spec.target]
        const_nodes.append((node, value))
    if len(user_nodes) != len(example):
        raise LoweringError(f"{_fname(fn)}: {len(example)} example inputs, but the exported graph takes"
                            f" {len(user_nodes)} tensors (only tensor arguments are supported)")
    try:
        pnames = [p for p in inspect.signature(fn.forward if isinstance(fn, torch.nn.Module) else fn).parameters]
    except (TypeError, ValueError):
        pnames = []
    names = [p if len(pnames) == len(example) and p.isidentifier() else f"in{i}" for i, p in enumerate(pnames
             if len(pnames) == len(example) else range(len(example)))]
    prog = _build_graph(fn, _fname(fn), nodes, user_nodes, const_nodes, names, example, config,
                        ep.call_spec.out_spec.is_leaf())
    prog.exported = ep
    return prog


def lower_graph(gm: Any, example_inputs: list[Any], name: str = "graph", config: Config | None = None) -> Lowered:
    """Lower an FX GraphModule of core ATen ops (what torch.compile's aot_autograd hands a backend:
    every placeholder a tensor input, the output a tuple) with the same node mapping as `lower`.
    `example_inputs` give the shapes and dtypes (fake tensors will do). The program returns the
    graph's tensor outputs in order (an output that is None in the graph is left out:
    `Lowered.graph_outputs` tells where they go)."""
    nodes = list(gm.graph.nodes)
    _check_nodes(nodes)
    user_nodes = [n for n in nodes if n.op == "placeholder"]
    const_nodes = []
    for node in nodes:
        if node.op == "get_attr":
            value = getattr(gm, node.target)
            const_nodes.append((node, value))
        elif node.op == "call_module":
            raise _fail(node, f"a call of the submodule {node.target}: ncsim lowers graphs of ATen ops")
    if len(user_nodes) != len(example_inputs):
        raise LoweringError(f"{name}: {len(example_inputs)} example inputs for a graph of {len(user_nodes)} inputs")
    for node, ex in zip(user_nodes, example_inputs):
        if not hasattr(ex, "shape") or not all(isinstance(d, int) for d in ex.shape):
            raise LoweringError(f"{name}: input {node.name} is {ex!r}: ncsim lowers tensors of static shapes")
    names = [re.sub(r"\W", "_", n.name) for n in user_nodes]
    example = [_Spec(tuple(int(d) for d in ex.shape), ex.dtype) for ex in example_inputs]
    return _build_graph(gm, name, nodes, user_nodes, const_nodes, names, example, config or Config(), False)


@dataclass(frozen=True)
class _Spec:
    """The shape and dtype of an input (what a fake example tensor tells)."""

    shape: tuple[int, ...]
    dtype: Any


def _check_nodes(nodes: list[Any]) -> None:
    """Fail early, at the user's line, for any op not lowered or dtype not taken (before tracing)."""
    torch = _torch()
    for node in nodes:
        if node.op == "call_function" and node.target is not _getitem() and _op_name(node.target) not in _SUPPORTED:
            name = _op_name(node.target)
            raise _fail(node, f"torch op {name} is not supported by ncsim's lowering;"
                              f" ncsim.torch.supported_ops() lists those it is: {', '.join(supported_ops())}")
        if node.op == "call_function":
            _check_dtype(node, torch)


def _build_graph(fn: Any, fname: str, nodes: list[Any], user_nodes: list[Any], const_nodes: list[tuple[Any, Any]],
                 names: list[str], example: list[Any], config: Config, single: bool) -> Lowered:
    """The one node mapping of `lower` and `lower_graph`: an NKI kernel whose arguments are the user
    inputs then the tensor constants, traced now."""
    tensor_consts = [(n, v) for n, v in const_nodes if v.numel() != 1 or v.dim() != 0]
    scalar_consts = {n.name: _scalar(v) for n, v in const_nodes if v.numel() == 1 and v.dim() == 0}
    names = list(names)
    for n, _ in tensor_consts:
        names.append(re.sub(r"\W", "_", n.name))
    constants = [np.atleast_1d(to_numpy(v)) for _, v in tensor_consts]
    out_node = next(n for n in nodes if n.op == "output")
    outs = out_node.args[0]
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    graph_outputs = [o is not None for o in outs]
    outs = [o for o in outs if o is not None]
    for o in outs:
        if not hasattr(o, "meta"):
            raise LoweringError(f"{fname}: the graph returns {o!r}, not a tensor: ncsim lowers graphs of tensors")

    def kernel(*args: Any) -> Any:
        from ncsim.nki.tensor import View  # noqa: F401  (kernel arguments arrive as Views)

        env: dict[str, Any] = {}
        for (node, val), a in zip([(n, n.meta["val"]) for n in user_nodes] + tensor_consts, args):
            v = a if tuple(val.shape) == tuple(a.shape) else a.reshape(tuple(val.shape) or ())
            env[node.name] = Tensor(v, val.dtype)
        env.update(scalar_consts)
        low = _Lowering(env, outs, config)
        for node in nodes:
            if node.op != "call_function":
                continue
            low.node = node
            low.source = node_place(node)
            if node.target is _getitem():
                env[node.name] = env[node.args[0].name][node.args[1]]
                continue
            handler = _SUPPORTED[_op_name(node.target)]
            args_ = [low.arg(a) for a in node.args]
            kwargs = {k: low.arg(v) for k, v in node.kwargs.items()}
            with _at(low.source):  # the node's instructions at the user's line (Lazy ones: region_into)
                if handler not in _FUSABLE:  # a Lazy operand of another kind of op is written to HBM first
                    args_ = [low.materialise(a) for a in args_]
                    kwargs = {k: low.materialise(v) for k, v in kwargs.items()}
                env[node.name] = handler(low, *args_, **kwargs)
        results = []
        for i, o in enumerate(outs):
            low.source = node_place(o) if hasattr(o, "meta") else None
            with _at(low.source):
                results.append(low.output(o, i))
        return tuple(results)

    kernel.__name__ = kernel.__qualname__ = fname if fname.isidentifier() else "lowered"
    kernel.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])
    prog = Lowered(fn, None, kernel, names[:len(example)], example, constants, config)
    prog.output_specs = [(tuple(o.meta["val"].shape), o.meta["val"].dtype) for o in outs]
    prog.single = single
    prog.graph_outputs = graph_outputs
    prog.asm()  # traced now: what the lowering refuses fails here, at lowering time
    return prog


def _getitem() -> Any:
    import operator

    return operator.getitem


def _scalar(v: Any) -> float | int | bool:
    return v.item()


_DTYPES = ("float32", "float16", "bfloat16", "bool")


def _check_dtype(node: Any, torch: Any) -> None:
    vals = node.meta.get("val")
    for v in vals if isinstance(vals, (tuple, list)) else [vals]:
        if isinstance(v, torch.Tensor) and str(v.dtype).removeprefix("torch.") not in _DTYPES:
            raise _fail(node, f"torch op {_op_name(node.target)} gives a {str(v.dtype).removeprefix('torch.')}"
                              f" tensor; ncsim's lowering takes {', '.join(_DTYPES)}")


def _nl() -> Any:
    from ncsim.nki import language

    return language


def _nisa() -> Any:
    from ncsim.nki import isa

    return isa


@functools.cache
def _nc(dtype: Any) -> Any:
    """The NKI dtype (numpy's) of a torch dtype of _DTYPES."""
    from ncsim.nki.tensor import numpy_dtype

    assert str(dtype).removeprefix("torch.") in _DTYPES, dtype  # _check_dtype refused the others
    return numpy_dtype(ncsim_dtype(dtype))


class _Lowering:
    """The state of one trace: the graph's values, and the helpers the op table uses."""

    def __init__(self, env: dict[str, Any], outs: list[Any], config: Config):
        self.env = env
        self.config = config
        self.node: Any = None
        self.source: tuple[str, int, int, int] | None = None  # node_place of the node being lowered
        # a node whose value is a graph output gets its result straight in an output tensor (once)
        self.out_of: dict[str, int] = {}
        for i, o in enumerate(outs):
            if hasattr(o, "name") and o.name not in self.out_of:
                self.out_of[o.name] = i
        self.outputs: dict[int, Tensor] = {}

    def arg(self, a: Any) -> Any:
        from torch.fx import Node

        if isinstance(a, Node):
            return self.env[a.name]
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        return a

    def fail(self, message: str) -> LoweringError:
        return _fail(self.node, f"torch op {_op_name(self.node.target)}: {message}")

    @property
    def val(self) -> Any:
        return self.node.meta["val"]

    # ---------------------------------------------------------------- tensors
    def new(self, shape: tuple[int, ...], dtype: Any) -> Tensor:
        """The HBM tensor a computed node writes: an output tensor when the node is a graph output
        (and not a view of something else), else scratch."""
        nl = _nl()
        shp = tuple(shape) or (1,)
        val = self.val[0] if isinstance(self.val, (tuple, list)) else self.val
        i = self.out_of.get(self.node.name) if tuple(val.shape) == tuple(shape) else None
        if i is not None and i not in self.outputs:
            v = nl.ndarray(shp, _nc(dtype), buffer=nl.shared_hbm)
            t = Tensor(v, dtype)
            self.outputs[i] = t
        else:
            t = Tensor(nl.ndarray(shp, _nc(dtype), buffer=nl.hbm, name=self.node.name), dtype)
        if not shape:
            t = _derive(t, t.view.offset, [])
        return t

    def output(self, o: Any, i: int) -> Any:
        """The i-th output of the kernel: the tensor written for it, or a copy of a view / input."""
        nl = _nl()
        if i in self.outputs and self.outputs[i].view.buf.stored:
            return self.outputs[i].view
        val = self.env[o.name] if hasattr(o, "name") else o
        if isinstance(val, Lazy) and val.tensor is not None and val.tensor.view.buf.entry.kind != "scratch":
            return val.tensor.view
        shape = tuple(o.meta["val"].shape)
        dtype = o.meta["val"].dtype
        out = Tensor(nl.ndarray(shape or (1,), _nc(dtype), buffer=nl.shared_hbm), dtype)
        dst = out if shape else _derive(out, 0, [])
        self.elementwise_into(dst, [val], lambda t, _s: t[0], dtype)
        return out.view

    # ---------------------------------------------------------------- elementwise
    def elementwise(self, operands: list[Any], compute: Callable[[list[Any], tuple[int, int]], Any],
                    shape: tuple[int, ...] | None = None, dtype: Any = None) -> Any:
        """The node's value computed tile by tile from the operands (Tensors broadcast to the result's
        shape, Lazy values of the same shape, or numbers): `compute(tiles, (p, f))` gets per operand a
        [p, f] tile, a [p, 1] column (an operand constant along the chunk), or the number, and returns
        the result tile. The value is Lazy: elementwise nodes of one shape form a region computed in
        one tile loop (each tile of each node once, in graph order), written to HBM only where a
        graph output or another kind of op needs it (materialise)."""
        shape = tuple(self.val.shape) if shape is None else shape
        dtype = self.val.dtype if dtype is None else dtype
        if any(isinstance(o, Tensor) for o in operands) and (
                any(o.dtype.is_floating_point for o in operands if isinstance(o, (Tensor, Lazy)))
                or dtype.is_floating_point):
            # a number with float tensors is a float operand (torch computes it in the tensors' dtype)
            operands = [float(o) if isinstance(o, (int, float)) and not isinstance(o, bool) else o for o in operands]
        elif dtype.is_floating_point:
            operands = [float(o) if isinstance(o, (int, float)) and not isinstance(o, bool) else o for o in operands]
        operands = [self.materialise(o) if isinstance(o, Lazy) and o.shape != shape else o for o in operands]
        lazy = Lazy(shape, dtype, operands, compute, self.node.name, source=self.source)
        if self.node.name in self.out_of:  # a graph output: written now, into its output tensor
            out = self.new(shape, dtype)
            self.region_into(out, lazy)
            lazy.tensor = out
        return lazy

    def materialise(self, v: Any) -> Any:
        """A Lazy value written to an HBM scratch tensor (once); anything else as it is."""
        nl = _nl()
        if isinstance(v, (list, tuple)):
            return type(v)(self.materialise(x) for x in v)
        if not isinstance(v, Lazy):
            return v
        if v.tensor is None:
            t = Tensor(nl.ndarray(v.shape or (1,), _nc(v.dtype), buffer=nl.hbm, name=v.name), v.dtype)
            if not v.shape:
                t = _derive(t, 0, [])
            self.region_into(t, v)
            v.tensor = t
        return v.tensor

    def elementwise_into(self, out: Tensor, operands: list[Any], compute: Callable[..., Any], dtype: Any) -> None:
        self.region_into(out, Lazy(out.shape, dtype, operands, compute, "copy", source=self.source))

    def region_into(self, out: Tensor, root: Lazy) -> None:
        """One tile loop writing `root` into `out`: the HBM tensors it reads (through the Lazy values
        it depends on) are loaded once per tile, every Lazy value computed once per tile (at its
        node's line), the loads and stores at the line of root's node."""
        with _at(root.source or self.source):
            self._region_into(out, root)

    def _region_into(self, out: Tensor, root: Lazy) -> None:
        nl = _nl()
        shape = out.shape
        leaves: list[Tensor] = []
        seen: set[int] = set()

        def gather(v: Lazy) -> None:
            for o in v.operands:
                if isinstance(o, Lazy) and o.tensor is None:
                    gather(o)
                elif isinstance(o, (Tensor, Lazy)):
                    t = o if isinstance(o, Tensor) else o.tensor
                    if id(t) not in seen:
                        seen.add(id(t))
                        leaves.append(t)
        gather(root)
        dims = [_dims_of(out)] + [_broadcast_dims(t, shape) for t in leaves]
        offsets = [out.view.offset] + [t.view.offset for t in leaves]
        views = [out.view] + [t.view for t in leaves]
        coll = _split_rows(_collapse(dims))
        counts = [c for _, c in coll[0]]
        # the partition axis: the largest of all but the last axis
        pa = max(range(len(counts) - 1), key=lambda d: counts[d])
        lead = [d for d in range(len(counts) - 1) if d != pa]
        rows, cols = counts[pa], counts[-1]
        index = {id(t): k for k, t in enumerate(leaves, start=1)}
        full = any(coll[k][-1][0] != 0 for k in range(1, len(views)))
        for idx in itertools.product(*(range(counts[d]) for d in lead)):
            base = [off + sum(i * coll[k][d][0] for i, d in zip(idx, lead)) for k, off in enumerate(offsets)]
            for r0 in range(0, rows, 128):
                p = min(128, rows - r0)
                for c0 in range(0, cols, CHUNK):
                    f = min(CHUNK, cols - c0)
                    st = _TileLoop(p, f, [b + r0 * coll[k][pa][0] + c0 * coll[k][-1][0]
                                          for k, b in enumerate(base)], coll, pa, views, index, full)
                    res = st.tile(root)
                    if not hasattr(res, "shape"):
                        res = nl.full((p, f), res, _nc(root.dtype))
                    elif tuple(res.shape) != (p, f):
                        res = nl.copy(nl.broadcast_to(res, (p, f)))
                    rs, cs = coll[0][pa][0], coll[0][-1][0]
                    nl.store(views[0].derive(0, base[0] + r0 * rs + c0 * cs, ((rs, p), (cs, f))), res)

    # ---------------------------------------------------------------- rows (reductions, softmax, norms)
    def rows(self, x: Tensor, ndims: int, outs: list[tuple[Tensor, int]],
             compute: Callable[[Any, tuple[int, int]], list[Any]]) -> None:
        """Loop over the rows of x (its last `ndims` axes merged into one row, kept whole in a tile):
        `compute(tile [p, n], (p, n))` gives one tile per output; outs are (tensor, its row length:
        n, or 1 for a per-row value) with x's leading axes."""
        nl = _nl()
        if ndims == 0:
            raise self.fail("a reduction over no axes")
        xd = _dims_of(x)
        lead_n = len(xd) - ndims
        row = _collapse([xd[lead_n:]])[0] or [(1, 1)]
        if len(row) > 1:  # the row's axes do not merge: a contiguous copy first
            x = self.contiguous(x)
            xd = _dims_of(x)
            row = _collapse([xd[lead_n:]])[0]
        n = row[0][1]
        if n > MAX_ROW:
            raise self.fail(f"a row of {n} elements; ncsim's lowering keeps a row in one tile, at most {MAX_ROW}")
        lead_dims = [xd[:lead_n]] + [_dims_of(o)[:lead_n] for o, _ in outs]
        lead_shape = tuple(c for _, c in xd[:lead_n])
        for (o, _), d in zip(outs, lead_dims[1:]):
            if len(d) != lead_n:
                raise self.fail("internal: an output without the input's leading axes")
        coll = _collapse(lead_dims) if lead_shape else [[] for _ in lead_dims]
        if not coll[0]:
            coll = [[(0, 1)] for _ in lead_dims]
        counts = [c for _, c in coll[0]]
        pa = max(range(len(counts)), key=lambda d: counts[d])
        lead = [d for d in range(len(counts)) if d != pa]
        last_steps = [row[0][0]] + [_dims_of(o)[-1][0] if len(_dims_of(o)) > lead_n else 0 for o, _ in outs]
        offsets = [x.view.offset] + [o.view.offset for o, _ in outs]
        views = [x.view] + [o.view for o, _ in outs]
        for idx in itertools.product(*(range(counts[d]) for d in lead)):
            base = [off + sum(i * coll[k][d][0] for i, d in zip(idx, lead)) for k, off in enumerate(offsets)]
            for r0 in range(0, counts[pa], 128):
                p = min(128, counts[pa] - r0)
                tile = nl.load(views[0].derive(0, base[0] + r0 * coll[0][pa][0],
                                               ((coll[0][pa][0], p), (last_steps[0], n))))
                results = compute(tile, (p, n))
                for k, ((o, length), res) in enumerate(zip(outs, results), start=1):
                    dst = views[k].derive(0, base[k] + r0 * coll[k][pa][0],
                                          ((coll[k][pa][0], p), (last_steps[k], length)))
                    nl.store(dst, res)

    def contiguous(self, x: Tensor) -> Tensor:
        """A row-major copy of x in HBM scratch."""
        nl = _nl()
        shp = x.shape
        t = Tensor(nl.ndarray(shp or (1,), _nc(x.dtype), buffer=nl.hbm, name=self.node.name + "_c"), x.dtype)
        if not shp:
            t = _derive(t, 0, [])
        self.elementwise_into(t, [x], lambda ts, _s: ts[0], x.dtype)
        return t


class _TileLoop:
    """One tile of a region (region_into): its leaves loaded once, its Lazy values computed once."""

    def __init__(self, p: int, f: int, offs: list[int], coll: list[list[tuple[int, int]]], pa: int,
                 views: list[Any], index: dict[int, int], full: bool):
        self.p, self.f, self.offs, self.coll, self.pa = p, f, offs, coll, pa
        self.views, self.index, self.full = views, index, full
        self.loaded: dict[int, Any] = {}
        self.done: dict[int, Any] = {}
        self.spans: dict[tuple[int, int, int, int], Any] = {}

    def tile(self, o: Any) -> Any:
        nl = _nl()
        p, f = self.p, self.f
        if isinstance(o, Lazy) and o.tensor is None:
            if id(o) not in self.done:
                tiles = [self.tile(x) for x in o.operands]
                with _at(o.source):  # its instructions at its own node's line
                    self.done[id(o)] = o.compute(tiles, (p, f))
            return self.done[id(o)]
        if not isinstance(o, (Tensor, Lazy)):
            return o
        k = self.index[id(o if isinstance(o, Tensor) else o.tensor)]
        if k in self.loaded:
            return self.loaded[k]
        rs, cs = self.coll[k][self.pa][0], self.coll[k][-1][0]
        off, view = self.offs[k], self.views[k]
        start = off - off % cs if 1 < cs <= MAX_GATHER else -1
        if cs == 0 and self.full:  # constant along the chunk: a [p, 1] column
            t = nl.load(view.derive(0, off, ((rs, p), (0, 1))))
        elif start >= 0 and start + f * cs <= view.buf.extent()[1]:
            # every cs-th element (boxes[..., 0::4]): the contiguous span is loaded once for all the
            # views into it (the four corners) and read with a step in SBUF
            key = (id(view.buf), rs, cs, start)
            if key not in self.spans:
                self.spans[key] = nl.load(view.derive(0, start, ((rs, p), (1, f * cs))))
            t = self.spans[key][:, off % cs::cs]
        else:
            t = nl.load(view.derive(0, off, ((rs, p), (cs, f))))
        self.loaded[k] = t
        return t


def _reduce_axes(x: Tensor, dims: Any) -> list[int]:
    """The axes a reduction over `dims` covers, sorted (None or [] is all of them)."""
    nd = len(x.shape)
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        dims = list(range(nd))
    return sorted({(d + nd) % nd for d in (dims if isinstance(dims, (list, tuple)) else [dims])}) if nd else []


def _keep(out: Tensor, x: Tensor, k: int) -> Tensor:
    """The reduced output viewed with x's leading axes and one trailing axis of 1 (for storing rows)."""
    lead = len(x.shape) - k
    d = _dims_of(out)[:lead]
    return _derive(out, out.view.offset, d + [(1, 1)])


# ------------------------------------------------------------------ views: no instruction
@_op("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
def _view(low: _Lowering, x: Tensor, shape: Any) -> Tensor:
    target = tuple(low.val.shape)
    dims = _reshape_dims(_dims_of(x), target)
    if dims is None:
        x = low.contiguous(x)
        dims = _reshape_dims(_dims_of(x), target)
    return _derive(x, x.view.offset, dims)


@_op("aten.permute.default")
def _permute(low: _Lowering, x: Tensor, order: Any) -> Tensor:
    d = _dims_of(x)
    return _derive(x, x.view.offset, [d[(i + len(d)) % len(d)] for i in order])


@_op("aten.t.default")
def _t(low: _Lowering, x: Tensor) -> Tensor:
    d = _dims_of(x)
    return _derive(x, x.view.offset, list(reversed(d)))


@_op("aten.transpose.int")
def _transpose(low: _Lowering, x: Tensor, a: int, b: int) -> Tensor:
    d = _dims_of(x)
    a, b = a % len(d), b % len(d)
    d[a], d[b] = d[b], d[a]
    return _derive(x, x.view.offset, d)


@_op("aten.slice.Tensor")
def _slice(low: _Lowering, x: Tensor, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> Tensor:
    d = _dims_of(x)
    dim %= len(d)
    s, c = d[dim]
    lo, hi, st = slice(start, end, step).indices(c)
    n = len(range(lo, hi, st))
    d[dim] = (s * st, n)
    return _derive(x, x.view.offset + s * lo, d)


@_op("aten.select.int")
def _select(low: _Lowering, x: Tensor, dim: int, index: int) -> Tensor:
    d = _dims_of(x)
    dim %= len(d)
    s, c = d[dim]
    index %= c
    return _derive(x, x.view.offset + s * index, d[:dim] + d[dim + 1:])


@_op("aten.squeeze.dims", "aten.squeeze.dim", "aten.squeeze.default")
def _squeeze(low: _Lowering, x: Tensor, dims: Any = None) -> Tensor:
    d = _dims_of(x)
    if dims is None:
        keep = [i for i, (_, c) in enumerate(d) if c != 1]
    else:
        drop = {(k + len(d)) % len(d) for k in (dims if isinstance(dims, (list, tuple)) else [dims])}
        keep = [i for i in range(len(d)) if not (i in drop and d[i][1] == 1)]
    return _derive(x, x.view.offset, [d[i] for i in keep])


@_op("aten.unsqueeze.default")
def _unsqueeze(low: _Lowering, x: Tensor, dim: int) -> Tensor:
    d = _dims_of(x)
    dim = dim if dim >= 0 else dim + len(d) + 1
    return _derive(x, x.view.offset, d[:dim] + [(0, 1)] + d[dim:])


@_op("aten.expand.default")
def _expand(low: _Lowering, x: Tensor, shape: Any) -> Tensor:
    target = tuple(low.val.shape)
    return _derive(x, x.view.offset, _broadcast_dims(x, target))


@_op("aten.alias.default", "aten.clone.default", "aten.lift_fresh_copy.default", "aten.detach.default")
def _alias(low: _Lowering, x: Any, **_: Any) -> Any:
    return x  # values of a functional graph never change: a clone can share its source


@_op("aten.split_with_sizes.default", "aten.split.Tensor")
def _split(low: _Lowering, x: Tensor, sizes: Any, dim: int = 0) -> list[Tensor]:
    d = _dims_of(x)
    dim %= len(d)
    s, c = d[dim]
    if isinstance(sizes, int):
        sizes = [min(sizes, c - i) for i in range(0, c, sizes)]
    out, at = [], 0
    for n in sizes:
        dd = list(d)
        dd[dim] = (s, n)
        out.append(_derive(x, x.view.offset + s * at, dd))
        at += n
    return out


@_op("aten.unbind.int")
def _unbind(low: _Lowering, x: Tensor, dim: int = 0) -> list[Tensor]:
    d = _dims_of(x)
    dim %= len(d)
    s, c = d[dim]
    return [_derive(x, x.view.offset + s * i, d[:dim] + d[dim + 1:]) for i in range(c)]


# ------------------------------------------------------------------ elementwise: Vector (ALU) and Scalar (activation)
_BEFORE_ELEMENTWISE = set(_SUPPORTED)

def _binary(op: str, swap: bool = False) -> Callable[..., Any]:
    def lower_binary(low: _Lowering, a: Any, b: Any, *, alpha: Any = 1, **_: Any) -> Tensor:
        nl = _nl()
        dt = _nc(low.val.dtype)
        if alpha != 1:
            if not isinstance(b, Tensor):
                raise low.fail("alpha with a number: fold it into the number")
            scale = alpha

            def compute(t: list[Any], _s: Any) -> Any:
                x, y = (t[1], t[0]) if swap else (t[0], t[1])
                return getattr(nl, op)(x, nl.multiply(y, scale, dtype=dt), dtype=dt)
            return low.elementwise([a, b], compute)
        return low.elementwise([a, b], lambda t, _s: getattr(nl, op)(*((t[1], t[0]) if swap else (t[0], t[1])),
                                                                      dtype=dt))
    return lower_binary


for _name, _nlop in (("add", "add"), ("sub", "subtract"), ("mul", "multiply"), ("div", "divide")):
    _op(f"aten.{_name}.Tensor", f"aten.{_name}.Scalar")(_binary(_nlop))
_op("aten.rsub.Scalar", "aten.rsub.Tensor")(_binary("subtract", swap=True))
_op("aten.maximum.default")(_binary("maximum"))
_op("aten.minimum.default")(_binary("minimum"))
for _name, _nlop in (("eq", "equal"), ("ne", "not_equal"), ("gt", "greater"), ("ge", "greater_equal"),
                     ("lt", "less"), ("le", "less_equal")):
    _op(f"aten.{_name}.Tensor", f"aten.{_name}.Scalar")(_binary(_nlop))
_op("aten.logical_and.default")(_binary("logical_and"))
_op("aten.logical_or.default")(_binary("logical_or"))
_op("aten.logical_xor.default")(_binary("logical_xor"))


@_op("aten.div.Tensor_mode")
def _div_mode(low: _Lowering, a: Any, b: Any, *, rounding_mode: Any = None) -> Tensor:
    if rounding_mode is not None:
        raise low.fail(f"rounding_mode={rounding_mode!r}: ncsim has no floor or trunc instruction (docs/nki.md, Not yet)")
    return _binary("divide")(low, a, b)


@_op("aten.pow.Tensor_Scalar")
def _pow(low: _Lowering, x: Tensor, e: Any) -> Tensor:
    nl = _nl()
    dt = _nc(low.val.dtype)
    if e == 2:  # torch computes x * x for an exponent of 2
        return low.elementwise([x], lambda t, _s: nl.multiply(t[0], t[0], dtype=dt))
    if e == 0.5:
        return low.elementwise([x], lambda t, _s: nl.sqrt(t[0], dtype=dt))
    if e == -1:
        return low.elementwise([x], lambda t, _s: nl.divide(1.0, t[0], dtype=dt))
    return low.elementwise([x], lambda t, _s: nl.power(t[0], e, dtype=dt))


@_op("aten.neg.default")
def _neg(low: _Lowering, x: Tensor) -> Tensor:
    nl = _nl()
    dt = _nc(low.val.dtype)  # this node's: the lambda runs later, when another node may be current
    return low.elementwise([x], lambda t, _s: nl.negative(t[0], dtype=dt))


@_op("aten.logical_not.default")
def _not(low: _Lowering, x: Tensor) -> Tensor:
    nl = _nl()
    dt = _nc(low.val.dtype)  # this node's: the lambda runs later, when another node may be current
    return low.elementwise([x], lambda t, _s: nl.equal(t[0], 0, dtype=dt))


@_op("aten.relu.default")
def _relu(low: _Lowering, x: Tensor) -> Tensor:
    """torch's relu keeps -0 and NaN (programs/relu_forward.s): zero where x < 0, x elsewhere, by the
    bit-exact predicated copy of nl.where."""
    nl = _nl()
    dt = _nc(low.val.dtype)
    return low.elementwise([x], lambda t, _s: nl.where(nl.less(t[0], 0.0, dtype=np.uint8), 0.0, t[0], dtype=dt))


@_op("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar")
def _where(low: _Lowering, c: Any, x: Any, y: Any) -> Tensor:
    nl = _nl()
    dt = _nc(low.val.dtype)
    return low.elementwise([c, x, y], lambda t, _s: nl.where(t[0], t[1], t[2], dtype=dt))


@_op("aten.clamp.default", "aten.clamp.Tensor", "aten.clamp_min.default", "aten.clamp_max.default",
     "aten.clamp_min.Tensor", "aten.clamp_max.Tensor")
def _clamp(low: _Lowering, x: Tensor, lo: Any = None, hi: Any = None) -> Tensor:
    """max(x, lo) then min(., hi), as torch's clamp (NaN propagates: IEEE maximum/minimum)."""
    nl = _nl()
    dt = _nc(low.val.dtype)
    name = _op_name(low.node.target)
    if name.startswith("aten.clamp_max"):
        lo, hi = None, lo

    def compute(t: list[Any], _s: Any) -> Any:
        r = t[0]
        if t[1] is not None:
            r = nl.maximum(r, t[1], dtype=dt)
        if t[2] is not None:
            r = nl.minimum(r, t[2], dtype=dt)
        return r
    return low.elementwise([x, lo, hi], compute)


def _activation(func: str) -> Callable[..., Any]:
    def lower_activation(low: _Lowering, x: Tensor, **kw: Any) -> Tensor:
        nl = _nl()
        f = func
        if func == "gelu" and kw.get("approximate", "none") == "tanh":
            f = "gelu_apprx_tanh"
        if func == "softplus" and (kw.get("beta", 1) != 1):
            raise low.fail("softplus with beta != 1")
        dt = _nc(low.val.dtype)
        return low.elementwise([x], lambda t, _s: getattr(nl, f)(t[0], dtype=dt))
    return lower_activation


for _name, _f in (("sigmoid", "sigmoid"), ("tanh", "tanh"), ("exp", "exp"), ("log", "log"), ("sqrt", "sqrt"),
                  ("rsqrt", "rsqrt"), ("reciprocal", "reciprocal"), ("erf", "erf"), ("sin", "sin"),
                  ("atan", "arctan"), ("sign", "sign"), ("abs", "abs"), ("gelu", "gelu"), ("silu", "silu"),
                  ("mish", "mish")):
    _op(f"aten.{_name}.default")(_activation(_f))
_op("aten.softplus.default")(_activation("softplus"))


@_op("aten._to_copy.default")
def _to_copy(low: _Lowering, x: Tensor, **kw: Any) -> Tensor:
    nl = _nl()
    dt = _nc(low.val.dtype)
    return low.elementwise([x], lambda t, _s: nl.copy(t[0], dtype=dt))


@_op("aten.full.default", "aten.scalar_tensor.default")
def _full(low: _Lowering, shape: Any, value: Any = None, **kw: Any) -> Tensor:
    if value is None:  # scalar_tensor(value)
        value = shape
    nl = _nl()
    dt = _nc(low.val.dtype)
    return low.elementwise([], lambda _t, s: nl.full(s, value, dt))


_FUSABLE.update(h for n, h in _SUPPORTED.items() if n not in _BEFORE_ELEMENTWISE)
_FUSABLE.add(_alias)


# ------------------------------------------------------------------ rows: reductions, softmax, layer norm
def _reduction(fn: str) -> Callable[..., Any]:
    def lower_reduction(low: _Lowering, x: Tensor, dims: Any = None, keepdim: bool = False, **kw: Any) -> Tensor:
        nl = _nl()
        axes = _reduce_axes(x, dims)
        kept = [d for d in range(len(x.shape)) if d not in axes]
        # the reduced axes moved last (an access pattern: the bias gradient's sum over the batch axis 0
        # reads each column with the row length as its step)
        xd = _dims_of(x)
        x = _derive(x, x.view.offset, [xd[d] for d in kept + axes])
        out = low.new(tuple(low.val.shape), low.val.dtype)
        od = _dims_of(out)
        if keepdim:  # the output's axes of 1 where the reduced axes were, dropped
            od = [od[d] for d in kept]
        dt = _nc(low.val.dtype)
        low.rows(x, len(axes), [(_derive(out, out.view.offset, od + [(1, 1)]), 1)],
                 lambda t, _s: [getattr(nl, fn)(t, axis=1, keepdims=True, dtype=dt)])
        return out
    return lower_reduction


def _keep_squeeze(out: Tensor, x: Tensor, k: int) -> Tensor:
    """keepdim=True: the output's trailing axes of 1 dropped (then _keep adds one back)."""
    d = _dims_of(out)
    return _derive(out, out.view.offset, d[:len(d) - k])


_op("aten.sum.dim_IntList", "aten.sum.default")(_reduction("sum"))
_op("aten.amax.default")(_reduction("max"))
_op("aten.amin.default")(_reduction("min"))
_op("aten.mean.dim", "aten.mean.default")(_reduction("mean"))


@_op("aten._softmax.default")
def _softmax(low: _Lowering, x: Tensor, dim: int, half_to_float: bool = False) -> Tensor:
    nl = _nl()
    nd = len(x.shape)
    if (dim + nd) % nd != nd - 1:
        raise low.fail(f"softmax over axis {dim} of a {nd}-dimensional tensor: ncsim's lowering takes the last axis")
    out = low.new(tuple(low.val.shape), low.val.dtype)
    dt = _nc(low.val.dtype)
    n = x.shape[-1]
    low.rows(x, 1, [(out, n)], lambda t, _s: [nl.softmax(t, axis=1, dtype=dt)])
    return out


@_op("aten._log_softmax.default")
def _log_softmax(low: _Lowering, x: Tensor, dim: int, half_to_float: bool = False) -> Tensor:
    """(x - max) - log(sum(exp(x - max))), torch's order: tensor_reduce maximum negated (Vector), exp
    with that bias and its row sums (Scalar), log of the sums (Scalar), one tensor_scalar that adds
    the negated maximum and subtracts the log (Vector)."""
    nl, nisa = _nl(), _nisa()
    from ncsim.nki.tracer import constant  # noqa: F401

    nd = len(x.shape)
    if (dim + nd) % nd != nd - 1:
        raise low.fail(f"log_softmax over axis {dim} of a {nd}-dimensional tensor: ncsim's lowering takes the last axis")
    out = low.new(tuple(low.val.shape), low.val.dtype)
    dt = _nc(low.val.dtype)

    def compute(t: Any, s: tuple[int, int]) -> list[Any]:
        p, _n = s
        neg_max = nisa.tensor_reduce(np.max, t, axis=1, negate=True, keepdims=True, dtype=np.float32)
        sums = nl.ndarray((p, 1), np.float32)
        e = nisa.activation_reduce(op="exp", data=t, bias=neg_max, reduce_op="add", reduce_res=sums,
                                   dtype=np.float32)
        _place(e)
        logs = nl.log(sums)
        return [nisa.tensor_scalar(t, "add", neg_max, op1="subtract", operand1=logs, dtype=dt)]
    low.rows(x, 1, [(out, x.shape[-1])], compute)
    return out


def _place(v: Any) -> None:
    """Emit a pending result now (its side effect, e.g. the row sums of activation_reduce, is what
    is used)."""
    from ncsim.nki.tracer import current

    if v.pending is not None and v._buf is None:
        current().place(v)


@_op("aten.native_layer_norm.default")
def _layer_norm(low: _Lowering, x: Tensor, shape: Any, w: Any, b: Any, eps: float) -> list[Tensor]:
    """mean (tensor_reduce add, divide), variance (bn_stats / bn_aggr), rstd = rsqrt(var + eps)
    (Vector add, Scalar rsqrt), (x - mean) * rstd in one tensor_scalar (Vector), then * weight and
    + bias (Vector). Outputs (y, mean, rstd) as torch's native_layer_norm."""
    nl, nisa = _nl(), _nisa()
    k = len(shape)
    vals = low.val
    y = low.new(tuple(vals[0].shape), vals[0].dtype)
    mean = Tensor(nl.ndarray(tuple(vals[1].shape) or (1,), np.float32, buffer=nl.hbm, name="mean"), vals[1].dtype)
    rstd = Tensor(nl.ndarray(tuple(vals[2].shape) or (1,), np.float32, buffer=nl.hbm, name="rstd"), vals[2].dtype)
    dt = _nc(vals[0].dtype)
    n = math.prod(x.shape[len(x.shape) - k:])
    wt = [w, b]

    def affine(i: int, p: int) -> Any:
        t = wt[i]
        d = _collapse([_dims_of(t)])[0]
        if len(d) != 1:
            t = low.contiguous(t)
            d = _collapse([_dims_of(t)])[0]
        return nl.load(t.view.derive(0, t.view.offset, ((0, p), (d[0][0], n))))

    def compute(t: Any, s: tuple[int, int]) -> list[Any]:
        p, _n = s
        m = nl.mean(t, axis=1, keepdims=True, dtype=np.float32)
        v = nl.var(t, axis=1, keepdims=True)
        r = nl.rsqrt(nl.add(v, float(eps)))
        yv = nisa.tensor_scalar(t, "subtract", m, op1="multiply", operand1=r, dtype=np.float32 if wt[0] is not None
                                or wt[1] is not None else dt)
        if wt[0] is not None:
            yv = nl.multiply(yv, affine(0, p), dtype=np.float32 if wt[1] is not None else dt)
        if wt[1] is not None:
            yv = nl.add(yv, affine(1, p), dtype=dt)
        return [yv, m, r]
    low.rows(x, k, [(y, n), (_keep(_keep_squeeze(mean, x, k), x, k), 1),
                    (_keep(_keep_squeeze(rstd, x, k), x, k), 1)], compute)
    return [y, mean, rstd]


# ------------------------------------------------------------------ Tensor engine
@_op("aten.mm.default")
def _mm(low: _Lowering, a: Tensor, b: Tensor) -> Tensor:
    return _matmul(low, a, b, None)


@_op("aten.addmm.default")
def _addmm(low: _Lowering, bias: Any, a: Tensor, b: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    if beta != 1 or alpha != 1:
        raise low.fail(f"addmm with beta={beta}, alpha={alpha}: ncsim's lowering takes 1 and 1")
    return _matmul(low, a, b, bias)


def _matmul(low: _Lowering, a: Tensor, b: Tensor, bias: Any) -> Tensor:
    """a [M, K] @ b [K, N] (+ bias): per tile of 128 rows of M and 512 columns of N, a PSUM tile
    accumulates nc_matmul over K in tiles of 128 (`psum += nl.matmul(aT, b, transpose_x=True)`, aT
    loaded transposed by DMA); the bias is added (Vector) as the tile leaves PSUM."""
    nl = _nl()
    (sa0, m), (sa1, kk) = _dims_of(a)
    (sb0, _k), (sb1, n) = _dims_of(b)
    out = low.new((m, n), low.val.dtype)
    dt = _nc(low.val.dtype)
    (so0, _), (so1, _) = _dims_of(out)
    bd = _broadcast_dims(bias, (m, n)) if isinstance(bias, Tensor) else None
    nmax = low.config.gemm_moving_fmax
    for m0 in range(0, m, 128):
        mt = min(128, m - m0)
        for n0 in range(0, n, nmax):
            nt = min(nmax, n - n0)
            acc = nl.zeros((mt, nt), np.float32, buffer=nl.psum)
            for k0 in range(0, kk, 128):
                kt = min(128, kk - k0)
                at = nl.load(a.view.derive(0, a.view.offset + m0 * sa0 + k0 * sa1, ((sa1, kt), (sa0, mt))))
                bt = nl.load(b.view.derive(0, b.view.offset + k0 * sb0 + n0 * sb1, ((sb0, kt), (sb1, nt))))
                acc += nl.matmul(at, bt, transpose_x=True)
            if bd is not None:
                bt = nl.load(bias.view.derive(0, bias.view.offset + m0 * bd[0][0] + n0 * bd[1][0],
                                              ((bd[0][0], mt), (bd[1][0], nt))))
                res = nl.add(acc, bt, dtype=dt)
            elif bias is not None:
                res = nl.add(acc, bias, dtype=dt)
            else:
                res = nl.copy(acc, dtype=dt)
            nl.store(out.view.derive(0, out.view.offset + m0 * so0 + n0 * so1, ((so0, mt), (so1, nt))), res)
    return out


# ------------------------------------------------------------------ validation
@dataclass
class OutputCheck:
    """One output of validate: bit-exact, or how many elements differ and the worst ULP distance."""

    index: int
    shape: tuple[int, ...]
    dtype: str
    differing: int
    worst_ulp: int
    worst_index: tuple[int, ...] | None
    want: Any = field(default=None, repr=False)
    got: Any = field(default=None, repr=False)

    @property
    def bit_exact(self) -> bool:
        return self.differing == 0

    def line(self) -> str:
        head = f"output {self.index} {self.dtype}{list(self.shape)}: "
        if self.bit_exact:
            return head + "bit-exact"
        return (head + f"{self.differing} of {math.prod(self.shape)} elements differ; worst {self.worst_ulp} ulp at"
                f" {list(self.worst_index or ())} (torch {self.want[self.worst_index]!r},"
                f" ncsim {self.got[self.worst_index]!r})")


@dataclass
class Validation:
    """validate's answer: one OutputCheck per output, and the lowered run (report, simulated time)."""

    outputs: list[OutputCheck]
    run: LoweredRun = field(repr=False)

    @property
    def bit_exact(self) -> bool:
        return all(o.bit_exact for o in self.outputs)

    @property
    def worst_ulp(self) -> int:
        return max((o.worst_ulp for o in self.outputs), default=0)

    def format(self) -> str:
        lines = [o.line() for o in self.outputs]
        lines.append(f"simulated {self.run.latency_us:.3f} us, {self.run.instructions} instructions;"
                     f" verdict: {self.run.report.verdict.text}")
        return "\n".join(lines)


def compare(want: Any, got: Any, index: int = 0) -> OutputCheck:
    """Eager torch's tensor against ncsim's, by ncsim.numerics: equal bits (a NaN equals a NaN), else
    the count of differing elements and the worst ULP distance with its index."""
    from ncsim.numerics import ulp_distance

    torch = _torch()
    # a 0-d tensor is compared as one element (numpy cannot reinterpret a 0-d array's bits)
    w = to_numpy(want.reshape(-1)).reshape(tuple(want.shape) or (1,))
    g = to_numpy(got.reshape(-1)).reshape(tuple(got.shape) or (1,))
    dt = ncsim_dtype(want.dtype) if str(want.dtype).removeprefix("torch.") in _DTYPES else None
    if dt is None or tuple(w.shape) != tuple(g.shape):
        raise LoweringError(f"output {index}: torch gives {want.dtype}{list(want.shape)}, ncsim {got.dtype}{list(got.shape)}")
    if dt.kind == "bool":
        dist = (w != g).astype(np.int64)
    else:
        dist = ulp_distance(w.view(dt.storage) if w.dtype != dt.storage else w,
                            g.view(dt.storage) if g.dtype != dt.storage else g, dt)
        nan_w, nan_g = np.isnan(w.astype(np.float32)), np.isnan(g.astype(np.float32))
        same = (w.view(np.uint8).reshape(w.shape + (-1,)) == g.view(np.uint8).reshape(g.shape + (-1,))).all(-1)
        dist = np.where(same | (nan_w & nan_g), 0, np.maximum(dist, 1))  # -0 and +0 differ by one
    differing = int(np.count_nonzero(dist))
    worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(dist)), dist.shape)) if differing else None
    _ = torch
    return OutputCheck(index, tuple(w.shape), str(want.dtype).removeprefix("torch."), differing,
                       int(dist.max()) if differing else 0, worst, w, g)


def validate(fn: Any, *inputs: Any, config: Config | None = None, program: Lowered | None = None) -> Validation:
    """Run eager torch and the lowered program on `inputs`; per output, bit-exact or the count of
    differing elements and the worst ULP distance with its index (docs/torch.md)."""
    torch = _torch()
    prog = program or lower(fn, *inputs, config=config)
    with torch.no_grad():
        want = fn(*inputs)
    wants = [want] if isinstance(want, torch.Tensor) else list(want)
    r = prog.run(*inputs)
    if len(wants) != len(r.outputs):
        raise LoweringError(f"{_fname(fn)} gives {len(wants)} outputs in eager torch, the program {len(r.outputs)}")
    return Validation([compare(w, g, i) for i, (w, g) in enumerate(zip(wants, r.outputs))], r)
