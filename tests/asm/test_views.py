"""`.view`: the same bytes of a declared tensor seen with another shape or dtype, sliced like a tensor."""

from __future__ import annotations

import pytest

from ncsim.asm.assembler import Assembler
from ncsim.errors import AsmError


def operands(src: str) -> list:
    a = Assembler()
    a.assemble(".sync manual\n" + src, "v.s")
    return [i.operands for i in a.program.instructions]


def test_a_reshaped_view_indexes_the_same_bytes():
    (ops,) = operands(".sbuf p f32[128, 512]\n.view q = p f32[128, 4, 128]\n.sbuf o f32[128, 128]\n"
                      "tensor_copy o[:, 0:64], q[:, 2, 1::2]\n")
    src = ops["src"]
    assert (src.partition, src.partitions) == (0, 128)
    assert src.offset == (2 * 128 + 1) * 4 and src.dims == ((2, 64),)


def test_a_view_may_change_the_dtype():
    (ops,) = operands(".sbuf p f32[128, 512]\n.view r = p bf16[128, 1024]\n.sbuf o bf16[128, 128]\n"
                      "tensor_copy o, r[:, 0:256:2]\n")
    assert ops["src"].dtype.short == "bf16" and ops["src"].dims == ((2, 128),)


def test_views_of_hbm_and_the_tensor_table():
    a = Assembler()
    obj = a.assemble(".hbm x f32[1024, 64] in\n.view xr = x f32[8, 128, 64]\n.sbuf t f32[128, 64]\n"
                     "dma_copy t, xr[3]\n", "v.s")
    assert [t.name for t in obj.tensors] == ["x", "t"]  # a view is a name, not a tensor
    src = a.program.instructions[0].operands["src"]
    assert src.offset == 3 * 128 * 64 * 4 and src.dims == ((64, 128), (1, 64))


@pytest.mark.parametrize("src, message, col", [
    (".sbuf p f32[128, 512]\n.view q = p f32[64, 1024]\n", "a view keeps the partitions", 16),
    (".sbuf p f32[128, 512]\n.view q = p f32[128, 256]\n", "a view covers the same bytes", 16),
    (".sbuf p f32[128, 512]\n.view q = nope f32[128, 512]\n", "'nope' is no declared tensor", 11),
    (".sbuf p f32[128, 512]\n.view p = p f32[128, 512]\n", "'p' is already a tensor", 7),
])
def test_bad_views(src, message, col):
    with pytest.raises(AsmError) as err:
        operands(src)
    assert message in err.value.message
    assert (err.value.loc.line, err.value.loc.col) == (3, col)  # after the .sync line
