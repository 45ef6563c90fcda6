"""Benchmark of the whole pipeline, text to trace, at 10^4, 10^5 and 10^6 instructions.

    .venv/bin/python tools/bench_pipeline.py                      # 1e4, 1e5 and 1e6, each in its own process
    .venv/bin/python tools/bench_pipeline.py --sizes 1e4,1e5      # chosen sizes
    .venv/bin/python tools/bench_pipeline.py --size 1e5           # one size, in this process
    .venv/bin/python tools/bench_pipeline.py --skip trace --skip values
    .venv/bin/python tools/bench_pipeline.py --sizes 1e6 --keep-freed  # memory kept, as the ncsim command

What it generates. One `.s` program per size, as text (written to a temporary directory), in the
default `.sync auto` mode, so the assembler finds the dependencies and inserts the semaphores. After
a prologue that loads A^T into SBUF (`K / 128` DMAs), an outer `.for i in 0..BLOCKS` repeats a block
of two nested-loop parts:
  - a stream over all engines, `.for j in 0..32`: a DMA load HBM->SBUF into the rotating slot
    `xs[:, j % 2, :]`, Vector `tensor_tensor` (x * x), Scalar `activation` (gelu), GpSimd `iota` and
    an i32 `tensor_tensor ... engine=gpsimd`, Vector `tensor_copy` (i32 -> f32) and `tensor_tensor`,
    and a DMA store SBUF->HBM issued by GpSimd from the rotating slot `os[:, j % 2, :]`;
  - a tiled bf16 matmul like programs/matmul.s at M = 512, N = 2048, K = 2048,
    `.for m` / `.for n` / `.for k`: B slices load into `bt[:, k % 2, :]`, Tensor `nc_matmul` with
    `accumulate=k > 0` into the PSUM bank `acc[:, n % 2, :]`, Vector copies the bank out, Scalar
    applies relu in SBUF, and GpSimd stores the tile.
A block is 816 instructions (256 + 16 x 35) and the prologue 16; BLOCKS is chosen so that the count
lands nearest each size (12, 123, 1225 blocks: 9,808, 100,384 and 999,616 instructions); the exact
count is printed. Tiles: 38 KiB of SBUF per partition (of 192 KiB, 176 usable), 4 KiB of PSUM
(of 16 KiB).

--skip takes asm, write, load, verify, values, timing, races, report or trace (a phase whose input was skipped
is skipped too; with load skipped the later phases take the assembled object). --values-max
(default 20,000) is the largest program the values phase runs.

Phases, one row each, per size:
  asm to program  text -> the decoded program (`Assembler(config).assemble_program`, what `ncsim run
              prog.s` does): parsing, unrolling, placement, automatic synchronisation, and the words
              made and read a block at a time (the program is dropped after it is measured)
  assemble    text -> ObjectFile (`Assembler(config).assemble`): the same, the words made whole for
              the object
  write ELF   ObjectFile -> an ELF file in the temporary directory (`write_elf_file`, what `ncsim asm`
              does)
  load        the ELF file -> the decoded program, which every later phase reads, as `ncsim run k.o`
              loads it (`ncsim.runtime.run.load_program`: the file mapped into memory by
              `elf.mapped_object`, its ObjectFile read and decoded by `Program.from_object`; the
              file was just written, so its pages are in the system's file cache, as after `ncsim asm`)
  verify      the decoded program held to the configuration's hardware rules (`verify_program`), as
              a run of an object does before it times anything
  values      the functional simulation, `ncsim.run(obj, values=True, timing=False, check=False)`:
              seeded random inputs, every instruction's values, the outputs read back; only up to
              --values-max instructions (by default 10^4 only; larger sizes print "skipped")
  timing      `time_program(program, config, name)` on the decoded program
  races       `find_races(timing_result)` (any race found is printed: under .sync auto it would be an
              assembler bug)
  report      `report(timing_result).format()`
  trace       `write_trace(timing_result, path)` to a file in the temporary directory (deleted)
and a derived row, "timing-only path" = load + verify + timing + races + report (what `ncsim run
--timing-only` does to an object file), its seconds summed and its memory the largest of its phases'.
(Until issue 10's mapping session the load phase read the ELF's bytes from memory, not from the file,
and the path left verify out: what `ncsim run k.o` does besides was not measured.)

Above the sizes, the machine's pace: seconds for a fixed 10^7-iteration Python loop (best of 3), to
compare between runs before their figures (this machine has run the same code 2.5-3.5x apart on
different days); and its memory pace: seconds to touch 256 MiB of fresh 4 KiB pages, one write per
page (65,536 page faults, best of 3). The phases from load on are bound by memory more than by the
interpreter: on 2026-11-28 a fresh page cost about 2.7 us on this virtual machine, and one pass of
the timing-only path took about 112,000 of them (a third of its time) at a Python pace of 0.38 s.

Columns: host s = wall seconds of the phase (time.perf_counter, one run, on a machine that may be
busy); instr/s = instructions / host s; peak MiB = peak memory growth of the phase (below); B/instr
= that peak / instructions; faults = the page faults of the process during the phase (getrusage's
ru_minflt: pages it took new, each costing what the memory pace above measures); target = the issue's target for that row, printed as a reference beside
the measurement with "met" or "NOT met" (nothing is asserted; the timing-only target is judged at
10^6 only). Targets: assembler >= 500,000 instructions/s on unrolled loops and <= 200 bytes per
instruction at its peak (judged where it assembles into the decoded program: an object's own words
and line tables are 193 bytes per instruction of this program, its encoding a fixed layout); timing-only path >= 2,000,000 instructions/s on 10^6; trace >= 200,000
instructions/s.

Memory: peak RSS growth per phase, from the kernel's own accounting (/proc/self/status), so that
numba's allocations count as well as Python objects and numpy buffers (tracemalloc would miss the
former). Before each phase the garbage is collected, freed heap memory is given back to the system
(glibc's malloc_trim(0), so that memory an earlier phase freed but the process kept does not hide
this phase's growth), the RSS high-water mark (VmHWM) is reset to the current RSS by writing 5 to
/proc/self/clear_refs, and the current RSS (VmRSS) is noted; after the phase, VmHWM minus that RSS
is its peak growth: all it held at its worst moment over what was live before it (its result
included). Where /proc/self/clear_refs cannot be written (not Linux), the growth of getrusage's
ru_maxrss is used instead, which only shows a phase that goes above every earlier peak; the header
says which. Each size runs in a fresh subprocess so that one size's peak cannot hide another's; the
child's RSS before its first phase is printed too. RSS counts the pages of a file mapped into the
process: load's peak includes the object file's while it is mapped (201 MB at 10^6), pages of the
system's file cache that the process shares rather than takes new (its page faults do not count
them: about 440 for the whole file).

Huge pages: as the `ncsim` command does (ncsim.runtime.heap.keep_freed_memory), numpy gives no
huge-page advice for its large arrays in the measuring process (where the kernel compacts memory to
find huge pages, first touching an array can cost more than filling it); --huge-pages keeps numpy's
default, to compare. glibc's malloc is left as it is (the memory measurement trims it per phase),
as a program that imports ncsim has it.

--keep-freed measures as the `ncsim` command runs: glibc keeps what each phase frees for the next
(keep_freed_memory: no mmap for large blocks, no trimming; the bench does not trim either), so a
phase reuses pages an earlier one took instead of taking them new (on the 10^6 program the assembler
takes 47,000 fresh pages instead of 129,000). A phase's peak growth then leaves out the memory it
reused, so the process's own peak RSS is printed too: what the whole pipeline held at its worst.

Warm-up: before measuring, each process runs every phase once on a one-block program (832
instructions), so numba's compilation (or the load of its cache) and first imports are not counted;
its time is printed apart.

Finally a summary across sizes: per phase the host time per instruction (ns) at each size and its
growth from one size to the next, as the ratio of time per instruction: 1.00 is linear; n log n
would give log(n2) / log(n1) (printed: about 1.25 from 1e4 to 1e5 and 1.20 from 1e5 to 1e6);
quadratic would give 10. The same for bytes per instruction at the peak.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The program's shape (see the docstring).
J = 32  # iterations of the all-engines stream per block (8 instructions each)
R = 16  # 128-row tiles of x and y in HBM, reused cyclically
MB, NB, KS = 4, 4, 16  # the matmul's M / 128, N / 512 and K / 128
PROLOGUE = KS
BLOCK = 8 * J + MB * NB * (2 * KS + 3)

PHASES = ("asm to program", "assemble", "write ELF", "load", "verify", "values", "timing", "races", "report",
          "trace")
SKIPPABLE = {p.split()[0].lower(): p for p in PHASES if p != "assemble"}  # --skip names: asm, write, load, ...
TIMING_ONLY = ("load", "verify", "timing", "races", "report")
TARGETS = {  # row: (min instructions/s, max bytes per instruction, text)
    "asm to program": (500_000, 200, ">= 500,000/s, <= 200 B/instr"),
    "assemble": (500_000, None, ">= 500,000/s"),
    "timing-only path": (2_000_000, None, ">= 2,000,000/s on 10^6"),
    "trace": (200_000, None, ">= 200,000/s"),
}


def program_text(blocks: int) -> str:
    """The benchmark program of `blocks` blocks: PROLOGUE + blocks * BLOCK instructions."""
    return f"""\
