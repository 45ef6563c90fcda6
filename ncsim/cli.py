"""The `ncsim` command line.

Every error caused by the user's input is an NcsimError: it is printed as file:line:col with the
line and a caret, and the command exits with status 1. Anything else escaping is an ncsim bug; it
is reported as one (set NCSIM_DEBUG=1 for the traceback).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ncsim.errors import DeadlockError, NcsimError

# Each command imports what it uses when it runs: `ncsim --help`, `ncsim isa` and `ncsim config`
# load neither numba nor the engines, and matplotlib is loaded only for --timeline.
if TYPE_CHECKING:
    from ncsim.asm.objfile import ObjectFile
    from ncsim.config import Config
    from ncsim.program import Program
    from ncsim.runtime.timing import TimingResult

config_file_option = click.option("--config", "config_files", type=click.Path(), multiple=True,
                                  help="TOML file of hardware parameters (see `ncsim config`); repeatable:"
                                       " the files merge in order, a later one's values winning.")
set_option = click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                          help="Override one hardware parameter; repeatable.")


define_option = click.option("-D", "--define", "defines", multiple=True, metavar="NAME=VALUE",
                             help="The value of the program's `.param NAME` (an integer); repeatable.")


def parse_defines(defines: tuple[str, ...]) -> dict[str, int]:
    """-D NAME=VALUE options as the assembler's params (whether each NAME is declared is its check)."""
    from ncsim.asm.expr import int_literal
    from ncsim.asm.lexer import Token

    params: dict[str, int] = {}
    for item in defines:
        name, eq, text = item.partition("=")
        name, text = name.strip(), text.strip()
        negative = text.startswith("-")
        digits = text.removeprefix("-")
        value = int_literal(Token("number", digits, 1)) if digits else None
        if not eq or not name.isidentifier() or value is None:
            raise NcsimError(f"-D takes NAME=INTEGER (e.g. -D N=1024), not '{item}'")
        if name in params:
            raise NcsimError(f"-D gives '{name}' twice")
        params[name] = -value if negative else value
    return params


quiet_option = click.option("--quiet", "-q", is_flag=True,
                            help="No progress bars and no notice that kernels are being compiled.")


def make_config(config_files: tuple[str, ...], sets: tuple[str, ...]) -> Config:
    from ncsim.config import load_config

    return load_config(list(config_files), list(sets))


def _announce(quiet: bool) -> bool:
    """Whether to say, on stderr, that numba is compiling ncsim's kernels: to a person at a terminal."""
    return not quiet and sys.stderr.isatty()


