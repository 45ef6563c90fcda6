"""How a long ncsim process keeps the memory it frees (glibc's malloc), for the next phase or point,
and why its large arrays come without huge pages.

A large program's phases (load, timing, race check, report) and a sweep's points each allocate and
free hundreds of MiB of arrays. glibc hands large blocks back to the system with munmap and trims
the heap's top, so the next phase takes the same amount again as fresh pages, and the kernel zeroes
every one of them (page faults). `keep_freed_memory` turns that off for the whole process: no mmap
for large blocks, no trimming, so freed memory is reused. The process then holds its peak memory
until it exits.

numpy asks the kernel for transparent huge pages for every array of 4 MiB or more
(madvise(MADV_HUGEPAGE)). Where the kernel then compacts memory synchronously to find them
(/sys/kernel/mm/transparent_hugepage/defrag = madvise, this machine's setting and a common default),
first touching such an array can cost more than filling it, and more so the longer the process has
run (its memory is fragmented). `keep_freed_memory` therefore also turns that advice off for the
process, and `small_pages` does it for one block (the timing model's, and the functional machine's
SBUF and PSUM, always).

Only the `ncsim` command (`run`, `nki`, `sweep`) and a sweep's workers call `keep_freed_memory`,
never the library on its own: a program that imports ncsim keeps glibc's and numpy's defaults.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_kept = False


def _huge_pages_switch() -> Any:
    """numpy's switch for its huge-page advice (`_set_madvise_hugepage(on) -> was on`; numpy
    documents it with the NUMPY_MADVISE_HUGEPAGE variable since 1.20), or None if this numpy has none."""
    import numpy as np

    return getattr(getattr(getattr(np, "_core", None), "multiarray", None), "_set_madvise_hugepage", None)


def huge_pages_off() -> bool:
    """numpy gives no huge-page advice from now on, in this process; False if this numpy has no switch
    (its advice then stays)."""
    return set_huge_pages(False)


def set_huge_pages(on: bool) -> bool:
    """numpy gives its huge-page advice for large arrays from now on, in this process, if `on`, else
    none; False if this numpy has no switch (its advice then stays as it is)."""
    switch = _huge_pages_switch()
    if switch is None:
        return False
    switch(on)
    return True


@contextmanager
def small_pages() -> Iterator[None]:
    """Arrays allocated inside come without numpy's huge-page advice; the setting is restored after.
    time_program on tools/bench_pipeline.py's 10^6 program, run cold in a fresh process: 0.27 to 0.70 s
    with the advice (0.27 when free huge pages were at hand, 0.67-0.70 when the kernel compacted
    first, the usual case here), 0.32 to 0.34 s without. Steady beats a gamble that mostly loses."""
    switch = _huge_pages_switch()
    if switch is None:
        yield
        return
    before = switch(False)
    try:
        yield
    finally:
        switch(before)


def keeps_freed_memory() -> bool:
    """Whether this process asked to keep freed memory (keep_freed_memory ran)."""
    return _kept


def keep_freed_memory() -> None:
    """Once per process: glibc keeps what is freed (mallopt M_MMAP_MAX 0, and M_TRIM_THRESHOLD -1,
    which mallopt(3) documents as turning trimming off: a threshold of 1 GiB, used before, was passed
    on tools/bench_pipeline.py's 10^6 program, whose phases leave a free heap top of about 1.1 GiB of
    address space, so every phase took its pages fresh again: load + timing + races + report of its
    object a second time in one process, 112,000 page faults and 1.16-1.30 s before, none and
    0.62-0.83 s now, on a noisy 2-core machine; the first pass is unchanged, its pages are new), and
    numpy gives no huge-page advice (see the module's docstring). The advice, measured in
    tools/bench_pipeline.py's 10^6-instruction case on the 2-core machine, with it / without it in
    the same minute: load 0.317 / 0.120 s, timing 0.279 / 0.179 s, races 0.160 / 0.138 s, the
    timing-only path 0.842 / 0.527 s.

    Measured: a sweep worker on the 2-core machine went from x1.01 to x1.5 over a loop
    (tools/bench_sweep.py; the page faults of two workers cost more than the points' own work), and
    load + timing + races + report of tools/bench_pipeline.py's 10^6-instruction object in one
    process went from 2.00 s to 1.82 s (best of 3; the report 0.47 s -> 0.36 s). Elsewhere than
    glibc the malloc part does nothing; without numpy's switch, the advice stays."""
    global _kept
    if _kept:
        return
    _kept = True
    huge_pages_off()
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_max = -1, -4  # glibc's mallopt parameters (malloc.h)
        libc.mallopt(m_mmap_max, 0)
        libc.mallopt(m_trim_threshold, -1)
    except (OSError, AttributeError):
        pass
