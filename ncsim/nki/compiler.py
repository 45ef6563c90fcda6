"""`nki.compiler` (ncc) as ncsim traces it: direct allocation of SBUF and PSUM tensors.

    t = nl.ndarray((4, nl.par_dim(128), 512), dtype=nl.bfloat16,
                   buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))

A tensor declared with `buffer=ncc.sbuf.alloc(func)` (or `ncc.psum.alloc(func)`) has its dimensions
before the partition dimension as logical blocks; ncsim calls `func(idx, pdim_size, fdim_size)` once
per block index `idx` (a tuple, one integer per block dimension), with the tile's partitions and its
bytes per partition, and places that block's tile where `func` says: `(start_partition, byte_addr)`
in SBUF, `(bank, start_partition, byte_addr)` in PSUM. Blocks that map to the same place share one
physical tile. `mod_alloc` is `alloc` with the documented modulo function: along each of the bank,
partition and free directions, the block index is taken modulo the given tile counts, linearised row
major, scaled by the bank (1), the tile's partitions or its bytes per partition, and added to the base.
(NKI Direct Allocation Developer Guide and the API reference of nki.compiler.sbuf.alloc,
sbuf.mod_alloc, psum.alloc and psum.mod_alloc, aws-neuron-sdk general/nki/nki_direct_allocation_guide.rst.)

The rules ncsim holds a placement to, each refused at the declaration's line: the start partition
fits the tile's partition count (more than 64 partitions start at 0; 33-64 at 0 or 64; 1-32 at 0, 32,
64 or 96), the tile lies inside SBUF's usable bytes per partition or inside one PSUM bank (8 banks of
2 KiB per partition), a PSUM tile starts at partition 0 and byte 0 of its bank (the guide's known
limitation), the byte address is a multiple of the element size, the kernel declares no HBM tensor
but its outputs, and a kernel's SBUF (PSUM) tensors are all allocated directly or all automatically;
and, at the instruction, a logical tile is not read after another logical tile of its declaration
sharing its physical tile has written it (the guide's lifetime rule). A loop of nl.affine_range / sequential_range runs its body once per
iteration in ncsim, where NKI traces it once: a direct allocation inside such loops takes the places
it got in their first iterations (docs/nki.md "Direct allocation").

The decorators: `force_auto_alloc` makes ncsim place the kernel's tensors by its own buffer policy,
ignoring their direct allocations (what the guide suggests to check a kernel for lifetime conflicts);
`skip_middle_end_transformations` and `enable_stack_allocator` steer passes of NKI's compiler that
ncsim does not have, and change nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Self

__all__ = ["enable_stack_allocator", "force_auto_alloc", "no_reorder", "psum", "sbuf", "skip_middle_end_transformations"]


class Direct:
    """A direct allocation: `buffer=` of an NKI tensor declaration in SBUF or PSUM."""

    def __init__(self, memory: str, func: Callable[..., Any], text: str):
        if not callable(func):
            _refuse(f"ncc.{memory}.alloc takes a function (idx, pdim_size, fdim_size) -> its place, not {func!r}")
        self.memory = memory
        self.func = func
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _modulo(base: int, tiles: tuple[int, ...], scale: int, idx: tuple[int, ...]) -> int:
    """base + scale * (idx taken modulo `tiles`, linearised row major over `tiles`), as the reference's
    formula reads: no tiles means one along each block dimension; the index and the tile counts are
    paired from the first dimension, as far as the shorter goes."""
    counts = tuple(tiles) if tiles else (1,) * len(idx)
    flat = 0
    for dim, (i, n) in enumerate(zip(idx, counts)):
        flat += (int(i) % int(n)) * math.prod(int(c) for c in counts[dim + 1:])
    return int(base) + flat * int(scale)


def _refuse(message: str) -> None:
    """In a kernel being traced, an error at the kernel's line; else a TypeError."""
    from ncsim.nki import tracer

    if tracer._current is not None:
        raise tracer._current.fail(message)
    raise TypeError(message)


def _tiles(name: str, v: Any) -> tuple[int, ...]:
    t = (v,) if isinstance(v, int) else tuple(v) if isinstance(v, (tuple, list)) else None
    if t is None or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in t):
        _refuse(f"{name} takes a tuple of positive tile counts, not {v!r}")
    return t  # type: ignore[return-value]


