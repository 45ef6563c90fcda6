"""What each instruction costs: one function per instruction, in its engine's cycles (docs/hardware.md#cost).

Each function reads the decoded instruction and the configuration and returns a `Cost`: the cycles
of the instruction's own formula (the "average back-to-back" interval of docs/hardware.md#cost and the
row's `cost` text) and that formula written out with its numbers. `describe(instr, config)` adds
what every instruction shares and turns it into an `InstrCost`, the one record the timing model
keeps per distinct instruction: the SBUF/PSUM access time, the ports it holds, the overheads it may
pay depending on its neighbours, and the ticks of 5.6 GHz all of this comes to.

N is the number of free elements per partition of the operand the formula names (its input unless
said otherwise); MIN_II is `Config.min_ii`. Halves and thirds round up: a cycle is never split.
docs/timing.md states the model and the source of every formula.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ncsim import engines
from ncsim.asm.instruction import Instruction
from ncsim.asm.rules import dma_sizes
from ncsim.config import Config
from ncsim.errors import SimError
from ncsim.memory.access import AccessPattern, Memory
from ncsim.memory.dma import TransferPlan, plan_transfer

# What the timing model does with an instruction.
DATAPATH, DMA, SEMAPHORE = 0, 1, 2
# Ports (docs/hardware.md#ports): Vector and GpSimd share the SBUF port, Vector and Scalar the PSUM port.
PORT_SBUF, PORT_PSUM = 1, 2
PORT_USERS = {"vector": (PORT_SBUF | PORT_PSUM), "gpsimd": PORT_SBUF, "scalar": PORT_PSUM, "tensor": 0, "sync": 0}

BF16, F16, F32 = "bf16", "f16", "f32"

cost = engines.cost_function  # the decorator, by a short name


@dataclass(frozen=True)
class Cost:
    """An instruction's own cost, before its neighbours and the memories have their say."""

    cycles: int  # cycles of its engine by its formula
    formula: str  # the formula with its numbers, e.g. "max(MIN_II=64, 2N=1024)"
    n: int = 0  # the N of the formula: free elements per partition (what makes an instruction tiny)
    load_stationary: int = 0  # nc_matmul: cycles of its LoadStationary, which can overlap the previous matmul
    transfer: TransferPlan | None = None  # dma_copy: the pieces the DMA engines move
    # The formula's variable part: its cycles without the fixed part it has (the MIN_II floor, iota's
    # 150, a dynamic copy's 600). None: the formula has no fixed part (work = cycles). A dependent or
    # tiny instruction lasts max(cycles, work + its engine's overhead) (docs/timing.md).
    work: int | None = None


@dataclass(frozen=True)
class InstrCost:
    """Everything the timing model needs to know about one instruction apart from its neighbours."""

    engine: str
    kind: int  # DATAPATH, DMA (issue a transfer, then go on) or SEMAPHORE (no engine time)
    cycles: int  # the formula's cycles
    compute_ticks: int  # cycles x ticks per cycle
    access_ticks: int  # the slowest SBUF/PSUM operand at the docs/hardware.md#ports rate (0: not modelled)
    ticks: int  # busy time: max(compute_ticks, access_ticks)
    formula: str  # the whole cost in words, with its numbers
    n: int
    ports: int  # PORT_SBUF | PORT_PSUM it holds for its whole duration
    overhead_ticks: int  # what a dependent instruction adds: max(cycles, work + the engine's dependent overhead) - cycles
    tiny: bool  # N <= Config.tiny_free_elements
    start_ticks: int  # the tensor-access start, paid when nothing runs before it on its engine
    tiny_ticks: int  # what it adds because it is tiny: max(cycles, work + static_overhead_cycles) - cycles, or 0
    load_stationary_ticks: int  # nc_matmul's LoadStationary, overlapping the previous Tensor instruction
    transfer: TransferPlan | None
    flops: int = 0  # nc_matmul: 2 x K x M x N, for the Tensor engine's utilisation against its peak


