"""gpsimd_call: run a GpSimd program on the engine's cores (docs/gpsimd.md; see ncsim/engines/__init__.py
for the execute/reference/cost contract).

The values come from the numba interpreter (`ncsim.gpsimd.interp`), the plain reference from the
Python one (`ncsim.gpsimd.reference`), and the cost is the slowest core's cycles by the cycle model.
The cost is found by running the program on zeros (the timing model has no values): the simulated
time assumes the program's control flow does not depend on the data it reads (docs/gpsimd.md#cycles).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ncsim.asm.instruction import Instruction
from ncsim.config import Config
from ncsim.engines import reference, semantics
from ncsim.engines.context import Context
from ncsim.engines.cost import Cost, cost
from ncsim.errors import SimError
from ncsim.gpsimd.code import CoreProgram
from ncsim.gpsimd.fields import ARGS
from ncsim.memory.access import AccessPattern, Memory
from ncsim.memory.state import AccessError

# The interpreter (its module and its numba functions) is imported by the first gpsimd_call run or
# costed: a program without one does not pay for it (2.4-4.6 ms of a run's imports).
if TYPE_CHECKING:
    from ncsim.gpsimd.interp import Operands

WRITABLE = ("out0", "out1")


def program_of(instr: Instruction) -> CoreProgram:
    program = instr.operands["program"]
    if not isinstance(program, CoreProgram):
        raise SimError(f"gpsimd_call: GpSimd program {program} is not in this program (an object without its"
                       " .ncsim.gpsimd section?)")
    return program


def _spec(ap: AccessPattern, raw: np.ndarray, name: str) -> tuple[np.ndarray, bool, bool, int, int]:
    in_hbm = ap.memory == Memory.HBM
    return raw, name in WRITABLE, in_hbm, 0 if in_hbm else ap.partition, 0 if in_hbm else ap.free_elements


def _operands(specs: list[Any]) -> Operands:
    from ncsim.gpsimd.interp import Operands

    return Operands.make(specs)


def _run(instr: Instruction, config: Config, ops: Operands) -> Any:
    from ncsim.gpsimd.interp import CoreError, run_cores

    program = program_of(instr)
    try:
        return run_cores(program, instr.operands["cores"], ops, config)
    except CoreError as e:
        raise SimError(e.message, e.loc) from None


@semantics("gpsimd_call")
def gpsimd_call(ctx: Context) -> None:
    specs: list[Any] = []
    for name in ARGS:
        ap = ctx[name]
        if ap is None:
            specs.append(None)
            continue
        ap = ctx.ap(name)
        if ap.memory == Memory.PSUM:
            raise ctx.fail(f"'{name}' is in PSUM, which the GpSimd cores cannot reach")
        if name in WRITABLE:  # what the program does not write keeps its value: start from memory
            try:
                raw = np.array(ctx.mem.read_view(ap))
            except AccessError as e:
                raise ctx.fail(f"'{name}': {e}") from None
        else:
            raw = ctx.read_raw(name)
        specs.append(_spec(ap, raw, name))
    ops = _operands(specs)
    _run(ctx.instr, ctx.config, ops)
    for j, name in enumerate(ARGS):
        if name in WRITABLE and specs[j] is not None:
            ap = ctx.ap(name)
            ctx.write_raw(name, ops.values(j, specs[j][0].dtype).reshape(ap.shape))


@reference("gpsimd_call")
def gpsimd_call_reference(instr: Instruction, inputs: dict, state: dict) -> dict:
    from ncsim.gpsimd.reference import run_program

    program = program_of(instr)
    args = {name: np.array(inputs[name]).reshape(-1) for name in ARGS if name in inputs}
    aps = {name: instr.operands[name] for name in ARGS if isinstance(instr.operands[name], AccessPattern)}
    outs = run_program(program, instr.operands["cores"], args, aps, state.get("config"))
    return {name: outs[name].reshape(aps[name].shape) for name in WRITABLE if name in aps}


@cost("gpsimd_call")
def gpsimd_call_cost(instr: Instruction, config: Config) -> Cost:
    run = _zero_run(instr, config)
    slowest = int(np.argmax(run.cycles))
    cycles = int(run.cycles[slowest])
    per_core = ", ".join(str(int(c)) for c in run.cycles)
    # work=0: the cores' programs time their own start-up (gpsimd_sbuf_setup_cycles, docs/gpsimd.md), so the
    # whole call is the fixed part that a dependent or tiny instruction's overhead does not add to (docs/timing.md)
    return Cost(cycles, f"the slowest of {len(run.cycles)} cores, core {slowest}: {cycles} (cores: {per_core})",
                max((ap.free_elements for ap in (instr.operands[n] for n in ARGS) if isinstance(ap, AccessPattern)),
                    default=0), work=0)


def _zero_run(instr: Instruction, config: Config) -> Any:
    specs = [None if not isinstance(instr.operands[n], AccessPattern) else
             _spec(instr.operands[n], np.zeros(instr.operands[n].num_elements, instr.operands[n].dtype.storage), n)
             for n in ARGS]
    return _run(instr, config, _operands(specs))


def core_cycles(instr: Instruction, config: Config) -> np.ndarray:
    """Each core's cycles in a gpsimd_call (the report's and the trace's core tracks)."""
    return _zero_run(instr, config).cycles


def calls_per_core(result) -> tuple[np.ndarray, np.ndarray]:
    """The gpsimd_call instructions of a timed run (`ncsim.runtime.timing.TimingResult`) and each one's
    cores' ticks: (ks, ticks [calls, gpsimd_cores]), a core that did not run 0. Cycles come from the same
    zero-valued run as the cost, once per body (every instruction of a body has its cost)."""
    ks, ticks, _ = call_runs(result)
    return ks, ticks


def call_runs(result) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`calls_per_core`'s (ks, ticks) and each call's TCM accessor blocks from and to HBM summed over its
    cores (int64 [calls, 4]: loads, their bytes, stores, their bytes; `CoreRun.hbm_blocks`). Worked out
    once per result: the report and the trace both ask, and each body's run goes through the interpreter."""
    if "_gpsimd_call_runs" in result.__dict__:
        return result.__dict__["_gpsimd_call_runs"]
    from ncsim import isa

    config = result.config
    opcode = isa.BY_MNEMONIC["gpsimd_call"].opcode
    ks = np.flatnonzero(result.body_opcode[result.body] == opcode) if result.count else np.zeros(0, np.int64)
    ticks = np.zeros((len(ks), config.gpsimd_cores), np.int64)
    blocks = np.zeros((len(ks), 4), np.int64)
    per_body: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for i, k in enumerate(ks.tolist()):
        b = int(result.body[k])
        if b not in per_body:
            run = _zero_run(result.instruction(k), config)
            per_body[b] = (run.cycles * config.ticks_per_cycle("gpsimd"), run.hbm_blocks.sum(axis=0))
        ticks[i, :len(per_body[b][0])] = per_body[b][0]
        blocks[i] = per_body[b][1]
    result.__dict__["_gpsimd_call_runs"] = (ks, ticks, blocks)
    return ks, ticks, blocks
