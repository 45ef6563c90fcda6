"""Automatic synchronisation inserts exactly the waits the real hazards need: every pair of instructions
on different streams that touch a common byte, one of them writing, ends up ordered, and no inserted
wait could be left out.

The model (`ncsim.asm.sync`): each compute engine runs its instructions in order, each completing
before the next starts; a dma_copy is triggered in its issuing engine's order (after the engine's
earlier instructions complete; the engine goes on without waiting for the transfer) and runs on its
queue, each transfer there starting after the one before it has ended. A wait `sN>=k` holds once the k-th instruction that signals sN (they all
run on one stream) has completed. The checks below build that happens-before relation from the
assembled instructions and compare it with hazards found by enumerating bytes.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ncsim import dtypes, isa
from ncsim.asm.assembler import Assembler, Program
from ncsim.asm.fields import SemOp
from ncsim.asm.instruction import Instruction
from ncsim.asm.sync import Access, accesses, find_edges, stream_of, synchronise
from ncsim.errors import AsmError
from ncsim.memory.access import AccessPattern, Memory

# --- the reference: footprints by bytes, happens-before by graph search -------------------------

# which operands each instruction used here reads ("r") or writes ("w"); dst is read too when accumulating
ROLES = {
    "tensor_copy": {"dst": "w", "src": "r"},
    "activation": {"dst": "w", "data": "r", "bias": "r", "scale": "r", "reduce_res": "w"},
    "nc_matmul": {"dst": "w", "stationary": "r", "moving": "r"},
    "dma_copy": {"dst": "w", "src": "r"},
    "sem_wait": {},
    "sem_signal": {},
}
NOTHING = np.zeros(0, dtype=np.int64)


def byte_keys(ap: AccessPattern) -> np.ndarray:
    """Every byte the pattern touches, as memory << 48 | partition << 32 | byte."""
    size = ap.dtype.itemsize
    first = ap.offset + ap.element_offsets().ravel() * size
    per_partition = (first[:, None] + np.arange(size)).ravel()
    partitions = np.arange(ap.partition, ap.partition + ap.partitions) if ap.on_chip else np.zeros(1, np.int64)
    return np.unique((int(ap.memory) << 48) | (partitions[:, None] << 32) | per_partition[None, :])


def footprint(instr: Instruction) -> tuple[np.ndarray, np.ndarray]:
    """(bytes read, bytes written)."""
    reads, writes = [NOTHING], [NOTHING]
    for name, role in ROLES[instr.mnemonic].items():
        ap = instr.operands.get(name)
        if isinstance(ap, AccessPattern):
            (writes if role == "w" else reads).append(byte_keys(ap))
            if name == "dst" and (instr.operands.get("accumulate") or instr.operands.get("dst_rmw_op")):
                reads.append(byte_keys(ap))
    return np.unique(np.concatenate(reads)), np.unique(np.concatenate(writes))


def hazards(instrs: list[Instruction]) -> list[tuple[int, int]]:
    """(i, j), i before j in program order, that touch a common byte, at least one writing."""
    feet = [footprint(i) for i in instrs]
    out = []
    for j, (rj, wj) in enumerate(feet):
        for i, (ri, wi) in enumerate(feet[:j]):
            if any(np.intersect1d(x, y).size for x, y in ((wi, rj), (wi, wj), (ri, wj))):
                out.append((i, j))
    return out


def conditions(instr: Instruction) -> list[SemOp]:
    return list(instr.waits) + ([instr["cond"]] if instr.mnemonic == "sem_wait" else [])


def stream(instr: Instruction) -> str:
    return f"queue {instr['queue']}" if instr.mnemonic == "dma_copy" else instr.engine


def wait_edges(instrs: list[Instruction]) -> list[tuple[int, int]]:
    """(producer, consumer) for every wait condition, in order: `sN>=k` waits for the k-th signaller of sN."""
    signallers: dict[int, list[int]] = {}
    for i, instr in enumerate(instrs):
        for s in instr.signals:
            assert (s.op, s.value) == ("+=", 1), instr
            signallers.setdefault(s.sem, []).append(i)
    for sem, who in signallers.items():  # counting completions is exact only within one stream
        assert len({stream(instrs[i]) for i in who}) == 1, (sem, [str(instrs[i]) for i in who])
    edges = []
    for c, instr in enumerate(instrs):
        for w in conditions(instr):
            assert w.op == ">=" and 1 <= w.value <= len(signallers.get(w.sem, [])), (w, instr)
            edges.append((signallers[w.sem][w.value - 1], c))
    return edges


def completes_before(instrs: list[Instruction], drop: int | None = None) -> list[int]:
    """Bit j of result[i]: instruction i has completed before instruction j starts its work. `drop`:
    leave out that wait (an index into wait_edges). A cycle would be a deadlock and fails the test.

    Three events per instruction: issue (its engine reaches it and its waits hold), start of its work,
    end. A compute instruction starts as it is issued; a DMA starts on its queue once the transfer
    before it there has ended."""
    n = len(instrs)

    def issue(i: int) -> int:
        return 3 * i

    def start(i: int) -> int:
        return 3 * i + 1

    def end(i: int) -> int:
        return 3 * i + 2

    succ: list[list[int]] = [[] for _ in range(3 * n)]
    for i in range(n):
        succ[issue(i)].append(start(i))
        succ[start(i)].append(end(i))
    on_engine: dict[str, int] = {}
    on_queue: dict[tuple[int, str], int] = {}
    for i, instr in enumerate(instrs):
        if (p := on_engine.get(instr.engine)) is not None:  # the engine issues in order
            succ[issue(p) if instrs[p].mnemonic == "dma_copy" else end(p)].append(issue(i))
        on_engine[instr.engine] = i
        if instr.mnemonic == "dma_copy":
            # a queue keeps the order in which transfers reach it: known only among one engine's triggers
            key = (instr["queue"], instr.engine)
            if (p := on_queue.get(key)) is not None:
                succ[end(p)].append(start(i))
            on_queue[key] = i
    for k, (p, c) in enumerate(wait_edges(instrs)):
        if k != drop:
            succ[end(p)].append(issue(c))
    indegree = [0] * (3 * n)
    for targets in succ:
        for t in targets:
            indegree[t] += 1
    order = [v for v in range(3 * n) if indegree[v] == 0]
    for v in order:
        for t in succ[v]:
            indegree[t] -= 1
            if indegree[t] == 0:
                order.append(t)
    assert len(order) == 3 * n, "the waits form a cycle: the program would deadlock"
    reach = [0] * (3 * n)
    for v in reversed(order):
        reach[v] = 1 << v
        for t in succ[v]:
            reach[v] |= reach[t]
    return [sum((reach[end(i)] >> start(j) & 1) << j for j in range(n)) for i in range(n)]


def unordered(instrs: list[Instruction], drop: int | None = None) -> list[tuple[int, int]]:
    before = completes_before(instrs, drop)
    return [(i, j) for i, j in hazards(instrs) if not before[i] >> j & 1]


def check_exact(instrs: list[Instruction]) -> None:
    """Every hazard is ordered; every wait is needed; every signal is waited for."""
    assert unordered(instrs) == [], [str(i) for i in instrs]
    edges = wait_edges(instrs)
    for k in range(len(edges)):
        assert unordered(instrs, drop=k), f"the wait of {instrs[edges[k][1]]} for {instrs[edges[k][0]]} is redundant"
    assert {p for p, _ in edges} == {i for i, instr in enumerate(instrs) if instr.signals}


# --- hand-made programs ------------------------------------------------------------------------

HEADER = """\
.hbm x f32[64, 8] inout
.hbm y f32[64, 8] inout
.sbuf a f32[64, 8]
.sbuf b f32[64, 8]
.sbuf c f32[64, 8]
.sbuf d f32[64, 8]
.sbuf e f32[64, 8]
.psum p f32[64, 8]
"""


def assembled(body: str, header: str = HEADER) -> Program:
    asm = Assembler()
    asm.assemble(header + body, "sync.s")
    return asm.program


def edges_of(body: str, header: str = HEADER) -> set[tuple[int, int]]:
    instrs = assembled(body, header).instructions
    check_exact(instrs)
    return set(wait_edges(instrs))


def test_independent_work_gets_no_waits():
    prog = assembled("""\
