"""The methods of ncsim's dataclasses, compiled once and kept on disk.

`@dataclass` writes the source of each method it adds (`__init__`, `__repr__`, `__eq__`, a frozen
class's `__setattr__` and `__delattr__`, `__hash__`) and compiles it with `exec` when the class is
defined, at every import. ncsim defines about 70 dataclasses on the way to a run: measured inside a
warm `ncsim run programs/giou.s --trace` (Python 3.11, the 2-core machine), making them took 72-91 ms,
about three quarters of it in `exec`, and a quarter of what the command costs beyond `import numba`;
with the table, 21-31 ms.

`install()` (ncsim/__init__.py calls it, before any of ncsim's dataclasses exists) puts a function
named `exec` in the `dataclasses` module's namespace, where its functions look the name up before
the builtin. For source made for a class of one of ncsim's modules (the class's module globals are
those of an `ncsim` module), it takes the code object compiled from exactly that text from a table
kept in `ncsim/__pycache__` (beside the modules' own .pyc, `importlib.util.cache_from_source`),
compiling and adding it when the table has none; every other call goes to the builtin `exec` as
before. The text is the key, so an entry cannot stand for other source: a class whose fields change
makes new text and a new entry. The code object is what `exec` compiles from the text (same file
name, "<string>", and no inherited `__future__` flags), run in the same namespaces: the class gets the
same methods.

The table is loaded on the first call for an ncsim class, each entry's code marshalled apart and
unmarshalled when used (loading a table of 301 entries takes 0.3-0.4 ms, each entry used about 7 us
more). It is written once, when the process exits, if it gained entries: to a temporary file
renamed over the old one, so that processes writing at once each leave a whole table (the last
one's). Entries of classes since changed stay until the table passes MAX_ENTRIES; it is then written
with this process's entries only. A table written by another Python (its bytecode magic number
differs) or unreadable is ignored and made again. Where the folder cannot be written (an installed
package owned by another user), or Python writes no bytecode (`PYTHONDONTWRITEBYTECODE`,
`sys.dont_write_bytecode`), nothing is written and the methods are compiled at each import, as
without this module.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import dataclasses
import marshal
import os
import sys
import types
from typing import Any

_PREFIX = "ncsim"
MAX_ENTRIES = 3000  # about 4 MB; all of ncsim's modules imported make 391 (527 KB)
_table: dict[str, bytes] | None = None  # source text -> its code object, marshalled; None until first needed
_added = 0  # entries compiled by this process and not yet written
_used: set[str] = set()  # the entries this process used
_path: str | None = None
_registered = False  # whether _write is registered to run at exit


def _cache_path() -> str | None:
    """Where the table is kept, or None where there is no place for it."""
    import importlib.util

    try:
        pyc = importlib.util.cache_from_source(os.path.join(os.path.dirname(__file__), "dataclass_methods.py"))
    except NotImplementedError:  # no bytecode cache in this Python (sys.implementation.cache_tag is None)
        return None
    return os.path.splitext(pyc)[0] + ".marshal"  # not a .pyc: no module of that name imports it


def _magic() -> bytes:
    import importlib.util

    return importlib.util.MAGIC_NUMBER


def _load() -> dict[str, bytes]:
    """The table on disk, or an empty one if there is none that this Python wrote."""
    global _path
    _path = _cache_path()
    if _path is None:
        return {}
    try:
        with open(_path, "rb") as f:
            data = f.read()
        magic = _magic()
        if not data.startswith(magic):
            return {}
        table = marshal.loads(data[len(magic):])
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if not isinstance(table, dict):
        return {}
    return table


def _write() -> None:
    """Write the table if this process added to it (atexit); never raises."""
    global _added
    if not _added or _path is None or _table is None or sys.dont_write_bytecode:
        return
    table = _table if len(_table) <= MAX_ENTRIES else {k: v for k, v in _table.items() if k in _used}
    try:
        data = _magic() + marshal.dumps(table)
    except ValueError:  # an entry marshal cannot write
        return
    if write_cache_file(_path, data):
        _added = 0


def write_cache_file(path: str | os.PathLike[str], data: bytes) -> bool:
    """Replace the cache file at `path` with `data` whole: written to a temporary file beside it (its
    folder made if need be) and renamed over it, so that a process reading it, or another writing it
    at the same time, never sees part of a file. False, and nothing left behind, where it cannot be
    written (a read-only installation: the cache is then made again in each process)."""
    path = os.fspath(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False


def cached_exec(source: Any, globals: Any = None, locals: Any = None, /) -> None:
    """`exec` for the dataclasses module: the code of an ncsim class's methods from the table (see the
    module docstring), anything else passed to the builtin as it is."""
    global _table, _added, _registered
    module = str(globals.get("__name__", "")) if isinstance(globals, dict) else ""
    if not isinstance(source, str) or not (module == _PREFIX or module.startswith(_PREFIX + ".")):
        return builtins.exec(source, globals, locals)  # noqa: S102 - what dataclasses asked for, as it asked
    if _table is None:
        _table = _load()
        if not _registered:
            atexit.register(_write)
            _registered = True
    _used.add(source)
    data = _table.get(source)
    code = None
    if data is not None:
        try:
            code = marshal.loads(data)
        except (ValueError, EOFError, TypeError):
            code = None
    if code is None or not isinstance(code, types.CodeType):
        code = compile(source, "<string>", "exec", dont_inherit=True)
        _table[source] = marshal.dumps(code)
        _added += 1
    return builtins.exec(code, globals, locals)  # noqa: S102 - the code of dataclasses' own source


def install() -> None:
    """Make `dataclasses` take ncsim's classes' methods from the table (once; see the module docstring)."""
    if getattr(dataclasses, "exec", None) is not cached_exec:
        dataclasses.exec = cached_exec  # type: ignore[attr-defined]
