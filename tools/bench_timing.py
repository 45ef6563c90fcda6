"""Benchmark of the timing-only path: simulated instructions per second of host time.

    .venv/bin/python tools/bench_timing.py            # about 300 000 instructions
    .venv/bin/python tools/bench_timing.py --million  # 1 000 544 instructions (--blocks 1690)
    .venv/bin/python tools/bench_timing.py --blocks 64
    .venv/bin/python tools/bench_timing.py --object prog.o   # a saved object instead (ncsim asm -o)

It builds a tiled bf16 matmul C[M, N] = A^T B with M = 1024, K = 8192 and N = 512 x blocks:
A^T stays in SBUF (64 DMAs of [128, 1024] at the start); for each 512-column block of N, the Sync
engine streams the 64 K-slices of B into 3 rotating slots (queue 1), the Tensor engine runs 8
matmuls per slice (one per 128-row block of M, each accumulating in its own PSUM bank), the Vector
engine copies the 8 finished banks to 2 rotating SBUF slots, and GpSimd stores them (queue 2). The
semaphores are written out by hand, as the assembler's `.sync manual` would take them.

With --object, a saved object (an ELF file from `ncsim asm`, e.g. tools/bench_pipeline.py's
10^6-instruction program, whose transfers are cut into 6.6 million DMA pieces) is timed instead.

The object is generated directly (encoded instruction templates with their addresses and semaphore
lists patched in), not through the text assembler: assembling 300 000 lines with automatic
synchronisation takes minutes, which says nothing about the timing model.

It prints, side by side, instructions per second of: the scheduler alone (the numba event loop),
the whole of time_program (object -> flat arrays -> schedule -> TimingResult), the race check
(find_races), the report (report(...)), writing the Perfetto trace (write_trace, to a temporary
file), and the end-to-end timing-only path (time_program + races + report, what `ncsim run` does
without --trace), and how many DMA engines the scheduler simulated (timing._lockstep: alike
engines are simulated as one). Each is the best of --repeat runs, after one warm-up run of everything on a small
program so that numba's compile (or cache load) is not counted. Host times are given as
wall-clock and as this process's CPU time (the scheduler's own, from time_program's profile, as
wall-clock only): on a machine shared with other work the wall-clock varies by tens of percent.
"""

from __future__ import annotations

import argparse
import struct
import tempfile
import time
from pathlib import Path

from ncsim import dtypes, isa
from ncsim.asm.elf import read_elf
from ncsim.asm.instruction import Instruction, encode, layout
from ncsim.asm.objfile import LineEntry, ObjectFile, TensorEntry
from ncsim.config import DEFAULT
from ncsim.memory.access import AccessPattern, Memory
from ncsim.runtime.races import find_races
from ncsim.runtime.report import report
from ncsim.runtime.timing import time_program
from ncsim.runtime.trace import write_trace

BF16, F32 = dtypes.BFLOAT16, dtypes.FLOAT32
M, K = 1024, 8192
MB, KS = M // 128, K // 128  # 8 row blocks of M, 64 slices of K
B_SLOTS, C_SLOTS = 3, 2
A_AT, B_AT = 0, MB * 128 * KS * 2  # SBUF byte offsets in each partition: A^T [64, 1024], B slots
C_AT = B_AT + B_SLOTS * 512 * 2
_SEM = struct.Struct("<BBHI")


def sbuf(dtype: dtypes.DType, offset: int, free: int) -> AccessPattern:
    return AccessPattern(Memory.SBUF, dtype, 0, 128, offset, ((1, free),))


def hbm(dtype: dtypes.DType, offset: int, row_step: int, rows: int, cols: int) -> AccessPattern:
    return AccessPattern(Memory.HBM, dtype, 0, 0, offset, ((row_step, rows), (1, cols)))


def make(mnemonic: str, engine: str, **operands) -> Instruction:
    spec = isa.BY_MNEMONIC[mnemonic]
    values = {o.name: operands.pop(o.name, o.default) for o in spec.operands}
    assert not operands, operands
    return Instruction(spec, engine, values)


class Stream:
    """One engine's encoded stream, built from templates with patched waits and signals."""

    def __init__(self, engine: str):
        self.engine = engine
        self.parts: list[bytes] = []
        self.lines: list[LineEntry] = []

    def add(self, template: bytes, line: int, waits=(), signals=()) -> None:
        head = bytearray(template[:8])
        head[2], head[3] = len(waits), len(signals)
        head[4:6] = (len(template) + 8 * (len(waits) + len(signals))).to_bytes(2, "little")
        tail = b"".join(_SEM.pack(s, 0, 0, v) for s, v in waits) + b"".join(_SEM.pack(s, 0, 0, v) for s, v in signals)
        self.parts.append(bytes(head) + template[8:] + tail)
        self.lines.append(LineEntry(len(self.lines), 0, line, 3))


