"""Benchmark of the timing-only path: simulated instructions per second of host time.

    .venv/bin/python tools/bench_timing.py            # about 300 000 instructions
    .venv/bin/python tools/bench_timing.py --blocks 64

It builds a tiled bf16 matmul C[M, N] = A^T B with M = 1024, K = 8192 and N = 512 x blocks:
A^T stays in SBUF (64 DMAs of [128, 1024] at the start); for each 512-column block of N, the Sync
engine streams the 64 K-slices of B into 3 rotating slots (queue 1), the Tensor engine runs 8
matmuls per slice (one per 128-row block of M, each accumulating in its own PSUM bank), the Vector
engine copies the 8 finished banks to 2 rotating SBUF slots, and GpSimd stores them (queue 2). The
semaphores are written out by hand, as the assembler's `.sync manual` would take them.

The object is generated directly (encoded instruction templates with their addresses and semaphore
lists patched in), not through the text assembler: assembling 300 000 lines with automatic
synchronisation takes minutes, which says nothing about the timing model.

It prints, side by side, instructions per second of the scheduler alone (the numba event loop) and
of the whole timing-only path (object -> flat arrays -> schedule -> TimingResult), after one
warm-up run on a small program so that numba's compile (or cache load) is not counted.
"""

from __future__ import annotations

import argparse
import struct
import time

from ncsim import dtypes, isa
from ncsim.asm.instruction import Instruction, encode, layout
from ncsim.asm.objfile import LineEntry, ObjectFile, TensorEntry
from ncsim.config import DEFAULT
from ncsim.memory.access import AccessPattern, Memory
from ncsim.runtime.timing import time_program

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
    parser.add_argument("--repeat", type=int, default=3, help="runs to take the best of")
    args = parser.parse_args()

    t0 = time.perf_counter()
    time_program(tiled_matmul(1), DEFAULT)
    warm = time.perf_counter() - t0
    t0 = time.perf_counter()
    obj = tiled_matmul(args.blocks)
    built = time.perf_counter() - t0
    count = sum(len(lines) for lines in obj.lines.values())
    best: dict[str, float] = {}
    for _ in range(args.repeat):
        profile: dict[str, float] = {}
        result = time_program(obj, DEFAULT, profile=profile)
        for key, value in profile.items():
            best[key] = min(best.get(key, value), value)
    print(f"tiled bf16 matmul M={M} K={K} N={512 * args.blocks}: {count} instructions"
          f" ({len(result.piece_engine)} DMA pieces), built in {built:.2f} s; warm-up (compile or cache load)"
          f" {warm:.2f} s")
    print(f"simulated time {result.total_ns / 1e6:.3f} ms")
    print(f"{'':<24}{'host s':>10}{'instructions/s':>18}")
    print(f"{'scheduler alone':<24}{best['simulate']:>10.3f}{count / best['simulate']:>18,.0f}")
    print(f"{'read + cost':<24}{best['read']:>10.3f}{count / best['read']:>18,.0f}")
    print(f"{'whole timing-only path':<24}{best['total']:>10.3f}{count / best['total']:>18,.0f}")


if __name__ == "__main__":
    main()