def _ap(instr: Instruction, name: str) -> AccessPattern:
    return instr.operands[name]


def _tiles(instr: Instruction) -> list[AccessPattern]:
    """The operands that are access patterns (not constants, not absent)."""
    return [v for v in instr.operands.values() if isinstance(v, AccessPattern)]


def _mx(config: Config, expr: str, value: int) -> tuple[int, str]:
    """max(MIN_II, value): the cycles and the text."""
    return max(config.min_ii, value), f"max(MIN_II={config.min_ii}, {expr}={value})"


def _floor(config: Config, expr: str, value: int, n: int, note: str = "") -> Cost:
    """The Cost of the formula max(MIN_II, value): `value` is its work, MIN_II its fixed part."""
    cycles, text = _mx(config, expr, value)
    return Cost(cycles, text + note, n, work=value)


def _is(ap: object, *shorts: str) -> bool:
    return isinstance(ap, AccessPattern) and ap.dtype.short in shorts


def _unit_stride(ap: AccessPattern) -> bool:
    step = next((s for s, c in reversed(ap.dims) if c > 1), 1)
    return step == 1


def innermost_stride_bytes(ap: AccessPattern) -> int:
    """Bytes between consecutive elements of the innermost moving dimension (docs/hardware.md#ports)."""
    step = next((s for s, c in reversed(ap.dims) if c > 1), 1)
    return abs(step) * ap.dtype.itemsize


# --------------------------------------------------------------------------- Tensor engine

@cost("nc_matmul")
def nc_matmul(instr: Instruction, config: Config) -> Cost:
    stationary, moving = _ap(instr, "stationary"), _ap(instr, "moving")
    m, n = stationary.free_elements, moving.free_elements
    base = max(min(config.min_ii, m), n)
    text = f"max(min(MIN_II={config.min_ii}, M={m}), N={n})"
    slow = config.fp32_matmul_slowdown if _is(stationary, F32) or _is(moving, F32) else 1
    ls = math.ceil(m * slow / config.load_stationary_speedup)
    if slow > 1:
        return Cost(base * slow, f"{slow} x {text} (fp32)", n, ls)
    return Cost(base, text, n, ls)


@cost("nc_transpose")
def nc_transpose(instr: Instruction, config: Config) -> Cost:
    data = _ap(instr, "data")
    if instr.engine == "tensor":
        p, f = data.partitions, data.free_elements
        return Cost(max(p, min(config.min_ii, f)), f"max(P={p}, min(MIN_II={config.min_ii}, F={f}))", f)
    return _floor(config, "N", data.free_elements, data.free_elements)


# --------------------------------------------------------------------------- Scalar engine

@cost("activation")
def activation(instr: Instruction, config: Config) -> Cost:
    n = _ap(instr, "data").free_elements
    if instr.operands["reduce_res"] is not None:  # ActReadAccumulator writes the accumulators out (ARCH)
        return _with_reduce(config, n, " (reduce_res)")
    return _floor(config, "N", n, n)


def _with_reduce(config: Config, n: int, note: str = "") -> Cost:
    """max(MIN_II, N) + MIN_II: the second MIN_II is work (the accumulator read), not a floor."""
    cycles, text = _mx(config, "N", n)
    return Cost(cycles + config.min_ii, f"{text} + MIN_II={config.min_ii}{note}", n, work=n + config.min_ii)


@cost("activation_reduce", "tensor_scalar_reduce")
def with_reduce(instr: Instruction, config: Config) -> Cost:
    return _with_reduce(config, _ap(instr, "data").free_elements)


# --------------------------------------------------------------------------- Vector engine (and friends)

