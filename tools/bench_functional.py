"""Benchmark: ncsim's functional simulation against a plain host computation of the same values.

Two programs, each side by side with its peer in one process, alternating, several times; the best
time of each is kept (the machine is noisy):

- programs/giou.s against plain numpy computing the same GIoU (its sidecar's reference);
- programs/matmul.s against a numba loop computing the same ordered, unfused fp32 sum
  (c[m, n] = sum over k = 0..K-1 in order of a[k, m] * b[k, n], every product and sum rounded to
  fp32; BLAS is no fair peer, its summation order is not ncsim's), at the sidecar's shapes.

Printed per program: ncsim's simulation alone (Machine.run: a fresh machine executing the decoded
program's instructions; the program is decoded once, outside the repetitions), ncsim's whole
`ncsim.run` without the timing model (assembling, loading inputs, simulating, reading outputs), the
peer, and the ratios to the peer, in wall time and in this process's CPU time (steadier on a busy
machine). Target (issue 10): the simulation within 3x of its peer.

    .venv/bin/python tools/bench_functional.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import numba
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import ncsim


def load_sidecar(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_sidecar", ROOT / "programs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@numba.njit(cache=True, error_model="numpy")
def ordered_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """c[m, n] = c[m, n] + a[k, m] * b[k, n] for k = 0..K-1 in order, from +0, in fp32 (a [K, M], b [K, N])."""
    K, M = a.shape
    N = b.shape[1]
    c = np.zeros((M, N), np.float32)
    for k in range(K):
        for m in range(M):
            s = a[k, m]
            for n in range(N):
                c[m, n] = c[m, n] + s * b[k, n]
    return c


def numba_matmul(a_t: np.ndarray, b: np.ndarray) -> np.ndarray:
    return ordered_matmul(a_t.astype(np.float32), b.astype(np.float32))


def _timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of fn()."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def compare(name: str, peer_name: str, peer, repeat: int) -> None:
    """Time programs/NAME.s against peer(**inputs) and print the rows."""
    from ncsim.config import Config
    from ncsim.runtime import inputs as inputs_mod
    from ncsim.runtime.machine import Machine
    from ncsim.runtime.run import load_program

    inputs = load_sidecar(name).inputs(0)
    program = str(ROOT / "programs" / f"{name}.s")
    result = ncsim.run(program, inputs, check=False, timing=False)  # warm up: numba compilation, caches
    expected = peer(**inputs)
    for out, value in result.outputs.items():  # the peer computes the same values
        assert np.array_equal(np.asarray(value).view(np.uint32),
                              np.asarray(expected[out], np.float32).view(np.uint32)), (name, out)
    config = Config()
    prog = load_program(program, config)[0]  # decoded once; each repetition runs a fresh machine on it

    def machine() -> Machine:
        m = Machine(prog, config, program)
        for t in inputs_mod.input_tensors(prog):
            m.load_tensor(t, inputs[t.name])
        return m

    best = {"sim": [np.inf, np.inf], "run": [np.inf, np.inf], "peer": [np.inf, np.inf]}
    for _ in range(repeat):
        m = machine()
        for key, fn in (("sim", m.run), ("run", lambda: ncsim.run(program, inputs, check=False, timing=False)),
                        ("peer", lambda: peer(**inputs))):
            wall, cpu = _timed(fn)
            best[key] = [min(best[key][0], wall), min(best[key][1], cpu)]

    def row(label: str, key: str) -> str:
        wall, cpu = best[key]
        pw, pc = best["peer"]
        return f"  {label:<40} {wall * 1e3:8.1f} ms {wall / pw:5.1f}x   {cpu * 1e3:8.1f} ms {cpu / pc:5.1f}x"

    n = prog.count
    print(f"programs/{name}.s: {n} instructions; best of {repeat}        wall        ratio   CPU (process)  ratio")
    print(row(peer_name, "peer"))
    print(row("ncsim simulation (Machine.run)", "sim"))
    print(row("ncsim.run, values only (from the .s)", "run"))
    print(f"  simulation speed: {n / best['sim'][0]:,.0f} instructions/s (wall)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    giou = load_sidecar("giou")
    print(f"GIoU of {giou.ROWS} x {giou.COLS // 4} box pairs")
    compare("giou", "numpy (programs/giou.py reference)", lambda **kw: giou.reference(**kw), args.repeat)
    mm = load_sidecar("matmul")
    print(f"\nmatmul C[{mm.M}, {mm.N}] = A[{mm.M}, {mm.K}] @ B[{mm.K}, {mm.N}], bf16 in, fp32 ordered sum")
    compare("matmul", "numba loop (ordered fp32 sum)", lambda a_t, b: {"c": numba_matmul(a_t, b)}, args.repeat)


if __name__ == "__main__":
    main()
