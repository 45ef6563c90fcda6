"""ncsim.torch.lower / validate (issue 13 items 2 and 4): torch functions lowered through the NKI
front end, run on the simulated core and compared with eager torch, on seeded random shapes and
values (several of them not multiples of 128)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ncsim.torch as nt
from ncsim.asm.assembler import assemble
from ncsim.runtime.run import run as ncsim_run
from ncsim.torch.lower import compare

GEN = torch.Generator().manual_seed(13)


def rand(*shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=GEN) * scale


def shape2() -> tuple[int, int]:
    """A random 2-D shape, rows past one tile of 128 and not a multiple of it."""
    r = int(torch.randint(129, 300, (1,), generator=GEN))
    c = int(torch.randint(3, 700, (1,), generator=GEN))
    return r, c


# ------------------------------------------------------------------ IEEE elementwise: bit for bit
EXACT = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: x - y,
    "mul": lambda x, y: x * y,
    "div": lambda x, y: x / y,
    "scalars": lambda x, y: (x * 2.5 + 1.0) / 3.0 - y,
    "rsub": lambda x, y: 1.0 - x,
    "maximum": lambda x, y: torch.maximum(x, y),
    "minimum": lambda x, y: torch.minimum(x, y),
    "compare": lambda x, y: (x > y, x >= y, x < 0.25, x <= y, x == y, x != 0.0),
    "where": lambda x, y: torch.where(x > y, x, y * 2.0),
    "where_scalar": lambda x, y: torch.where(x < 0, 0.0, y),
    "clamp": lambda x, y: (x.clamp(-0.5, 0.75), x.clamp(min=0), x.clamp(max=0.1), torch.clamp(x, min=y)),
    "abs_neg": lambda x, y: (x.abs(), -x),
    "relu": lambda x, y: torch.relu(x),
    "square": lambda x, y: x ** 2,
    "broadcast_row": lambda x, y: x - y[0],
    "broadcast_col": lambda x, y: x * y[:, :1],
}


@pytest.mark.parametrize("name", list(EXACT))
def test_ieee_elementwise_ops_are_bit_exact(name):
    fn = EXACT[name]
    shape = shape2()
    x, y = rand(*shape), rand(*shape)
    if name == "compare":
        y[::3] = x[::3]  # some equal pairs
    v = nt.validate(fn, x, y)
    assert v.bit_exact, v.format()


def test_three_dimensional_shapes_views_and_steps_are_bit_exact():
    x = rand(3, 130, 20)
    y = rand(20)

    def fn(x, y):
        a = x[..., 0::4] * 2.0  # a step in the last axis
        b = x.permute(2, 0, 1) + 1.0  # an axis order an access pattern expresses
        c = x.reshape(390, 20) - y  # a broadcast bias along rows
        d = x[1:, ::7, 3].T  # slices with steps, a select, a transpose
        return a, b, c, d, x.unsqueeze(0).squeeze(0).expand(2, 3, 130, 20) * 1.0

    v = nt.validate(fn, x, y)
    assert v.bit_exact, v.format()
    assert [o.shape for o in v.outputs] == [(3, 130, 5), (20, 3, 130), (390, 20), (19, 2), (2, 3, 130, 20)]


def test_a_one_dimensional_length_not_divisible_by_128():
    x, y = rand(1001), rand(1001)
    v = nt.validate(lambda x, y: torch.maximum(x, y) / (x.abs() + 1.0), x, y)
    assert v.bit_exact, v.format()


def test_a_negation_keeps_its_dtype_when_a_later_node_of_another_dtype_computes_it():
    """neg and logical_not fused into a comparison: each computes in its own node's dtype, not the
    comparison's bool (their tiles are made while the comparison is lowered)."""
    x = rand(130, 40)
    x[0, :5] = 0.0
    v = nt.validate(lambda x: ((-x) > 0, torch.logical_and(torch.logical_not(x), x < 1)), x)
    assert v.bit_exact, v.format()


def test_float16_and_bfloat16_elementwise_ops_round_as_torch_does():
    for dt in (torch.float16, torch.bfloat16):
        x, y = rand(150, 40).to(dt), rand(150, 40).to(dt)
        v = nt.validate(lambda x, y: (x * y + x) / (y - 3.0), x, y)
        assert v.bit_exact, v.format()



