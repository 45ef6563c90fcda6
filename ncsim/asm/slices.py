"""Operands written as declared tensors and numpy-style slices of them, turned into access patterns.

`t` is the whole tensor; `t[i0, i1, ...]` indexes it like numpy, each index an integer expression or
a slice start:stop:step without negative numbers; missing trailing indices take the whole
dimension, and (as in numpy) a stop past the end is clamped. On chip, index 0 selects partitions:
a contiguous range (no striding across partitions). Every other index becomes a free dimension of
[step, count] (an integer index drops its dimension). When a view needs more free dimensions than
the hardware has, adjacent ones that are contiguous in memory are merged.

A view of an HBM tensor may end in `.broadcast_to(d0, d1, ...)`: the view repeated to that shape
by numpy's broadcasting rules (new leading dimensions, and dimensions of size 1 stretched), each
repeat a step of 0, which a DMA reads from HBM as often as asked. `b[0, :].broadcast_to(128, 512)`
is one HBM row for each of 128 partitions, NKI's `broadcast_to` of a row onto the partition
dimension. The assembler accepts it only as a dma_copy's source.
"""

from __future__ import annotations

from ncsim.asm.expr import Env, parse_int
from ncsim.asm.fields import MAX_FREE_DIMS, MAX_HBM_DIMS
from ncsim.asm.lexer import Cursor, Token
from ncsim.asm.objfile import TensorEntry
from ncsim.memory.access import AccessPattern, Memory

MEMORIES = {"sbuf": Memory.SBUF, "psum": Memory.PSUM, "hbm": Memory.HBM}


def row_major_strides(shape: tuple[int, ...]) -> list[int]:
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return strides


def span_count(start: int, stop: int, step: int) -> int:
    """len(range(start, stop, step)) for step > 0, by arithmetic (so that it works on lanes too)."""
    count = (stop - start + step - 1) // step
    return max(0, count)


def parse_index(cur: Cursor, env: Env, dim: int, size: int) -> tuple[int, int, int] | int:
    """One index of a subscript: an int, or (start, stop, step) clamped as numpy does."""
    tok = cur.peek()

    def bound(what: str) -> int:
        t = cur.peek()
        v = parse_int(cur, env, what)
        if v < 0:
            raise cur.error(f"negative {what} {v}: slices here are negative-free", t)
        return v

    start = None
    if not (cur.at(":") or cur.at(",") or cur.at("]")):
        start = bound("index")
        if not cur.at(":"):
            if start >= size:
                raise cur.error(f"index {start} is out of range for dimension {dim} of size {size}", tok)
            return start
    cur.expect(":", "in the slice")
    stop = size
    if not (cur.at(":") or cur.at(",") or cur.at("]")):
        stop = bound("slice stop")
    step = 1
    if cur.accept(":") and not (cur.at(",") or cur.at("]")):
        step_tok = cur.peek()
        step = bound("slice step")
        if step == 0:
            raise cur.error("slice step cannot be zero", step_tok)
    start = 0 if start is None else start
    start, stop = min(start, size), min(stop, size)
    if span_count(start, stop, step) == 0:
        raise cur.error(f"the slice {start}:{stop}:{step} of dimension {dim} (size {size}) is empty", tok)
    return start, stop, step


