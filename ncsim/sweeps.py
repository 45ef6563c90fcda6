"""Design-space sweeps: many programs x many configurations, run on Dask, answered as a table.

    import ncsim
    df = ncsim.sweep(["programs/matmul.s", "programs/softmax.s"],
                     {"hbm_bandwidth": [205e9, 410e9, 820e9], "dma_engines": [4, 8, 16]})
    print(ncsim.sweeps.summary(df))     # per program, the speedup over each parameter's range

Each point (program, configuration) is one timing-only run (`ncsim.run(..., values=False)`; values
too with values=True). Runs go through `dask.distributed`: a `LocalCluster` on this machine (one
worker process per core, bound to 127.0.0.1, no dashboard unless asked) or the cluster of a
`distributed.Client` (or a scheduler address) that is passed in; the code path is the same.

A program is assembled once per distinct value of the parameters that change its assembly
(`ncsim.config.assembly_parameters()`: partitions, SBUF/PSUM sizes, semaphores, DMA queues, ...),
by one task; the points that share that object take its ELF bytes, and each worker decodes an
object once (`_decoded`). A point that fails (a deadlock under that configuration, a rule broken,
a configuration whose parameters disagree) is a row with its status and error message; it never
stops the sweep. With a cache file (`cache=`; the CLI keeps one beside its output), each finished
point is appended to it as one JSON line keyed by the program's hash and the whole configuration,
and a later sweep takes those points from it instead of running them again: an interrupted sweep
resumes. docs/sweep.md has the rest.

dask[distributed] and pandas are the optional extra `ncsim[sweep]`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import importlib.util
import inspect
import itertools
import json
import logging
import math
import os
import re
import sys
import threading
import time
import tomllib
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ncsim.config import _FIELDS, Config, _convert, assembly_key
from ncsim.errors import ConfigError, NcsimError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["METRICS", "ProgramSpec", "grid_points", "load_grid", "plot", "program_spec", "summary", "sweep"]

# The columns of a result row besides `program`, `program_hash` and the swept parameters.
METRICS = ("status", "time_us", "verdict", "verdict_text", "busy_tensor", "busy_vector", "busy_scalar",
           "busy_gpsimd", "dma_busy", "dma_gbps", "hbm_utilisation", "tensor_utilisation", "instructions",
           "races", "check", "error", "host_seconds")
# status: "ok"; "deadlock" or "error" (an NcsimError under that configuration: recorded in the cache,
# it would happen again); "failed" (the worker died or ncsim has a bug: not cached, tried again).
CACHED_STATUSES = ("ok", "deadlock", "error")
MEMORY_VERDICTS = ("hbm-bandwidth", "dma-bandwidth", "dma-data", "dma-latency")
INSTALL_HINT = "ncsim sweep needs the optional extra: pip install 'ncsim[sweep]' (dask[distributed], pandas)"


# ---------------------------------------------------------------------------------------- programs


@dataclass(frozen=True)
class ProgramSpec:
    """One program of a sweep. kind: "asm" (.s), "object" (.o) or "nki" (FILE.py:FUNCTION, or a kernel
    and its placeholder arguments given from Python). `digest` hashes everything its object depends
    on besides the configuration; `data` is the bytes sent to the worker that assembles it."""

    kind: str
    name: str
    digest: str
    path: str | None = None
    function: str | None = None
    params: tuple[tuple[str, int], ...] = ()
    data: bytes | None = dataclasses.field(default=None, repr=False)
    kernel: Any = dataclasses.field(default=None, repr=False)
    args: tuple = dataclasses.field(default=(), repr=False)

    def light(self) -> ProgramSpec:
        """The spec without its bytes or kernel: what each point's task needs."""
        return dataclasses.replace(self, data=None, kernel=None, args=())


_INCLUDE = re.compile(r'^\s*\.include\s+"([^"]+)"', re.MULTILINE)


