"""ncsim's NKI front end: kernels written for `neuronxcc.nki` (SDK 2.20-2.26) run on ncsim unchanged.

    import ncsim.nki as nki
    import ncsim.nki.language as nl

    @nki.jit
    def add_kernel(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a) + nl.load(b))
        return out

    c = add_kernel(a, b)                      # numpy in, numpy out: simulated values
    nki.last_run().report.format()            # ncsim's timing report and its verdict
    nki.simulate_kernel(add_kernel, a, b)     # the same

A kernel is traced (`ncsim.nki.tracer`: its Python runs once per SPMD instance, every nl.* / nisa.*
call adding instructions to an ncsim Program) and the program runs on the simulated core
(`ncsim.runtime.run`): values bit for bit, and the time. `ncsim nki FILE.py` runs a script with
`neuronxcc.nki` aliased to this package (`install_alias`). docs/nki.md has the details.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ncsim.config import Config
from ncsim.errors import AsmError, NcsimError
from ncsim.nki import compiler, isa, language, typing
from ncsim.nki.alias import install_alias
from ncsim.nki.compiler import FORCE_AUTO
from ncsim.nki.emit import asm_text, emit_asm, save_asm
from ncsim.nki.tensor import Buffer, View, numpy_dtype, to_dtype
from ncsim.nki.tracer import DEFAULT_BUFFERS, Tracer
from ncsim.nki.typing import Placeholder

if TYPE_CHECKING:
    from ncsim.asm.assembler import Program
    from ncsim.asm.objfile import ObjectFile
    from ncsim.runtime.run import RunResult

__all__ = ["Kernel", "NkiRun", "asm_text", "baremetal", "benchmark", "compiler", "emit_asm", "install_alias", "isa",
           "jit", "language", "last_run", "profile", "simulate_kernel", "trace", "typing"]

# Settings of `ncsim nki` (the command line): every run timing-only, and a line on stderr per run.
# emit_asm: a folder that receives each kernel's program as .s (ncsim nki --emit-asm); show_sync: print
# each kernel's synchronisation report (ncsim nki --show-sync); schedule: reorder each kernel as NKI's
# scheduler does (ncsim nki --no-schedule turns it off); plan_spills: trace a kernel that spills again, to
# spill the tile used farthest ahead (ncsim nki --no-plan-spills turns it off).
options: dict[str, Any] = {"timing_only": False, "announce": False, "config": None, "emit_asm": None,
                           "show_sync": False, "schedule": True, "plan_spills": True}
_last: NkiRun | None = None


@dataclass
class NkiRun:
    """One simulated kernel call: the program built, ncsim's RunResult, and the kernel's outputs."""

    kernel: str
    program: Program = field(repr=False)
    result: RunResult = field(repr=False)
    outputs: Any  # what the kernel returned, as numpy arrays (None when only timed)
    values: bool
    seconds: dict[str, float] = field(default_factory=dict)  # host seconds per phase (trace, build, load, ...)

    @functools.cached_property
    def obj(self) -> ObjectFile:
        """ncsim's object of the kernel (made when asked: the run reads the encoded arrays directly)."""
        return self.program.to_object()

    @property
    def latency_us(self) -> float:
        """The simulated time of the kernel, in µs."""
        return self.report.total_ns / 1000.0

    @property
    def report(self) -> Any:
        """ncsim's timing report (`.format()`, `.verdict`)."""
        return self.result.report

    def summary(self) -> str:
        return (f"ncsim: kernel {self.kernel}: {self.result.instructions} instructions, {self.latency_us:.3f} µs"
                f" simulated{'' if self.values else ' (timing only)'}; verdict: {self.report.verdict.text}")


def last_run() -> NkiRun | None:
    """The most recent simulated kernel call (its report has the verdict)."""
    return _last


