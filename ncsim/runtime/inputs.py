"""A kernel's inputs and its reference: from files, from the program's sidecar, or seeded random.

Every HBM tensor declared `in` or `inout` is an input. Each one comes, in this order of preference,
from a file given by the user (`--input NAME=FILE.npy`, or an array passed to `ncsim.run`), from the
sidecar's `inputs(seed)`, or from a seeded random generator. Every input must have exactly the
declared shape and the declared dtype's storage type: ncsim never converts an input silently.

A sidecar is the Python file beside the program with the same stem (`programs/giou.py` for
`programs/giou.s` or `programs/giou.o`). It may define:
    inputs(seed: int) -> dict[str, np.ndarray]       example inputs, deterministic in `seed`
    reference(**inputs) -> dict[str, np.ndarray]     the outputs the kernel must produce, bit for bit
"""

from __future__ import annotations

import importlib.util
import sys
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from ncsim import dtypes
from ncsim.asm.objfile import ObjectFile, TensorEntry
from ncsim.errors import InputError
from ncsim.numerics import from_f32, to_f32

if TYPE_CHECKING:
    from ncsim.program import Program

INPUT_KINDS = ("in", "inout")
OUTPUT_KINDS = ("out", "inout")


def input_tensors(obj: ObjectFile | Program) -> list[TensorEntry]:
    """The inputs of an object or a decoded program (both keep the object's tensor list)."""
    return [t for t in obj.tensors if t.memory == "hbm" and t.kind in INPUT_KINDS]


def output_tensors(obj: ObjectFile | Program) -> list[TensorEntry]:
    """The outputs of an object or a decoded program (both keep the object's tensor list)."""
    return [t for t in obj.tensors if t.memory == "hbm" and t.kind in OUTPUT_KINDS]


# ------------------------------------------------------------------ sidecars
class Sidecar:
    """The sidecar module of a program, or none."""

    def __init__(self, path: Path | None, module: ModuleType | None):
        self.path = path
        self.module = module

    @property
    def has_inputs(self) -> bool:
        return self.module is not None and callable(getattr(self.module, "inputs", None))

    @property
    def has_reference(self) -> bool:
        return self.module is not None and callable(getattr(self.module, "reference", None))

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        fn: Callable[..., Any] = getattr(self.module, name)
        try:
            return fn(*args, **kwargs)
        except SystemExit as e:
            raise InputError(f"the sidecar's {name}() called sys.exit({_code(e)}): a sidecar returns its"
                             " arrays, it does not end the run", file=str(self.path)) from None
        except Exception as e:  # noqa: BLE001 - the user's code: report it as theirs
            raise InputError(f"the sidecar's {name}() failed: {type(e).__name__}: {e}", file=str(self.path)) from None


def _code(e: SystemExit) -> str:
    return "" if e.code is None else repr(e.code)


def find_sidecar(program: str | Path | None) -> Path | None:
    if program is None:
        return None
    path = Path(program).with_suffix(".py")
    return path if path.is_file() else None


def load_sidecar(path: str | Path | None) -> Sidecar:
    """Import a sidecar file (None: no sidecar). A sidecar that does not import is an InputError."""
    if path is None:
        return Sidecar(None, None)
    path = Path(path)
    name = f"ncsim_sidecar_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InputError("cannot load the sidecar as Python", file=str(path))
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SystemExit as e:
        raise InputError(f"the sidecar called sys.exit({_code(e)}) while it was imported: a sidecar defines"
                         " inputs() and reference(), it does not end the run", file=str(path)) from None
    except Exception as e:  # noqa: BLE001 - the user's code: report it as theirs
        raise InputError(f"the sidecar does not import: {type(e).__name__}: {e}", file=str(path)) from None
    finally:
        sys.modules.pop(name, None)
    return Sidecar(path, module)