tensor_copy a, b
tensor_copy c[0:32], d[0:32], engine=gpsimd
activation d[32:64], relu, c[32:64]
nc_matmul p[0:8], b, b
dma_copy y, b, queue=1
dma_copy e, x, queue=2, engine=scalar
""")
    assert all(i.waits == () and i.signals == () for i in prog.instructions)
    assert prog.sync_report == "automatic synchronisation: 0 waits on 0 semaphores"
    check_exact(prog.instructions)


def test_raw_across_engines_is_one_wait():
    prog = assembled("tensor_copy a, b\nactivation c, relu, a\n")
    (sem,) = prog.instructions[0].signals
    assert sem.op == "+=" and sem.value == 1
    assert prog.instructions[1].waits == (SemOp(sem.sem, ">=", 1),)
    assert prog.instructions[1].signals == ()
    assert f"sync.s:10 activation (scalar) waits s{sem.sem}>=1 for sync.s:9 tensor_copy (vector): RAW on sbuf" \
           " (dst -> data)" in prog.sync_report
    check_exact(prog.instructions)


@pytest.mark.parametrize("body, kind", [
    ("activation c, relu, a\ntensor_copy a, b\n", "WAR on sbuf (data -> dst)"),
    ("tensor_copy a, b\ntensor_copy a, c, engine=gpsimd\n", "WAW on sbuf (dst -> dst)"),
    ("tensor_copy a[:, 0:4], b[:, 0:4]\nnc_matmul p[0:4], a[:, 3:7], b[:, 0:8]\n", "RAW on sbuf (dst -> stationary)"),
    ("nc_matmul p[0:8], a, b\nactivation c, relu, p\n", "RAW on psum (dst -> data)"),
    ("dma_copy x, a, queue=0\ndma_copy b[0:32], x[31:63], queue=1\n", "RAW on hbm (dst -> src)"),
])
def test_war_and_waw_and_raw_are_one_wait(body, kind):
    prog = assembled(body)
    assert edges_of(body) == {(0, 1)}
    assert kind in prog.sync_report


def test_interleaved_strided_writes_do_not_wait():
    body = """\
