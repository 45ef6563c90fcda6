"""Time the calibration suite and compare with the published latencies (docs/timing.md "Calibration").

    .venv/bin/python tools/validate_timing.py                 # every case of the table
    .venv/bin/python tools/validate_timing.py --only mamba_v1 --only matmul_optimized
    .venv/bin/python tools/validate_timing.py --set held_out -D dma_latency_ns=2000

The cases are the entries of the one table of published latencies, tests/nki/published_latencies.toml,
that name a calibration case (`calibrate = "module:case"`, tools/calibrate/). Each is traced, built and
timed with placeholder arguments (timing-only, as `nki.benchmark` times a kernel) under the default
configuration or the one given. Printed per case: its set (fit or held_out), the published latency,
ncsim's, their ratio and the verdict: ok when the ratio is within the set's tolerance (15% for the fit
set, 25% held out: the targets of issue 15), MISS otherwise (for an entry that names an `instruction`, the
published figure and ncsim's are that one instruction's duration); then the ratios of the matmul steps and of
mamba v1 -> v2 against the published ones; for the cases whose entry has a `profile` (the engine's
active time and event count that the tutorial's profile screenshot shows, neuron-profile's Selection
Summary of the kernel's core period), that engine's busy time and instruction count in ncsim beside
the chip's, with their ratio and verdict under the same tolerance, so that a total that agrees for the
wrong reason shows; and a summary line per set. The exit status is 0 whether or not cases miss (this
is a report, not a test); 2 for a bad argument.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]

import numpy as np
from calibrate import TABLE, case, read_table

from ncsim import isa, nki
from ncsim.config import load_config
from ncsim.errors import ConfigError
from ncsim.runtime.report import Report

TOLERANCE = {"fit": 0.15, "held_out": 0.25}
# Ratios between cases that the tutorials report as steps (name, numerator case, denominator case).
STEPS = (("matmul tiled / hoisted", "matmul_tiled", "matmul_hoisted"),
         ("matmul hoisted / block_free", "matmul_hoisted", "matmul_block_free"),
         ("matmul block_free / optimized", "matmul_block_free", "matmul_optimized"),
         ("mamba v1 / v2, 4096 channels", "mamba_v1_4096", "mamba_v2_4096"))


def cases(table: dict, only: list[str], which: str | None) -> dict[str, dict]:
    chosen = {name: e for name, e in table.items() if "calibrate" in e}
    unknown = [n for n in only if n not in chosen]
    if unknown:
        raise SystemExit(f"validate_timing: no calibration case {', '.join(unknown)} in {TABLE.relative_to(ROOT)}"
                         f" (cases: {', '.join(chosen)})")
    return {n: e for n, e in chosen.items() if (not only or n in only) and (which is None or e["set"] == which)}


def simulate(entry: dict, config) -> tuple[float, int, str, Report]:
    """The case's simulated latency (µs), its instruction count, what bounds it, and its report. For an
    entry that names an `instruction` (the published figure is one instruction's duration), the
    latency is that instruction's time in the run, end - start."""
    kernel, args = case(entry["calibrate"])()
    run = nki.simulate(kernel, args, {}, values=False, config=config)
    latency = run.latency_us
    if "instruction" in entry:
        t = run.result.timing
        ks = np.flatnonzero(t.opcode == isa.BY_MNEMONIC[entry["instruction"]].opcode)
        if len(ks) != 1:
            raise SystemExit(f"validate_timing: {entry['calibrate']} has {len(ks)} {entry['instruction']}"
                             " instructions; an instruction case has exactly one")
        latency = t.ns(int(t.end[ks[0]] - t.start[ks[0]])) / 1000
    return latency, run.result.instructions, run.report.verdict.text, run.report


def activity(name: str, entry: dict, report: Report) -> tuple[str, bool]:
    """The line comparing the profiled engine's active time on the chip with its busy time in ncsim,
    and whether their ratio (ncsim / chip) is within the case's tolerance."""
    prof = entry["profile"]
    engine = report.engine(prof["engine"])
    busy_us = report.ns(engine.busy) / 1000
    chip_us, events = float(prof["active_us"]), int(prof["events"])
    ratio = busy_us / chip_us
    each = (f"chip {_us(chip_us)} in {events} events ({1000 * chip_us / events:.0f} ns each), ncsim"
            f" {_us(busy_us)} in {engine.instructions} instructions"
            f" ({1000 * busy_us / max(engine.instructions, 1):.0f} ns each)")
    ok = verdict(ratio, TOLERANCE[entry["set"]])
    overlap = f"; the chip's events sum to {prof['sum_us'] / chip_us:.2f}x its active time" if "sum_us" in prof else ""
    return f"profile {name}: {prof['engine']} active {each}, ratio {ratio:.3f} {ok}{overlap}", ok == "ok"


def verdict(ratio: float, tolerance: float) -> str:
    return "ok" if abs(ratio - 1) <= tolerance else "MISS"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", default=[], help="a case of the table (repeatable)")
    ap.add_argument("--set", choices=sorted(TOLERANCE), default=None, help="only the fit or the held-out cases")
    ap.add_argument("--config", default=None, help="a TOML file of parameters (ncsim config)")
    ap.add_argument("-D", dest="sets", action="append", default=[], help="NAME=VALUE: a parameter of ncsim config")
    ap.add_argument("--why", action="store_true", help="print ncsim's verdict (what bounds the run) per case")
    args = ap.parse_args(argv)
    table = read_table()
    chosen = cases(table, args.only, args.set)
    try:
        config = load_config(args.config, args.sets)
    except ConfigError as e:
        print(f"validate_timing: {e}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    width = max([20, *map(len, chosen)])
    print(f"{'case':<{width}} {'set':<8} {'published':>11} {'ncsim':>11} {'ratio':>6}  verdict  instructions")
    got: dict[str, float] = {}
    profiles: list[tuple[str, bool]] = []
    for name, entry in chosen.items():
        sim, count, why, report = simulate(entry, config)
        got[name] = sim
        if "profile" in entry:
            profiles.append(activity(name, entry, report))
        pub = float(entry["published_us"])
        ratio = sim / pub
        print(f"{name:<{width}} {entry['set']:<8} {_us(pub):>11} {_us(sim):>11} {ratio:6.3f}  "
              f"{verdict(ratio, TOLERANCE[entry['set']]):<7}  {count}", flush=True)
        if args.why:
            print(f"    {why}")
    for label, a, b in STEPS:
        if a in got and b in got:
            pub = table[a]["published_us"] / table[b]["published_us"]
            sim = got[a] / got[b]
            print(f"step {label}: published {pub:.2f}x, ncsim {sim:.2f}x, ratio {sim / pub:.3f}"
                  f" {verdict(sim / pub, TOLERANCE['fit'])}")
    for line, _ in profiles:
        print(line)
    for which, tol in TOLERANCE.items():
        names = [n for n in got if chosen[n]["set"] == which]
        if not names:
            continue
        ratios = [got[n] / chosen[n]["published_us"] for n in names]
        within = sum(abs(r - 1) <= tol for r in ratios)
        worst = max(names, key=lambda n: abs(got[n] / chosen[n]["published_us"] - 1))
        print(f"summary {which}: {within}/{len(names)} within {tol:.0%}; worst {worst}"
              f" {got[worst] / chosen[worst]['published_us']:.3f}; mean |ratio - 1|"
              f" {sum(abs(r - 1) for r in ratios) / len(ratios):.3f}")
    if profiles:
        print(f"summary profiles: {sum(ok for _, ok in profiles)}/{len(profiles)} within their set's tolerance"
              f" of the chip's active time")
    print(f"({len(got)} cases in {time.perf_counter() - start:.1f} s)")
    return 0


def _us(us: float) -> str:
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.2f} us"


if __name__ == "__main__":
    sys.exit(main())