def _source_bytes(path: Path, seen: set[Path]) -> bytes:
    """A .s file's bytes and those of the files it includes, recursively (what its hash covers)."""
    path = path.resolve()
    if path in seen:
        return b""
    seen.add(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise NcsimError(f"cannot read the program: {e.strerror}", file=str(path)) from None
    parts = [data]
    for m in _INCLUDE.finditer(data.decode("utf-8", errors="replace")):
        inc = path.parent / m.group(1)
        if inc.is_file():
            parts.append(_source_bytes(inc, seen))
    return b"\0".join(parts)


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()


def program_spec(item: Any, params: Mapping[str, int] | None = None) -> ProgramSpec:
    """A sweep's program from what a user gives: a .s or .o path, "FILE.py:FUNCTION" (an NKI kernel
    whose tensor parameters default to `nki.typing.tensor` placeholders), or (kernel, args) with
    placeholder args. `params`: the .param values of .s programs (-D)."""
    if isinstance(item, ProgramSpec):
        return item
    p = tuple(sorted((params or {}).items()))
    if isinstance(item, tuple) and len(item) == 2 and callable(item[0]):
        kernel, args = item
        func = getattr(kernel, "func", kernel)
        name = getattr(func, "__name__", "kernel")
        try:
            source_file = inspect.getsourcefile(func)
            source = Path(source_file).read_bytes() if source_file else inspect.getsource(func).encode()
        except (OSError, TypeError):
            source = repr(func).encode()
        return ProgramSpec("nki", name, _digest("nki", source, name, repr(tuple(args))), kernel=kernel,
                           args=tuple(args))
    text = str(item)
    file, colon, function = text.rpartition(":")
    if colon and file.endswith(".py") and function.isidentifier():
        path = Path(file)
        if not path.is_file():
            raise NcsimError("no such NKI kernel file", file=file)
        data = path.read_bytes()
        return ProgramSpec("nki", text, _digest("nki", data, function), path=str(path), function=function, data=data)
    path = Path(text)
    if path.is_dir():
        raise NcsimError("is a directory, not a program (.s, .o or FILE.py:FUNCTION)", file=text)
    if not path.is_file():
        raise NcsimError("no such program", file=text)
    if text.endswith(".s"):
        data = path.read_bytes()
        return ProgramSpec("asm", text, _digest("asm", _source_bytes(path, set()), repr(p)), path=text, params=p,
                           data=data)
    if text.endswith(".py"):
        raise NcsimError("an NKI kernel is given as FILE.py:FUNCTION (the kernel's name after a colon)", file=text)
    data = path.read_bytes()
    return ProgramSpec("object", text, _digest("object", data), path=text, data=data)


# ---------------------------------------------------------------------------------------- the grid


def _values(name: str, spec: Any, where: str) -> list[Any]:
    """The values of one grid entry: a list, or a range {start, stop, step} / {start, stop, num[, log]}."""
    if isinstance(spec, list):
        values = spec
    elif isinstance(spec, dict):
        unknown = set(spec) - {"start", "stop", "step", "num", "log"}
        if unknown or "start" not in spec or "stop" not in spec or ("step" in spec) == ("num" in spec):
            raise ConfigError(f"grid entry {name}: a range is {{start, stop, step}} or {{start, stop, num}}"
                              " (num with log = true for a geometric range)", file=where)
        start, stop = spec["start"], spec["stop"]
        if "step" in spec:
            step = spec["step"]
            if not isinstance(step, int | float) or step <= 0 or spec.get("log"):
                raise ConfigError(f"grid entry {name}: step must be a positive number (and not with log)",
                                  file=where)
            count = math.floor((stop - start) / step + 1e-9) + 1
            values = [start + i * step for i in range(max(count, 0))]
        else:
            num = spec["num"]
            if not isinstance(num, int) or num < 1:
                raise ConfigError(f"grid entry {name}: num must be a positive integer", file=where)
            if spec.get("log"):
                if start <= 0 or stop <= 0:
                    raise ConfigError(f"grid entry {name}: a log range needs start and stop above 0", file=where)
                values = [start * (stop / start) ** (i / (num - 1)) if num > 1 else start for i in range(num)]
            else:
                values = [start + (stop - start) * i / (num - 1) if num > 1 else start for i in range(num)]
        field_ = _FIELDS.get(name)
        default = field_.default if field_ is not None else None
        if isinstance(default, int) and not isinstance(default, bool):
            values = list(dict.fromkeys(round(v) for v in values))
    else:
        values = [spec]
    if not values:
        raise ConfigError(f"grid entry {name}: no values", file=where)
    out = []
    for v in values:
        try:
            out.append(_convert(name, v))
        except ConfigError as e:
            raise ConfigError(f"grid entry {name}: {e.message}", file=where or None, notes=e.notes) from None
    return out


def grid_points(grid: Mapping[str, Any] | Sequence[Mapping[str, Any]],
                zip_groups: Iterable[Sequence[str]] = ()) -> tuple[list[str], list[dict[str, Any]]]:
    """(the swept parameter names, the points: {name: value}) of a grid.

    A mapping {name: values} is the product of its entries (values a list or a range, as in a grid
    file), except that the names of each `zip_groups` group vary together (lists of one length). A
    sequence of mappings is the points themselves. Every value is checked against its parameter."""
    if isinstance(grid, Mapping):
        axes = {name: _values(name, spec, "") for name, spec in grid.items()}
        names = list(axes)
        groups: list[list[str]] = []
        zipped: set[str] = set()
        for group in zip_groups:
            group = list(group)
            for n in group:
                if n not in axes:
                    raise ConfigError(f"zip names {n!r}, which the grid does not sweep")
                if n in zipped:
                    raise ConfigError(f"zip names {n!r} twice")
                zipped.add(n)
            lengths = {len(axes[n]) for n in group}
            if len(lengths) > 1:
                raise ConfigError(f"zip of {', '.join(group)}: their lists differ in length "
                                  f"({', '.join(f'{n} {len(axes[n])}' for n in group)})")
            groups.append(group)
        groups += [[n] for n in names if n not in zipped]
        points = []
        for combo in itertools.product(*[list(zip(*[axes[n] for n in g])) for g in groups]):
            point = {}
            for g, values in zip(groups, combo):
                point.update(zip(g, values))
            points.append({n: point[n] for n in names})
        return names, points
    names = list(dict.fromkeys(n for point in grid for n in point))
    points = [{n: _convert(n, v) for n, v in point.items()} for point in grid]
    return names, points


def load_grid(path: str | Path) -> tuple[dict[str, Any], list[list[str]]]:
    """A grid file: ([grid] entries, the zip groups). Format (docs/sweep.md):

        zip = [["dma_engines", "dma_engine_bandwidth"]]   # optional; or zip = true: every entry together
        [grid]
        hbm_bandwidth = [205e9, 410e9, 820e9]
        dma_engines = {start = 4, stop = 16, step = 4}
        dma_latency_ns = {start = 500, stop = 4000, num = 4, log = true}
    """
    where = str(path)
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8-sig"))
    except OSError as e:
        raise ConfigError(f"cannot read the grid file: {e.strerror}", file=where) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"invalid TOML: {e}", file=where) from None
    unknown = set(data) - {"grid", "zip"}
    if unknown or not isinstance(data.get("grid"), dict) or not data["grid"]:
        raise ConfigError("a grid file has a [grid] table of parameter = values, and optionally zip"
                          + (f" (not {', '.join(sorted(unknown))})" if unknown else ""), file=where)
    grid = {name: _values(name, spec, where) for name, spec in data["grid"].items()}
    z = data.get("zip", [])
    if z is True:
        groups = [list(grid)]
    elif isinstance(z, list) and all(isinstance(g, list) and all(isinstance(n, str) for n in g) for g in z):
        groups = z
    else:
        raise ConfigError("zip is a list of lists of parameter names, or true", file=where)
    return grid, groups


