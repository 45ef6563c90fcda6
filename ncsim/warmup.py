"""ncsim's compiled kernels: compile them all ahead, say so when a command compiles, load them fast.

ncsim's sequential loops are numba functions compiled with `cache=True`: the first use on a machine
compiles them (up to half a minute for all of them) and numba keeps the machine code on disk, in the
`__pycache__` folder beside each source file (or under NUMBA_CACHE_DIR, or a user-wide folder when
that one is read-only); later processes load it in milliseconds. A cache entry is stale once its
source file or numba changes.

- `warm_up()` (`ncsim warmup`, `python -m ncsim.warmup`) compiles every kernel by assembling, running,
  timing and reporting one small program that uses each of them; `make` runs it after installing.
- `prepare()` is what the `ncsim` command does once numba is imported: it announces on stderr the
  first compilation of one of ncsim's kernels (CompileNotice), and it loads cached kernels without
  the refresh of numba's whole typing and lowering registries that numba does before every cache
  load (`fast_cache_loads`: about 0.15 s per process; compiling still refreshes first), without
  parsing the LLVM bitcode stored beside each kernel's machine code (about 2.5 ms per kernel), and
  types plain array arguments without importing numpy.ma (11-20 ms).
- `kernels()` lists the cached numba functions of ncsim's imported modules and whether each has a
  fresh entry on disk.
"""

from __future__ import annotations

import importlib
import pickle
import pkgutil
import struct
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from ncsim.classcache import write_cache_file

# One small program that reaches every compiled kernel: the assembler's synchronisation, the
# functional engines (activation and its accumulators, fp32 elementwise operators computed into
# memory, float and bitwise reductions, the scan, the matmul, bn_stats/bn_aggr, max8 with
# match_replace), a GpSimd program on the cores (their interpreter), the timing model, the race
# check and the report.
PROGRAM = """\
# ncsim warmup: every compiled kernel of the simulator once, on small tiles
.kernel warmup
.hbm  x    f32[128, 64] in
.hbm  y    f32[128, 64] out
.hbm  z    f32[128, 64] out
.sbuf a    f32[128, 64]
.sbuf b    f32[128, 64]
.sbuf c    f32[128, 64]
.sbuf col  f32[128, 1]
.sbuf st   f32[128, 6]
.sbuf mv   f32[128, 2]
.sbuf top  f32[128, 8]
.sbuf ints i32[128, 64]
.sbuf ired i32[128, 1]
.psum acc  f32[64, 64]

dma_copy a, x
memset col, 0.5
activation b, gelu, a, bias=col, reduce_cmd=reset_reduce, reduce_res=col
activation c, softplus, b
tensor_reduce col, add, c, 1
tensor_tensor c, c, b, subtract
iota ints, [[1, 64]], 0, channel_multiplier=64
tensor_reduce ired, bitwise_xor, ints, 1
tensor_tensor_scan c, a, b, 0.0, multiply, add
nc_matmul acc, a, b
tensor_copy b[0:64, :], acc
bn_stats st, c
bn_aggr mv, st
max8 top, c
nc_match_replace8 c, c, top, 0.0
dma_copy y, c

.gpsimd copy_one
    coreid r2
    eld r3, in0, r2
    est out0, r2, r3
.end
gpsimd_call copy_one, z, x, cores=8
"""

NOTICE = ("ncsim: compiling the simulator's kernels for this machine, once (up to half a minute); later runs load them"
          " from numba's cache (`ncsim warmup` compiles them all ahead)")


@dataclass(frozen=True)
class Kernel:
    name: str  # module.function
    cached: bool  # a fresh entry on disk (for this numba and this source file)
    cache_dir: str


def kernels(import_all: bool = False) -> list[Kernel]:
    """ncsim's numba functions compiled with cache=True (but not inline="always": those are cached
    as part of their callers), in the modules imported so far (every ncsim module with import_all),
    each with whether numba's on-disk cache holds a fresh entry for it."""
    import ncsim

    if import_all:
        for info in pkgutil.walk_packages(ncsim.__path__, "ncsim."):
            importlib.import_module(info.name)
    if "numba" not in sys.modules:
        return []
    from numba.core.caching import NullCache
    from numba.core.dispatcher import Dispatcher

    found: dict[str, Kernel] = {}
    for name, module in list(sys.modules.items()):
        if not (name == "ncsim" or name.startswith("ncsim.")) or module is None:
            continue
        for value in list(vars(module).values()):
            if not isinstance(value, Dispatcher) or value.py_func.__module__ != name:
                continue
            cache = getattr(value, "_cache", None)
            if cache is None or isinstance(cache, NullCache):
                continue
            if value.targetoptions.get("inline") == "always":  # numba inlines its IR into each caller's
                continue  # code, which is cached: the function itself is never compiled, nor cached
            key = f"{name}.{value.py_func.__qualname__}"
            found[key] = Kernel(key, _fresh(cache), str(getattr(cache, "cache_path", "")))
    return [found[k] for k in sorted(found)]


