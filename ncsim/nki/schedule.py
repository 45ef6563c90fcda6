"""The NKI front end's instruction scheduler: the order in which a traced kernel's instructions issue.

NKI's compiler schedules a kernel's instructions: "Without this directive, the compiler scheduler is
free to reorder independent operations for better hardware utilization" (nki.language.no_reorder; the
NKI scheduling guide: the with_schedule edges and no_reorder blocks "constrain the reordering that the
automatic scheduler will do"). Each engine runs its instructions in order, so the order chosen decides
what overlaps: two loop iterations written one after the other, each a chain of load -> compute ->
store, run one after the other in program order, while the compiler interleaves them. ncsim's front
end traces in program order (`ncsim.nki.tracer`) and then, by default, reorders the program the way
such a scheduler does, a list scheduler:

1. Dependencies. Instruction b depends on an earlier a when their footprints (the decoded program's
   per-operand boxes: memory, partitions, bytes [lo, hi); `ncsim.program`) overlap and one of them
   writes (read-after-write, write-after-read, write-after-write). Boxes contain the bytes an access
   touches, so every true dependency is found (a few more may be: two strided patterns whose boxes
   meet). An access whose box a later write's box contains is dropped from the search: anything
   that meets it meets the write, which depends on it. Two instructions copied at a run-time offset
   (tensor_copy_dynamic_src / _dst) may touch any bytes: everything before one comes before it, and
   everything after it after it. Instructions in one `no_reorder` block keep their order.
2. Durations, from a timing of the program in its written order (`ncsim.runtime.timing`): each engine
   instruction's busy time, and for a dma_copy its transfer's lead (the latency less the work it
   overlaps), the time its pieces move, and the DMA engines they move on.
3. List scheduling. Time runs forward; each engine, when free, takes among its instructions whose
   dependencies are done the one first in program order (if none is, the one ready first). A
   dma_copy is taken by its issuing engine, which goes on at once; its data moves from its trigger
   plus its lead, once its DMA engines are free, as in the timing model. The order the instructions
   are taken in is the new program order: a topological order of the dependencies, so the values are
   those of the written order, bit for bit (the synchronisation of the new order makes every wait
   exact again, `ncsim.asm.sync`).
4. The kernel keeps whichever of the two orders the timing model finds faster (a compiler schedules
   by its own cost model; ncsim's is the timing model itself). Ties keep the written order.

Speed: both passes are compiled (numba); the dependencies are O(footprints x live accesses).
"""

from __future__ import annotations

import numba
import numpy as np

from ncsim import isa
from ncsim.arrays import distinct

_NEVER = np.iinfo(np.int64).max
# run-time offsets: their footprint is not their static pattern's box
BARRIERS = frozenset(isa.BY_MNEMONIC[m].opcode for m in ("tensor_copy_dynamic_src", "tensor_copy_dynamic_dst"))


def main_instructions(origin: np.ndarray, n: int) -> np.ndarray:
    """k of each program-order instruction g: the last k made for it (an inserted sem_wait comes before
    its instruction, in its stream)."""
    main = np.full(n, -1, np.int64)
    main[origin] = np.arange(len(origin))  # numpy assigns in order: the last k of each origin wins
    return main


@numba.njit(cache=True, nogil=True)
def _grow(a, need):
    if need <= len(a):
        return a
    b = np.empty(max(need, 2 * len(a)), a.dtype)
    b[:len(a)] = a
    return b


@numba.njit(cache=True, nogil=True)
def _edge(src, dst, m, a, g, seen):
    """Add the edge a -> g unless made already; returns (src, dst, m)."""
    if seen[a] != g:
        seen[a] = g
        src = _grow(src, m + 1)
        dst = _grow(dst, m + 1)
        src[m] = a
        dst[m] = g
        m += 1
    return src, dst, m


@numba.njit(cache=True, nogil=True)
def _footprint(row, fp_memory, fp_access, fp_partition, fp_partitions, fp_lo, fp_hi):
    """Footprint row `row` as (memory code, 1 if it writes, first partition, end partition, lo, hi)."""
    p0 = fp_partition[row]
    return (fp_memory[row], 1 if (fp_access[row] & 2) != 0 else 0, p0, p0 + max(fp_partitions[row], 1),
            fp_lo[row], fp_hi[row])


@numba.njit(cache=True, nogil=True)
def _meets(a0, a1, a2, a3, p0, p1, lo, hi):
    """Whether box (first partition a0, end partition a1, bytes [a2, a3)) meets [p0, p1) x [lo, hi)."""
    return a0 < p1 and p0 < a1 and a2 < hi and lo < a3


