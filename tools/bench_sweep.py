"""Benchmark of `ncsim.sweep`: points per second on a local Dask cluster against a plain sequential loop.

    .venv/bin/python tools/bench_sweep.py                        # 40 points, a local cluster of one worker per core
    .venv/bin/python tools/bench_sweep.py --blocks 250 --workers 2
    .venv/bin/python tools/bench_sweep.py --scheduler tcp://127.0.0.1:8786   # an existing cluster instead

The program is tools/bench_pipeline.py's generated `.sync auto` kernel (loops over every engine, DMAs,
a tiled matmul) with --blocks blocks (816 instructions each; the default 400 blocks: about 326k instructions), so
that one timing-only point (timing, race check, report) takes a few tenths of a second. The grid is
8 HBM bandwidths x 5 DMA engine counts = 40 points, none of which changes the assembly.

- sequential: the same work in this process, one point after another, as a loop over
  `ncsim run --timing-only --set ...` would do at best: the program assembled once (`_assemble`), then
  `_run_point` per point (the object decoded once, then timing, races and report).
- cluster: `ncsim.sweep(...)` on a LocalCluster (processes = cores, 127.0.0.1, no dashboard); its
  time is given with the cluster's start and stop (what `ncsim sweep` costs) and without (a cluster
  already running).
Printed: seconds, points per second and the speedup of each. Host times on a machine that may be busy.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from bench_pipeline import program_text

import ncsim
from ncsim import sweeps
from ncsim.config import DEFAULT

GRID = {"hbm_bandwidth": [50e9, 100e9, 150e9, 205e9, 300e9, 410e9, 600e9, 820e9], "dma_engines": [2, 4, 8, 12, 16]}


def sequential(path: str) -> tuple[float, list[float]]:
    start = time.perf_counter()
    spec = sweeps.program_spec(path)
    _, points = sweeps.grid_points(GRID)
    assembled = sweeps._assemble(spec, DEFAULT)
    assert assembled[0] == "ok", assembled[1]
    per_point = []
    for point in points:
        t = time.perf_counter()
        row = sweeps._run_point(assembled, "bench", spec.light(), DEFAULT.with_overrides(point), False)
        assert row["status"] == "ok", row["error"]
        per_point.append(time.perf_counter() - t)
    return time.perf_counter() - start, per_point


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", type=int, default=400, help="blocks of bench_pipeline's program (816 instructions each)")
    ap.add_argument("--workers", type=int, default=None, help="workers of the local cluster (default: cores)")
    ap.add_argument("--scheduler", default=None, help="a Dask scheduler's address instead of a local cluster")
    args = ap.parse_args()
    n = len(GRID["hbm_bandwidth"]) * len(GRID["dma_engines"])
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "bench.s")
        Path(path).write_text(program_text(args.blocks))
        ncsim.run(path, values=False)  # warm-up: numba's cache load, imports
        seq, per_point = sequential(path)
        per_point.sort()
        print(f"{n} points of a {args.blocks * 816 + 16:,}-instruction program; cores: {os.cpu_count()}")
        print(f"one point (decoded program: timing, races, report): median {per_point[len(per_point) // 2]:.3f} s,"
              f" least {per_point[0]:.3f} s (the first also decodes the object)")
        print(f"sequential loop:           {seq:7.2f} s  {n / seq:6.2f} points/s")
        if args.scheduler:
            start = time.perf_counter()
            df = ncsim.sweep(path, GRID, args.scheduler)
            total = time.perf_counter() - start
            print(f"cluster {args.scheduler}: {total:7.2f} s  {n / total:6.2f} points/s  x{seq / total:.2f}")
        else:
            start = time.perf_counter()
            df = ncsim.sweep(path, GRID, workers=args.workers)
            total = time.perf_counter() - start
            with sweeps.cluster_client(None, args.workers) as client:
                t = time.perf_counter()
                ncsim.sweep(path, GRID, client)
                running = time.perf_counter() - t
            print(f"local cluster, with start: {total:7.2f} s  {n / total:6.2f} points/s  x{seq / total:.2f}")
            print(f"local cluster, running:    {running:7.2f} s  {n / running:6.2f} points/s  x{seq / running:.2f}")
        bad = df[df.status != "ok"]
        assert bad.empty, bad.error.iloc[0]


if __name__ == "__main__":
    main()