class _SbufAlloc:
    """ncc.sbuf: alloc, mod_alloc, auto_alloc."""

    @staticmethod
    def alloc(func: Callable[..., Any]) -> Direct:
        return Direct("sbuf", func, f"ncc.sbuf.alloc({getattr(func, '__name__', func)!s})")

    @staticmethod
    def mod_alloc(*, base_addr: int, base_partition: int = 0, num_par_tiles: Any = (),
                  num_free_tiles: Any = ()) -> Direct:
        par, free = _tiles("num_par_tiles", num_par_tiles), _tiles("num_free_tiles", num_free_tiles)

        def place(idx: tuple[int, ...], pdim_size: int, fdim_size: int) -> tuple[int, int]:
            return (_modulo(base_partition, par, pdim_size, idx), _modulo(base_addr, free, fdim_size, idx))

        return Direct("sbuf", place, f"ncc.sbuf.mod_alloc(base_addr={base_addr}, base_partition={base_partition},"
                                     f" num_par_tiles={par}, num_free_tiles={free})")

    @staticmethod
    def auto_alloc() -> Any:
        from ncsim.nki import language

        return language.sbuf


class _PsumAlloc:
    """ncc.psum: alloc, mod_alloc, auto_alloc."""

    @staticmethod
    def alloc(func: Callable[..., Any]) -> Direct:
        return Direct("psum", func, f"ncc.psum.alloc({getattr(func, '__name__', func)!s})")

    @staticmethod
    def mod_alloc(*, base_bank: int, base_addr: int = 0, base_partition: int = 0, num_bank_tiles: Any = (),
                  num_par_tiles: Any = (), num_free_tiles: Any = ()) -> Direct:
        banks = _tiles("num_bank_tiles", num_bank_tiles)
        par, free = _tiles("num_par_tiles", num_par_tiles), _tiles("num_free_tiles", num_free_tiles)

        def place(idx: tuple[int, ...], pdim_size: int, fdim_size: int) -> tuple[int, int, int]:
            return (_modulo(base_bank, banks, 1, idx), _modulo(base_partition, par, pdim_size, idx),
                    _modulo(base_addr, free, fdim_size, idx))

        return Direct("psum", place, f"ncc.psum.mod_alloc(base_bank={base_bank}, base_addr={base_addr},"
                                     f" base_partition={base_partition}, num_bank_tiles={banks},"
                                     f" num_par_tiles={par}, num_free_tiles={free})")

    @staticmethod
    def auto_alloc() -> Any:
        from ncsim.nki import language

        return language.psum


sbuf = _SbufAlloc()
psum = _PsumAlloc()

FORCE_AUTO = "__ncsim_force_auto_alloc__"


def force_auto_alloc(func: Any) -> Any:
    """The kernel's tensors are placed by ncsim's buffer policy; their direct allocations are ignored."""
    target = getattr(func, "func", func)  # an @nki.jit Kernel, or the function itself
    setattr(target, FORCE_AUTO, True)
    return func


class no_reorder:
    """`ncc.no_reorder()` (or `nl.no_reorder()`), as a `with` block or a loop's `directives=`: NKI's
    scheduler keeps the operations made in it in program order ("Without this directive, the compiler
    scheduler is free to reorder independent operations", nki.language.no_reorder), and so does
    ncsim's (ncsim.nki.schedule)."""

    def __enter__(self) -> Self:
        from ncsim.nki import tracer

        if tracer._current is not None:
            tracer._current.no_reorder(True)
        return self

    def __exit__(self, *exc: object) -> bool:
        from ncsim.nki import tracer

        if tracer._current is not None:
            tracer._current.no_reorder(False)
        return False


def skip_middle_end_transformations(func: Any) -> Any:
    """NKI's compiler skips its middle-end passes for the kernel; ncsim has none (no change)."""
    return func


def enable_stack_allocator(func: Any = None, **_: Any) -> Any:
    """NKI's compiler places automatically allocated tensors with its stack allocator; ncsim's
    automatic placement is its buffer policy (no change)."""
    if func is None:
        return lambda f: f
    return func