def parse_grid_option(text: str) -> tuple[str, list[str]]:
    """`--grid NAME=V1,V2,...` as (name, the values as written)."""
    name, eq, values = text.partition("=")
    name = name.strip()
    items = [v.strip() for v in values.split(",")]
    if not eq or not name or not all(items):
        raise ConfigError(f"--grid takes NAME=V1,V2,... (e.g. hbm_bandwidth=205e9,410e9) or a FILE.toml, not {text!r}")
    return name, items


# ---------------------------------------------------------------------------------------- the tasks

_decoded_cache: collections.OrderedDict[str, Any] = collections.OrderedDict()
_decoded_lock = threading.Lock()
_DECODED_KEEP = 2  # decoded programs a worker keeps (the last used)


def _assemble(spec: ProgramSpec, config: Config) -> tuple[str, Any]:
    """On a worker: the program's ELF bytes under `config`'s assembly parameters, ("ok", bytes), or
    ("error" | "failed", message)."""
    try:
        from ncsim.asm.elf import write_elf

        if spec.kind == "object":
            return "ok", spec.data
        if spec.kind == "asm":
            from ncsim.asm.assembler import Assembler

            assert spec.data is not None
            text = spec.data.decode("utf-8-sig")
            return "ok", write_elf(Assembler(config, dict(spec.params)).assemble(text, spec.path))
        from ncsim import nki

        kernel, args, kwargs = spec.kernel, spec.args, {}
        if kernel is None:  # FILE.py:FUNCTION: its defaults are its arguments (the tracer binds only what is given)
            kernel = _nki_kernel(spec)
            kwargs = {n: p.default for n, p in inspect.signature(getattr(kernel, "func", kernel)).parameters.items()
                      if p.default is not inspect.Parameter.empty}
        r = nki.simulate(kernel, args, kwargs, values=False, config=config)
        return "ok", write_elf(r.result.program.to_object())
    except NcsimError as e:
        return "error", e.format()
    except Exception as e:  # noqa: BLE001 - an NKI kernel's own Python error, or an ncsim bug: this point's result
        return ("error" if spec.kind == "nki" else "failed"), f"{type(e).__name__}: {e}"