def _fresh(cache: Any) -> bool:
    """Whether numba's index file for a function holds entries made from its current source."""
    try:
        return bool(cache._cache_file._load_index())
    except Exception:  # noqa: BLE001 - numba internals: a changed layout reads as "not known to be cached"
        return False


# ------------------------------------------------------------------ the command's side
class CompileNotice:
    """What `announce_compiles` tells of numba's compilations: before the first compilation of a
    function from one of `modules`, write `message` (if any) to `stream` (stderr); list them all."""

    def __init__(self, stream: TextIO | None = None, modules: tuple[str, ...] = ("ncsim.",),
                 message: str | None = NOTICE):
        self.stream = stream
        self.modules = modules
        self.message = message
        self.compiled: list[str] = []

    def _ours(self, event: Any) -> str | None:
        dispatcher = (event.data or {}).get("dispatcher") if isinstance(event.data, dict) else None
        func = getattr(dispatcher, "py_func", None)
        module = getattr(func, "__module__", "") or ""
        if not module.startswith(self.modules):
            return None
        return f"{module}.{func.__qualname__}"

    def on_start(self, event: Any) -> None:
        name = self._ours(event)
        if name is None:
            return
        if not self.compiled and self.message:
            from ncsim import progress

            progress.write(self.message, self.stream)
        self.compiled.append(name)


@contextmanager
def announce_compiles(notice: CompileNotice):
    """Within the block, numba's compilations go through `notice`."""
    from numba.core import event

    class Forward(event.Listener):
        def on_start(self, e: Any) -> None:
            notice.on_start(e)

        def on_end(self, e: Any) -> None:
            pass

    listener = Forward()
    event.register("numba:compile", listener)
    try:
        yield notice
    finally:
        event.unregister("numba:compile", listener)


def fast_cache_loads() -> bool:
    """Make numba load a cached function without refreshing its registries first. Numba's
    Cache.load_overload refreshes the CPU target (importing and installing every typing and
    lowering registry: ~0.15 s, once per process) before it reads the cache; loading machine code
    needs only the runtime's symbols. A miss still refreshes before it returns, so the compilation
    that follows is numba's own (which refreshes again in any case). Applied by the `ncsim`
    command only; True when applied (False if this numba is not laid out as expected)."""
    from numba.core import caching

    cls = caching.Cache
    if getattr(cls.load_overload, "_ncsim", False):
        return True
    original = cls.load_overload
    if not (hasattr(cls, "_load_overload") and hasattr(cls, "_guard_against_spurious_io_errors")):
        return False
    try:
        from numba.core.runtime import rtsys
    except ImportError:
        return False
    if not hasattr(rtsys, "initialize"):
        return False

    def load_overload(self: Any, sig: Any, target_context: Any) -> Any:
        initialize_runtime(target_context)  # what a loaded function needs of the refresh
        data = None
        with self._guard_against_spurious_io_errors():
            data = self._load_overload(sig, target_context)
        if data is None:
            target_context.refresh()
        return data

    load_overload._ncsim = True  # type: ignore[attr-defined]
    load_overload.__wrapped__ = original  # type: ignore[attr-defined]
    cls.load_overload = load_overload
    _lazy_cached_bitcode()
    _lazy_numba_environments()
    _plain_ndarray_typeof()
    return True


