"""ncsim.arrays.distinct against numpy's np.unique, its reference."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ncsim.arrays import distinct

_INTS = st.sampled_from([np.int8, np.uint8, np.int16, np.int32, np.uint32, np.int64, np.uint64, np.bool_])
_SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6)


def _same(a):
    got, want = distinct(a), np.unique(a)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)
    assert got.base is None or not np.shares_memory(got, a)  # a new array, as np.unique gives


@settings(max_examples=300, deadline=None)
@given(hnp.arrays(_INTS, _SHAPES))
def test_distinct_is_np_unique_for_integers(a):
    """Values anywhere in their dtype's range: mostly sorted (the range is too wide to count)."""
    _same(a)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([np.int8, np.uint8, np.int16, np.int64, np.uint64]), st.integers(0, 2**64 - 1),
       st.lists(st.integers(0, 300), min_size=0, max_size=60))
@example(np.int64, 0, [0, 2**63 - 1])  # a range too wide to count, at the dtype's edges
@example(np.uint64, 2**64 - 1, [0])
def test_distinct_counts_values_in_a_short_range_as_np_unique_does(dtype, base, offsets):
    """Values within a few hundred of each other (counted, not sorted), anywhere in the dtype's range."""
    info = np.iinfo(dtype)
    start = info.min + base % (int(info.max) - int(info.min) + 1)
    values = [min(start + o, int(info.max)) for o in offsets]
    _same(np.array(values, dtype=dtype))


def test_distinct_of_many_values_and_of_a_list():
    a = np.random.default_rng(0).integers(-5, 5, 10_000)
    assert np.array_equal(distinct(a), np.arange(-5, 5))
    assert distinct([3, 1, 3]).tolist() == [1, 3]
    wide = np.random.default_rng(1).integers(-2**62, 2**62, 10_000)
    assert np.array_equal(distinct(wide), np.unique(wide))
