"""Hypothesis strategies for random legal values of every operand kind, and whole instructions.

Values here are legal for the encoding (what the operand kinds check); hardware rules that depend
on the configuration are exercised separately.
"""

from __future__ import annotations

import functools
import math

from hypothesis import strategies as st

from ncsim import dtypes, isa
from ncsim.asm import fields as F
from ncsim.asm.instruction import Instruction
from ncsim.gpsimd import fields as G
from ncsim.memory.access import AccessPattern, Immediate, Memory

f32 = st.floats(width=32, allow_nan=False) | st.just(math.nan)
small = st.integers(min_value=1, max_value=4096)


@st.composite
def access_patterns(draw, memory: Memory) -> AccessPattern:
    dt = draw(st.sampled_from(dtypes.DTYPES))
    limit = F.MAX_HBM_DIMS if memory == Memory.HBM else F.MAX_FREE_DIMS
    dims = tuple(draw(st.lists(st.tuples(st.integers(-64, 4096), small), min_size=1, max_size=limit)))
    # enough offset that negative steps stay inside memory
    reach = sum(-s * (c - 1) for s, c in dims if s < 0) * dt.itemsize
    offset = reach + draw(st.integers(0, 1 << 20))
    if memory == Memory.HBM:
        return AccessPattern(memory, dt, 0, 0, offset, dims)
    start = draw(st.integers(0, 127))
    count = draw(st.integers(1, 128 - start))
    return AccessPattern(memory, dt, start, count, offset, dims)


def constants() -> st.SearchStrategy[Immediate]:
    return (f32.map(lambda x: Immediate(x, dtypes.FLOAT32))
            | st.integers(F.INT32_MIN, F.INT32_MAX).map(lambda v: Immediate(v, dtypes.INT32))
            | st.integers(F.INT32_MAX + 1, F.UINT32_MAX).map(lambda v: Immediate(v, dtypes.by_name("u32"))))


def sem_ops(ops: tuple[str, ...]) -> st.SearchStrategy[F.SemOp]:
    return st.builds(F.SemOp, st.integers(0, 255), st.sampled_from(ops), st.integers(0, F.UINT32_MAX))


@functools.cache
def values(kind: F.Kind) -> st.SearchStrategy:
    """The strategy of an operand kind, made once per kind: hypothesis validates a strategy when it is
    first drawn from, which for strategies made anew in every example cost more than the drawing."""
    if isinstance(kind, F.APKind):
        options = [access_patterns(m) for m in kind.memories]
        if kind.imm:
            options.append(constants())
        if kind.optional:
            options.append(st.none())
        return st.one_of(options)
    if isinstance(kind, F.ConstKind):
        return constants()
    if isinstance(kind, F.IntKind):
        return st.integers(kind.lo, kind.hi)
    if isinstance(kind, F.FloatKind):
        return f32
    if isinstance(kind, F.BoolKind):
        return st.booleans()
    if isinstance(kind, F.EnumKind):
        return st.sampled_from(kind.choices + ((None,) if kind.optional else ()))
    if isinstance(kind, F.IntListKind):
        return st.lists(st.integers(kind.lo, kind.hi), min_size=kind.min_len, max_size=kind.max_len).map(tuple)
    if isinstance(kind, F.PatternKind):
        pairs = st.tuples(st.integers(F.INT32_MIN, F.INT32_MAX), st.integers(1, F.INT32_MAX))
        return st.lists(pairs, min_size=1, max_size=F.MAX_FREE_DIMS).map(tuple)
    if isinstance(kind, F.SemOneKind):
        return sem_ops(kind.ops)
    if isinstance(kind, F.SemListKind):
        return st.lists(sem_ops(kind.ops), max_size=kind.max_len).map(tuple)
    if isinstance(kind, G.ProgramKind):
        return st.integers(0, 2**16 - 1)
    if isinstance(kind, G.RegKind):
        return st.integers(0, kind.last)  # a group of registers (vld4's) must end by the last register
    if isinstance(kind, G.RegOrImmKind):
        imm = f32 if kind.float_imm else st.integers(F.INT32_MIN, F.INT32_MAX)
        return st.one_of(st.integers(0, G.REGISTERS - 1).map(G.Reg), imm)
    if isinstance(kind, G.TargetKind):
        return st.integers(0, 2**20)
    raise TypeError(f"no strategy for {type(kind).__name__}: add one when adding a kind")


@st.composite
def instructions(draw, spec: isa.InstrSpec) -> Instruction:
    operands = {o.name: draw(values(o.kind)) for o in spec.operands}
    engine = draw(st.sampled_from(spec.engines))
    waits = draw(values(isa.WAITS))
    signals = draw(values(isa.SIGNALS))
    return Instruction(spec, engine, operands, waits, signals)
