"""fp32 elementwise instructions computed straight into the destination's memory (Context.fp32_into,
alu.apply_into), and the rules the machine skips for a program known to keep them."""

from __future__ import annotations

import numpy as np
import pytest

from ncsim import isa
from ncsim.asm import rules
from ncsim.asm.assembler import assemble
from ncsim.config import Config
from ncsim.dtypes import FLOAT32
from ncsim.engines import alu
from ncsim.engines.context import _self_overlaps
from ncsim.errors import SimError
from ncsim.memory.access import AccessPattern, Memory
from ncsim.program import Program
from ncsim.runtime.machine import Machine
from ncsim.runtime.run import load_program
from ncsim.runtime.verify import verify_program
from tests.engines.harness import DEFAULT, EDGE_F32, Layout, check, const, fill, make, reference_of, run_one

OPS = list(alu.INTO_CODES)

# Every fp32 class, as bits: zeros, subnormals, normals, the extremes, infinities, and NaNs of both
# signs with payloads (quiet and signalling), which must all come out as the canonical 0x7FC00000.
SPECIAL_BITS = np.array([0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000, 0x3F800000,
                         0xBF800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
                         0x7F800001, 0xFFBFFFFF, 0x7FC12345, 0x40490FDB, 0xC0490FDB, 0x33D6BF95], np.uint32)


def _strided(values: np.ndarray) -> np.ndarray:
    """`values` (2-D float32) as a five-axis view that is not contiguous, as views of memory are."""
    big = np.zeros(values.shape[:1] + (2 * values.shape[1],), np.float32)
    big[:, ::2] = values
    return big[:, ::2][None, None, None]