tensor_copy a[:, 0::2], b[:, 0:4]
tensor_copy a[:, 1::2], c[:, 0:4], engine=gpsimd
activation d, relu, a
"""
    assert edges_of(body) == {(0, 2), (1, 2)}


@pytest.mark.parametrize("other, waits", [
    ("h[:, 2::4]", False),  # bytes 4-5, 12-13, ...: between the f32 elements a[:, 0::2] writes
    ("h[:, 1::4]", True),   # bytes 2-3, 10-11, ...: the upper halves of a[:, 0], a[:, 2], ...
    ("h[:, 15:16]", False),  # bytes 30-31: a[:, 7]
    ("h[:, 13:14]", True),   # bytes 26-27: a[:, 6]
])
def test_footprints_are_compared_byte_by_byte(other, waits):
    header = ".sbuf a f32[64, 8] @0:0\n.sbuf h bf16[64, 16] @0:0\n.sbuf b f32[64, 8] @0:64\n" \
             ".sbuf g bf16[64, 16] @0:128\n"
    count = 4 if "::" in other else 1
    body = f"tensor_copy a[:, 0::2], b[:, 0:4]\ntensor_copy {other}, g[:, 0:{count}], engine=gpsimd\n"
    assert edges_of(body, header) == ({(0, 1)} if waits else set())


def test_disjoint_partitions_do_not_wait():
    assert edges_of("tensor_copy a[0:32], b[0:32]\ntensor_copy a[32:64], c[32:64], engine=gpsimd\n") == set()
    assert edges_of("tensor_copy a[0:32], b[0:32]\ntensor_copy a[0:64], c[0:64], engine=gpsimd\n") == {(0, 1)}


def test_hazards_on_one_engine_need_no_wait():
    body = """\
tensor_copy a, b
tensor_copy c, a
tensor_copy a, c
activation e, exp, d
activation d, relu, e
"""
    assert edges_of(body) == set()


def test_dmas_on_one_queue_need_no_wait():
    assert edges_of("dma_copy x, a, queue=2\ndma_copy x, b, queue=2\ndma_copy a, x, queue=2\n") == set()
    assert edges_of("dma_copy x, a, queue=2\ndma_copy x, b, queue=3\n") == {(0, 1)}


def test_a_transitive_chain_waits_only_for_the_last_link():
    body = """\
tensor_copy a, b
activation c, relu, a
nc_matmul p[0:8], a, c
"""
    assert edges_of(body) == {(0, 1), (1, 2)}


def test_a_dma_into_a_tile_read_earlier_waits():
    assert edges_of("activation c, relu, a\ndma_copy a, x, queue=1\n") == {(0, 1)}
    assert "WAR on sbuf (data -> dst)" in assembled("activation c, relu, a\ndma_copy a, x, queue=1\n").sync_report


def test_a_dma_follows_its_issuing_engine_but_the_engine_does_not_wait_for_it():
    # triggered by the Scalar engine after its activation completes: nothing to wait for
    assert edges_of("activation c, relu, a\ndma_copy a, x, queue=1, engine=scalar\n") == set()
    # the Scalar engine goes on after triggering the transfer: overwriting its source must wait
    assert edges_of("dma_copy x, a, queue=1, engine=scalar\nactivation a, relu, c\n") == {(0, 1)}


def test_manual_sync_inserts_nothing():
    body = """\