# generated by tools/bench_pipeline.py: {blocks} blocks of {BLOCK} instructions after {PROLOGUE}
.kernel bench_pipeline
.const BLOCKS = {blocks}
.const J = {J}
.const R = {R}
.const M = {MB * 128}
.const N = {NB * 512}
.const K = {KS * 128}

.hbm x   f32[R * 128, 512] in
.hbm y   f32[R * 128, 512] out
.hbm a_t bf16[K, M] in
.hbm b   bf16[K, N] in
.hbm c   f32[M, N] out

.sbuf xs   f32[128, 2, 512]          # two slots of x tiles
.sbuf w    f32[128, 512]
.sbuf v    f32[128, 512]
.sbuf idx  i32[128, 512]
.sbuf idxf f32[128, 512]
.sbuf os   f32[128, 2, 512]          # two slots of y tiles
.sbuf at   bf16[128, K / 128, M]     # all of A^T: K slices of [128, M]
.sbuf bt   bf16[128, 2, 512]         # two slots of B slices
.sbuf ct   f32[128, 2, 512]          # two slots of C tiles
.psum acc  f32[128, 2, 512]          # two PSUM banks

.for k in 0..K / 128
  dma_copy at[:, k, :], a_t[k*128 : k*128 + 128, :]
.end
.for i in 0..BLOCKS
.for j in 0..J
  dma_copy      xs[:, j % 2, :], x[((i*J + j) % R) * 128 : ((i*J + j) % R) * 128 + 128, :]
  tensor_tensor w, xs[:, j % 2, :], xs[:, j % 2, :], multiply
  activation    v, gelu, w
  iota          idx, [[1, 512]], j
  tensor_tensor idx, idx, idx, add, engine=gpsimd
  tensor_copy   idxf, idx
  tensor_tensor os[:, j % 2, :], v, idxf, add
  dma_copy      y[((i*J + j) % R) * 128 : ((i*J + j) % R) * 128 + 128, :], os[:, j % 2, :], engine=gpsimd
