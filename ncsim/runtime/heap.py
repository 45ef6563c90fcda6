"""How a long ncsim process keeps the memory it frees (glibc's malloc), for the next phase or point.

A large program's phases (load, timing, race check, report) and a sweep's points each allocate and
free hundreds of MiB of arrays. glibc hands large blocks back to the system with munmap and trims
the heap's top, so the next phase takes the same amount again as fresh pages, and the kernel zeroes
every one of them (page faults). `keep_freed_memory` turns that off for the whole process: no mmap
for large blocks, no trimming, so freed memory is reused. The process then holds its peak memory
until it exits. Only the `ncsim` command (`run`, `nki`, `sweep`) and a sweep's workers call it,
never the library on its own: a program that imports ncsim keeps glibc's defaults.
"""

from __future__ import annotations

_kept = False


def keep_freed_memory() -> None:
    """Once per process: glibc keeps what is freed (mallopt M_MMAP_MAX 0, M_TRIM_THRESHOLD 1 GiB).

    Measured: a sweep worker on the 2-core machine went from x1.01 to x1.5 over a loop
    (tools/bench_sweep.py; the page faults of two workers cost more than the points' own work), and
    load + timing + races + report of tools/bench_pipeline.py's 10^6-instruction object in one
    process went from 2.00 s to 1.82 s (best of 3; the report 0.47 s -> 0.36 s). Elsewhere than
    glibc: nothing."""
    global _kept
    if _kept:
        return
    _kept = True
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_max = -1, -4  # glibc's mallopt parameters (malloc.h)
        libc.mallopt(m_mmap_max, 0)
        libc.mallopt(m_trim_threshold, 2**30)
    except (OSError, AttributeError):
        pass
