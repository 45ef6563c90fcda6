"""The race check: racy manual programs are reported with both source lines, the same programs with
their waits are not, every program in programs/ is race-free, happens-before runs through third
engines and counting semaphores, exact byte footprints, and agreement with a brute-force reference
on random programs. ncsim/runtime/races.py states the definition."""

from __future__ import annotations

import dataclasses
import struct
import time
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ncsim import dtypes
from ncsim.asm.assembler import assemble, assemble_file
from ncsim.asm.fields import SemOp
from ncsim.asm.instruction import Instruction, encode
from ncsim.asm.objfile import LineEntry, ObjectFile
from ncsim.asm.sync import accesses, hazard, stream_of, synchronise
from ncsim.config import Config
from ncsim.errors import RaceError, SimError
from ncsim.memory.access import AccessPattern, Memory
from ncsim.runtime import races
from ncsim.runtime.races import RaceReport, check_races, find_races, race_error
from ncsim.runtime.timing import ENGINES, TimingResult, time_program
from tests.engines.harness import make

CFG = Config()
PROGRAMS = sorted(Path(__file__).resolve().parents[2].glob("programs/*.s"))
F32 = dtypes.FLOAT32


def timed(tmp_path: Path, text: str, name: str = "racy.s") -> TimingResult:
    """Assemble and time a program written to a file, so that source places carry their text."""
    path = tmp_path / name
    path.write_text(text)
    return time_program(assemble_file(path), CFG, str(path))


HEAD = """.kernel racy
.sync manual
.hbm  x  f32[128, 512] in
.hbm  y  f32[128, 512] out
.sbuf a  f32[128, 512]
.sbuf b  f32[128, 512]
.sbuf c  f32[128, 64]
"""


# --------------------------------------------------------------------------- manual programs

def test_a_dma_load_and_a_vector_read_with_no_wait_race(tmp_path):
    r = timed(tmp_path, HEAD + "dma_copy a, x\ntensor_copy b, a\n")
    rep = find_races(r)
    assert rep.total == 1 and rep.complete and len(rep.races) == 1
    race = rep.races[0]
    sides = {race.first.mnemonic: race.first, race.second.mnemonic: race.second}
    assert sides["dma_copy"].write and not sides["tensor_copy"].write
    assert (sides["dma_copy"].loc.line, sides["tensor_copy"].loc.line) == (8, 9)
    assert sides["dma_copy"].stream == "dma queue 0 from sync" and sides["tensor_copy"].stream == "vector"
    assert (race.memory, race.partitions, race.span) == ("sbuf", (0, 128), (0, 2048))
    # The Vector read ran first, long before the transfer (1300 ns of latency): luck, not order.
    assert race.first.mnemonic == "tensor_copy" and race.overlap_ns == 0 and race.kind == "WAR"
    text = rep.format()
    assert "racy.s:8:1" in text and "racy.s:9:1" in text and "by the luck of timing" in text


def test_the_same_program_with_its_waits_has_no_race(tmp_path):
    r = timed(tmp_path, HEAD + "dma_copy a, x, signal=[s1+=1]\ntensor_copy b, a, wait=[s1>=1]\n")
    rep = find_races(r)
    assert not rep and rep.total == 0 and rep.format() == "races: none" and rep.error() is None
    check_races(r)  # does not raise


def test_race_error_is_a_sim_error_at_a_line_of_the_race(tmp_path):
    r = timed(tmp_path, HEAD + "dma_copy a, x\ntensor_copy b, a\ndma_copy y, b, engine=gpsimd, queue=1\n")
    err = race_error(r)
    assert isinstance(err, RaceError) and isinstance(err, SimError)
    with pytest.raises(RaceError) as info:
        check_races(r)
    text = info.value.format()
    # Two races: the load with the copy, the copy with the store; the first to begin is named.
    assert "1 more race" in text and "no semaphore orders them" in text
    first = find_races(r).races[0]
    assert info.value.loc == first.second.loc  # placed at the access that began later
    assert "tensor_copy b, a" in text and ("dma_copy a, x" in text or "dma_copy y, b" in text)
    assert race_error(find_races(r)).message == err.message


