"""An NKI kernel's program as ncsim assembly: `ncsim nki --emit-asm DIR SCRIPT` and `emit_asm`.

The text is ncsim's disassembly of the kernel's object (`ncsim.asm.disasm`): every instruction in its
canonical form after a `.loc` naming the kernel's Python line, the tensors at their addresses, the
synchronisation explicit (`.sync manual`). `ncsim asm` assembles it back to the very same object.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ncsim.asm.disasm import disassemble
from ncsim.errors import NcsimError


def asm_text(run: Any) -> str:
    """The `.s` text of one simulated kernel call (an `NkiRun`, e.g. `nki.last_run()`)."""
    return disassemble(run.obj, f"<kernel {run.kernel}>")


def emit_asm(kernel: Any, *args: Any, **kwargs: Any) -> str:
    """Trace `kernel` with these arguments (numpy arrays or nki.typing.tensor placeholders) and return
    its program as `.s` text. The program is timed, not computed (values=False)."""
    from ncsim.nki import simulate

    return asm_text(simulate(kernel, args, kwargs, values=False))


_written: dict[str, int] = {}


def save_asm(run: Any, directory: str) -> Path:
    """Write the run's `.s` into `directory` as KERNEL.s (KERNEL_2.s, ... for later calls of the same
    kernel in one process)."""
    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise NcsimError(f"cannot make the --emit-asm folder: {e.strerror}", file=directory) from None
    key = str(d.resolve() / run.kernel)
    n = _written[key] = _written.get(key, 0) + 1
    path = d / (f"{run.kernel}.s" if n == 1 else f"{run.kernel}_{n}.s")
    try:
        path.write_text(asm_text(run))
    except OSError as e:
        raise NcsimError(f"cannot write: {e.strerror}", file=str(path)) from None
    return path
