"""What an ncsim object holds, independent of how it is laid out in ELF (see `ncsim.asm.elf`).

An object is one kernel: one encoded instruction stream per engine, the tensors it declares, and
for every instruction the source place it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ncsim import isa
from ncsim.dtypes import DType

# The instruction streams, in section order, are the engines of the instruction table. DMA transfers
# live in the stream of the engine that issues them (the Sync engine unless the program says otherwise).
ENGINES = isa.ENGINES

# Tensor roles: kernel arguments in HBM are inputs, outputs or both; HBM scratch; on-chip tiles.
TENSOR_KINDS: tuple[str, ...] = ("in", "out", "inout", "scratch", "tile")


@dataclass(frozen=True)
class TensorEntry:
    name: str
    memory: str  # "hbm", "sbuf" or "psum"
    dtype: DType
    shape: tuple[int, ...]  # partition dimension first for on-chip tensors
    partition: int  # first partition (on chip); 0 for HBM
    address: int  # byte offset inside each partition (on chip), byte address (HBM)
    kind: str  # one of TENSOR_KINDS

    @property
    def nbytes(self) -> int:
        n = self.dtype.itemsize
        for d in self.shape:
            n *= d
        return n


class LineEntry(NamedTuple):
    """Where instruction number `index` of a stream came from. `file` indexes ObjectFile.files.
    (A NamedTuple: a program has one per instruction, and these are made and read fastest.)"""

    index: int
    file: int
    line: int
    col: int


@dataclass
class ObjectFile:
    kernel: str
    streams: dict[str, bytes] = field(default_factory=lambda: {e: b"" for e in ENGINES})
    lines: dict[str, list[LineEntry]] = field(default_factory=lambda: {e: [] for e in ENGINES})
    files: list[str] = field(default_factory=list)
    tensors: list[TensorEntry] = field(default_factory=list)
    # The names of the source's `.sem` semaphores, by number, for messages (a deadlock names them).
    # The ELF file does not keep them: a run of an object file names semaphores by number.
    semaphores: dict[int, str] = field(default_factory=dict, compare=False)
    # The GpSimd programs (`ncsim.gpsimd.code.CoreProgram`), by index: the `.gpsimd` sections gpsimd_call runs.
    gpsimd: list[Any] = field(default_factory=list)