.sync manual
tensor_copy a, b, signal=[s7+=1]
activation c, relu, a
activation d, relu, a, wait=[s7>=1]
"""
    prog = assembled(body)
    assert [(i.waits, i.signals) for i in prog.instructions] == [
        ((), (SemOp(7, "+=", 1),)), ((), ()), ((SemOp(7, ">=", 1),), ())]
    assert prog.sync_report == "synchronisation: manual (.sync manual): nothing inserted"


def test_named_and_used_semaphores_are_not_reused():
    body = """\
.sem ready
.sem done
sem_signal s2+=1, engine=gpsimd
tensor_copy a, b
activation c, relu, a
nc_matmul p[0:8], c, c
dma_copy x, c, queue=4
"""
    prog = assembled(body)
    auto = {op.sem for i in prog.instructions[1:] for op in i.waits + i.signals}
    assert len(auto) == 2  # the producing streams, vector and scalar, count on a semaphore each
    assert auto.isdisjoint({0, 1, 2})  # `ready` is s0, `done` s1; s2 is used by the program
    check_exact(prog.instructions)


def test_more_waits_than_an_instruction_holds_go_on_sem_wait():
    # ten transfers on ten queues each write a column; one Vector instruction reads all ten
    body = "".join(f"dma_copy w[:, {k}], x[:, {k % 8}], queue={k}\n" for k in range(10))
    body += "tensor_copy f[:, 0:10], w[:, 0:10]\n"
    instrs = assembled(body, HEADER + ".sbuf w f32[64, 16]\n.sbuf f f32[64, 16]\n").instructions
    assert isa.WAITS.max_len == 8
    assert [i.mnemonic for i in instrs[10:]] == ["sem_wait", "sem_wait", "tensor_copy"]
    assert [i.engine for i in instrs[10:]] == ["vector"] * 3
    assert len(instrs[-1].waits) == 8
    check_exact(instrs)


def test_one_queue_fed_by_two_engines_is_ordered_by_a_wait():
    body = """\
