"""Run one instruction on a fresh machine, and build its operands and their contents.

    lay = Layout()
    instr = make("tensor_tensor", dst=lay.tile("f32", 4, 8), data1=lay.tile("bf16", 4, 8),
                 data2=lay.tile("f32", 4, 8), op="add")
    init = fill(instr, rng)                    # random stored values (edge values mixed in) per tile
    got = run_one(instr, init)                  # what the machine wrote, per written operand
    want = reference_of(instr, init)            # what the plain reference says
    assert_same(got, want)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ncsim import dtypes, engines, isa
from ncsim.asm.instruction import Instruction, encode
from ncsim.asm.objfile import LineEntry, ObjectFile, TensorEntry
from ncsim.config import Config
from ncsim.memory.access import AccessPattern, Immediate, Memory
from ncsim.numerics import bits_equal
from ncsim.runtime.machine import Machine

DEFAULT = Config()
engines.load()


def dt(name: str | dtypes.DType) -> dtypes.DType:
    return name if isinstance(name, dtypes.DType) else dtypes.by_name(name)


class Layout:
    """Hands out non-overlapping tiles: each new tile starts 64-byte aligned after the last one, in
    every partition, per memory."""

    def __init__(self) -> None:
        self.next = {Memory.SBUF: 0, Memory.PSUM: 0, Memory.HBM: 0}

    def tile(self, dtype: str | dtypes.DType, partitions: int, *free: int, memory: Memory = Memory.SBUF,
             partition: int = 0, dims: tuple[tuple[int, int], ...] | None = None) -> AccessPattern:
        """A [partitions, *free] tile (row-major, or the given (step, count) dims) in `memory`."""
        d = dt(dtype)
        if dims is None:
            dims, step = [], 1
            for count in reversed(free or (1,)):
                dims.append((step, count))
                step *= count
            dims = tuple(reversed(dims))
        lo = sum(s * (c - 1) for s, c in dims if s < 0)
        hi = sum(s * (c - 1) for s, c in dims if s > 0)
        offset = self.next[memory] - lo * d.itemsize
        self.next[memory] = (offset + (hi + 1) * d.itemsize + 63) // 64 * 64
        if memory == Memory.HBM:
            return AccessPattern(memory, d, 0, 0, offset, dims)
        return AccessPattern(memory, d, partition, partitions, offset, dims)

    def hbm(self, dtype: str | dtypes.DType, *shape: int) -> AccessPattern:
        return self.tile(dtype, 0, *shape, memory=Memory.HBM)


def const(value: float, dtype: str = "f32") -> Immediate:
    return Immediate(value, dt(dtype))


def make(mnemonic: str, engine: str | None = None, **operands: Any) -> Instruction:
    """An instruction with the given operands and the table's defaults for the rest."""
    spec = isa.BY_MNEMONIC[mnemonic]
    values = {}
    for o in spec.operands:
        if o.name in operands:
            values[o.name] = operands.pop(o.name)
        elif o.required:
            raise TypeError(f"{mnemonic} needs operand {o.name}")
        else:
            values[o.name] = o.default
    if operands:
        raise TypeError(f"{mnemonic} has no operands {sorted(operands)}")
    return Instruction(spec, engine or spec.engines[0], values)


def tiles(instr: Instruction) -> dict[str, AccessPattern]:
    return {k: v for k, v in instr.operands.items() if isinstance(v, AccessPattern)}


# ------------------------------------------------------------------ values
EDGE_F32 = np.array([0.0, -0.0, 1.0, -1.0, 0.5, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754942e-38,
                     3.4028235e38, -3.4028235e38, 65504.0, 65520.0, 240.0, 248.0, 57344.0, 2.0**-20, 1e-8,
                     3.0, 7.0, 2.5], np.float32)


