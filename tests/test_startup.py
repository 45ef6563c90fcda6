"""The command's fixed costs and its first run: light commands import nothing heavy, `ncsim warmup`
compiles every kernel, a compilation is announced once, cached kernels load without numba's
registry refresh. Also `run_in_pty`, which the progress-bar tests of the commands use."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
import textwrap
from pathlib import Path

import numba
import numpy as np
import pytest

from ncsim import warmup

NCSIM = Path(sys.executable).with_name("ncsim")
HEAVY = ("numba", "matplotlib", "torch", "tqdm", "ncsim.engines.alu", "ncsim.runtime.timing",
         "ncsim.runtime.machine", "ncsim.asm.sync")


def run_in_pty(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run the installed `ncsim ARGS` with its stderr on a pseudo-terminal (80 x 24; stdout to
    nowhere); give the exit status and everything written to the terminal."""
    if not NCSIM.exists():
        pytest.skip(f"the ncsim script is not installed at {NCSIM}")
    env = {k: v for k, v in (os.environ if env is None else env).items() if k != "NCSIM_DEBUG"}
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    try:
        proc = subprocess.Popen([str(NCSIM), *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=slave)
    finally:
        os.close(slave)
    chunks = []
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal has closed it
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    return proc.wait(timeout=120), b"".join(chunks).decode(errors="replace")


# --- what the light commands import -------------------------------------------------------------

def test_light_commands_import_no_numba_engines_or_matplotlib():
    script = textwrap.dedent(f"""
        import json, sys
        from ncsim.cli import main
        seen = {{}}
        for args in (["--help"], ["isa"], ["isa", "nc_matmul"], ["config"], ["config", "--set", "pmax=64"],
                     ["asm", "--help"], ["run", "--help"]):
            sys.argv = ["ncsim", *args]
            try:
                main()
            except SystemExit as e:
                assert not e.code, (args, e.code)
            seen[" ".join(args)] = [m for m in {HEAVY!r} if m in sys.modules]
        print("SEEN" + json.dumps(seen))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.rpartition("SEEN")[2])
    assert seen == {args: [] for args in seen}, seen


def test_run_imports_neither_matplotlib_nor_torch(tmp_path):
    """matplotlib only for --timeline; torch never; ml_dtypes only for a program with a narrow float
    (relu.s is all f32). Nor what only some runs need: the TOML parser and decimal (a --config or
    --set), ctypes.util (it starts a subprocess to find libc); nor numpy.ma, which numba's typing of
    an array argument would import (warmup._plain_ndarray_typeof); nor the GpSimd cores' interpreter
    (relu.s has no gpsimd_call)."""
    program = Path(__file__).resolve().parent.parent / "programs" / "relu.s"
    script = textwrap.dedent(f"""
        import sys
        from ncsim.cli import main
        sys.argv = ["ncsim", "run", {str(program)!r}, "--out", {str(tmp_path / "r.npz")!r},
                    "--trace", {str(tmp_path / "r.json")!r}]
        main()
        print("SEEN", [m for m in ("matplotlib", "torch", "ml_dtypes", "tomllib", "decimal", "ctypes.util", "numpy.ma",
                                  "ncsim.gpsimd.interp") if m in sys.modules])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("SEEN []"), done.stdout[-500:]


# --- the compile notice ---------------------------------------------------------------------------

def _fresh_function():
    """A new (uncached) numba function of this module: calling it compiles."""
    @numba.njit
    def twice(x):
        return x * 2

    return twice


def test_compile_notice_is_written_once_before_compiling(capsys):
    notice = warmup.CompileNotice(modules=(__name__,), message="compiling now")
    f = _fresh_function()
    with warmup.announce_compiles(notice):
        assert f(3) == 6
        assert f(1.5) == 3.0  # a second signature: a second compilation, no second notice
    g = _fresh_function()
    assert g(2) == 4  # after the block: not seen
    assert capsys.readouterr().err == "compiling now\n"
    assert len(notice.compiled) == 2 and notice.compiled[0].endswith("twice")


def test_compile_notice_ignores_other_modules(capsys):
    notice = warmup.CompileNotice(modules=("ncsim.",), message="compiling now")
    with warmup.announce_compiles(notice):
        assert _fresh_function()(3) == 6
    assert capsys.readouterr().err == ""
    assert notice.compiled == []


# --- fast loading of cached kernels ---------------------------------------------------------------

def test_cached_kernel_loads_without_the_registry_refresh(tmp_path):
    """A cached function loads and gives its result with fast_cache_loads(), and numba's registries
    (numba.np.linalg among them) are never imported, nor the module of the np.full it inlined
    (numba.np.arrayobj: its environment waits for it); without it, or on a cache miss, they are."""
    (tmp_path / "kern.py").write_text(textwrap.dedent("""
        import numba
        import numpy as np

        @numba.njit(cache=True)
        def total(x):
            s = 0.0
            for v in x:
                s += v
            return np.full(2, s)
    """))
    script = textwrap.dedent("""
        import sys
        fast = sys.argv[1] == "fast"
        if fast:
            import numba
            from ncsim import warmup
            assert warmup.fast_cache_loads() and warmup.fast_cache_loads()  # idempotent
        import numpy as np
        import kern
        out = kern.total(np.arange(4.0))
        assert out.tolist() == [6.0, 6.0], out
        print(sum(kern.total.stats.cache_hits.values()), "numba.np.linalg" in sys.modules,
              "numba.np.arrayobj" in sys.modules)
    """)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(tmp_path))

    def run(mode: str) -> str:
        done = subprocess.run([sys.executable, "-c", script, mode], cwd=tmp_path, env=env, capture_output=True,
                              text=True, check=False, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert run("fast") == ["0", "True", "True"]  # a miss: refreshed, compiled, cached
    assert run("fast") == ["1", "False", "False"]  # a hit: loaded, no refresh, no numba.np.arrayobj
    assert run("plain") == ["1", "True", "True"]  # numba's own way refreshes


def test_a_python_program_can_ask_for_the_commands_fast_loads():
    """docs/running.md: ncsim.warmup.fast_cache_loads() before the first ncsim.run, from Python, and
    the run goes as the command's: values checked, timed (what the loads skip is the test above's)."""
    program = Path(__file__).resolve().parent.parent / "programs" / "relu.s"
    script = textwrap.dedent(f"""
        import ncsim
        from ncsim.warmup import fast_cache_loads
        assert fast_cache_loads()
        result = ncsim.run({str(program)!r})
        assert result.check is not None and result.check.ok, result.check.report()
        print("RESULT", result.timing.total_ticks > 0, result.races.total)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-3:] == ["RESULT", "True", "0"], done.stdout[-500:]


def test_plain_arrays_are_typed_as_numba_types_them_without_numpy_ma():
    """warmup._plain_ndarray_typeof: every kind of plain array gets the type numba's own function
    gives (dtype, dimensions, layout, read-only); a masked, an object and a big-endian array get what
    numba's function gives them (an error for the masked and the big-endian one); typing plain arrays
    imports no numpy.ma. In a process of its own (the change is process-wide)."""
    script = textwrap.dedent("""
        import sys
        import numpy as np
        import numba
        from numba.core.typing import typeof
        from ncsim import warmup
        assert "numpy.ma" not in sys.modules
        assert warmup._plain_ndarray_typeof() and warmup._plain_ndarray_typeof()  # idempotent
        mine = typeof.typeof_impl.dispatch(np.ndarray)
        numbas = mine.__wrapped__
        c = typeof._TypeofContext(typeof.Purpose.argument)
        base = np.arange(120, dtype=np.float32).reshape(4, 5, 6)
        readonly = np.zeros(3, np.int16)
        readonly.flags.writeable = False
        arrays = [base, base[:, ::2], base.T, np.asfortranarray(base), np.zeros(()), np.zeros((0, 3)),
                  readonly, np.ones(4, np.bool_), np.zeros(2, np.complex64), np.zeros(3, np.uint64),
                  np.zeros(2, np.dtype([("a", np.int32), ("b", np.float64)])), np.zeros(5, "datetime64[ns]"),
                  np.zeros((2, 2), np.int8)[:, :1]]
        ours = [(numba.typeof(a), mine(a, c)) for a in arrays]
        assert "numpy.ma" not in sys.modules  # (numba's own function, called below, imports it)
        for a, (t, m) in zip(arrays, ours):
            assert t == m == numbas(a, c), (a.dtype, a.shape, a.strides)
        def outcome(f, a):
            try:
                return ("type", f(a, c))
            except Exception as e:
                return ("error", type(e), str(e))

        for a in (np.zeros(2, object), np.zeros(4, ">i4"), np.ma.masked_array([1.0, 2.0])):
            assert outcome(mine, a) == outcome(numbas, a), (a.dtype, outcome(mine, a), outcome(numbas, a))
        assert outcome(mine, np.ma.masked_array([1.0]))[0] == outcome(mine, np.zeros(1, ">i4"))[0] == "error"
        print("SAME", len(arrays))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-2:] == ["SAME", "13"], done.stdout[-500:]


def test_cached_kernel_bitcode_is_parsed_only_when_linked(tmp_path):
    """With fast_cache_loads() a cached function's LLVM bitcode is not parsed when it loads (its
    entry points are found from the object's symbols and it runs); a later compilation of a function
    that calls it parses the bitcode then, links it in, caches the caller (the environments of the
    numba helpers it inlined, never imported, are pickled with it), and the caller loads from that
    cache in the next process with the right result."""
    (tmp_path / "kern2.py").write_text(textwrap.dedent("""
        import numba
        import numpy as np

        @numba.njit(cache=True)
        def inner(x):
            return np.cumsum(x) * 2.0

        @numba.njit(cache=True)
        def outer(x):
            return inner(x).sum() + np.full(3, 1.0).sum()
    """))
    script = textwrap.dedent("""
        import sys
        import numba
        import numpy as np
        from ncsim import warmup
        assert warmup.fast_cache_loads()
        import kern2
        if sys.argv[1] == "inner":
            assert kern2.inner(np.arange(4.0)).tolist() == [0.0, 2.0, 6.0, 12.0]
            (library,) = [cres.library for cres in kern2.inner.overloads.values()]
            lazy = "_ncsim_bitcode" in vars(library)
            assert kern2.outer(np.arange(4.0)) == 23.0
            print(sum(kern2.inner.stats.cache_hits.values()), lazy, "_ncsim_bitcode" in vars(library),
                  library._shared_module is not None)
        else:
            assert kern2.outer(np.arange(4.0)) == 23.0
            print(sum(kern2.outer.stats.cache_hits.values()))
    """)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(tmp_path))

    def run(what: str) -> list[str]:
        done = subprocess.run([sys.executable, "-c", script, what], cwd=tmp_path, env=env, capture_output=True,
                              text=True, check=False, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    (tmp_path / "cache").mkdir()
    done = subprocess.run([sys.executable, "-c", "import numpy as np, kern2; kern2.inner(np.arange(4.0))"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr  # inner compiled and cached, outer not
    assert run("inner") == ["1", "True", "False", "True"]  # loaded without the bitcode; parsed to link outer
    assert run("outer") == ["1"]  # outer loads from the cache the previous process wrote


def test_runtime_is_compiled_once_then_loaded(tmp_path):
    """initialize_runtime compiles numba's runtime library and keeps its object code in the cache
    folder; the next process loads it instead of compiling, and functions compiled after it (they
    link the runtime) and loaded ones run. A damaged file falls back to numba's own initialisation."""
    script = textwrap.dedent(f"""
        import numba
        import numpy as np
        from numba.core.registry import cpu_target
        from pathlib import Path
        from ncsim import warmup

        how = warmup.initialize_runtime(cpu_target.target_context, Path({str(tmp_path / "cache")!r}))
        again = warmup.initialize_runtime(cpu_target.target_context, Path({str(tmp_path / "cache")!r}))

        @numba.njit
        def total(n):
            return np.ones(n).sum() + len([1, 2])

        assert total(5) == 7.0
        print(how, again)
    """)

    def run() -> list[str]:
        done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                              check=False, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert run() == ["compiled", "ready"]
    (written,) = (tmp_path / "cache").glob("numba_runtime-*.bin")
    assert run() == ["loaded", "ready"]
    written.write_bytes(b"not a pickle")
    assert run() == ["numba", "ready"]


def test_object_symbols_are_the_modules_definitions():
    """The symbols read from a compiled function's object code are the names numba lists from its
    module's bitcode (functions and globals that are not declarations); a non-ELF buffer gives None."""
    import llvmlite.binding as ll

    @numba.njit
    def f(x):
        return np.sort(x)[:2].copy()

    f(np.arange(5.0))
    (library,) = [cres.library for cres in f.overloads.values()]
    _, kind, (obj, bitcode) = library.serialize_using_object_code()
    assert kind == "object"
    module = ll.parse_bitcode(bitcode)
    expected = {v.name for v in [*module.functions, *module.global_variables] if not v.is_declaration}
    names = warmup.elf_defined_symbols(obj)
    if names is None:
        pytest.skip("the object code is not ELF64 (not Linux)")
    assert names == expected and any(n.startswith("cfunc.") for n in names)
    assert warmup.elf_defined_symbols(b"MZ" + bytes(100)) is None
    assert warmup.elf_defined_symbols(obj[:40]) is None


# --- ncsim warmup ---------------------------------------------------------------------------------

def test_warmup_compiles_every_kernel():
    """After the warm-up every cache=True numba function of every ncsim module has a fresh entry on
    disk: a kernel that the warm-up program does not reach fails here."""
    result = warmup.warm_up()
    assert result.kernels
    every = warmup.kernels(import_all=True)
    assert {k.name for k in every} == {k.name for k in result.kernels}
    assert [k.name for k in every if not k.cached] == []
    text = result.format()
    assert text.startswith("ncsim warmup: ") and "numba cache: " in text
    assert f" {len(every)} kernels" in text


def test_kernels_leave_out_functions_inlined_into_their_callers(monkeypatch):
    """A cache=True function with inline="always" is never compiled (nor cached) on its own: its IR
    goes into each caller, whose entry holds it. kernels() lists only the callers."""
    import types

    module = types.ModuleType("ncsim._test_inlined")
    source = textwrap.dedent("""
        import numba

        @numba.njit(cache=True, inline="always")
        def part(x):
            return x + 1

        @numba.njit(cache=True)
        def whole(x):
            return part(x) * 2
    """)
    module.__file__ = __file__  # numba's cache locator needs a file beside which to cache
    exec(compile(source, __file__, "exec"), module.__dict__)  # noqa: S102 - the test's own source
    monkeypatch.setitem(sys.modules, module.__name__, module)
    names = {k.name for k in warmup.kernels()}
    assert "ncsim._test_inlined.whole" in names and "ncsim._test_inlined.part" not in names


def test_warmup_command(monkeypatch, capsys):
    from ncsim.cli import main

    monkeypatch.setattr(sys, "argv", ["ncsim", "warmup", "--quiet"])
    main()
    out, err = capsys.readouterr()
    assert out.startswith("ncsim warmup: ") and err == ""


# --- the garbage collector while the command imports ---------------------------------------------

def test_the_command_holds_the_collector_off_while_it_imports_then_freezes_and_runs_it():
    """ncsim.console.main: no collections while the command imports (warmup.prepare is entered with
    the collector off), then the imported objects frozen and the collector on for the run itself;
    and back on after a command that never enters prepare. ncsim.cli.main leaves it alone."""
    script = textwrap.dedent(f"""
        import contextlib, gc, sys
        from ncsim import console, warmup
        real = warmup.prepare

        @contextlib.contextmanager
        def spy(*args, **kwargs):
            print("importing", gc.isenabled())
            with real(*args, **kwargs) as notice:
                print("running", gc.isenabled(), gc.get_freeze_count() > 0)
                yield notice

        warmup.prepare = spy
        sys.argv = ["ncsim", "run", {str(Path(__file__).parent.parent / "programs" / "giou.s")!r}, "--timing-only", "--quiet"]
        console.main()
        print("after", gc.isenabled())
        sys.argv = ["ncsim", "isa"]
        gc.unfreeze()
        from ncsim import cli
        cli.main()
        print("cli", gc.isenabled(), gc.get_freeze_count())
    """)
    out = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.split(" ")[0] in ("importing", "running", "after", "cli")]
    assert lines == ["importing False", "running True True", "after True", "cli True 0"], out.stdout


def test_bench_startup_times_an_objects_timing_only_run(tmp_path):
    """tools/bench_startup.py --object-size: the object it assembles with `ncsim asm` runs timing-only,
    and each command has its own row (a --tree's rows too)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_startup", Path(__file__).parent.parent / "tools" / "bench_startup.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    obj = bench.make_object(tmp_path, 2000)
    cmds = bench.commands(tmp_path, [Path(__file__).parent.parent], obj)
    assert len(cmds) == 7 and f"ncsim run {obj.name} --timing-only" in cmds
    wall, cpu = bench.once(*cmds[f"ncsim run {obj.name} --timing-only"], tmp_path)
    assert wall > 0 and cpu > 0