tensor_copy a, b
dma_copy x, a, queue=0
dma_copy x, c, queue=0, engine=scalar
"""
    # the Sync engine triggers the first transfer only after the Vector copy; the Scalar engine may
    # trigger the second at once, so it can reach queue 0 first and x ends up holding a, not c
    assert (1, 2) not in unordered(assembled(body).instructions)


# --- the property: random small programs -------------------------------------------------------

FREE = {"f32": 8, "bf16": 16}  # elements per partition of a 32-byte row
ISSUERS = ("sync", "scalar", "gpsimd", "vector", "tensor")
ROWS = {32: ((0, 32), (32, 64)), 64: ((0, 64),)}
PSUM = (("p", "f32"), ("q", "f32"))
HBM = (("x", "f32"), ("z", "bf16"))
FIXED = """\
.psum p f32[64, 8] @0:0
.psum q f32[64, 8] @0:16
.hbm x f32[64, 8] inout @0
.hbm z bf16[64, 16] inout @1024
"""  # q overlaps p by half; z's first 32 rows are x's last 32


@st.composite
def region(draw, tensors: tuple[tuple[str, str], ...], rows: tuple[int, int], count: int) -> str:
    """A slice of `count` elements per partition (row), at some start and step."""
    name, dt = draw(st.sampled_from(tensors))
    free = FREE[dt]
    step = draw(st.integers(1, (free - 1) // (count - 1))) if count > 1 else 1
    start = draw(st.integers(0, free - 1 - (count - 1) * step))
    return f"{name}[{rows[0]}:{rows[1]}, {start}:{start + (count - 1) * step + 1}:{step}]"


@st.composite
def programs(draw) -> str:
    """2..4 SBUF tiles at random (often overlapping) offsets, two PSUM tiles and two HBM tensors that
    overlap, and 2..12 instructions on random engines. Each DMA queue is fed by one engine (see the
    xfail test above for queues fed by several)."""
    lines = []
    tiles = []
    for k in range(draw(st.integers(2, 4))):
        dt = draw(st.sampled_from(sorted(FREE)))
        lines.append(f".sbuf t{k} {dt}[64, {FREE[dt]}] @0:{16 * draw(st.integers(0, 8))}")
        tiles.append((f"t{k}", dt))
    tiles_t = tuple(tiles)
    f32_tiles = tuple(t for t in tiles if t[1] == "f32")
    issuer = [draw(st.sampled_from(ISSUERS)) for _ in range(3)]
    kinds = ["copy", "act", "dma"] + (["matmul"] if f32_tiles else [])
    for _ in range(draw(st.integers(2, 12))):
        kind = draw(st.sampled_from(kinds))
        rows = draw(st.sampled_from(ROWS[draw(st.sampled_from(sorted(ROWS)))]))
        count = draw(st.integers(1, 8))
        if kind == "copy":
            engine = draw(st.sampled_from(["vector", "gpsimd", "scalar"]))
            pool = tiles_t if engine == "gpsimd" else tiles_t + PSUM  # GpSimd cannot reach PSUM
            dst, src = draw(region(pool, rows, count)), draw(region(pool, rows, count))
            lines.append(f"tensor_copy {dst}, {src}, engine={engine}")
        elif kind == "act":
            dst, src = draw(region(tiles_t + PSUM, rows, count)), draw(region(tiles_t + PSUM, rows, count))
            lines.append(f"activation {dst}, copy, {src}")
        elif kind == "matmul":
            m = draw(st.integers(1, 8))
            first = draw(st.sampled_from([0, 32]))
            stationary = draw(region(f32_tiles, rows, m))
            moving = draw(region(f32_tiles, rows, count))
            dst = draw(region(PSUM, (first, first + m), count))
            lines.append(f"nc_matmul {dst}, {stationary}, {moving}, accumulate={draw(st.booleans())}".lower())
        else:
            queue = draw(st.integers(0, 2))
            size = rows[1] - rows[0]
            dst = draw(region(tiles_t + HBM, draw(st.sampled_from(ROWS[size])), count))
            src = draw(region(tiles_t + HBM, draw(st.sampled_from(ROWS[size])), count))
            rmw = ", dst_rmw_op=add" if draw(st.booleans()) else ""
            lines.append(f"dma_copy {dst}, {src}, queue={queue}, engine={issuer[queue]}{rmw}")
    return "\n".join(lines[:len(tiles)]) + "\n" + FIXED + "\n".join(lines[len(tiles):]) + "\n"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_get_exactly_the_waits_they_need(src):
    asm = Assembler()
    asm.assemble(src, "random.s")
    instrs = asm.program.instructions
    check_exact(instrs)
    waits = sum(len(conditions(i)) for i in instrs)
    assert asm.program.sync_report.startswith(f"automatic synchronisation: {waits} waits")


def test_named_semaphores_avoid_numbers_written_before_and_refuse_them_after():
    a = Assembler()
    a.assemble(".sync manual\nsem_signal s0+=1\n.sem ready\nsem_wait ready>=1\n", "sems.s")
    assert a.env.sems["ready"] == 1  # s0 was taken by number
    with pytest.raises(AsmError) as err:
        Assembler().assemble(".sync manual\n.sem ready\nsem_signal s0+=1\n", "sems.s")
    assert "s0 is the semaphore named 'ready'" in err.value.message
    assert (err.value.loc.line, err.value.loc.col) == (3, 12)


@pytest.mark.parametrize(("source", "message", "col"), [
    (".sem a @3\n.sem b @3\n", "s3 is already the semaphore named 'a'", 9),
    ("sem_signal s5+=1\n.sem b @5\n", "s5 is written by number earlier in the program: name another", 9),
    (".sem a\n.sem b @256\n", "a semaphore number must be in 0..255, not 256", 9),
    (".sem a @2\nsem_signal s2+=1\n", "s2 is the semaphore named 'a': use the name, or another number", 12),
])
def test_a_semaphore_named_at_a_number(source, message, col):
    a = Assembler()
    a.assemble(".sync manual\nsem_signal s0+=1\n.sem a @7\n.sem b\n", "sems.s")
    assert a.env.sems == {"a": 7, "b": 1}  # b takes the lowest number neither named nor written
    with pytest.raises(AsmError) as err:
        Assembler().assemble(".sync manual\n" + source, "sems.s")
    assert err.value.message == message
    assert (err.value.loc.line, err.value.loc.col) == (3, col)


# --- DMA queues chosen by the assembler ------------------------------------------------------------------

QUEUES = """\
{sync}
.hbm x f32[256, 8] in
.hbm y f32[256, 8] out
.sbuf t f32[128, 8]
.sbuf u f32[128, 8]
.for i in 0..2
  dma_copy t, x[i*128 : i*128 + 128, :]
  dma_copy u, t
  dma_copy y[i*128 : i*128 + 128, :], u, engine=gpsimd
  dma_copy y[i*128 : i*128 + 128, :], u, queue=9
