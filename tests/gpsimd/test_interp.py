"""The numba interpreter against the plain reference (ncsim/gpsimd/reference.py), instruction by
instruction over random register contents (edge values of fp32 and the integers, all lane types),
and cycle counts of small programs against hand-computed counts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ncsim import isa
from ncsim.asm.assembler import assemble
from ncsim.asm.instruction import Instruction
from ncsim.config import DEFAULT
from ncsim.gpsimd.code import CoreProgram
from ncsim.gpsimd.fields import Reg, RegKind, RegOrImmKind
from ncsim.gpsimd.interp import Operands, run_cores
from ncsim.gpsimd.reference import Core, run_core
from tests.strategies import values

NREG = 6  # registers the random instructions use (all set from random data first)
DATA = 16 * 64 + 4 * NREG  # bytes: NREG vector registers (at TCM 0), NREG scalars (after them)
EDGE_F32 = [0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 2.5, -2.5, 3.4e38, -3.4e38, 1e-45, float("inf"), float("-inf"),
            float("nan"), 16777217.0, 2147483648.0, -2147483904.0, 65504.0]
EDGE_INT = [0, 1, -1, 2**31 - 1, -2**31, 127, -128, 32767, -32768, 255, 65535, 0x7FC00000, 0x7F800001]
CONTROL = {"beq", "bne", "blt", "bge", "jmp", "loop", "halt", "tcm_load", "tcm_store", "eld", "est", "talloc"}
MEMORY = {"ld", "st", "vld", "vld4", "vst", "vlds", "vsts"}
ROWS = [pytest.param(r, id=r.mnemonic) for r in isa.CORE_TABLE if r.mnemonic not in CONTROL]
SETUP = ".hbm x u8[{n}] in\n.hbm y u8[{n}] out\n.gpsimd p\n  li r31, 0\n  tcm_load r31, in0, r31, {n}\n{loads}{body}" \
        "{stores}  li r31, 0\n  tcm_store out0, r31, r31, {n}\n.end\ngpsimd_call p, y, x, cores=1\n"


EDGE_WORDS = np.array([int(np.float32(v).view(np.uint32)) for v in EDGE_F32] + [v & 0xFFFFFFFF for v in EDGE_INT]
                      + [0x3C003C00, 0x807F0180, 0x00010002, 0xFFFF8000], np.uint32)  # the last: i16 / i8 lanes


def words(draw) -> np.ndarray:
    """Random register contents: three words in four are edge values (fp32, the integers, 16- and 8-bit
    lanes), the rest any bits. Drawn from a seed with numpy: a list of ~260 hypothesis draws took
    80 ms an example, most of this test's time."""
    rng = np.random.default_rng(draw(st.integers(0, 2**64 - 1)))
    n = DATA // 4
    edge = EDGE_WORDS[rng.integers(0, EDGE_WORDS.size, n)]
    return np.where(rng.random(n) < 0.75, edge, rng.integers(0, 2**32, n, dtype=np.uint32)).astype(np.uint32)


def small_reg(kind):
    if isinstance(kind, RegKind):
        return st.integers(0, NREG - 1)
    if isinstance(kind, RegOrImmKind):
        return st.one_of(st.integers(0, NREG - 1).map(Reg), values(kind))
    return values(kind)


def program(instr: Instruction) -> CoreProgram:
    loads = "".join(f"  vld v{k}, r31, {64 * k}\n" for k in range(NREG))
    loads += "".join(f"  ld r{k}, r31, {64 * NREG + 4 * k}\n" for k in range(NREG))
    stores = "".join(f"  vst v{k}, r31, {64 * k}\n" for k in range(NREG))
    stores += "".join(f"  st r{k}, r31, {64 * NREG + 4 * k}\n" for k in range(NREG))
    from ncsim.asm.instruction import format_instruction

    src = SETUP.format(n=DATA, loads=loads, body="  " + format_instruction(instr) + "\n", stores=stores)
    return assemble(src, "t.s").gpsimd[0]


