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

from ncsim.errors import NcsimError

# Each command imports what it uses when it runs: `ncsim --help`, `ncsim isa` and `ncsim config`
# load neither numba nor the engines, and matplotlib is loaded only for --timeline.
if TYPE_CHECKING:
    from ncsim.asm.objfile import ObjectFile
    from ncsim.config import Config

config_file_option = click.option("--config", "config_files", type=click.Path(), multiple=True,
                                  help="TOML file of hardware parameters (see `ncsim config`); repeatable:"
                                       " the files merge in order, a later one's values winning.")
set_option = click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                          help="Override one hardware parameter; repeatable.")


quiet_option = click.option("--quiet", "-q", is_flag=True,
                            help="No progress bars and no notice that kernels are being compiled.")


def make_config(config_files: tuple[str, ...], sets: tuple[str, ...]) -> Config:
    from ncsim.config import load_config

    return load_config(list(config_files), list(sets))


def _announce(quiet: bool) -> bool:
    """Whether to say, on stderr, that numba is compiling ncsim's kernels: to a person at a terminal."""
    return not quiet and sys.stderr.isatty()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ncsim")
def cli() -> None:
    """ncsim: a simulator of one AWS NeuronCore-v2 (Trainium1 / Inferentia2)."""


@cli.command()
@click.argument("source", type=click.Path())
@click.option("-o", "--output", type=click.Path(), help="Object file to write (default: SOURCE with .o).")
@click.option("--show-sync", is_flag=True, help="Print the semaphore waits the assembler inserted, and why.")
@quiet_option
@config_file_option
@set_option
def asm(source: str, output: str | None, show_sync: bool, quiet: bool, config_files: tuple[str, ...],
        sets: tuple[str, ...]) -> None:
    """Assemble SOURCE (.s) into an ELF object."""
    from ncsim import progress, warmup
    from ncsim.asm.assembler import Assembler, read_source
    from ncsim.asm.elf import write_elf

    config = make_config(config_files, sets)
    assembler = Assembler(config)
    text = read_source(source)
    with progress.enable_bars(not quiet), warmup.prepare(_announce(quiet)), \
            progress.Progress(None, f"assembling {source}"):
        obj = assembler.assemble(text, source)
    if show_sync:
        click.echo(assembler.program.sync_report)
    out = Path(output) if output else Path(source).with_suffix(".o")
    data = write_elf(obj)
    try:
        out.write_bytes(data)
    except OSError as e:
        raise NcsimError(f"cannot write {out}: {e.strerror}", file=str(out)) from None
    counts = instruction_counts(obj)
    click.echo(f"{out}: kernel {obj.kernel}, {sum(counts.values())} instructions"
               f" ({format_counts(counts)}), {len(obj.tensors)} tensors, {len(data)} bytes")


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
    spec = isa.BY_MNEMONIC.get(name)
    if spec is None:
        raise NcsimError(f"no instruction '{name}'", notes=(suggest(name, isa.BY_MNEMONIC),))
    click.echo(describe_instruction(spec))


@cli.command("config")
@config_file_option
@set_option
def config_cmd(config_files: tuple[str, ...], sets: tuple[str, ...]) -> None:
    """Show the hardware parameters in force, with their sources."""
    from ncsim.config import describe

    click.echo(describe(make_config(config_files, sets)))


@cli.command()
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
@click.option("--trace", "trace", is_flag=False, flag_value="", default=None, metavar="[FILE]",
              help="Write a Perfetto trace (default name: PROGRAM.trace.json).")
@click.option("--timeline", type=click.Path(), default=None, metavar="FILE.png",
              help="Draw the timeline as a PNG picture.")
@click.option("--timing-only", is_flag=True,
              help="Only time the program: no values, inputs, outputs or check (fast, for large programs).")
@quiet_option
@config_file_option
@set_option
def run(program: str, input_files: tuple[str, ...], out_file: str | None, seed: int, sidecar: str | None,
        no_check: bool, trace: str | None, timeline: str | None, timing_only: bool, quiet: bool,
        config_files: tuple[str, ...], sets: tuple[str, ...]) -> None:
    """Run PROGRAM (.s or .o) on the simulated NeuronCore: compute its outputs, check them, time it,
    and report what bounds it.

    Exit status: 0 when the outputs match the reference bit for bit (or there is none) and the
    program has no races, 3 when the outputs differ, 4 when it has races, 1 for an error in the
    program or its inputs.
    """
    from ncsim import progress, warmup
    from ncsim.runtime.run import run as run_kernel
    from ncsim.runtime.run import save_outputs

    config = make_config(config_files, sets)
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
    # The timing model imports numba: prepare() loads its cached kernels quickly and says so when
    # they must be compiled first.
    import ncsim.runtime.timing  # noqa: F401

    with progress.enable_bars(not quiet), warmup.prepare(_announce(quiet)):
        result = run_kernel(program, given, config=config, seed=seed,
                            sidecar=sidecar if sidecar is not None else True, check=not no_check,
                            values=not timing_only)
        report = result.report.format(title=f"{program} (kernel {result.kernel})")
    counts = instruction_counts(result.obj)
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
    if trace is not None:
        from ncsim.runtime.trace import LARGE_TRACE_BYTES, write_trace

        trace_path = trace or str(Path(program).with_suffix(".trace.json"))
        size = _write(trace_path, lambda: write_trace(result.timing, trace_path, result.obj))
        click.echo(f"trace: {trace_path} ({size / 1e6:.1f} MB; open it in https://ui.perfetto.dev)")
        if size > LARGE_TRACE_BYTES:
            click.echo(f"note: the trace is over {LARGE_TRACE_BYTES / 1e6:.0f} MB; Perfetto may be slow to open it",
                       err=True)
    if timeline is not None:
        from ncsim.runtime.timeline import write_timeline

        _write(timeline, lambda: write_timeline(result.timing, timeline, result.obj))
        click.echo(f"timeline: {timeline}")
    status = 0
    if result.races:
        click.echo(result.races.error().format(), err=True)
        click.echo(result.races.format(), err=True)
        status = 4
    if result.check is not None and not result.check.ok:
        status = 3
    if status:
        sys.exit(status)


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


def _write(path: str, write: Callable[[], Any]) -> Any:
    """Run a writer of `path`, turning a file-system failure into an NcsimError that names the file."""
    try:
        return write()
    except OSError as e:
        raise NcsimError(f"cannot write: {e.strerror}", file=path) from None


def instruction_counts(obj: ObjectFile) -> Counter:
    from ncsim.asm import objfile

    return Counter({e: len(obj.lines[e]) for e in objfile.ENGINES if obj.lines[e]})


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
