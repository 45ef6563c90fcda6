"""gpsimd_call through the machine and the timing model: values, the slowest core's time, and every
check of docs/gpsimd.md#checks by a program that breaks it."""

from __future__ import annotations

import numpy as np
import pytest

from ncsim import engines
from ncsim.asm.assembler import assemble
from ncsim.config import DEFAULT
from ncsim.errors import SimError
from ncsim.runtime.machine import Machine
from ncsim.runtime.timing import time_program

engines.load()
HEAD = ".hbm x f32[256] in\n.hbm y f32[256] out\n.sbuf s f32[128, 2]\n"


# the endless loops stop after 10**5 steps instead of the default's 10**8 (2 s each)
SHORT = DEFAULT.with_overrides({"gpsimd_step_limit": 100_000})


def run(source: str, x: np.ndarray | None = None) -> tuple[Machine, np.ndarray]:
    obj = assemble(HEAD + source, "call.s")
    m = Machine(obj, SHORT, "call.s")
    x = np.arange(-128, 128, dtype=np.float32) if x is None else x
    m.load_tensor(m.tensor("x"), x)
    m.run()
    return m, m.read_tensor(m.tensor("y"))


# Each core takes 32 elements: (32 * core + i), read, relu, written.
BLOCKS = """
.gpsimd relu
    coreid r1
    mul r2, r1, 32          # first element of this core
    li r3, 0
    lif r6, 0.0
    talloc r4, 128
    tcm_load r4, in0, r2, 32
    li r5, 2
top:
    vld v0, r4, 0
    vbcast f32, v1, r6
    vmax f32, v0, v0, v1
    vst v0, r4, 0
    add r4, r4, 64
    loop r5, top
    sub r4, r4, 128
    tcm_store out0, r2, r4, 32
.end
"""


def test_relu_on_eight_cores_values_and_time():
    m, y = run(BLOCKS + "gpsimd_call relu, y, x\n")
    assert np.array_equal(y, np.maximum(np.arange(-128, 128, dtype=np.float32), 0))
    timing = time_program(m.program, DEFAULT)
    k = m.program.find("gpsimd", 0)
    assert m.program.mnemonic(k) == "gpsimd_call" and "the slowest of 8 cores" in timing.formula(k)


def test_race_between_cores_names_both_lines():
    # the published multicore bug: partition * cpu_id + i * size instead of (partition * cpu_id + i) * size
    bad = BLOCKS.replace("mul r2, r1, 32          # first element of this core", "mul r2, r1, 16")
    with pytest.raises(SimError) as e:
        run(bad + "gpsimd_call relu, y, x\n")
    text = str(e.value)
    assert "race between GpSimd cores: core 1 writes element 16 of out0" in text and "which core 0 wrote" in text
    assert text.count("call.s:") >= 2  # both source lines


def test_race_core_reads_what_another_core_writes_later():
    # core 0 reads element 32 of out0 (core 1's block), then core 1 writes it: reported although
    # core 0 ran first (readers are recorded), with both source lines
    src = BLOCKS.replace("    tcm_store out0, r2, r4, 32\n", "    tcm_store out0, r2, r4, 32\n    li r7, 32\n"
                         "    bne r1, 0, skip\n    eld r8, out0, r7\nskip:\n")
    with pytest.raises(SimError) as e:
        run(src + "gpsimd_call relu, y, x\n")
    text = str(e.value)
    assert "race between GpSimd cores: core 1 writes element 32 of out0" in text and "which core 0 read" in text
    assert "call.s:" in text.split("which core 0 read at")[1]  # the reader's line too
    # a core reading back what it wrote itself is no race
    own = BLOCKS.replace("    tcm_store out0, r2, r4, 32\n", "    tcm_store out0, r2, r4, 32\n    eld r8, out0, r2\n")
    run(own + "gpsimd_call relu, y, x\n")