# ------------------------------------------------------------------ reading and checking arrays
def read_npy(path: str | Path, name: str) -> np.ndarray:
    """A .npy file's array (an .npz with exactly one array, or an array named `name`, also works)."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"input '{name}': is a directory, not a .npy file", file=str(p))
    if not p.is_file():
        raise InputError(f"input '{name}': no such file", file=str(p))
    try:
        data = np.load(p, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise InputError(f"input '{name}': not a readable .npy file ({e})", file=str(p)) from None
    if isinstance(data, np.lib.npyio.NpzFile):
        with data:
            keys = list(data.keys())
            if name in keys:
                return data[name]
            if len(keys) == 1:
                return data[keys[0]]
            raise InputError(f"input '{name}': the .npz holds {keys}, none named '{name}'", file=str(p))
    return data


def check_array(t: TensorEntry, array: Any, source: str, what: str = "input") -> np.ndarray:
    """`array` as the stored values of tensor `t`, or an InputError saying what was expected."""
    if not isinstance(array, np.ndarray):
        try:
            array = np.asarray(array)
        except Exception as e:  # noqa: BLE001 - anything that is not array-like
            raise InputError(f"{what} '{t.name}' from {source}: not an array ({type(e).__name__})") from None
    want = t.dtype.storage
    shape = tuple(t.shape)
    array = _narrow_float_form(t, array)
    if array.dtype != want:
        raise InputError(f"{what} '{t.name}' from {source} has dtype {array.dtype}, but the kernel declares"
                         f" {t.dtype.short}{list(shape)}, stored as {want}",
                         notes=(f"convert it first, e.g. array.astype({_dtype_expr(t.dtype)})",))
    if array.shape != shape:
        raise InputError(f"{what} '{t.name}' from {source} has shape {list(array.shape)}, but the kernel declares"
                         f" {t.dtype.short}{list(shape)}")
    return np.ascontiguousarray(array)


def _narrow_float_form(t: TensorEntry, array: np.ndarray) -> np.ndarray:
    """The two forms a .npy file can give a narrow float (bf16, fp8) in: raw bytes (numpy saves an
    ml_dtypes array as void 'V2' or 'V1'), or float32 values that the dtype holds exactly."""
    d = t.dtype
    if not d.is_float or array.dtype == d.storage:
        return array
    if array.dtype.kind == "V" and array.dtype.itemsize == d.itemsize:
        return array.view(d.storage)
    if array.dtype == np.float32:
        narrowed = from_f32(array, d)
        if to_f32(narrowed, d).tobytes() == array.tobytes():
            return narrowed
        raise InputError(f"input '{t.name}' is float32 with values that {d.short} cannot hold exactly;"
                         f" round them to {d.short} first (ncsim does not round inputs silently)")
    return array


def as_saved(t: TensorEntry, array: np.ndarray) -> np.ndarray:
    """An output as it goes into an .npz: bf16 and fp8 widened to float32 (exactly, NaN payloads
    kept), since numpy cannot name the ml_dtypes types in a file; everything else unchanged."""
    if t.dtype.storage.kind == "V":
        return to_f32(array, t.dtype)
    return array


def _dtype_expr(d: dtypes.DType) -> str:
    if d.storage.type.__module__.startswith("ml_dtypes"):
        return f"ml_dtypes.{d.storage.name}"
    return f"np.{d.storage.name}"


def random_input(t: TensorEntry, rng: np.random.Generator) -> np.ndarray:
    """Seeded example values: standard normal floats, small integers in [-8, 8] clipped to the type, 0/1 bools."""
    shape = tuple(t.shape)
    d = t.dtype
    if d.kind == "bool":
        return rng.integers(0, 2, shape).astype(np.uint8)
    if d.is_int:
        info = np.iinfo(d.storage)
        return np.clip(rng.integers(-8, 9, shape), info.min, info.max).astype(d.storage)
    return from_f32(rng.standard_normal(shape, dtype=np.float32), d)


def resolve_inputs(obj: ObjectFile, given: Mapping[str, Any], sidecar: Sidecar, seed: int) -> tuple[
        dict[str, np.ndarray], dict[str, str]]:
    """Every input's array and where it came from ("file X", "sidecar", "random (seed N)")."""
    tensors = {t.name: t for t in input_tensors(obj)}
    unknown = sorted(set(given) - set(tensors))
    if unknown:
        declared = ", ".join(tensors) or "none"
        raise InputError(f"the kernel has no input named {', '.join(repr(u) for u in unknown)}"
                         f" (its inputs: {declared})")
    arrays: dict[str, np.ndarray] = {}
    origin: dict[str, str] = {}
    for name, value in given.items():
        if isinstance(value, (str, Path)):
            arrays[name] = check_array(tensors[name], read_npy(value, name), f"file {value}")
            origin[name] = f"file {value}"
        else:
            arrays[name] = check_array(tensors[name], value, "the caller")
            origin[name] = "the caller"
    missing = [n for n in tensors if n not in arrays]
    if missing and sidecar.has_inputs:
        made = sidecar.call("inputs", seed)
        if not isinstance(made, Mapping):
            raise InputError("the sidecar's inputs() must return a dict of arrays", file=str(sidecar.path))
        extra = sorted(set(made) - set(tensors), key=str)
        if extra:
            raise InputError(f"the sidecar's inputs() gives {extra}, which are not inputs of the kernel"
                             f" (its inputs: {', '.join(tensors) or 'none'})", file=str(sidecar.path))
        for name in missing:
            if name not in made:
                raise InputError(f"the sidecar's inputs() gives no '{name}'", file=str(sidecar.path))
            arrays[name] = check_array(tensors[name], made[name], f"the sidecar {sidecar.path}")
            origin[name] = f"sidecar (seed {seed})"
    rng = np.random.default_rng(seed)
    for name, t in tensors.items():
        if name not in arrays:
            arrays[name] = random_input(t, rng)
            origin[name] = f"random (seed {seed})"
    return {n: arrays[n] for n in tensors}, origin


def reference_outputs(obj: ObjectFile, sidecar: Sidecar, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The sidecar's reference for these inputs, each checked against the declared output."""
    outs = {t.name: t for t in output_tensors(obj)}
    expected = sidecar.call("reference", **{k: v.copy() for k, v in inputs.items()})
    if not isinstance(expected, Mapping):
        raise InputError("the sidecar's reference() must return a dict of arrays", file=str(sidecar.path))
    extra = sorted(set(expected) - set(outs))
    if extra:
        raise InputError(f"the sidecar's reference() gives {extra}, which are not outputs of the kernel"
                         f" (its outputs: {', '.join(outs) or 'none'})", file=str(sidecar.path))
    return {name: check_array(outs[name], expected[name], f"the sidecar's reference() ({sidecar.path})", "output")
            for name in outs if name in expected}
