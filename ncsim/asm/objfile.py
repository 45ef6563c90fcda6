"""What an ncsim object holds, independent of how it is laid out in ELF (see `ncsim.asm.elf`).

An object is one kernel: one encoded instruction stream per engine, the tensors it declares, and
for every instruction the source place it came from.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, overload

import numpy as np

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


class LineTable(Sequence[LineEntry]):
    """A stream's line table as columns: instruction k came from file[k], line[k], col[k] (numpy
    arrays). The assembler and the ELF reader make these, without a Python object per instruction; it
    reads as the list of LineEntry it stands for (entries made when read), and equals that list."""

    __slots__ = ("col", "file", "line")

    def __init__(self, file: np.ndarray, line: np.ndarray, col: np.ndarray):
        if not len(file) == len(line) == len(col):
            raise ValueError("a line table's columns differ in length")
        self.file, self.line, self.col = file, line, col

    def __len__(self) -> int:
        return len(self.file)

    @overload
    def __getitem__(self, k: int) -> LineEntry: ...

    @overload
    def __getitem__(self, k: slice) -> list[LineEntry]: ...

    def __getitem__(self, k: int | slice) -> LineEntry | list[LineEntry]:
        if isinstance(k, slice):
            return list(self)[k]
        k = range(len(self))[k]  # negative indices, and IndexError past the end
        return LineEntry(k, int(self.file[k]), int(self.line[k]), int(self.col[k]))

    def __iter__(self) -> Iterator[LineEntry]:
        return map(LineEntry._make, zip(range(len(self)), self.file.tolist(), self.line.tolist(), self.col.tolist()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LineTable):
            return bool(np.array_equal(self.file, other.file) and np.array_equal(self.line, other.line)
                        and np.array_equal(self.col, other.col))
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable arrays, like the list it stands for

    def __repr__(self) -> str:
        return f"LineTable({len(self)} entries)"


@dataclass
class ObjectFile:
    kernel: str
    # per engine, its encoded instructions: bytes, or a read-only memoryview of bytes (the assembler's
    # object views its encoded words rather than copying them)
    streams: dict[str, bytes | memoryview] = field(default_factory=lambda: {e: b"" for e in ENGINES})
    # per stream, a list of LineEntry or a LineTable (the same entries as columns)
    lines: dict[str, Sequence[LineEntry]] = field(default_factory=lambda: {e: [] for e in ENGINES})
    files: list[str] = field(default_factory=list)
    tensors: list[TensorEntry] = field(default_factory=list)
    # The names of the source's `.sem` semaphores, by number, for messages (a deadlock names them) and
    # the disassembler; the ELF file keeps them in its .ncsim.sems section.
    semaphores: dict[int, str] = field(default_factory=dict)
    # The GpSimd programs (`ncsim.gpsimd.code.CoreProgram`), by index: the `.gpsimd` sections gpsimd_call runs.
    gpsimd: list[Any] = field(default_factory=list)
