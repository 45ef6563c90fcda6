"""torch tensors <-> the numpy arrays ncsim reads and writes, for the custom operators (ncsim.torch.ops)
and the lowered programs (ncsim.torch.lower). numpy has no bfloat16 and torch's .numpy() refuses it,
so a bf16 tensor crosses through its 16-bit patterns as an ml_dtypes.bfloat16 array. torch (and
ml_dtypes) are imported when first needed: ncsim.torch imports without torch."""

from __future__ import annotations

from typing import Any

import numpy as np

from ncsim import dtypes

# ncsim's dtypes that torch has: torch's name (str(dtype) without "torch.") -> ncsim's short name.
# fp8: torch's float8_e4m3fn is not ml_dtypes' float8_e4m3 (no infinities, another NaN), so it is not
# mapped; tf32 and u16/u32 have no torch storage type here.
TORCH_NAMES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "int8": "i8", "int16": "i16",
               "int32": "i32", "uint8": "u8", "bool": "bool"}


def ncsim_dtype(torch_dtype: Any) -> dtypes.DType | None:
    """ncsim's dtype of a torch dtype, None if ncsim has none (TORCH_NAMES)."""
    short = TORCH_NAMES.get(str(torch_dtype).removeprefix("torch."))
    return None if short is None else dtypes.by_name(short)


def to_numpy(t: Any) -> np.ndarray:
    """A torch tensor's values as a numpy array of its dtype, on the CPU (bf16 as ml_dtypes.bfloat16)."""
    from ncsim.torch import require_torch

    torch = require_torch()
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def to_torch(a: np.ndarray, dtype: Any = None, device: Any = None) -> Any:
    """A numpy array as a new torch tensor (a copy: the array may be read-only), of torch dtype
    `dtype` where numpy's cannot say it: torch.bfloat16 from bf16 values, torch.bool from 0/1
    bytes; on `device` if given."""
    from ncsim.torch import require_torch

    torch = require_torch()
    a = np.ascontiguousarray(a)
    if dtype == torch.bfloat16:
        t = torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    elif dtype == torch.bool:
        t = torch.from_numpy(a.astype(np.bool_))
    else:
        t = torch.from_numpy(a.copy())
    return t if device is None else t.to(device)
