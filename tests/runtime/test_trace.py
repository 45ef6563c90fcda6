"""The Perfetto trace and the PNG timeline of a timed run: the tracks, one slice per instruction with
its args, flows that pair up and bind to the right slices the way Perfetto's JSON importer binds
them, counters, times that agree with the TimingResult, and byte-identical output on repetition."""

from __future__ import annotations

import dataclasses
import json
import math
import struct
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ncsim.asm.assembler import assemble_file
from ncsim.asm.fields import SemOp
from ncsim.asm.instruction import Instruction
from ncsim.config import Config
from ncsim.memory.access import Memory
from ncsim.runtime import timing, trace
from ncsim.runtime.timeline import write_timeline
from ncsim.runtime.timing import time_program
from tests.engines.harness import Layout, const, make
from tests.runtime.test_timing import dma_program

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = sorted(ROOT.glob("programs/*.s"))
CFG = Config()
GIOU = "programs/giou.s"


def timed(path: str) -> tuple[timing.TimingResult, object]:
    """The program at `path` (relative to the project root, as the CLI would be given it) and its timing."""
    obj = assemble_file(path)
    return time_program(obj, CFG, path), obj


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # source places are the relative paths the objects recorded


def perfetto_ns(us: float) -> int:
    """What Perfetto's JSON importer makes of a time in us: llround(us * 1000.0)."""
    x = us * 1000.0
    return math.floor(x) + (x - math.floor(x) >= 0.5)


def check_perfetto(events: list[dict], result: timing.TimingResult) -> None:
    """Replay the events the way Perfetto imports them and check that no slice would be dropped and
    that every flow binds to its signalling and its waiting instruction.

    Perfetto's JSON importer turns times into integer ns, sorts the events by time, then complete
    slices of positive duration (longest first) before everything else, keeping the file's order
    otherwise (trace_sorter.h); each track is a stack of slices: a slice that starts inside an open
    one and ends after it is dropped (slice_tracker.cc); a flow's "s", and its "f" with bp "e", bind
    to the slice on top of their track's stack when they are read (json_trace_parser)."""
    label = [f"{timing.ENGINES[int(e)]}[{int(i)}]" for e, i in zip(result.engine, result.index, strict=True)]
    timed = [e for e in events if e["ph"] != "M"]

    def key(e: dict) -> tuple[int, int]:
        return perfetto_ns(e["ts"]), -perfetto_ns(e["dur"]) if e["ph"] == "X" else 0

    assert sorted(timed, key=key) == timed  # the file is in the order Perfetto reads it
    stacks: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    bound: dict[int, dict[str, str]] = defaultdict(dict)
    for ev in timed:
        ts = perfetto_ns(ev["ts"])
        if ev["ph"] == "X":
            end = ts + perfetto_ns(ev["dur"])
            stack = stacks[ev["tid"]]
            while stack and (stack[-1][1] < ts or (stack[-1][1] == ts and not (stack[-1][0] == ts and end == ts))):
                stack.pop()
            assert not stack or end <= stack[-1][1], (ev, stack[-1])  # nested or disjoint, never crossing
            stack.append((ts, end, ev["args"]["instr"]))
        elif ev["ph"] in "sf":
            top = stacks[ev["tid"]][-1]
            assert top[0] <= ts <= top[1]
            bound[ev["id"]][ev["ph"]] = top[2]
    assert len(bound) == len(result.edge_signal)
    for e, (sig, wait) in enumerate(zip(result.edge_signal, result.edge_wait, strict=True)):
        assert bound[e] == {"s": label[sig], "f": label[wait]}