def random_raw(dtype: str | dtypes.DType, shape: tuple[int, ...], rng: np.random.Generator,
               edges: float = 0.1) -> np.ndarray:
    """Random stored values of `dtype`: normal-ish floats (a fraction `edges` of them edge values:
    zeros of both signs, inf, NaN, subnormals, overflow points), integers over the type's range."""
    d = dt(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if d.kind == "bool":
        return rng.integers(0, 2, n).astype(np.uint8).reshape(shape)
    if d.is_int:
        info = np.iinfo(d.storage)
        small = rng.integers(-8, 9, n)
        full = rng.integers(int(info.min), int(info.max), n, endpoint=True, dtype=np.int64)
        v = np.where(rng.random(n) < 0.5, np.clip(small, info.min, info.max), full)
        return v.astype(d.storage).reshape(shape)
    scale = {"fp8e4": 4.0, "fp8e5": 8.0}.get(d.short, 3.0)
    x = (rng.standard_normal(n) * scale).astype(np.float32)
    pick = rng.random(n) < edges
    x[pick] = rng.choice(EDGE_F32, int(pick.sum()))
    with np.errstate(all="ignore"):
        if d.storage == np.float32:
            raw = x.copy()
            if d.short == "tf32":
                raw = (raw.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
        else:
            raw = x.astype(d.storage)
    return raw.reshape(shape)


def fill(instr: Instruction, rng: np.random.Generator, edges: float = 0.1,
         **given: np.ndarray) -> dict[str, np.ndarray]:
    """Initial stored values for every tile operand (outputs too): `given` ones, else random."""
    out = {}
    for name, ap in tiles(instr).items():
        out[name] = given[name] if name in given else random_raw(ap.dtype, ap.shape, rng, edges)
    return out


# ------------------------------------------------------------------ running
def one_instruction_object(instr: Instruction) -> ObjectFile:
    obj = ObjectFile(kernel="one")
    obj.streams[instr.engine] = encode(instr)
    obj.lines[instr.engine] = [LineEntry(0, 0, 1, 1)]
    obj.files = ["<test>"]
    spans = [ap.byte_span() for ap in tiles(instr).values() if ap.memory == Memory.HBM]
    if spans:
        lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
        obj.tensors = [TensorEntry("hbm", "hbm", dtypes.UINT8, (hi - lo,), 0, lo, "scratch")]
    return obj


def run_one(instr: Instruction, init: dict[str, np.ndarray], config: Config = DEFAULT,
            state: dict | None = None) -> tuple[dict[str, np.ndarray], Machine]:
    """Execute `instr` on a machine whose tiles hold `init`; return every written operand's stored
    values (by operand name) and the machine. `init` is updated to what each operand reads back."""
    m = Machine(one_instruction_object(instr), config, "<test>")
    if state:
        m.engine_state[instr.engine].update(state)
    for name, ap in tiles(instr).items():
        if name in init:
            m.mem.write(ap, np.asarray(init[name], ap.dtype.storage).reshape(ap.shape))
    # A pattern that visits an element twice (a step of 0) stores only the last value written there:
    # what the instruction reads, and what the reference must be given, is what memory now holds.
    for name, ap in tiles(instr).items():
        if name in init:
            init[name] = m.mem.read(ap)
    m.run()
    written = {o.name for o in instr.spec.operands if o.role in ("out", "inout")}
    return {n: m.mem.read(ap) for n, ap in tiles(instr).items() if n in written}, m


def reference_of(instr: Instruction, init: dict[str, np.ndarray], state: dict | None = None) -> dict[str, np.ndarray]:
    return instr.spec.slots["reference"](instr, {k: v.copy() for k, v in init.items()}, dict(state or {}))


def assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray], instr: Instruction | None = None) -> None:
    """Bit-for-bit equality of every operand the reference names (NaN payloads included)."""
    for name, w in want.items():
        g = got[name]
        w = np.asarray(w)
        assert g.shape == w.shape, (name, g.shape, w.shape)
        assert g.dtype == w.dtype, (name, g.dtype, w.dtype)
        if not bits_equal(g, w):
            bad = np.flatnonzero(g.reshape(-1).view(f"u{g.dtype.itemsize}") != w.reshape(-1).view(
                f"u{g.dtype.itemsize}"))
            i = bad[0]
            raise AssertionError(f"{instr or ''}\n{name}: {len(bad)} of {g.size} elements differ; first at flat"
                                 f" index {i}: got {g.reshape(-1)[i]!r}, want {w.reshape(-1)[i]!r}")


def check(instr: Instruction, rng: np.random.Generator, edges: float = 0.1, state: dict | None = None,
          **given: np.ndarray) -> dict[str, np.ndarray]:
    """Run `instr` both ways on random contents; assert they agree; return the outputs."""
    init = fill(instr, rng, edges, **given)
    got, _ = run_one(instr, init, state=state)
    assert_same(got, reference_of(instr, init, state), instr)
    return got


__all__ = ["Layout", "assert_same", "check", "const", "fill", "make", "random_raw", "reference_of", "run_one"]
