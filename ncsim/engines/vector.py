"""Vector engine (DVE) instructions, and those Vector shares with GpSimd and Scalar.

Each instruction: an `execute(ctx)` over whole tiles (numpy, numba for sequential loops) and a
plain `reference` computed element by element from the definition (`ncsim.engines.refalu`).
"""

from __future__ import annotations

import numpy as np

from ncsim.engines import alu, refalu, reference, semantics
from ncsim.engines.context import Context
from ncsim.numerics import from_f32, to_f32

WRAP_INT_OPS = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply}


def _int32_wrap(ctx: Context, *names: str) -> bool:
    """GpSimd's 32-bit integer add/subtract/multiply: all operands 32-bit integers -> wrap modulo 2**32."""
    return (ctx.engine == "gpsimd" and ctx["op"] in WRAP_INT_OPS
            and all(ctx.ap(n).dtype.short in ("i32", "u32") for n in names))


@semantics("tensor_tensor")
def tensor_tensor(ctx: Context) -> None:
    op = ctx["op"]
    p, f = ctx.rows("dst", "data1", "data2")
    if alu.IS_BITVEC[op]:
        a, b = (ctx.read_bits(n).reshape(p, f) for n in ("data1", "data2"))
        ctx.write_bits("dst", alu.bitvec(op, a, b))
    elif _int32_wrap(ctx, "dst", "data1", "data2"):
        a, b = (ctx.read_raw(n).reshape(p, f).astype(np.int64) for n in ("data1", "data2"))
        ctx.write_bits("dst", (WRAP_INT_OPS[op](a, b) & 0xFFFFFFFF).astype(np.uint32))
    else:
        ctx.write("dst", alu.apply(op, ctx.read2d("data1"), ctx.read2d("data2")))


@reference("tensor_tensor")
def tensor_tensor_ref(instr, inputs, state):
    op = instr["op"]
    d1, d2, dst = instr["data1"], instr["data2"], instr["dst"]
    a_raw, b_raw = inputs["data1"].ravel(), inputs["data2"].ravel()
    if alu.IS_BITVEC[op]:
        a, b = alu.to_bits(a_raw, d1.dtype), alu.to_bits(b_raw, d2.dtype)
        out = np.array([refalu.bitop(op, int(x), int(y)) for x, y in zip(a, b)], np.uint32)
        return {"dst": alu.from_bits(out, dst.dtype).reshape(dst.shape)}
    if instr.engine == "gpsimd" and op in WRAP_INT_OPS and all(
            x.dtype.short in ("i32", "u32") for x in (d1, d2, dst)):
        py = {"add": lambda x, y: x + y, "subtract": lambda x, y: x - y, "multiply": lambda x, y: x * y}[op]
        out = np.array([py(int(x), int(y)) & 0xFFFFFFFF for x, y in zip(a_raw, b_raw)], np.uint32)
        return {"dst": out.view(dst.dtype.storage).reshape(dst.shape)}
    a, b = to_f32(a_raw, d1.dtype), to_f32(b_raw, d2.dtype)
    out = np.array([refalu.op(op, x, y) for x, y in zip(a, b)], np.float32)
    return {"dst": from_f32(out, dst.dtype).reshape(dst.shape)}