def test_a_lowered_program_gives_tensors_of_torchs_dtypes():
    """Each output is a tensor of its torch dtype: a bf16 one came back as an int16 tensor of its bits
    (validate compares bits, so it did not see it)."""
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        x = rand(130, 40).to(dt)
        total, positive = nt.lower(lambda x: (x + x, x > 0), x)(x)
        assert total.dtype == dt and positive.dtype == torch.bool
        assert torch.equal(total, x + x) and torch.equal(positive, x > 0)


# ------------------------------------------------------------------ transcendentals, reductions: ulps reported
CLOSE = {
    "sigmoid": (lambda x: torch.sigmoid(x), 4),
    "tanh": (lambda x: torch.tanh(x), 4),
    "exp": (lambda x: torch.exp(x), 4),
    "log": (lambda x: torch.log(x.abs() + 0.5), 4),
    "sqrt": (lambda x: torch.sqrt(x.abs()), 2),
    "rsqrt": (lambda x: torch.rsqrt(x.abs() + 0.1), 4),
    "silu": (lambda x: torch.nn.functional.silu(x), 8),
    "sum": (lambda x: x.sum(-1), None),
    "amax": (lambda x: x.amax(-1), 0),
    "amin": (lambda x: x.amin(-1, keepdim=True), 0),
    "mean": (lambda x: x.mean(-1), None),
    # reductions over leading axes (the bias gradient of a linear layer: sum over the batch axis 0)
    "sum_axis0": (lambda x: x.sum(0, keepdim=True), None),
    "amax_axis0": (lambda x: x.amax(0), 0),
    "softmax": (lambda x: torch.softmax(x, -1), 32),
    "log_softmax": (lambda x: torch.log_softmax(x, dim=-1), 32),
    "layer_norm": (lambda x: torch.nn.functional.layer_norm(x, (x.shape[-1],)), None),
}


