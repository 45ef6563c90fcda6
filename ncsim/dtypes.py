"""The NeuronCore-v2 data types (docs/hardware.md#isa): code, name, storage type and size.

One table, `DTYPES`; everything else (the assembler's dtype names, the encoder, the object file's
tensor table, the simulator's memory views) looks types up here.

Storage: the narrow floats use ml_dtypes; tfloat32 is stored in 4 bytes as a float32 whose low 13
mantissa bits are zero (its 10-bit mantissa); bool is stored as uint8 (0 or 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class DType:
    code: int  # the 4-bit value in encoded access patterns and in the object file's tensor table
    name: str  # the NKI name (nl.<name>)
    short: str  # the name assembly programs use
    # numpy dtype of the bytes in memory (`storage`), or the name of an ml_dtypes type and its size in
    # bytes: ml_dtypes is imported when such a type is first used (importing it takes ~15 ms, a
    # twentieth of a run's fixed cost, and most programs never touch a narrow float)
    storage_spec: np.dtype | str
    kind: str  # "float", "int", "uint" or "bool"
    mantissa_bits: int = 0  # explicit mantissa bits for floats (0 for integers)
    size: int = 0  # bytes of one element, given with an ml_dtypes name (otherwise the dtype's)

    @cached_property
    def storage(self) -> np.dtype:
        if isinstance(self.storage_spec, np.dtype):
            return self.storage_spec
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, self.storage_spec))

    @property
    def itemsize(self) -> int:
        return self.size or self.storage.itemsize

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint", "bool")

    def __str__(self) -> str:
        return self.short


DTYPES: tuple[DType, ...] = (
    DType(0, "uint8", "u8", np.dtype(np.uint8), "uint"),
    DType(1, "uint16", "u16", np.dtype(np.uint16), "uint"),
    DType(2, "uint32", "u32", np.dtype(np.uint32), "uint"),
    DType(3, "int8", "i8", np.dtype(np.int8), "int"),
    DType(4, "int16", "i16", np.dtype(np.int16), "int"),
    DType(5, "int32", "i32", np.dtype(np.int32), "int"),
    DType(6, "float8_e4m3", "fp8e4", "float8_e4m3", "float", 3, size=1),
    DType(7, "float8_e5m2", "fp8e5", "float8_e5m2", "float", 2, size=1),
    DType(8, "float16", "f16", np.dtype(np.float16), "float", 10),
    DType(9, "bfloat16", "bf16", "bfloat16", "float", 7, size=2),
    DType(10, "tfloat32", "tf32", np.dtype(np.float32), "float", 10),
    DType(11, "float32", "f32", np.dtype(np.float32), "float", 23),
    DType(12, "bool", "bool", np.dtype(np.uint8), "bool"),
)

_BY_CODE = {d.code: d for d in DTYPES}
# Every spelling a program may use: short, NKI name, and the common fp16/fp32 forms.
_BY_NAME = {d.short: d for d in DTYPES} | {d.name: d for d in DTYPES}
_BY_NAME |= {"fp16": _BY_NAME["f16"], "fp32": _BY_NAME["f32"], "bf16": _BY_NAME["bf16"]}

FLOAT32 = _BY_NAME["f32"]
BFLOAT16 = _BY_NAME["bf16"]
INT32 = _BY_NAME["i32"]
UINT8 = _BY_NAME["u8"]


def dtype_names() -> list[str]:
    """The short names, in code order: what error messages list."""
    return [d.short for d in DTYPES]


def by_name(name: str) -> DType | None:
    return _BY_NAME.get(name)


def by_code(code: int) -> DType | None:
    return _BY_CODE.get(code)