@cost("tensor_tensor")
def tensor_tensor(instr: Instruction, config: Config) -> Cost:
    a, b, dst = _ap(instr, "data1"), _ap(instr, "data2"), _ap(instr, "dst")
    n = a.free_elements
    mixed = {a.memory, b.memory} == {Memory.SBUF, Memory.PSUM}
    fast_bf16 = (all(_is(x, BF16) for x in (a, b, dst)) and instr.operands["op"] in ("add", "subtract", "multiply")
                 and _unit_stride(a) and _unit_stride(b))
    if mixed or fast_bf16:
        return _floor(config, "N", n, n, " (PSUM and SBUF inputs)" if mixed else " (bf16 add/subtract/multiply)")
    # Both inputs in SBUF (or both in PSUM), any other dtype or op: the ISA's estimate is 2N, the
    # chip measured about one element per cycle (docs/timing.md "Calibration": the fused Mamba
    # tutorial's fp32 profile); config.tensor_tensor_cycles_per_element says which.
    c = config.tensor_tensor_cycles_per_element
    return _floor(config, "N" if c == 1 else f"{c}N", c * n, n)


@cost("tensor_scalar", "tensor_copy", "bn_stats", "nc_match_replace8", "dropout", "nc_stream_shuffle")
def one_pass(instr: Instruction, config: Config) -> Cost:
    name = next(k for k in ("data", "src") if k in instr.operands)
    n = _ap(instr, name).free_elements
    return _floor(config, "N", n, n)


@cost("scalar_tensor_tensor")
def scalar_tensor_tensor(instr: Instruction, config: Config) -> Cost:
    data, other, dst = _ap(instr, "data"), _ap(instr, "operand1"), _ap(instr, "dst")
    n = data.free_elements
    ops = instr.operands["op0"], instr.operands["op1"]
    if ops == ("subtract", "multiply") and all(_is(x, BF16) for x in (data, other, dst)) and n % 2 == 0:
        return _floor(config, "N", n, n, " (bf16 subtract then multiply, N even)")
    return _floor(config, "2N", 2 * n, n)


@cost("tensor_reduce")
def tensor_reduce(instr: Instruction, config: Config) -> Cost:
    data, dst = _ap(instr, "data"), _ap(instr, "dst")
    n = data.free_elements
    if _is(data, BF16) and _is(dst, BF16) and instr.operands["op"] in ("add", "maximum"):
        return _floor(config, "N/2", math.ceil(n / 2), n, f" (bf16 {instr.operands['op']})")
    return _floor(config, "N", n, n)


@cost("tensor_tensor_scan")
def tensor_tensor_scan(instr: Instruction, config: Config) -> Cost:
    n = _ap(instr, "data0").free_elements
    return _floor(config, "2N", 2 * n, n)


@cost("tensor_copy_predicated")
def tensor_copy_predicated(instr: Instruction, config: Config) -> Cost:
    n = _ap(instr, "dst").free_elements
    if all(t.memory == Memory.SBUF for t in _tiles(instr)):
        return _floor(config, "2N", 2 * n, n)
    return _floor(config, "N", n, n, " (operands span memories)")


@cost("tensor_copy_dynamic_src", "tensor_copy_dynamic_dst")
def dynamic_copy(instr: Instruction, config: Config) -> Cost:
    n = _ap(instr, "src").free_elements
    least = config.dynamic_copy_min_cycles
    return Cost(max(least, n), f"max({least}, N={n})", n, work=n)


@cost("memset")
def memset(instr: Instruction, config: Config) -> Cost:
    dst = _ap(instr, "dst")
    n = dst.free_elements
    if instr.operands["value"].value == 0 and _is(dst, BF16, F16):
        return _floor(config, "N/2", math.ceil(n / 2), n, " (zero into a 16-bit float)")
    return _floor(config, "N", n, n)


@cost("reciprocal")
def reciprocal(instr: Instruction, config: Config) -> Cost:
    n = _ap(instr, "data").free_elements
    return _floor(config, "8N", 8 * n, n)


@cost("bn_aggr")
def bn_aggr(instr: Instruction, config: Config) -> Cost:
    n = _ap(instr, "data").free_elements
    return _floor(config, "13N/3", math.ceil(13 * n / 3), n)