@pytest.mark.parametrize("body, message", [
    ("li r1, 65536\n ld r2, r1, 0", "outside the core's 65536 bytes of TCM"),
    ("talloc r1, 16384\n talloc r2, 64", "the TCM pool (gpsimd_tcm_pool_bytes = 16384) has 0 bytes left"),
    ("li r1, 250\n li r2, 0\n tcm_load r2, in0, r1, 16", "elements 250..266 of in0, which has 256 elements"),
    ("li r1, 0\ntop:\n add r1, r1, 1\n jmp top", "without ending (gpsimd_step_limit)"),
    ("li r1, 0\n est in0, r1, r1", "in0 is an input of the call"),
])
def test_checks(body, message):
    with pytest.raises(SimError, match=None) as e:
        run(f".gpsimd p\n {body}\n.end\ngpsimd_call p, y, x, cores=1\n")
    assert message in str(e.value)
    if "step_limit" in message:
        assert "ran 100000 instructions" in str(e.value)
    assert "GpSimd core 0, " in str(e.value) and "call.s:" in str(e.value)


def test_core_touching_partitions_not_its_own():
    # s is [128, 2]: element 40 lies in partition 20, core 1's; core 0 reads it
    src = ".gpsimd p\n li r1, 40\n li r2, 0\n tcm_load r2, in0, r1, 1\n.end\ngpsimd_call p, y, s, cores=1\n"
    obj = assemble(HEAD + src, "call.s")
    m = Machine(obj, DEFAULT, "call.s")
    with pytest.raises(SimError, match="lies in SBUF partition 20, but core 0 reaches only partitions 0..15"):
        m.run()


def test_step_limit_names_core_pc_and_line():
    with pytest.raises(SimError) as e:
        run(".gpsimd p\nspin:\n jmp spin\n.end\ngpsimd_call p, y, x, cores=1\n")
    assert "GpSimd core 0, call.s:6:2 (p[0] jmp 0)" in str(e.value)


def test_report_and_trace_show_each_core():
    # core 0 runs 20 more instructions than the others: its track is longer, the engine's slice lasts
    # until it ends, and the report gives every core's busy time
    from ncsim.engines.cores import core_cycles
    from ncsim.runtime.report import report
    from ncsim.runtime.trace import trace_dict

    src = BLOCKS.replace("    li r5, 2\n", "    li r5, 2\n    bne r1, 0, go\n    li r9, 20\nspin:\n    loop r9, spin\ngo:\n")
    m, _ = run(src + "gpsimd_call relu, y, x\n")
    timing = time_program(m.program, DEFAULT)
    k = m.program.find("gpsimd", 0)
    per_core = core_cycles(timing.instruction(k), DEFAULT)
    assert per_core[0] > per_core[1] == per_core[7]
    tpc = DEFAULT.ticks_per_cycle("gpsimd")
    rep = report(timing)
    assert rep.gpsimd_cores == tuple(int(c) * tpc for c in per_core)
    assert "GpSimd cores busy: 0 " in rep.format() and ", 7 " in rep.format()
    events = trace_dict(timing)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert [names[t] for t in sorted(names) if names[t].startswith("GpSimd core")] == [f"GpSimd core {c}" for c in range(8)]
    cores = sorted((e for e in events if e.get("cat") == "gpsimd_core"), key=lambda e: e["name"])
    assert [e["args"]["cycles"] for e in cores] == per_core.tolist()
    call = next(e for e in events if e.get("cat") == "instruction" and e["name"] == "gpsimd_call")
    assert all(e["ts"] == call["ts"] for e in cores)
    assert max(round(e["ts"] * 1000 + e["dur"]) for e in cores) <= round(call["ts"] * 1000 + call["dur"])
    assert cores[0]["dur"] > cores[1]["dur"]


def test_report_counts_tcm_blocks_from_hbm_as_dma_traffic():
    # BLOCKS on 8 cores: each a tcm_load of 32 f32 from HBM x and a tcm_store of 32 to HBM y; the report
    # counts the 16 blocks (8 x 128 bytes each way) as DMA transfers and HBM traffic, in directions of
    # their own
    from ncsim.runtime.report import report

    m, _ = run(BLOCKS + "gpsimd_call relu, y, x\n")
    rep = report(time_program(m.program, DEFAULT))
    assert rep.transfers == rep.tcm_blocks == 16
    assert rep.dma_bytes == rep.hbm_bytes == 2 * 8 * 128
    assert [(d.direction, d.transfers, d.bytes) for d in rep.directions] == [("hbm->tcm", 8, 1024),
                                                                              ("tcm->hbm", 8, 1024)]
    text = rep.format()
    assert "no transfers" not in text and "16 transfers (16 of them GpSimd TCM blocks), 2.00 KiB" in text, text
    assert "hbm->tcm" in text and "timed by the GpSimd cores" in text
