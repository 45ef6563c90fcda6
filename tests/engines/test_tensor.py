"""nc_matmul and the Tensor nc_transpose against their references, known answers that pin the
definition (sequential fp32 accumulation from +0, no FMA, canonical NaN), the PSUM accumulation rule,
and the run-time errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ncsim import dtypes, isa
from ncsim.asm.fields import SemOp
from ncsim.asm.instruction import Instruction, encode
from ncsim.asm.objfile import LineEntry, ObjectFile
from ncsim.errors import SimError
from ncsim.memory.access import AccessPattern, Immediate, Memory
from ncsim.runtime.machine import Machine
from tests.engines.harness import (
    DEFAULT,
    Layout,
    check,
    fill,
    make,
    run_one,
)

PSUM = Memory.PSUM
MM_DTYPES = ("fp8e4", "fp8e5", "bf16", "f16")
WIDE = ("tf32", "f32")
F32_BITS_NAN = 0x7FC00000


def f32(*rows) -> np.ndarray:
    return np.array(rows, np.float32)


def bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


def run_stream(instrs: list[Instruction], init: dict, engine: str = "tensor") -> Machine:
    """Run several instructions of one engine in order on a machine whose tiles hold `init`
    (access pattern -> stored values); return the machine."""
    obj = ObjectFile(kernel="stream")
    obj.streams[engine] = b"".join(encode(i) for i in instrs)
    obj.lines[engine] = [LineEntry(k, 0, k + 1, 1) for k in range(len(instrs))]
    obj.files = ["<test>"]
    m = Machine(obj, DEFAULT, "<test>")
    for ap, raw in init.items():
        m.mem.write(ap, np.asarray(raw, ap.dtype.storage).reshape(ap.shape))
    m.run()
    return m


def matmul(lay: Layout, k: int, m: int, n: int, sd: str = "bf16", md: str = "bf16", accumulate: bool = False,
           **kw) -> Instruction:
    return make("nc_matmul", dst=lay.tile("f32", m, n, memory=PSUM), stationary=lay.tile(sd, k, m),
                moving=lay.tile(md, k, n), accumulate=accumulate, **kw)


def check_accumulating(instr: Instruction, rng: np.random.Generator, edges: float = 0.1, **given) -> dict:
    """check() for accumulate=true: the PSUM tile's random contents are what the matmul adds onto."""
    return check(instr, rng, edges, **given)


def _object(instr: Instruction) -> ObjectFile:
    obj = ObjectFile(kernel="one")
    obj.streams[instr.engine] = encode(instr)
    obj.lines[instr.engine] = [LineEntry(0, 0, 1, 1)]
    obj.files = ["<test>"]
    return obj


def fails(instr: Instruction, *fragments: str, config=DEFAULT) -> str:
    """Run `instr` on random contents; assert it raises SimError whose message has every fragment."""
    with pytest.raises(SimError) as e:
        run_one(instr, fill(instr, np.random.default_rng(0)), config=config)
    for f in fragments:
        assert f in str(e.value), (f, str(e.value))
    return str(e.value)


# ------------------------------------------------------------------ nc_matmul against the reference
@pytest.mark.parametrize("sd,md", [(a, b) for a in MM_DTYPES for b in MM_DTYPES] + [(a, b) for a in WIDE for b in WIDE])
def test_matmul_every_dtype_pair(sd, md):
    lay = Layout()
    check(matmul(lay, 24, 8, 20, sd, md), np.random.default_rng(10), edges=0.05)


@pytest.mark.parametrize("accumulate", [False, True])
def test_matmul_full_contraction_with_edge_values(accumulate):
    lay = Layout()
    instr = matmul(lay, 128, 4, 6, "f32", "tf32", accumulate=accumulate)
    run = check_accumulating if accumulate else check
    run(instr, np.random.default_rng(11), edges=0.2)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(MM_DTYPES + WIDE), st.sampled_from(MM_DTYPES + WIDE), st.integers(1, 40), st.integers(1, 12),
       st.integers(1, 24), st.booleans(), st.integers(0, 2**32 - 1))
