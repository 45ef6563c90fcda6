"""Vector engine instructions beyond elementwise ALU work: statistics (bn_stats, bn_aggr), top-8
selection (max8, nc_find_index8, nc_match_replace8), dropout, partition shuffles, the 32x32
transpose and copies at a run-time offset (see ncsim/engines/__init__.py for the execute/reference
contract).

Each instruction has a fast `execute` (whole-tile numpy; numba kernels where a loop is sequential)
and a plain `reference` written element by element from its row of the instruction table. Where the
NKI documentation leaves a detail open (ties, NaN, absent values, the random stream), the row's
semantics text states ncsim's choice. The sequential kernels produce arithmetic NaNs with any
payload and canonicalise them once at the end (`alu.canonical`); NaN propagates through every
operation they use, so this equals the per-operation canonical NaN of `refalu`.

The Vector engine's nc_transpose is `transpose_vector` / `transpose_vector_ref`: the Tensor engine
module owns the mnemonic and dispatches to them when the engine is "vector".
"""

from __future__ import annotations

import dataclasses

import numba
import numpy as np

from ncsim.asm.rules import SHUFFLE_KEEP as KEEP
from ncsim.asm.rules import TOP, memory_limit
from ncsim.engines import alu, refalu, reference, semantics
from ncsim.engines.context import Context
from ncsim.memory.access import AccessPattern
from ncsim.numerics import from_f32, to_f32

F32 = np.float32


# ------------------------------------------------------------------ bn_stats
@numba.njit(cache=True, error_model="numpy")
def _bn_stats_rows(x: np.ndarray) -> np.ndarray:
    """[count, mean, m2] of the even and the odd columns of each row of x (float32 [P, n])."""
    rows, n = x.shape
    out = np.zeros((rows, 6), np.float32)
    for p in range(rows):
        for parity in range(2):
            count = (n - parity + 1) // 2
            if count == 0:
                continue  # an empty group: 0, 0, 0
            c = np.float32(count)
            total = np.float32(0.0)
            for i in range(parity, n, 2):
                total = np.float32(total + x[p, i])
            mean = np.float32(total / c)
            m2 = np.float32(0.0)
            for i in range(parity, n, 2):
                d = np.float32(x[p, i] - mean)
                m2 = np.float32(m2 + np.float32(d * d))
            out[p, 3 * parity] = c
            out[p, 3 * parity + 1] = mean
            out[p, 3 * parity + 2] = m2
    return out


# bn_stats dst[P, 6], data[P, n]   (n <= bn_stats_fmax = 512)
@semantics("bn_stats")
def bn_stats(ctx: Context) -> None:
    # rule bn-stats held
    ctx.write("dst", alu.canonical(_bn_stats_rows(ctx.read2d("data"))))


@reference("bn_stats")
def bn_stats_ref(instr, inputs, state):
    data, dst = instr["data"], instr["dst"]
    x = to_f32(inputs["data"], data.dtype).reshape(data.partitions, -1)
    out = []
    for row in x:
        stats = []
        for group in (row[0::2], row[1::2]):
            if len(group) == 0:
                stats += [F32(0), F32(0), F32(0)]
                continue
            count = F32(len(group))
            total = F32(0)
            for v in group:
                total = refalu.op("add", total, v)
            mean = refalu.op("divide", total, count)
            m2 = F32(0)
            for v in group:
                d = refalu.op("subtract", v, mean)
                m2 = refalu.op("add", m2, refalu.op("multiply", d, d))
            stats += [count, mean, m2]
        out.append(stats)
    return {"dst": from_f32(np.array(out, F32), dst.dtype).reshape(dst.shape)}


# ------------------------------------------------------------------ bn_aggr
@numba.njit(cache=True, error_model="numpy")
def _bn_aggr_rows(x: np.ndarray) -> np.ndarray:
    """[mean, variance] pooled from the (count, mean, m2) triples of each row of x (float32 [P, 3k])."""
    rows, m = x.shape
    k = m // 3
    out = np.empty((rows, 2), np.float32)
    for p in range(rows):
        n = np.float32(0.0)
        for j in range(k):
            n = np.float32(n + x[p, 3 * j])
        total = np.float32(0.0)
        for j in range(k):
            total = np.float32(total + np.float32(x[p, 3 * j] * x[p, 3 * j + 1]))
        mean = np.float32(total / n)
        m2 = np.float32(0.0)
        for j in range(k):
            d = np.float32(x[p, 3 * j + 1] - mean)
            spread = np.float32(x[p, 3 * j] * np.float32(d * d))
            m2 = np.float32(m2 + np.float32(x[p, 3 * j + 2] + spread))
        out[p, 0] = mean
        out[p, 1] = np.float32(m2 / n)
    return out


