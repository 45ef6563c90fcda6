"""Benchmark: functional simulation of programs/giou.s against plain numpy computing the same GIoU.

Both run side by side in one process, alternating, several times; the best time of each is kept
(the machine is noisy). Printed: ncsim's simulation alone (the machine executing the instructions),
ncsim's whole `ncsim.run` (assembling, loading inputs, simulating, reading outputs, checking), numpy,
and the ratios. Target (issue 4): the simulation within 5x of numpy.

    .venv/bin/python tools/bench_functional.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import ncsim


def load_sidecar():
    spec = importlib.util.spec_from_file_location("giou_sidecar", ROOT / "programs" / "giou.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sidecar = load_sidecar()
    inputs = sidecar.inputs(0)
    program = str(ROOT / "programs" / "giou.s")
    ncsim.run(program, inputs, check=False)  # warm up: numba compilation, caches

    best_sim = best_run = best_numpy = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        result = ncsim.run(program, inputs, check=False)
        best_run = min(best_run, time.perf_counter() - t0)
        best_sim = min(best_sim, result.seconds)
        t0 = time.perf_counter()
        sidecar.reference(**inputs)
        best_numpy = min(best_numpy, time.perf_counter() - t0)

    n = result.instructions
    print(f"GIoU of {sidecar.ROWS} x {sidecar.COLS // 4} box pairs, {n} instructions; best of {args.repeat}")
    print(f"  numpy (programs/giou.py reference)   {best_numpy * 1e3:9.1f} ms   1.0x")
    print(f"  ncsim simulation (Machine.run)        {best_sim * 1e3:9.1f} ms   {best_sim / best_numpy:5.1f}x numpy")
    print(f"  ncsim.run (assemble + run + outputs)  {best_run * 1e3:9.1f} ms   {best_run / best_numpy:5.1f}x numpy")
    print(f"  simulation speed: {n / best_sim:,.0f} instructions/s")


if __name__ == "__main__":
    main()