@pytest.mark.parametrize("op", OPS)
def test_apply_into_is_apply_bit_for_bit(op):
    rng = np.random.default_rng(1)
    specials = SPECIAL_BITS.view(np.float32)
    x = np.concatenate([np.repeat(specials, len(specials)), EDGE_F32, rng.standard_normal(500).astype(np.float32),
                        rng.integers(0, 2**32, 500, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    y = np.concatenate([np.tile(specials, len(specials)), EDGE_F32[::-1], rng.standard_normal(500).astype(np.float32),
                        rng.integers(0, 2**32, 500, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    n = len(x) // 8 * 8  # 8 rows (the last few random values left out)
    x, y = x[:n].reshape(8, -1), y[:n].reshape(8, -1)
    want = alu.apply(op, x, y)
    a, b, out = _strided(x), _strided(y), _strided(np.zeros_like(x))
    alu.apply_into(alu.INTO_CODES[op], a, b, out)
    assert np.array_equal(out[0, 0, 0].view(np.uint32), want.view(np.uint32))
    # in place (out is an operand) and against a constant (a stride-0 view)
    alu.apply_into(alu.INTO_CODES[op], a, b, a)
    assert np.array_equal(a[0, 0, 0].view(np.uint32), want.view(np.uint32))
    c = np.ndarray(out.shape, np.float32, np.full(1, -0.0, np.float32), 0, (0,) * 5)
    alu.apply_into(alu.INTO_CODES[op], b, c, out)
    assert np.array_equal(out[0, 0, 0].view(np.uint32), alu.apply(op, y, np.float32(-0.0)).view(np.uint32))


def _no_general_path(monkeypatch):
    """Make the general path (alu.apply and the result's copy into memory) fail if it is taken."""
    def boom(*args, **kwargs):
        raise AssertionError("the general path ran")

    monkeypatch.setattr(alu, "apply", boom)


@pytest.mark.parametrize("op", OPS)
def test_tensor_tensor_in_place_straight_into_memory(op, monkeypatch):
    lay = Layout()
    d1, d2 = lay.tile("f32", 16, 24), lay.tile("f32", 16, 24)
    _no_general_path(monkeypatch)
    rng = np.random.default_rng(2)
    for instr in (make("tensor_tensor", dst=d2, data1=d1, data2=d2, op=op),  # dst is data2
                  make("tensor_tensor", dst=lay.tile("f32", 16, 24), data1=d1, data2=d2, op=op)):
        check(instr, rng, edges=0.4)


def test_tensor_scalar_and_relu_straight_into_memory(monkeypatch):
    lay = Layout()
    col = lay.tile("f32", 8, 1)
    x = lay.tile("f32", 8, 3, 5)
    _no_general_path(monkeypatch)
    rng = np.random.default_rng(3)
    for rev0, rev1 in ((False, False), (True, False), (False, True), (True, True)):
        check(make("tensor_scalar", dst=x, data=x, op0="subtract", operand0=col, reverse0=rev0,
                   op1="divide", operand1=const(0.75), reverse1=rev1), rng, edges=0.4)
    check(make("tensor_scalar", dst=lay.tile("f32", 8, 3, 5), data=x, op0="maximum", operand0=const(-0.0)),
          rng, edges=0.4)
    monkeypatch.setattr("ncsim.engines.scalar._copy_or_relu", lambda *a: pytest.fail("the general path ran"))
    for op in ("relu", "copy"):
        check(make("activation", dst=x, op=op, data=x), rng, edges=0.4)
        check(make("activation", dst=lay.tile("f32", 8, 3, 5), op=op, data=x, scale=col, bias=col), rng, edges=0.4)
        check(make("activation", dst=x, op=op, data=x, scale=const(-2.5)), rng, edges=0.4)


def test_general_path_where_the_destination_overlaps_otherwise():
    """A dst that overlaps an operand without being it, or visits an element twice, or is not f32, or
    operands shaped otherwise: the values are still the reference's (computed the general way)."""
    rng = np.random.default_rng(4)
    lay = Layout()
    base = lay.tile("f32", 8, 64)
    shifted = AccessPattern(Memory.SBUF, base.dtype, 0, 8, base.offset + 4, ((1, 32),))
    first = AccessPattern(Memory.SBUF, base.dtype, 0, 8, base.offset, ((1, 32),))
    check(make("tensor_tensor", dst=shifted, data1=first, data2=first, op="subtract"), rng)
    check(make("tensor_tensor", dst=first, data1=shifted, data2=lay.tile("f32", 8, 32), op="maximum"), rng)
    twice = AccessPattern(Memory.SBUF, base.dtype, 0, 8, lay.tile("f32", 8, 4).offset, ((0, 2), (1, 4)))
    assert _self_overlaps(twice)
    instr = make("tensor_tensor", dst=twice, data1=lay.tile("f32", 8, 2, 4), data2=lay.tile("f32", 8, 2, 4), op="add")
    init = fill(instr, rng)
    got = run_one(instr, init)[0]["dst"]
    want = reference_of(instr, init)["dst"]
    assert np.array_equal(got.view(np.uint32), np.repeat(want[:, 1:], 2, axis=1).view(np.uint32))  # the last wins
    check(make("tensor_tensor", dst=lay.tile("bf16", 8, 16), data1=lay.tile("f32", 8, 16),
               data2=lay.tile("f32", 8, 16), op="multiply"), rng)
    check(make("tensor_tensor", dst=lay.tile("f32", 8, 16), data1=lay.tile("f32", 8, 4, 4),
               data2=lay.tile("f32", 8, 16), op="divide"), rng)


def test_self_overlap():
    def ap(*dims):
        return AccessPattern(Memory.SBUF, FLOAT32, 0, 4, 0, dims)

    assert not _self_overlaps(ap((1, 16)))
    assert not _self_overlaps(ap((16, 4), (1, 16)))
    assert not _self_overlaps(ap((1, 4), (4, 4)))  # columns first: still every element once
    assert not _self_overlaps(ap((-1, 8)))
    assert _self_overlaps(ap((0, 2), (1, 4)))
    assert _self_overlaps(ap((2, 4), (1, 3)))  # 0, 1, 2 | 2, 3, 4 | ...
    assert not _self_overlaps(ap((5, 1), (0, 1), (1, 7)))  # dimensions of one element do not count


# ------------------------------------------------------------------ rules skipped where they are kept
SOURCE = """\
.kernel k
.hbm x f32[64, 32] in
.hbm y f32[64, 32] out
.sbuf a f32[64, 32]
.sbuf b f32[64, 32]
dma_copy a, x
tensor_tensor b, a, a, multiply
activation b, relu, b
dma_copy y, b
"""


@pytest.fixture
def counted_rules(monkeypatch):
    """Count the rule checks of the program's mnemonics (each keeps its rules, plus a counting one)."""
    calls = []

    def counting(instr, config):
        calls.append(instr.mnemonic)

    for m in ("dma_copy", "tensor_tensor", "activation"):
        rule = rules.Rule("counting", (m,), "test", counting)
        monkeypatch.setitem(rules.RULES, m, [*rules.RULES.get(m, ()), rule])
    return calls


def _run(prog: Program, config: Config) -> Machine:
    m = Machine(prog, config, "k.s")
    m.load_tensor(m.tensor("x"), np.arange(64 * 32, dtype=np.float32).reshape(64, 32) - 1000)
    m.run()
    return m


def test_rules_skipped_for_a_program_known_to_keep_them(tmp_path, counted_rules):
    src = tmp_path / "k.s"
    src.write_text(SOURCE)
    prog = load_program(str(src), DEFAULT)[0]  # assembled under DEFAULT: its rules kept
    assert prog.rules_kept == DEFAULT
    counted_rules.clear()
    want = _run(prog, DEFAULT).read_tensor(prog.tensors[1])
    assert counted_rules == []
    # another configuration: checked again
    other = Config(semaphores=128)
    assert np.array_equal(_run(prog, other).read_tensor(prog.tensors[1]), want)
    assert counted_rules == ["dma_copy", "tensor_tensor", "activation", "dma_copy"]
    # an object's program: checked until verify_program holds it to the configuration
    obj = assemble(SOURCE, str(src))
    decoded = Program.from_object(obj, "k.o")
    counted_rules.clear()
    assert np.array_equal(_run(decoded, DEFAULT).read_tensor(decoded.tensors[1]), want)
    assert len(counted_rules) == 4
    verify_program(decoded, DEFAULT)
    assert decoded.rules_kept == DEFAULT
    counted_rules.clear()
    assert np.array_equal(_run(decoded, DEFAULT).read_tensor(decoded.tensors[1]), want)
    assert counted_rules == []


def test_rules_still_checked_for_instructions_built_in_python():
    """An instruction made in Python that breaks a rule gets the assembler's error from the machine."""
    lay = Layout()
    instr = make("tensor_tensor", "gpsimd", dst=lay.tile("f32", 8, 16), data1=lay.tile("f32", 8, 16),
                 data2=lay.tile("f32", 8, 16), op="subtract")  # GpSimd's ALU has no subtract
    prog = Program.from_instructions({"gpsimd": [instr]})
    assert prog.rules_kept is None
    with pytest.raises(SimError, match=r"\(rule alu-engine\)"):
        Machine(prog, DEFAULT, "<test>").run()
    assert isa.BY_MNEMONIC["tensor_tensor"].slots["execute"].__wrapped__  # what a kept program runs


BODY_PROGRAM = """\
.kernel body_plans
.hbm  xin  f32[8, 64] in
.hbm  yin  f32[8, 32] in
.hbm  out  f32[8, 64] out
.sbuf x    f32[8, 64]
.sbuf y    f32[8, 32]
dma_copy x, xin
dma_copy y, yin
.for i in 0..3
  tensor_tensor x[:, i : i + 32], x[:, 0:32], y, add
  tensor_scalar x[:, 32:64], x[:, 32:64], multiply, i + 1
.end
dma_copy out, x
"""


def test_instructions_of_one_body_take_their_own_offsets_and_constants(tmp_path):
    """fp32_into finds a body's operators and operand kinds once (Machine.plans), but what depends on
    each instruction's offsets and constants per instruction: the loop's tensor_tensor is in place at
    i = 0 and overlaps its operand otherwise (then the general path), its tensor_scalar multiplies by
    i + 1. The values are numpy's, computed in order."""
    import ncsim

    rng = np.random.default_rng(5)
    xin, yin = rng.standard_normal((8, 64)).astype(np.float32), rng.standard_normal((8, 32)).astype(np.float32)
    path = tmp_path / "body_plans.s"
    path.write_text(BODY_PROGRAM)
    run = ncsim.run(str(path), {"xin": xin, "yin": yin}, check=False, timing=False)
    assert run.program.body.tolist()[:6] == [0, 1, 0, 1, 0, 1]
    x = xin.copy()
    for i in range(3):
        x[:, i:i + 32] = x[:, 0:32] + yin
        x[:, 32:64] = x[:, 32:64] * np.float32(i + 1)
    assert np.array_equal(run.outputs["out"].view(np.uint32), x.view(np.uint32))
