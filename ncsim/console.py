"""The `ncsim` command's entry point (pyproject's [project.scripts]): `ncsim.cli.main`, with Python's
garbage collector held off while the command imports its modules.

Importing numba and ncsim makes a few hundred thousand objects (types, functions, dispatchers,
dataclasses), every one of them alive until the process ends. The collector, run as they are made,
walks them again and again and frees nothing: measured on `ncsim run programs/giou.s --trace`, about
115 collections during `import numba` (30-45 ms) and about 50 more during ncsim's imports and the run
(50-65 ms, one of them a full collection). So the collector is off from the start, and once the
command has imported what it uses (`imports_done`: `warmup.prepare` calls it for the commands that
run numba, the command group for the others) those objects are frozen (`gc.freeze`: never walked
again) and the collector runs as usual on what the command itself makes.

Only this entry point does that. `ncsim.cli.main` called from Python (the tests, a notebook) leaves
the collector alone: `imports_done` does nothing unless this entry point held it off.
"""

from __future__ import annotations

import gc

_held = False  # whether main() turned the collector off and it is still off


def imports_done() -> None:
    """The command's modules are imported: freeze what exists and let the collector run again (once;
    nothing unless this entry point held the collector off)."""
    global _held
    if _held:
        _held = False
        gc.freeze()
        gc.enable()


def main() -> None:
    global _held
    _held = gc.isenabled()
    gc.disable()
    from ncsim.cli import main as cli_main

    try:
        cli_main()
    finally:
        imports_done()
