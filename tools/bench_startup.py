"""The fixed costs of the `ncsim` command, side by side: wall time of whole processes, best of N.

    .venv/bin/python tools/bench_startup.py            # best of 7
    .venv/bin/python tools/bench_startup.py -n 15
    .venv/bin/python tools/bench_startup.py --tree /tmp/before   # also a copy of the tree, side by side
    .venv/bin/python tools/bench_startup.py -n 5 --object-size 1e6 --tree /tmp/before

Runs, alternating (one of each per round, so a busy moment of the machine hits them all alike):

    python -c 'import numba'                       the floor: the interpreter and numba
    ncsim --help                                   the command line alone
    ncsim isa                                      the instruction table
    ncsim run programs/giou.s --trace ... --out ...  a whole run, warm (outputs and trace in a temp dir)

and, with --object-size N, `ncsim run OBJ --timing-only` of an object of about N instructions (the
program tools/bench_pipeline.py generates, assembled once by `ncsim asm` beforehand: what a user's
timing-only run of a large object costs, whole process, start-up and the file's load included);
and prints each one's best and median wall time and the difference of each best from the floor, and
the same of the best CPU time (user + system: less sensitive than wall time to other work on a
shared machine, though not free of it). The
numba cache must be warm (`ncsim warmup`): the first, unmeasured round warms it if it is not.

The commands run as a user's do, with Python's bytecode cache: if PYTHONDONTWRITEBYTECODE is set
here, it is left out of their environment (and the output says so), since without it every stale
or missing .pyc of ncsim is compiled again at each start (about 0.1 s for a run).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = Path(sys.executable)
NCSIM = PYTHON.with_name("ncsim")


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
# as the `ncsim` script does (ncsim.console: the garbage collector held off while the command imports;
# a tree from before it has only ncsim.cli)
FROM_TREE = ("import sys\ntry:\n    from ncsim.console import main\nexcept ImportError:\n    from ncsim.cli import main\n"
             "sys.argv[0] = 'ncsim'\nmain()")


def commands(tmp: Path, trees: list[Path], obj: Path | None = None) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Each command's argv and environment, the floor first; with `obj`, the timing-only runs of it."""
    ncsim = [str(NCSIM)] if NCSIM.exists() else [str(PYTHON), "-c", FROM_TREE]
    program = ROOT / "programs" / "giou.s"

    def run_args(tag: str) -> list[str]:
        return ["run", str(program), "--trace", str(tmp / f"giou{tag}.trace.json"), "--out", str(tmp / f"giou{tag}.npz")]

    cmds = {
        "python -c 'import numba'": ([str(PYTHON), "-c", "import numba"], ENV),
        "ncsim --help": ([*ncsim, "--help"], ENV),
        "ncsim isa": ([*ncsim, "isa"], ENV),
        "ncsim run giou.s --trace": ([*ncsim, *run_args("")], ENV),
    }
    # another copy of ncsim (say, before a change), first on the path
    envs = [dict(ENV, PYTHONPATH=os.pathsep.join([str(tree), *filter(None, [ENV.get("PYTHONPATH")])])) for tree in trees]
    for i, (tree, env) in enumerate(zip(trees, envs)):
        cmds[f"  the same from {tree.name}"] = ([str(PYTHON), "-c", FROM_TREE, *run_args(str(i))], env)
    if obj is not None:
        cmds[f"ncsim run {obj.name} --timing-only"] = ([*ncsim, "run", str(obj), "--timing-only"], ENV)
        for tree, env in zip(trees, envs):
            cmds[f"  {obj.name} from {tree.name}"] = ([str(PYTHON), "-c", FROM_TREE, "run", str(obj), "--timing-only"],
                                                      env)
    return cmds


def make_object(tmp: Path, size: int) -> Path:
    """The object of tools/bench_pipeline.py's program of about `size` instructions, assembled by `ncsim asm`."""
    sys.path.insert(0, str(ROOT / "tools"))
    import bench_pipeline

    source = tmp / f"bench_{size}.s"
    source.write_text(bench_pipeline.program_text(bench_pipeline.blocks_for(size)))
    out = source.with_suffix(".o")
    ncsim = [str(NCSIM)] if NCSIM.exists() else [str(PYTHON), "-c", FROM_TREE]
    once([*ncsim, "asm", "-q", str(source), "-o", str(out)], ENV, tmp)
    return out


def once(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one command, run in `cwd` (not the checkout:
    `python -c` puts the current folder first on sys.path, which would shadow a --tree's ncsim)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False, env=env,
                          cwd=cwd)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=7, help="rounds (default 7)")
    parser.add_argument("--tree", type=Path, action="append", default=[], metavar="DIR",
                        help="also time the run with the ncsim package of DIR (a copy of the tree, say before a"
                             " change) first on PYTHONPATH; repeatable")
    parser.add_argument("--object-size", type=float, default=None, metavar="N",
                        help="also time `ncsim run OBJ --timing-only` of an object of about N instructions (1e6:"
                             " 201 MB, assembled once first)")
    args = parser.parse_args()
    for tree in args.tree:
        if not (tree / "ncsim" / "cli.py").is_file():
            sys.exit(f"--tree {tree}: no ncsim/cli.py there")
    with tempfile.TemporaryDirectory() as tmp:
        obj = make_object(Path(tmp), int(args.object_size)) if args.object_size else None
        cmds = commands(Path(tmp), [t.resolve() for t in args.tree], obj)
        for argv, env in cmds.values():  # warm the OS file cache and numba's
            once(argv, env, Path(tmp))
        times: dict[str, list[float]] = {name: [] for name in cmds}
        cpu: dict[str, list[float]] = {name: [] for name in cmds}
        for _ in range(args.n):
            for name, (argv, env) in cmds.items():
                wall, used = once(argv, env, Path(tmp))
                times[name].append(wall)
                cpu[name].append(used)
    floor_name = next(iter(cmds))
    floor, cpu_floor = min(times[floor_name]), min(cpu[floor_name])
    print(f"best of {args.n}, alternating; python {sys.version.split()[0]}; CPU = user + system time of the process")
    if "PYTHONDONTWRITEBYTECODE" in os.environ:
        print("(PYTHONDONTWRITEBYTECODE is set here: left out for the commands, which keep their .pyc files)")
    width = max(32, *(len(name) for name in times))
    print(f"{'command':{width}s} {'best':>8s} {'median':>8s} {'best - floor':>13s} {'best CPU':>9s} {'CPU - floor':>12s}")
    for name, ts in times.items():
        diff = "" if name == floor_name else f"{min(ts) - floor:+.3f} s"
        cpu_diff = "" if name == floor_name else f"{min(cpu[name]) - cpu_floor:+.3f} s"
        print(f"{name:{width}s} {min(ts):7.3f}s {statistics.median(ts):7.3f}s {diff:>13s} {min(cpu[name]):8.3f}s"
              f" {cpu_diff:>12s}")

if __name__ == "__main__":
    main()