.end
"""


def dma_queues(sync: str) -> list[int]:
    a = Assembler()
    a.assemble(QUEUES.format(sync=sync), "q.s")
    return [i["queue"] for i in a.program.instructions if i.mnemonic == "dma_copy"]


def test_auto_sync_gives_each_engine_and_direction_a_queue():
    """HBM->SBUF, SBUF->SBUF from Sync and SBUF->HBM from GpSimd each get a queue, in order of first
    use; a queue the program names is kept."""
    assert dma_queues(".sync auto") == [0, 1, 2, 9] * 2


def test_manual_sync_keeps_the_default_queue():
    """A .sync manual program (what the disassembler writes) says every queue itself: unnamed is 0."""
    assert dma_queues(".sync manual") == [0, 0, 0, 9] * 2


# --- the array core against the walk it replaced ------------------------------------------------
# `reference_edges` is the synchronisation pass as it was before the array core (a walk back through
# each other stream, O(n^2) when streams rarely wait for each other), with its byte-run overlap test:
# the core must give exactly its edges, kinds and operands.

@lru_cache(maxsize=65536)
def reference_runs(ap: AccessPattern) -> tuple[np.ndarray, int]:
    size = ap.dtype.itemsize
    dims = list(ap.dims)
    run = size
    while dims and dims[-1][0] * size == run:
        run *= dims[-1][1]
        dims.pop()
    starts = np.full((), ap.offset, dtype=np.int64)
    for step, count in dims:
        starts = starts[..., None] + np.arange(count, dtype=np.int64) * (step * size)
    return np.unique(starts.ravel()), run


def reference_overlap(a: AccessPattern, b: AccessPattern) -> bool:
    if a.memory != b.memory:
        return False
    if a.on_chip and (a.partition >= b.partition + b.partitions or b.partition >= a.partition + a.partitions):
        return False
    (alo, ahi), (blo, bhi) = a.byte_span(), b.byte_span()
    if alo >= bhi or blo >= ahi:
        return False
    sa, la = reference_runs(a)
    sb, lb = reference_runs(b)
    idx = np.searchsorted(sb, sa + la, side="left")
    ok = idx > 0
    return bool(np.any(sb[idx[ok] - 1] + lb > sa[ok]))


def reference_hazard(earlier: list[Access], later: list[Access]) -> tuple[str, Access, Access] | None:
    for kind, ew, lw in (("RAW", True, False), ("WAR", False, True), ("WAW", True, True)):
        for e in earlier:
            if e.write != ew:
                continue
            for lt in later:
                if lt.write == lw and reference_overlap(e.ap, lt.ap):
                    return kind, e, lt
    return None


def reference_edges(streams: list[str], engines: list[str], foot: list[list[Access]]) -> list[tuple]:
    """(producer, consumer, kind, producer operand, consumer operand, memory) of each edge."""
    n = len(streams)
    names = sorted(set(streams) | set(engines))
    sid = {s: k for k, s in enumerate(names)}
    zero = np.zeros(len(names), dtype=np.int64)
    pos = np.zeros(n, dtype=np.int64)
    history: dict[str, list[int]] = {s: [] for s in names}
    clock_now = {s: zero.copy() for s in names}
    clock_after: list[np.ndarray] = []
    edges: list[tuple] = []
    for i in range(n):
        own, engine = streams[i], engines[i]
        gained = clock_now[engine].copy()
        known = np.maximum(gained, clock_now[own]) if own != engine else gained.copy()
        found = []
        for s in names:
            if s == own or not foot[i]:
                continue
            for j in reversed(history[s]):
                if pos[j] <= known[sid[s]]:
                    break
                h = reference_hazard(foot[j], foot[i])
                if h:
                    found.append((j, h))
                    break
        for j, (kind, a, b) in sorted(found, key=lambda f: -f[0]):
            if pos[j] <= known[sid[streams[j]]]:
                continue
            known = np.maximum(known, clock_after[j])
            gained = np.maximum(gained, clock_after[j])
            edges.append((j, i, kind, a.operand, b.operand, a.ap.memory.label))
        history[own].append(i)
        pos[i] = len(history[own])
        known[sid[own]] = pos[i]
        if own != engine:
            clock_now[engine] = gained
        clock_now[own] = known
        clock_after.append(known)
    return edges


def core_edges(streams: list[str], engines: list[str], foot: list[list[Access]]) -> list[tuple]:
    return [(e.producer, e.consumer, e.kind, e.producer_operand, e.consumer_operand, e.memory)
            for e in find_edges(streams, engines, foot)]


ITEMSIZES = {1: dtypes.UINT8, 2: dtypes.BFLOAT16, 4: dtypes.FLOAT32}
OPERANDS = ("dst", "src", "data", "bias")


def random_pattern(randint, memory: Memory, reach: int, max_dims: int) -> AccessPattern:
    """Any valid pattern: 1..4 dimensions (5 in HBM; at most `max_dims`) of any step (negative, zero,
    overlapping) and small counts, at an offset below `reach` bytes (shifted up if a negative step
    would reach below 0), on a partition range that often meets others' partly. `randint(lo, hi)`
    draws an integer of [lo, hi]."""
    size = (1, 2, 4)[randint(0, 2)]
    dims = tuple((randint(-6, 12), randint(1, 5))
                 for _ in range(randint(1, min(max_dims, 5 if memory == Memory.HBM else 4))))
    if randint(0, 1):  # contiguous innermost dimensions, as most real patterns have
        dims = dims[:-1] + ((1, dims[-1][1]),)
    below = -sum(min(0, step * (count - 1)) for step, count in dims) * size
    offset = below + randint(0, reach)
    if memory == Memory.HBM:
        return AccessPattern(memory, ITEMSIZES[size], 0, 0, offset, dims)
    first = (0, 0, 16, 32, 64, 100, 127)[randint(0, 6)]
    return AccessPattern(memory, ITEMSIZES[size], first, randint(1, 128 - first), offset, dims)


def random_program(randint, lengths: tuple[int, int], reach: int, memories: tuple[Memory, ...], max_dims: int = 5,
                   dma: bool = True) -> tuple[list[str], list[str], list[list[Access]]]:
    """lengths[0]..lengths[1] instructions on 2..4 engines, a third of them DMAs on queue 0 or 1 if
    `dma` (a queue fed by several engines is a stream per engine), each with 0..4 accesses to
    `memories` (random_pattern(randint, memory, reach, max_dims))."""
    engines = ["sync", "scalar", "vector", "gpsimd"][:randint(2, 4)]
    streams, issuers, foot = [], [], []
    for _ in range(randint(*lengths)):
        engine = engines[randint(0, len(engines) - 1)]
        on_queue = dma and randint(0, 2) == 0
        streams.append(f"dma queue {randint(0, 1)} from {engine}" if on_queue else engine)
        issuers.append(engine)
        rows = []
        for _ in range(randint(0, 4)):
            ap = random_pattern(randint, memories[randint(0, len(memories) - 1)], reach, max_dims)
            rows.append(Access(ap, bool(randint(0, 1)), OPERANDS[randint(0, len(OPERANDS) - 1)]))
        foot.append(rows)
    return streams, issuers, foot


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_the_core_gives_the_walks_edges(data):
    program = random_program(lambda lo, hi: data.draw(st.integers(lo, hi)), (1, 24), reach=48,
                             memories=(Memory.SBUF, Memory.SBUF, Memory.PSUM, Memory.HBM))
    assert core_edges(*program) == reference_edges(*program)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**64 - 1))
def test_the_core_gives_the_walks_edges_on_long_rarely_waiting_programs(seed):
    """Small footprints spread over 12 KB rarely meet, so engines go long without waiting for each other,
    and each (engine, write) has several hundred accesses, several leaves of sync.BLOCK (64) rows:
    searches climb and descend trees of many blocks before they find a hazard or give up. (Programs
    this long are drawn from a seed: hypothesis would give up drawing them choice by choice.)"""
    rng = np.random.default_rng(seed)
    program = random_program(lambda lo, hi: int(rng.integers(lo, hi + 1)), (800, 1200), reach=12000,
                             memories=(Memory.SBUF,), max_dims=2, dma=False)
    assert core_edges(*program) == reference_edges(*program)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_the_core_gives_the_walks_edges_on_assembled_programs(src):
    asm = Assembler()
    asm.assemble(".sync manual\n" + src, "random.s")
    instrs = asm.program.instructions
    streams, engines, foot = [stream_of(i) for i in instrs], [i.engine for i in instrs], [accesses(i) for i in instrs]
    edges = synchronise(instrs, 32).edges
    assert [(e.producer, e.consumer, e.kind, e.producer_operand, e.consumer_operand, e.memory)
            for e in edges] == reference_edges(streams, engines, foot)


def test_the_core_grows_its_edges_and_resumes_where_it_stopped():
    """More edges than the pass's first output holds (max(1024, n / 4)): it stops before an
    instruction whose edges might not fit, grows the output and resumes there, several times over."""
    rng = np.random.default_rng(7)
    program = random_program(lambda lo, hi: int(rng.integers(lo, hi + 1)), (6000, 6000), reach=64,
                             memories=(Memory.SBUF,), max_dims=2, dma=False)
    edges = core_edges(*program)
    assert len(edges) > 2 * max(1024, 6000 // 4)  # grown twice
    assert edges == reference_edges(*program)


def test_the_core_takes_a_program_without_instructions_or_accesses():
    assert core_edges([], [], []) == []
    assert core_edges(["vector", "scalar"], ["vector", "scalar"], [[], []]) == []


def test_the_assembler_stores_a_shape_once_and_finds_the_same_waits():
    """The assembler's access table (`build.access_rows`) keeps per row only its offset, partitions,
    write flag and a shape index: the rows of a loop share their shapes (counts that vary with the
    iteration give one shape per distinct value), and the waits are those found with a row each."""
    from ncsim.asm import build
    from ncsim.asm.sync import KINDS

    src = """
