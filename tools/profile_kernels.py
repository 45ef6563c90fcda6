"""Where the numba kernels of the timing-only path spend their time, by source line.

    .venv/bin/python tools/profile_kernels.py                        # bench_pipeline's 10^5 program, 5 passes
    .venv/bin/python tools/profile_kernels.py --size 1e6 --passes 3 --top 4 --lines 25
    .venv/bin/python tools/profile_kernels.py --path asm                 # the assembler instead

What it measures: load (the object file mapped and decoded), verify, timing, races and report of the
program tools/bench_pipeline.py generates (`--path timing`, the default), or its assembly into the
decoded program (`--path asm`: what `ncsim run prog.s` does first), `--passes` times in one process
after a first pass that is not counted (numba compiles then). Printed: each kernel's share of the samples taken during the
counted passes, and for the `--top` kernels their `--lines` hottest source lines.

How: the script runs itself again under `perf record -e cpu-clock -k CLOCK_MONOTONIC` with
NUMBA_DEBUGINFO=1 and a NUMBA_CACHE_DIR of its own (so every kernel is compiled afresh, with line
tables; numba's optimisation is the same with or without them). After the passes, the child asks
each compiled kernel of ncsim (every numba dispatcher in ncsim's modules, and so the kernels they
call) for its address and object code. perf's sampled addresses that fall inside a kernel are
turned into source lines by addr2line on that object code. Lines that LLVM merged or hoisted show
as the line it kept (or "?"), so read a line's share as the cost of the code around it.

Needs `perf` (linux-perf; sampling one's own process is allowed at kernel.perf_event_paranoid <= 2)
and binutils' `addr2line` and `objdump`; says so and exits 2 without them. The compilation with
line tables takes a minute or two. It is a developer's tool: nothing in `make test` runs it.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]


def child(size: int, passes: int, out: Path, path: str = "timing") -> None:
    """The measured process: the passes, their time window, then each compiled kernel's code."""
    import bench_pipeline
    import numba

    from ncsim.asm.assembler import Assembler
    from ncsim.asm.elf import write_program
    from ncsim.config import DEFAULT
    from ncsim.runtime.heap import keep_freed_memory
    from ncsim.runtime.races import find_races
    from ncsim.runtime.report import report
    from ncsim.runtime.run import load_program
    from ncsim.runtime.timing import time_program
    from ncsim.runtime.verify import verify_program

    keep_freed_memory()  # as the ncsim command runs
    text = bench_pipeline.program_text(bench_pipeline.blocks_for(size))
    obj = out / "program.o"
    write_program(Assembler(DEFAULT).assemble_program(text, "bench.s"), obj)

    def one_pass() -> int:
        if path == "asm":
            return Assembler(DEFAULT).assemble_program(text, "bench.s").count
        prog = load_program(str(obj), DEFAULT)[0]
        verify_program(prog, DEFAULT)
        timed = time_program(prog, DEFAULT, "bench.s")
        find_races(timed)
        report(timed).format()
        return prog.count

    count = one_pass()  # compiles every kernel: not counted
    start = time.monotonic()
    for _ in range(passes):
        one_pass()
    window = (start, time.monotonic())
    kernels = []
    for module_name, module in sorted(sys.modules.items()):
        if not module_name.startswith("ncsim") or module is None:
            continue
        for attr, value in sorted(vars(module).items()):
            if not isinstance(value, numba.core.registry.CPUDispatcher) or value.__module__ != module_name:
                continue
            for i, cres in enumerate(value.overloads.values()):
                name = cres.fndesc.llvm_func_name
                try:
                    code = cres.library.serialize_using_object_code()[2]
                except RuntimeError:  # loaded from a cache: no object code to read lines from
                    continue
                obj_path = out / f"{module_name}.{attr}.{i}.o"
                obj_path.write_bytes(code[0] if isinstance(code, tuple) else code)
                kernels.append({"kernel": f"{module_name}:{attr}", "symbol": name, "object": str(obj_path),
                                "address": cres.library.get_pointer_to_function(name)})
    (out / "kernels.json").write_text(json.dumps({"window": window, "count": count, "kernels": kernels}))


def symbol_place(obj: str, symbol: str) -> tuple[str, int, int] | None:
    """(section, offset in it, size) of `symbol` in the object file `obj` (objdump's symbol table)."""
    for line in subprocess.run(["objdump", "-t", obj], check=True, capture_output=True, text=True).stdout.splitlines():
        parts = line.split()
        if parts and parts[-1] == symbol and len(parts) >= 5:
            return parts[-3], int(parts[0], 16), int(parts[-2], 16)
    return None