def test_matmul_shapes_and_dtypes(sd, md, k, m, n, accumulate, seed):
    if (sd in WIDE) != (md in WIDE):
        md = sd
    lay = Layout()
    instr = matmul(lay, k, m, n, sd, md, accumulate=accumulate)
    (check_accumulating if accumulate else check)(instr, np.random.default_rng(seed))


def test_matmul_multi_dimensional_free_axes():
    lay = Layout()
    instr = make("nc_matmul", dst=lay.tile("f32", 6, 2, 5, memory=PSUM), stationary=lay.tile("bf16", 16, 2, 3),
                 moving=lay.tile("f16", 16, dims=((20, 2), (2, 5))))
    check(instr, np.random.default_rng(12))


# ------------------------------------------------------------------ nc_matmul: known answers
def test_matmul_known_product():
    lay = Layout()
    instr = matmul(lay, 2, 2, 2)
    got = check(instr, np.random.default_rng(0), stationary=f32([1, 2], [3, 4]), moving=f32([5, 6], [7, 8]))
    # dst[m, n] = sum_k stationary[k, m] * moving[k, n] = (stationary^T @ moving)[m, n]
    assert got["dst"].tolist() == [[26, 30], [38, 44]]


def test_matmul_accumulates_sequentially_in_k_order():
    lay = Layout()
    instr = matmul(lay, 3, 1, 1, "f32", "f32")
    # 0 + 2**24 = 2**24; + 1 rounds back to 2**24 (tie to even); - 2**24 = 0. Pairwise would give 1.
    got = check(instr, np.random.default_rng(0), stationary=f32([1], [1], [1]), moving=f32([2**24], [1], [-2**24]))
    assert got["dst"].tolist() == [[0.0]]


def test_matmul_rounds_each_product_no_fma():
    lay = Layout()
    instr = matmul(lay, 2, 1, 1, "f32", "f32")
    a = 1 + 2**-23
    # a*a = 1 + 2**-22 + 2**-46 rounds to 1 + 2**-22 in fp32; adding -(1 + 2**-22) gives exactly 0
    # (a fused multiply-add would keep the 2**-46).
    got = check(instr, np.random.default_rng(0), stationary=f32([a], [1]), moving=f32([a], [-(1 + 2**-22)]))
    assert got["dst"].tolist() == [[0.0]]


def test_matmul_starts_from_positive_zero_and_nan_is_canonical():
    lay = Layout()
    instr = matmul(lay, 1, 1, 3, "f32", "f32")
    got = check(instr, np.random.default_rng(0), stationary=f32([-1]), moving=f32([0, np.inf, -np.nan]))
    # +0 + (-1 * 0 = -0) = +0; -inf stays; -1 * NaN is the canonical NaN whatever the input's sign
    assert bits(got["dst"]).tolist() == [[0, 0xFF800000, F32_BITS_NAN]]
    instr = matmul(lay, 2, 1, 1, "f32", "f32")
    got = check(instr, np.random.default_rng(0), stationary=f32([0], [1]), moving=f32([np.inf], [1]))
    assert bits(got["dst"]).tolist() == [[F32_BITS_NAN]]  # 0 * inf = NaN


def test_matmul_accumulate_adds_onto_the_previous_matmul():
    lay = Layout()
    dst = lay.tile("f32", 2, 2, memory=PSUM)
    s, mv = lay.tile("bf16", 2, 2), lay.tile("bf16", 2, 2)
    first = make("nc_matmul", dst=dst, stationary=s, moving=mv)
    second = make("nc_matmul", dst=dst, stationary=s, moving=mv, accumulate=True)
    m = run_stream([first, second], {s: f32([1, 2], [3, 4]), mv: f32([5, 6], [7, 8])})
    assert m.mem.read(dst).tolist() == [[52, 60], [76, 88]]