@numba.njit(cache=True, nogil=True)
def dependencies(ks, fp_ptr, fp_memory, fp_partition, fp_partitions, fp_lo, fp_hi, fp_access, barrier, region):
    """Edges (src, dst) of program-order instructions g = 0..n-1 (ks[g] their k in the decoded
    program's columns): see the module docstring (1).

    The live accesses are kept per (memory, read or write) as a table of distinct boxes, each with the
    chain of instructions that made it (tiles are used at a few places many times: a hoisted tile read
    by a thousand matmuls is one box): a read searches its memory's write boxes, a write both, and a
    write retires the boxes it contains. Each table also keeps the bounding box of its boxes, so an
    access outside it (a store, beside the loads of an input tensor) searches no further."""
    n = len(ks)
    lists = 8  # memory code (1..3) x 2 + write
    cap = 64
    box = np.empty((lists, cap, 4), np.int64)  # per list, its distinct boxes: first partition, end partition, lo, hi
    head = np.empty((lists, cap), np.int64)  # each box's chain: its last access (index into acc_g)
    size = np.zeros(lists, np.int64)
    span = np.zeros((lists, 4), np.int64)  # each list's bounding box
    where = {(np.int64(0), np.int64(0), np.int64(0), np.int64(0), np.int64(0)): np.int64(0)}  # box -> its row
    del where[(0, 0, 0, 0, 0)]
    rows = len(fp_memory)
    acc_g = np.empty(rows + 1, np.int64)  # accesses: instruction, next (older) access of the same box
    acc_next = np.empty(rows + 1, np.int64)
    n_acc = 0
    src = np.empty(4 * n + 16, np.int64)
    dst = np.empty(4 * n + 16, np.int64)
    m = 0
    seen = np.full(n, -1, np.int64)  # seen[a] == g: the edge a -> g is made
    last_barrier = -1
    since = 0  # first instruction after the last barrier
    last_in_region = np.full(n + 1, -1, np.int64)
    for g in range(n):
        k = ks[g]
        if barrier[g]:
            for a in range(since, g):
                src, dst, m = _edge(src, dst, m, a, g, seen)
            if last_barrier >= 0:
                src, dst, m = _edge(src, dst, m, last_barrier, g, seen)
            last_barrier = g
            since = g + 1
            size[:] = 0  # everything before is ordered before the barrier
            where.clear()
            continue
        if last_barrier >= 0:
            src, dst, m = _edge(src, dst, m, last_barrier, g, seen)
        r = region[g]
        if r >= 0:
            if last_in_region[r] >= 0:
                src, dst, m = _edge(src, dst, m, last_in_region[r], g, seen)
            last_in_region[r] = g
        lo_row, hi_row = fp_ptr[k], fp_ptr[k + 1]
        for row in range(lo_row, hi_row):
            mem, w, p0, p1, lo, hi = _footprint(row, fp_memory, fp_access, fp_partition, fp_partitions, fp_lo, fp_hi)
            if mem < 1 or mem > 3:
                continue
            for li in range(2 * mem + 1 - w, 2 * mem + 2):  # a read: the writes; a write: both
                if size[li] == 0 or not _meets(span[li, 0], span[li, 1], span[li, 2], span[li, 3], p0, p1, lo, hi):
                    continue
                for j in range(size[li]):
                    if _meets(box[li, j, 0], box[li, j, 1], box[li, j, 2], box[li, j, 3], p0, p1, lo, hi):
                        e = head[li, j]
                        while e >= 0:
                            a = acc_g[e]
                            if a != g:
                                src, dst, m = _edge(src, dst, m, a, g, seen)
                            e = acc_next[e]
        # g's accesses join the live ones; its writes retire the boxes they contain
        for row in range(lo_row, hi_row):
            mem, w, p0, p1, lo, hi = _footprint(row, fp_memory, fp_access, fp_partition, fp_partitions, fp_lo, fp_hi)
            if mem < 1 or mem > 3:
                continue
            if w:
                for li in range(2 * mem, 2 * mem + 2):
                    if size[li] == 0 or not _meets(span[li, 0], span[li, 1], span[li, 2], span[li, 3], p0, p1, lo, hi):
                        continue
                    j = 0
                    for i in range(size[li]):
                        e = head[li, i]
                        mine = e >= 0 and acc_g[e] == g  # a box g made itself (its read of what it writes)
                        key = (np.int64(li), box[li, i, 0], box[li, i, 1], box[li, i, 2], box[li, i, 3])
                        if mine or not (p0 <= box[li, i, 0] and box[li, i, 1] <= p1
                                        and lo <= box[li, i, 2] and box[li, i, 3] <= hi):
                            if j != i:
                                box[li, j] = box[li, i]
                                head[li, j] = head[li, i]
                                where[key] = np.int64(j)
                            j += 1
                        else:
                            del where[key]
                    if j < size[li]:
                        size[li] = j
                        if j:
                            for c in range(4):
                                span[li, c] = box[li, 0, c]
                            for i in range(1, j):
                                span[li, 0] = min(span[li, 0], box[li, i, 0])
                                span[li, 1] = max(span[li, 1], box[li, i, 1])
                                span[li, 2] = min(span[li, 2], box[li, i, 2])
                                span[li, 3] = max(span[li, 3], box[li, i, 3])
            li = 2 * mem + w
            key = (np.int64(li), np.int64(p0), np.int64(p1), np.int64(lo), np.int64(hi))
            found = where[key] if key in where else np.int64(-1)
            if found < 0:
                if size[li] == box.shape[1]:
                    bigger = np.empty((lists, 2 * box.shape[1], 4), np.int64)
                    bigger[:, :box.shape[1]] = box
                    box = bigger
                    more = np.empty((lists, 2 * head.shape[1]), np.int64)
                    more[:, :head.shape[1]] = head
                    head = more
                found = size[li]
                where[key] = found
                head[li, found] = -1
                box[li, found, 0] = p0
                box[li, found, 1] = p1
                box[li, found, 2] = lo
                box[li, found, 3] = hi
                if found == 0:
                    span[li, 0], span[li, 1], span[li, 2], span[li, 3] = p0, p1, lo, hi
                else:
                    span[li, 0] = min(span[li, 0], p0)
                    span[li, 1] = max(span[li, 1], p1)
                    span[li, 2] = min(span[li, 2], lo)
                    span[li, 3] = max(span[li, 3], hi)
                size[li] = found + 1
            elif head[li, found] >= 0 and acc_g[head[li, found]] == g:
                continue  # g already made this box
            acc_g[n_acc] = g
            acc_next[n_acc] = head[li, found]
            head[li, found] = n_acc
            n_acc += 1
    return src[:m].copy(), dst[:m].copy()