def source_line(place: str) -> str:
    """The text of the source line addr2line names ("file:line"), shortened."""
    m = re.match(r"(.*):(\d+)", place)
    if not m or not Path(m.group(1)).is_file():
        return ""
    lines = Path(m.group(1)).read_text().splitlines()
    n = int(m.group(2))
    return lines[n - 1].strip()[:90] if 0 < n <= len(lines) else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=float, default=1e5, help="instructions, about (default 1e5)")
    parser.add_argument("--passes", type=int, default=5, help="counted passes (default 5)")
    parser.add_argument("--top", type=int, default=3, help="kernels whose lines are shown (default 3)")
    parser.add_argument("--lines", type=int, default=15, help="lines shown per kernel (default 15)")
    parser.add_argument("--path", choices=("timing", "asm"), default="timing",
                        help="what is profiled: the timing-only path of the object (default) or the assembly")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(int(args.size), args.passes, args.child, args.path)
        return
    missing = [tool for tool in ("perf", "addr2line", "objdump") if shutil.which(tool) is None]
    if missing:
        sys.exit(f"profile_kernels: needs {', '.join(missing)} (linux-perf, binutils), which this machine lacks")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        env = dict(os.environ, NUMBA_DEBUGINFO="1", NUMBA_CACHE_DIR=str(out / "cache"))
        data = out / "perf.data"
        cmd = ["perf", "record", "-q", "-e", "cpu-clock", "-F", "2000", "-k", "CLOCK_MONOTONIC", "-o", str(data),
               "--", sys.executable, __file__, "--child", str(out), "--size", str(args.size),
               "--passes", str(args.passes), "--path", args.path]
        print(f"profile_kernels: compiling ncsim's kernels with line tables, then {args.passes} passes of"
              f" about {args.size:.0e} instructions under perf ...", file=sys.stderr, flush=True)
        done = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True)
        if done.returncode != 0 or not (out / "kernels.json").is_file():
            sys.exit(f"profile_kernels: the profiled run failed ({done.returncode}):\n{done.stderr[-2000:]}")
        info = json.loads((out / "kernels.json").read_text())
        lo, hi = info["window"]
        samples = []
        script = subprocess.run(["perf", "script", "-i", str(data), "-F", "time,ip"], check=True, capture_output=True,
                                text=True)
        for line in script.stdout.splitlines():
            parts = line.replace(":", " ").split()
            if len(parts) >= 2 and lo <= float(parts[0]) <= hi:
                samples.append(int(parts[1], 16))
        if not samples:
            sys.exit("profile_kernels: perf took no samples in the counted passes (perf_event_paranoid too high?)")
        ranges = []
        for k in info["kernels"]:
            place = symbol_place(k["object"], k["symbol"])
            if place is not None:
                ranges.append((k, *place))
        hits: dict[str, list[int]] = collections.defaultdict(list)
        for ip in samples:
            for k, _section, _offset, size in ranges:
                if 0 <= ip - k["address"] < size:
                    hits[k["kernel"]].append(ip - k["address"])
                    break
        total = len(samples)
        inside = sum(len(v) for v in hits.values())
        print(f"{info['count']:,} instructions, {args.passes} passes: {total:,} samples in the passes,"
              f" {100 * inside / total:.0f}% of them in ncsim's kernels (the rest: Python, numpy, the kernel)")
        ordered = sorted(hits.items(), key=lambda kv: -len(kv[1]))
        for name, offsets in ordered:
            print(f"  {100 * len(offsets) / total:5.1f}%  {name}")
        for name, offsets in ordered[:args.top]:
            k, section, offset, _size = next(r for r in ranges if r[0]["kernel"] == name)
            distinct = sorted(set(offsets))
            found = subprocess.run(["addr2line", "-e", k["object"], "-j", section] + [hex(o + offset) for o in distinct],
                                   check=True, capture_output=True, text=True).stdout.splitlines()
            place_of = dict(zip(distinct, found))
            counts = collections.Counter(place_of.get(o, "?") for o in offsets)
            print(f"\n{name}: {len(offsets):,} samples, its hottest lines")
            for place, c in counts.most_common(args.lines):
                short = re.sub(r".*/ncsim/", "ncsim/", place)
                print(f"  {100 * c / len(offsets):5.1f}%  {short:32s} {source_line(place)}")


if __name__ == "__main__":
    main()