class Kernel:
    """A function decorated with @nki.jit (or trace, baremetal): calling it with numpy arrays
    simulates it; `kernel[gx, gy](...)` launches an SPMD grid."""

    def __init__(self, func: Any, grid: tuple[int, ...] = (), **options: Any):
        self.func = func.func if isinstance(func, Kernel) else func
        self.grid = grid
        self.options = options
        functools.update_wrapper(self, self.func)

    def __getitem__(self, grid: Any) -> Kernel:
        g = grid if isinstance(grid, tuple) else (grid,)
        return type(self)(self.func, tuple(int(x) for x in g), **self.options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return simulate(self, args, kwargs).outputs


def jit(func: Any = None, **options: Any) -> Any:
    """@nki.jit or @nki.jit(mode=...): the kernel, run on ncsim when called."""
    if func is None:
        return lambda f: Kernel(f, **options)
    return Kernel(func, **options)


trace = jit
baremetal = jit


def simulate_kernel(kernel: Any, *args: Any, values: bool | None = None, **kwargs: Any) -> Any:
    """Run `kernel` on the simulated core with these arguments; its outputs as numpy arrays.
    values=False (or placeholder arguments) only times it and returns None."""
    return simulate(kernel, args, kwargs, values=values).outputs


def _input_array(name: str, a: np.ndarray) -> np.ndarray:
    if a.dtype == np.float64:
        raise AsmError(f"argument '{name}' is float64, which NKI does not have: pass float32 (or another NKI dtype)")
    to_dtype(a.dtype)  # refuses what NKI does not have
    a = np.ascontiguousarray(a)
    return a.view(np.uint8) if a.dtype == np.bool_ else a


def simulate(kernel: Any, args: tuple, kwargs: dict, *, values: bool | None = None, config: Config | None = None,
             buffers: int = DEFAULT_BUFFERS, batch: bool = True, schedule: bool | None = None,
             renew: bool = True, plan_spills: bool | None = None) -> NkiRun:
    """Trace `kernel` with these arguments, build its program and run it (see the module docstring).
    batch=False adds each traced instruction as a chunk of its own (`Tracer.record`): the same
    object, built more slowly. schedule: reorder the program as NKI's scheduler does
    (`ncsim.nki.schedule`; None: `options["schedule"]`, on unless `ncsim nki --no-schedule`).
    renew=False keeps a tile in its buffer when an instruction overwrites all of it (`Tracer.renew`;
    docs/nki.md "Buffer policy"), as ncsim did before. plan_spills: when tiles had to give up their
    place, trace the kernel again, the spill choice now knowing when each tile is used next (the
    first trace's record; its output to stdout is shown once); False: the least recently used; None:
    `options["plan_spills"]`, on unless `ncsim nki --no-plan-spills`."""
    global _last
    from ncsim.runtime.run import run
    from ncsim.runtime.verify import verify_program

    clock = time.perf_counter()
    k = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
    config = config or options["config"] or Config()
    func = k.func
    name = getattr(func, "__name__", "kernel")

    def trace(future: dict[int, list[int]] | None) -> tuple:
        """One trace of the kernel: (tracer, what it returned, its output buffers and names, the input
        arrays, the argument buffers, whether any argument is a placeholder)."""
        tracer = Tracer(name if name.isidentifier() else "kernel", config, buffers, batch, renew, future)
        tracer.force_auto = bool(getattr(func, FORCE_AUTO, False))
        bound = inspect.signature(func).bind(*args, **kwargs)
        inputs: dict[str, np.ndarray] = {}
        arg_buffers: dict[str, tuple[Buffer, np.ndarray | None]] = {}
        placeholders = False

        def tensor_arg(pname: str, v: Any) -> Any:
            nonlocal placeholders
            if isinstance(v, Placeholder):
                placeholders = True
                buf = tracer.hbm_tensor(pname, v.nc_dtype, v.shape, "in")
                arg_buffers[buf.name] = (buf, None)
                return View.of(buf)
            if isinstance(v, np.ndarray):
                arr = _input_array(pname, v)
                buf = tracer.hbm_tensor(pname, to_dtype(v.dtype), tuple(v.shape) or (1,), "in")
                inputs[buf.name] = arr.reshape(buf.entry.shape)
                arg_buffers[buf.name] = (buf, v)
                return View.of(buf)
            return v

        params = bound.signature.parameters
        for pname, v in list(bound.arguments.items()):
            if params[pname].kind == inspect.Parameter.VAR_POSITIONAL:
                bound.arguments[pname] = tuple(tensor_arg(f"{pname}{i}", x) for i, x in enumerate(v))
            elif params[pname].kind == inspect.Parameter.VAR_KEYWORD:
                bound.arguments[pname] = {kk: tensor_arg(kk, x) for kk, x in v.items()}
            else:
                bound.arguments[pname] = tensor_arg(pname, v)
        returned = tracer.run_grid(func, bound.args, bound.kwargs, k.grid)

        outs = returned if isinstance(returned, (tuple, list)) else () if returned is None else (returned,)
        out_bufs = []
        for o in outs:
            if not isinstance(o, View) or o.on_chip:
                raise AsmError(f"kernel {name} returns {o!r}: a kernel returns HBM tensors"
                               " (nl.ndarray(..., buffer=nl.shared_hbm)) it has stored into", file=_source(func))
            out_bufs.append(o.buf)
        inouts = [b for b, _ in arg_buffers.values() if b.stored]
        out_names = _name_outputs(tracer, out_bufs)
        tracer.finish(out_bufs, inouts)
        return tracer, returned, out_bufs, out_names, inputs, arg_buffers, placeholders

    if options["plan_spills"] if plan_spills is None else plan_spills:
        # The kernel's output to stdout (its prints) is shown once: the first trace's, or the second's
        # when a second trace replaces it.
        shown = io.StringIO()
        try:
            with contextlib.redirect_stdout(shown):
                traced = trace(None)
        except BaseException:
            sys.stdout.write(shown.getvalue())
            raise
        if traced[0].spills:
            again = io.StringIO()
            try:
                with contextlib.redirect_stdout(again):
                    second = trace(traced[0].uses)
            except NcsimError:
                pass  # (the first trace's choices ran; a refusal the second's met is not the kernel's)
            except BaseException:
                sys.stdout.write(again.getvalue())
                raise
            else:
                traced, shown = second, again
        sys.stdout.write(shown.getvalue())
    else:
        traced = trace(None)
    tracer, returned, out_bufs, out_names, inputs, arg_buffers, placeholders = traced
    program = tracer.program
    seconds = {"trace": time.perf_counter() - clock}
    clock = time.perf_counter()
    enc = program.build(config, set())
    seconds["build"] = time.perf_counter() - clock
    decoded = None
    if options["schedule"] if schedule is None else schedule:
        clock = time.perf_counter()
        enc, decoded = _scheduled(program, enc, config, tracer.blocks())
        seconds["schedule"] = time.perf_counter() - clock
    if values is None:
        values = not (placeholders or options["timing_only"])
    if values and placeholders:
        raise NcsimError("placeholder arguments (nki.typing.tensor) have no values: run with values=False")
    clock = time.perf_counter()
    # The decoded program straight from the encoded arrays (no object in between), held to this
    # configuration's rules as a loaded object is (each instruction was also checked when traced).
    if decoded is None:
        decoded = _decoded(program, enc)
    verify_program(decoded, config)
    seconds["load"] = time.perf_counter() - clock
    clock = time.perf_counter()
    inputs.update(tracer.constant_values)  # nl.shared_constant tensors
    result = run(decoded, inputs if values else None, config=config, sidecar=False, check=False, values=values)
    seconds["timing"] = result.timing_seconds
    seconds["races"] = time.perf_counter() - clock - result.timing_seconds - result.seconds
    if values:
        seconds["values"] = result.seconds
    outputs = None
    if values:
        for (buf, original) in arg_buffers.values():
            if buf.stored and original is not None:  # an output passed in as an argument: filled in place
                np.copyto(original, _as_user(result.outputs[buf.entry.name], buf).reshape(original.shape),
                          casting="unsafe")
        got = [_as_user(result.outputs[n], b) for n, b in zip(out_names, out_bufs)]
        outputs = None if returned is None else (type(returned)(got) if isinstance(returned, (tuple, list))
                                                 else got[0])
    language.show_prints(tracer, result.outputs if values else None)
    _last = NkiRun(name, program, result, outputs, values, seconds)
    if options["announce"]:
        print(_last.summary(), file=sys.stderr)
    if options["show_sync"]:
        print(f"{name}: {program.sync_report}", file=sys.stderr)
    if options["emit_asm"]:
        save_asm(_last, options["emit_asm"])
    return _last


def _decoded(program: Program, enc: Any) -> Any:
    """The decoded program straight from the encoded arrays (no object in between)."""
    from ncsim.program import Program as Decoded

    return Decoded.from_encoded(enc, program.kernel, program.files, list(program.tensors.values()),
                                f"<kernel {program.kernel}>")


def _scheduled(program: Program, enc: Any, config: Config, blocks: np.ndarray) -> tuple[Any, Any]:
    """The program in the scheduler's order if the timing model finds it faster than the written
    order, else as written (ncsim.nki.schedule): its encoding and decoded program."""
    from ncsim.asm.build import take
    from ncsim.nki.schedule import new_order
    from ncsim.runtime.timing import time_program

    decoded = _decoded(program, enc)
    timed = time_program(decoded, config)
    pos = new_order(decoded, timed, enc.origin, program.count, blocks)
    if pos is None:
        return enc, decoded
    written = [(c.instr, c.positions) for c in program.chunks]
    report = program._sync_report
    for c in program.chunks:  # each chunk's lanes in their new order (the encoder's fast path)
        moved = pos[c.positions]
        lanes = np.argsort(moved, kind="stable")
        c.positions = moved[lanes].astype(np.int32)
        if c.n > 1 and (lanes[1:] < lanes[:-1]).any():
            c.instr = take(c.instr, lanes)
    enc2 = program.build(config, set())
    decoded2 = _decoded(program, enc2)
    if time_program(decoded2, config).total_ticks < timed.total_ticks:
        return enc2, decoded2
    for c, (instr, p) in zip(program.chunks, written):
        c.instr, c.positions = instr, p
    program.encoded, program._sync_report = enc, report
    return enc, decoded


def _as_user(a: np.ndarray, buf: Buffer) -> np.ndarray:
    return a.astype(np.bool_) if numpy_dtype(buf.dtype) == np.bool_ else a


def _source(func: Any) -> str | None:
    try:
        return inspect.getsourcefile(func)
    except TypeError:
        return None


def _name_outputs(tracer: Tracer, bufs: list[Buffer]) -> list[str]:
    """Returned tensors made inside the kernel are named out (or out0, out1, ...) in the object."""
    import dataclasses

    names = []
    for i, buf in enumerate(bufs):
        if buf.entry.kind == "scratch":
            new = tracer.unique("out" if len(bufs) == 1 else f"out{i}")
            buf.entry = dataclasses.replace(buf.entry, name=new)
            buf.name = new
        names.append(buf.entry.name)
    return names


# ------------------------------------------------------------------ benchmark and profile
class _Latency:
    def __init__(self, us: float):
        self.us = us

    def get_latency_percentile(self, percentile: float) -> float:
        """The simulated latency in µs: a simulation is deterministic, so every percentile is the same."""
        return self.us


class BenchmarkResult:
    def __init__(self, run: NkiRun):
        self.run = run
        self.nc_latency = _Latency(run.latency_us)


class Benchmarked(Kernel):
    """nki.benchmark(...)(kernel): calling it times the kernel (values are not computed) and keeps
    `benchmark_result.nc_latency`; save_neff_name / save_trace_name write ncsim's object and its
    Perfetto trace under those names."""

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        r = simulate(self, args, kwargs, values=False)
        self.benchmark_result = BenchmarkResult(r)
        _save(r, self.options.get("save_neff_name"), self.options.get("save_trace_name"), None)


def benchmark(kernel: Any = None, **options: Any) -> Any:
    """Both published forms: nki.benchmark(warmup=5, iters=10)(kernel) and nki.benchmark(kernel,
    save_neff_name='file.neff', save_trace_name='profile.ntff'). warmup and iters change nothing
    (a simulation gives the same time each run)."""
    if kernel is None:
        return lambda f: Benchmarked(f, **options)
    return Benchmarked(kernel, **options)


class Profiled(Kernel):
    """nki.profile(...)(kernel): calling it simulates the kernel and writes ncsim's Perfetto trace
    (save_trace_name, default KERNEL.trace.json) and PNG timeline (beside it) in working_directory."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        r = simulate(self, args, kwargs)
        wd = Path(self.options.get("working_directory") or ".")
        wd.mkdir(parents=True, exist_ok=True)
        trace_name = self.options.get("save_trace_name") or f"{r.kernel}.trace.json"
        neff = self.options.get("save_neff_name")
        _save(r, str(wd / neff) if neff else None, str(wd / trace_name), str(wd / (Path(trace_name).stem + ".png")))
        return r.outputs


def profile(kernel: Any = None, **options: Any) -> Any:
    if kernel is None:
        return lambda f: Profiled(f, **options)
    return Profiled(kernel, **options)


def _save(r: NkiRun, obj_path: str | None, trace_path: str | None, png_path: str | None) -> None:
    try:
        if obj_path:
            from ncsim.asm.elf import write_elf_file

            write_elf_file(r.obj, obj_path)  # (an existing file is replaced, not rewritten: see its docstring)
        if trace_path:
            from ncsim.runtime.trace import write_trace

            write_trace(r.result.timing, trace_path, r.obj)
        if png_path:
            from ncsim.runtime.timeline import write_timeline

            write_timeline(r.result.timing, png_path, r.obj)
    except OSError as e:
        raise NcsimError(f"cannot write: {e.strerror}", file=e.filename) from None