def test_matmul_accumulate_onto_a_memset_zero_tile():
    """NKI's pattern: acc = nl.zeros(..., buffer=nl.psum), then acc += nl.matmul(...): accumulate=true adds
    onto whatever the PSUM tile holds (here a memset's zeros, then a transpose's values), in fp32."""
    lay = Layout()
    dst = lay.tile("f32", 2, 8, memory=PSUM)
    s, mv, data = lay.tile("bf16", 4, 2), lay.tile("bf16", 4, 8), lay.tile("f32", 8, 2)
    zero = Instruction(isa.BY_MNEMONIC["memset"], "vector", {"dst": dst, "value": Immediate(0.0, dtypes.FLOAT32)},
                       signals=(SemOp(1, "+=", 1),))
    acc = make("nc_matmul", dst=dst, stationary=s, moving=mv, accumulate=True)
    first = Instruction(acc.spec, "tensor", acc.operands, waits=(SemOp(1, ">=", 1),))
    obj = ObjectFile(kernel="zeros")
    obj.streams["vector"], obj.streams["tensor"] = encode(zero), encode(first) + encode(acc)
    obj.lines["vector"], obj.lines["tensor"] = [LineEntry(0, 0, 1, 1)], [LineEntry(0, 0, 2, 1), LineEntry(1, 0, 3, 1)]
    obj.files = ["<test>"]
    m = Machine(obj, DEFAULT, "<test>")
    for ap, raw in {s: np.ones((4, 2)), mv: np.ones((4, 8))}.items():
        m.mem.write(ap, np.asarray(raw, ap.dtype.storage).reshape(ap.shape))
    m.run()
    assert m.mem.read(dst).tolist() == [[8.0] * 8] * 2
    assert not m.warnings()
    over = make("nc_transpose", dst=dst, data=data)
    init = {s: np.ones((4, 2)), mv: np.ones((4, 8)), data: np.full((8, 2), 0.5)}
    assert run_stream([over, acc], init).mem.read(dst).tolist() == [[4.5] * 8] * 2


def test_matmul_accumulate_onto_psum_nothing_wrote_warns():
    """PSUM nothing wrote keeps its usual sentinel and the unwritten-read warning; no error."""
    lay = Layout()
    instr = matmul(lay, 4, 2, 8, accumulate=True)
    m = run_stream([instr], {instr["stationary"]: np.ones((4, 2)), instr["moving"]: np.ones((4, 8))})
    assert any("nothing wrote" in w or "never written" in w or "unwritten" in w for w in m.warnings()), m.warnings()


# ------------------------------------------------------------------ nc_matmul: errors
def test_matmul_errors():
    lay = Layout()
    fails(make("nc_matmul", dst=lay.tile("f32", 2, 8, memory=PSUM), stationary=lay.tile("bf16", 4, 2),
               moving=lay.tile("bf16", 8, 8)), "same number of partitions", "4 and 8")
    fails(make("nc_matmul", dst=lay.tile("f32", 3, 8, memory=PSUM), stationary=lay.tile("bf16", 4, 2),
               moving=lay.tile("bf16", 4, 8)), "[M, N] = [2, 8]", "[3, 8]")
    fails(make("nc_matmul", dst=lay.tile("bf16", 2, 8, memory=PSUM), stationary=lay.tile("bf16", 4, 2),
               moving=lay.tile("bf16", 4, 8)), "must be f32", "not bf16")
    fails(make("nc_matmul", dst=lay.tile("f32", 2, 8, memory=PSUM), stationary=lay.tile("f32", 4, 2),
               moving=lay.tile("bf16", 4, 8)), "'stationary' is f32 and 'moving' is bf16")
    fails(make("nc_matmul", dst=lay.tile("f32", 2, 8, memory=PSUM), stationary=lay.tile("i8", 4, 2),
               moving=lay.tile("bf16", 4, 8)), "'stationary' is i8")
    fails(make("nc_matmul", dst=lay.tile("f32", 2, 600, memory=PSUM), stationary=lay.tile("bf16", 4, 2),
               moving=lay.tile("bf16", 4, 600)), "600 elements per partition (N); at most 512")
    small = DEFAULT.with_overrides({"pe_rows": 32, "pe_cols": 64})
    fails(make("nc_matmul", dst=lay.tile("f32", 65, 8, memory=PSUM), stationary=lay.tile("bf16", 4, 65),
               moving=lay.tile("bf16", 4, 8)), "65 elements per partition (M); at most 64", config=small)
    fails(make("nc_matmul", dst=lay.tile("f32", 2, 8, memory=PSUM), stationary=lay.tile("bf16", 33, 2),
               moving=lay.tile("bf16", 33, 8)), "K = 33 partitions is more than the PE array's 32 rows", config=small)
    across = AccessPattern(PSUM, dtypes.FLOAT32, 0, 2, DEFAULT.psum_bank_bytes - 16, ((1, 8),))
    fails(make("nc_matmul", dst=across, stationary=lay.tile("bf16", 4, 2), moving=lay.tile("bf16", 4, 8)),
          "bytes 2032..2063", "2048-byte bank boundary")