# bn_aggr dst[P, 2], data[P, 3k]   (k bn_stats triples: count, mean, variance * count)
@semantics("bn_aggr")
def bn_aggr(ctx: Context) -> None:
    # rule bn-aggr held
    ctx.write("dst", alu.canonical(_bn_aggr_rows(ctx.read2d("data"))))


@reference("bn_aggr")
def bn_aggr_ref(instr, inputs, state):
    data, dst = instr["data"], instr["dst"]
    x = to_f32(inputs["data"], data.dtype).reshape(data.partitions, -1)
    add, sub, mul, div = (lambda a, b, o=o: refalu.op(o, a, b) for o in ("add", "subtract", "multiply", "divide"))
    out = []
    for row in x:
        triples = [(row[j], row[j + 1], row[j + 2]) for j in range(0, len(row), 3)]
        n = F32(0)
        for count, _, _ in triples:
            n = add(n, count)
        total = F32(0)
        for count, mean_j, _ in triples:
            total = add(total, mul(count, mean_j))
        mean = div(total, n)
        m2 = F32(0)
        for count, mean_j, m2_j in triples:
            m2 = add(m2, add(m2_j, mul(count, mul(sub(mean_j, mean), sub(mean_j, mean)))))
        out.append([mean, div(m2, n)])
    return {"dst": from_f32(np.array(out, F32), dst.dtype).reshape(dst.shape)}


# ------------------------------------------------------------------ max8
def _rank_keys(x: np.ndarray) -> np.ndarray:
    """int64 keys that order float32 values as max8 does: by value, -0 equal to +0, NaN above +inf."""
    u = x.view(np.uint32).astype(np.int64)
    magnitude = u & 0x7FFFFFFF
    keys = np.where(u >> 31 == 1, -magnitude, magnitude)
    return np.where(np.isnan(x), np.int64(1) << 32, keys)


# max8 dst[P, 8], src[P, n]   (8 <= n <= top8_fmax = 16384)
@semantics("max8")
def max8(ctx: Context) -> None:
    x = ctx.read2d("src")  # rule max8 held
    # A stable sort on the negated keys: largest first, equal keys in order of position.
    order = np.argsort(-_rank_keys(x), axis=1, kind="stable")[:, :TOP]
    ctx.write("dst", np.take_along_axis(x, order, axis=1))


def _ranks_above(a: np.float32, b: np.float32) -> bool:
    if np.isnan(a):
        return not np.isnan(b)
    return not np.isnan(b) and bool(a > b)


@reference("max8")
def max8_ref(instr, inputs, state):
    src, dst = instr["src"], instr["dst"]
    x = to_f32(inputs["src"], src.dtype).reshape(src.partitions, -1)
    out = []
    for row in x:
        taken: set[int] = set()
        best_values = []
        for _ in range(TOP):
            best = None
            for i, v in enumerate(row):
                if i not in taken and (best is None or _ranks_above(v, row[best])):
                    best = i  # strictly above: the first of equal values wins
            taken.add(best)
            best_values.append(row[best])
        out.append(best_values)
    return {"dst": from_f32(np.array(out, F32), dst.dtype).reshape(dst.shape)}


# ------------------------------------------------------------------ nc_find_index8
# nc_find_index8 dst[P, 8] (u16/u32), data[P, n], vals[P, 8]   (8 <= n <= 16384)
@semantics("nc_find_index8")
def nc_find_index8(ctx: Context) -> None:
    dst = ctx.ap("dst")  # rule find-index8 held
    x, v = ctx.read2d("data"), ctx.read2d("vals")
    hits = x[:, None, :] == v[:, :, None]  # [P, 8, n]
    first = np.where(hits.any(axis=2), hits.argmax(axis=2), 0)
    ctx.write_raw("dst", first.astype(dst.dtype.storage))


@reference("nc_find_index8")
def nc_find_index8_ref(instr, inputs, state):
    data, vals, dst = instr["data"], instr["vals"], instr["dst"]
    x = to_f32(inputs["data"], data.dtype).reshape(data.partitions, -1)
    v = to_f32(inputs["vals"], vals.dtype).reshape(vals.partitions, -1)
    out = []
    for p in range(len(x)):
        row = []
        for want in v[p]:
            found = 0
            for i, value in enumerate(x[p]):
                if value == want:
                    found = i
                    break
            row.append(found)
        out.append(row)
    return {"dst": np.array(out, dst.dtype.storage).reshape(dst.shape)}