def check_trace(data: dict, result: timing.TimingResult) -> None:
    """Everything a trace of `result` must hold, whatever the program."""
    events = data["traceEvents"]
    check_perfetto(events, result)
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert [names[t] for t in range(1, 6)] == ["Tensor", "Vector", "Scalar", "GpSimd", "Sync"]
    xs = [e for e in events if e["ph"] == "X" and e["cat"] == "instruction"]
    assert len(xs) == result.count
    xs.sort(key=lambda e: (e["tid"], e["args"]["start_tick"], e["args"]["end_tick"]))
    order = np.lexsort((result.end, result.start, result.engine))  # same order (an engine is in order)
    assert [e["args"]["instr"] for e in xs] == [f"{timing.ENGINES[result.engine[k]]}[{result.index[k]}]"
                                                 for k in order]
    assert [e["tid"] for e in xs] == (result.engine[order] + 1).tolist()
    assert [e["name"] for e in xs] == [result.mnemonic(k) for k in order]
    start = np.array([e["args"]["start_tick"] for e in xs])
    end = np.array([e["args"]["end_tick"] for e in xs])
    ts = np.array([e["ts"] for e in xs])
    assert (start == result.start[order]).all() and (end == result.end[order]).all()
    # ts is the start exact to the tick; ts + dur is the end to the nanosecond.
    assert (np.rint(ts * CFG.tick_hz / 1e6) == start).all()
    ends_ns = np.array([perfetto_ns(e["ts"]) + perfetto_ns(e["dur"]) for e in xs])
    assert (np.abs(ends_ns - end * 1e9 / CFG.tick_hz) <= 0.5 + 1e-6).all()
    for e, k in zip(xs, order.tolist(), strict=True):
        a = e["args"]
        assert a["asm"] == str(result.instruction(k))
        loc = result.loc(k)
        assert (a["at"], a["source"]) == ((str(loc), loc.text.strip()) if loc else ("", ""))
        assert a["cost"] == result.formula(k)
        assert a["sem_wait_ns"] == pytest.approx(result.ns(int(result.sem_wait[k])), abs=1e-3)
        assert a["port_wait_ns"] == pytest.approx(result.ns(int(result.port_wait[k])), abs=1e-3)
    # DMA: a slice per piece on its DMA engine's track, a slice per transfer on a queue's track.
    pieces = [e for e in events if e["ph"] == "X" and e["cat"] == "dma"]
    assert len(pieces) == result.pieces
    assert sum(e["args"]["bytes"] for e in pieces) == int(result.piece_bytes.sum())
    assert {names[e["tid"]] for e in pieces} == {f"DMA engine {d}" for d in set(result.piece_engine.tolist())}
    transfers = [e for e in events if e["ph"] == "X" and e["cat"] == "transfer"]
    assert len(transfers) == int((np.diff(result.piece_ptr) > 0).sum())
    assert {names[e["tid"]].split(" (")[0] for e in transfers} == {f"DMA q{q}" for q in set(result.piece_queue.tolist())}
    # Flows pair up; counters.
    flows = defaultdict(list)
    for e in events:
        if e["ph"] in "sf":
            flows[e["id"]].append(e["ph"])
    assert all(sorted(v) == ["f", "s"] for v in flows.values()) and len(flows) == len(result.edge_signal)
    assert all(e["bp"] == "e" for e in events if e["ph"] == "f")
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert "HBM bandwidth" in counters
    for memory in (Memory.SBUF, Memory.PSUM):
        assert (f"{memory.name} live bytes" in counters) == bool((result.fp_memory == int(memory)).any())


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


# --------------------------------------------------------------------------- giou, every program