def initialize_runtime(target_context: Any, cache_dir: Path | None = None) -> str:
    """Initialise numba's runtime (NRT) as numba.core.runtime.rtsys.initialize does, but with its
    compiled part from a file. Numba compiles the runtime's few LLVM functions (reference counts,
    atomics) in every process before the first function runs or loads: 40-50 ms, a sixth of a warm
    run. Here the object code of that library is kept in `cache_dir` (default: ncsim's __pycache__,
    or NUMBA_CACHE_DIR), in a file named by numba's and llvmlite's versions and the host CPU and its
    features, and loaded when it is there. Gives "loaded", "compiled" (and written, if it could be),
    "numba" (numba's own initialisation: this numba is not laid out as expected, or loading failed)
    or "ready" (initialised already)."""
    from numba.core.runtime import nrt

    rtsys = nrt.rtsys
    if getattr(rtsys, "_init", False):
        return "ready"
    helpers = getattr(getattr(nrt, "_nrt", None), "c_helpers", None)
    create = getattr(getattr(nrt, "nrtdynmod", None), "create_nrt_module", None)
    if not isinstance(helpers, dict) or create is None or not hasattr(rtsys, "_init"):
        rtsys.initialize(target_context)
        return "numba"
    import llvmlite.binding as ll
    from numba.core import config
    from numba.core.compiler_lock import global_compiler_lock

    codegen = target_context.codegen()
    path = _runtime_cache_file(codegen, cache_dir)
    with global_compiler_lock:
        if config.NRT_STATS:
            nrt._nrt.memsys_enable_stats()
        for py_name, address in helpers.items():  # the C helpers, as numba registers them
            ll.add_symbol(py_name if py_name.startswith("_") else "NRT_" + py_name, address)
        library = None
        if path is not None and path.is_file():
            try:
                library = codegen.unserialize_library(pickle.loads(path.read_bytes()))
            except Exception:  # noqa: BLE001 - a damaged or foreign file: numba's own way instead
                library = None
            if library is None or library.get_pointer_to_function("NRT_incref") == 0:
                rtsys.initialize(target_context)
                return "numba"
            rtsys._library = library
            rtsys._init = True
            return "loaded"
        ir_module, library = create(target_context)
        library.enable_object_caching()
        library.add_ir_module(ir_module)
        library.finalize()
        rtsys._library = library
        rtsys._init = True
    if path is not None:  # where it cannot be written (a read-only installation), compiled in each process
        write_cache_file(path, pickle.dumps(library.serialize_using_object_code()))
    return "compiled"


def _runtime_cache_file(codegen: Any, cache_dir: Path | None) -> Path | None:
    """Where initialize_runtime keeps the runtime's object code for this numba, llvmlite and CPU."""
    import hashlib

    import llvmlite
    import llvmlite.binding as ll
    import numba

    try:  # the CPU as numba's code generator sees it (NUMBA_CPU_NAME and NUMBA_CPU_FEATURES included)
        parts = (numba.__version__, llvmlite.__version__, sys.version, ll.get_process_triple(),
                 codegen._get_host_cpu_name(), codegen._get_host_cpu_features())
    except Exception:  # noqa: BLE001 - without a key there is no safe file
        return None
    key = "|".join(str(p) for p in parts)
    if cache_dir is None:
        from numba.core import config

        root = getattr(config, "CACHE_DIR", "") or ""
        cache_dir = Path(root) if root else Path(__file__).resolve().parent / "__pycache__"
    return cache_dir / f"numba_runtime-{hashlib.sha256(key.encode()).hexdigest()[:16]}.bin"


def _lazy_cached_bitcode() -> bool:
    """Load a cached function's machine code without parsing its LLVM bitcode. Numba stores each
    cached function as its object code plus the bitcode of its module; on loading it parses the
    bitcode (to link it into a later compilation that calls the function) and lists the module's
    defined symbols from it (to find the entry points): 40-60% of the time of a load, for a module
    that is seldom linked again. Here the symbols come from the object's ELF symbol table (the same
    names) and the bitcode is parsed when a compilation first asks for it. A non-ELF object (macOS,
    Windows) loads numba's way. True when applied."""
    from numba.core import codegen

    lib_cls = getattr(codegen, "CPUCodeLibrary", None)
    engine_cls = getattr(codegen, "JitEngine", None)
    needed = ("_unserialize", "_get_module_for_linking", "_set_compiled_object", "enable_object_caching",
              "_finalize_final_module")
    if lib_cls is None or engine_cls is None or not all(hasattr(lib_cls, n) for n in needed):
        return False
    if getattr(lib_cls._get_module_for_linking, "_ncsim", False):
        return True
    import llvmlite.binding as ll

    unserialize = lib_cls._unserialize.__func__
    for_linking = lib_cls._get_module_for_linking

    def _unserialize(cls: Any, code_gen: Any, state: Any) -> Any:
        name, kind, data = state
        engine = getattr(code_gen, "_engine", None)
        names = elf_defined_symbols(data[0]) if kind == "object" else None
        if names is None or not isinstance(getattr(engine, "_defined_symbols", None), set):
            return unserialize(cls, code_gen, state)
        object_code, shared_bitcode = data
        self = code_gen.create_library(name)
        self.enable_object_caching()
        self._set_compiled_object(object_code)
        self._ncsim_bitcode = shared_bitcode  # parsed by _get_module_for_linking, if ever asked
        self._finalize_final_module()
        engine._defined_symbols |= names  # what numba's engine._load_defined_symbols(bitcode) would add
        return self

    def _get_module_for_linking(self: Any) -> Any:
        bitcode = self.__dict__.pop("_ncsim_bitcode", None)
        if bitcode is not None and self._shared_module is None:
            self._shared_module = ll.parse_bitcode(bitcode)
        return for_linking(self)

    _get_module_for_linking._ncsim = True  # type: ignore[attr-defined]
    _get_module_for_linking.__wrapped__ = for_linking  # type: ignore[attr-defined]
    lib_cls._unserialize = classmethod(_unserialize)
    lib_cls._get_module_for_linking = _get_module_for_linking
    return True


