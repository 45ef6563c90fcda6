"""The fixed costs of the `ncsim` command, side by side: wall time of whole processes, best of N.

    .venv/bin/python tools/bench_startup.py            # best of 7
    .venv/bin/python tools/bench_startup.py -n 15

Runs, alternating (one of each per round, so a busy moment of the machine hits them all alike):

    python -c 'import numba'                       the floor: the interpreter and numba
    ncsim --help                                   the command line alone
    ncsim isa                                      the instruction table
    ncsim run programs/giou.s --trace ... --out ...  a whole run, warm (outputs and trace in a temp dir)

and prints each one's best and median time and the difference of each best from the floor. The
numba cache must be warm (`ncsim warmup`): the first, unmeasured round warms it if it is not.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = Path(sys.executable)
NCSIM = PYTHON.with_name("ncsim")


def commands(tmp: Path) -> dict[str, list[str]]:
    ncsim = [str(NCSIM)] if NCSIM.exists() else [str(PYTHON), "-c", "from ncsim.cli import main; main()"]
    program = ROOT / "programs" / "giou.s"
    return {
        "python -c 'import numba'": [str(PYTHON), "-c", "import numba"],
        "ncsim --help": [*ncsim, "--help"],
        "ncsim isa": [*ncsim, "isa"],
        "ncsim run giou.s --trace": [*ncsim, "run", str(program), "--trace", str(tmp / "giou.trace.json"),
                                     "--out", str(tmp / "giou.npz")],
    }


def once(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=7, help="rounds (default 7)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cmds = commands(Path(tmp))
        for argv in cmds.values():  # warm the OS file cache and numba's
            once(argv)
        times: dict[str, list[float]] = {name: [] for name in cmds}
        for _ in range(args.n):
            for name, argv in cmds.items():
                times[name].append(once(argv))
    floor_name = next(iter(cmds))
    floor = min(times[floor_name])
    print(f"best of {args.n}, alternating; python {sys.version.split()[0]}")
    print(f"{'command':32s} {'best':>8s} {'median':>8s} {'best - floor':>13s}")
    for name, ts in times.items():
        diff = "" if name == floor_name else f"{min(ts) - floor:+.3f} s"
        print(f"{name:32s} {min(ts):7.3f}s {statistics.median(ts):7.3f}s {diff:>13s}")


if __name__ == "__main__":
    main()