def test_giou_trace(tmp_path):
    result, obj = timed(GIOU)
    path = tmp_path / "giou.trace.json"
    size = trace.write_trace(result, path, obj)
    assert size == path.stat().st_size
    data = json.loads(path.read_text())
    check_trace(data, result)
    assert data["otherData"]["kernel"] == "giou" and data["otherData"]["total_ticks"] == result.total_ticks
    events = data["traceEvents"]
    assert {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "NeuronCore-v2"}} in events
    names = [e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    assert names == ["Tensor", "Vector", "Scalar", "GpSimd", "Sync", "DMA q0", "DMA q1", "DMA q2"] + [
        f"DMA engine {d}" for d in range(16)]
    first = next(e for e in events if e["ph"] == "X" and e["args"]["instr"] == "vector[0]")
    assert first["name"] == "tensor_tensor" and first["tid"] == 2
    assert first["args"]["at"] == "programs/giou.s:47:3"
    assert first["args"]["source"] == "tensor_tensor w, p[:, c, 2::4], p[:, c, 0::4], subtract"
    assert first["args"]["asm"].endswith("subtract, wait=[s2>=1]")
    assert first["args"]["cost"].startswith("max(MIN_II=64, N=128) = 128 cycles @1.12 GHz = 640 ticks; bound by SBUF"
                                             " access of 'data1' 128 elements, stride 16 B: half rate")
    # waits for the first load: 1300 + 16384 / (17 x 0.81) - 166.5 ns (docs/timing.md)
    assert first["ts"] == 2.323571 and first["args"]["sem_wait_ns"] == pytest.approx(2323.6, abs=0.05)
    load = next(e for e in events if e.get("cat") == "transfer")  # 256 KiB from HBM on queue 0: 16 pieces
    assert load["args"] == {"instr": "sync[0]", "at": "programs/giou.s:43:3", "bytes": 262144, "pieces": 16,
                            "GB/s": pytest.approx(262144 / 1190, abs=1e-3), "queued_ns": 1133.571}
    assert data == trace.trace_dict(result, obj)
    assert max(e["args"]["bytes"] for e in events if e["name"] == "SBUF live bytes") <= 24 * 2**20


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_every_program(path, tmp_path):
    rel = str(path.relative_to(ROOT))
    result, obj = timed(rel)
    check_trace(json.loads(trace.trace_text(result, obj)), result)
    png = tmp_path / "t.png"
    write_timeline(result, png, obj)
    width, height = png_size(png)
    assert width == 1600 and 500 <= height <= 1500


def test_repeated_runs_are_byte_identical(tmp_path):
    outs = []
    for i in range(2):
        result, obj = timed(GIOU)
        trace.write_trace(result, tmp_path / f"{i}.json", obj)
        write_timeline(result, tmp_path / f"{i}.png", obj)
        outs.append(((tmp_path / f"{i}.json").read_bytes(), (tmp_path / f"{i}.png").read_bytes()))
    assert outs[0] == outs[1]


# --------------------------------------------------------------------------- programs built in Python


def sync(instr: Instruction, waits=(), signals=()) -> Instruction:
    return dataclasses.replace(instr, waits=tuple(waits), signals=tuple(signals))


def random_program(draw) -> dict[str, list[Instruction]]:
    """A random program that cannot deadlock (instruction i of a global order waits only for counts
    that instructions before it produce; engine e counts its completions on s{e}), with DMA on
    several queues (overlapping transfers), port conflicts, PSUM, and sem_wait / sem_signal."""
    lay = Layout()
    sbuf = [lay.tile("f32", 128, f) for f in (64, 512, 512)]
    psum = [lay.tile("f32", 128, 256, memory=Memory.PSUM)]
    hbm = [lay.hbm("f32", 128, 512), lay.hbm("f32", 16, 2048), lay.hbm("f32", 20, 512)]
    # 20 partitions over 16 DMA engines: pieces of two sizes, so transfers of one queue overlap.
    on_chip = [sbuf[1], lay.tile("f32", 16, 2048), lay.tile("f32", 20, 512)]
    streams: dict[str, list[Instruction]] = {e: [] for e in timing.ENGINES}
    produced = dict.fromkeys(timing.ENGINES, 0)
    for _ in range(draw(st.integers(1, 30))):
        engine = draw(st.sampled_from(timing.ENGINES))
        kind = draw(st.integers(0, 3))
        if kind == 0 and any(produced.values()):
            other = draw(st.sampled_from([e for e in timing.ENGINES if produced[e]]))
            instr = make("sem_wait", engine, cond=SemOp(timing.ENGINES.index(other), ">=",
                                                          draw(st.integers(1, produced[other]))))
        elif kind == 1 and engine in ("sync", "gpsimd", "scalar"):
            i = draw(st.integers(0, 2))
            h, t = hbm[i], on_chip[i]
            dst, src = (t, h) if draw(st.booleans()) else (h, t)
            instr = make("dma_copy", engine, dst=dst, src=src, queue=draw(st.integers(0, 2)))
        elif engine == "tensor":
            instr = make("nc_matmul", dst=psum[0], stationary=lay.tile("bf16", 128, 128),
                         moving=lay.tile("bf16", 128, 256))
        elif engine in ("vector", "gpsimd"):
            src = draw(st.sampled_from(sbuf[1:] + ([psum[0]] if engine == "vector" else [])))
            instr = make("tensor_copy", engine, dst=lay.tile("f32", 128, src.free_elements), src=src)
        else:
            instr = make("sem_signal", engine, update=SemOp(200, "+=", 1))
        waits = []
        for other in draw(st.lists(st.sampled_from(timing.ENGINES), max_size=2, unique=True)):
            if produced[other]:
                waits.append(SemOp(timing.ENGINES.index(other), ">=", draw(st.integers(1, produced[other]))))
        streams[engine].append(sync(instr, waits, [SemOp(timing.ENGINES.index(engine), "+=", 1)]))
        produced[engine] += 1
    return streams


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_random_programs(data):
    result = time_program(random_program(data.draw), CFG)
    assert trace.instruction_texts(result) == [str(result.instruction(k)) for k in range(result.count)]
    check_trace(json.loads(trace.trace_text(result)), result)  # without an object: places from loc(k)
    for memory in (Memory.SBUF, Memory.PSUM):
        times, level = trace.live_bytes(result, memory)
        assert (level >= 0).all() and level[-1] == 0 and (np.diff(times) > 0).all()


def test_live_bytes_follow_values():
    """A tile is live from the write that fills it to the last read of its value; a new value in the
    same bytes (a pure write) starts a new life."""
    lay = Layout()
    a, b = lay.tile("f32", 128, 512), lay.tile("f32", 64, 256)
    h_in, h_out = lay.hbm("f32", 128, 512), lay.hbm("f32", 64, 256)
    s = [SemOp(i, "+=", 1) for i in range(2)]
    w = [SemOp(i, ">=", 1) for i in range(2)]
    a_part = dataclasses.replace(a, partitions=64, dims=((1, 256),))  # a[0:64, 0:256]
    streams = {
        "sync": [sync(make("dma_copy", dst=a, src=h_in), signals=[s[0]])],  # a <- HBM
        "vector": [sync(make("tensor_copy", "vector", dst=b, src=a_part), [w[0]], [s[1]]),  # b <- part of a
                   make("memset", "vector", dst=a, value=const(0.0))],  # a new value in a, never read
        "gpsimd": [sync(make("dma_copy", "gpsimd", dst=h_out, src=b), [w[1]])],  # b -> HBM
    }
    r = time_program(streams, CFG)
    times, level = trace.live_bytes(r, Memory.SBUF)
    k_load, copy, memset, store = r.find("sync", 0), r.find("vector", 0), r.find("vector", 1), r.find("gpsimd", 0)
    load = r.pieces_of(k_load)
    a_bytes, b_bytes = 128 * 2048, 64 * 1024
    # a's first 64 partitions x 1024 bytes are read by the copy, the rest of a is never read.
    expect = defaultdict(int, {0: 0})  # the step function starts at 0
    for t0, t1, n in [(r.piece_start[load].min(), r.end[copy], 64 * 1024),  # the part of a the copy reads
                      (r.piece_start[load].min(), r.done[k_load], a_bytes - 64 * 1024),  # the rest: never read
                      (r.start[copy], r.done[store], b_bytes),
                      (r.start[memset], r.end[memset], a_bytes)]:
        expect[int(t0)] += n
        expect[int(t1)] -= n
    t = sorted(expect)
    lv = np.cumsum([expect[x] for x in t])
    keep = np.concatenate(([True], lv[1:] != lv[:-1]))
    assert times.tolist() == np.array(t)[keep].tolist() and level.tolist() == lv[keep].tolist()


def test_overlapping_transfers_of_a_queue_share_it_in_lanes():
    """20 partitions over 16 DMA engines: 4 engines move two partitions, so the second transfer of
    the queue starts on the others before the first has ended; it goes on a second track."""
    lay = Layout()
    loads = [make("dma_copy", dst=lay.tile("f32", 20, 512), src=lay.hbm("f32", 20, 512)) for _ in range(2)]
    result = time_program({"sync": loads}, CFG)
    data = trace.trace_dict(result)
    check_trace(data, result)
    names = {e["tid"]: e["args"]["name"] for e in data["traceEvents"] if e["name"] == "thread_name"}
    on = [names[e["tid"]] for e in data["traceEvents"] if e.get("cat") == "transfer"]
    assert on == ["DMA q0", "DMA q0 (2)"]


def test_lanes():
    queue = np.array([0, 0, 0, 1, 0])
    start = np.array([0, 5, 10, 0, 12])
    end = np.array([10, 12, 20, 50, 13])
    assert trace.lanes(queue, start, end).tolist() == [0, 1, 0, 0, 1]


def test_time_conversions():
    ticks = np.array([0, 1, 7, 5600, 733962, 2**40])
    ps = trace.ticks_to_ps(ticks, CFG.tick_hz)
    assert ps.tolist() == [round(t * 10**12 / CFG.tick_hz) for t in ticks.tolist()]
    assert (np.rint(ps / 1e6 * CFG.tick_hz / 1e6) == ticks).all()  # every tick stays apart
    odd = 7 * 10**9 + 3  # a clock whose ratio to 1 ps does not reduce: exact through Python integers
    assert trace.ticks_to_ps(np.array([2**50]), odd).tolist() == [(2**51 * 10**12 + odd) // (2 * odd)]
    assert trace.perfetto_ns(ps).tolist() == [perfetto_ns(p / 1e6) for p in ps.tolist()]


def test_timeline_without_object_and_empty_program(tmp_path):
    memset = make("memset", "vector", dst=Layout().tile("f32", 128, 64), value=const(1.0))
    result = time_program({"vector": [memset]}, CFG)
    write_timeline(result, tmp_path / "one.png")
    assert png_size(tmp_path / "one.png")[0] == 1600
    empty = time_program({}, CFG)
    write_timeline(empty, tmp_path / "empty.png")
    data = trace.trace_dict(empty)
    assert not [e for e in data["traceEvents"] if e["ph"] == "X"]


def test_constants_are_read_per_instruction_and_decoded_once_per_value(monkeypatch):
    """A body's instructions may differ in constants (tensor_scalar's operand0): their texts are
    right, and each distinct value is decoded once or twice, not each instruction."""
    lay = Layout()
    src, dst = lay.tile("f32", 128, 64), lay.tile("f32", 128, 64)
    values = [1.0, 2.5, 1.0, -3.0] * 25
    instrs = [make("tensor_scalar", "vector", dst=dataclasses.replace(dst, offset=dst.offset + 256 * (i % 7)),
                   data=src, op0="add", operand0=const(v)) for i, v in enumerate(values)]
    result = time_program({"vector": instrs}, CFG)
    decoded = []
    plain = timing.TimingResult.instruction
    monkeypatch.setattr(timing.TimingResult, "instruction", lambda self, k: decoded.append(k) or plain(self, k))
    texts = trace.instruction_texts(result)
    assert len(decoded) <= 2 * 3
    monkeypatch.undo()
    assert texts == [str(result.instruction(k)) for k in range(result.count)]
    assert len(set(result.body.tolist())) == 1  # one body: the values are not part of it


def test_large_runs_leave_out_asm_and_cost(monkeypatch):
    result, obj = timed(GIOU)
    full = trace.trace_dict(result, obj)
    monkeypatch.setattr(trace, "FULL_ARGS_MAX", result.count - 1)
    short = trace.trace_dict(result, obj)
    assert "more than" in short["otherData"].pop("args") and "args" not in full["otherData"]
    assert short["otherData"] == full["otherData"]
    for e in full["traceEvents"]:
        if e.get("cat") == "instruction":
            del e["args"]["asm"], e["args"]["cost"]
    assert short["traceEvents"] == full["traceEvents"]
    check_perfetto(short["traceEvents"], result)


def test_runs_of_many_pieces_leave_out_the_dma_engine_tracks(monkeypatch):
    """Past DMA_PIECES_MAX pieces: no piece slices and no DMA engine tracks, otherData's "dma" says so
    and names the limit; every other event is as in the full trace."""
    result, obj = timed(GIOU)
    full = trace.trace_dict(result, obj)
    monkeypatch.setattr(trace, "DMA_PIECES_MAX", result.pieces - 1)
    short = trace.trace_dict(result, obj)
    note = short["otherData"].pop("dma")
    assert f"{result.pieces} pieces, more than {result.pieces - 1}" in note and "DMA_PIECES_MAX" in note
    assert "dma" not in full["otherData"] and short["otherData"] == full["otherData"]
    names = {e["tid"]: e["args"]["name"] for e in full["traceEvents"] if e["name"] == "thread_name"}
    dma_tids = {t for t, name in names.items() if name.startswith("DMA engine")}
    assert dma_tids and result.pieces > 0
    kept = [e for e in full["traceEvents"] if e.get("tid") not in dma_tids]
    assert short["traceEvents"] == kept
    assert not [e for e in short["traceEvents"] if e.get("cat") == "dma"]
    check_perfetto(short["traceEvents"], result)


@pytest.mark.parametrize("wide", [False, True])
def test_events_are_ordered_as_perfetto_reads_them(wide):
    """_Events.order: by ns, then slices of positive duration (longest first), then everything else
    by the duration of its slice (longest first), then by `order`, then in order of addition; the
    numba path and, for keys too wide for it, the lexsort one."""
    rng = np.random.default_rng(7)
    ev = trace._Events()
    rows = []
    for kind in range(4):
        n = 400
        ps = rng.integers(0, 6, n) * 1000 + rng.integers(0, 3, n) * 300  # few distinct ns: many ties
        dur = rng.integers(0, 4, n)
        if wide and kind == 3:
            ps[0], dur[0] = 10**15, 10**10  # (ns + 1) * (2 * top + 1) passes 2**63
        order = rng.integers(0, 60, n)
        ev.add(["{}"], [], ps, dur, order, kind % 2 == 0)
        rows += [(int(p), int(d), kind % 2 == 0, int(o)) for p, d, o in zip(ps, dur, order, strict=True)]
    top = max(d for _, d, _, _ in rows)

    def key(i):
        p, d, is_slice, o = rows[i]
        return trace.perfetto_ns(np.array([p]))[0], top - d if is_slice and d > 0 else 2 * top - d, o, i

    assert ev.order().tolist() == sorted(range(len(rows)), key=key)


def test_written_in_many_chunks_by_the_writer_thread(tmp_path, monkeypatch):
    """write_trace renders into two buffers in turn while a second thread writes the other: with
    chunks of 4 KiB (some 130 of them for giou) the file is still exactly trace_text."""
    result, obj = timed(GIOU)
    text = trace.trace_text(result, obj)
    monkeypatch.setattr(trace, "_CHUNK_BYTES", 4096)
    chunks = [bytes(c) for c in trace._chunks(result, obj)]
    assert len(chunks) > 100 and b"".join(chunks).decode() == text
    assert trace.write_trace(result, tmp_path / "t.json", obj) == len(text)
    assert (tmp_path / "t.json").read_text() == text


def test_zeros_filled_ahead_are_overwritten_or_cut(tmp_path, monkeypatch):
    """write_trace fills the file with zeros ahead, as far as the events reserve: what they reserve is
    a lower bound of the text's size, and a file filled further than the text is cut to it."""
    result, obj = timed(GIOU)
    text = trace.trace_text(result, obj)
    reserved = []
    assert b"".join(bytes(c) for c in trace._chunks(result, obj, reserve=reserved.append)).decode() == text
    assert len(reserved) >= 5 and 0.5 * len(text) < sum(reserved) <= len(text)
    reserve, stop = trace._Prefill.reserve, trace._Prefill.stop

    def stop_when_filled(self):
        while self.done < self.allowed and not self.stopped:
            time.sleep(0.001)
        stop(self)

    monkeypatch.setattr(trace._Prefill, "stop", stop_when_filled)
    for factor in (1, 3):  # as reserved, and three times more (cut at the end)
        monkeypatch.setattr(trace._Prefill, "reserve", lambda self, n, f=factor: reserve(self, f * n))
        assert trace.write_trace(result, tmp_path / f"{factor}.json", obj) == len(text)
        assert (tmp_path / f"{factor}.json").read_text() == text


def test_written_to_a_device(tmp_path):
    """A trace written to /dev/null (no zeros filled ahead, no cut: neither applies to a device)."""
    result, obj = timed(GIOU)
    assert trace.write_trace(result, "/dev/null", obj) == len(trace.trace_text(result, obj))


@settings(max_examples=30, deadline=None)
@given(st.data(), st.booleans())
def test_transfers_are_their_pieces_gathered(data, lockstep):
    """transfers() reads each transfer's bodies' rows and class pieces: the same as gathering its pieces
    one by one, with the DMA engines in lockstep or each on its own."""
    streams = data.draw(dma_program())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(timing, "_LOCKSTEP", lockstep)
        r = time_program(streams, CFG)
    tr = trace.transfers(r)
    ks = np.flatnonzero(np.diff(r.piece_ptr) > 0)
    assert tr.instr.tolist() == ks.tolist()
    if len(ks) == 0:
        return
    at = r.piece_ptr[ks]
    assert tr.start.tolist() == np.minimum.reduceat(r.piece_start, at).tolist()
    assert tr.end.tolist() == np.maximum.reduceat(r.piece_end, at).tolist() == r.done[ks].tolist()
    assert tr.bytes.tolist() == np.add.reduceat(r.piece_bytes.astype(np.int64), at).tolist()
    assert tr.pieces.tolist() == np.diff(r.piece_ptr)[ks].tolist()
    for got, column in ((tr.queue, r.piece_queue), (tr.src, r.piece_src), (tr.dst, r.piece_dst)):
        assert got.tolist() == column[at].tolist()


INT64 = st.integers(-2**63, 2**63 - 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(INT64, INT64, INT64), min_size=1, max_size=20))
def test_render_writes_the_numbers_python_writes(values):
    """_render's numbers against Python's: an integer as str(), a fixed-point value x with 3 or 6
    places as its floor quotient and non-negative remainder by 10**3 or 10**6 (the trace's times are
    picoseconds and nanoseconds: x // 1000 "." x % 1000), over the whole int64 range."""
    n = len(values)
    data = np.array(values, np.int64).T.copy().reshape(-1)  # field c of event r at c * n + r
    ops = np.array([(trace._INT, 0), (trace._LIT, 0), (trace._FIX3, 1), (trace._LIT, 0), (trace._FIX6, 2)], np.int64)
    snip = np.frombuffer(b" " + bytes(8), np.uint8)
    buf = np.empty(1 << 16, np.uint8)
    i, used = trace._render(buf, np.arange(n, dtype=np.int64), 0, np.array([0, n], np.int64), np.array([0, 5], np.int64),
                            ops, data, np.zeros(1, np.int64), np.array([n], np.int64), np.array([2 + 2 + 3 * 28], np.int64),
                            snip, np.array([0, 1], np.int64))
    assert i == n
    want = "".join(f",\n{a} {b // 1000}.{b % 1000:03d} {c // 10**6}.{c % 10**6:06d}" for a, b, c in values)
    assert bytes(buf[:used]).decode() == want