# ------------------------------------------------------------------ nc_match_replace8
@numba.njit(cache=True)
def _match_rows(x: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each row and j = 0..7 in order: the first element equal to v[p, j] and not yet matched.
    Returns the matched mask [P, n] and the matched indices [P, 8] (0 where nothing matched)."""
    rows, n = x.shape
    hit = np.zeros((rows, n), np.bool_)
    index = np.zeros((rows, v.shape[1]), np.uint32)
    for p in range(rows):
        for j in range(v.shape[1]):
            for i in range(n):
                if not hit[p, i] and x[p, i] == v[p, j]:
                    hit[p, i] = True
                    index[p, j] = i
                    break
    return hit, index


def _copy_or_convert(raw: np.ndarray, src_dtype, dst_dtype, replace: np.ndarray, value: np.ndarray) -> np.ndarray:
    """raw (stored as src_dtype) stored as dst_dtype, with `value` (float32) where `replace` holds:
    the bits are kept when the dtypes match, else the values go through fp32."""
    if src_dtype == dst_dtype:
        out = raw.copy()
        out[replace] = from_f32(np.asarray(value, F32).reshape(1), dst_dtype)[0]
        return out
    x = to_f32(raw, src_dtype)
    x[replace] = value
    return from_f32(x, dst_dtype)


# nc_match_replace8 dst[P, n], data[P, n], vals[P, 8], imm, dst_idx=[P, 8] u32   (n <= 16384)
@semantics("nc_match_replace8")
def nc_match_replace8(ctx: Context) -> None:
    data = ctx.ap("data")  # rule match-replace8 held
    p, n = ctx.rows("dst", "data")
    raw = ctx.read_raw("data").reshape(p, n)
    hit, index = _match_rows(to_f32(raw, data.dtype), ctx.read2d("vals"))
    ctx.write_raw("dst", _copy_or_convert(raw, data.dtype, ctx.ap("dst").dtype, hit, F32(ctx["imm"])))
    if ctx["dst_idx"] is not None:
        ctx.write_raw("dst_idx", index)


@reference("nc_match_replace8")
def nc_match_replace8_ref(instr, inputs, state):
    data, vals, dst, dst_idx = instr["data"], instr["vals"], instr["dst"], instr["dst_idx"]
    raw = inputs["data"].reshape(data.partitions, -1)
    x = to_f32(raw, data.dtype)
    v = to_f32(inputs["vals"], vals.dtype).reshape(vals.partitions, -1)
    imm = F32(instr["imm"])
    out_rows, index_rows = [], []
    for p in range(len(x)):
        replaced = [False] * len(x[p])
        index = []
        for want in v[p]:
            found = 0
            for i, value in enumerate(x[p]):
                if not replaced[i] and value == want:
                    replaced[i] = True
                    found = i
                    break
            index.append(found)
        row = []
        for i in range(len(x[p])):
            if replaced[i]:
                row.append(from_f32(np.array([imm], F32), dst.dtype)[0])
            elif data.dtype == dst.dtype:
                row.append(raw[p, i])
            else:
                row.append(from_f32(np.array([x[p, i]], F32), dst.dtype)[0])
        out_rows.append(row)
        index_rows.append(index)
    result = {"dst": np.array(out_rows, dst.dtype.storage).reshape(dst.shape)}
    if dst_idx is not None:
        result["dst_idx"] = np.array(index_rows, np.uint32).reshape(dst_idx.shape)
    return result


# ------------------------------------------------------------------ dropout
# u(seed, p, i) = (h >> 8) / 2**24 with h = fmix32(fmix32(fmix32(seed ^ SEED_SALT) ^ p) ^ i), fmix32
# being MurmurHash3's 32-bit finalizer (a bijection of 32-bit words); docs/numerics.md states the same.
# The salt (the golden ratio's 32-bit fraction) is there because fmix32(0) = 0: without it, seed 0
# would make h = 0, so u = 0, for the first element of partition 0 and drop it at every prob > 0.
SEED_SALT = 0x9E3779B9
def fmix32(h: int) -> int:
    """MurmurHash3's finalizer on one 32-bit word (Python ints)."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def _fmix32_array(h: np.ndarray) -> np.ndarray:
    """fmix32 on a uint32 array (numpy's uint32 products wrap modulo 2**32)."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def dropout_uniform(seed: int, partitions: int, free: int) -> np.ndarray:
    """u(seed, p, i) for p < partitions and i < free, float32 [partitions, free], values k / 2**24."""
    per_partition = _fmix32_array(np.uint32(fmix32(seed ^ SEED_SALT)) ^ np.arange(partitions, dtype=np.uint32))
    h = _fmix32_array(per_partition[:, None] ^ np.arange(free, dtype=np.uint32)[None, :])
    return (h >> np.uint32(8)).astype(F32) * F32(2.0**-24)


# dropout dst, data, prob, seed=0   (prob: constant or [P, 1] column)
@semantics("dropout")
def dropout(ctx: Context) -> None:
    p, n = ctx.rows("dst", "data")
    prob = ctx.scalar("prob", p)
    drop = dropout_uniform(ctx["seed"], p, n) < prob
    raw = ctx.read_raw("data").reshape(p, n)
    ctx.write_raw("dst", _copy_or_convert(raw, ctx.ap("data").dtype, ctx.ap("dst").dtype, drop, F32(0)))


@reference("dropout")
def dropout_ref(instr, inputs, state):
    data, dst, seed = instr["data"], instr["dst"], instr["seed"]
    raw = inputs["data"].reshape(data.partitions, -1)
    prob_operand = instr["prob"]
    if isinstance(prob_operand, AccessPattern):
        probs = to_f32(inputs["prob"], prob_operand.dtype).reshape(-1)
    else:
        probs = [F32(prob_operand.value)] * data.partitions
    out = []
    for p in range(data.partitions):
        row = []
        for i in range(raw.shape[1]):
            h = fmix32(fmix32(fmix32(seed ^ 0x9E3779B9) ^ p) ^ i)
            u = F32((h >> 8) / 2**24)
            if u < probs[p]:
                row.append(from_f32(np.zeros(1, F32), dst.dtype)[0])
            elif data.dtype == dst.dtype:
                row.append(raw[p, i])
            else:
                row.append(from_f32(to_f32(raw[p, i:i + 1], data.dtype), dst.dtype)[0])
        out.append(row)
    return {"dst": np.array(out, dst.dtype.storage).reshape(dst.shape)}


# ------------------------------------------------------------------ nc_stream_shuffle


def _shuffle_moves(ctx: Context) -> list[tuple[int, int]]:
    """(dst row, src row) pairs, rows counted from each tile's first partition (rule stream-shuffle held)."""
    dst, src, mask = ctx.ap("dst"), ctx.ap("src"), ctx["shuffle_mask"]
    quadrant = len(mask)
    active = -(-max(dst.partitions, src.partitions) // quadrant) * quadrant
    moves = []
    for q in range(active // quadrant):
        for i, m in enumerate(mask):
            row, from_row = q * quadrant + i, q * quadrant + m
            if m != KEEP and row < dst.partitions:
                moves.append((row, from_row))
    return moves


def _row_runs(rows: list[int]) -> list[tuple[int, int]]:
    """Sorted distinct rows as (first, count) runs of consecutive rows."""
    runs: list[tuple[int, int]] = []
    for r in rows:
        if runs and runs[-1][0] + runs[-1][1] == r:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((r, 1))
    return runs


# nc_stream_shuffle dst, src, shuffle_mask=[m0, ..., m31]   (255: keep that partition)
@semantics("nc_stream_shuffle")
def nc_stream_shuffle(ctx: Context) -> None:
    moves = _shuffle_moves(ctx)
    if not moves:
        return
    dst = ctx.ap("dst")
    src = ctx.read_raw("src").reshape(ctx.ap("src").partitions, -1)  # all of src before any write
    moved = np.empty((dst.partitions, src.shape[1]), src.dtype)
    rows = sorted(row for row, _ in moves)
    for row, from_row in moves:
        moved[row] = src[from_row]
    # Write only the partitions that change, so the kept ones are neither read nor written.
    for first, count in _row_runs(rows):
        part = dataclasses.replace(dst, partition=dst.partition + first, partitions=count)
        ctx.write_raw(part, moved[first:first + count])


@reference("nc_stream_shuffle")
def nc_stream_shuffle_ref(instr, inputs, state):
    dst, src, mask = instr["dst"], instr["src"], instr["shuffle_mask"]
    old = inputs["dst"].reshape(dst.partitions, -1)
    source = inputs["src"].reshape(src.partitions, -1)
    out = old.copy()
    quadrants = -(-max(dst.partitions, src.partitions) // 32)
    for q in range(quadrants):
        for i in range(32):
            if mask[i] != 255 and 32 * q + i < dst.partitions:
                out[32 * q + i] = source[32 * q + mask[i]]
    return {"dst": out.reshape(dst.shape)}


# ------------------------------------------------------------------ nc_transpose on the Vector engine
# nc_transpose dst[F, P], data[P, F], engine=vector   (P, F <= vector_transpose_max = 32)
# Registered by the Tensor engine module, which owns the mnemonic and dispatches here for engine=vector.
def transpose_vector(ctx: Context) -> None:
    data = ctx.ap("data")  # rule transpose held
    p, f = data.partitions, data.free_elements
    ctx.write_raw("dst", np.ascontiguousarray(ctx.read_raw("data").reshape(p, f).T))


def transpose_vector_ref(instr, inputs, state):
    data, dst = instr["data"], instr["dst"]
    x = inputs["data"].reshape(data.partitions, -1)
    out = np.empty((x.shape[1], x.shape[0]), x.dtype)
    for p in range(x.shape[0]):
        for f in range(x.shape[1]):
            out[f, p] = x[p, f]
    return {"dst": out.reshape(dst.shape)}


# ------------------------------------------------------------------ copies at a run-time offset
def _dynamic_offset(ctx: Context) -> int:
    # rule dynamic-index held: one int32 element; its value is the run's to check
    return int(ctx.read_raw("index").reshape(-1)[0])


def _moved(ctx: Context, name: str, k: int) -> AccessPattern:
    """Operand `name` with its start moved by k elements; an error if that leaves the partition."""
    ap = ctx.ap(name)
    size = ap.dtype.itemsize
    lo, hi = ap.byte_span()
    limit = memory_limit(ap.memory, ctx.config)
    k_min, k_max = -(lo // size), (limit - hi) // size
    if not k_min <= k <= k_max:
        raise ctx.fail(f"'index' holds offset {k}: '{name}' moved by {k} elements would cover bytes"
                       f" {lo + k * size}..{hi - 1 + k * size} of each partition, outside the {limit} bytes of"
                       f" {ap.memory.label} per partition; offsets {k_min}..{k_max} keep it inside")
    return dataclasses.replace(ap, offset=ap.offset + k * size)


def _copy(ctx: Context, dst: AccessPattern, src: AccessPattern) -> None:
    """tensor_copy's rule: the bits when the dtypes match (Vector, GpSimd), else through fp32."""
    raw = ctx.read_raw(src)
    if src.dtype == dst.dtype and ctx.engine != "scalar":
        ctx.write_raw(dst, raw)
    else:
        ctx.write(dst, to_f32(raw, src.dtype))


# tensor_copy_dynamic_src dst, src, index   (src moved by index[0] elements, read at run time)
@semantics("tensor_copy_dynamic_src")
def tensor_copy_dynamic_src(ctx: Context) -> None:
    ctx.rows("dst", "src")
    k = _dynamic_offset(ctx)
    _copy(ctx, ctx.ap("dst"), _moved(ctx, "src", k))


# tensor_copy_dynamic_dst dst, src, index   (dst moved by index[0] elements, read at run time)
@semantics("tensor_copy_dynamic_dst")
def tensor_copy_dynamic_dst(ctx: Context) -> None:
    ctx.rows("dst", "src")
    k = _dynamic_offset(ctx)
    _copy(ctx, _moved(ctx, "dst", k), ctx.ap("src"))


def _copy_ref(instr, values: np.ndarray, src, dst) -> np.ndarray:
    flat = values.reshape(-1)
    if src.dtype == dst.dtype and instr.engine != "scalar":
        out = [flat[i] for i in range(flat.size)]
    else:
        out = [from_f32(to_f32(flat[i:i + 1], src.dtype), dst.dtype)[0] for i in range(flat.size)]
    return np.array(out, dst.dtype.storage).reshape(dst.shape)


@reference("tensor_copy_dynamic_src")
def tensor_copy_dynamic_src_ref(instr, inputs, state):
    """inputs['src'] holds what the instruction reads: the values at src's pattern moved by the offset."""
    return {"dst": _copy_ref(instr, inputs["src"], instr["src"], instr["dst"])}


@reference("tensor_copy_dynamic_dst")
def tensor_copy_dynamic_dst_ref(instr, inputs, state):
    """The result is what the instruction stores at dst's pattern moved by the offset."""
    return {"dst": _copy_ref(instr, inputs["src"], instr["src"], instr["dst"])}