def _nki_kernel(spec: ProgramSpec) -> Any:
    """FILE.py:FUNCTION imported (as its own module, its folder on sys.path like `ncsim nki`)."""
    assert spec.path is not None and spec.function is not None
    path = Path(spec.path).resolve()
    module_name = f"_ncsim_sweep_{_digest(str(path))[:12]}"
    module = sys.modules.get(module_name)
    if module is None:
        if str(path.parent) not in sys.path:
            sys.path.insert(0, str(path.parent))
        s = importlib.util.spec_from_file_location(module_name, path)
        assert s is not None and s.loader is not None
        module = importlib.util.module_from_spec(s)
        s.loader.exec_module(module)
        sys.modules[module_name] = module
    kernel = getattr(module, spec.function, None)
    if kernel is None or not callable(kernel):
        raise NcsimError(f"{spec.function} is not a function of this file", file=spec.path)
    func = getattr(kernel, "func", kernel)
    missing = [n for n, p in inspect.signature(func).parameters.items()
               if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if missing:
        raise NcsimError(f"kernel {spec.function}: parameters {', '.join(missing)} have no default; a swept NKI"
                         " kernel takes its tensors as defaults, e.g. a=nki.typing.tensor[[128, 512], nl.float32]",
                         file=spec.path)
    return kernel


def _decoded(key: str, elf: bytes) -> Any:
    """The decoded program of an object, decoded once per worker (the last few are kept)."""
    with _decoded_lock:
        prog = _decoded_cache.get(key)
        if prog is not None:
            _decoded_cache.move_to_end(key)
            return prog
    from ncsim.asm.elf import read_elf
    from ncsim.program import Program

    prog = Program.from_object(read_elf(elf, key), key)
    with _decoded_lock:
        _decoded_cache[key] = prog
        while len(_decoded_cache) > _DECODED_KEEP:
            _decoded_cache.popitem(last=False)
    return prog


def _empty_row(status: str, error: str | None) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(METRICS)
    row.update(status=status, error=error)
    return row


def _keep_freed_memory() -> None:
    """Once per process: a worker keeps the memory a point frees for the next point (ncsim.runtime.heap:
    no mmap for large blocks, no trimming). Given back each time, the next point takes it again as
    fresh pages, and with two workers those page faults cost more than the points' own work: on the
    2-core machine tools/bench_sweep.py's cluster was no faster than a loop (x1.01, 12 s of system
    time) until the workers kept their memory (x1.5). Dask's own nanny asks for the opposite
    (MALLOC_TRIM_THRESHOLD_=65536), so this is set here, in the worker, for every cluster."""
    from ncsim.runtime.heap import keep_freed_memory

    keep_freed_memory()


def _run_point(assembled: tuple[str, Any], key: str, spec: ProgramSpec, config: Config,
               values: bool) -> dict[str, Any]:
    """On a worker: one point's row (its metrics, or its status and error)."""
    _keep_freed_memory()
    status, payload = assembled
    if status != "ok":
        return _empty_row(status, payload)
    start = time.perf_counter()
    try:
        from ncsim.errors import DeadlockError
        from ncsim.runtime.run import run
        from ncsim.runtime.verify import verify_program

        prog = _decoded(key, payload)
        verify_program(prog, config)  # the object held to this configuration, as `ncsim run` does
        sidecar: Any = False
        if values and spec.kind == "asm" and spec.path is not None:
            from ncsim.runtime.inputs import find_sidecar

            sidecar = find_sidecar(spec.path) or False
        try:
            result = run(prog, config=config, values=values, sidecar=sidecar, check=values,
                         params=None)
        except DeadlockError as e:
            return _empty_row("deadlock", e.format())
        rep = result.report
    except NcsimError as e:
        return _empty_row("error", e.format())
    except Exception as e:  # noqa: BLE001 - an ncsim bug under this configuration: this point's result
        return _empty_row("failed", f"internal error: {type(e).__name__}: {e}")
    row = _empty_row("ok", None)
    v = rep.verdict
    row.update(
        time_us=rep.total_us, verdict=v.engine if v.kind == "engine" else v.kind, verdict_text=v.text,
        dma_busy=rep.dma_busy, dma_gbps=rep.dma_bytes * config.tick_hz / rep.total / 1e9 if rep.total else 0.0,
        hbm_utilisation=rep.hbm_utilisation, tensor_utilisation=rep.tensor_utilisation,
        instructions=result.instructions, races=len(result.races) if result.races is not None else 0,
        check=(None if result.check is None else ("bit-exact" if result.check.ok else "mismatch")),
        host_seconds=time.perf_counter() - start)
    for e in ("tensor", "vector", "scalar", "gpsimd"):
        row[f"busy_{e}"] = rep.share(rep.engine(e).busy)
    return row


# ---------------------------------------------------------------------------------------- the cache


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def point_key(spec: ProgramSpec, config: Config, values: bool) -> str:
    """The cache key of a point: the program's hash and the whole configuration (and whether values ran)."""
    cfg = {f.name: _jsonable(getattr(config, f.name)) for f in dataclasses.fields(config)}
    return _digest(spec.digest, json.dumps(cfg, sort_keys=True), "values" if values else "timing")


def read_cache(path: Path) -> dict[str, dict[str, Any]]:
    """key -> row of a cache file (lines that do not parse, e.g. the last one of a killed sweep, are skipped)."""
    rows: dict[str, dict[str, Any]] = {}
    if not path.is_file():
        return rows
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                entry = json.loads(line)
                rows[entry["key"]] = entry["row"]
            except (ValueError, KeyError, TypeError):
                continue
    return rows


# ---------------------------------------------------------------------------------------- the sweep


@contextlib.contextmanager
def cluster_client(client: Any = None, workers: int | None = None, dashboard: bool = False) -> Iterator[Any]:
    """The Dask client to run on: `client` itself, a Client of the scheduler at `client` (an address
    such as "tcp://127.0.0.1:8786"), or a LocalCluster of `workers` processes (default: one per core)
    on 127.0.0.1, with its dashboard on 127.0.0.1:8787 only when `dashboard`."""
    try:
        import distributed
    except ImportError:
        raise NcsimError(INSTALL_HINT) from None
    if client is not None and not isinstance(client, str):
        yield client
        return
    if isinstance(client, str):
        try:
            c = distributed.Client(client, timeout="20s")
        except (OSError, TimeoutError) as e:
            raise NcsimError(f"cannot reach the Dask scheduler at {client}: {e}") from None
        with c:
            yield c
        return
    n = workers or os.cpu_count() or 1
    # The scheduler serves HTTP (health, metrics) even without a dashboard, by default on port 8787 of
    # its host: without --dashboard, on a free port of 127.0.0.1 instead, so that sweeps run side by side.
    http = {} if dashboard else {"dashboard": False, "dashboard_address": "127.0.0.1:0"}
    with distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address="127.0.0.1:8787" if dashboard else None, scheduler_kwargs=http,
                                  silence_logs=logging.ERROR) as cluster, distributed.Client(cluster) as c:
        if dashboard:
            print(f"dask dashboard: {c.dashboard_link}", file=sys.stderr)
        yield c


