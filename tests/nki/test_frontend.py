"""The NKI front end around the kernels: errors at the kernel's line, indexing and masks, the
buffer policy, entry points (benchmark, profile, placeholders), the neuronxcc alias and `ncsim nki`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ncsim.nki.isa as nisa
import ncsim.nki.language as nl
from ncsim import nki
from ncsim.errors import AsmError
from ncsim.nki.alias import install_alias, remove_alias

F32 = np.float32
HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]


def line_of(fragment: str) -> int:
    return next(n for n, text in enumerate(HERE.read_text().splitlines(), 1) if fragment in text)


# ------------------------------------------------------------------ errors point at the kernel
@nki.jit
def too_many_partitions(a):
    t = nl.load(a)  # the partition dimension is 256
    return t


@nki.jit
def psum_too_big(a):
    return nl.zeros((128, 1024), nl.float32, buffer=nl.psum)  # 4 KiB per partition


@nki.jit
def unknown_function(a):
    return nl.frobnicate(a)


@pytest.mark.parametrize("kernel, fragment, rule", [
    (too_many_partitions, "t = nl.load(a)  # the partition", "partition dimension, at most 128"),
    (psum_too_big, "return nl.zeros((128, 1024)", "PSUM tile holds at most 2048 bytes per partition"),
    (unknown_function, "return nl.frobnicate(a)", "nl.frobnicate is not available"),
])
def test_a_broken_rule_is_an_error_at_the_kernels_line(kernel, fragment, rule):
    with pytest.raises(AsmError) as e:
        kernel(np.zeros((256, 4), F32))
    assert e.value.loc.file == str(HERE)
    assert e.value.loc.line == line_of(fragment)
    assert rule in e.value.message
    assert fragment.split("  #")[0] in e.value.format()  # the line is shown


@nki.jit
def matmul_too_wide(a, b):
    return nl.matmul(nl.load(a), nl.load(b), transpose_x=True)


def test_matmul_limits_are_checked_with_the_rule():
    with pytest.raises(AsmError, match="moving \\[K, N <= 512\\]"):
        matmul_too_wide(np.zeros((128, 128), F32), np.zeros((128, 1024), F32))


def test_every_instruction_carries_the_kernels_file_and_line():
    from tests.nki.test_tutorials import add_tiles

    add_tiles[1, 1](np.zeros((128, 256), F32), np.zeros((128, 256), F32))
    obj = nki.last_run().obj
    assert obj.files == [str(HERE.parent / "test_tutorials.py")]
    assert all(e.line > 0 for entries in obj.lines.values() for e in entries)


# ------------------------------------------------------------------ indexing, masks, buffers
@nki.jit
def corners(boxes):
    """The GIoU article's pattern: four planes of every fourth element, t[i_p, 4 * i_f + k]."""
    out = nl.ndarray((boxes.shape[0], boxes.shape[1] // 4), dtype=boxes.dtype, buffer=nl.shared_hbm)
    t = nl.load(boxes)
    ip, jf = nl.mgrid[0:boxes.shape[0], 0:boxes.shape[1] // 4]
    width = nl.maximum(t[ip, 4 * jf + 2] - t[ip, 4 * jf], 0.0)
    nl.store(out, value=width)
    return out


def test_affine_indices_read_strided_planes():
    b = np.random.default_rng(5).standard_normal((128, 64)).astype(F32)
    np.testing.assert_array_equal(corners(b), np.maximum(b[:, 2::4] - b[:, 0::4], F32(0)))


@nki.jit
def masked_exp(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ip = nl.arange(128)[:, None]
    jf = nl.arange(64)[None, :]
    t = nl.load(x[ip, jf], mask=ip < 100)
    nl.store(out[ip, jf], value=nl.exp(t, mask=(ip < 100) & (jf < 40)), mask=(ip < 100) & (jf < 40))
    nl.store(out[ip, jf], value=t, mask=ip >= 500)  # keeps nothing: no instruction
    return out


def test_masks_shrink_and_drop_instructions():
    x = np.random.default_rng(6).standard_normal((128, 64)).astype(F32)
    got = masked_exp(x)
    want = np.exp(x[:100, :40].astype(np.float64)).astype(F32)
    np.testing.assert_array_equal(got[:100, :40], want)
    instrs = nki.last_run().program.instructions
    assert [i.mnemonic for i in instrs] == ["dma_copy", "activation", "dma_copy"]
    assert instrs[1]["data"].partitions == 100 and instrs[1]["data"].free_elements == 40


@nki.jit
def scaled_copy(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=t * 2.0)
    return out


def test_a_tile_made_in_a_loop_rotates_through_two_buffers():
    x = np.random.default_rng(7).standard_normal((512, 32)).astype(F32)
    np.testing.assert_array_equal(scaled_copy(x), x * F32(2))
    loads = [i["dst"].offset for i in nki.last_run().program.instructions if i.mnemonic == "dma_copy"
             and i["dst"].memory.label == "sbuf"]
    assert len(set(loads)) == 2 and loads[0] == loads[2] and loads[1] == loads[3]


@nki.jit
def blocks_of_rows(x, k=4):
    """Each block loads k tiles at one line, kept in a list, and sums them: k tiles live at once."""
    out = nl.ndarray((x.shape[0] // k, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(x.shape[0] // (128 * k)):
        rows = [nl.load(x[(b * k + t) * 128:(b * k + t + 1) * 128, :]) for t in range(k)]
        acc = nl.ndarray((128, x.shape[1]), dtype=x.dtype)
        acc[...] = nl.add(rows[0], rows[1])
        for t in range(2, k):
            acc[...] = nl.add(acc, rows[t])
        nl.store(out[b * 128:(b + 1) * 128, :], value=acc)
    return out


def test_a_site_making_k_live_tiles_gets_2k_buffers_in_turn():
    """docs/nki.md "Buffer policy": a line that makes 4 tiles an iteration, live together, has
    2 x 4 buffers, and consecutive iterations load into disjoint sets (the set of one iteration
    again two iterations later); `acc = nl.ndarray(...)`, one live tile an iteration (the old one
    dies when the name is bound again), keeps two buffers."""
    x = np.random.default_rng(8).standard_normal((128 * 4 * 4, 16)).astype(F32)
    want = x.reshape(4, 4, 128, 16).sum(axis=1, dtype=F32)
    np.testing.assert_array_equal(blocks_of_rows(x), want.reshape(512, 16))
    instrs = nki.last_run().program.instructions
    loads = [i["dst"].offset for i in instrs if i.mnemonic == "dma_copy" and i["dst"].memory.label == "sbuf"]
    sets = [set(loads[b * 4:(b + 1) * 4]) for b in range(4)]
    assert all(len(s) == 4 for s in sets)
    assert not sets[0] & sets[1] and not sets[1] & sets[2] and not sets[2] & sets[3]
    assert sets[0] == sets[2] and sets[1] == sets[3]
    stores = {i["src"].offset for i in instrs if i.mnemonic == "dma_copy" and i["src"].memory.label == "sbuf"}
    assert len(stores) == 2
    run = nki.simulate(blocks_of_rows, (x,), {}, buffers=3)  # the override: 3 x 4, sets of 4 in turn
    loads = [i["dst"].offset for i in run.program.instructions
             if i.mnemonic == "dma_copy" and i["dst"].memory.label == "sbuf"]
    assert len(set(loads)) == 12 and set(loads[:4]) == set(loads[12:16])


@nki.jit
def row_times_rows(x, row):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        r = nl.load(row[0:1, :])
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nisa.tensor_tensor(t, r.broadcast_to((128, x.shape[1])),
                                                                            op=nl.multiply))
    return out


@pytest.mark.parametrize("dtype", [np.float32, "bfloat16"])
def test_a_partition_broadcast_is_a_matmul_with_ones(dtype):
    """fp32: nc_matmul(ones [1, 128], row) on the Tensor engine into PSUM (the architecture guide's
    TensorE alternative use), the ones made once by a GpSimd memset; other dtypes: the DMA copy."""
    rng = np.random.default_rng(9)
    dt = np.dtype(dtype) if dtype is np.float32 else nl.bfloat16
    x = rng.standard_normal((256, 96)).astype(dt)
    row = rng.standard_normal((1, 96)).astype(dt)
    np.testing.assert_array_equal(row_times_rows(x, row), (x * row).astype(dt))
    instrs = nki.last_run().program.instructions
    mm = [i for i in instrs if i.mnemonic == "nc_matmul"]
    if dtype is np.float32:
        assert len(mm) == 2 and all(i["is_stationary_onezero"] for i in mm)
        assert mm[0]["stationary"].partitions == 1 and mm[0]["stationary"].free_elements == 128
        assert mm[0]["dst"].memory.label == "psum" and mm[0]["dst"].partitions == 128
        assert [i.engine for i in instrs if i.mnemonic == "memset"] == ["gpsimd"]
        assert sum(i.mnemonic == "dma_copy" for i in instrs) == 6  # 2 x (row, x, store)
    else:
        assert not mm and sum(i.mnemonic == "dma_copy" for i in instrs) == 8  # + 2 SBUF-to-SBUF broadcasts


@nki.jit
def scale_rows_by_their_sums(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    sums = nisa.tensor_reduce(np.add, data=t, axis=(1,))  # [128]: the partition axis only
    nl.store(out, value=nl.copy(sums.broadcast_to((128, 40))) * t)
    return out


def test_a_tile_of_its_partition_axis_broadcasts_along_free_axes():
    """A [P] tile (a reduction without keepdims) holds one value per partition; broadcast_to [P, F]
    repeats it along the free axis, as nki-samples' Stable Diffusion attention does with its row sums
    ([128] to [128, 64], where numpy's rule would align the 128 with the last axis)."""
    x = np.random.default_rng(10).standard_normal((128, 40)).astype(F32)
    sums = x.sum(axis=1, dtype=np.float64)
    got = scale_rows_by_their_sums(x)
    np.testing.assert_allclose(got, x * sums[:, None], rtol=1e-5, atol=1e-5)
    assert not [i for i in nki.last_run().program.instructions if i.mnemonic == "dma_copy"
                and i["src"].memory.label == "sbuf" and i["dst"].memory.label == "sbuf"]


@nki.jit
def sums_into_a_column(x):
    out = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    for j in range(2):
        part = nl.sum(nl.load(x[:, j * 20:(j + 1) * 20]), axis=[1])  # [P]: the partition axis only
        acc[:, :] = acc[:, :] + part
    nl.store(out, value=acc)
    return out


def test_a_tile_of_its_partition_axis_adds_to_a_column_as_a_column():
    """[P, 1] + [P] is [P, 1] (nki-samples' adaptive average pool accumulates its window sums so),
    where numpy's rule would give [P, P]; shapes that broadcast neither way are refused at the line."""
    x = np.random.default_rng(12).standard_normal((64, 40)).astype(F32)
    want = x[:, :20].sum(axis=1, dtype=F32)[:, None] + x[:, 20:].sum(axis=1, dtype=F32)[:, None]
    np.testing.assert_allclose(sums_into_a_column(x), want, rtol=1e-5, atol=1e-5)

    @nki.jit
    def mismatched(x):
        out = nl.ndarray((64, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        a, b = nl.load(x[:, 0:3]), nl.load(x[:, 3:7])
        nl.store(out, value=a + b)  # [64, 3] + [64, 4]
        return out

    with pytest.raises(AsmError, match=r"shapes \[64, 3\] and \[64, 4\] do not broadcast") as e:
        mismatched(x)
    assert "test_frontend.py" in str(e.value)


@nki.jit
def transposes_into_sbuf(x):
    out = nl.ndarray((x.shape[1], x.shape[0]), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    tt = nl.ndarray((nl.par_dim(x.shape[1]), x.shape[0]), dtype=x.dtype)  # an SBUF tensor
    tt[...] = nisa.nc_transpose(t)
    nl.store(out, value=tt)
    return out


def test_a_tensor_engine_result_assigned_to_sbuf_is_made_in_psum_then_copied():
    """`sbuf_tensor[...] = nisa.nc_transpose(t)` (as nki-samples' attention kernel writes it): the
    Tensor engine writes PSUM only, so the transpose goes to a PSUM tile and a tensor_copy brings it
    into the SBUF tensor (it was refused by rule transpose); the values are the transpose."""
    x = np.random.default_rng(11).standard_normal((96, 64)).astype(F32)
    np.testing.assert_array_equal(transposes_into_sbuf(x), x.T)
    instrs = nki.last_run().program.instructions
    tr = [i for i in instrs if i.mnemonic == "nc_transpose"]
    cp = [i for i in instrs if i.mnemonic == "tensor_copy"]
    assert len(tr) == 1 and tr[0]["dst"].memory.label == "psum"
    assert len(cp) == 1 and cp[0]["src"] == tr[0]["dst"] and cp[0]["dst"].memory.label == "sbuf"


@nki.jit
def isa_forms(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    a = nisa.activation(op=nl.exp, data=t, scale=0.5)
    s = nisa.tensor_scalar(a, np.multiply, 3.0, op1=np.add, operand1=1.0)
    nl.store(out, value=nisa.tensor_tensor(s, t, op=nl.subtract))
    return out


def test_nisa_calls_return_tiles():
    x = np.random.default_rng(8).standard_normal((64, 32)).astype(F32)
    a = np.exp((x * F32(0.5)).astype(np.float64)).astype(F32)
    np.testing.assert_array_equal(isa_forms(x), (a * F32(3) + F32(1)) - x)


# ------------------------------------------------------------------ benchmark, profile, placeholders
def test_benchmark_on_placeholders_times_without_values(tmp_path):
    from tests.nki.test_tutorials import matmul_tiled

    bench = nki.benchmark(warmup=5, iters=10)(matmul_tiled)
    bench(nki.typing.tensor[[256, 256], nl.bfloat16], nki.typing.tensor[[256, 1024], nl.bfloat16])
    lat = bench.benchmark_result.nc_latency
    assert lat.get_latency_percentile(50) == lat.get_latency_percentile(99) == nki.last_run().latency_us > 0
    assert not nki.last_run().values

    saved = nki.benchmark(matmul_tiled, save_neff_name=str(tmp_path / "file.neff"),
                          save_trace_name=str(tmp_path / "profile.ntff"))
    saved(np.ones((128, 128), F32), np.ones((128, 512), F32))
    assert (tmp_path / "file.neff").read_bytes()[:4] == b"\x7fELF"
    assert "traceEvents" in json.loads((tmp_path / "profile.ntff").read_text())


def test_profile_writes_the_trace_and_the_timeline(tmp_path):
    from tests.nki.test_tutorials import add_tiles

    prof = nki.profile(working_directory=str(tmp_path), save_trace_name="add.json")(add_tiles)
    got = prof[1, 1](np.ones((128, 256), F32), np.ones((128, 256), F32))
    np.testing.assert_array_equal(got, np.full((128, 256), 2, F32))
    assert (tmp_path / "add.json").is_file() and (tmp_path / "add.png").is_file()


# ------------------------------------------------------------------ the alias and `ncsim nki`
def test_the_alias_is_installed_only_on_request():
    remove_alias()
    assert "neuronxcc" not in sys.modules
    install_alias()
    try:
        import neuronxcc.nki as alias_nki
        import neuronxcc.nki.language as alias_nl
        from neuronxcc.nki.language import par_dim

        assert alias_nki is nki and alias_nl is nl and par_dim(128) == 128
    finally:
        remove_alias()


SCRIPT = """\
import argparse
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
from helper import ROWS

@nki.jit
def double(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(x) * 2.0)
    return out

if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--cols", type=int)
    args = p.parse_args()
    x = np.ones((ROWS, args.cols), np.float32)
    print("sum", double(x).sum())
"""


def test_ncsim_nki_runs_a_script_as_python_would(tmp_path):
    (tmp_path / "kern.py").write_text(SCRIPT)
    (tmp_path / "helper.py").write_text("ROWS = 16\n")
    done = subprocess.run([str(Path(sys.executable).parent / "ncsim"), "nki", str(tmp_path / "kern.py"), "--cols", "8"],
                          check=False, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "sum 256.0" in done.stdout
    assert "ncsim: kernel double: 3 instructions" in done.stderr


def test_ncsim_nki_show_sync_points_at_the_kernels_lines(tmp_path):
    """--show-sync prints each kernel's synchronisation report; its places are the script's own lines."""
    (tmp_path / "kern.py").write_text(SCRIPT)
    (tmp_path / "helper.py").write_text("ROWS = 16\n")
    done = subprocess.run([str(Path(sys.executable).parent / "ncsim"), "nki", "--show-sync", str(tmp_path / "kern.py"),
                           "--cols", "8"], check=False, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "double: automatic synchronisation:" in done.stderr
    waits = [line for line in done.stderr.splitlines() if " waits s" in line]
    assert waits and all(line.strip().startswith(str(tmp_path / "kern.py") + ":") for line in waits), done.stderr


# ------------------------------------------------------------------ dtype promotion (NKI Type Promotion, nki.api.shared)
@pytest.mark.parametrize("a, b, want", [
    ("f32", "tf32", "f32"), ("f32", "bf16", "f32"), ("f16", "bf16", "f32"), ("fp8e4", "f16", "f16"),
    ("fp8e4", "bf16", "bf16"), ("fp8e4", "fp8e5", "bf16"), ("i16", "i32", "i32"), ("u8", "u16", "u16"),
    ("u16", "i32", "i32"), ("i8", "u8", "i16"), ("i8", "u16", "i32"), ("i32", "u32", "f32"), ("i32", "f16", "f16"),
    ("u16", "tf32", "tf32"),
])
def test_promotion_follows_nkis_table(a, b, want):
    from ncsim import dtypes

    got = nl.promote(dtypes.by_name(a), dtypes.by_name(b))
    assert got.short == want and nl.promote(dtypes.by_name(b), dtypes.by_name(a)).short == want


@nki.jit
def weak_scalar(x):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    y = nl.load(x) * 2.0  # bf16 * a Python float -> float32 (a weakly typed scalar is float32)
    assert y.dtype == nl.float32
    nl.store(out, value=y)
    return out


def test_a_python_number_is_float32():
    import ml_dtypes

    x = np.arange(8, dtype=np.float32).reshape(8, 1).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(weak_scalar(x), x.astype(F32) * 2)


# ------------------------------------------------------------------ constants: the assembler's (fields.const_of)
@pytest.mark.parametrize("number, text", [
    (2.5, "2.5"), (np.float64(0.1), "0.1"), (np.float16(1.5), "1.5"), (1e300, "1e300"), (-1e300, "-1e300"),
    (7, "7"), (np.int64(-2**31), "-2147483648"), (2**31, "2147483648"), (np.uint32(2**32 - 1), "4294967295"),
    (True, "1"), (np.bool_(False), "0"),
])
def test_a_kernels_number_is_the_constant_the_assembler_makes(number, text):
    """A number given to an NKI call becomes the constant (value and dtype) that the same number
    written in assembly becomes; 1e300 is fp32 inf in both, without numpy's overflow warning."""
    from ncsim.asm.fields import ParseEnv, parse_const
    from ncsim.asm.lexer import Cursor, Line
    from ncsim.nki.tracer import constant

    want = parse_const(Cursor(Line("c.s", 1, text)), ParseEnv())
    got = constant(number)
    assert (got.value, got.dtype) == (want.value, want.dtype)


def test_a_kernels_number_beyond_32_bits_is_refused_as_in_assembly():
    from ncsim.nki.tracer import constant

    for n in (2**32, -2**31 - 1, np.int64(2**40)):
        with pytest.raises(AsmError, match=f"constant {int(n)} does not fit in 32 bits"):
            constant(n)
    with pytest.raises(AsmError, match="expected a tile or a number, not str"):
        constant("1.0")


def test_finfo_and_iinfo_give_the_dtypes_limits():
    assert nl.finfo(nl.float32).min == np.finfo(np.float32).min
    assert float(nl.finfo(nl.bfloat16).max) == 3.3895313892515355e38  # bfloat16's largest: (2 - 2**-7) * 2**127
    assert nl.finfo(nl.float8_e4m3).max == 240.0  # NKI's float8_e4m3 (IEEE-like, with infinities)
    assert (nl.iinfo(nl.int8).min, nl.iinfo(nl.uint16).max) == (-128, 65535)
