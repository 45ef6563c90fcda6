"""Loops as templates (`ncsim.asm.template`): the same objects as unrolling iteration by iteration,
the same errors, and the guards that refuse a program before any work is done on it."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ncsim.asm.assembler import MAX_INSTRUCTIONS, MAX_LOOP_DEPTH, MAX_LOOP_TRIPS, Assembler
from ncsim.asm.elf import write_elf
from ncsim.asm.expr import MAX_PARENS
from ncsim.errors import AsmError

HEADER = """\
.hbm  x  f32[1024, 64]  in
.hbm  y  f32[1024, 64]  out
.sbuf a  f32[128, 4, 64]
.sbuf b  f32[128, 64]
.psum p  f32[128, 2, 512]
.sbuf w  bf16[128, 512]
"""


def assemble(text: str, templates: bool = True) -> tuple[bytes, Assembler]:
    asm = Assembler()
    if not templates:
        asm.template_loop = lambda *args: False  # the legacy path: one iteration at a time
    obj = asm.assemble(text, "t.s")
    return write_elf(obj), asm


def used_templates(text: str) -> int:
    asm = Assembler()
    count = 0
    real = asm.template_loop

    def counting(*args):
        nonlocal count
        done = real(*args)
        count += done
        return done

    asm.template_loop = counting
    asm.assemble(text, "t.s")
    return count


def same_both_ways(text: str) -> bytes:
    fast, asm_fast = assemble(text)
    slow, asm_slow = assemble(text, templates=False)
    assert fast == slow
    assert asm_fast.program.sync_report == asm_slow.program.sync_report
    return fast


CASES = {
    "offsets": """\
.for r in 0..8
.for c in 0..4
  dma_copy a[:, c, :], x[r*128 : r*128 + 128, :]
  tensor_tensor b, a[:, c, :], a[:, (c + 1) % 4, :], add
.end
  dma_copy y[r*128 : (r + 1) * 128, :], b
.end
""",
    "accumulate splits": """\
.for n in 0..2
.for k in 0..4
  nc_matmul p[:, n, :], w[:, k*128 : k*128 + 128], w, accumulate=k > 0
.end
.end
""",
    "triangular": """\
.for i in 0..4
.for j in 0..i
  activation a[:, j, :], relu, a[:, i, :]
.end
.end
""",
    "step and empty": """\
.for i in 1..9 step 3
.for j in 0..i - 1 step 2
  tensor_copy b[:, j*4 : j*4 + 4], a[:, i % 4, 0:4]
.end
.end
.for z in 0..0
  tensor_copy b, b
.end
""",
    "partitions and queues": """\
.for q in 0..4
  dma_copy a[q*32 : q*32 + 32, q, :], x[q*32 : q*32 + 32, :], queue=q
  activation b[q*32 : q*32 + 32, :], exp, a[q*32 : q*32 + 32, q, :]
.end
""",
    "manual semaphores": """\
.sync manual
.sem s
.for k in 0..6
  tensor_copy b, a[:, k % 4, :], signal=[s+=1]
  activation b, relu, b, wait=[s>=k + 1]
.end
""",
    "counts that vary": """\
.for k in 0..3
.for z in 0..k + 1
  tensor_copy b[:, 0:z + k + 1], a[:, k, 0:z + k + 1]
.end
.end
""",
}


@pytest.mark.parametrize("name", list(CASES))
def test_templates_give_the_objects_unrolling_gives(name):
    text = HEADER + CASES[name]
    same_both_ways(text)
    assert used_templates(text) >= 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(outer=st.integers(0, 5), inner=st.integers(0, 4), step=st.integers(1, 3), a=st.integers(0, 3),
       b=st.integers(1, 4), cond=st.sampled_from(["k > 0", "k == i", "(k + i) % 2", "1"]))
def test_random_loops_match_unrolling(outer, inner, step, a, b, cond):
    text = HEADER + f"""\
.for i in 0..{outer}
  dma_copy a[:, i % 4, :], x[i*128 : i*128 + 128, :]
.for k in {a}..{a} + {inner} step {step}
  tensor_scalar b[:, k*{b} : k*{b} + 8], a[:, (i + k) % 4, 0:8], multiply, {cond} + k
  nc_matmul p[:, k % 2, 0:128], w[:, 0:128], w[:, 0:128], accumulate={cond}
.end
  activation b, relu, a[:, i % 4, :]
.end
"""
    same_both_ways(text)


def test_an_error_in_some_iteration_is_the_legacy_error():
    text = HEADER + """\
.for i in 0..8
  tensor_copy b[:, i*16 : i*16 + 16], a[:, 0, 0:16]