.end
.for m in 0..M / 128
.for n in 0..N / 512
.for k in 0..K / 128
  dma_copy  bt[:, k % 2, :], b[k*128 : k*128 + 128, n*512 : n*512 + 512]
  nc_matmul acc[:, n % 2, :], at[:, k, m*128 : m*128 + 128], bt[:, k % 2, :], accumulate=k > 0
.end
  tensor_copy ct[:, n % 2, :], acc[:, n % 2, :]
  activation  ct[:, n % 2, :], relu, ct[:, n % 2, :]
  dma_copy    c[m*128 : m*128 + 128, n*512 : n*512 + 512], ct[:, n % 2, :], engine=gpsimd
.end
.end
.end
"""


def blocks_for(target: int) -> int:
    return max(1, round((target - PROLOGUE) / BLOCK))


# --------------------------------------------------------------------------- memory

def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _maxrss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024


def _libc() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


class PeakMemory:
    """Peak RSS growth of a stretch of code (see the module docstring); with `keep`, no trim first."""

    def __init__(self, keep: bool = False) -> None:
        self.keep = keep
        self.top = 0  # the largest VmHWM seen: the process's peak RSS over the phases measured
        try:
            self._reset()
            _status_kib("VmHWM")
            self.exact = True
            self.method = (f"peak RSS growth (gc, {'no malloc_trim: freed memory kept' if keep else 'malloc_trim'},"
                           " VmHWM reset by /proc/self/clear_refs; VmHWM after minus VmRSS before)")
        except OSError:
            self.exact = False
            self.method = "growth of getrusage ru_maxrss (a phase below an earlier peak shows as 0)"
        self.base = 0

    @staticmethod
    def _trim() -> None:
        """Give freed heap memory back to the system (glibc), so that a phase's growth is not hidden
        by memory an earlier phase freed but the process kept."""
        if _LIBC is not None:
            _LIBC.malloc_trim(0)

    @staticmethod
    def _reset() -> None:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")

    def rss(self) -> int:
        return _status_kib("VmRSS") * 1024 if self.exact else _maxrss_bytes()

    def start(self) -> None:
        gc.collect()
        if not self.keep:
            self._trim()
        if self.exact:
            self._reset()
            self.base = _status_kib("VmRSS") * 1024
        else:
            self.base = _maxrss_bytes()

    def peak(self) -> int:
        now = _status_kib("VmHWM") * 1024 if self.exact else _maxrss_bytes()
        self.top = max(self.top, now)
        return max(0, now - self.base)


# --------------------------------------------------------------------------- one size

class Skipped(Exception):
    pass


def run_pipeline(text: str, tmp: Path, skip: set[str], values_max: int,
                 memory: PeakMemory | None) -> tuple[int, dict[str, dict[str, Any]], dict[str, Any]]:
    """Run every phase on `text`; (instruction count, {phase: measurement}, notes)."""
    import ncsim
    from ncsim.asm.assembler import Assembler
    from ncsim.asm.elf import write_elf_file
    from ncsim.config import DEFAULT
    from ncsim.program import Program
    from ncsim.runtime.races import find_races
    from ncsim.runtime.report import report
    from ncsim.runtime.run import load_program
    from ncsim.runtime.timing import time_program
    from ncsim.runtime.trace import write_trace
    from ncsim.runtime.verify import verify_program

    rows: dict[str, dict[str, Any]] = {}
    notes: dict[str, Any] = {}
    state: dict[str, Any] = {}
    path = tmp / "bench_pipeline.s"
    path.write_text(text)

    def phase(name: str, fn: Callable[[], Any], needs: tuple[str, ...] = ()) -> Any:
        missing = [n for n in needs if n not in state]
        if name in skip:
            rows[name] = {"status": "skipped", "why": "--skip"}
            return None
        if missing:
            rows[name] = {"status": "skipped", "why": f"needs {', '.join(missing)}"}
            return None
        if memory is not None:
            memory.start()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        try:
            out = fn()
        except Skipped as e:
            rows[name] = {"status": "skipped", "why": str(e)}
            return None
        except Exception as e:  # noqa: BLE001 - reported, and the phases that need it are skipped
            rows[name] = {"status": "failed", "why": f"{type(e).__name__}: {e}".splitlines()[0][:160],
                          "traceback": traceback.format_exc()}
            return None
        seconds = time.perf_counter() - t0
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        rows[name] = {"status": "ok", "seconds": seconds, "peak": memory.peak() if memory is not None else None,
                      "faults": faults}
        state[name] = out
        return out

    def assemble():
        asm = Assembler(DEFAULT)
        obj = asm.assemble(text, str(path))
        state["count"] = asm.program.count
        return obj

    def values():
        if state["count"] > values_max:
            raise Skipped(f"{state['count']:,} instructions > --values-max {values_max:,}")
        run = ncsim.run(state["load"], values=True, timing=False, check=False, sidecar=False)
        notes["machine_seconds"] = run.seconds
        return run

    def trace():
        out = tmp / "bench_pipeline.trace.json"
        try:
            notes["trace_bytes"] = write_trace(state["timing"], out)
        finally:
            out.unlink(missing_ok=True)
        return True

    def to_program():
        prog = Assembler(DEFAULT).assemble_program(text, str(path))
        state["count"] = prog.count
        return prog.nbytes()

    phase("asm to program", to_program)
    state.pop("asm to program", None)
    phase("assemble", assemble)
    obj_path = tmp / "bench_pipeline.o"
    phase("write ELF", lambda: write_elf_file(state["assemble"], obj_path), ("assemble",))
    phase("load", lambda: load_program(str(obj_path), DEFAULT)[0], ("write ELF",))
    if "load" not in state and "assemble" in state:  # later phases take the assembled object when the ELF is skipped
        state["load"] = Program.from_object(state["assemble"], str(path))
        notes["object"] = "the assembled object (load did not run)"
    if "load" in state:
        notes["program_bytes"] = state["load"].nbytes()
    state.pop("write ELF", None)
    obj_path.unlink(missing_ok=True)
    phase("verify", lambda: verify_program(state["load"], DEFAULT), ("load",))
    phase("values", values, ("load",))
    state.pop("values", None)
    phase("timing", lambda: time_program(state["load"], DEFAULT, str(path)), ("load",))
    races = phase("races", lambda: find_races(state["timing"]), ("timing",))
    if races is not None:
        notes["races"] = races.total
        notes["races_text"] = races.format(show=3) if races.total else ""
    def make_report():
        rep = report(state["timing"])
        return rep, rep.format()

    rep = phase("report", make_report, ("timing",))
    if rep is not None:
        notes["verdict"] = rep[0].verdict.text
        notes["simulated_us"] = rep[0].total_us
    phase("trace", trace, ("timing",))
    if "assemble" in state:
        obj = state["assemble"]
        notes["engines"] = {e: len(lines) for e, lines in obj.lines.items() if lines}
    return state.get("count", 0), rows, notes


def measure_size(target: int, skip: set[str], values_max: int, huge_pages: bool = False,
                 keep_freed: bool = False) -> dict[str, Any]:
    blocks = blocks_for(target)
    if keep_freed:
        from ncsim.runtime.heap import keep_freed_memory, set_huge_pages

        keep_freed_memory()  # (turns numpy's advice off too, unless --huge-pages turns it on again below)
        if huge_pages:
            set_huge_pages(True)
    elif not huge_pages:
        from ncsim.runtime.heap import huge_pages_off

        huge_pages = not huge_pages_off()  # True where this numpy has no switch: its advice stays
    with tempfile.TemporaryDirectory(prefix="bench_pipeline_") as tmp_name:
        tmp = Path(tmp_name)
        t0 = time.perf_counter()
        count, rows, _ = run_pipeline(program_text(1), tmp, skip, values_max=PROLOGUE + BLOCK, memory=None)
        warm = time.perf_counter() - t0
        failed = {n: r["why"] for n, r in rows.items() if r["status"] == "failed"}
        t0 = time.perf_counter()
        text = program_text(blocks)
        generated = time.perf_counter() - t0
        memory = PeakMemory(keep_freed)
        gc.collect()
        rss_before = memory.rss()
        count, rows, notes = run_pipeline(text, tmp, skip, values_max, memory)
    return {"target": target, "blocks": blocks, "count": count, "rows": rows, "notes": notes,
            "warmup_seconds": warm, "warmup_failed": failed, "generated_seconds": generated,
            "text_bytes": len(text), "rss_before": rss_before, "memory_method": memory.method,
            "huge_pages": huge_pages, "keep_freed": keep_freed, "rss_top": memory.top}


# --------------------------------------------------------------------------- printing

def size_name(n: int) -> str:
    e = round(math.log10(n)) if n > 0 else 0
    return f"1e{e}" if 10 ** e == n else f"{n:,}"


def _mib(b: float | None) -> str:
    return "" if b is None else f"{b / 2**20:.1f}"


def _verdict(row: str, rate: float | None, per: float | None, count: int) -> str:
    if row not in TARGETS or rate is None:
        return ""
    min_rate, max_bytes, text = TARGETS[row]
    if row == "timing-only path" and count < 500_000:
        return f"{text:<30} (for 10^6)"
    ok = rate >= min_rate and (max_bytes is None or per is None or per <= max_bytes)
    return f"{text:<30} {'met' if ok else 'NOT met'}"


def derived_row(m: dict[str, Any]) -> dict[str, Any]:
    rows = m["rows"]
    parts = [rows.get(p, {}) for p in TIMING_ONLY]
    if any(r.get("status") != "ok" for r in parts):
        return {"status": "skipped", "why": "needs " + ", ".join(p for p, r in zip(TIMING_ONLY, parts)
                                                               if r.get("status") != "ok")}
    peaks = [r["peak"] for r in parts if r["peak"] is not None]
    return {"status": "ok", "seconds": sum(r["seconds"] for r in parts), "peak": max(peaks) if peaks else None,
            "faults": sum(r.get("faults", 0) for r in parts)}


def print_size(m: dict[str, Any]) -> None:
    n = m["count"]
    notes = m["notes"]
    engines = ", ".join(f"{e} {c:,}" for e, c in notes.get("engines", {}).items())
    print(f"== size {size_name(m['target'])}: {n:,} instructions ({engines})")
    print(f"   program: {m['blocks']} blocks of {BLOCK} + {PROLOGUE}; text {m['text_bytes']:,} bytes,"
          f" generated in {m['generated_seconds']:.4f} s")
    print(f"   warm-up (every phase once on {PROLOGUE + BLOCK} instructions: numba compile or cache load,"
          f" imports) {m['warmup_seconds']:.2f} s, not counted"
          + (f"; FAILED in warm-up: {m['warmup_failed']}" if m["warmup_failed"] else ""))
    print(f"   memory: {m['memory_method']}; RSS before the first phase {_mib(m['rss_before'])} MiB;"
          f" numpy's huge-page advice {'on (--huge-pages)' if m.get('huge_pages') else 'off, as in the ncsim command'};"
          f" glibc {'keeps freed memory, as in the ncsim command (--keep-freed)' if m.get('keep_freed') else 'as a program that imports ncsim has it'}")
    print(f"   {'phase':<18}{'host s':>9}{'instr/s':>14}{'peak MiB':>10}{'B/instr':>9}{'faults':>9}"
          "   target (issue), reference only")
    rows = dict(m["rows"])
    for name in (*PHASES, "timing-only path"):
        r = derived_row(m) if name == "timing-only path" else rows.get(name, {"status": "skipped", "why": "-"})
        label = "timing-only path" if name == "timing-only path" else name
        if r["status"] != "ok":
            print(f"   {label:<18}{r['status']:>9}   ({r['why']})")
            continue
        rate = n / r["seconds"] if r["seconds"] > 0 else float("inf")
        per = r["peak"] / n if r["peak"] is not None and n else None
        per_text = "" if per is None else f"{per:.0f}"
        faults = f"{r['faults'] / 1000:.1f}k" if "faults" in r else ""
        print(f"   {label:<18}{r['seconds']:>9.3f}{rate:>14,.0f}{_mib(r['peak']):>10}{per_text:>9}{faults:>9}"
              f"   {_verdict(name, rate, per, n)}".rstrip())
    print(f"   {'':<18}(timing-only path = {' + '.join(TIMING_ONLY)}; its peak: the largest of theirs)")
    if m.get("keep_freed") and m.get("rss_top"):
        print(f"   the process's peak RSS over the phases: {_mib(m['rss_top'])} MiB, {_mib(m['rss_top'] - m['rss_before'])}"
              f" MiB ({(m['rss_top'] - m['rss_before']) / n:.0f} bytes per instruction) over its RSS before the first")
    if "program_bytes" in notes:
        print(f"   decoded program: {notes['program_bytes'] / 2**20:,.1f} MiB of arrays"
              f" ({notes['program_bytes'] / n:.0f} bytes per instruction: Program.nbytes(), every array it"
              " keeps, and its object's streams if it keeps one)")
    if "machine_seconds" in notes:
        print(f"   values: of which Machine.run {notes['machine_seconds']:.3f} s")
    if "simulated_us" in notes:
        print(f"   simulated: {notes['simulated_us']:,.3f} µs; {notes['verdict']}")
    if "races" in notes:
        bug = " (under .sync auto the assembler should have ordered every pair: a bug)" if notes["races"] else ""
        print(f"   races found: {notes['races']}{bug}")
        if notes.get("races_text"):
            print("     " + notes["races_text"].replace("\n", "\n     "))
    if "trace_bytes" in notes:
        print(f"   trace: {notes['trace_bytes'] / 1e6:,.1f} MB ({notes['trace_bytes'] / n:.0f} bytes per instruction)")
    if "object" in notes:
        print(f"   note: timing and later phases ran on {notes['object']}")
    for name, r in m["rows"].items():
        if r["status"] == "failed":
            print(f"   {name} FAILED:\n" + "     " + r["traceback"].rstrip().replace("\n", "\n     "))
    print(flush=True)


def print_summary(results: list[dict[str, Any]]) -> None:
    results = [m for m in results if m.get("count")]
    if len(results) < 2:
        return
    names = [size_name(m["target"]) for m in results]
    counts = [m["count"] for m in results]
    steps = list(zip(range(len(results) - 1), range(1, len(results))))
    head = "".join(f"{n + ' ns/i':>12}" for n in names) + "".join(f"{names[b] + '/' + names[a]:>11}" for a, b in steps)
    nlogn = ", ".join(f"{names[b]}/{names[a]} {math.log(counts[b]) / math.log(counts[a]):.2f}" for a, b in steps)
    print("== summary: host time per instruction, and its growth from size to size")
    print(f"   ratio 1.00 = linear; n log n would give {nlogn}; quadratic ~ the ratio of the counts"
          f" ({', '.join(f'{counts[b] / counts[a]:.1f}' for a, b in steps)})")
    print(f"   {'phase':<18}{head}")
    for name in (*PHASES, "timing-only path"):
        rs = [derived_row(m) if name == "timing-only path" else m["rows"].get(name, {"status": "-"}) for m in results]
        ns = [r["seconds"] / m["count"] * 1e9 if r.get("status") == "ok" else None for r, m in zip(rs, results)]
        cells = "".join(f"{'-' if v is None else f'{v:,.0f}':>12}" for v in ns)
        ratios = "".join(f"{'-' if ns[a] is None or ns[b] is None else f'{ns[b] / ns[a]:.2f}':>11}" for a, b in steps)
        print(f"   {name:<18}{cells}{ratios}")
    print()
    print("== summary: peak memory growth per instruction (bytes), and its growth from size to size")
    print(f"   {'phase':<18}" + "".join(f"{n + ' B/i':>12}" for n in names)
          + "".join(f"{names[b] + '/' + names[a]:>11}" for a, b in steps))
    for name in PHASES:
        rs = [m["rows"].get(name, {"status": "-"}) for m in results]
        per = [r["peak"] / m["count"] if r.get("status") == "ok" and r.get("peak") is not None else None
               for r, m in zip(rs, results)]
        cells = "".join(f"{'-' if v is None else f'{v:,.0f}':>12}" for v in per)
        ratios = "".join(f"{'-' if not per[a] or per[b] is None else f'{per[b] / per[a]:.2f}':>11}" for a, b in steps)
        print(f"   {name:<18}{cells}{ratios}")


# --------------------------------------------------------------------------- driver

def parse_size(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"not a positive integer: {text!r}")
    return int(value)


def parse_skip(text: str) -> list[str]:
    out = []
    for word in text.split(","):
        key = word.strip().lower().split()[0] if word.strip() else ""
        key = {"elf": "write", "write_elf": "write"}.get(key, key)
        if key not in SKIPPABLE:
            raise argparse.ArgumentTypeError(f"unknown phase {word!r}: one of {', '.join(SKIPPABLE)}")
        out.append(SKIPPABLE[key])
    return out


def machine_pace() -> float:
    """Seconds this machine takes for a fixed pure-Python loop of 10^7 additions (best of 3): how fast
    it runs today, to set beside the figures (the same code has measured 2.5-3.5x apart on this
    machine from one day to another)."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        total = 0
        for i in range(10_000_000):
            total += i
        best = min(best, time.perf_counter() - start)
    return best