def test_the_store_of_a_computed_tile_races_unless_it_waits(tmp_path):
    racy = HEAD + "tensor_copy b, a\ndma_copy y, b, engine=gpsimd\n"
    fixed = HEAD + "tensor_copy b, a, signal=[s2+=1]\ndma_copy y, b, engine=gpsimd, wait=[s2>=1]\n"
    rep = find_races(timed(tmp_path, racy))
    assert rep.total == 1 and rep.races[0].kind == "RAW"
    assert {rep.races[0].first.loc.line, rep.races[0].second.loc.line} == {8, 9}
    assert not find_races(timed(tmp_path, fixed, "fixed.s"))


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_every_program_is_race_free(path):
    rep = find_races(time_program(assemble_file(path), CFG, str(path)))
    assert rep.total == 0 and rep.complete, rep.format()


@pytest.mark.parametrize(("third", "racy"), [
    ("activation c, exp, c, wait=[s1>=1], signal=[s2+=1]", False),  # Scalar waits for the load
    ("activation c, exp, c, signal=[s2+=1]", True),  # Scalar does not: its signal says nothing of the load
    ("sem_wait s1>=1, engine=gpsimd\nsem_signal s2+=1, engine=gpsimd", False),  # through semaphore instructions
])
def test_a_path_through_a_third_engine_orders_them(tmp_path, third, racy):
    r = timed(tmp_path, HEAD + f"dma_copy a, x, signal=[s1+=1]\n{third}\ntensor_copy b, a, wait=[s2>=1]\n")
    assert len(r.edge_signal) >= 1
    assert bool(find_races(r)) == racy


def test_program_order_and_issue_order_chain(tmp_path):
    """Vector's copy follows the load because an earlier Vector instruction waited for it."""
    r = timed(tmp_path, HEAD + "dma_copy a, x, signal=[s1+=1]\ntensor_copy c, c, wait=[s1>=1]\n"
                               "tensor_copy b, a\n")
    assert not find_races(r)


def test_an_engine_goes_on_after_issuing_a_transfer(tmp_path):
    """The issuing engine's next instruction does not follow the transfer: GpSimd's copy of a tile
    races with the load GpSimd issued just before it."""
    r = timed(tmp_path, HEAD + "dma_copy a, x, engine=gpsimd\ntensor_copy b, a, engine=gpsimd\n")
    rep = find_races(r)
    assert rep.total == 1 and {rep.races[0].first.stream, rep.races[0].second.stream} == {
        "gpsimd", "dma queue 0 from gpsimd"}


def test_transfers_on_one_queue_keep_their_order_but_not_across_issuing_engines(tmp_path):
    same = HEAD + "dma_copy a, x\ndma_copy y, a, queue=0\n"
    assert not find_races(timed(tmp_path, same))  # one stream: the queue keeps the order
    across = HEAD + "dma_copy a, x\ndma_copy y, a, queue=0, engine=gpsimd\n"
    assert find_races(timed(tmp_path, across, "across.s")).total == 1


@pytest.mark.parametrize(("count", "races"), [(2, 0), (1, 1)])
def test_a_wait_for_two_signals_follows_both(tmp_path, count, races):
    """Two loads each add 1 to s1; a copy that waits for s1>=2 follows both (release/acquire), one
    that waits for s1>=1 follows only the first to finish."""
    src = HEAD + (f"dma_copy a[:, 0:256], x[:, 0:256], queue=0, signal=[s1+=1]\n"
                  f"dma_copy a[:, 256:512], x[:, 256:512], queue=1, signal=[s1+=1]\n"
                  f"tensor_copy b, a, wait=[s1>={count}]\n")
    assert find_races(timed(tmp_path, src)).total == races


def test_interleaved_strided_writes_do_not_race_but_overlapping_ones_do(tmp_path):
    """Exact footprints: even and odd columns of one tile share no byte though their spans overlap.
    Scalar and Vector hold no common port on SBUF, so the racing pair also overlaps in time."""
    disjoint = HEAD + "tensor_copy a[:, 0::2], b[:, 0:256]\nactivation a[:, 1::2], exp, b[:, 256:512]\n"
    assert not find_races(timed(tmp_path, disjoint))
    meeting = HEAD + "tensor_copy a[:, 0::2], b[:, 0:256]\nactivation a[:, 0::4], exp, b[:, 256:384]\n"
    rep = find_races(timed(tmp_path, meeting, "meeting.s"))
    assert rep.total == 1 and rep.races[0].kind == "WAW" and rep.races[0].overlap_ns > 0
    assert "overlapped for" in rep.format()


