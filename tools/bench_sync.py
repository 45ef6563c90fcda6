"""Benchmark of automatic synchronisation's array core (`ncsim.asm.sync.synchronise_arrays`):
instructions per second as programs grow, next to the walk it replaced on small programs.

    .venv/bin/python tools/bench_sync.py                 # n = 1k, 4k, 16k, 64k, 256k, 1M
    .venv/bin/python tools/bench_sync.py --max 65536 --old 1024

Programs, generated as the core's flat arrays (as a front end without Instruction objects makes them):
  independent  Vector and Scalar alternate, each copying its own constant tile into its own 4
               rotating [128, 512] f32 tiles: they never wait for each other, so each search looks
               at a history that only grows (the walk's worst case, O(n^2)).
  interleaved  the same, but the two engines' tiles alternate in one pool (Vector's slots 0, 2, 4, 6,
               Scalar's 1, 3, 5, 7), so a bounding box of one engine's tiles covers the other's.
  pipeline     per step, Sync loads a [128, 512] f32 block of x from HBM into one of 3 rotating SBUF
               tiles (queue 0), the Tensor engine multiplies it by a weight tile into one of 2 PSUM
               banks, Vector copies the bank to one of 2 SBUF tiles, GpSimd stores that to y (queue
               1): three RAW and three WAR waits per step.
Each core time is the best of `--repeat` runs after a warm-up (numba's compile or cache load is not
counted); `ns / n log2 n` stays flat when the time grows as n log n. The walk (`reference_edges` in
tests/asm/test_sync.py, the pass this core replaced) runs once for n up to `--old`, on AccessPattern
objects built outside its timing, and its edges are checked to be the core's.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

from ncsim import dtypes
from ncsim.asm.sync import KINDS, MAX_DIMS, Access, synchronise_arrays
from ncsim.memory.access import AccessPattern, Memory

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.asm.test_sync import reference_edges

SBUF, PSUM, HBM = int(Memory.SBUF), int(Memory.PSUM), int(Memory.HBM)
TILE = 512 * 4  # bytes per partition of a [128, 512] f32 tile
BLOCK = 128 * TILE  # bytes of a [128, 512] f32 block in HBM


def program(names: list[str], step: list[tuple[str, str, list[tuple[int, bool]]]], steps: int, offsets) -> dict:
    """The core's arguments for `steps` repetitions of `step`: its instructions' (stream, engine, rows),
    each row (memory, write), all [128, 512] f32 (on chip: 128 partitions of 512 contiguous
    elements; in HBM: 128 rows of 512 in a tensor 512 wide). `offsets(s)` gives the byte offset of
    every row of the step, in order, for the array of steps s."""
    sid = {name: k for k, name in enumerate(sorted(names))}
    rows = [row for _, _, rs in step for row in rs]
    s = np.arange(steps)
    memory = np.tile([m for m, _ in rows], steps)
    hbm = memory == HBM
    dims = np.zeros((len(memory), MAX_DIMS, 2), np.int64)
    dims[:, 0] = (1, 512)
    dims[hbm, 0] = (512, 128)
    dims[hbm, 1] = (1, 512)
    return {
        "stream": np.tile([sid[st] for st, _, _ in step], steps),
        "engine": np.tile([sid[e] for _, e, _ in step], steps),
        "acc_ptr": np.concatenate([[0], np.cumsum(np.tile([len(rs) for _, _, rs in step], steps))]),
        "acc_memory": memory,
        "acc_partition": np.zeros(len(memory), np.int64),
        "acc_partitions": np.where(hbm, 0, 128),
        "acc_offset": np.stack([np.broadcast_to(o, steps) for o in offsets(s)], axis=1).ravel(),
        "acc_itemsize": np.full(len(memory), 4, np.int64),
        "acc_ndims": np.where(hbm, 2, 1),
        "acc_dims": dims,
        "acc_write": np.tile([w for _, w in rows], steps),
    }


def independent(n: int, interleaved: bool) -> dict:
    """Vector: tensor_copy own[s % 4] <- constant tile; Scalar: activation own[s % 4] <- its constant."""
    slot = (lambda e, k: (2 * k + e) * TILE) if interleaved else (lambda e, k: (4 * e + k) * TILE)
    step = [("vector", "vector", [(SBUF, True), (SBUF, False)]),
            ("scalar", "scalar", [(SBUF, True), (SBUF, False)])]
    return program(["vector", "scalar"], step, n // 2,
                   lambda s: [slot(0, s % 4), 8 * TILE, slot(1, s % 4), 9 * TILE])


def pipeline(n: int) -> dict:
    """Load (queue 0 from sync) -> nc_matmul (tensor) -> tensor_copy (vector) -> store (queue 1 from gpsimd)."""
    q0, q1 = "dma queue 0 from sync", "dma queue 1 from gpsimd"
    loads, weights, outs = 0, 3 * TILE, 4 * TILE  # SBUF: 3 load tiles, the weights, 2 output tiles
    x, y = 0, 1 << 40
    step = [(q0, "sync", [(SBUF, True), (HBM, False)]),
            ("tensor", "tensor", [(PSUM, True), (SBUF, False), (SBUF, False)]),
            ("vector", "vector", [(SBUF, True), (PSUM, False)]),
            (q1, "gpsimd", [(HBM, True), (SBUF, False)])]
    return program(["sync", "tensor", "vector", "gpsimd", q0, q1], step, n // 4,
                   lambda s: [loads + s % 3 * TILE, x + s * BLOCK,
                              s % 2 * TILE, weights, loads + s % 3 * TILE,
                              outs + s % 2 * TILE, s % 2 * TILE,
                              y + s * BLOCK, outs + s % 2 * TILE])


PROGRAMS = {"independent": lambda n: independent(n, False), "interleaved": lambda n: independent(n, True),
            "pipeline": pipeline}


def walk(arrays: dict) -> tuple[list[tuple], float]:
    """The old walk's edges (producer, consumer, kind, producer row, consumer row) and its time."""
    ptr, dims = arrays["acc_ptr"], arrays["acc_dims"]
    foot = []
    for i in range(len(arrays["stream"])):
        rows = []
        for r in range(ptr[i], ptr[i + 1]):
            ap = AccessPattern(Memory(int(arrays["acc_memory"][r])), dtypes.FLOAT32, 0,
                               int(arrays["acc_partitions"][r]), int(arrays["acc_offset"][r]),
                               tuple((int(st), int(c)) for st, c in dims[r, :arrays["acc_ndims"][r]]))
            rows.append(Access(ap, bool(arrays["acc_write"][r]), str(r)))
        foot.append(rows)
    t0 = time.perf_counter()
    edges = reference_edges([str(s) for s in arrays["stream"]], [str(e) for e in arrays["engine"]], foot)
    return [(p, c, kind, int(a), int(b)) for p, c, kind, a, b, _ in edges], time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=1 << 20, help="largest n (n = 1024 x 4^k up to this)")
    parser.add_argument("--old", type=int, default=4096, help="largest n the old walk runs for")
    parser.add_argument("--repeat", type=int, default=3, help="core runs to take the best of")
    parser.add_argument("--programs", default=",".join(PROGRAMS), help="which programs, comma-separated")
    args = parser.parse_args()

    t0 = time.perf_counter()
    synchronise_arrays(**pipeline(64))
    print(f"warm-up (numba compile or cache load): {time.perf_counter() - t0:.2f} s")
    print(f"{'program':<13}{'n':>9}{'edges':>9}{'core s':>9}{'instr/s':>13}{'ns / n log2 n':>15}"
          f"{'walk s':>9}{'instr/s':>10}")
    sizes = [1024 * 4 ** k for k in range(11) if 1024 * 4 ** k <= args.max]
    for name in args.programs.split(","):
        for n in sizes:
            arrays = PROGRAMS[name](n)
            best = math.inf
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                edges = synchronise_arrays(**arrays)
                best = min(best, time.perf_counter() - t0)
            line = (f"{name:<13}{n:>9}{len(edges.producer):>9}{best:>9.3f}{n / best:>13,.0f}"
                    f"{best / (n * math.log2(n)) * 1e9:>15.2f}")
            if n <= args.old:
                walked, took = walk(arrays)
                mine = [(int(p), int(c), KINDS[k], int(a), int(b)) for p, c, k, a, b in zip(*edges)]
                assert mine == walked, f"{name} n={n}: the core's edges are not the walk's"
                line += f"{took:>9.3f}{n / took:>10,.0f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
