"""Tensor engine (PE) instructions: nc_matmul and the Tensor nc_transpose (see ncsim/engines/__init__.py
for the execute/reference contract).

Both are the one matmul ncsim defines (docs/hardware.md#numerics). With a[K, M] stationary and
b[K, N] moving, every output element is a running fp32 sum:

    acc = +0.0 (or the fp32 PSUM value when accumulating)
    for k = 0 .. K-1 in order:  acc = acc + a[k, m] * b[k, n]

where the product and the sum are each one fp32 operation rounded to nearest even (never fused), and
a NaN result is stored as the canonical quiet NaN (0x7FC00000), as every ALU result is. The Tensor
transpose is that matmul with the data as stationary and the identity as moving, so it is exact for
finite values but not for the others (see the nc_transpose row of ncsim/isa.py).
"""

from __future__ import annotations

import numba
import numpy as np

from ncsim.engines import alu, refalu, reference, semantics
from ncsim.engines.context import Context
from ncsim.memory.access import AccessPattern, Memory
from ncsim.numerics import from_f32, to_f32

MATMUL_DTYPES = ("fp8e4", "fp8e5", "bf16", "f16", "tf32", "f32")  # NKI nc_matmul: the PE's input types
WIDE = ("tf32", "f32")  # NKI: fp32 and tf32 multiply only with each other