@pytest.mark.parametrize("name", list(CLOSE))
def test_transcendentals_and_reductions_report_their_ulps(name):
    fn, max_ulp = CLOSE[name]
    x = rand(*shape2())
    v = nt.validate(fn, x)
    got, want = v.run.outputs[0], fn(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    o = v.outputs[0]
    bits = np.asarray(got.numpy()).view(np.uint32) != np.asarray(want.numpy()).view(np.uint32)
    assert o.differing == int(bits.sum())  # the count is of elements whose bits differ
    if max_ulp is not None:
        assert o.worst_ulp <= max_ulp, v.format()
    if o.differing:
        assert bits[o.worst_index] and f"{o.worst_ulp} ulp at {list(o.worst_index)}" in v.format()


def test_layer_norm_with_weight_and_bias_and_its_statistics():
    x, w, b = rand(200, 96), rand(96), rand(96)
    fn = lambda x, w, b: torch.nn.functional.layer_norm(x, (96,), w, b, eps=1e-5)
    v = nt.validate(fn, x, w, b)
    torch.testing.assert_close(v.run.outputs[0], fn(x, w, b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bias", [False, True])
def test_linear_and_mm_on_the_tensor_engine_k_tiled(bias):
    # M = 130 (two row tiles), K = 260 (three K tiles accumulated in PSUM), N = 520 (two PSUM tiles)
    x, w = rand(130, 260), rand(520, 260)
    b = rand(520) if bias else None
    v = nt.validate(lambda x, w: torch.nn.functional.linear(x, w, b), x, w)
    torch.testing.assert_close(v.run.outputs[0], torch.nn.functional.linear(x, w, b), rtol=1e-4, atol=1e-4)
    asm = nt.lower(lambda x, w: torch.nn.functional.linear(x, w, b), x, w).asm()
    assert asm.count("\nnc_matmul ") == 2 * 2 * 3  # M tiles x N tiles x K tiles, on the Tensor engine


def test_the_program_prints_as_s_that_assembles_and_runs_to_the_same_values():
    x, y = rand(140, 30), rand(140, 30)
    fn = lambda x, y: torch.where(x > y, x - y, torch.exp(y))
    prog = nt.lower(fn, x, y)
    text = str(prog)
    assert text.startswith("# disassembly of <kernel") and ".kernel" in text and "activation" in text
    obj = assemble(text, "lowered.s")
    r = ncsim_run(obj, {"x": x.numpy(), "y": y.numpy()}, sidecar=False, check=False)
    got = prog(x, y)
    assert np.array_equal(r.outputs["out"].view(np.uint32), got.numpy().view(np.uint32))
    assert prog.last is not None and prog.last.latency_us > 0


def lines_of_ops(x, y):
    a = x * 2.0
    b = torch.maximum(a, y)
    c = torch.softmax(b, -1)
    return c.sum(-1), torch.where(a > 0, a, y)


def test_the_s_places_each_instruction_at_the_line_of_its_op(monkeypatch):
    import contextlib
    import re
    import sys

    lowering = sys.modules["ncsim.torch.lower"]  # the module (ncsim.torch.lower is the function)

    x, y = rand(130, 40), rand(130, 40)
    prog = nt.lower(lines_of_ops, x, y)
    text = prog.asm()
    assert re.findall(r'^\.file (\d+) "(.*)"$', text, re.MULTILINE) == [("0", __file__)]
    first = lines_of_ops.__code__.co_firstlineno
    assert {int(n) for n in re.findall(r"^\.loc 0 (\d+) 5$", text, re.MULTILINE)} == {first + k for k in (1, 2, 3, 4)}
    ns = prog.run(x, y).report.total_ns
    # the same instructions, tiles and time as when every instruction is placed at the lowering's own
    # lines (the source place is not the tile pools' site: no op gets buffers of its own)
    monkeypatch.setattr(lowering, "_at", lambda source: contextlib.nullcontext())
    before = nt.lower(lines_of_ops, x, y)
    assert ".file 0" in before.asm() and __file__ not in before.asm()

    def body(s: str) -> list[str]:
        return [re.sub(r"^(\.sbuf|\.psum) +\S+", r"\1", line) for line in s.splitlines()
                if not line.startswith((".file", ".loc"))]
    assert body(text) == body(before.asm())
    assert before.run(x, y).report.total_ns == ns


# ------------------------------------------------------------------ errors
def test_an_unsupported_op_names_itself_the_line_and_the_supported_list():
    def fn(x):
        y = x * 2.0
        return torch.cumsum(y, dim=-1)  # the line the error names

    with pytest.raises(nt.LoweringError) as e:
        nt.lower(fn, rand(4, 8))
    err = e.value
    assert "aten.cumsum.default" in err.message and "supported_ops()" in err.message
    assert "aten.add.Tensor" in err.message and "aten.addmm.default" in err.message
    assert err.loc is not None and err.loc.file == __file__
    assert "torch.cumsum(y, dim=-1)" in err.loc.text
    assert err.format().count("torch.cumsum") >= 1
    assert nt.supported_ops() == sorted(nt.supported_ops()) and "aten._softmax.default" in nt.supported_ops()


def test_a_softmax_over_a_leading_axis_is_refused_at_its_line():
    with pytest.raises(nt.LoweringError, match="takes the last axis") as e:
        nt.lower(lambda x: torch.softmax(x, 0), rand(4, 8))
    assert e.value.loc is not None and e.value.loc.file == __file__
    assert e.value.op == "aten._softmax.default"


def test_a_reduction_over_middle_axes_of_three():
    x = rand(150, 37, 5)
    for fn in (lambda x: x.sum([0, 2]), lambda x: x.amax(1, keepdim=True), lambda x: x[:, :3].mean()):
        v = nt.validate(fn, x)
        torch.testing.assert_close(v.run.outputs[0], fn(x), rtol=1e-4, atol=1e-5)


def test_called_with_other_shapes_says_to_lower_again():
    prog = nt.lower(lambda x: x + 1.0, rand(4, 8))
    with pytest.raises(nt.LoweringError, match="lower it again"):
        prog(rand(5, 8))


def test_compare_counts_bits_signed_zeros_and_nans():
    a = torch.tensor([0.0, 1.0, float("nan"), 2.0])
    b = torch.tensor([-0.0, 1.0, float("nan"), float(np.nextafter(np.float32(2.0), np.float32(3.0)))])
    c = compare(a, b)
    assert c.differing == 2 and c.worst_ulp == 1 and c.worst_index in ((0,), (3,))
    assert compare(a, a.clone()).bit_exact
