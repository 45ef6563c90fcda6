"""The run report: its numbers add up, its bandwidths and utilisations match hand computations, and
its verdict names the bound of purpose-built programs (Vector chain, DMA stream, HBM-to-HBM copy,
tiny transfers, engines taking turns), of giou and of causal_softmax; the critical path's kinds add
up to the run. ncsim/runtime/report.py states the rule."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from ncsim.asm.assembler import assemble_file
from ncsim.asm.fields import SemOp
from ncsim.asm.instruction import Instruction
from ncsim.config import Config
from ncsim.memory.access import Memory
from ncsim.runtime.report import PATH_KINDS, THRESHOLD, Report, report
from ncsim.runtime.timing import ENGINES, time_program
from tests.engines.harness import Layout, const, make

CFG = Config()
ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = sorted(ROOT.glob("programs/*.s"))
LATENCY = round(CFG.dma_latency_ns * CFG.tick_hz / 1e9)


def sync(instr: Instruction, wait: tuple[tuple[int, int], ...] = (), signal: tuple[int, ...] = ()) -> Instruction:
    """instr waiting for s>=v for each (s, v) of `wait` and adding 1 to each s of `signal`."""
    return dataclasses.replace(instr, waits=tuple(SemOp(s, ">=", v) for s, v in wait),
                               signals=tuple(SemOp(s, "+=", 1) for s in signal))


def timed(config: Config = CFG, **streams: list[Instruction]) -> Report:
    return report(time_program(streams, config))


def check_sums(rep: Report) -> None:
    for s in rep.engines:
        assert s.busy + s.sem_wait + s.port_wait + s.idle == rep.total, s
        assert min(s.busy, s.sem_wait, s.port_wait, s.idle, s.sem_wait_dma) >= 0 and s.sem_wait_dma <= s.sem_wait
    assert rep.computing + rep.moving + rep.latency == rep.total
    assert min(rep.computing, rep.moving, rep.latency) >= 0
    assert sum(d.bytes for d in rep.directions) == rep.dma_bytes
    assert sum(d.transfers for d in rep.directions) == rep.transfers
    assert [k for k, _ in rep.critical_path] == list(PATH_KINDS)
    assert sum(t for _, t in rep.critical_path) == rep.total and min(t for _, t in rep.critical_path) >= 0
    assert rep.path("other") == 0  # the walk explains every tick
    for e in ENGINES:  # an engine's time on the path is some of its busy time
        assert rep.path(e) <= rep.engine(e).busy


# --------------------------------------------------------------------------- whole programs

@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_every_program_adds_up_and_fits_100_columns(path):
    r = time_program(assemble_file(path), CFG, str(path))
    rep = report(r)
    check_sums(rep)
    assert [s.instructions for s in rep.engines] == [int(r.first[e + 1] - r.first[e]) for e in range(len(ENGINES))]
    assert all(len(line) <= 100 for line in rep.table())
    text = rep.format(path.name)
    assert all(len(line) <= 100 for line in text.splitlines()), text
    assert f"{r.total_ns:.1f} ns" in text and f"{r.total_ticks} ticks" in text and "verdict  bound by" in text


def test_giou_is_bound_by_the_vector_engine():
    r = time_program(assemble_file(ROOT / "programs" / "giou.s"), CFG)
    rep = report(r)
    vector = rep.engine("vector")
    assert rep.verdict.kind == "engine" and rep.verdict.engine == "vector"
    assert rep.share(vector.busy) > 0.85
    assert rep.verdict.text.startswith(f"bound by the Vector engine: busy {100 * rep.share(vector.busy):.0f}% of"
                                       f" {rep.total_us:.1f} µs")
    assert rep.transfers == 48 and rep.queues == (0, 1, 2) and rep.dma_bytes == 9 * 2**20
    assert [d.direction for d in rep.directions] == ["hbm->sbuf", "sbuf->hbm"]
    assert rep.flops == 0 and rep.fp32_matmuls == 0
    line = f"verdict  {rep.verdict.text}"
    assert line in rep.format().splitlines()  # it fits on one line
    assert f"```\n{line}\n```" in (ROOT / "docs" / "timing.md").read_text(), "docs/timing.md shows another verdict"


# --------------------------------------------------------------------------- purpose-built programs

def test_a_chain_of_vector_work_is_vector_bound():
    lay = Layout()
    t = lay.tile("f32", 128, 512)
    chain = [make("tensor_scalar", dst=t, data=t, op0="add", operand0=const(1.0)) for _ in range(30)]
    rep = timed(vector=chain)
    check_sums(rep)
    assert rep.verdict.kind == "engine" and rep.verdict.engine == "vector"
    assert rep.engine("vector").busy == rep.total and rep.engine("vector").idle == 0
    assert rep.transfers == 0 and "no transfers" in rep.format()


def test_a_big_dma_stream_is_dma_bound():
    lay = Layout()
    loads = [make("dma_copy", "sync", dst=lay.tile("f32", 128, 4096), src=lay.hbm("f32", 128, 4096), queue=q % 4)
             for q in range(8)]
    rep = timed(sync=loads)
    check_sums(rep)
    assert rep.verdict.kind == "dma-bandwidth", rep.verdict.text
    assert rep.dma_busy > 0.95 and rep.chunk_efficiency == 1.0 and rep.hbm_capped == 0
    assert rep.queues == (0, 1, 2, 3) and rep.dma_engines_used == 16 and rep.transfers == 8
    assert rep.verdict.text.startswith(f"bound by DMA bandwidth: DMA engines busy {100 * rep.dma_busy:.0f}%")


def test_a_big_hbm_to_hbm_copy_is_hbm_bound():
    lay = Layout()
    size = 8 << 20
    rep = timed(sync=[make("dma_copy", "sync", dst=lay.hbm("f32", size // 4), src=lay.hbm("f32", size // 4))])
    check_sums(rep)
    assert rep.verdict.kind == "hbm-bandwidth", rep.verdict.text
    assert rep.hbm_bytes == 2 * size and rep.hbm_utilisation > 0.95
    assert rep.hbm_capped == rep.dma_active  # the cap binds whenever data moves
    assert [d.direction for d in rep.directions] == ["hbm->hbm"]


def test_a_load_copy_store_of_small_transfers_is_a_chain_of_dma_latency_and_data():
    lay = Layout()
    a, b = lay.tile("f32", 128, 8), lay.tile("f32", 128, 8)
    load = sync(make("dma_copy", "sync", dst=a, src=lay.hbm("f32", 128, 8)), signal=(1,))
    copy = sync(make("tensor_copy", dst=b, src=a), wait=((1, 1),), signal=(2,))
    store = sync(make("dma_copy", "gpsimd", dst=lay.hbm("f32", 128, 8), src=b, queue=1), wait=((2, 1),))
    r = time_program({"sync": [load], "vector": [copy], "gpsimd": [store]}, CFG)
    rep = report(r)
    check_sums(rep)
    vector = rep.engine("vector")
    assert vector.sem_wait > 0 and vector.sem_wait_dma == vector.sem_wait  # it waited for the load
    # The path: the load's latency and data, the copy, the store's latency and data, nothing else.
    pieces = r.pieces_of(r.find("sync", 0))
    data = int(r.piece_end[pieces].max() - r.piece_start[pieces].min())
    assert rep.path("dma latency") == 2 * LATENCY and rep.path("vector") == vector.busy
    assert rep.path("dma data") == rep.total - 2 * LATENCY - vector.busy and rep.path("dma data") >= 2 * data
    assert rep.share(rep.path("dma latency")) < THRESHOLD  # 4 KiB transfers of 32-byte chunks move slowly
    assert rep.verdict.kind == "chain", rep.verdict.text
    assert rep.verdict.text.startswith(f"bound by a dependency chain: the critical path is DMA latency"
                                       f" {100 * rep.share(2 * LATENCY):.0f}%, DMA data")


def test_a_chain_of_tiny_dmas_is_latency_bound():
    lay = Layout()
    tiles = [lay.tile("f32", 1, 16) for _ in range(4)]
    chain = [sync(make("dma_copy", "sync", dst=tiles[0], src=lay.hbm("f32", 1, 16)), signal=(1,))]
    chain += [sync(make("dma_copy", "sync", dst=tiles[i], src=tiles[i - 1]), wait=((1, i),), signal=(1,))
              for i in range(1, 4)]
    rep = timed(sync=chain)
    check_sums(rep)
    assert rep.path("dma latency") == 4 * LATENCY  # each transfer's latency, one after the other
    assert rep.path("dma data") == rep.total - 4 * LATENCY and rep.share(rep.path("dma latency")) > 0.95
    assert rep.verdict.kind == "dma-latency", rep.verdict.text
    assert rep.verdict.text.startswith(f"bound by DMA latency: {100 * rep.share(4 * LATENCY):.0f}% of the critical"
                                       " path waits out the 1300 ns fixed cost of transfers (mean 64 B)")


def test_engines_taking_turns_on_semaphores_are_a_chain_of_those_engines():
    lay = Layout()
    t = lay.tile("f32", 128, 512)
    vector, scalar = [], []
    for i in range(8):
        vector.append(sync(make("tensor_scalar", dst=t, data=t, op0="add", operand0=const(1.0)),
                           wait=((2, i),) if i else (), signal=(1,)))
        scalar.append(sync(make("activation", dst=t, data=t, op="exp"), wait=((1, i + 1),), signal=(2,)))
    rep = timed(vector=vector, scalar=scalar)
    check_sums(rep)
    busy = {e: rep.share(rep.engine(e).busy) for e in ("vector", "scalar")}
    assert max(busy.values()) < THRESHOLD and sum(busy.values()) > 0.95  # one at a time, always one
    assert rep.engine("vector").sem_wait_dma == 0 and rep.engine("scalar").sem_wait > 0
    # Every instruction is on the path: all of both engines' work, then port waits if any.
    assert rep.path("vector") == rep.engine("vector").busy and rep.path("scalar") == rep.engine("scalar").busy
    assert rep.path("vector") + rep.path("scalar") + rep.path("port wait") == rep.total
    assert rep.verdict.kind == "chain", rep.verdict.text
    first, second = sorted(("vector", "scalar"), key=lambda e: -rep.path(e))
    name = {"vector": "Vector", "scalar": "Scalar"}
    assert rep.verdict.text.startswith(
        f"bound by a dependency chain: the critical path is {name[first]} {100 * rep.share(rep.path(first)):.0f}%,"
        f" {name[second]} {100 * rep.share(rep.path(second)):.0f}%")


def test_causal_softmax_is_bound_by_a_chain_of_vector_scalar_and_gpsimd():
    rep = report(time_program(assemble_file(ROOT / "programs" / "causal_softmax.s"), CFG))
    check_sums(rep)
    assert max(rep.share(rep.engine(e).busy) for e in ("tensor", "vector", "scalar", "gpsimd")) < THRESHOLD
    assert max(rep.dma_busy, rep.hbm_utilisation) < THRESHOLD  # rule 3
    assert rep.verdict.kind == "chain", rep.verdict.text
    assert max(t for _, t in rep.critical_path) < THRESHOLD * rep.total  # no kind holds most of the path
    assert rep.verdict.text.startswith("bound by a dependency chain: the critical path is ")
    for e in ("vector", "scalar", "gpsimd"):
        assert rep.share(rep.path(e)) > 0.1
        assert f"{e.capitalize() if e != 'gpsimd' else 'GpSimd'} {100 * rep.share(rep.path(e)):.0f}%" in rep.verdict.text
    shown = "\n".join(line.strip() for line in rep.format().split("verdict  ")[1].splitlines())
    docs = (ROOT / "docs" / "timing.md").read_text().split("causal_softmax:\n\n   ```\n")[1].split("   ```")[0]
    assert shown == "\n".join(line.strip() for line in docs.strip().splitlines()).removeprefix("verdict  ")


def test_matmuls_count_against_the_tensor_peak():
    lay = Layout()

    def chain(dtype: str) -> Report:
        st, mv = lay.tile(dtype, 128, 128), lay.tile(dtype, 128, 512)
        return timed(tensor=[make("nc_matmul", dst=lay.tile("f32", 128, 512, memory=Memory.PSUM), stationary=st,
                                  moving=mv) for _ in range(6)])

    bf16, fp32 = chain("bf16"), chain("f32")
    flops = 6 * 2 * 128 * 128 * 512
    assert bf16.flops == fp32.flops == flops
    assert bf16.tensor_utilisation == pytest.approx(flops / (bf16.total / CFG.tick_hz * CFG.tensor_peak_flops))
    assert 0.8 < bf16.tensor_utilisation < 1 and fp32.tensor_utilisation < 0.25
    assert bf16.verdict.engine == "tensor" and fp32.verdict.engine == "tensor"
    assert (bf16.fp32_matmuls, fp32.fp32_matmuls) == (0, 6)
    assert "6 fp32 matmuls count against it but run at a quarter of it (22.94 TFLOPS)" in " ".join(
        fp32.format().split())


def test_the_bandwidth_of_a_single_transfer_is_its_bytes_over_its_time():
    lay = Layout()
    rep = timed(sync=[make("dma_copy", "sync", dst=lay.tile("f32", 128, 512), src=lay.hbm("f32", 128, 512))])
    (d,) = rep.directions
    assert (d.direction, d.transfers, d.bytes) == ("hbm->sbuf", 1, 128 * 512 * 4)
    piece = math.ceil(8 * 2048 / (CFG.dma_engine_bandwidth * CFG.dma_efficiency(2048) / CFG.tick_hz) - 1e-9)
    assert rep.total == LATENCY + piece and d.moving == piece
    assert rep.bandwidth(d) == pytest.approx(d.bytes / (rep.total / CFG.tick_hz))
    assert rep.bandwidth(d, while_moving=True) == pytest.approx(16 * CFG.dma_engine_bandwidth * 0.81, rel=1e-3)
    assert rep.latency == LATENCY and rep.moving == piece and rep.computing == 0
    assert (rep.path("dma latency"), rep.path("dma data")) == (LATENCY, piece)
    assert rep.dma_busy == pytest.approx(piece / rep.total)
    assert rep.hbm_utilisation == pytest.approx(d.bytes / (rep.total / CFG.tick_hz) / CFG.hbm_bandwidth)
    text = rep.format()
    assert f"{rep.bandwidth(d) / 1e9:.1f} GB/s over the run" in text
    assert f"{rep.bandwidth(d, True) / 1e9:.1f} GB/s while moving" in text


def test_port_waits_are_counted():
    lay = Layout()
    v = make("tensor_copy", dst=lay.tile("f32", 128, 512), src=lay.tile("f32", 128, 512))
    g = make("tensor_copy", "gpsimd", dst=lay.tile("f32", 128, 512), src=lay.tile("f32", 128, 512))
    rep = timed(vector=[v], gpsimd=[g])
    check_sums(rep)
    assert rep.engine("gpsimd").port_wait == rep.engine("vector").busy  # it waited for Vector's SBUF port


def test_cycles_of_each_clock():
    lay = Layout()
    rep = timed(vector=[make("tensor_copy", dst=lay.tile("f32", 128, 512), src=lay.tile("f32", 128, 512))])
    assert rep.cycles("vector") == rep.total / 5 and rep.cycles("tensor") == rep.total / 2
    assert "vector 572 at 1.12 GHz" in rep.format()


def test_an_empty_program():
    rep = report(time_program({}, CFG))
    check_sums(rep)
    assert rep.total == 0 and rep.verdict.kind == "empty" and "nothing ran" in rep.format()
