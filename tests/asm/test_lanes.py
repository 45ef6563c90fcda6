"""ncsim.asm.lanes: comparisons of lanes with any Python int are exact (against Python's integers)."""

from __future__ import annotations

import operator

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from ncsim.asm.lanes import LaneBool, Lanes

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