def test_different_partitions_do_not_race(tmp_path):
    src = HEAD + "tensor_copy a[0:64, :], b[0:64, :]\nactivation a[64:128, :], exp, b[64:128, :]\n"
    assert not find_races(timed(tmp_path, src))


def test_many_races_are_counted_and_the_first_ones_described(tmp_path):
    body = "".join(f"tensor_copy b[:, {i * 8}:{i * 8 + 8}], a[:, 0:8]\n" for i in range(30))
    r = timed(tmp_path, HEAD + "dma_copy a, x\n" + body)
    rep = find_races(r, limit=4)
    assert rep.total == 30 and len(rep.races) == 4 and rep.complete
    assert "... and 27 more" in rep.format(show=3)
    starts = [race.second.start_ns for race in rep.races]
    assert starts == sorted(starts)


def test_more_distinct_footprints_than_the_first_hash_table_holds(tmp_path):
    """1,400 single-column copies on two engines, 2,800 distinct footprints (the hash of distinct
    footprints starts with room for 1,024 and is redone larger): each Vector write races with the
    GpSimd read of the same column and with nothing else."""
    n = 700
    text = (".kernel wide\n.sync manual\n.sbuf a f32[128, 700]\n.sbuf b f32[128, 700]\n.sbuf c f32[128, 700]\n"
            + "".join(f"tensor_copy a[:, {i}:{i + 1}], b[:, {i}:{i + 1}]\n" for i in range(n))
            + "".join(f"tensor_copy c[:, {i}:{i + 1}], a[:, {i}:{i + 1}], engine=gpsimd\n" for i in range(n)))
    r = timed(tmp_path, text, "wide.s")
    rep = find_races(r, limit=n)
    assert rep.total == n and rep.complete
    assert sorted((race.first.index, race.second.index) for race in rep.races) == [(i, i) for i in range(n)]
    assert {race.span for race in rep.races} == {(4 * i, 4 * i + 4) for i in range(n)}


def test_the_error_is_placed_at_the_access_that_began_later(tmp_path):
    """The load began later in the run (1300 ns of latency): the error points at it, and its notes
    give both lines."""
    r = timed(tmp_path, HEAD + "dma_copy a, x\ntensor_copy b, a\n")
    err = race_error(r)
    assert err.loc.line == 8 and err.message.startswith("race on sbuf partitions 0..127, bytes [0, 2048) of each:"
                                                        " sync[0] dma_copy writes bytes that vector[0] tensor_copy"
                                                        " reads")
    assert "racy.s:9:1: tensor_copy b, a" in err.format() and "8 | dma_copy a, x" in err.format()


def test_a_program_without_source_lines(tmp_path):
    lay_a = AccessPattern(Memory.SBUF, F32, 0, 128, 0, ((1, 64),))
    lay_b = AccessPattern(Memory.SBUF, F32, 0, 128, 256, ((1, 64),))
    r = time_program({"vector": [make("tensor_copy", dst=lay_a, src=lay_b)],
                      "gpsimd": [make("tensor_copy", "gpsimd", dst=lay_b, src=lay_a)]}, CFG)
    rep = find_races(r)
    assert rep.total == 1 and "<no source line>" in rep.format()
    assert isinstance(rep.error(), RaceError)


def test_no_accesses_no_races():
    assert find_races(time_program({}, CFG)) == RaceReport((), 0, True)


# --------------------------------------------------------------------------- random programs

def _views() -> dict[tuple[int, int], list[AccessPattern]]:
    """Views of two SBUF regions R1 (bytes 0..256 of each partition) and R2 (256..512) and of one HBM
    tensor H [128, 64] f32, by shape: whole, halves, even/odd columns, partition halves."""
    def sb(p0: int, p: int, off: int, dims) -> AccessPattern:
        return AccessPattern(Memory.SBUF, F32, p0, p, off, dims)

    pool: dict[tuple[int, int], list[AccessPattern]] = defaultdict(list)
    for base in (0, 256):
        pool[128, 64].append(sb(0, 128, base, ((1, 64),)))
        pool[128, 32] += [sb(0, 128, base, ((2, 32),)), sb(0, 128, base + 4, ((2, 32),)),
                          sb(0, 128, base + 128, ((1, 32),))]
        pool[64, 64] += [sb(0, 64, base, ((1, 64),)), sb(64, 64, base, ((1, 64),))]
    return pool