def sweep(programs: Sequence[Any] | Any, grid: Mapping[str, Any] | Sequence[Mapping[str, Any]], client: Any = None,
          *, config: Config | None = None, zip_groups: Iterable[Sequence[str]] = (), values: bool = False,
          params: Mapping[str, int] | None = None, cache: str | Path | None = None, workers: int | None = None,
          dashboard: bool = False, progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """Run every program under every configuration of `grid` and return the results as a DataFrame,
    one row per (program, point) in program then grid order.

    programs: .s / .o paths, "FILE.py:FUNCTION" NKI kernels (tensor parameters defaulting to
    placeholders), (kernel, placeholder args) pairs, or one of these. grid: {parameter: values} (a
    product; `zip_groups` names parameters that vary together) or a list of {parameter: value} points.
    client: None (a LocalCluster here), a distributed.Client, or a scheduler address. config: the
    configuration the points change (default: ncsim's). values: compute values too (each point's
    `check` compares with the sidecar's reference). params: .param values of .s programs. cache: a
    file of finished points (JSON lines) read first and appended to. progress(done, total) is
    called as points finish."""
    try:
        import pandas as pd
    except ImportError:
        raise NcsimError(INSTALL_HINT) from None
    if isinstance(programs, str | Path | tuple) or not isinstance(programs, Sequence):
        programs = [programs]
    specs = [program_spec(p, params) for p in programs]
    if not specs:
        raise NcsimError("a sweep needs at least one program")
    names, points = grid_points(grid, zip_groups)
    base = config or Config()
    cache_path = Path(cache) if cache is not None else None
    cached = read_cache(cache_path) if cache_path is not None else {}

    rows: list[dict[str, Any] | None] = []
    todo: list[tuple[int, ProgramSpec, Config, str]] = []  # (row index, spec, config, point key)
    for spec in specs:
        for point in points:
            try:
                cfg = base.with_overrides(point)
            except ConfigError as e:  # the point's parameters disagree (e.g. PSUM banks and size)
                rows.append(_empty_row("error", e.format()))
                continue
            key = point_key(spec, cfg, values)
            if key in cached and cached[key].get("status") in CACHED_STATUSES:
                rows.append({m: cached[key].get(m) for m in METRICS})
            else:
                rows.append(None)
                todo.append((len(rows) - 1, spec, cfg, key))
    total, done = len(rows), len(rows) - len(todo)
    if progress is not None:
        progress(done, total)
    if todo:
        from distributed import as_completed

        run_id = uuid.uuid4().hex[:8]
        cache_file = open(cache_path, "a", encoding="utf-8") if cache_path is not None else None  # noqa: SIM115
        try:
            with cluster_client(client, workers, dashboard) as c:
                assembled: dict[tuple[str, tuple], Any] = {}
                futures = {}
                for index, spec, cfg, key in todo:
                    akey = (spec.digest, assembly_key(cfg))
                    token = _digest(spec.digest, repr(akey[1]))[:16]
                    if akey not in assembled:
                        assembled[akey] = c.submit(_assemble, spec, cfg, key=f"ncsim-assemble-{token}-{run_id}")
                    obj_key = f"{spec.name}@{token}"
                    f = c.submit(_run_point, assembled[akey], obj_key, spec.light(), cfg, values,
                                 key=f"ncsim-point-{key[:16]}-{index}-{run_id}")
                    futures[f] = (index, key)
                for f in as_completed(list(futures)):
                    index, key = futures[f]
                    try:
                        row = f.result()
                    except Exception as e:  # noqa: BLE001 - the worker died or the task could not run
                        row = _empty_row("failed", f"the task failed: {type(e).__name__}: {e}")
                    rows[index] = row
                    if cache_file is not None and row["status"] in CACHED_STATUSES:
                        cache_file.write(json.dumps({"key": key, "row": _jsonable_row(row)}) + "\n")
                        cache_file.flush()
                    done += 1
                    if progress is not None:
                        progress(done, total)
        finally:
            if cache_file is not None:
                cache_file.close()
    table = []
    i = 0
    for spec in specs:
        for point in points:
            row = rows[i]
            assert row is not None
            shown = {n: point.get(n, getattr(base, n)) for n in names}  # a point without n: the base value
            table.append({"program": spec.name, "program_hash": spec.digest[:16], **shown, **row})
            i += 1
    df = pd.DataFrame(table, columns=["program", "program_hash", *names, *METRICS])
    df.attrs["parameters"] = names
    return df


def _jsonable_row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _jsonable(v) for k, v in row.items()}