# ------------------------------------------------------------------ nc_transpose (Tensor)
def transpose(lay: Layout, p: int, f: int, dtype: str = "f32", out_dtype: str | None = None) -> Instruction:
    return make("nc_transpose", dst=lay.tile(out_dtype or dtype, f, p, memory=PSUM), data=lay.tile(dtype, p, f))


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16", "fp8e4", "fp8e5", "tf32", "i32", "u8", "i16"])
def test_transpose_every_dtype_with_edge_values(dtype):
    lay = Layout()
    check(transpose(lay, 24, 20, dtype), np.random.default_rng(20), edges=0.05)


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(["f32", "bf16", "f16", "fp8e4"]), st.integers(1, 48), st.integers(1, 48),
       st.integers(0, 2**32 - 1))
def test_transpose_shapes(dtype, p, f, seed):
    lay = Layout()
    check(transpose(lay, p, f, dtype), np.random.default_rng(seed))


def test_transpose_full_size_is_exact_for_finite_values():
    lay = Layout()
    instr = transpose(lay, 128, 128, "bf16")
    init = fill(instr, np.random.default_rng(21), 0.0)
    data = init["data"].copy()
    got, _ = run_one(instr, init)  # (the reference's 2M Python steps would take 20 s: smaller sizes check it)
    want = data.T.astype(np.float32)
    want[want == 0] = 0.0  # -0 comes out +0: the sum starts from +0
    assert np.array_equal(got["dst"].astype(np.float32), want)


def test_transpose_non_finite_values_follow_the_matmul_definition():
    lay = Layout()
    instr = transpose(lay, 2, 3)
    data = f32([1, np.inf, -0.0], [2, 3, np.nan])
    got = check(instr, np.random.default_rng(0), data=data)
    out = got["dst"]
    assert out[0].tolist() == [1, 2]  # finite column: exact
    # column [inf, 3]: inf*1 + 3*0 = inf; inf*0 + 3*1 = NaN
    assert out[1, 0] == np.inf and bits(out[1, 1]) == F32_BITS_NAN
    # column [-0, NaN]: a NaN anywhere in the column makes the whole output row NaN (NaN*0 = NaN)
    assert bits(out[2]).tolist() == [F32_BITS_NAN, F32_BITS_NAN]


def test_transpose_errors():
    lay = Layout()
    fails(make("nc_transpose", dst=lay.tile("f32", 4, 3, memory=PSUM), data=lay.tile("f32", 4, 3)),
          "[F, P] = [3, 4]", "not [4, 3]")
    fails(transpose(lay, 4, 3, "bf16", "f32"), "dtype of 'data' (bf16), not f32")
    small = DEFAULT.with_overrides({"pe_rows": 32, "pe_cols": 64})
    fails(transpose(lay, 4, 100, "f32"), "4 partitions of 100 elements", "at most 32 x 64", config=small)
