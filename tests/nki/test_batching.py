"""The tracer's batching (ncsim/nki/tracer.py, Tracer.record): instructions of one call site that
differ only in their access patterns' partitions and offsets become one chunk of lanes. A batched
trace must build exactly the object that adding every instruction as a chunk of its own builds
(`batch=False`): the same encoded streams, line table and ELF bytes, hence the same values and
times. The kernels are the matmul tutorial's four of tools/bench_nki.py (also checked for values
here, at reduced sizes) and kernels whose call sites vary in structure (masks, SPMD instances,
different tiles at one line)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ncsim.nki.language as nl
from ncsim import nki
from ncsim.asm.elf import write_elf
from ncsim.errors import AsmError

BF16 = ml_dtypes.bfloat16
_spec = importlib.util.spec_from_file_location("bench_nki", Path(__file__).resolve().parents[2] / "tools" / "bench_nki.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

# (kernel, extra arguments): the optimised kernel's blocks shrunk so that a small size holds them
MATMULS = {"tiled": (bench.matmul_tiled, {}), "hoisted": (bench.matmul_hoisted, {}),
           "block_free": (bench.matmul_block_free, {}),
           "optimized": (bench.matmul_optimized, {"tiles_m": 2, "tiles_n": 1, "tiles_k": 2})}


def _operands(k: int, m: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Entries in {-1, 0, 1}: every partial sum (|s| <= K <= 256) is exact in bf16 and fp32."""
    rng = np.random.default_rng(seed)
    return rng.integers(-1, 2, (k, m)).astype(BF16), rng.integers(-1, 2, (k, n)).astype(BF16)


def _same_object(a: nki.NkiRun, b: nki.NkiRun) -> None:
    ea, eb = a.program.encoded, b.program.encoded
    for f in ("words", "word_first", "pos", "first", "file", "line", "col", "origin"):
        np.testing.assert_array_equal(getattr(ea, f), getattr(eb, f), err_msg=f)
    assert write_elf(a.obj) == write_elf(b.obj)
    assert a.latency_us == b.latency_us


@pytest.mark.parametrize("name", list(MATMULS))
def test_matmul_tutorial_kernels_compute_the_product(name):
    kernel, extra = MATMULS[name]
    lhs_t, rhs = _operands(256, 256, 1024)
    got = kernel(lhs_t, rhs, **extra)
    want = (lhs_t.astype(np.float64).T @ rhs.astype(np.float64)).astype(BF16)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", list(MATMULS))
def test_batched_trace_builds_the_same_object_as_one_chunk_per_instruction(name):
    kernel, extra = MATMULS[name]
    lhs_t, rhs = _operands(256, 256, 1024, seed=1)
    runs = [nki.simulate(kernel, (lhs_t, rhs), extra, batch=batch) for batch in (True, False)]
    _same_object(*runs)
    np.testing.assert_array_equal(runs[0].outputs, runs[1].outputs)
    # batched, the program has a chunk per call site and operand structure, not one per instruction
    assert len(runs[0].program.chunks) < 16 < len(runs[1].program.chunks) == runs[1].result.instructions


@nki.jit
def masked_rows(x, y):
    """One store line whose last iteration is masked to fewer partitions (another operand structure
    at the same site), a per-instance offset, and a scalar operand that changes per iteration."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ip = nl.arange(128)[:, None]
    jf = nl.arange(x.shape[1])[None, :]
    base = nl.program_id(0) * 0
    for t in nl.affine_range((x.shape[0] + 127) // 128):
        rows = base + t * 128 + ip
        a = nl.load(x[rows, jf], mask=rows < x.shape[0])
        b = nl.load(y[rows, jf], mask=rows < x.shape[0])
        nl.store(out[rows, jf], value=a * b + float(t), mask=rows < x.shape[0])
    return out


def test_sites_whose_structure_varies_build_the_same_object():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((300, 64)).astype(np.float32)
    y = rng.standard_normal((300, 64)).astype(np.float32)
    runs = [nki.simulate(masked_rows[2], (x, y), {}, batch=batch) for batch in (True, False)]
    _same_object(*runs)
    t = np.repeat(np.arange(3, dtype=np.float32), 128)[:300, None]
    np.testing.assert_array_equal(runs[0].outputs, x * y + t)


def test_the_rules_run_once_per_distinct_instruction(monkeypatch):
    from ncsim.nki import tracer

    seen = []

    def counting(instr, config):
        seen.append(instr)
        return real(instr, config)

    real = tracer.check_instruction
    monkeypatch.setattr(tracer, "check_instruction", counting)
    lhs_t, rhs = _operands(256, 256, 1024)
    run = nki.simulate(bench.matmul_tiled, (lhs_t, rhs), {}, values=False)
    # lhs tiles are loaded again for each N tile, into the same two buffers: the same instructions
    assert len(seen) == len({(i.engine, tuple(i.operands.values())) for i in seen}) < run.result.instructions


@nki.jit
def shifted_copies(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    r = nl.ndarray(x.shape, dtype=x.dtype)
    for p in (0, 64, 32):  # 40 partitions may start at 0 or 64, not at 32
        r[p:p + 40, :] = nl.copy(t[p:p + 40, :])
    nl.store(out, value=r)
    return out


def test_a_later_iteration_that_breaks_a_rule_is_still_refused():
    x = np.zeros((128, 64), np.float32)
    with pytest.raises(AsmError) as e:
        shifted_copies(x)
    assert "starts at partition 32 with 40 partitions" in str(e.value)
    assert e.value.loc.text.strip() == "r[p:p + 40, :] = nl.copy(t[p:p + 40, :])"
