"""Tensor slices as operands: the access pattern reads exactly the elements numpy's slice reads, in order.

The reference is numpy itself: `np.arange(n).reshape(shape)[subscript]` numbers the elements a
subscript selects, in iteration order; with the tensor's placement (row-major from its address; on
chip, partition p of the tile at partition `t.partition + p`, each partition holding the free dims
row-major from `t.address`) that gives the byte addresses the access pattern must visit.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ncsim import dtypes
from ncsim.asm.assembler import Assembler, assemble
from ncsim.asm.fields import MAX_FREE_DIMS, MAX_HBM_DIMS
from ncsim.asm.lexer import Cursor, Line
from ncsim.asm.objfile import TensorEntry
from ncsim.asm.slices import tensor_view
from ncsim.errors import AsmError
from ncsim.memory.access import AccessPattern, Memory

Index = int | slice


def view(t: TensorEntry, subscript: str) -> AccessPattern:
    """`t{subscript}` parsed as an operand, the way the assembler does (the whole line must be used)."""
    cur = Cursor(Line("view.s", 1, t.name + subscript))
    name_tok = cur.next()
    ap = tensor_view(cur, {}, t, name_tok)
    cur.expect_end("after the operand")
    return ap


def visited_bytes(ap: AccessPattern) -> np.ndarray:
    """Byte address (per partition on chip) of each element the pattern visits, in iteration order."""
    return ap.offset + ap.element_offsets().ravel() * ap.dtype.itemsize


def check_against_numpy(t: TensorEntry, index: tuple[Index, ...], ap: AccessPattern) -> None:
    size = t.dtype.itemsize
    numbers = np.arange(math.prod(t.shape)).reshape(t.shape)
    assert ap.memory == Memory[t.memory.upper()]
    assert ap.dtype == t.dtype
    if t.memory == "hbm":
        picked = numbers[index]
        assert (ap.partition, ap.partitions) == (0, 0)
        np.testing.assert_array_equal(visited_bytes(ap), t.address + picked.ravel() * size)
        free_shape = picked.shape
    else:
        # keep the partition axis even when an integer selects one partition, so rows are partitions
        first = index[0] if index else slice(None)
        if isinstance(first, int):
            first = slice(first, first + 1)
        picked = numbers[(first, *index[1:])]
        rows = picked.reshape(picked.shape[0], -1)
        per_partition = math.prod(t.shape[1:])
        np.testing.assert_array_equal(t.partition + rows[:, 0] // per_partition,
                                      ap.partition + np.arange(ap.partitions))
        offsets = rows % per_partition
        assert (offsets == offsets[0]).all()  # numpy agrees that every partition reads the same elements
        np.testing.assert_array_equal(visited_bytes(ap), t.address + offsets[0] * size)
        free_shape = picked.shape[1:]
    limit = MAX_HBM_DIMS if t.memory == "hbm" else MAX_FREE_DIMS
    if len(free_shape) <= limit:  # nothing to merge: the pattern keeps numpy's shape
        assert ap.free_shape == (free_shape or (1,))


# --- strategies --------------------------------------------------------------------------------

@st.composite
def subscripts(draw, shape: tuple[int, ...], on_chip: bool, ints: bool = True) -> tuple[str, tuple[Index, ...]]:
    """A negative-free subscript (text, and the same as Python indices) of up to len(shape) indices;
    `ints=False`: a slice for every dimension, so that every dimension stays."""
    n = draw(st.integers(0, len(shape))) if ints else len(shape)
    texts: list[str] = []
    index: list[Index] = []
    for axis, size in enumerate(shape[:n]):
        if ints and draw(st.booleans()):
            i = draw(st.integers(0, size - 1))
            texts.append(str(i))
            index.append(i)
            continue
        start = draw(st.none() | st.integers(0, size - 1))
        stop = draw(st.none() | st.integers((start or 0) + 1, size + 3))  # past the end is clamped
        if on_chip and axis == 0:
            step = draw(st.sampled_from([None, 1]))  # partitions are a contiguous range
        else:
            step = draw(st.none() | st.integers(1, size + 1))
        text = f"{'' if start is None else start}:{'' if stop is None else stop}"
        if step is not None:
            text += f":{step}"
        elif draw(st.booleans()):
            text += ":"  # `a:b:` with the step left out
        texts.append(text)
        index.append(slice(start, stop, step))
    return (f"[{', '.join(texts)}]" if n else ""), tuple(index)


@st.composite
def tensors(draw, memory: str, free_dims: tuple[int, int] = (1, 3), max_size: int = 6) -> TensorEntry:
    """A tensor with `free_dims` (min, max) dimensions besides the partition dimension (HBM: one more,
    the dimension that plays the partitions' role)."""
    dt = draw(st.sampled_from(dtypes.DTYPES))
    lo, hi = free_dims
    if memory == "hbm":
        shape = tuple(draw(st.lists(st.integers(1, max_size), min_size=lo, max_size=hi + 1)))
        return TensorEntry("x", "hbm", dt, shape, 0, draw(st.integers(0, 1 << 20)), "inout")
    partitions = draw(st.integers(1, 128))
    free = draw(st.lists(st.integers(1, max_size), min_size=lo, max_size=hi))
    return TensorEntry("t", memory, dt, (partitions, *free), draw(st.integers(0, 128 - partitions)),
                       draw(st.integers(0, 4096)), "tile")


@st.composite
def sliced(draw, memory: str) -> tuple[TensorEntry, str, tuple[Index, ...]]:
    t = draw(tensors(memory))
    text, index = draw(subscripts(t.shape, memory != "hbm"))
    return t, text, index


# --- the property ------------------------------------------------------------------------------

@pytest.mark.parametrize("memory", ["hbm", "sbuf", "psum"])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_slice_reads_what_numpy_reads(memory, data):
    t, text, index = data.draw(sliced(memory))
    check_against_numpy(t, index, view(t, text))


@settings(max_examples=100, deadline=None)
@given(sliced("hbm"), sliced("sbuf"))
def test_slices_through_the_assembler(hbm, sbuf):
    """The same through `assemble`: dma_copy of a slice of HBM onto itself, and of a slice of SBUF
    (a DMA's two sides have the same number of elements)."""
    (x, x_text, x_index), (t, t_text, t_index) = hbm, sbuf
    src = (f".sync manual\n"
           f".hbm x {x.dtype.short}[{', '.join(map(str, x.shape))}] inout @{x.address}\n"
           f".sbuf t {t.dtype.short}[{', '.join(map(str, t.shape))}] @{t.partition}:{t.address}\n"
           f"dma_copy x{x_text}, x{x_text}, queue=1\n"
           f"dma_copy t{t_text}, t{t_text}, queue=2\n")
    asm = Assembler()
    asm.assemble(src, "slices.s")
    first, second = asm.program.instructions
    check_against_numpy(x, x_index, first["dst"])
    check_against_numpy(t, t_index, second["src"])


def test_examples_by_hand():
    t = TensorEntry("t", "sbuf", dtypes.FLOAT32, (64, 8), 32, 256, "tile")
    assert view(t, "") == AccessPattern(Memory.SBUF, dtypes.FLOAT32, 32, 64, 256, ((1, 8),))
    assert view(t, "[1:3, 2::3]") == AccessPattern(Memory.SBUF, dtypes.FLOAT32, 33, 2, 256 + 8, ((3, 2),))
    assert view(t, "[5, 7]") == AccessPattern(Memory.SBUF, dtypes.FLOAT32, 37, 1, 256 + 28, ((1, 1),))
    assert view(t, "[:, 2:100]") == AccessPattern(Memory.SBUF, dtypes.FLOAT32, 32, 64, 256 + 8, ((1, 6),))
    x = TensorEntry("x", "hbm", dtypes.BFLOAT16, (4, 6), 0, 1000, "in")
    # HBM has no partition dimension: the first index may step
    assert view(x, "[0:4:2, 1]") == AccessPattern(Memory.HBM, dtypes.BFLOAT16, 0, 0, 1002, ((12, 2),))


def test_constants_and_loop_variables_in_subscripts():
    src = """\
.const K = 2
.sbuf a f32[64, 16]
.sbuf b f32[64, 16]
.for i in 0..2
tensor_copy a[0:32, K*i:K*i+K], b[32:64, i*(K+1)::8]
.end
"""
    asm = Assembler()
    asm.assemble(src, "loop.s")
    base_b = asm.program.tensors["b"].address
    got = [(i["dst"].offset, i["dst"].dims, i["src"].partition, i["src"].offset, i["src"].dims)
           for i in asm.program.instructions]
    assert got == [(0, ((1, 2),), 32, base_b, ((8, 2),)),
                   (8, ((1, 2),), 32, base_b + 12, ((8, 2),))]


# --- merging free dimensions -------------------------------------------------------------------

def min_free_dims(t: TensorEntry, index: tuple[Index, ...]) -> int:
    """How many [step, count] dimensions the view needs when dimensions of count 1 are dropped and
    dimensions contiguous in memory (outer step == inner step * inner count) are joined: one per
    maximal contiguous run."""
    strides = [math.prod(t.shape[k + 1:]) for k in range(len(t.shape))]
    index = index + (slice(None),) * (len(t.shape) - len(index))
    dims = [(i.indices(n)[2] * s, len(range(*i.indices(n))))
            for axis, (i, n, s) in enumerate(zip(index, t.shape, strides))
            if isinstance(i, slice) and not (axis == 0 and t.memory != "hbm")]
    dims = [d for d in dims if d[1] != 1]
    if not dims:
        return 1
    return 1 + sum(so != si * ci for (so, _), (si, ci) in itertools.pairwise(dims))


@pytest.mark.parametrize("memory", ["hbm", "sbuf"])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_views_with_too_many_dimensions_are_merged_when_contiguous(memory, data):
    """Up to 6 dims: a view is accepted exactly when merging contiguous dims brings it under the limit."""
    t = data.draw(tensors(memory, free_dims=(4, 6), max_size=4))
    text, index = data.draw(subscripts(t.shape, memory != "hbm", ints=data.draw(st.booleans())))
    limit = MAX_HBM_DIMS if memory == "hbm" else MAX_FREE_DIMS
    if min_free_dims(t, index) <= limit:
        ap = view(t, text)
        assert len(ap.dims) <= limit
        check_against_numpy(t, index, ap)
    else:
        with pytest.raises(AsmError, match=f"free dimensions; {memory} access patterns have at most {limit}"):
            view(t, text)


def test_a_whole_tile_with_five_free_dims_is_merged():
    t = TensorEntry("t", "sbuf", dtypes.FLOAT32, (4, 2, 2, 2, 2, 2), 0, 0, "tile")
    ap = view(t, "")
    assert len(ap.dims) == MAX_FREE_DIMS
    check_against_numpy(t, (), ap)


@pytest.mark.parametrize("src, message", [
    (".sbuf t f32[4, 4, 4, 4, 4, 4]\n.sbuf u f32[4, 32]\ntensor_copy u, t[:, ::2, ::2, ::2, ::2, ::2]\n",
     "needs 5 free dimensions; sbuf access patterns have at most 4"),
    (".hbm t f32[4, 4, 4, 4, 4, 4] in\n.sbuf u f32[4, 64]\ndma_copy u, t[::2, ::2, ::2, ::2, ::2, ::2]\n",
     "needs 6 free dimensions; hbm access patterns have at most 5"),
])
def test_a_strided_view_with_too_many_dims_is_an_error(src, message):
    with pytest.raises(AsmError) as err:
        assemble(src, "dims.s")
    assert message in err.value.message
    assert (err.value.loc.line, err.value.loc.col) == (3, src.splitlines()[2].index("t[") + 1)


def test_count_one_dimensions_do_not_count_against_the_limit():
    t = TensorEntry("t", "sbuf", dtypes.FLOAT32, (4, 3, 4, 4, 4, 4), 0, 0, "tile")
    ap = view(t, "[:, 1:2, ::3, ::3, ::3, ::3]")  # (1, 2, 2, 2, 2): the count-1 dim is free to drop
    check_against_numpy(t, (slice(None), slice(1, 2), *[slice(None, None, 3)] * 4), ap)


# --- errors ------------------------------------------------------------------------------------

HEADER = ".sbuf a f32[64, 8]\n.sbuf b f32[64, 8]\n.hbm x f32[4, 8] in\n"


@pytest.mark.parametrize("line, caret, message", [
    ("tensor_copy a, b[0:64:2]", "b[", "a step of 2 across partitions"),
    ("tensor_copy a[0:64, 0:4], b[0:64, 8]", "8]", "index 8 is out of range for dimension 1 of size 8"),
    ("tensor_copy a, b[64]", "64]", "index 64 is out of range for dimension 0 of size 64"),
    ("tensor_copy a, b[:, 5:5]", "5:5", "is empty"),
    ("tensor_copy a, b[:, 4:2]", "4:2", "is empty"),
    ("tensor_copy a, b[:, 9:]", "9:", "is empty"),
    ("tensor_copy a, b[:, -1]", "-1", "negative index -1"),
    ("tensor_copy a, b[:, 0:-3]", "-3", "negative slice stop -3"),
    ("tensor_copy a, b[:, 0:8:-1]", "-1", "negative slice step -1"),
    ("tensor_copy a, b[:, 0:8:0]", "0]", "slice step cannot be zero"),
    ("tensor_copy a, b[0:64, 0, 0]", "0]", "'b' has 2 dimensions; this is index 3"),
    ("dma_copy a[0:4], x[0, 1, 2]", "2]", "'x' has 2 dimensions; this is index 3"),
    ("dma_copy a[0:4], x[4]", "4]", "index 4 is out of range for dimension 0 of size 4"),
])
def test_bad_subscripts_name_the_line_and_column(line, caret, message):
    with pytest.raises(AsmError) as err:
        assemble(HEADER + line + "\n", "bad.s")
    e = err.value
    assert message in e.message
    assert (e.loc.file, e.loc.line, e.loc.col) == ("bad.s", 4, line.rindex(caret) + 1)
