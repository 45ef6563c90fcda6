"""The memory state of one NeuronCore: SBUF, PSUM, the declared HBM tensors, and which bytes were written.

Memory is untyped bytes; an access pattern (`ncsim.memory.access.AccessPattern`) is turned into a
numpy view of its dtype with the pattern's strides, so a read is one strided copy and a write one
strided assignment.

- SBUF is pmax x sbuf_partition_bytes, PSUM pmax x psum_partition_bytes, each one numpy array. Only
  the leading bytes of each partition that the program uses are filled when the state is made (the
  `extents` its footprints give); a pattern that reaches past them fills the rest up to its end
  first, so every byte still reads as the sentinel until written, and a kernel that uses a few KiB
  of SBUF does not pay for touching all 24 MiB of it (and its mask).
- HBM takes host memory only for the declared tensors: their byte ranges are merged into segments
  (overlapping or touching tensors share one), and an access must lie inside one segment. A tensor's
  bytes are filled when an access first reaches them, and not at all when that access writes the
  whole tensor (an input the host loads).
- Every byte starts as 0xFF, the sentinel: as fp32, bf16, fp16 and both fp8 formats, a byte run of
  0xFF is a NaN; as integers it is -1 (signed) or the largest value (unsigned). A parallel mask
  records which bytes were written, so a read of never-written memory can be reported.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from ncsim.asm.objfile import TensorEntry
from ncsim.config import Config
from ncsim.memory.access import AccessPattern, Memory
from ncsim.runtime.heap import small_pages

SENTINEL_BYTE = 0xFF
VIEW_CACHE = 65536  # read views kept at most (cleared when full: a huge program does not grow it forever)


class AccessError(Exception):
    """An access outside the memory that exists; the caller places it at the instruction."""


@dataclass
class Region:
    """One block of bytes with its written mask: an on-chip memory (2-D, a row per partition) or
    an HBM segment (1-D, starting at HBM address `base`)."""

    data: np.ndarray  # uint8
    written: np.ndarray  # bool, same shape
    base: int = 0

    @property
    def flat(self) -> np.ndarray:
        return self.data.reshape(-1)


class MemoryState:
    def __init__(self, config: Config, tensors: list[TensorEntry], extents: dict[Memory, int] | None = None):
        """`extents`: the bytes of each partition of SBUF and PSUM the program is known to use (the
        end of its furthest footprint), filled now; anything further is filled when first reached."""
        self.config = config
        p = config.pmax
        self.sbuf = _on_chip((p, config.sbuf_partition_bytes))
        self.psum = _on_chip((p, config.psum_partition_bytes))
        self._filled = {Memory.SBUF: 0, Memory.PSUM: 0}  # leading bytes of each partition filled so far
        for m, end in (extents or {}).items():
            self._fill(m, end)
        segments: list[list[int]] = []  # [lo, hi) of HBM: the declared tensors' spans, merged
        for lo, hi in sorted((t.address, t.address + t.nbytes) for t in tensors if t.memory == "hbm" and t.nbytes):
            if segments and lo <= segments[-1][1]:
                segments[-1][1] = max(segments[-1][1], hi)
            else:
                segments.append([lo, hi])
        # Unfilled, as on chip: each tensor's bytes are filled when an access first reaches them
        # (_fill_hbm), or not at all when the first access writes the whole tensor (an input).
        self.hbm = [Region(np.empty(hi - lo, np.uint8), np.zeros(hi - lo, np.bool_), lo) for lo, hi in segments]
        self._hbm_starts = [r.base for r in self.hbm]
        # Access patterns whose every byte has been written. Bytes never become unwritten again, so a
        # pattern found complete once needs no second look: loops reuse the same patterns, and this
        # set spares each of their reads and writes a pass over the written mask (the mask check was
        # most of an instruction's time on 128 x 128 fp32 tiles).
        self._complete: set[AccessPattern] = set()
        self._located: dict[AccessPattern, tuple[Region, int, tuple[int, ...], tuple[int, ...]]] = {}
        self._read_views: dict[AccessPattern, np.ndarray] = {}
        self._write_views: dict[AccessPattern, np.ndarray] = {}
        self._views5: dict[AccessPattern, np.ndarray] = {}
        # The declared HBM tensors by address, with the pattern of each whole tensor: a read inside a
        # tensor written whole (an input the host loaded) needs no look at the mask.
        self._tensors = sorted(((t.address, t.address + t.nbytes, self.tensor_pattern(t))
                                for t in tensors if t.memory == "hbm" and t.nbytes), key=lambda e: e[:2])
        self._unfilled = set(range(len(self._tensors)))  # those of them not yet filled with the sentinel
        self._whole = {pattern: i for i, (_, _, pattern) in enumerate(self._tensors)}
        self._tensor_starts = [lo for lo, _, _ in self._tensors]

    # ------------------------------------------------------------------ locating an access
    def _hbm_region(self, ap: AccessPattern) -> Region:
        lo, hi = ap.byte_span()
        i = bisect.bisect_right(self._hbm_starts, lo) - 1
        if i < 0 or hi > self.hbm[i].base + self.hbm[i].data.size or lo < self.hbm[i].base:
            raise AccessError(f"HBM bytes {lo}..{hi - 1} are not inside one declared HBM tensor"
                              " (only declared tensors exist in the simulated HBM)")
        return self.hbm[i]

    def _locate(self, ap: AccessPattern) -> tuple[Region, int, tuple[int, ...], tuple[int, ...]]:
        """(region, byte offset of element [0, ...] in region.flat, shape, byte strides)."""
        where = self._located.get(ap)
        if where is None:
            where = self._located[ap] = self._locate_new(ap)
        return where

    def _locate_new(self, ap: AccessPattern) -> tuple[Region, int, tuple[int, ...], tuple[int, ...]]:
        size = ap.dtype.itemsize
        free_shape = tuple(c for _, c in ap.dims)
        free_strides = tuple(s * size for s, _ in ap.dims)
        if ap.memory == Memory.HBM:
            region = self._hbm_region(ap)
            if self._unfilled:
                self._fill_hbm(*ap.byte_span())
            return region, ap.offset - region.base, free_shape, free_strides
        region = self.sbuf if ap.memory == Memory.SBUF else self.psum
        rows, row_bytes = region.data.shape
        lo, hi = ap.byte_span()
        if lo < 0 or hi > row_bytes or ap.partition < 0 or ap.partition + ap.partitions > rows:
            raise AccessError(f"{ap.memory.label} access partitions {ap.partition}:{ap.partition + ap.partitions},"
                              f" bytes {lo}..{hi - 1} lies outside {ap.memory.label} ({rows} x {row_bytes} bytes)")
        if hi > self._filled[ap.memory]:
            self._fill(ap.memory, hi)
        start = ap.partition * row_bytes + ap.offset
        return region, start, (ap.partitions,) + free_shape, (row_bytes,) + free_strides

    def _fill(self, memory: Memory, end: int) -> None:
        """Make the bytes [filled, end) of every partition of an on-chip memory the sentinel and
        unwritten (no view of them exists yet: every view is made through _locate, which fills first)."""
        region = self.sbuf if memory == Memory.SBUF else self.psum
        lo, hi = self._filled[memory], min(end, region.data.shape[1])
        if hi > lo:
            region.data[:, lo:hi] = SENTINEL_BYTE
            region.written[:, lo:hi] = False  # zeros already: touched now, so the run's first writes take no page faults
            self._filled[memory] = hi

    def _fill_hbm(self, lo: int, hi: int) -> None:
        """Fill every not yet filled HBM tensor that overlaps bytes [lo, hi) with the sentinel. None of
        its bytes was written: a write locates its pattern first, which fills every tensor it overlaps
        (the tensor a whole-tensor write skips is written whole, and overlaps none that is unfilled)."""
        for i in [i for i in self._unfilled if self._tensors[i][0] < hi and self._tensors[i][1] > lo]:
            t_lo, t_hi, _ = self._tensors[i]
            region = self.hbm[bisect.bisect_right(self._hbm_starts, t_lo) - 1]
            span = slice(t_lo - region.base, t_hi - region.base)
            region.data[span] = SENTINEL_BYTE
            self._unfilled.discard(i)

    def view(self, ap: AccessPattern, *, mask: bool = False) -> np.ndarray:
        """A writable view of the elements `ap` visits, in its shape (partition axis first on chip).
        With mask=True, the written-mask bytes of each element's first byte instead."""
        region, start, shape, strides = self._locate(ap)
        if mask:
            return np.ndarray(shape, np.bool_, region.written.reshape(-1), start, strides)
        return np.ndarray(shape, ap.dtype.storage, region.flat, start, strides)

    def read_view(self, ap: AccessPattern) -> np.ndarray:
        """A read-only view of the elements `ap` visits. The views are kept (memory never moves), so a
        loop that reads the same pattern again pays no view construction (a third of a small
        instruction's fixed cost)."""
        return self._kept_view(self._read_views, ap, writeable=False)

    def _kept_view(self, kept: dict[AccessPattern, np.ndarray], ap: AccessPattern, writeable: bool) -> np.ndarray:
        v = kept.get(ap)
        if v is None:
            if len(kept) >= VIEW_CACHE:
                kept.clear()
            v = self.view(ap)
            v.flags.writeable = writeable
            kept[ap] = v
        return v

    def view5(self, ap: AccessPattern) -> np.ndarray | None:
        """A writable view of the elements `ap` visits with five axes: its shape (partition axis first
        on chip) after as many leading axes of one element as it takes. The compiled elementwise kernels
        take this one form (ncsim.engines.alu.apply_into), so None where fit5 refuses it; kept like
        the read views."""
        v = self._views5.get(ap, self)  # self: not made yet (None is a refused view)
        if v is not self:
            return v
        if len(self._views5) >= VIEW_CACHE:
            self._views5.clear()
        region, start, shape, strides = self._locate(ap)
        pad = 5 - len(shape)
        v = self._views5[ap] = fit5(np.ndarray((1,) * pad + shape, ap.dtype.storage, region.flat, start,
                                               (0,) * pad + strides))
        return v

    def column5(self, ap: AccessPattern, shape: tuple[int, ...], axis: int) -> np.ndarray | None:
        """A [P, 1] on-chip column as a five-axis view of `shape` whose axis `axis` walks the
        partitions and whose other axes repeat the column's value (stride 0): a per-partition scalar
        laid against a view5 of that shape (None where fit5 refuses it)."""
        region, start, _, strides = self._locate(ap)
        steps = [0] * 5
        steps[axis] = strides[0]
        return fit5(np.ndarray(shape, ap.dtype.storage, region.flat, start, tuple(steps)))

    def _byte_mask_view(self, ap: AccessPattern) -> np.ndarray:
        """The written-mask bytes of the elements `ap` visits, to fill or to test with all(). A pattern
        that visits one contiguous run of bytes in each partition gets that run as a plain 2-D slice,
        one with a unit innermost step a view of byte runs: both many times faster than the general
        element-by-byte view (measured: 360 us -> 20 us to mark a [128, 128] fp32 tile of HBM).
        The shape is not the pattern's: count elements with the general view (see unwritten)."""
        region, start, shape, strides = self._locate(ap)
        size = ap.dtype.itemsize
        lo, hi = ap.byte_span()
        if hi - lo == ap.free_elements * size and _dense(ap.dims):
            if ap.memory == Memory.HBM:
                return region.written[lo - region.base : hi - region.base]
            return region.written[ap.partition : ap.partition + ap.partitions, lo:hi]
        if ap.dims and ap.dims[-1][0] == 1:  # unit innermost step: each innermost run is one byte run
            run = shape[-1] * size
            return np.ndarray(shape[:-1] + (run,), np.bool_, region.written.reshape(-1), start, strides[:-1] + (1,))
        return np.ndarray(shape + (size,), np.bool_, region.written.reshape(-1), start, strides + (1,))

    # ------------------------------------------------------------------ reads and writes
    def read(self, ap: AccessPattern) -> np.ndarray:
        """A copy of the stored values `ap` visits (storage dtype, `ap.shape`)."""
        return self.view(ap).copy()

    def unwritten(self, ap: AccessPattern) -> int:
        """How many elements `ap` visits whose bytes were never written."""
        if ap in self._complete:
            return 0
        if ap.memory == Memory.HBM and self._tensors:
            lo, hi = ap.byte_span()
            i = bisect.bisect_right(self._tensor_starts, lo) - 1
            if i >= 0 and hi <= self._tensors[i][1] and self._tensors[i][2] in self._complete:
                self._complete.add(ap)
                return 0
        if self._byte_mask_view(ap).all():
            self._complete.add(ap)
            return 0
        region, start, shape, strides = self._locate(ap)
        m = np.ndarray(shape + (ap.dtype.itemsize,), np.bool_, region.written.reshape(-1), start, strides + (1,))
        return int(np.count_nonzero(~m.all(axis=-1)))

    def write(self, ap: AccessPattern, raw: np.ndarray) -> None:
        """Store `raw` (storage dtype, `ap.shape` or broadcastable to it) at the elements `ap` visits."""
        if self._unfilled:
            self._unfilled.discard(self._whole.get(ap, -1))  # every byte of it is written now: no fill
        self._kept_view(self._write_views, ap, writeable=True)[...] = raw
        self.mark_written(ap)

    def mark_written(self, ap: AccessPattern) -> None:
        """Record that every byte `ap` visits is written (for a store made straight into a view)."""
        if ap not in self._complete:
            self._byte_mask_view(ap)[...] = True
            self._complete.add(ap)

    def tensor_pattern(self, t: TensorEntry) -> AccessPattern:
        """The access pattern of a whole declared tensor (row-major)."""
        dims = []
        step = 1
        free = t.shape if t.memory == "hbm" else t.shape[1:]
        for count in reversed(free):
            dims.append((step, count))
            step *= count
        dims.reverse()
        memory = {"hbm": Memory.HBM, "sbuf": Memory.SBUF, "psum": Memory.PSUM}[t.memory]
        partitions = 0 if memory == Memory.HBM else t.shape[0]
        return AccessPattern(memory, t.dtype, t.partition, partitions, t.address, tuple(dims))


