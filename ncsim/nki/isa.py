"""`nki.isa` (nisa), the SDK 2.2x forms: calls take tiles and return a new tile (no `dst`), except
`dma_copy`, which writes the `dst` it is given. Each one becomes the ncsim instruction of the same
name (docs/nki.md lists them); `engine=` picks the engine where the instruction has several.

This first slice covers the instructions the tutorials' kernels need; the rest of ncsim's
instruction table follows (docs/nki.md, "Not yet").
"""

from __future__ import annotations

from typing import Any

from ncsim import dtypes
from ncsim.errors import AsmError
from ncsim.nki import language as nl
from ncsim.nki.tensor import View, to_dtype
from ncsim.nki.tracer import constant, current, user_place


class engine:
    """nisa.engine.*: the engine an instruction runs on."""

    tensor = "tensor"
    vector = "vector"
    scalar = "scalar"
    gpsimd = "gpsimd"
    sync = "sync"
    unknown = None


def _op_name(op: Any) -> str:
    """An operator given as nl.add, np.add or 'add' -> 'add'."""
    name = op if isinstance(op, str) else getattr(op, "__name__", None)
    if not isinstance(name, str):
        raise current().fail(f"expected an operator such as nl.add or np.maximum, not {op!r}")
    return name


def _engine(e: Any, default: str) -> str:
    return default if e is None else str(e)


def _result(shape: tuple[int, ...], dtype: Any, default: dtypes.DType, mnemonic: str, eng: str | None,
            mask: Any, memory: str = "sbuf", **operands: Any) -> View:
    tr = current(f"nisa.{mnemonic}")
    dt = to_dtype(dtype) if dtype is not None else default
    iv = nl._intervals(mask)
    if iv is None:
        return nl._nothing(shape, dt)
    columns = {0: iv[0]} if 0 in iv else {}  # [P, 1] operands follow the partition mask only
    ops = {k: (v.clip(columns if k in ("operand0", "operand1", "bias", "scale") else iv) if isinstance(v, View) else v)
           for k, v in operands.items()}
    return tr.result(shape, dt, memory, mnemonic, eng, iv, **ops)


def nc_matmul(stationary: View, moving: View, *, is_stationary_onezero: bool = False, is_moving_onezero: bool = False,
              is_transpose: bool = False, mask: Any = None, **_: Any) -> View:
    """stationary.T @ moving into a new PSUM tile of fp32 (`psum += nisa.nc_matmul(...)` accumulates)."""
    if is_transpose:
        raise current().fail("nisa.nc_matmul(is_transpose=True) is not supported yet; use nisa.nc_transpose")
    return nl.nc_matmul_result(nl._tile(stationary, "nc_matmul", "stationary"), nl._tile(moving, "nc_matmul", "moving"))


def nc_transpose(data: View, *, engine: Any = None, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    """[P, F] -> [F, P]: on the Tensor engine (SBUF -> PSUM, up to 128 x 128) or Vector (up to 32 x 32)."""
    data = nl._tile(data, "nc_transpose", "data")
    eng = _engine(engine, "tensor")
    return _result((data.free_elements, data.partitions), dtype, data.nc_dtype, "nc_transpose", eng, mask,
                   "psum" if eng == "tensor" else "sbuf", data=data)


def activation(op: Any, data: View, *, bias: View | None = None, scale: Any = 1.0, dtype: Any = None,
               mask: Any = None, **kw: Any) -> View:
    """op(data * scale + bias) on the Scalar engine."""
    if kw.get("reduce_res") is not None or kw.get("reduce_op") is not None:
        raise current().fail("nisa.activation with a reduction is not supported yet: use nisa.activation_reduce"
                             " later, or nl.sum")
    data = nl._tile(data, "activation", "data")
    return _result(data.shape, dtype, data.nc_dtype, "activation", "scalar", mask, data=data, op=_op_name(op),
                   bias=bias, scale=scale if isinstance(scale, View) else constant(scale))


def tensor_tensor(data1: View, data2: View, op: Any, *, dtype: Any = None, mask: Any = None, engine: Any = None,
                  **_: Any) -> View:
    data1, data2 = nl._tile(data1, "tensor_tensor", "data1"), nl._tile(data2, "tensor_tensor", "data2")
    return _result(data1.shape, dtype, nl.promote(data1.nc_dtype, data2.nc_dtype), "tensor_tensor",
                   _engine(engine, "vector"), mask, data1=data1, data2=data2, op=_op_name(op))


def tensor_scalar(data: View, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None, operand1: Any = None,
                  reverse1: bool = False, *, dtype: Any = None, mask: Any = None, engine: Any = None, **_: Any) -> View:
    data = nl._tile(data, "tensor_scalar", "data")
    return _result(data.shape, dtype, data.nc_dtype, "tensor_scalar", _engine(engine, "vector"), mask, data=data,
                   op0=_op_name(op0), operand0=operand0, reverse0=reverse0,
                   op1=None if op1 is None else _op_name(op1), operand1=operand1, reverse1=reverse1)


def tensor_reduce(op: Any, data: View, axis: Any, *, negate: bool = False, keepdims: bool = False, dtype: Any = None,
                  mask: Any = None, **_: Any) -> View:
    data = nl._tile(data, "tensor_reduce", "data")
    axes = nl._axes(data, axis, "tensor_reduce")
    shape = tuple(1 if d in axes else s for d, s in enumerate(data.shape)) if keepdims else \
        tuple(s for d, s in enumerate(data.shape) if d not in axes)
    return _result(shape, dtype, data.nc_dtype, "tensor_reduce", "vector", mask, data=data, op=_op_name(op),
                   axis=axes, negate=negate)


def tensor_copy(src: View, *, dtype: Any = None, mask: Any = None, engine: Any = None, **_: Any) -> View:
    src = nl._tile(src, "tensor_copy", "src")
    return _result(src.shape, dtype, src.nc_dtype, "tensor_copy", _engine(engine, "vector"), mask, src=src)


def memset(shape: Any, value: Any, dtype: Any, *, mask: Any = None, engine: Any = None, **_: Any) -> View:
    tr = current("nisa.memset")
    t = nl.ndarray(shape, dtype, nl.sbuf)
    iv = nl._intervals(mask)
    if iv is not None:
        tr.emit("memset", _engine(engine, "vector"), dst=t.clip(iv), value=constant(value))
    return t


def dma_copy(*, dst: View, src: View, mask: Any = None, **_: Any) -> None:
    """dst = src between HBM and SBUF (or within either), issued by the Sync engine."""
    tr = current("nisa.dma_copy")
    iv = nl._intervals(mask)
    if iv is None:
        return
    if not isinstance(dst, View) or not isinstance(src, View):
        raise tr.fail("nisa.dma_copy copies a tensor into a tensor (dst=, src=)")
    tr.emit("dma_copy", "sync" if dst.on_chip else "gpsimd", dst=dst.clip(iv), src=src.clip(iv))


NAMES = ("activation", "dma_copy", "engine", "memset", "nc_matmul", "nc_transpose", "tensor_copy", "tensor_reduce",
         "tensor_scalar", "tensor_tensor")


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise AsmError(f"nisa.{name} is not available in ncsim's NKI front end yet; it has: {', '.join(NAMES)}",
                   user_place().source_loc())
