"""ncsim.asm.lanes: comparisons of lanes with any Python int, and chains of arithmetic, are exact (against
Python's integers)."""

from __future__ import annotations

import operator

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from ncsim.asm.lanes import LaneBool, Lanes, Unvectorisable, lanes

OPS = (operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne)
LANE = st.integers(-(2**62) + 1, 2**62 - 1)
# around the edges where the comparison changes method: 2**62, int64's ends, and far beyond
EDGES = st.sampled_from([2**62 - 1, 2**62, 2**62 + 1, 2**63 - 1, 2**63, 2**63 + 1, 2**100])
OTHER = st.one_of(LANE, EDGES, EDGES.map(operator.neg), st.integers())


@given(st.lists(LANE, min_size=2, max_size=6, unique=True), OTHER, st.sampled_from(OPS))
def test_a_comparison_with_an_int_is_python_s_in_every_lane(values, other, op):
    got = op(Lanes(np.array(values, np.int64)), other)
    want = [op(v, other) for v in values]
    if isinstance(got, LaneBool):
        assert got.v.tolist() == want and len(set(want)) == 2
    else:
        assert isinstance(got, bool) and want == [got] * len(values)


ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul}
SMALL = st.integers(-(2**40), 2**40)
STEP = st.tuples(st.sampled_from(sorted(ARITH)), st.one_of(SMALL, st.sampled_from([0, 1, -1, 2**61])),
                 st.booleans())


@given(st.lists(SMALL, min_size=1, max_size=5), st.lists(STEP, min_size=1, max_size=6))
def test_chains_of_arithmetic_are_python_s_in_every_lane(values, steps):
    """+, - and * chains (a loop's index arithmetic) give every lane what Python's integers give, an
    int exactly when every lane agrees, and no Unvectorisable while every value stays under 61 bits
    (the quick bound from the magnitudes refuses only where the lanes, taken one by one, do not fit);
    each step's operand is a constant, on either side, or the first lanes again."""
    x = lanes(np.array(values, np.int64))
    want = list(values)
    for op, k, lanes_again in steps:
        other, other_want = (lanes(np.array(values, np.int64)), values) if lanes_again else (k, [k] * len(values))
        exact = [ARITH[op](a, b) for a, b in zip(want, other_want)]
        if any(abs(v) >= 2**61 for v in exact):  # (near 2**62 the lane-by-lane test is in floats)
            break
        try:
            got = ARITH[op](x, other)
        except Unvectorisable:
            raise AssertionError(f"refused {want} {op} {other_want}, which fit") from None
        want = exact
        if len(set(want)) == 1:
            assert got == want[0] and isinstance(got, int), (got, want)
        else:
            assert isinstance(got, Lanes) and got.v.tolist() == want
        x = got
