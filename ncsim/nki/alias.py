"""The `neuronxcc.nki` import alias, installed only on request (`ncsim nki FILE.py` or
`ncsim.nki.install_alias()`): afterwards `import neuronxcc.nki as nki`, `neuronxcc.nki.language`,
`.isa`, `.typing`, `.compiler` and `from neuronxcc.nki.language import par_dim` resolve to ncsim.nki."""

from __future__ import annotations

import sys
import types


def install_alias() -> None:
    """Make `neuronxcc.nki` (and its language, isa, typing and compiler modules) name ncsim.nki's."""
    from ncsim import nki
    from ncsim.nki import compiler, isa, language, typing

    existing = sys.modules.get("neuronxcc")
    if existing is not None and not getattr(existing, "__ncsim_alias__", False):
        raise ImportError("a real neuronxcc package is already imported; ncsim will not shadow it")
    pkg = existing or types.ModuleType("neuronxcc", "ncsim's alias of the Neuron compiler's NKI package")
    pkg.__path__ = []  # a package, so that `import neuronxcc.nki` looks in sys.modules
    pkg.__ncsim_alias__ = True
    pkg.nki = nki
    sys.modules["neuronxcc"] = pkg
    sys.modules["neuronxcc.nki"] = nki
    sys.modules["neuronxcc.nki.language"] = language
    sys.modules["neuronxcc.nki.isa"] = isa
    sys.modules["neuronxcc.nki.typing"] = typing
    sys.modules["neuronxcc.nki.compiler"] = compiler


def remove_alias() -> None:
    """Undo install_alias (for tests)."""
    if getattr(sys.modules.get("neuronxcc"), "__ncsim_alias__", False):
        for name in ("neuronxcc", "neuronxcc.nki", "neuronxcc.nki.language", "neuronxcc.nki.isa",
                     "neuronxcc.nki.typing", "neuronxcc.nki.compiler"):
            sys.modules.pop(name, None)
