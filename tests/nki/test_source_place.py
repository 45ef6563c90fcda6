"""Tracer.source(file, line): instructions placed at a generated kernel's source (ncsim.torch's
lowering), the tile buffer pools still per creation site."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ncsim.nki.language as nl
from ncsim import nki
from ncsim.errors import AsmError
from ncsim.nki.emit import asm_text
from ncsim.nki.tracer import current

SOURCE = "/models/net.py"  # a place named by the generator; it need not exist


@nki.jit
def generated(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(4):  # each iteration as if from another line of the source: lines 10, 11, 12, 13
        with current().source(SOURCE, 10 + i, 3):
            t = nl.load(x[i * 32:(i + 1) * 32])
            nl.store(out[i * 32:(i + 1) * 32], value=nl.add(t, 1.0))
    return out


def test_instructions_take_the_given_place_and_pools_stay_per_site():
    x = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    run = nki.simulate(generated, (x,), {})
    np.testing.assert_array_equal(run.outputs, x + 1.0)
    text = asm_text(run)
    assert re.findall(r'^\.file (\d+) "(.*)"$', text, re.MULTILINE) == [("0", SOURCE)]
    assert sorted({int(n) for n in re.findall(r"^\.loc 0 (\d+) 3$", text, re.MULTILINE)}) == [10, 11, 12, 13]
    # two buffers per creation site (the load's and the add's), not per given line
    assert len(re.findall(r"^\.sbuf ", text, re.MULTILINE)) == 4


@nki.jit
def generated_bad_reshape(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    with current().source(__file__, 7, 1, 6):
        nl.store(out, value=t.reshape((128, 7)))
    return out


def test_an_error_raised_without_a_place_in_the_body_is_at_the_given_place():
    with pytest.raises(AsmError) as e:
        nki.simulate(generated_bad_reshape, (np.ones((128, 8), np.float32),), {})
    assert e.value.loc is not None and (e.value.loc.file, e.value.loc.line) == (__file__, 7)
    assert "cannot reshape [128, 8]" in e.value.message