HBM_VIEWS = {(128, 64): [AccessPattern(Memory.HBM, F32, 0, 0, 0, ((64, 128), (1, 64)))],
             (128, 32): [AccessPattern(Memory.HBM, F32, 0, 0, 0, ((64, 128), (2, 32))),
                         AccessPattern(Memory.HBM, F32, 0, 0, 128, ((64, 128), (1, 32)))],
             (64, 64): [AccessPattern(Memory.HBM, F32, 0, 0, 0, ((64, 64), (1, 64))),
                        AccessPattern(Memory.HBM, F32, 0, 0, 64 * 64 * 4, ((64, 64), (1, 64)))]}


def random_instructions(draw) -> list[Instruction]:
    """Instructions in one global order, on every engine and three DMA queues, touching overlapping
    views, without semaphores."""
    pool = _views()
    out = []
    for _ in range(draw(st.integers(2, 24))):
        shape = draw(st.sampled_from(sorted(pool)))
        dst, src = draw(st.sampled_from(pool[shape])), draw(st.sampled_from(pool[shape]))
        kind = draw(st.sampled_from(["vector", "gpsimd", "scalar", "load", "store"]))
        if kind == "vector" or kind == "gpsimd":
            out.append(make("tensor_copy", kind, dst=dst, src=src))
        elif kind == "scalar":
            out.append(make("activation", dst=dst, data=src, op="exp"))
        else:
            h = draw(st.sampled_from(HBM_VIEWS[shape]))
            engine = draw(st.sampled_from(["sync", "gpsimd"]))
            dst, src = (dst, h) if kind == "load" else (h, src)
            out.append(make("dma_copy", engine, dst=dst, src=src, queue=draw(st.integers(0, 2))))
    return out


def by_engine(instrs: list[Instruction]) -> dict[str, list[Instruction]]:
    streams: dict[str, list[Instruction]] = {e: [] for e in ENGINES}
    for i in instrs:
        streams[i.engine].append(i)
    return streams


def with_random_waits(draw, instrs: list[Instruction]) -> list[Instruction]:
    """Each instruction counts its completions on its engine's semaphore and waits for counts that
    instructions before it in the global order produce (so it cannot deadlock)."""
    produced = dict.fromkeys(ENGINES, 0)
    out = []
    for instr in instrs:
        waits = []
        for other in draw(st.lists(st.sampled_from(ENGINES), max_size=2, unique=True)):
            if produced[other]:
                waits.append(SemOp(ENGINES.index(other), ">=", draw(st.integers(1, produced[other]))))
        out.append(dataclasses.replace(instr, waits=tuple(waits),
                                       signals=(SemOp(ENGINES.index(instr.engine), "+=", 1),)))
        produced[instr.engine] += 1
    return out


def reference_races(r: TimingResult) -> set[frozenset[int]]:
    """Every race by brute force: the happens-before graph of the module docstring searched from each
    instruction, and every pair on different streams compared byte for byte (ncsim.asm.sync)."""
    n = r.count
    instrs = [r.instruction(k) for k in range(n)]
    dma = [i.mnemonic == "dma_copy" for i in instrs]
    comp = [("t", k) if dma[k] else ("i", k) for k in range(n)]
    succ: dict[tuple, set] = defaultdict(set)
    last_transfer: dict[str, int] = {}
    for k in range(n):
        if k > 0 and r.engine[k] == r.engine[k - 1]:
            succ["i", k - 1].add(("i", k))
        if dma[k]:
            succ["i", k].add(("t", k))
            stream = stream_of(instrs[k])
            if stream in last_transfer:
                succ["t", last_transfer[stream]].add(("t", k))
            last_transfer[stream] = k
    for sig, w, sem in zip(r.edge_signal, r.edge_wait, r.edge_sem):
        for u in range(n):
            if sem not in [op.sem for op in instrs[u].signals]:
                continue
            early = dma[u] or r.end[u] > r.start[u]
            if r.done[u] < r.ready[w] or (r.done[u] == r.ready[w] and early) or u == sig:
                succ[comp[u]].add(("i", int(w)))

    def reach(k: int) -> set:
        seen, todo = set(), [comp[k]]
        while todo:
            for v in succ[todo.pop()]:
                if v not in seen:
                    seen.add(v)
                    todo.append(v)
        return seen

    after = [reach(k) for k in range(n)]
    races = set()
    for a in range(n):
        for b in range(a + 1, n):
            if stream_of(instrs[a]) == stream_of(instrs[b]):
                continue
            if comp[b] in after[a] or comp[a] in after[b]:
                continue
            fa, fb = accesses(instrs[a]), accesses(instrs[b])
            if hazard(fa, fb) or hazard(fb, fa):
                races.add(frozenset((a, b)))
    return races