@numba.njit(cache=True, error_model="numpy")
def matmul_kernel(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """acc[m, n] = acc[m, n] + a[k, m] * b[k, n] for k = 0..K-1 in order, in fp32, in place (float32
    arrays: acc [M, N], a [K, M], b [K, N]). k outermost keeps each element's order and lets the
    innermost loop over n vectorise; without fastmath LLVM never contracts the two into an FMA."""
    K, M = a.shape
    N = b.shape[1]
    for k in range(K):
        for m in range(M):
            s = a[k, m]
            for n in range(N):
                acc[m, n] = acc[m, n] + s * b[k, n]


def _bank_check(ctx: Context, dst: AccessPattern) -> None:
    lo, hi = dst.byte_span()
    bank = ctx.config.psum_bank_bytes
    if lo // bank != (hi - 1) // bank:
        raise ctx.fail(f"the PSUM output 'dst' spans bytes {lo}..{hi - 1} of each partition, across a"
                       f" {bank}-byte bank boundary (a Tensor engine output lies inside one bank)")


def _memories(ctx: Context, sbuf: tuple[str, ...], psum: str) -> None:
    for name in sbuf:
        if ctx.ap(name).memory != Memory.SBUF:
            raise ctx.fail(f"'{name}' must be in sbuf (the Tensor engine reads SBUF), not {ctx.ap(name).memory.label}")
    if ctx.ap(psum).memory != Memory.PSUM:
        raise ctx.fail(f"'{psum}' must be in psum (the Tensor engine writes PSUM), not {ctx.ap(psum).memory.label}")


def _check_matmul(ctx: Context) -> tuple[int, int, int]:
    """(K, M, N) of a well-formed nc_matmul, else a SimError saying what is wrong."""
    dst, stat, mov = ctx.ap("dst"), ctx.ap("stationary"), ctx.ap("moving")
    cfg = ctx.config
    _memories(ctx, ("stationary", "moving"), "dst")
    k, m, n = stat.partitions, stat.free_elements, mov.free_elements
    if mov.partitions != k:
        raise ctx.fail(f"'stationary' {list(stat.shape)} and 'moving' {list(mov.shape)} must contract over the"
                       f" same number of partitions, not {k} and {mov.partitions}")
    if k > cfg.gemm_kmax:
        raise ctx.fail(f"the contraction K = {k} partitions is more than the PE array's {cfg.gemm_kmax} rows")
    if m > cfg.gemm_stationary_fmax:
        raise ctx.fail(f"'stationary' has {m} elements per partition (M); at most {cfg.gemm_stationary_fmax}")
    if n > cfg.gemm_moving_fmax:
        raise ctx.fail(f"'moving' has {n} elements per partition (N); at most {cfg.gemm_moving_fmax}")
    if dst.partitions != m or dst.free_elements != n:
        raise ctx.fail(f"'dst' must be [M, N] = [{m}, {n}] (M partitions of N elements), not {list(dst.shape)}"
                       f" ({dst.partitions} partitions of {dst.free_elements})")
    if dst.dtype.short != "f32":
        raise ctx.fail(f"'dst' must be f32 (the PE accumulates in fp32 in PSUM), not {dst.dtype.short}")
    kinds = (stat.dtype.short, mov.dtype.short)
    for name, d in zip(("stationary", "moving"), kinds):
        if d not in MATMUL_DTYPES:
            raise ctx.fail(f"'{name}' is {d}; the Tensor engine multiplies {', '.join(MATMUL_DTYPES)}")
    if (kinds[0] in WIDE) != (kinds[1] in WIDE):
        raise ctx.fail(f"'stationary' is {kinds[0]} and 'moving' is {kinds[1]}: f32 and tf32 multiply only with"
                       " f32 or tf32")
    _bank_check(ctx, dst)
    return k, m, n


@semantics("nc_matmul")
def nc_matmul(ctx: Context) -> None:
    # nc_matmul dst_psum[M, N], stationary[K, M], moving[K, N], accumulate=false
    _, m, n = _check_matmul(ctx)
    dst = ctx.ap("dst")
    if ctx["accumulate"]:
        if not ctx.machine.matmul_started(dst):
            raise ctx.fail(f"accumulate=true adds onto PSUM partitions {dst.partition}:{dst.partition + dst.partitions}"
                           f" bytes {dst.byte_span()[0]}..{dst.byte_span()[1] - 1}, but not all of them hold a matmul's"
                           " result (another instruction wrote them, or nothing did): start the accumulation group"
                           " with accumulate=false")
        acc = ctx.read2d("dst")
    else:
        acc = np.zeros((m, n), np.float32)
    matmul_kernel(acc, ctx.read2d("stationary"), ctx.read2d("moving"))
    ctx.write("dst", alu.canonical(acc))
    ctx.machine.mark_matmul(dst, True)


def matmul_ref(a: np.ndarray, b: np.ndarray, start: np.ndarray | None) -> np.ndarray:
    """The matmul of the module docstring, one element and one k at a time: a [K, M], b [K, N] and
    start [M, N] (or None: from +0) as float32; returns [M, N] float32."""
    K, M = a.shape
    N = b.shape[1]
    out = np.empty((M, N), np.float32)
    for m in range(M):
        for n in range(N):
            acc = np.float32(0.0) if start is None else start[m, n]
            for k in range(K):
                acc = refalu.op("add", acc, refalu.op("multiply", a[k, m], b[k, n]))
            out[m, n] = acc
    return out


@reference("nc_matmul")
def nc_matmul_ref(instr, inputs, state):
    dst, stat, mov = instr["dst"], instr["stationary"], instr["moving"]
    k, m, n = stat.partitions, stat.free_elements, mov.free_elements
    a = to_f32(inputs["stationary"], stat.dtype).reshape(k, m)
    b = to_f32(inputs["moving"], mov.dtype).reshape(k, n)
    start = to_f32(inputs["dst"], dst.dtype).reshape(m, n) if instr["accumulate"] else None
    return {"dst": from_f32(matmul_ref(a, b, start), dst.dtype).reshape(dst.shape)}


# ------------------------------------------------------------------ transpose
def _check_transpose(ctx: Context) -> tuple[int, int]:
    data, dst = ctx.ap("data"), ctx.ap("dst")
    cfg = ctx.config
    _memories(ctx, ("data",), "dst")
    p, f = data.partitions, data.free_elements
    if p > cfg.gemm_kmax or f > cfg.gemm_stationary_fmax:
        raise ctx.fail(f"'data' is {p} partitions of {f} elements; the Tensor engine transposes at most"
                       f" {cfg.gemm_kmax} x {cfg.gemm_stationary_fmax}")
    if dst.partitions != f or dst.free_elements != p:
        raise ctx.fail(f"'dst' must be [F, P] = [{f}, {p}] ({f} partitions of {p} elements) for 'data'"
                       f" {list(data.shape)}, not {list(dst.shape)}")
    if dst.dtype != data.dtype:
        raise ctx.fail(f"'dst' must have the dtype of 'data' ({data.dtype.short}), not {dst.dtype.short}")
    _bank_check(ctx, dst)
    return p, f


@semantics("nc_transpose")
def nc_transpose(ctx: Context) -> None:
    # nc_transpose dst_psum[F, P], data_sbuf[P, F]               (engine=vector: vector_special.py)
    if ctx.engine == "vector":
        from ncsim.engines.vector_special import transpose_vector

        return transpose_vector(ctx)
    p, f = _check_transpose(ctx)
    acc = np.zeros((f, p), np.float32)
    matmul_kernel(acc, ctx.read2d("data"), np.eye(p, dtype=np.float32))
    ctx.write("dst", alu.canonical(acc))
    return None


@reference("nc_transpose")
def nc_transpose_ref(instr, inputs, state):
    if instr.engine == "vector":
        from ncsim.engines.vector_special import transpose_vector_ref

        return transpose_vector_ref(instr, inputs, state)
    data, dst = instr["data"], instr["dst"]
    p, f = data.partitions, data.free_elements
    stationary = to_f32(inputs["data"], data.dtype).reshape(p, f)
    identity = np.array([[1.0 if k == j else 0.0 for j in range(p)] for k in range(p)], np.float32)
    return {"dst": from_f32(matmul_ref(stationary, identity, None), dst.dtype).reshape(dst.shape)}
