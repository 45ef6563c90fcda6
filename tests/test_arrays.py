"""ncsim.arrays.distinct against numpy's np.unique, its reference."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ncsim.arrays import distinct

_INTS = st.sampled_from([np.int8, np.uint8, np.int16, np.int32, np.uint32, np.int64, np.uint64, np.bool_])


@settings(max_examples=300, deadline=None)
@given(hnp.arrays(_INTS, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6)))
def test_distinct_is_np_unique_for_integers(a):
    got, want = distinct(a), np.unique(a)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)


def test_distinct_of_many_values_and_of_a_list():
    a = np.random.default_rng(0).integers(-5, 5, 10_000)
    assert np.array_equal(distinct(a), np.arange(-5, 5))
    assert distinct([3, 1, 3]).tolist() == [1, 3]