@pytest.mark.parametrize(("window", "table"), [(races.LINEAR_WINDOW, races.CONFLICT_TABLE_MAX),
                                               (races.LINEAR_WINDOW, 0), (0, races.CONFLICT_TABLE_MAX)],
                         ids=["small-windows-conflicts-tabled", "small-windows-spans-compared", "trees-always"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_programs_agree_with_the_brute_force_reference(monkeypatch, window, table, data):
    monkeypatch.setattr(races, "LINEAR_WINDOW", window)
    monkeypatch.setattr(races, "CONFLICT_TABLE_MAX", table)
    instrs = with_random_waits(data.draw, random_instructions(data.draw))
    r = time_program(by_engine(instrs), CFG)
    rep = find_races(r, limit=10_000)
    assert rep.complete
    assert {frozenset((race.first.k, race.second.k)) for race in rep.races} == reference_races(r)


def reference_report(r: TimingResult, pairs: set[frozenset[int]]) -> list[tuple[int, int, str, str]]:
    """The races of `pairs` as find_races lists them, by plain Python from the timing result: sorted by
    when the later one began, then the earlier one, then their instruction numbers; each as (first k,
    second k, first's stream, second's stream), the first being the one whose accesses began first
    (then ended first, then the lower k). A dma_copy's accesses run from its earliest piece's start to
    its transfer's end on the stream `dma queue Q from ENGINE`."""
    def active(k: int) -> tuple[int, int]:
        pieces = range(int(r.piece_ptr[k]), int(r.piece_ptr[k + 1]))
        if r.instruction(k).mnemonic != "dma_copy":
            return int(r.start[k]), int(r.end[k])
        return (min(int(r.piece_start[p]) for p in pieces) if pieces else int(r.start[k])), int(r.done[k])

    out = []
    for pair in pairs:
        a, b = sorted(pair, key=lambda k: (*active(k), k))
        key = (active(b)[0], active(a)[0], min(a, b), max(a, b))
        out.append((key, (a, b, stream_of(r.instruction(a)), stream_of(r.instruction(b)))))
    return [race for _, race in sorted(out)]


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_random_programs_list_their_races_in_the_reference_order(data):
    """Beyond which pairs race: the order of the list, which side is first, the streams, and a byte
    range that both footprints hold, against plain Python on the same timing result."""
    instrs = random_instructions(data.draw)
    if data.draw(st.booleans()):
        instrs = with_random_waits(data.draw, instrs)
    r = time_program(by_engine(instrs), CFG)
    rep = find_races(r, limit=10_000)
    pairs = reference_races(r)
    assert rep.complete and rep.total == len(rep.races) == len(pairs)
    got = [(race.first.k, race.second.k, race.first.stream, race.second.stream) for race in rep.races]
    assert got == reference_report(r, pairs)
    for race in rep.races:
        assert race.first.start_ns <= race.second.start_ns
        for side in (race.first, race.second):
            rows = range(int(r.fp_ptr[side.k]), int(r.fp_ptr[side.k + 1]))
            assert any(Memory(int(r.fp_memory[row])).label == race.memory
                       and r.fp_lo[row] <= race.span[0] < race.span[1] <= r.fp_hi[row] for row in rows)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_programs_the_assembler_synchronises_are_race_free(data):
    instrs = synchronise(random_instructions(data.draw), CFG.semaphores).instructions
    r = time_program(by_engine(instrs), CFG)
    rep = find_races(r)
    assert rep.total == 0, rep.format()


# --------------------------------------------------------------------------- speed

_SEM = struct.Struct("<BBHI")


def _with_sync(template: bytes, waits=(), signals=()) -> bytes:
    """An encoded instruction (without semaphores) with these (sem, value) waits (>=) and signals (+=)."""
    head = bytearray(template[:8])
    head[2], head[3] = len(waits), len(signals)
    head[4:6] = (len(template) + 8 * (len(waits) + len(signals))).to_bytes(2, "little")
    return (bytes(head) + template[8:] + b"".join(_SEM.pack(s, 0, 0, v) for s, v in waits)
            + b"".join(_SEM.pack(s, 0, 0, v) for s, v in signals))


def pipeline(tiles: int, drop_wait_at: int | None = None) -> ObjectFile:
    """A streaming kernel of 3 x `tiles` instructions, synchronised by hand: Sync loads tile i into
    slot i % 3 (s0 counts loads), Vector copies it to out slot i % 2 (s1 counts copies), GpSimd
    stores it (s2 counts stores); a load waits for the copy that last read its slot, a copy for its
    load and for the store that last read its out slot, a store for its copy."""
    def sb(off: int) -> AccessPattern:
        return AccessPattern(Memory.SBUF, F32, 0, 128, off, ((1, 512),))

    x = AccessPattern(Memory.HBM, F32, 0, 0, 0, ((512, 128), (1, 512)))
    y = AccessPattern(Memory.HBM, F32, 0, 0, 1 << 20, ((512, 128), (1, 512)))
    load = [encode(make("dma_copy", "sync", dst=sb(2048 * s), src=x, queue=0)) for s in range(3)]
    copy = [[encode(make("tensor_copy", dst=sb(8192 + 2048 * o), src=sb(2048 * s))) for o in range(2)]
            for s in range(3)]
    store = [encode(make("dma_copy", "gpsimd", dst=y, src=sb(8192 + 2048 * o), queue=1)) for o in range(2)]
    parts: dict[str, list[bytes]] = {"sync": [], "vector": [], "gpsimd": []}
    for i in range(tiles):
        parts["sync"].append(_with_sync(load[i % 3], [(1, i - 2)] if i >= 3 else [], [(0, 1)]))
        waits = ([(0, i + 1)] if i != drop_wait_at else []) + ([(2, i - 1)] if i >= 2 else [])
        parts["vector"].append(_with_sync(copy[i % 3][i % 2], waits, [(1, 1)]))
        parts["gpsimd"].append(_with_sync(store[i % 2], [(1, i + 1)], [(2, 1)]))
    obj = ObjectFile("pipeline")
    for engine, line in (("sync", 10), ("vector", 20), ("gpsimd", 30)):
        obj.streams[engine] = b"".join(parts[engine])
        obj.lines[engine] = [LineEntry(j, 0, line, 3) for j in range(tiles)]
    obj.files = ["pipeline.s (generated)"]
    return obj


def test_a_large_program_is_checked_fast():
    find_races(time_program(pipeline(10), CFG))  # compile or load the numba kernels first
    tiles = 40_000
    r = time_program(pipeline(tiles), CFG)
    assert r.count == 3 * tiles
    t0 = time.perf_counter()
    rep = find_races(r)
    elapsed = time.perf_counter() - t0
    assert rep.total == 0 and rep.complete
    assert elapsed < 1.0, f"{elapsed:.2f} s for {r.count} instructions"
    racy = find_races(time_program(pipeline(tiles, drop_wait_at=tiles // 2), CFG))
    assert racy.total == 1
    race = racy.races[0]
    assert {race.first.mnemonic, race.second.mnemonic} == {"dma_copy", "tensor_copy"}
    assert {race.first.index, race.second.index} == {tiles // 2}


def test_the_candidate_cap_is_reported(monkeypatch):
    """A search stopped at its cap says so: `complete` is False and the count ends in '+'."""
    monkeypatch.setattr(races, "MAX_CANDIDATES", 3)
    src = ".kernel k\n.sync manual\n.sbuf a f32[128, 64]\n.sbuf b f32[128, 64]\n" + \
          "tensor_copy a, b\n" * 3 + "tensor_copy b, a, engine=gpsimd\n" * 3
    rep = find_races(time_program(assemble(src, "cap.s"), CFG))
    assert not rep.complete and rep.total >= 1 and "or more" in rep.format()