@numba.njit(cache=True, nogil=True)
def _push(heap_a, heap_b, size, a, b):
    """Push (a, b) onto the min-heap of pairs heap_a/heap_b holding `size`; returns the new size."""
    i = size
    heap_a[i] = a
    heap_b[i] = b
    while i > 0:
        p = (i - 1) // 2
        if heap_a[p] < heap_a[i] or (heap_a[p] == heap_a[i] and heap_b[p] <= heap_b[i]):
            break
        heap_a[p], heap_a[i] = heap_a[i], heap_a[p]
        heap_b[p], heap_b[i] = heap_b[i], heap_b[p]
        i = p
    return size + 1


@numba.njit(cache=True, nogil=True)
def _pop(heap_a, heap_b, size):
    """Remove the least pair; returns the new size (the pair was heap_a[0], heap_b[0])."""
    size -= 1
    heap_a[0] = heap_a[size]
    heap_b[0] = heap_b[size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and (heap_a[c + 1] < heap_a[c] or (heap_a[c + 1] == heap_a[c] and heap_b[c + 1] < heap_b[c])):
            c += 1
        if heap_a[i] < heap_a[c] or (heap_a[i] == heap_a[c] and heap_b[i] <= heap_b[c]):
            break
        heap_a[c], heap_a[i] = heap_a[i], heap_a[c]
        heap_b[c], heap_b[i] = heap_b[i], heap_b[c]
        i = c
    return size


@numba.njit(cache=True, nogil=True)
def list_schedule(stream, busy, is_dma, lead, data, dma_ptr, dma_engine, n_dma, n_streams, succ_ptr, succ, npred):
    """The order instructions are taken in (module docstring, 3): a permutation of 0..n-1."""
    n = len(stream)
    ready = np.zeros(n, np.int64)
    done = np.zeros(n, np.int64)
    left = npred.copy()
    free = np.zeros(n_streams, np.int64)
    dma_free = np.zeros(max(n_dma, 1), np.int64)
    # per stream: waiting (ready time, g) and eligible (g, g) heaps, each in a row of n slots
    wa = np.empty((n_streams, n), np.int64)
    wb = np.empty((n_streams, n), np.int64)
    ea = np.empty((n_streams, n), np.int64)
    eb = np.empty((n_streams, n), np.int64)
    wn = np.zeros(n_streams, np.int64)
    en = np.zeros(n_streams, np.int64)
    for g in range(n):
        if left[g] == 0:
            s = stream[g]
            wn[s] = _push(wa[s], wb[s], wn[s], 0, g)
    order = np.empty(n, np.int64)
    for step in range(n):
        best_s = -1
        best_t = 0
        best_g = 0
        for s in range(n_streams):
            if wn[s] == 0 and en[s] == 0:
                continue
            t = free[s]
            if en[s] == 0 and wa[s, 0] > t:
                t = wa[s, 0]
            while wn[s] > 0 and wa[s, 0] <= t:
                g = wb[s, 0]
                wn[s] = _pop(wa[s], wb[s], wn[s])
                en[s] = _push(ea[s], eb[s], en[s], g, g)
            g = ea[s, 0]
            if best_s < 0 or t < best_t or (t == best_t and g < best_g):
                best_s, best_t, best_g = s, t, g
        s, t, g = best_s, best_t, best_g
        en[s] = _pop(ea[s], eb[s], en[s])
        order[step] = g
        free[s] = t + busy[g]
        end = t + busy[g]
        if is_dma[g]:
            start = t + lead[g]
            for j in range(dma_ptr[g], dma_ptr[g + 1]):
                start = max(start, dma_free[dma_engine[j]])
            end = start + data[g]
            for j in range(dma_ptr[g], dma_ptr[g + 1]):
                dma_free[dma_engine[j]] = end
        done[g] = end
        for j in range(succ_ptr[g], succ_ptr[g + 1]):
            b = succ[j]
            ready[b] = max(ready[b], end)
            left[b] -= 1
            if left[b] == 0:
                sb = stream[b]
                wn[sb] = _push(wa[sb], wb[sb], wn[sb], ready[b], b)
    return order


def new_order(decoded, timing, origin: np.ndarray, n: int, region: np.ndarray) -> np.ndarray | None:
    """The scheduled program order: new position of each program-order instruction g, or None when the
    schedule keeps the written order. `decoded` is the program built in written order, `timing` its
    TimingResult, `origin` the build's k -> g, `region` each g's no_reorder block (-1: none)."""
    if n < 2:
        return None
    ks = main_instructions(origin, n)
    opcode = decoded.opcode[ks]
    barrier = np.isin(opcode, np.array(sorted(BARRIERS), opcode.dtype))
    src, dst = dependencies(ks, decoded.fp_ptr, decoded.fp_memory, decoded.fp_partition, decoded.fp_partitions,
                            decoded.fp_lo, decoded.fp_hi, decoded.fp_access, barrier, region)
    succ_order = np.argsort(src, kind="stable")
    succ = dst[succ_order]
    succ_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=succ_ptr[1:])
    npred = np.bincount(dst, minlength=n).astype(np.int64)

    stream = timing.engine[ks].astype(np.int64)
    busy = (timing.end[ks] - timing.start[ks]).astype(np.int64)
    dma_op = isa.BY_MNEMONIC["dma_copy"].opcode
    is_dma = opcode == dma_op
    lead = np.zeros(n, np.int64)
    data = np.zeros(n, np.int64)
    dma_ptr = np.zeros(n + 1, np.int64)
    dma_engine = np.zeros(0, np.int64)
    if is_dma.any() and timing.pieces:
        g_of_k = np.full(timing.count, -1, np.int64)
        g_of_k[ks] = np.arange(n)
        pg = g_of_k[timing.piece_instr]  # each piece's instruction g (-1: none of ours)
        mine = pg >= 0
        pg = pg[mine]
        issue, ready = timing.piece_issue[mine], timing.piece_ready[mine]
        moving = timing.piece_end[mine] - np.maximum(timing.piece_start[mine], ready)
        cuts = np.flatnonzero(np.r_[True, pg[1:] != pg[:-1]])  # a dma_copy's pieces are consecutive
        gs = pg[cuts]
        lead[gs] = np.minimum.reduceat(ready - issue, cuts)
        data[gs] = np.maximum.reduceat(moving, cuts)
        pairs = distinct(pg * 4096 + timing.piece_engine[mine].astype(np.int64))
        dma_engine = pairs % 4096
        np.cumsum(np.bincount(pairs // 4096, minlength=n), out=dma_ptr[1:])
    n_dma = int(dma_engine.max()) + 1 if len(dma_engine) else 1
    order = list_schedule(stream, busy, is_dma, lead, data, dma_ptr, dma_engine, n_dma, len(isa.ENGINES), succ_ptr,
                          succ, npred)
    if (order == np.arange(n)).all():
        return None
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    return pos