# ---------------------------------------------------------------------------------------- the answer


def _parameters(df: pd.DataFrame) -> list[str]:
    names = df.attrs.get("parameters")
    if names is None:
        names = [c for c in df.columns if c not in ("program", "program_hash", *METRICS)]
    return list(names)


def _show(name: str, value: Any) -> str:
    from ncsim.config import _format

    f = _FIELDS.get(name)
    if f is None:
        return str(value)
    if isinstance(f.default, int) and isinstance(value, float) and value.is_integer():
        value = int(value)  # a column that pandas made float
    return _format(value, f.metadata["unit"])


def sensitivity(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Per program and swept parameter: the speedup from its lowest to its highest value (time at the
    lowest / time at the highest), over every combination of the other parameters that ran at both
    ends (min, median, max), and the verdict changes along it."""
    out = []
    names = _parameters(df)
    for program, rows in df.groupby("program", sort=False):
        ok = rows[rows["status"] == "ok"]
        for p in names:
            others = [n for n in names if n != p and ok[n].nunique() > 1]
            values = sorted(ok[p].unique()) if len(ok) else []
            if len(values) < 2:
                continue
            speedups, changes = [], []
            groups = ok.groupby(others, sort=False, dropna=False) if others else [((), ok)]
            for _, g in groups:
                g = g.sort_values(p)
                lo, hi = g[g[p] == values[0]], g[g[p] == values[-1]]
                if len(lo) and len(hi):
                    speedups.append(float(lo["time_us"].iloc[0]) / float(hi["time_us"].iloc[0]))
                seq = list(zip(g[p], g["verdict"]))
                for (a, va), (b, vb) in itertools.pairwise(seq):
                    if va != vb:
                        change = (va, vb, a, b)
                        if change not in changes:
                            changes.append(change)
            if speedups:
                speedups.sort()
                out.append({"program": program, "parameter": p, "low": values[0], "high": values[-1],
                            "speedup_min": speedups[0], "speedup_median": speedups[len(speedups) // 2],
                            "speedup_max": speedups[-1], "verdict_changes": changes})
    return out


def summary(df: pd.DataFrame) -> str:
    """The terminal summary: points run and failed, then per program each parameter's speedup over
    its range and where the verdict changes."""
    n = len(df)
    failed = df[df["status"] != "ok"]
    lines = [f"{n} point{'s' if n != 1 else ''}: {n - len(failed)} ok"
             + "".join(f", {k} {v}" for k, v in failed["status"].value_counts().items())]
    for _, r in failed.head(5).iterrows():
        first = str(r["error"]).splitlines()[0] if r["error"] else ""
        lines.append(f"  {r['status']}: {r['program']} at "
                     + ", ".join(f"{p}={_show(p, r[p])}" for p in _parameters(df)) + f": {first}")
    if len(failed) > 5:
        lines.append(f"  ... and {len(failed) - 5} more (the table's error column)")
    rows = sensitivity(df)
    if rows:
        lines.append("")
        lines.append("sensitivity: speedup from the lowest to the highest value (time at lowest / time at highest)")
        width = max(len(str(r["program"])) for r in rows)
        for r in rows:
            spread = (f"{r['speedup_median']:.2f}x" if r["speedup_min"] == r["speedup_max"] else
                      f"{r['speedup_median']:.2f}x (median; {r['speedup_min']:.2f}x to {r['speedup_max']:.2f}x)")
            lines.append(f"  {r['program']!s:<{width}}  {r['parameter']} {_show(r['parameter'], r['low'])} -> "
                         f"{_show(r['parameter'], r['high'])}: {spread}")
            for va, vb, a, b in r["verdict_changes"][:3]:
                lines.append(f"  {'':<{width}}    verdict {va} -> {vb} between {_show(r['parameter'], a)} and "
                             f"{_show(r['parameter'], b)}")
    ok = df[df["status"] == "ok"]
    if len(ok):
        lines.append("")
        lines.append("fastest point per program:")
        for program, rows_ in ok.groupby("program", sort=False):
            best = rows_.loc[rows_["time_us"].idxmin()]
            where = ", ".join(f"{p}={_show(p, best[p])}" for p in _parameters(df))
            lines.append(f"  {program}: {best['time_us']:.3f} µs ({best['verdict']}) at {where}")
    return "\n".join(lines)


def plot(df: pd.DataFrame, path: str | Path) -> None:
    """Per program (rows) and swept parameter (columns): simulated time against the parameter, a line
    per combination of the other parameters, each point's marker the verdict there, and the first
    value at which each line's verdict changes marked with the new verdict."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = _parameters(df)
    ok = df[df["status"] == "ok"]
    programs = list(dict.fromkeys(df["program"]))
    if not names or not len(ok):
        raise NcsimError("nothing to plot: no point of the sweep ran", file=str(path))
    verdicts = sorted(ok["verdict"].dropna().unique())
    markers = dict(zip(verdicts, itertools.cycle("os^Dv<>pPX*h")))
    colours = dict(zip(verdicts, itertools.cycle(plt.rcParams["axes.prop_cycle"].by_key()["color"])))
    fig, axes = plt.subplots(len(programs), len(names), figsize=(4.2 * len(names), 3.2 * len(programs)),
                             squeeze=False)
    for i, program in enumerate(programs):
        rows = ok[ok["program"] == program]
        for j, p in enumerate(names):
            ax = axes[i][j]
            others = [n for n in names if n != p and rows[n].nunique() > 1]
            groups = rows.groupby(others, sort=False) if others else [((), rows)]
            for _, g in groups:
                g = g.sort_values(p)
                ax.plot(g[p], g["time_us"], color="0.6", linewidth=1, zorder=1)
                for v, gv in g.groupby("verdict"):
                    ax.scatter(gv[p], gv["time_us"], marker=markers[v], color=colours[v], zorder=2, s=28)
                seq = list(zip(g[p], g["time_us"], g["verdict"]))
                for (_, _, va), (b, tb, vb) in itertools.pairwise(seq):
                    if va != vb:
                        ax.annotate(f"-> {vb}", (b, tb), textcoords="offset points", xytext=(4, 6), fontsize=7)
            values = sorted(rows[p].unique()) if len(rows) else []
            if len(values) > 1 and values[0] > 0 and values[-1] / values[0] >= 10:
                ax.set_xscale("log")
                ax.minorticks_off()
            if 1 < len(values) <= 8:  # the swept values as ticks, in their units (820 GB/s)
                ax.set_xticks(values, [_show(p, v) for v in values], rotation=30, fontsize=7)
            ax.set_xlabel(p)
            ax.set_ylabel("simulated µs")
            ax.set_title(str(program), fontsize=9)
            ax.grid(True, alpha=0.3)
    handles = [plt.Line2D([], [], marker=markers[v], color=colours[v], linestyle="", label=v) for v in verdicts]
    fig.legend(handles=handles, loc="upper right", fontsize=8, title="verdict")
    fig.tight_layout(rect=(0, 0, 0.88, 1))
    try:
        fig.savefig(path, dpi=100)
    except OSError as e:
        raise NcsimError(f"cannot write the plot: {e.strerror}", file=str(path)) from None
    finally:
        plt.close(fig)


def write_table(df: pd.DataFrame, path: str | Path) -> None:
    """The table as CSV, or Parquet for a .parquet name (needs pyarrow)."""
    path = Path(path)
    try:
        if path.suffix == ".parquet":
            check_parquet(path)
            df.to_parquet(path, index=False)
        else:
            df.to_csv(path, index=False)
    except OSError as e:
        raise NcsimError(f"cannot write the results: {e.strerror}", file=str(path)) from None


def check_parquet(path: str | Path) -> None:
    """A .parquet output needs pyarrow: an error before the sweep runs, not after."""
    if str(path).endswith(".parquet") and importlib.util.find_spec("pyarrow") is None:
        raise NcsimError("writing Parquet needs pyarrow (pip install pyarrow); or name a .csv file", file=str(path))


# ---------------------------------------------------------------------------------------- the command


def command(programs: Sequence[str], grids: Sequence[str], zip_all: bool, values: bool, out: str, plot_path: str | None,
            scheduler: str | None, workers: int | None, dashboard: bool, use_cache: bool, config: Config,
            params: Mapping[str, int]) -> pd.DataFrame:
    """`ncsim sweep`: the grid from --grid options (NAME=V1,V2,... or FILE.toml), the sweep, the
    table written to `out` (its cache beside it, OUT.cache.jsonl, unless not `use_cache`) and the
    picture; a progress bar of the points (with its ETA) when the command draws bars."""
    from ncsim.progress import Progress

    if not programs:
        raise NcsimError("ncsim sweep needs at least one program (.s, .o or FILE.py:FUNCTION)")
    if not grids:
        raise NcsimError("ncsim sweep needs a grid: --grid NAME=V1,V2,... (repeatable) or --grid FILE.toml")
    grid: dict[str, Any] = {}
    groups: list[list[str]] = []
    for g in grids:
        if "=" not in g and g.endswith(".toml"):
            entries, zips = load_grid(g)
            for name in entries:
                if name in grid:
                    raise ConfigError(f"{name} is swept twice (in {g} and before it)")
            grid.update(entries)
            groups += zips
        else:
            name, items = parse_grid_option(g)
            if name in grid:
                raise ConfigError(f"--grid gives {name} twice")
            grid[name] = _values(name, items, "")
    if zip_all:
        groups = [list(grid)]
    check_parquet(out)
    cache = Path(out).with_suffix(".cache.jsonl") if use_cache else None
    _, points = grid_points(grid, groups)  # built once: the bar's total and the sweep's points
    with Progress(len(programs) * len(points), "sweep", unit="point") as bar:
        df = sweep(list(programs), points, scheduler, config=config, values=values, params=params,
                   cache=cache, workers=workers, dashboard=dashboard, progress=lambda done, _: bar.set(done))
    write_table(df, out)
    if plot_path is not None:
        plot(df, plot_path)
    return df