def _lazy_numba_environments() -> bool:
    """Load a cached function without importing the numba modules whose helpers it inlined. Each
    function in a cached module has an environment: its consts and its module's globals, rebuilt on
    loading by importing that module (numba.np.arrayobj, numba.np.arraymath, numba.cpython.unicode:
    50-100 ms for a run, for np.empty, np.full, ravel and their like). Only object mode reads the
    globals (numba.core.pylowering); numba's own implementation modules are nopython code, so their
    environments get a dictionary holding just the module's name (what pickling an environment
    reads) until the module is imported. True when applied."""
    from numba.core import environment

    rebuild = getattr(environment, "_rebuild_env", None)
    if rebuild is None or getattr(rebuild, "_ncsim", False):
        return rebuild is not None
    if not (hasattr(environment, "lookup_environment") and hasattr(environment.Environment, "_memo")):
        return False

    def _rebuild_env(modname: Any, consts: Any, env_name: Any) -> Any:
        if not (isinstance(modname, str) and modname.startswith("numba.") and modname not in sys.modules):
            return rebuild(modname, consts, env_name)
        env = environment.lookup_environment(env_name)
        if env is not None:
            return env
        env = environment.Environment({"__name__": modname})
        env.consts[:] = consts
        env.env_name = env_name
        environment.Environment._memo[env_name] = env
        return env

    _rebuild_env._ncsim = True  # type: ignore[attr-defined]
    _rebuild_env.__wrapped__ = rebuild  # type: ignore[attr-defined]
    environment._rebuild_env = _rebuild_env
    return True


def _plain_ndarray_typeof() -> bool:
    """Type a plain ndarray argument without importing numpy.ma. numba types an array argument of a
    new kind (dtype, dimensions, layout) in Python, and first asks whether it is a numpy.ma
    MaskedArray, which it refuses: in numpy 2, `np.ma` is imported on that first access, in every
    run (`import numpy.ma` after numpy and numba, the collector off as in the command: 11-20 ms; 22 ms
    under `python -X importtime` in a warm `ncsim run programs/giou.s --trace`). An array whose
    type is exactly np.ndarray is no MaskedArray (a subclass), so for those the type is made here as
    numba makes it, from numba's own helpers (numpy_support.from_dtype, map_layout, the writeable
    flag); a subclass, or a dtype numba does not take, goes to numba's function as before (its error
    included). True when applied."""
    import numpy as np
    from numba.core import types
    from numba.core.typing import typeof
    from numba.np import numpy_support

    impl = getattr(typeof, "typeof_impl", None)
    if impl is None or not hasattr(impl, "dispatch") or not hasattr(impl, "register"):
        return False
    original = impl.dispatch(np.ndarray)
    if getattr(original, "_ncsim", False):
        return True
    if getattr(original, "__name__", "") != "_typeof_ndarray" or not all(
            hasattr(numpy_support, n) for n in ("from_dtype", "map_layout")):
        return False

    def plain_ndarray(val: Any, c: Any) -> Any:
        if type(val) is not np.ndarray:
            return original(val, c)
        try:
            dtype = numpy_support.from_dtype(val.dtype)
        except Exception:  # noqa: BLE001 - numba's function raises its own error for it
            return original(val, c)
        return types.Array(dtype, val.ndim, numpy_support.map_layout(val), readonly=not val.flags.writeable)

    plain_ndarray._ncsim = True  # type: ignore[attr-defined]
    plain_ndarray.__wrapped__ = original  # type: ignore[attr-defined]
    impl.register(np.ndarray)(plain_ndarray)
    return True