@pytest.mark.parametrize("row", ROWS)
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_instruction_matches_reference(row: isa.InstrSpec, data):
    ops = {o.name: data.draw(small_reg(o.kind)) for o in row.operands}
    fixed = {}
    if row.mnemonic in MEMORY:  # an address register inside the TCM: r5 = 4096
        ops["ra"] = NREG - 1
        fixed[NREG - 1] = 4096
        if "off" in ops:
            ops["off"] = data.draw(st.sampled_from([0, 4, 64, -64]))
        if "b" in ops:
            ops["b"] = data.draw(st.sampled_from([4, 8, 16, -4, 0, 1, 2]))
    if row.mnemonic == "vdiv":
        ops["t"] = "f32"
    if row.mnemonic == "vld4":  # its 4 destinations among the registers the program stores back
        ops["vd"] = data.draw(st.integers(0, NREG - 4))
    if row.mnemonic in ("vlane", "vext"):
        ops["lane"] = data.draw(st.integers(0, 64 // {"f32": 4, "i32": 4, "i16": 2, "i8": 1}[ops["t"]] - 1))
    instr = Instruction(row, "gpsimd", ops)
    raw = words(data.draw)
    for reg, value in fixed.items():
        raw[(64 * NREG) // 4 + reg] = value
    prog = program(instr)
    # the interpreter
    out = np.zeros(DATA, np.uint8)
    operands = Operands.make([(out, True, True, 0, 0), (raw.view(np.uint8).copy(), False, True, 0, 0), None, None,
                              None, None])
    run_cores(prog, 1, operands, DEFAULT)
    got = operands.values(0, np.uint8)
    # the reference
    args = {"in0": raw.view(np.uint8).copy(), "out0": np.zeros(DATA, np.uint8)}
    run_core(Core(0, 1, DEFAULT), prog, args)
    assert np.array_equal(got, args["out0"]), str(instr)


def cycles(body: str, cores: int = 1) -> list[int]:
    src = f".hbm x f32[16] in\n.hbm y f32[16] out\n.gpsimd p\n{body}\n.end\ngpsimd_call p, y, x, cores={cores}\n"
    prog = assemble(src, "c.s").gpsimd[0]
    ops = Operands.make([(np.zeros(16, np.float32), True, True, 0, 0), (np.zeros(16, np.float32), False, True, 0, 0),
                         None, None, None, None])
    return run_cores(prog, cores, ops, DEFAULT).cycles.tolist()


def test_cycle_counts_by_hand():
    # one instruction a cycle
    assert cycles("li r1, 1\n li r2, 2\n add r3, r1, r2") == [3]
    # a TCM load's result is ready 3 cycles after issue: the add waits 2 cycles
    assert cycles("li r1, 0\n ld r2, r1, 0\n add r3, r2, 1") == [1 + 1 + 2 + 1]
    # fdiv: 8 cycles before its result can be used
    assert cycles("lif r1, 1.0\n fdiv r2, r1, 3.0\n fadd r3, r2, r2") == [1 + 1 + 7 + 1]
    # a loop of 4 trips: li, then 4 x (add + loop), 3 taken branches of 2 extra cycles
    assert cycles("li r1, 4\ntop:\n add r2, r2, 1\n loop r1, top") == [1 + 4 * 2 + 3 * 2]
    # strided vector load: one lane a cycle (16 f32 lanes)
    assert cycles("li r1, 0\n vlds f32, v0, r1, 8") == [1 + 16]
    # vld4: 4 cycles (256 bytes, 64 a cycle), its 4 registers ready 3 cycles after the last: the vadd
    # reading v3 issues at 1 + 4 + 2
    assert cycles("li r1, 0\n vld4 f32, v0, r1, 0\n vadd f32, v4, v3, v0") == [1 + 4 + 2 + 1]
    # ... an instruction not reading them runs meanwhile
    assert cycles("li r1, 0\n vld4 f32, v0, r1, 0\n li r2, 1\n li r3, 2\n vadd f32, v4, v3, v0") == [1 + 4 + 2 + 1]
    # element accessor: gpsimd_element_access_cycles
    assert cycles("li r1, 0\n eld r2, in0, r1") == [1 + DEFAULT.gpsimd_element_access_cycles]
    # a block from HBM: the fixed cost, the DMA latency and 64 bytes at 17 B/ns at 1.4 GHz
    import math

    dma = math.ceil(DEFAULT.dma_latency_ns * 1.4)
    per_k = int(DEFAULT.dma_engine_bandwidth / DEFAULT.gpsimd_clock_hz * 1024)
    expect = 1 + DEFAULT.gpsimd_tcm_block_cycles + dma + (64 * 1024 + per_k - 1) // per_k
    assert cycles("li r1, 0\n tcm_load r1, in0, r1, 16") == [expect]
    # every core runs; core 1 skips the work
    assert cycles("coreid r1\n bne r1, 0, end\n li r2, 1\n li r2, 2\nend:", cores=2) == [4, 2 + 2]


def test_vld4_deinterleaves_boxes():
    """16 boxes of 4 f32 corners, x1 y1 x2 y2 interleaved, become 4 registers of 16 x1, y1, x2, y2."""
    boxes = np.arange(64, dtype=np.float32) * 1.5 - 7
    src = (".hbm x f32[64] in\n.hbm y f32[64] out\n.gpsimd p\n li r1, 0\n tcm_load r1, in0, r1, 64\n"
           " vld4 f32, v28, r1, 0\n vst v28, r1, 0\n vst v29, r1, 64\n vst v30, r1, 128\n vst v31, r1, 192\n"
           " tcm_store out0, r1, r1, 64\n.end\ngpsimd_call p, y, x, cores=1\n")
    prog = assemble(src, "b.s").gpsimd[0]
    ops = Operands.make([(np.zeros(64, np.float32), True, True, 0, 0), (boxes.copy(), False, True, 0, 0), None, None,
                         None, None])
    run_cores(prog, 1, ops, DEFAULT)
    assert np.array_equal(ops.values(0, np.float32), boxes.reshape(16, 4).T.reshape(-1))


def test_vld4_group_must_end_by_v31():
    from ncsim.errors import AsmError

    src = ".gpsimd p\n li r1, 0\n vld4 f32, v29, r1, 0\n.end\n"
    with pytest.raises(AsmError) as e:
        assemble(src, "g.s")
    text = str(e.value)
    assert "g.s:3:" in text and "v29..v32" in text and "at most v28" in text, text