.sbuf a f32[128, 64]
.sbuf b f32[128, 64]
.for i in 0..200
  tensor_copy a[:, i % 64 : i % 64 + 1], b[:, 0:1]
  tensor_copy b[:, 0 : i % 8 + 1], a[:, 0 : i % 8 + 1], engine=scalar
  tensor_copy a[32 * (i % 2) : 32 * (i % 2) + 32, 2 * (i % 3) : 2 * (i % 3) + 2], b[0:32, 4:6]
.end
"""
    asm = Assembler()
    asm.assemble_lines(src, "loops.s")
    program = asm.program
    instrs = program.instructions  # as parsed, one per iteration, before synchronisation
    gathered = build.Gathered(program.chunks, program.count)
    rows = build.access_rows(gathered)
    assert len(rows.offset) == 1200
    assert len(rows.shape_memory) == 8  # [(1, c)] for c = 1..8, f32 in SBUF
    per_row = sum(x.nbytes for x in (rows.offset, rows.first, rows.end, rows.write, rows.shape)) / len(rows.offset)
    assert per_row <= 21
    synced = build.synchronise(gathered, 32, set())
    expected = synchronise(instrs, 32).edges
    assert len(expected) > 100
    what = synced.what  # found now, from the access table made again
    assert [(int(p), int(c), KINDS[k], what.operand_names[pa], what.operand_names[ca])
            for p, c, k, pa, ca in zip(synced.producer, synced.consumer, what.kind, what.producer_operand,
                                       what.consumer_operand)] == \
        [(e.producer, e.consumer, e.kind, e.producer_operand, e.consumer_operand) for e in expected]


def test_the_search_trees_take_under_ten_bytes_per_access_row():
    """Leaves of sync.BLOCK = 64 rows: the trees (152 bytes a node, up to 4 nodes a leaf) take at most
    4 * 152 / 64 = 9.5 bytes per row (with leaves of 16 rows they took 30 on a long loop)."""
    from ncsim.asm import build, sync

    src = """\
.sbuf a f32[128, 8, 64]
.sbuf b f32[128, 8, 64]
.for i in 0..3000
  tensor_copy a[:, i % 8, :], b[:, (i + 3) % 8, :]
  activation b[:, (i + 5) % 8, :], relu, a[:, (i + 1) % 8, :]
.end
"""
    asm = Assembler()
    asm.assemble_lines(src, "loop.s")
    gathered = build.Gathered(asm.program.chunks, asm.program.count)
    stream, names = gathered.streams
    acc = build.access_rows(gathered)
    rows = len(acc.offset)
    assert rows == 12000
    table = sync._shapes(acc.shape_memory, acc.shape_itemsize, acc.shape_ndims, acc.shape_dims)
    *_, tree_span, tree_info = sync._index(stream, acc.ptr, acc.write, acc.offset, acc.first, acc.end, acc.shape,
                                           table, acc.shape_dims, len(names))
    assert (tree_span.nbytes + tree_info.nbytes) / rows < 10