# The commands that enter warmup.prepare() once they have imported their modules: it lets the `ncsim`
# command's garbage collector run again (ncsim.console); for every other command the group does.
_PREPARED = ("asm", "run")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ncsim")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """ncsim: a simulator of one AWS NeuronCore-v2 (Trainium1 / Inferentia2)."""
    if ctx.invoked_subcommand not in _PREPARED:
        from ncsim.console import imports_done

        imports_done()


@cli.command()
@click.argument("source", type=click.Path())
@click.option("-o", "--output", type=click.Path(), help="Object file to write (default: SOURCE with .o).")
@click.option("--show-sync", is_flag=True, help="Print the semaphore waits the assembler inserted, and why.")
@define_option
@quiet_option
@config_file_option
@set_option
def asm(source: str, output: str | None, show_sync: bool, defines: tuple[str, ...], quiet: bool,
        config_files: tuple[str, ...], sets: tuple[str, ...]) -> None:
    """Assemble SOURCE (.s) into an ELF object."""
    from ncsim import progress, warmup
    from ncsim.asm.assembler import Assembler, read_source
    from ncsim.asm.elf import write_program

    config = make_config(config_files, sets)
    assembler = Assembler(config, parse_defines(defines))
    text = read_source(source)
    out = Path(output) if output else Path(source).with_suffix(".o")
    with progress.enable_bars(not quiet), warmup.prepare(_announce(quiet)), \
            progress.Progress(None, f"assembling {source}"):
        # Straight into the decoded program, then written out with its words made again a block at a
        # time: the object's words are never whole in memory (docs/running.md).
        prog = assembler.assemble_program(text, source)
        try:
            size = write_program(prog, out)
        except OSError as e:
            raise NcsimError(f"cannot write {out}: {e.strerror}", file=str(out)) from None
    if show_sync:
        click.echo(assembler.program.sync_report)
    counts = instruction_counts(prog)
    click.echo(f"{out}: kernel {prog.kernel}, {sum(counts.values())} instructions"
               f" ({format_counts(counts)}), {len(prog.tensors)} tensors, {size} bytes")


@cli.command()
@click.argument("objectfile", type=click.Path())
@click.option("-o", "--output", type=click.Path(), help="Write the text here instead of stdout.")
def disasm(objectfile: str, output: str | None) -> None:
    """Print an object file as assembly that assembles back to the same object."""
    from ncsim.asm.disasm import disassemble
    from ncsim.asm.elf import load_object

    obj = load_object(objectfile)
    text = disassemble(obj, objectfile)
    if output:
        try:
            Path(output).write_text(text)
        except OSError as e:
            raise NcsimError(f"cannot write {output}: {e.strerror}", file=output) from None
    else:
        click.echo(text, nl=False)


@cli.command("isa")
@click.argument("name", required=False)
def isa_cmd(name: str | None) -> None:
    """List the instructions by engine, or describe instruction NAME."""
    from ncsim import isa
    from ncsim.asm.fields import suggest
    from ncsim.isadoc import describe as describe_instruction
    from ncsim.isadoc import summary_by_engine

    if name is None:
        click.echo(summary_by_engine())
        return
    spec = isa.BY_MNEMONIC.get(name) or isa.CORE_BY_MNEMONIC.get(name)
    if spec is None:
        raise NcsimError(f"no instruction '{name}'", notes=(suggest(name, {**isa.BY_MNEMONIC, **isa.CORE_BY_MNEMONIC}),))
    click.echo(describe_instruction(spec))


@cli.command("config")
@config_file_option
@set_option
def config_cmd(config_files: tuple[str, ...], sets: tuple[str, ...]) -> None:
    """Show the hardware parameters in force, with their sources."""
    from ncsim.config import describe

    click.echo(describe(make_config(config_files, sets)))


TRACE_SUFFIX = ".json"  # `--trace FILE` takes FILE only when it ends so (the trace is Chrome Trace Event JSON)


class _RunCommand(click.Command):
    """`ncsim run`'s parser, with one rule for --trace's optional value. Click's optional values take
    whatever follows, so `ncsim run --trace k.s` would write the trace to k.s and miss the program:
    here `--trace` takes the next argument only when it ends in .json (`--trace k.trace.json`);
    `--trace=FILE` names any file; a bare `--trace` writes PROGRAM.trace.json."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        args = list(args)
        for i, arg in enumerate(args):
            if arg == "--":
                break
            if arg == "--trace" and not (i + 1 < len(args) and args[i + 1].lower().endswith(TRACE_SUFFIX)):
                args[i] = "--trace="  # an empty value: the default name
        return super().parse_args(ctx, args)


