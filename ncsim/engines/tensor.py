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
from ncsim.numerics import from_f32, to_f32


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


@semantics("nc_matmul")
def nc_matmul(ctx: Context) -> None:
    # nc_matmul dst_psum[M, N], stationary[K, M], moving[K, N], accumulate=false
    # (rules matmul-shape, matmul-dtypes and psum-bank held). accumulate=true adds onto whatever the PSUM
    # tile holds, in fp32: a matmul's partial sums, or zeros a memset wrote (NKI's `acc = nl.zeros(...,
    # buffer=nl.psum)` then `acc += nl.matmul(...)`). PSUM nothing wrote reads as any memory nothing
    # wrote: its sentinel, with the unwritten-read warning.
    stat, mov = ctx.ap("stationary"), ctx.ap("moving")
    m, n = stat.free_elements, mov.free_elements
    acc = ctx.read2d("dst") if ctx["accumulate"] else np.zeros((m, n), np.float32)
    matmul_kernel(acc, ctx.read2d("stationary"), ctx.read2d("moving"))
    ctx.write("dst", alu.canonical(acc))


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
@semantics("nc_transpose")
def nc_transpose(ctx: Context) -> None:
    # nc_transpose dst_psum[F, P], data_sbuf[P, F]               (engine=vector: vector_special.py)
    if ctx.engine == "vector":
        from ncsim.engines.vector_special import transpose_vector

        return transpose_vector(ctx)
    data = ctx.ap("data")  # rules transpose and psum-bank held
    p, f = data.partitions, data.free_elements
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