def memory_pace() -> float:
    """Seconds to write one byte into each page of 256 MiB of fresh anonymous memory (4 KiB pages:
    no huge-page advice), best of 3: what the kernel charges for the pages a phase takes new."""
    import mmap

    best = float("inf")
    size = 256 * 2**20
    for _ in range(3):
        start = time.perf_counter()
        with mmap.mmap(-1, size) as m:
            for at in range(0, size, mmap.PAGESIZE):
                m[at] = 1
            best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e4,1e5,1e6",
                        help="comma-separated instruction counts, each run in its own subprocess")
    parser.add_argument("--size", type=parse_size, help="run one size in this process (no summary)")
    parser.add_argument("--skip", type=parse_skip, action="append", default=[],
                        help=f"a phase not to run (repeatable or comma-separated): {', '.join(SKIPPABLE)}")
    parser.add_argument("--values-max", type=parse_size, default=20_000,
                        help="run the values phase only up to this many instructions (default 20000)")
    parser.add_argument("--huge-pages", action="store_true",
                        help="keep numpy's huge-page advice (the ncsim command turns it off; see the docstring)")
    parser.add_argument("--keep-freed", action="store_true",
                        help="glibc keeps freed memory for the next phase, as the ncsim command does (see the docstring)")
    parser.add_argument("--json", help=argparse.SUPPRESS)  # the child writes its measurements here
    args = parser.parse_args()
    skip = {p for group in args.skip for p in group}

    if args.size is not None:
        m = measure_size(args.size, skip, args.values_max, args.huge_pages, args.keep_freed)
        print_size(m)
        if args.json:
            Path(args.json).write_text(json.dumps(m))
        return

    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    print(f"bench_pipeline: sizes {', '.join(size_name(s) for s in sizes)}, each in a fresh subprocess;"
          f" python {sys.version.split()[0]}, {os.cpu_count()} cpus", flush=True)
    print(f"machine pace: {machine_pace():.2f} s for a 10^7-iteration Python loop, best of 3 (no ncsim code:"
          " compare it between runs before comparing their figures)", flush=True)
    print(f"memory pace: {memory_pace():.3f} s to touch 256 MiB of fresh 4 KiB pages, best of 3 (the kernel's"
          " cost of the pages a phase takes new)\n", flush=True)
    results = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_pipeline_") as tmp:
        for n in sizes:
            out = Path(tmp) / f"{n}.json"
            cmd = [sys.executable, str(Path(__file__).resolve()), "--size", str(n), "--json", str(out),
                   "--values-max", str(args.values_max)]
            for p in sorted(skip):
                cmd += ["--skip", p]
            if args.huge_pages:
                cmd.append("--huge-pages")
            if args.keep_freed:
                cmd.append("--keep-freed")
            proc = subprocess.run(cmd, check=False)
            if proc.returncode != 0 or not out.exists():
                print(f"== size {size_name(n)}: the subprocess failed (exit status {proc.returncode})\n", flush=True)
                continue
            results.append(json.loads(out.read_text()))
    print_summary(results)
    print(f"\nwall time of the whole benchmark: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