@cost("max8", "nc_find_index8")
def top8(instr: Instruction, config: Config) -> Cost:
    n = _ap(instr, "src" if "src" in instr.operands else "data").free_elements
    return _floor(config, "N", n, n)


# --------------------------------------------------------------------------- GpSimd engine

@cost("iota", "affine_select")
def affine(instr: Instruction, config: Config) -> Cost:
    n = _ap(instr, "dst").free_elements
    start = config.gpsimd_iota_fixed_cycles
    return Cost(start + n, f"{start} + N={n}", n, work=n)


@cost("tensor_partition_reduce")
def tensor_partition_reduce(instr: Instruction, config: Config) -> Cost:
    data = _ap(instr, "data")
    p, n = data.partitions, data.free_elements
    each, text = _mx(config, "N", n)
    return Cost(p * each, f"P={p} x {text}", n, work=p * n)


@cost("local_gather")
def local_gather(instr: Instruction, config: Config) -> Cost:
    src, index = _ap(instr, "src_buffer"), _ap(instr, "index")
    e = instr.operands["num_elem_per_idx"]
    valid = instr.operands["num_valid_indices"]
    if valid is None:
        valid = index.free_elements * min(index.partitions, config.gpsimd_partitions_per_core)
    t, base = config.local_gather_t, config.local_gather_overhead
    c = ((base + t * e) / (t * e)) / min(4 / src.dtype.itemsize, e)
    start = config.gpsimd_iota_fixed_cycles
    gather = math.ceil(valid * e / c)
    return Cost(start + gather, f"{start} + indices={valid} x elements={e} / C={c:.4g} ({gather})", valid * e,
                work=gather)


# --------------------------------------------------------------------------- DMA and semaphores

@cost("dma_copy")
def dma_copy(instr: Instruction, config: Config) -> Cost:
    dst, src = _ap(instr, "dst"), _ap(instr, "src")
    problem = dma_sizes(dst, src)
    if problem:
        raise SimError(f"dma_copy: {problem}")
    plan = plan_transfer(dst, src, instr.operands["queue"], config)
    return Cost(0, "issue: 0 cycles; transfer: " + plan.formula(config), 0, transfer=plan)


@cost("sem_wait", "sem_signal")
def semaphore_only(instr: Instruction, config: Config) -> Cost:
    return Cost(0, "no engine cycles")


# --------------------------------------------------------------------------- what every instruction shares

def _ghz(hz: float) -> str:
    return f"{hz / 1e9:g} GHz"


def _access(instr: Instruction, config: Config) -> tuple[int, str]:
    """Ticks of the slowest SBUF/PSUM operand at the docs/hardware.md#ports rate, and its description.

    Each operand streams through its own read or write interface at access_elements_per_cycle
    elements per access_clock_hz cycle across the partitions (one element per partition per cycle),
    half that when its innermost stride is access_wide_stride_bytes or more. The Tensor engine's
    reads are left to its own formula: 1.4 GHz could not feed the 2.8 GHz array its published peak.
    """
    if instr.engine == "tensor":
        return 0, ""
    tick = config.tick_hz // config.access_clock_hz  # exact: Config checks that it divides
    worst, text = 0, ""
    for name, value in instr.operands.items():
        if not isinstance(value, AccessPattern) or not value.on_chip:
            continue
        stride = innermost_stride_bytes(value)
        per_partition = config.access_rate(stride) / config.pmax  # elements per partition per cycle
        cycles = math.ceil(value.free_elements / per_partition)
        if cycles * tick > worst:
            slow = "" if stride < config.access_wide_stride_bytes else f", stride {stride} B: half rate"
            worst = cycles * tick
            text = (f"{value.memory.label.upper()} access of '{name}' {value.free_elements} elements{slow}"
                    f" = {cycles} cycles @{_ghz(config.access_clock_hz)} = {worst} ticks")
    return worst, text


# Costs and sizes beyond this are refused rather than overflow the scheduler's int64 (2**50 ticks
# are more than 2 days of simulated time; the access rules keep real instructions far below).
LIMIT = 2**50