def elf_defined_symbols(obj: bytes) -> set[str] | None:
    """The names of the functions and data an ELF64 little-endian relocatable object defines (its
    symbol table's entries with a section, of type NOTYPE, OBJECT or FUNC): the non-declarations of
    the LLVM module it was compiled from. None if `obj` is not such an object."""
    if len(obj) < 64 or obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:  # ELFCLASS64, little-endian
        return None
    try:
        (shoff,) = struct.unpack_from("<Q", obj, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
        names: set[str] = set()
        for i in range(shnum):
            (sh_type,) = struct.unpack_from("<I", obj, shoff + i * shentsize + 4)
            if sh_type != 2:  # SHT_SYMTAB
                continue
            offset, size, link = struct.unpack_from("<QQI", obj, shoff + i * shentsize + 0x18)
            (strings,) = struct.unpack_from("<Q", obj, shoff + link * shentsize + 0x18)
            for st_name, st_info, _, st_shndx, _, _ in struct.iter_unpack("<IBBHQQ", obj[offset:offset + size]):
                if st_shndx == 0 or (st_info & 0xF) > 2:  # undefined; a section, a file or other types
                    continue
                start = strings + st_name
                names.add(obj[start:obj.index(b"\0", start)].decode())
        return names
    except (struct.error, ValueError, UnicodeDecodeError):
        return None


@contextmanager
def prepare(announce: bool = True, stream: TextIO | None = None, message: str = NOTICE):
    """What a command does once it has imported its modules: if numba is among them, load cached
    kernels fast, and count the compilations of ncsim's kernels (the CompileNotice it yields; None
    without numba), saying before the first one that it is compiling if `announce`. Imports nothing
    itself: a command that does not use numba pays nothing. Its modules are imported by now, so the
    `ncsim` command's collector runs again from here (ncsim.console)."""
    from ncsim.console import imports_done

    imports_done()
    if "numba" not in sys.modules:
        yield None
        return
    fast_cache_loads()
    with announce_compiles(CompileNotice(stream, message=message if announce else None)) as notice:
        yield notice


# ------------------------------------------------------------------ compiling everything
@dataclass
class WarmupResult:
    kernels: list[Kernel]
    compiled: list[str]  # functions numba compiled (a kernel's callees are compiled with it)
    seconds: float

    def format(self) -> str:
        n = len(self.kernels)
        missing = [k.name for k in self.kernels if not k.cached]
        if self.compiled:
            head = f"compiled {len(set(self.compiled))} of {n} kernels in {self.seconds:.1f} s"
        else:
            head = f"all {n} kernels were compiled already (loaded in {self.seconds:.1f} s)"
        dirs = sorted({k.cache_dir for k in self.kernels})
        root = Path(__file__).resolve().parent.parent
        shown = [str(Path(d).relative_to(root)) if Path(d).is_relative_to(root) else d for d in dirs]
        lines = [f"ncsim warmup: {head}", f"numba cache: {', '.join(shown)}"]
        if missing:
            lines.append(f"not cached (numba could not write its cache?): {', '.join(missing)}")
        return "\n".join(lines)


def warm_up(message: str | None = None, stream: TextIO | None = None) -> WarmupResult:
    """Compile (or load) every kernel: assemble, run, time, report and trace PROGRAM. `message`, if
    given, goes to `stream` (stderr) before the first compilation."""
    import ncsim.runtime.timing  # noqa: F401 - numba, before prepare()
    from ncsim.asm.assembler import Assembler, assemble
    from ncsim.asm.elf import read_elf, write_elf
    from ncsim.config import Config
    from ncsim.progress import Progress
    from ncsim.runtime.run import run
    from ncsim.runtime.trace import trace_text

    start = time.perf_counter()
    with prepare(message is not None, stream, message or "") as notice, Progress(None, "warming up"):
        config = Config()
        obj = read_elf(write_elf(assemble(PROGRAM, "<warmup>", config)), "<warmup>.o")  # as a .o file is read
        asm = Assembler(config)
        asm.assemble_program(PROGRAM, "<warmup>")  # as `ncsim run` assembles a .s file
        asm.program.sync_report  # noqa: B018 - as `ncsim asm --show-sync` explains the waits
        result = run(obj, config=config, sidecar=False)
        result.report.format()
        result.program.to_object()  # the words made again from the columns (a loaded program keeps none)
        trace_text(result.timing, obj)  # the trace's kernels too (`--trace`)
    seconds = time.perf_counter() - start
    return WarmupResult(kernels(), list(notice.compiled) if notice is not None else [], seconds)


def main(argv: list[str] | None = None) -> None:
    """`python -m ncsim.warmup`: the same as `ncsim warmup`."""
    from ncsim.cli import main as cli_main

    sys.argv = ["ncsim", "warmup", *(sys.argv[1:] if argv is None else argv)]
    cli_main()


if __name__ == "__main__":
    main()
