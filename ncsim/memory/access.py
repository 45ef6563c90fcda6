"""Hardware access patterns: which elements of which memory an operand reads or writes.

An on-chip (SBUF/PSUM) access pattern covers `partitions` consecutive partitions starting at
`partition`; inside every partition it visits the same elements: from byte `offset`, up to 4 free
dimensions of (step, count), counted in elements, outermost first (innermost last), as NKI writes them.
An HBM access pattern has no partitions: from byte address `offset`, up to 5 dimensions of
(step, count); the outermost one plays the partition dimension's role when HBM meets SBUF in a DMA.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, replace

import numpy as np

from ncsim.dtypes import DType


class Memory(enum.IntEnum):
    NONE = 0  # an optional operand that is absent
    SBUF = 1
    PSUM = 2
    HBM = 3
    IMM = 4  # not memory: an immediate scalar where an operand may be a constant or a [P,1] column

    @property
    def label(self) -> str:
        return self.name.lower()


ON_CHIP = (Memory.SBUF, Memory.PSUM)
_INTS = (int, np.integer)


@dataclass(frozen=True)
class AccessPattern:
    memory: Memory
    dtype: DType
    partition: int  # first partition (0 for HBM)
    partitions: int  # number of partitions (0 for HBM: no partition dimension)
    offset: int  # bytes: inside each partition on chip; the absolute address in HBM
    dims: tuple[tuple[int, int], ...]  # (step, count) in elements, outermost first

    # Derived sizes, computed once when the (immutable) pattern is made: the functional machine asks
    # for them several times per instruction, and a plain attribute is many times cheaper than a
    # property or functools.cached_property (measured: half of an instruction's fixed cost).
    on_chip: bool = field(init=False, repr=False, compare=False)
    free_shape: tuple[int, ...] = field(init=False, repr=False, compare=False)
    shape: tuple[int, ...] = field(init=False, repr=False, compare=False)  # partition dimension first on chip
    free_elements: int = field(init=False, repr=False, compare=False)
    num_elements: int = field(init=False, repr=False, compare=False)
    _span: tuple[int, int] | None = field(init=False, repr=False, compare=False)
    _hash: int | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        put = object.__setattr__
        on_chip = self.memory in ON_CHIP
        free_shape = tuple(c for _, c in self.dims)
        free = math.prod(free_shape)
        put(self, "on_chip", on_chip)
        put(self, "free_shape", free_shape)
        put(self, "shape", ((self.partitions,) if on_chip else ()) + free_shape)
        put(self, "free_elements", free)
        put(self, "num_elements", free * (self.partitions if on_chip else 1))
        # The span and the hash, made now when every field is a plain integer. A pattern with a value per
        # loop iteration in some field (the assembler's lanes, `ncsim.asm.lanes`) makes its span again
        # when asked rather than holding it, and its hash when first asked: the assembler makes such
        # patterns by the thousand (a loop body's, then each block's lanes of it to encode) and asks
        # neither (their arithmetic over every lane was most of the pattern's cost).
        plain = isinstance(self.offset, _INTS) and isinstance(self.partition, _INTS) and \
            isinstance(self.partitions, _INTS)
        for step, count in self.dims if plain else ():
            if not (isinstance(step, _INTS) and isinstance(count, _INTS)):
                plain = False
                break
        put(self, "_span", self._make_span() if plain else None)
        put(self, "_hash", hash((self.memory, self.dtype, self.partition, self.partitions, self.offset, self.dims))
            if plain else None)

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = hash((self.memory, self.dtype, self.partition, self.partitions, self.offset, self.dims))
            object.__setattr__(self, "_hash", h)
        return h

    def element_offsets(self) -> np.ndarray:
        """Element offsets (from `offset`) visited in one partition, in iteration order, as an array
        of `free_shape`."""
        idx = np.zeros((), dtype=np.int64)
        for step, count in self.dims:
            idx = idx[..., None] + np.arange(count, dtype=np.int64) * step
        return idx

    def byte_span(self) -> tuple[int, int]:
        """[lo, hi) bytes touched inside one partition (on chip) or in HBM, relative to address 0."""
        span = self._span
        return span if span is not None else self._make_span()

    def _make_span(self) -> tuple[int, int]:
        lo = hi = 0
        for step, count in self.dims:
            reach = step * (count - 1)
            lo, hi = (lo + reach, hi) if reach < 0 else (lo, hi + reach)
        size = self.dtype.itemsize
        return self.offset + lo * size, self.offset + hi * size + size

    def moved(self, offset: int) -> AccessPattern:
        """This pattern at byte offset `offset` (an int): what dataclasses.replace(self, offset=offset)
        gives, its derived fields taken from this one (the span moved with it) rather than made again,
        for the decoded program, which makes one per instruction offset of a loop body's pattern."""
        span = self._span
        if span is None or not isinstance(offset, _INTS):
            return replace(self, offset=offset)
        out = object.__new__(AccessPattern)
        d = out.__dict__
        d.update(self.__dict__)
        d["offset"] = offset
        d["_span"] = (span[0] + offset - self.offset, span[1] + offset - self.offset)
        d["_hash"] = hash((self.memory, self.dtype, self.partition, self.partitions, offset, self.dims))
        return out

    def innermost_step_bytes(self) -> int:
        return abs(self.dims[-1][0]) * self.dtype.itemsize if self.dims else self.dtype.itemsize


@dataclass(frozen=True)
class Immediate:
    """A constant scalar operand. `value` is a Python float (already an exact fp32 value) or int."""

    value: float | int
    dtype: DType

    @property
    def memory(self) -> Memory:
        return Memory.IMM