def _refuse(what: str) -> SimError:
    return SimError(f"this instruction {what}: more than ncsim can time (an engine takes at most"
                    " 64K free elements per partition)")


def describe(instr: Instruction, config: Config) -> InstrCost:
    """The cost record of one instruction: its formula's cycles, its access time, ports and overheads."""
    spec = instr.spec
    for ap in _tiles(instr):
        if ap.num_elements * ap.dtype.itemsize > LIMIT:
            raise _refuse(f"touches {ap.num_elements} elements")
    own: Cost = spec.slots["cost"](instr, config)
    engine = instr.engine
    if spec.mnemonic == "dma_copy":
        return InstrCost(engine, DMA, 0, 0, 0, 0, own.formula, 0, 0, 0, False, 0, 0, 0, own.transfer)
    if spec.mnemonic in ("sem_wait", "sem_signal"):
        return InstrCost(engine, SEMAPHORE, 0, 0, 0, 0, own.formula, 0, 0, 0, False, 0, 0, 0, None)
    tpc = config.ticks_per_cycle(engine)
    compute = own.cycles * tpc
    if compute > LIMIT:
        raise _refuse(f"would take {own.cycles} cycles")
    access, access_text = _access(instr, config)
    ticks = max(compute, access)
    formula = f"{own.formula} = {own.cycles} cycles @{_ghz(getattr(config, engine + '_clock_hz'))} = {compute} ticks"
    if access > compute:
        formula += f"; bound by {access_text}"
    mems = {t.memory for t in _tiles(instr)}
    ports = PORT_USERS[engine] & ((PORT_SBUF if Memory.SBUF in mems else 0) | (PORT_PSUM if Memory.PSUM in mems else 0))
    # One rule for every engine's overheads (docs/timing.md "An instruction on its engine"): a dependent or
    # tiny instruction lasts max(cycles, work + overhead), so the overhead and the formula's fixed part
    # (the MIN_II floor, iota's 150) do not stack: both are the cost of starting an instruction.
    tiny = own.n <= config.tiny_free_elements
    work = own.cycles if own.work is None else own.work
    overhead = (max(own.cycles, work + dependent_overhead(engine, config)) - own.cycles) * tpc
    tiny_ticks = (max(own.cycles, work + static_overhead(engine, config)) - own.cycles) * tpc if tiny else 0
    flops = 0
    if spec.mnemonic == "nc_matmul":
        moving = _ap(instr, "moving")
        flops = 2 * moving.partitions * _ap(instr, "stationary").free_elements * moving.free_elements
        if flops > LIMIT:
            raise _refuse(f"does {flops} floating-point operations")
    return InstrCost(engine, DATAPATH, own.cycles, compute, access, ticks, formula, own.n, ports, overhead, tiny,
                     config.access_start_cycles * tpc, tiny_ticks, own.load_stationary * tpc, None, flops)


def dependent_overhead(engine: str, config: Config) -> int:
    """Cycles a data-path instruction that reads what the previous instruction of its engine wrote adds
    to its work (docs/timing.md). The Tensor engine reads only SBUF and writes only PSUM, so it never
    reads what it wrote; its matmul formula is the measured back-to-back interval (ARCH)."""
    return {"vector": config.vector_dependent_extra_cycles, "scalar": config.scalar_dependent_extra_cycles,
            "gpsimd": config.gpsimd_dependent_extra_cycles}.get(engine, 0)


def static_overhead(engine: str, config: Config) -> int:
    """Cycles a tiny instruction (N <= tiny_free_elements) adds to its work: the static instruction
    overhead, the same for Vector, Scalar and GpSimd (ARCH, PERF). The Tensor engine's formula has its
    own fixed part, max(N, MM_INIT_LATENCY = 64) for back-to-back matmuls (ARCH), so nothing is added."""
    return 0 if engine == "tensor" else config.static_overhead_cycles