def patched_offset(template: bytes, mnemonic: str, operand: str, offset: int) -> bytes:
    """`template` with the byte offset of access-pattern `operand` replaced."""
    at = next(off for o, off in layout(isa.BY_MNEMONIC[mnemonic].opcode)[0] if o.name == operand) + 8
    return template[:at] + offset.to_bytes(8, "little") + template[at + 8:]


def tiled_matmul(blocks: int) -> ObjectFile:
    n = 512 * blocks
    a_hbm, b_hbm, c_hbm = 0, K * M * 2, K * M * 2 + K * n * 2
    sync, tensor, vector, gpsimd = Stream("sync"), Stream("tensor"), Stream("vector"), Stream("gpsimd")
    load_a = encode(make("dma_copy", "sync", dst=sbuf(BF16, A_AT, M), src=hbm(BF16, a_hbm, M, 128, M), queue=0))
    load_b = [encode(make("dma_copy", "sync", dst=sbuf(BF16, B_AT + s * 1024, 512), src=hbm(BF16, b_hbm, n, 128, 512),
                          queue=1)) for s in range(B_SLOTS)]
    matmul = {(m, s, acc): encode(make("nc_matmul", "tensor",
                                       dst=AccessPattern(Memory.PSUM, F32, 0, 128, m * 2048, ((1, 512),)),
                                       stationary=sbuf(BF16, A_AT, 128), moving=sbuf(BF16, B_AT + s * 1024, 512),
                                       accumulate=acc))
              for m in range(MB) for s in range(B_SLOTS) for acc in (False, True)}
    copy = {(m, c): encode(make("tensor_copy", "vector", dst=sbuf(F32, C_AT + c * 2048, 512),
                                src=AccessPattern(Memory.PSUM, F32, 0, 128, m * 2048, ((1, 512),))))
            for m in range(MB) for c in range(C_SLOTS)}
    store = [encode(make("dma_copy", "gpsimd", dst=hbm(F32, c_hbm, n, 128, 512), src=sbuf(F32, C_AT + c * 2048, 512),
                         queue=2)) for c in range(C_SLOTS)]
    # Semaphores: s0 A loaded, s1 B slices loaded, s2 B slices consumed, s3 banks finished,
    # s4 banks copied out, s5 C slots stored.
    for k in range(KS):
        t = patched_offset(load_a, "dma_copy", "src", a_hbm + k * 128 * M * 2)
        # the stationary operand of slice k sits at A_AT + k * M * 2 (+ m * 256 per row block)
        t = patched_offset(t, "dma_copy", "dst", A_AT + k * M * 2)
        sync.add(t, 10, signals=[(0, 1)])
    for blk in range(blocks):
        for k in range(KS):
            g = blk * KS + k
            t = patched_offset(load_b[g % B_SLOTS], "dma_copy", "src", b_hbm + (k * 128 * n + blk * 512) * 2)
            sync.add(t, 20, waits=[(2, g - B_SLOTS + 1)] if g >= B_SLOTS else [], signals=[(1, 1)])
            for m in range(MB):
                waits = []
                if m == 0:
                    waits.append((1, g + 1))
                    if blk == 0:
                        waits.append((0, k + 1))
                if k == 0 and blk > 0:
                    waits.append((4, (blk - 1) * MB + m + 1))
                signals = [(2, 1)] if m == MB - 1 else []
                if k == KS - 1:
                    signals.append((3, 1))
                tmpl = patched_offset(matmul[m, g % B_SLOTS, k > 0], "nc_matmul", "stationary",
                                      A_AT + k * M * 2 + m * 256)
                tensor.add(tmpl, 30, waits, signals)
        for m in range(MB):
            j = blk * MB + m
            waits = [(3, j + 1)] + ([(5, j - C_SLOTS + 1)] if j >= C_SLOTS else [])
            vector.add(copy[m, j % C_SLOTS], 40, waits, [(4, 1)])
            t = patched_offset(store[j % C_SLOTS], "dma_copy", "dst", c_hbm + (m * 128 * n + blk * 512) * 4)
            gpsimd.add(t, 50, [(4, j + 1)], [(5, 1)])
    obj = ObjectFile("bench_matmul")
    for s in (sync, tensor, vector, gpsimd):
        obj.streams[s.engine] = b"".join(s.parts)
        obj.lines[s.engine] = s.lines
    obj.files = ["bench_matmul.s (generated by tools/bench_timing.py)"]
    obj.tensors = [TensorEntry("a_t", "hbm", BF16, (K, M), 0, a_hbm, "in"),
                   TensorEntry("b", "hbm", BF16, (K, n), 0, b_hbm, "in"),
                   TensorEntry("c", "hbm", F32, (M, n), 0, c_hbm, "out")]
    return obj


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=512, help="512-column blocks of N (592 instructions each)")
    parser.add_argument("--million", action="store_true", help="1690 blocks: 1 000 544 instructions")
    parser.add_argument("--repeat", type=int, default=3, help="runs to take the best of")
    parser.add_argument("--no-trace", action="store_true", help="leave out writing the trace (its file is large)")
    parser.add_argument("--object", type=Path, help="time this object file (ELF) instead of the generated matmul")
    args = parser.parse_args()
    blocks = 1690 if args.million else args.blocks

    with tempfile.TemporaryDirectory() as tmp:
        trace_path = Path(tmp) / "bench.trace.json"
        t0 = time.perf_counter()
        small = tiled_matmul(1)
        warm_result = time_program(small, DEFAULT)
        find_races(warm_result)
        report(warm_result)
        if not args.no_trace:
            write_trace(warm_result, trace_path, small)
        warm = time.perf_counter() - t0
        t0 = time.perf_counter()
        obj = read_elf(args.object.read_bytes(), str(args.object)) if args.object else tiled_matmul(blocks)
        built = time.perf_counter() - t0
        count = sum(len(lines) for lines in obj.lines.values())
        best: dict[str, tuple[float, float]] = {}  # the best (wall, CPU) seconds of each step

        def keep(key: str, t0: tuple[float, float], t1: tuple[float, float]) -> None:
            wall, cpu = t1[0] - t0[0], t1[1] - t0[1]
            best[key] = min(best.get(key, (wall, cpu)), (wall, cpu))

        size = 0
        for _ in range(args.repeat):
            profile: dict[str, float] = {}
            t0 = _clocks()
            result = time_program(obj, DEFAULT, profile=profile)
            t1 = _clocks()
            races = find_races(result)
            t2 = _clocks()
            report(result)
            t3 = _clocks()
            keep("time_program", t0, t1)
            keep("races", t1, t2)
            keep("report", t2, t3)
            keep("end to end", t0, t3)
            for key in ("simulate", "read"):  # time_program's own profile: wall-clock only
                best[key] = min(best.get(key, (profile[key], 0.0)), (profile[key], 0.0))
            if not args.no_trace:
                t0 = _clocks()
                size = write_trace(result, trace_path, obj)
                keep("trace", t0, _clocks())
                trace_path.unlink()
    what = str(args.object) if args.object else f"tiled bf16 matmul M={M} K={K} N={512 * blocks}"
    print(f"{what}: {count} instructions ({result.pieces} DMA pieces), {'read' if args.object else 'built'} in"
          f" {built:.2f} s; warm-up (compile or cache load) {warm:.2f} s")
    print(f"simulated time {result.total_ns / 1e6:.3f} ms; {races.total} races"
          + (f"; trace {size / 1e6:.0f} MB" if size else "")
          + f"; {profile['dma_engines']:.0f} of {DEFAULT.dma_engines} DMA engines simulated (the others in lockstep)")
    print(f"{'':<42}{'wall s':>8}{'instructions/s':>16}{'CPU s':>8}{'instructions/s':>16}")
    rows = [("scheduler alone (_simulate)", "simulate"), ("read + cost", "read"), ("time_program", "time_program"),
            ("races (find_races)", "races"), ("report (report)", "report"), ("trace (write_trace)", "trace"),
            ("end to end: time_program + races + report", "end to end")]
    for label, key in rows:
        if key in best:
            wall, cpu = best[key]
            cells = f"{wall:>8.3f}{count / wall:>16,.0f}" + (f"{cpu:>8.3f}{count / cpu:>16,.0f}" if cpu else "")
            print(f"{label:<42}{cells}")


def _clocks() -> tuple[float, float]:
    """(wall-clock, this process's CPU time) in seconds: the CPU time does not count the time other
    work on the machine took the cores."""
    return time.perf_counter(), time.process_time()


if __name__ == "__main__":
    main()