def _check_output(option: str, path: str) -> None:
    """An output path that cannot be written is an error before the run, not after it."""
    p = Path(path)
    if p.is_dir():
        raise NcsimError(f"{option}: is a directory, not a file", file=path)
    folder = p.parent
    if not folder.is_dir():
        raise NcsimError(f"{option}: no directory '{folder}' to write it in", file=path)
    if not os.access(folder, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise NcsimError(f"{option}: cannot write it (permission denied)", file=path)


@cli.command(cls=_RunCommand)
@click.argument("program", type=click.Path())
@click.option("--input", "-i", "input_files", multiple=True, metavar="NAME=FILE.npy",
              help="Take input NAME from a .npy file; repeatable. Inputs not given come from the sidecar"
                   " (PROGRAM.py) or are seeded random.")
@click.option("--out", "-o", "out_file", type=click.Path(), default=None,
              help="Where to save the outputs (.npz; default: PROGRAM with .npz).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sidecar's or the random inputs.")
@click.option("--sidecar", type=click.Path(), default=None,
              help="The Python file with inputs() and reference() (default: PROGRAM with .py, if it exists).")
@click.option("--no-check", is_flag=True, help="Do not compare the outputs with the sidecar's reference.")
@click.option("--trace", "trace", is_flag=False, flag_value="", default=None, metavar="[FILE.json]",
              help="Write a Perfetto trace (default name: PROGRAM.trace.json). `--trace FILE` takes FILE only"
                   " when it ends in .json; `--trace=FILE` names any file.")
@click.option("--timeline", type=click.Path(), default=None, metavar="FILE.png|.svg|.pdf",
              help="Draw the timeline as a picture, in the format of the file's extension.")
@click.option("--timing-only", is_flag=True,
              help="Only time the program: no values, inputs, outputs or check (fast, for large programs).")
@define_option
@quiet_option
@config_file_option
@set_option
def run(program: str, input_files: tuple[str, ...], out_file: str | None, seed: int, sidecar: str | None,
        no_check: bool, trace: str | None, timeline: str | None, timing_only: bool, defines: tuple[str, ...],
        quiet: bool, config_files: tuple[str, ...], sets: tuple[str, ...]) -> None:
    """Run PROGRAM (.s or .o) on the simulated NeuronCore: compute its outputs, check them, time it,
    and report what bounds it.

    Exit status: 0 when the outputs match the reference bit for bit (or there is none) and the
    program has no races, 3 when the outputs differ, 4 when it has races (whether or not the outputs
    differ: a race explains a mismatch), 1 for an error in the program, its inputs or its run.
    """
    from ncsim import progress, warmup
    from ncsim.runtime.heap import keep_freed_memory
    from ncsim.runtime.run import run as run_kernel
    from ncsim.runtime.run import save_outputs

    keep_freed_memory()  # the phases reuse what the previous one freed (docs/running.md)
    config = make_config(config_files, sets)
    params = parse_defines(defines)
    given = {}
    for item in input_files:
        name, eq, path = item.partition("=")
        if not eq or not name or not path:
            raise NcsimError(f"--input takes NAME=FILE.npy, not '{item}'")
        if name in given:
            raise NcsimError(f"--input gives '{name}' twice")
        given[name] = path
    if timing_only and (given or out_file):
        raise NcsimError("--timing-only computes no values: it takes no --input and writes no --out")
    trace_path = (trace or str(Path(program).with_suffix(".trace.json"))) if trace is not None else None
    for option, path in (("--out", out_file), ("--trace", trace_path), ("--timeline", timeline)):
        if path is not None:
            _check_output(option, path)
    if timeline is not None:
        from ncsim.runtime.timeline import picture_format

        picture_format(timeline)
    # The timing model imports numba: prepare() loads its cached kernels quickly and says so when
    # they must be compiled first.
    import ncsim.runtime.timing  # noqa: F401

    with progress.enable_bars(not quiet), warmup.prepare(_announce(quiet)):
        try:
            result = run_kernel(program, given, config=config, seed=seed,
                                sidecar=sidecar if sidecar is not None else True, check=not no_check,
                                values=not timing_only, params=params)
        except DeadlockError as e:  # the trace and the picture of what ran, to look at the deadlock
            if e.partial is not None and (trace_path or timeline):
                _write_pictures(e.partial(), trace_path, timeline, " (up to the deadlock)")
            raise
        report = result.report.format(title=f"{program} (kernel {result.kernel})")
    counts = instruction_counts(result.program)  # not result.obj: a loaded program keeps no object
    click.echo(f"{program}: kernel {result.kernel}, {sum(counts.values())} instructions ({format_counts(counts)})")
    origins = Counter(result.input_origin.values())
    if origins:
        click.echo("inputs: " + "; ".join(
            f"{', '.join(n for n, o in result.input_origin.items() if o == origin)} from {origin}" for origin in origins))
    for w in result.warnings:
        click.echo(w, err=True)
    if timing_only:
        click.echo(f"timed {result.instructions} instructions in {result.timing_seconds:.2f} s of host time"
                   " (--timing-only: no values)")
    else:
        click.echo(f"simulated {result.instructions} instructions: values in {result.seconds:.2f} s, timing in"
                   f" {result.timing_seconds:.2f} s of host time")
    if result.outputs:
        out_path = out_file or str(Path(program).with_suffix(".npz"))
        save_outputs(out_path, result)
        shapes = ", ".join(f"{n} {a.dtype}{list(a.shape)}" for n, a in result.outputs.items())
        click.echo(f"outputs: {shapes} -> {out_path}")
    if result.check is not None:
        click.echo(result.check.report())
    elif not no_check and not timing_only:
        click.echo("no reference to check against (a sidecar with reference() gives one)")
    click.echo("")
    click.echo(report)
    _write_pictures(result.timing, trace_path, timeline)
    # A race explains a mismatch (the values depend on timing), so the race's status wins; both were printed.
    status = 0
    if result.check is not None and not result.check.ok:
        status = 3
    if result.races:
        click.echo(result.races.error().format(), err=True)
        click.echo(result.races.format(), err=True)
        status = 4
    if status:
        sys.exit(status)


@cli.command("nki", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("script", type=click.Path())
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--timing-only", is_flag=True, help="Time every kernel the script runs; compute no values.")
@click.option("--emit-asm", "emit_asm", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Write each kernel's program as ncsim assembly, DIR/KERNEL.s (`ncsim asm` makes the same object).")
@click.option("--show-sync", is_flag=True,
              help="Print, for each kernel, the semaphore waits synchronisation inserted and why, at the kernel's lines.")
@click.option("--no-schedule", is_flag=True,
              help="Issue each kernel's instructions in the order its Python made them (by default they are"
                   " reordered as NKI's scheduler reorders independent operations: docs/nki.md \"Scheduling\").")
@click.option("--no-plan-spills", is_flag=True,
              help="When SBUF is full, spill the tile used least recently, from one trace (by default a kernel"
                   " that spills is traced again to spill the tile used farthest ahead: docs/nki.md \"Buffer policy\").")
@quiet_option
@config_file_option
@set_option
def nki_cmd(script: str, script_args: tuple[str, ...], timing_only: bool, emit_asm: str | None, show_sync: bool,
            no_schedule: bool, no_plan_spills: bool, quiet: bool, config_files: tuple[str, ...],
            sets: tuple[str, ...]) -> None:
    """Run an NKI script as `python SCRIPT ARGS...` would, with `neuronxcc.nki` aliased to ncsim's NKI
    front end: its kernels run on the simulated NeuronCore. ncsim's options go before SCRIPT."""
    import runpy

    from ncsim import nki
    from ncsim.runtime.heap import keep_freed_memory

    if not Path(script).is_file():
        raise NcsimError("no such script", file=script)
    keep_freed_memory()  # the kernels' runs reuse what the previous one freed (docs/running.md)
    nki.options.update(timing_only=timing_only, announce=not quiet, config=make_config(config_files, sets),
                       emit_asm=emit_asm, show_sync=show_sync, schedule=not no_schedule,
                       plan_spills=not no_plan_spills)
    nki.install_alias()
    sys.argv = [script, *script_args]
    sys.path.insert(0, str(Path(script).resolve().parent))
    try:
        runpy.run_path(script, run_name="__main__")
    except (NcsimError, SystemExit, KeyboardInterrupt):
        raise
    except BaseException:  # noqa: BLE001 - the script's own error: shown as Python shows it
        traceback.print_exc()
        sys.exit(1)


@cli.command("lower")
@click.argument("target", metavar="FILE.py:FUNCTION")
@click.option("--shape", "shapes", multiple=True, metavar="D0,D1,...[:DTYPE]",
              help="The shape of one argument, in order (one --shape each); DTYPE f32 (default), f16, bf16 or bool.")
@click.option("-o", "--output", type=click.Path(), default=None, help="The .s to write (default: FUNCTION.s).")
@quiet_option
@config_file_option
@set_option
def lower_cmd(target: str, shapes: tuple[str, ...], output: str | None, quiet: bool, config_files: tuple[str, ...],
              sets: tuple[str, ...]) -> None:
    """Lower a torch function (ncsim.torch.lower, docs/torch.md) for arguments of these shapes and write
    its program as ncsim assembly (`ncsim asm` assembles it). Needs the torch extra."""
    import importlib.util

    from ncsim.torch import lower, require_torch

    script, sep, name = target.rpartition(":")
    if not sep or not script or not name:
        raise NcsimError(f"'{target}': give the function as FILE.py:FUNCTION")
    if not Path(script).is_file():
        raise NcsimError("no such file", file=script)
    torch = require_torch()
    dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "bool": torch.bool}
    examples = []
    for i, spec in enumerate(shapes):
        dims, _, dt = spec.partition(":")
        try:
            shape = [int(d) for d in dims.split(",")]
        except ValueError:
            raise NcsimError(f"--shape {spec!r} (argument {i}): dimensions are integers separated by commas") from None
        if any(d <= 0 for d in shape):
            raise NcsimError(f"--shape {spec!r} (argument {i}): every dimension is at least 1")
        if (dt or "f32") not in dtypes:
            raise NcsimError(f"--shape {spec!r} (argument {i}): dtype {dt!r} is none of {', '.join(dtypes)}")
        examples.append(torch.zeros(shape, dtype=dtypes[dt or "f32"]))
    sys.path.insert(0, str(Path(script).resolve().parent))
    # imported as a module of its own name (torch.export's tracer looks the function's module up)
    spec = importlib.util.spec_from_file_location(Path(script).stem, script)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except (NcsimError, SystemExit, KeyboardInterrupt):
        raise
    except BaseException:  # noqa: BLE001 - the script's own error: shown as Python shows it
        traceback.print_exc()
        sys.exit(1)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise NcsimError(f"{script} defines no function {name}")
    prog = lower(fn, *examples, config=make_config(config_files, sets))
    out = output or f"{name}.s"
    _write(out, lambda: prog.save(out))
    if not quiet:
        click.echo(f"ncsim: lowered {name} ({', '.join(shapes) or 'no arguments'}) to {out}", err=True)


@cli.command("sweep")
@click.argument("programs", nargs=-1)
@click.option("--grid", "grids", multiple=True, metavar="NAME=V1,V2,...|FILE.toml",
              help="A swept parameter and its values, or a grid file (lists, ranges, log ranges, zip); repeatable."
                   " The grid is the product of the entries.")
@click.option("--zip", "zip_all", is_flag=True, help="Vary all --grid entries together (lists of one length).")
@click.option("--values", is_flag=True, help="Compute values too (and check them against the sidecar's reference).")
@click.option("--out", "-o", "out_file", type=click.Path(), default="sweep.csv", show_default=True,
              help="The results table: .csv, or .parquet (with pyarrow). Its cache is OUT.cache.jsonl.")
@click.option("--plot", "plot_file", type=click.Path(), default=None, metavar="FILE.png",
              help="Draw the simulated time against each parameter, per program.")
@click.option("--scheduler", default=None, metavar="tcp://HOST:PORT",
              help="Run on this Dask cluster (default: a local cluster, one worker per core, on 127.0.0.1).")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Workers of the local cluster (default: cores).")
@click.option("--dashboard", is_flag=True, help="Serve the local cluster's Dask dashboard on 127.0.0.1:8787.")
@click.option("--no-cache", is_flag=True, help="Run every point again; neither read nor write the cache.")
@define_option
@quiet_option
@config_file_option
@set_option
def sweep_cmd(programs: tuple[str, ...], grids: tuple[str, ...], zip_all: bool, values: bool, out_file: str,
              plot_file: str | None, scheduler: str | None, workers: int | None, dashboard: bool, no_cache: bool,
              defines: tuple[str, ...], quiet: bool, config_files: tuple[str, ...], sets: tuple[str, ...]) -> None:
    """Run PROGRAMS (.s, .o, FILE.py:FUNCTION) under every configuration of a grid, on Dask: one
    timing-only run per point; the table, a summary of each program's sensitivity to each parameter,
    and optionally a picture. docs/sweep.md has the details."""
    from ncsim import progress, sweeps
    from ncsim.runtime.heap import keep_freed_memory

    keep_freed_memory()  # this process assembles the programs and gathers the rows (docs/running.md)
    _check_output("--out", out_file)
    if plot_file is not None:
        _check_output("--plot", plot_file)
    with progress.enable_bars(not quiet):
        df = sweeps.command(programs, grids, zip_all, values, out_file, plot_file, scheduler, workers, dashboard,
                            not no_cache, make_config(config_files, sets), parse_defines(defines))
    click.echo(sweeps.summary(df))
    click.echo(f"\nresults: {out_file} ({len(df)} rows)" + (f"; plot: {plot_file}" if plot_file else ""))


@cli.command("warmup")
@quiet_option
def warmup_cmd(quiet: bool) -> None:
    """Compile all of ncsim's kernels now (up to half a minute, once per installation), so that
    the runs that follow start at once. `make` does this after installing."""
    from ncsim import progress, warmup

    message = None if quiet else "ncsim warmup: compiling the kernels (up to half a minute) ..."
    with progress.enable_bars(not quiet):
        result = warmup.warm_up(message=message)
    click.echo(result.format())


def _write_pictures(timing: TimingResult, trace_path: str | None, timeline: str | None, what: str = "") -> None:
    """Write the Perfetto trace and the timeline picture of a timed run, those asked for."""
    if trace_path is not None:
        from ncsim.runtime.trace import LARGE_TRACE_BYTES, write_trace

        size = _write(trace_path, lambda: write_trace(timing, trace_path, timing.program.obj))
        click.echo(f"trace{what}: {trace_path} ({size / 1e6:.1f} MB; open it in https://ui.perfetto.dev)")
        if size > LARGE_TRACE_BYTES:
            click.echo(f"note: the trace is over {LARGE_TRACE_BYTES / 1e6:.0f} MB; Perfetto may be slow to open it",
                       err=True)
    if timeline is not None:
        from ncsim.runtime.timeline import write_timeline

        _write(timeline, lambda: write_timeline(timing, timeline, timing.program.obj))
        click.echo(f"timeline{what}: {timeline}")


def _write(path: str, write: Callable[[], Any]) -> Any:
    """Run a writer of `path`, turning a file-system failure into an NcsimError that names the file."""
    try:
        return write()
    except OSError as e:
        raise NcsimError(f"cannot write: {e.strerror}", file=path) from None


def instruction_counts(obj: ObjectFile | Program) -> Counter:
    """Instructions per engine (those that have any) of an object or a decoded program."""
    from ncsim.asm import objfile

    if isinstance(obj, objfile.ObjectFile):
        return Counter({e: len(obj.lines[e]) for e in objfile.ENGINES if obj.lines[e]})
    first = obj.first.tolist()
    return Counter({e: first[i + 1] - first[i] for i, e in enumerate(objfile.ENGINES) if first[i + 1] > first[i]})


def format_counts(counts: Counter) -> str:
    return ", ".join(f"{e} {n}" for e, n in counts.items()) or "none"


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except NcsimError as e:
        click.echo(e.format(), err=True)
        sys.exit(1)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - the last line of defence: say it is ours
        if os.environ.get("NCSIM_DEBUG"):
            traceback.print_exc()
        click.echo(f"ncsim: internal error (a bug in ncsim, not in your input): {type(e).__name__}: {e}", err=True)
        sys.exit(2)
