"""Generic checks over the instruction table: every row can be executed, has a plain reference and a
test of its own, and no legal instruction on any memory contents crashes the machine.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ncsim import dtypes, engines, isa
from ncsim.asm.instruction import Instruction
from ncsim.asm.rules import check_instruction
from ncsim.errors import AsmError, NcsimError
from ncsim.memory.access import AccessPattern, Memory
from tests.engines.harness import DEFAULT, run_one
from tests.strategies import constants, values

engines.load()
ROWS = [pytest.param(row, id=row.mnemonic) for row in isa.TABLE]
HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("row", ROWS)
def test_row_has_semantics_reference_and_cost(row: isa.InstrSpec):
    assert callable(row.slots.get("execute")), f"{row.mnemonic} has no execute function"
    assert callable(row.slots.get("cost")), f"{row.mnemonic} has no cost function"
    assert callable(row.slots.get("reference")), f"{row.mnemonic} has no plain reference"


def test_every_row_has_a_test_of_its_own():
    """Every mnemonic is named in some tests/engines/test_*.py other than this generic file."""
    text = "\n".join(p.read_text() for p in HERE.glob("test_*.py") if p.name != Path(__file__).name)
    missing = [r.mnemonic for r in isa.TABLE if not re.search(rf"['\"]{r.mnemonic}['\"]", text)]
    assert not missing, f"instructions without a test: {missing}"


# ------------------------------------------------------------------ robustness
_DIMS = st.lists(st.tuples(st.integers(-2, 3), st.integers(1, 6)), min_size=1, max_size=3).map(tuple)
_PARTITIONS = st.sampled_from([(0, 128), (0, 64), (64, 64), (0, 32), (32, 32), (96, 32), (0, 1), (32, 16), (0, 16)])
# An instruction's patterns mostly take the one layout drawn for it (its dims and partitions), else a
# [P, 1] column on its partitions (bias, scale and reduction operands are columns) or a layout of their
# own: most operands of a row must agree in shape, and with a shape of their own each (about 98% of
# activation_reduce's draws disagreed and were thrown away) the test spent its time drawing
# instructions the assembler refuses.
_TAKES = st.sampled_from(["layout", "layout", "layout", "column", "own"])


@dataclass(frozen=True)
class _Shared:
    """A pattern in `memory` of `dtype` that takes the instruction's layout (`plausible`)."""

    memory: Memory
    dtype: dtypes.DType
    extra: int  # bytes past the offset its negative steps need
    column: bool  # a [P, 1] column on the layout's partitions

    def pattern(self, dims: tuple[tuple[int, int], ...], partitions: tuple[int, int]) -> AccessPattern:
        return _pattern(self.memory, self.dtype, ((1, 1),) if self.column else dims, partitions, self.extra)


def _pattern(memory: Memory, dt: dtypes.DType, dims: tuple[tuple[int, int], ...], partitions: tuple[int, int],
             extra: int) -> AccessPattern:
    reach = sum(-s * (c - 1) for s, c in dims if s < 0) * dt.itemsize
    if memory == Memory.HBM:
        return AccessPattern(memory, dt, 0, 0, reach + extra, dims)
    return AccessPattern(memory, dt, *partitions, reach + extra, dims)


@st.composite
def tiles(draw, memories: tuple[Memory, ...]) -> AccessPattern | _Shared:
    """Small access patterns that mostly keep the hardware rules (legal partition starts, few elements):
    mostly a `_Shared` one, which takes the instruction's layout."""
    memory = draw(st.sampled_from(memories))
    dt = draw(st.sampled_from(dtypes.DTYPES))
    extra = draw(st.integers(0, 256))
    takes = draw(_TAKES)
    if takes != "own":
        return _Shared(memory, dt, extra, takes == "column")
    return _pattern(memory, dt, draw(_DIMS), draw(_PARTITIONS), extra)


@functools.cache
def _operand_strategies(row: isa.InstrSpec) -> tuple[tuple[str, st.SearchStrategy], ...]:
    """Each operand's strategy, made once per row: hypothesis validates a strategy on its first draw,
    which for strategies made anew in every example was most of this test's time."""
    out = []
    for o in row.operands:
        kind = o.kind
        if hasattr(kind, "memories"):
            options = [tiles(kind.memories)]
            if kind.imm:
                options.append(constants())
            if kind.optional:
                options.append(st.none())
            out.append((o.name, st.one_of(options)))
        else:
            out.append((o.name, values(kind)))
    return (*out, ("", st.sampled_from(row.engines)))


@st.composite
def plausible(draw, row: isa.InstrSpec) -> Instruction:
    *operands, (_, engine) = _operand_strategies(row)
    dims, partitions = draw(_DIMS), draw(_PARTITIONS)
    values_ = {name: draw(strategy) for name, strategy in operands}
    values_ = {name: v.pattern(dims, partitions) if isinstance(v, _Shared) else v for name, v in values_.items()}
    return Instruction(row, draw(engine), values_)


@pytest.mark.parametrize("row", ROWS)
@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_no_legal_instruction_crashes_the_machine(row: isa.InstrSpec, data):
    """Whatever an instruction meets (any operands, any memory contents), it runs or raises an NcsimError:
    never another exception. One the assembler refuses for a rule of ncsim.asm.rules is refused by the
    run too, naming the same rule (one definition, checked at both times)."""
    instr = data.draw(plausible(row))
    refused = ""
    try:
        check_instruction(instr, DEFAULT)
    except AsmError as e:
        refused = e.message
    rule = re.search(r"\(rule [a-z0-9-]+\)", refused)
    assume(not refused or rule)  # the generic checks (bounds, partition starts) have no run-time twin
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    init = {}
    for name, v in instr.operands.items():
        if isinstance(v, AccessPattern):
            raw = rng.integers(0, 256, v.num_elements * v.dtype.itemsize, dtype=np.uint8)
            init[name] = raw.view(v.dtype.storage).reshape(v.shape)
    try:
        run_one(instr, init)
    except NcsimError as e:
        assert e.format()  # it says something, placed or not
        if rule:
            assert rule.group(0) in e.message, (refused, e.message)
    else:
        assert not rule, f"the assembler refuses it ({refused}) but the run did not"