def tensor_view(cur: Cursor, env: Env, t: TensorEntry, name_tok: Token,
                broadcasts: list[tuple[Token, AccessPattern]] | None = None) -> AccessPattern:
    """The access pattern of `t`, `t[...]` or either with `.broadcast_to(...)` (the cursor is after
    the name); each broadcast is appended to `broadcasts` with its token, for the caller's rules."""
    shape = t.shape
    indices: list[tuple[int, int, int] | int] = []
    if cur.accept("["):
        while True:
            if len(indices) == len(shape):
                raise cur.error(f"'{t.name}' has {len(shape)} dimensions; this is index {len(indices) + 1}",
                                cur.peek())
            indices.append(parse_index(cur, env, len(indices), shape[len(indices)]))
            if not cur.accept(","):
                break
        cur.expect("]", "to close the subscript")
    indices += [(0, shape[i], 1) for i in range(len(indices), len(shape))]
    memory = MEMORIES[t.memory]
    strides = row_major_strides(shape)
    offset_elems = 0
    partition, partitions = 0, 0
    dims: list[tuple[int, int]] = []
    for axis, (index, stride) in enumerate(zip(indices, strides)):
        if memory != Memory.HBM and axis == 0:
            if not isinstance(index, tuple):
                partition, partitions = t.partition + index, 1
            else:
                start, stop, step = index
                if step != 1:
                    raise cur.error(f"'{t.name}': a step of {step} across partitions; partitions are taken as a"
                                    " contiguous range (no striding across partitions)", name_tok)
                partition, partitions = t.partition + start, stop - start
            continue
        if not isinstance(index, tuple):
            offset_elems += index * stride
        else:
            start, stop, step = index
            offset_elems += start * stride
            dims.append((step * stride, span_count(start, stop, step)))
    if not dims:
        dims = [(1, 1)]
    if cur.at(".") and cur.peek(1).is_("broadcast_to"):
        cur.next()
        tok = cur.next()
        if memory != Memory.HBM:
            raise cur.error(f"'{t.name}' is in {memory.label}: broadcast_to repeats an HBM view (a DMA's source)", tok)
        dims = broadcast_dims(cur, env, dims)
    else:
        tok = None
    limit = MAX_HBM_DIMS if memory == Memory.HBM else MAX_FREE_DIMS
    dims = merge_dims(dims, limit)
    if len(dims) > limit:
        raise cur.error(f"this view of '{t.name}' needs {len(dims)} free dimensions; {memory.label} access"
                        f" patterns have at most {limit}", name_tok)
    ap = AccessPattern(memory, t.dtype, partition, partitions, t.address + offset_elems * t.dtype.itemsize,
                       tuple(dims))
    if tok is not None and broadcasts is not None:
        broadcasts.append((tok, ap))
    return ap


def broadcast_dims(cur: Cursor, env: Env, dims: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The dimensions of a view after `(d0, d1, ...)` (the cursor is on the '('), by numpy's rules
    (nki.language.broadcast_to follows them too: "Broadcast the src tile to a new shape based on
    numpy broadcast rules", https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/api/
    generated/nki.language.broadcast_to.html): the shapes are aligned on their last dimension, and
    each of the view's dimensions keeps its size or, from size 1, takes the new one with a step of 0;
    the shape's extra leading dimensions are new, each a step of 0."""
    open_tok = cur.expect("(", "after broadcast_to: the shape, broadcast_to(d0, d1, ...)")
    shape: list[tuple[int, Token]] = []
    while True:
        tok = cur.peek()
        size = parse_int(cur, env, "a dimension of the broadcast shape")
        if size < 1:
            raise cur.error(f"a broadcast dimension is at least 1, not {size}", tok)
        shape.append((size, tok))
        if not cur.accept(","):
            break
    cur.expect(")", "to close the broadcast shape")
    if len(shape) < len(dims):
        raise cur.error(f"the view has {len(dims)} dimensions {[c for _, c in dims]}; broadcast_to gives it"
                        f" {len(shape)}: the shape keeps every dimension, and may add leading ones", open_tok)
    lead = len(shape) - len(dims)
    out = [(0, size) for size, _ in shape[:lead]]
    for (step, count), (size, tok) in zip(dims, shape[lead:]):
        if count == size:
            out.append((step, count))
        elif count == 1:
            out.append((0, size))
        else:
            raise cur.error(f"a dimension of size {count} cannot broadcast to {size}: broadcasting keeps a size or"
                            " stretches a size of 1", tok)
    return out


def merge_dims(dims: list[tuple[int, int]], limit: int) -> list[tuple[int, int]]:
    """Fit a view into `limit` dimensions when memory allows: drop dimensions of count 1 (they move
    nothing), then merge adjacent contiguous ones (outer step == inner step * inner count),
    innermost first. What still does not fit is left for the caller to refuse."""
    dims = list(dims)
    if len(dims) > limit:
        dims = [d for d in dims if d[1] != 1] or [(1, 1)]
    i = len(dims) - 2
    while len(dims) > limit and i >= 0:
        (so, co), (si, ci) = dims[i], dims[i + 1]
        if so == si * ci:
            dims[i:i + 2] = [(si, co * ci)]
        i = min(i - 1, len(dims) - 2)
    return dims
