"""The kernels behind ncsim's torch operators, without torch: what a kernel takes and gives, and running it.

An assembly kernel (`.s`) declares its arguments as HBM tensors: `in` tensors are the operator's
inputs, in the order of their declarations, `out` tensors its outputs. A dimension of an input's
declaration that is a `.param`'s name alone (`.hbm x f32[N, D] in`) binds that parameter to the
size of the tensor the operator is called with; the kernel is assembled once for each set of
parameter values and kept. An object (`.o`) has fixed shapes. An NKI kernel (`ncsim.nki.jit`) takes
its inputs as its positional parameters and is traced for each set of shapes and dtypes.

Every error names the operator and the tensor: `KernelError` is an NcsimError.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ncsim import dtypes
from ncsim.asm.lexer import Line
from ncsim.config import Config
from ncsim.errors import NcsimError


class KernelError(NcsimError):
    """A torch operator called with tensors its kernel does not take, or a kernel that cannot be an operator."""


@dataclass(frozen=True)
class Decl:
    """One HBM argument of an assembly kernel: name, dtype, and per dimension the `.param` it binds
    (or None for a literal or an expression, known once the kernel is assembled)."""

    name: str
    dtype: dtypes.DType
    params: tuple[str | None, ...]
    kind: str


@dataclass(frozen=True)
class Ran:
    """One run of a kernel: its outputs in order, the simulated time and the run itself."""

    outputs: list[np.ndarray]
    report: Any  # ncsim.runtime.report.Report
    instructions: int
    result: Any  # ncsim.runtime.run.RunResult


def _shape(shape: Sequence[Any]) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


class AsmKernel:
    """An assembly program (.s, parametric in its `.param`s) or an object (.o, fixed shapes)."""

    def __init__(self, path: str | Path, config: Config | None = None, params: Mapping[str, int] | None = None):
        self.path = Path(path)
        self.config = config or Config()
        self.fixed = dict(params or {})  # parameter values given when the operator was registered
        if not self.path.is_file():
            raise KernelError("no such kernel file (an assembly program .s or an object .o)", file=str(path))
        if self.path.suffix == ".s":
            from ncsim.asm.assembler import read_source

            self.params, decls = _scan(read_source(self.path), str(self.path))
        elif self.path.suffix == ".o":
            from ncsim.asm.elf import load_object

            obj = load_object(self.path)
            self.params = []
            decls = [Decl(t.name, t.dtype, (None,) * len(t.shape), t.kind) for t in obj.tensors if t.memory == "hbm"]
        else:
            raise KernelError("a kernel file is an assembly program (.s) or an object (.o)", file=str(path))
        for d in decls:
            if d.kind == "inout":
                raise KernelError(f"tensor '{d.name}' is declared inout: a torch operator does not write its inputs;"
                                  " declare an `in` tensor and an `out` tensor", file=str(path))
        self.inputs = [d for d in decls if d.kind == "in"]
        self.outputs = [d for d in decls if d.kind == "out"]
        if not self.outputs:
            raise KernelError("the kernel declares no `out` tensor: a torch operator returns at least one",
                              file=str(path))
        unknown = sorted(set(self.fixed) - set(self.params))
        if unknown:
            raise KernelError(f"params gives {unknown}, which the kernel does not declare with .param"
                              f" (its parameters: {', '.join(self.params) or 'none'})", file=str(path))
        self.name = self.path.stem
        self._programs: dict[tuple, Any] = {}  # parameter values -> decoded program

    @property
    def input_names(self) -> list[str]:
        return [d.name for d in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [d.name for d in self.outputs]

    # ------------------------------------------------------------------ parameters from shapes
    def bind(self, op: str, shapes: Sequence[Sequence[Any]]) -> dict[str, Any]:
        """The parameters that the input shapes give (values may be torch SymInts), checked to agree."""
        values: dict[str, Any] = dict(self.fixed)
        source: dict[str, str] = {p: "params=" for p in self.fixed}
        for d, shape in zip(self.inputs, shapes):
            if len(shape) != len(d.params):
                raise KernelError(f"{op}: input '{d.name}' has {len(shape)} dimensions {_shape(shape)}, but the kernel"
                                  f" declares {len(d.params)}: {d.dtype.short}[{', '.join(p or '_' for p in d.params)}]")
            for axis, (p, size) in enumerate(zip(d.params, shape)):
                if p is None:
                    continue
                if p not in values:
                    values[p] = size
                    source[p] = f"'{d.name}' dimension {axis}"
                elif values[p] != size:
                    raise KernelError(f"{op}: input '{d.name}' has shape {_shape(shape)}: its dimension {axis} is"
                                      f" {p} = {values[p]} by {source[p]}, not {size}")
        return values

    def program(self, op: str, shapes: Sequence[Sequence[int]]) -> Any:
        """The decoded program for these input shapes (assembled on first use, then kept), checked
        against them."""
        from ncsim.runtime.run import load_program

        params = {p: int(v) for p, v in self.bind(op, shapes).items()}
        key = tuple(sorted(params.items()))
        prog = self._programs.get(key)
        if prog is None:
            if self.path.suffix == ".s":
                prog = load_program(self.path, self.config, params)[0]
            else:
                prog = load_program(self.path, self.config)[0]
            self._programs[key] = prog
        tensors = {t.name: t for t in prog.tensors}
        for d, shape in zip(self.inputs, shapes):
            want = tuple(tensors[d.name].shape)
            if tuple(int(s) for s in shape) != want:
                raise KernelError(f"{op}: input '{d.name}' has shape {_shape(shape)}, but the kernel declares"
                                  f" {d.dtype.short}{_shape(want)}" + (f" (with {_params(params)})" if params else ""))
        return prog

    def output_shapes(self, op: str, shapes: Sequence[Sequence[Any]],
                      in_dtypes: Sequence[dtypes.DType] = ()) -> list[tuple[Any, ...]]:
        """Each output's shape: a dimension that is a parameter bound by an input takes that input's size
        (symbolic under torch's dynamic shapes), the others come from the assembled kernel."""
        bound = self.bind(op, shapes)
        assembled = None
        out = []
        for d in self.outputs:
            dims = []
            for axis, p in enumerate(d.params):
                if p is not None and p in bound:
                    dims.append(bound[p])
                else:
                    if assembled is None:
                        prog = self.program(op, [[int(s) for s in shape] for shape in shapes])
                        assembled = {t.name: t for t in prog.tensors}
                    dims.append(int(assembled[d.name].shape[axis]))
            out.append(tuple(dims))
        return out

    def output_dtypes(self, op: str, shapes: Sequence[Sequence[Any]],
                      in_dtypes: Sequence[dtypes.DType] = ()) -> list[dtypes.DType]:
        return [d.dtype for d in self.outputs]

    def check_dtype(self, op: str, index: int, dtype: dtypes.DType | None, shown: str) -> None:
        d = self.inputs[index]
        if dtype != d.dtype:
            raise KernelError(f"{op}: input '{d.name}' is {shown}, but the kernel declares"
                              f" {d.dtype.short}[{', '.join(p or '_' for p in d.params)}]")

    def run(self, op: str, arrays: Sequence[np.ndarray]) -> Ran:
        from ncsim.runtime.run import run

        prog = self.program(op, [a.shape for a in arrays])
        result = run(prog, dict(zip(self.input_names, arrays)), config=self.config, sidecar=False, check=False)
        return Ran([result.outputs[n] for n in self.output_names], result.report, result.instructions, result)


def _params(params: Mapping[str, int]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in params.items())


def _scan(text: str, filename: str) -> tuple[list[str], list[Decl]]:
    """The `.param` names and the `.hbm` declarations of a program's own lines, in order (the
    assembler checks everything else when it assembles them)."""
    from ncsim.asm.assembler import source_lines

    params: list[str] = []
    decls: list[Decl] = []
    for line in source_lines(text, filename):
        toks = [t for t in line.tokens if t.kind != "eol"]
        if len(toks) < 3 or not toks[0].is_(".") or toks[1].text not in ("param", "hbm"):
            continue
        if toks[1].text == "param":
            params.append(toks[2].text)
            continue
        decls.append(_hbm_decl(line, toks, params))
    return params, decls


def _hbm_decl(line: Line, toks: list, params: list[str]) -> Decl:
    dt = dtypes.by_name(toks[3].text) if len(toks) > 3 else None
    if dt is None or len(toks) < 6 or not toks[4].is_("["):
        raise line.error("a .hbm declaration is NAME DTYPE[d0, ...] KIND", toks[2])  # as the assembler says it
    dims: list[list] = [[]]
    i = 5
    while i < len(toks) and not toks[i].is_("]"):
        if toks[i].is_(","):
            dims.append([])
        else:
            dims[-1].append(toks[i])
        i += 1
    kind = toks[i + 1].text if i + 1 < len(toks) else ""
    bound = tuple(d[0].text if len(d) == 1 and d[0].kind == "ident" and d[0].text in params else None for d in dims)
    return Decl(toks[2].text, dt, bound, kind)


class NkiKernel:
    """A kernel of ncsim's NKI front end (`@nki.jit`): its positional parameters are the operator's
    inputs; it returns `outputs` HBM tensors (ncsim names them out, or out0, out1, ...)."""

    def __init__(self, kernel: Any, outputs: int = 1):
        from ncsim import nki

        self.kernel = kernel if isinstance(kernel, nki.Kernel) else nki.jit(kernel)
        sig = inspect.signature(self.kernel.func)
        self.input_names = [p.name for p in sig.parameters.values()
                            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
        self.output_names = ["out"] if outputs == 1 else [f"out{i}" for i in range(outputs)]
        self.name = getattr(self.kernel.func, "__name__", "kernel")
        self._meta: dict[tuple, list[tuple[tuple[int, ...], dtypes.DType]]] = {}

    def _traced(self, op: str, shapes: Sequence[Sequence[Any]], in_dtypes: Sequence[dtypes.DType]) -> list:
        """(shape, dtype) of each output, from tracing the kernel on placeholders (timed, not computed)."""
        from ncsim import nki
        from ncsim.nki.tensor import numpy_dtype
        from ncsim.nki.typing import Placeholder

        key = tuple((tuple(int(s) for s in shape), d.short) for shape, d in zip(shapes, in_dtypes))
        if key not in self._meta:
            nki.simulate_kernel(self.kernel, *(Placeholder(s, numpy_dtype(d)) for s, d in key_dtypes(key)),
                                values=False)
            tensors = {t.name: t for t in nki.last_run().program.tensors.values() if t.kind == "out"}
            missing = [n for n in self.output_names if n not in tensors]
            if missing:
                raise KernelError(f"{op}: NKI kernel {self.name} returns {len(tensors)} tensor(s)"
                                  f" ({', '.join(tensors) or 'none'}), registered with outputs={len(self.output_names)}")
            self._meta[key] = [(tuple(tensors[n].shape), tensors[n].dtype) for n in self.output_names]
        return self._meta[key]

    def output_shapes(self, op: str, shapes: Sequence[Sequence[Any]], in_dtypes: Sequence[dtypes.DType]) -> list:
        return [s for s, _ in self._traced(op, shapes, in_dtypes)]

    def output_dtypes(self, op: str, shapes: Sequence[Sequence[Any]], in_dtypes: Sequence[dtypes.DType]) -> list:
        return [d for _, d in self._traced(op, shapes, in_dtypes)]

    def check_dtype(self, op: str, index: int, dtype: dtypes.DType | None, shown: str) -> None:
        if dtype is None:
            raise KernelError(f"{op}: input '{self.input_names[index]}' is {shown}, which ncsim has no dtype for")

    def run(self, op: str, arrays: Sequence[np.ndarray]) -> Ran:
        from ncsim import nki

        got = nki.simulate_kernel(self.kernel, *arrays)
        outs = list(got) if isinstance(got, (tuple, list)) else [got]
        if len(outs) != len(self.output_names):
            raise KernelError(f"{op}: NKI kernel {self.name} returned {len(outs)} tensor(s), registered with"
                              f" outputs={len(self.output_names)}")
        last = nki.last_run()
        return Ran(outs, last.report, last.result.instructions, last.result)


def key_dtypes(key: tuple) -> list[tuple[tuple[int, ...], dtypes.DType]]:
    return [(shape, dtypes.by_name(short)) for shape, short in key]
