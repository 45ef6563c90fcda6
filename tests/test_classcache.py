"""ncsim.classcache: the methods of ncsim's dataclasses come from a table of compiled code, and behave
as those `exec` compiles from the same source; other modules' classes are left alone; the table
survives a bad file, a read-only folder and PYTHONDONTWRITEBYTECODE."""

from __future__ import annotations

import dataclasses
import marshal
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from ncsim import classcache

SOURCE = textwrap.dedent("""
    from __future__ import annotations
    from dataclasses import dataclass, field

    @dataclass(frozen=True)
    class Point:
        x: int
        y: int = 2
        tags: tuple = ()

    @dataclass
    class Bag:
        items: list = field(default_factory=list)
        name: str = "bag"

    @dataclass(eq=False)
    class Plain:
        a: float
""")


def _module(name: str) -> types.ModuleType:
    """SOURCE's classes defined in a new module named `name` (registered in sys.modules while defined,
    as a module's classes are: dataclasses reads the module's globals from there)."""
    mod = types.ModuleType(name)
    sys.modules[name] = mod
    try:
        exec(compile(SOURCE, f"<{name}>", "exec"), mod.__dict__)  # noqa: S102 - the test's own source
    finally:
        del sys.modules[name]
    return mod


@pytest.fixture
def table(tmp_path, monkeypatch):
    """A fresh, empty table kept in tmp_path; the module's state restored after."""
    path = tmp_path / "pycache" / "dataclass_methods.marshal"
    monkeypatch.setattr(classcache, "_table", None)
    monkeypatch.setattr(classcache, "_added", 0)
    monkeypatch.setattr(classcache, "_used", set())
    monkeypatch.setattr(classcache, "_path", None)
    monkeypatch.setattr(classcache, "_cache_path", lambda: str(path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    compiled: list[str] = []
    real_compile = compile

    def counting_compile(source, *args, **kwargs):
        compiled.append(source)
        return real_compile(source, *args, **kwargs)

    monkeypatch.setattr(classcache, "compile", counting_compile, raising=False)
    return types.SimpleNamespace(path=path, compiled=compiled)


def _same_behaviour(mod: types.ModuleType, ref: types.ModuleType) -> None:
    p, q = mod.Point(1, tags=("a",)), ref.Point(1, tags=("a",))
    assert repr(p).replace(mod.__name__, "") == repr(q).replace(ref.__name__, "")
    assert (p.x, p.y, p.tags) == (q.x, q.y, q.tags)
    assert p == mod.Point(1, 2, ("a",)) and p != mod.Point(2)
    assert hash(p) == hash(mod.Point(1, 2, ("a",)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 3
    a, b = mod.Bag(), mod.Bag()
    a.items.append(1)
    assert b.items == [] and a.name == "bag" and a != b and mod.Bag([1]) == a
    assert mod.Plain(1.0) != mod.Plain(1.0)  # eq=False: identity
    assert [f.name for f in dataclasses.fields(mod.Point)] == ["x", "y", "tags"]
    for cls in ("Point", "Bag", "Plain"):
        for name in ("__init__", "__repr__", "__eq__", "__setattr__", "__hash__"):
            fm, fr = getattr(getattr(mod, cls), name, None), getattr(getattr(ref, cls), name, None)
            if isinstance(fr, types.FunctionType):
                assert fm.__code__.co_code == fr.__code__.co_code, (cls, name)
                assert fm.__code__.co_consts == fr.__code__.co_consts, (cls, name)
                assert (fm.__globals__ is mod.__dict__) == (fr.__globals__ is ref.__dict__), (cls, name)
    with pytest.raises(TypeError):
        mod.Point()


def test_ncsim_classes_use_the_table_and_behave_as_compiled_by_exec(table):
    assert dataclasses.exec is classcache.cached_exec  # installed by `import ncsim`
    ref = _module("not_ncsim_probe")  # the builtin exec: the reference
    assert table.compiled == [] and classcache._table is None
    mod = _module("ncsim._classcache_probe")
    made = len(table.compiled)
    assert made >= 8 and classcache._added == made  # Point: init, repr, eq, setattr, delattr, hash; ...
    _same_behaviour(mod, ref)
    again = _module("ncsim._classcache_probe_again")  # the same source: nothing compiled again
    assert len(table.compiled) == made
    _same_behaviour(again, ref)
    classcache._write()
    assert table.path.exists() and classcache._added == 0


def test_the_table_survives_a_new_process_and_a_bad_file(table):
    _module("ncsim._classcache_probe")
    made = len(table.compiled)
    classcache._write()
    classcache._table = None  # as a new process: the table from the file
    third = _module("ncsim._classcache_probe_3")
    assert len(table.compiled) == made and classcache._added == 0
    _same_behaviour(third, _module("reference_probe"))
    for bad in (b"", b"garbage", classcache._magic() + b"\x00junk", b"\x00\x00\r\n" + marshal.dumps({}),
                classcache._magic() + marshal.dumps([1, 2]),
                classcache._magic() + marshal.dumps({k: b"not code" for k in classcache._table})):
        table.path.write_bytes(bad)
        classcache._table = None
        table.compiled.clear()
        mod = _module("ncsim._classcache_probe_bad")
        assert len(table.compiled) == made, bad[:12]  # compiled again, nothing raised
        _same_behaviour(mod, _module("reference_probe"))


def test_nothing_written_without_bytecode_or_a_writable_folder(table, monkeypatch, tmp_path):
    _module("ncsim._classcache_probe")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    classcache._write()
    assert not table.path.exists() and classcache._added > 0
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        monkeypatch.setattr(classcache, "_path", str(locked / "sub" / "t.marshal"))
        if os.access(locked, os.W_OK):  # root writes anywhere: a path under a file cannot be made
            (tmp_path / "file").write_text("")
            monkeypatch.setattr(classcache, "_path", str(tmp_path / "file" / "t.marshal"))
        classcache._write()  # no exception, nothing left behind
        assert classcache._added > 0
    finally:
        locked.chmod(0o700)
    assert not list(tmp_path.glob("**/*.tmp"))


def test_a_table_past_its_bound_keeps_this_process_entries(table, monkeypatch):
    monkeypatch.setattr(classcache, "MAX_ENTRIES", 5)
    classcache._table = {f"stale {i}": b"" for i in range(10)}  # as loaded from table.path
    classcache._path = str(table.path)
    _module("ncsim._classcache_probe")
    classcache._write()
    kept = marshal.loads(table.path.read_bytes()[len(classcache._magic()):])
    assert not any(k.startswith("stale") for k in kept) and len(kept) == len(table.compiled)


def test_other_modules_classes_pass_through(table):
    _module("ncsimilar_probe")  # not an ncsim module, though its name starts alike
    _module("numpy_like_probe")
    assert table.compiled == [] and classcache._table is None


def test_a_run_compiles_no_dataclass_method_once_the_table_is_written(tmp_path):
    """Two processes that import the run's modules: the second compiles none of ncsim's methods."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    probe = textwrap.dedent("""
        import sys
        from pathlib import Path
        from ncsim import classcache
        classcache._cache_path = lambda: sys.argv[1]
        n = []
        real = compile
        classcache.compile = lambda *a, **k: (n.append(1), real(*a, **k))[1]
        import ncsim.runtime.run, ncsim.runtime.timing, ncsim.runtime.report, ncsim.asm.assembler
        print(len(n), len(classcache._used))
    """)
    path = str(tmp_path / "t.marshal")
    first = subprocess.run([sys.executable, "-c", probe, path], env=env, capture_output=True, text=True, check=True)
    second = subprocess.run([sys.executable, "-c", probe, path], env=env, capture_output=True, text=True, check=True)
    made, used = map(int, first.stdout.split())
    assert made > 50 and used == made
    assert second.stdout.split()[0] == "0", second.stdout
    assert Path(path).exists()