def fit5(view: np.ndarray) -> np.ndarray | None:
    """`view` if the compiled elementwise kernels take it as it is, else None: aligned and neither C-
    nor F-contiguous (numba would compile those as other signatures; views of memory seldom are)."""
    flags = view.flags
    return None if flags.c_contiguous or flags.f_contiguous or not flags.aligned else view


def _dense(dims: tuple[tuple[int, int], ...]) -> bool:
    """Whether free dimensions (step, count), outermost first, visit consecutive elements in order."""
    expect = 1
    for step, count in reversed(dims):
        if count > 1 and step != expect:
            return False
        expect *= count
    return True


def _on_chip(shape: tuple[int, int]) -> Region:
    """An on-chip memory, none of it filled yet (MemoryState._fill fills the bytes in use): pages the
    program never touches are never touched here either. In small pages (ncsim.runtime.heap), always:
    a program touches the first bytes of each partition's row, and with numpy's huge-page advice each
    of those touches would take (and zero) a 2 MiB page of a 24 MiB array, and where the kernel
    compacts memory first, wait for it. Machine(giou.s) from Python (12,800 bytes per partition
    filled), alternating in one process: 9.8-11.2 ms with the advice, 4.9-5.2 ms without. (The
    `ncsim` command turns the advice off for the whole process: ncsim.runtime.heap.)"""
    with small_pages():
        return Region(np.empty(shape, np.uint8), np.zeros(shape, np.bool_))
