"""Run a kernel: load it, give it inputs, execute it, collect its outputs, check them.

    import ncsim
    result = ncsim.run("programs/giou.s")                 # inputs from the sidecar, checked against it
    result.outputs["out"]                                  # numpy arrays, by output name
    print(result.check.report())                           # "bit-exact: 262144 of 262144 elements (out)"
    result = ncsim.run("k.s", inputs={"x": my_array})      # or {"x": "x.npy"}

    print(result.report.format())                          # the timing report and its verdict
    result.races                                           # a RaceReport: unordered accesses, if any

`ncsim run` on the command line is this function plus printing. Errors a user can cause (a malformed
program, a bad input, a rule broken at run time, a deadlock) raise `ncsim.errors.NcsimError`.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ncsim.config import Config
from ncsim.errors import InputError, NcsimError
from ncsim.progress import Progress
from ncsim.runtime import inputs as inputs_mod
from ncsim.runtime.check import compare

# The rest is imported where it is needed: the ELF reader only for an object, the functional
# machine only for values, so that a timing-only run or a run of source loads no more than it uses.
if TYPE_CHECKING:
    from ncsim.asm.objfile import ObjectFile
    from ncsim.program import Program
    from ncsim.runtime.check import CheckResult
    from ncsim.runtime.machine import Machine
    from ncsim.runtime.races import RaceReport
    from ncsim.runtime.report import Report
    from ncsim.runtime.timing import TimingResult


@dataclass
class RunResult:
    kernel: str
    program: Program = field(repr=False)  # the decoded program that ran
    outputs: dict[str, np.ndarray]  # every `out`/`inout` HBM tensor after the run, by name
    inputs: dict[str, np.ndarray]
    input_origin: dict[str, str]  # where each input came from
    check: CheckResult | None  # None when there is no reference to check against
    warnings: list[str]
    instructions: int
    seconds: float  # host time of the functional simulation
    machine: Machine | None = field(repr=False)  # the functional machine; None with values=False
    timing: TimingResult | None = field(default=None, repr=False)  # when and how long, by the timing model
    timing_seconds: float = 0.0  # host time of the timing model
    races: RaceReport | None = None  # instructions that touch the same bytes unordered; None untimed

    @cached_property
    def obj(self) -> ObjectFile:
        """The object of the program: made from the decoded program when first asked (a program keeps
        no object, unless one was set on it), the same bytes as the one loaded or assembled."""
        return self.program.obj if self.program.obj is not None else self.program.to_object()

    @cached_property
    def report(self) -> Report:
        """The timing report: where the time went and what bounds the kernel (needs timing)."""
        from ncsim.runtime.report import report as make_report

        if self.timing is None:
            raise ValueError("this run was not timed: run(..., timing=True)")
        return make_report(self.timing)


def load_program(program: str | Path | ObjectFile | Program, config: Config,
                 params: Mapping[str, int] | None = None) -> tuple[Program, str, bool]:
    """(the decoded program, display name, whether it came from an object). A .s file is assembled in
    memory, straight into the decoded program, with `params` the values of its .param names; an
    object is decoded once, for every phase; a decoded program is taken as it is."""
    from ncsim.asm.objfile import ObjectFile
    from ncsim.program import Program

    if params and not (isinstance(program, (str, Path)) and str(program).endswith(".s")):
        what = str(program) if isinstance(program, (str, Path)) else "this program"
        raise NcsimError(f"parameter values (-D) are for assembly source (.s): {what} is assembled already")

    if isinstance(program, Program):  # already decoded (the NKI front end builds it from its arrays)
        return program, program.name, False
    if isinstance(program, ObjectFile):
        name = f"<kernel {program.kernel}>"
        return Program.from_object(program, name), name, True
    path = str(program)
    if Path(path).is_dir():
        raise NcsimError("is a directory, not a program (.s or .o)", file=path)
    if path.endswith(".s"):
        from ncsim.asm.assembler import Assembler, read_source

        with Progress(None, f"assembling {path}"):
            # Straight into the decoded program, its words made and read a block at a time: no object
            # (RunResult.obj makes the same bytes when asked).
            prog = Assembler(config, params).assemble_program(read_source(path), path)
            return prog, path, False
    from ncsim.asm.elf import mapped_object

    with mapped_object(path) as obj:  # decoded straight from the mapped file, which is not kept
        prog = Program.from_object(obj, path)
        del obj
    return prog, path, True


def run(program: str | Path | ObjectFile | Program, inputs: Mapping[str, Any] | None = None, *,
        config: Config | None = None, seed: int = 0, sidecar: str | Path | bool = True,
        check: bool = True, timing: bool = True, values: bool = True,
        progress: Callable[[int, int], None] | None = None, params: Mapping[str, int] | None = None) -> RunResult:
    """Run `program` (a .s or .o path, an ObjectFile, or a decoded `ncsim.program.Program`) on a
    simulated NeuronCore-v2.

    inputs: arrays or .npy paths by input name; the rest come from the sidecar's inputs(seed), else
    seeded random values. sidecar: True to use the file beside the program (NAME.py), a path, or False.
    check: compare the outputs with the sidecar's reference(**inputs), when it has one.
    timing: time the program (`result.timing`, a TimingResult). values: compute the values; with
    values=False (the CLI's --timing-only) there are no inputs, outputs or check, only the timing.
    progress: called as progress(done, total) as the values are computed. The `ncsim` command also
    draws bars of the steps that last (ncsim.progress); from Python they are off.
    params: the values of a .s program's `.param` names (`ncsim run -D NAME=VALUE`).
    """
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise InputError(f"seed {seed!r}: a seed is a non-negative integer (numpy's random generators,"
                         " and the sidecars' inputs(seed), take no other)")
    config = config or Config()
    prog, name, from_object = load_program(program, config, params)
    if from_object:  # an object is held to this configuration's rules before anything is allocated or run,
        from ncsim.runtime.verify import verify_program  # timing-only too

        verify_program(prog, config)
    machine = None
    if values:
        from ncsim.runtime.machine import Machine

        machine = Machine(prog, config, name)
    timed = None
    if timing:
        from ncsim.runtime.races import find_races
        from ncsim.runtime.timing import time_program

        # Timing first: it needs no values, and a deadlock it finds is reported with simulated times.
        with Progress(None, f"timing {name}"):
            start = time.perf_counter()
            timed = time_program(prog, config, name)
            timing_seconds = time.perf_counter() - start
            races = find_races(timed)
    if not values:
        if timed is None:
            raise ValueError("run(values=False) needs timing=True: there would be nothing to do")
        return RunResult(prog.kernel, prog, {}, {}, {}, None, [], timed.count, 0.0, None, timed, timing_seconds,
                         races)
    if sidecar is True:
        side_path = inputs_mod.find_sidecar(program) if isinstance(program, (str, Path)) else None
    elif sidecar is False:
        side_path = None
    else:
        side_path = Path(sidecar)
        if not side_path.is_file():
            raise NcsimError("no such sidecar file", file=str(side_path))
    side = inputs_mod.load_sidecar(side_path)
    arrays, origin = inputs_mod.resolve_inputs(prog, inputs or {}, side, seed)

    for t in inputs_mod.input_tensors(prog):
        machine.load_tensor(t, arrays[t.name])
    start = time.perf_counter()
    with Progress(machine.total, f"simulating {name}", unit="instr") as bar:
        def report_progress(done: int, total: int) -> None:
            bar.set(done)
            if progress is not None:
                progress(done, total)

        machine.run(report_progress if bar.enabled or progress is not None else None)
    seconds = time.perf_counter() - start

    outs = {t.name: t for t in inputs_mod.output_tensors(prog)}
    outputs = {n: machine.read_tensor(t) for n, t in outs.items()}
    result_check = None
    if check and side.has_reference:
        expected = inputs_mod.reference_outputs(prog, side, arrays)
        result_check = compare(outs, outputs, expected)
    return RunResult(prog.kernel, prog, outputs, arrays, origin, result_check, machine.warnings(), machine.total, seconds,
                     machine, timed, timing_seconds if timed is not None else 0.0, races if timed is not None else None)


def save_outputs(path: str | Path, result: RunResult) -> None:
    """Write the outputs as an .npz, one array per output by name; bf16 and fp8 outputs are
    widened to float32 exactly (numpy cannot name the ml_dtypes types in a file)."""
    tensors = {t.name: t for t in inputs_mod.output_tensors(result.program)}
    arrays = {n: inputs_mod.as_saved(tensors[n], a) for n, a in result.outputs.items()}
    try:
        with open(path, "wb") as f:
            np.savez(f, **arrays)
    except OSError as e:
        raise NcsimError(f"cannot write the outputs: {e.strerror}", file=str(path)) from None
