"""`nki.typing`: `tensor[[8192, 4096], nl.bfloat16]`, an argument with a shape and a dtype but no data.

A kernel given such placeholders is traced and timed, but its values are not computed (a
timing-only run: `nki.benchmark` of the tutorials at their published sizes).
"""

from __future__ import annotations

from typing import Any

from ncsim.nki.tensor import to_dtype


class Placeholder:
    """A kernel argument of known shape and dtype whose values are not given."""

    def __init__(self, shape: tuple[int, ...], dtype: Any):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.nc_dtype = to_dtype(dtype)

    def __repr__(self) -> str:
        return f"nki.typing.tensor[{list(self.shape)}, {self.nc_dtype.name}]"


class _TensorType:
    def __getitem__(self, key: Any) -> Placeholder:
        if not isinstance(key, tuple) or len(key) != 2:
            raise TypeError("nki.typing.tensor[[d0, d1, ...], dtype]")
        shape, dtype = key
        return Placeholder(tuple(shape), dtype)


tensor = _TensorType()