.end
"""
    with pytest.raises(AsmError) as fast:
        assemble(text)
    with pytest.raises(AsmError) as slow:
        assemble(text, templates=False)
    assert str(fast.value) == str(slow.value)
    assert "t.s:8:" in str(fast.value)


def test_a_body_with_a_directive_is_unrolled_one_iteration_at_a_time():
    text = HEADER + """\
.for i in 0..2
.include "missing.s"
.end
"""
    assert used_templates(HEADER + CASES["offsets"]) == 1
    with pytest.raises(AsmError, match="cannot read included file"):
        assemble(text)


def test_a_huge_nest_is_refused_at_once():
    text = HEADER + """\
.for i in 0..100000
.for j in 0..100000
.for k in 0..100000
  tensor_copy b, b
.end
.end
.end
"""
    start = time.perf_counter()
    with pytest.raises(AsmError) as e:
        assemble(text)
    assert time.perf_counter() - start < 5  # refused before any unrolling (a loose bound: no timing test)
    assert f"more than {MAX_LOOP_TRIPS} times" in str(e.value)
    assert "t.s:8:" in str(e.value)


def test_too_many_instructions_are_refused_before_unrolling():
    text = HEADER + f"""\
.for i in 0..{MAX_INSTRUCTIONS // 4 + 1}
  tensor_copy b, b
  tensor_copy b, b
  tensor_copy b, b
  tensor_copy b, b
.end
"""
    with pytest.raises(AsmError, match=f"more than {MAX_INSTRUCTIONS} instructions"):
        assemble(text)


def test_deep_loops_are_nesting_too_deep():
    depth = 500
    text = HEADER + "".join(f".for v{d} in 0..1\n" for d in range(depth)) + "tensor_copy b, b\n" + ".end\n" * depth
    with pytest.raises(AsmError, match=f"nesting too deep: .for loops and .if blocks nest at most {MAX_LOOP_DEPTH} levels"):
        assemble(text)
    ok = HEADER + "".join(f".for v{d} in 0..1\n" for d in range(MAX_LOOP_DEPTH)) + "tensor_copy b, b\n" \
        + ".end\n" * MAX_LOOP_DEPTH
    same_both_ways(ok)


def test_deep_parentheses_are_nesting_too_deep():
    deep = "(" * 200 + "0" + ")" * 200
    with pytest.raises(AsmError, match=f"nesting too deep: parentheses nest at most {MAX_PARENS}"):
        assemble(HEADER + f"tensor_copy b[:, {deep}:4], b[:, 0:4]\n")
    fine = "(" * MAX_PARENS + "0" + ")" * MAX_PARENS
    assemble(HEADER + f"tensor_copy b[:, {fine}:4], b[:, 0:4]\n")
    with pytest.raises(AsmError, match="nesting too deep"):
        assemble(HEADER + "tensor_copy b[:, 0:" + "1**" * 200 + "1], b[:, 0:1]\n")
    assemble(HEADER + "tensor_copy b[:, 0:" + "- " * 500 + "1], b[:, 0:1]\n")


def test_a_loop_variable_is_unknown_after_its_loop():
    """A line after an inner loop that names the inner loop's variable is refused at that name, as the
    loop unrolled one iteration at a time refuses it (the template once kept the variable bound from
    the inner loop's lines: 'shape mismatch', an internal error)."""
    src = """.sbuf t f32[128, 4]
.for i in 0..2
.for k in 0..4
  tensor_copy t[:, k:k+1], t[:, 0:1]
.end
  tensor_copy t[:, k:k+1], t[:, 0:1]
.end
"""
    with pytest.raises(AsmError) as err:
        assemble(src, "t.s")
    assert err.value.message == "unknown name 'k' in an integer expression"
    assert (err.value.loc.line, err.value.loc.col) == (6, 20)


def test_lane_arithmetic_is_refused_only_where_a_lane_may_exceed_62_bits():
    """The quick bound from the largest magnitudes may fail where no lane does: then the lanes decide
    (2**61 in one lane plus 2**61 in another stays vectorised; in the same lane it does not)."""
    import numpy as np

    from ncsim.asm.lanes import Lanes, Unvectorisable

    assert Lanes(np.array([2**61, 0])) + Lanes(np.array([0, 2**61])) == 2**61  # the same in both lanes
    assert (Lanes(np.array([2**31, 1])) * Lanes(np.array([1, 2**31]))) == 2**31
    with pytest.raises(Unvectorisable):
        Lanes(np.array([2**61, 0])) + Lanes(np.array([2**61, 1]))
    with pytest.raises(Unvectorisable):
        Lanes(np.array([2**31, 0])) * (2**31)
