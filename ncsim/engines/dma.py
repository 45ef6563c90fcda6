"""dma_copy: the one data-moving instruction of the DMA queues (HBM <-> SBUF, SBUF <-> SBUF, HBM <-> HBM).

Elements are copied in iteration order: the source's elements in row-major order of its pattern
(partition first on chip, the outermost dimension first in HBM) go to the destination's elements in
the same order, so both need the same number of elements but not the same shape. Same dtypes: the
bytes are copied. Different dtypes: widened to fp32 and narrowed (round to nearest even). With
dst_rmw_op=add (NKI's read-modify-write; add is its only operator): dst = dst + src, one fp32
addition per element as the ALU's add does it (a NaN result is the canonical quiet NaN), then
narrowed.
"""

from __future__ import annotations

import numpy as np

from ncsim.asm.rules import dma_sizes
from ncsim.engines import alu, refalu, reference, semantics
from ncsim.engines.context import Context
from ncsim.numerics import from_f32, to_f32


@semantics("dma_copy")
def dma_copy(ctx: Context) -> None:
    dst, src = ctx.ap("dst"), ctx.ap("src")
    problem = dma_sizes(dst, src)
    if problem:
        raise ctx.fail(problem)
    if ctx["dst_rmw_op"] is None and src.dtype == dst.dtype:  # bytes move as they are: no copy on the way
        ctx.write_raw("dst", ctx.read_raw_view("src").reshape(dst.shape))
        return
    raw = ctx.read_raw("src").reshape(dst.shape)
    if ctx["dst_rmw_op"] is not None:
        ctx.write("dst", alu.apply("add", ctx.read("dst"), to_f32(raw, src.dtype)))
    elif src.dtype == dst.dtype:
        ctx.write_raw("dst", raw)
    else:
        ctx.write("dst", to_f32(raw, src.dtype))


@reference("dma_copy")
def dma_copy_ref(instr, inputs, state):
    dst, src = instr["dst"], instr["src"]
    flat = inputs["src"].ravel()
    if instr["dst_rmw_op"] is not None:
        old = to_f32(inputs["dst"].ravel(), dst.dtype)
        new = to_f32(flat, src.dtype)
        out = np.array([refalu.op("add", a, b) for a, b in zip(old, new)], np.float32)
        return {"dst": from_f32(out, dst.dtype).reshape(dst.shape)}
    if src.dtype == dst.dtype:
        return {"dst": flat.copy().reshape(dst.shape)}
    return {"dst": from_f32(to_f32(flat, src.dtype), dst.dtype).reshape(dst.shape)}
