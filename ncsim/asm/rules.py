"""Hardware rules an instruction or tensor must keep, checked against a `Config` (docs/hardware.md#access).

The operand kinds check what the encoding can hold; these check what the NeuronCore allows:
memory bounds, partition starts, which engine reaches which memory, which engine runs which ALU
operator, dtypes, shapes and sizes. The assembler runs them on every instruction (the error points at
the source line) and the loader runs them again on objects, against the configuration of the run.

The rules of one instruction (`Rule`, registered in RULES by mnemonic, each with a name) are also run
by the engines before they execute it (`ncsim.engines.semantics`): whatever the run refuses because of
what is known before it starts (dtypes, shapes, constants, sizes) is one function, here, and the
assembler refuses it first with the same words and the rule's name. What only the run can know (a
dynamic offset read from memory, an index value) stays with the engine.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ncsim.asm.fields import APKind
from ncsim.asm.instruction import Instruction
from ncsim.asm.objfile import TensorEntry
from ncsim.config import Config
from ncsim.errors import AsmError
from ncsim.isa import INT32_GPSIMD_OPS, LOCKSTEP, TABLE, alu_info
from ncsim.memory.access import AccessPattern, Immediate, Memory

PARTITION_REDUCE_OPS = ("add", "maximum", "bitwise_or", "bitwise_and")  # NKI tensor_partition_reduce
REDUCE_OPS = ("add", "subtract", "multiply", "maximum", "minimum")  # NKI tensor_scalar_reduce's reduce_op
INT32 = ("i32", "u32")


def partition_start_ok(start: int, count: int) -> bool:
    """docs/hardware.md#access: P > 64 starts at 0; 32 < P <= 64 at 0 or 64; P <= 32 at 0, 32, 64 or 96."""
    if count > 64:
        return start == 0
    if count > 32:
        return start in (0, 64)
    return start in (0, 32, 64, 96)


def memory_limit(memory: Memory, config: Config) -> int:
    if memory == Memory.SBUF:
        return config.sbuf_usable_bytes
    if memory == Memory.PSUM:
        return config.psum_partition_bytes
    return config.hbm_bytes


def check_access(name: str, ap: AccessPattern, config: Config) -> None:
    hi = ap.byte_span()[1]
    limit = memory_limit(ap.memory, config)
    where = "in each partition" if ap.on_chip else ""
    if hi > limit:
        raise AsmError(f"operand '{name}' reaches byte {hi} {where}, past the end of {ap.memory.label}"
                       f" ({limit} bytes{' usable per partition' if ap.on_chip else ''})")
    if ap.on_chip and ap.partition + ap.partitions > config.pmax:
        raise AsmError(f"operand '{name}' covers partitions {ap.partition}:{ap.partition + ap.partitions},"
                       f" past the {config.pmax} partitions")


def access_patterns(instr: Instruction) -> list[tuple[str, AccessPattern]]:
    return [(name, v) for name, v in instr.operands.items() if isinstance(v, AccessPattern)]


def check_instruction(instr: Instruction, config: Config) -> None:
    """Raise AsmError (placed at the instruction) if `instr` breaks a hardware rule."""
    try:
        _check(instr, config)
    except AsmError as e:
        raise e.at(instr.loc) if instr.loc else e from None


def _check(instr: Instruction, config: Config) -> None:
    m = instr.mnemonic
    aps = access_patterns(instr)
    for name, ap in aps:
        check_access(name, ap, config)
        if m not in ("dma_copy", "gpsimd_call") and ap.on_chip:
            limit = config.free_elements_max_psum if ap.memory == Memory.PSUM else config.free_elements_max_sbuf
            if ap.free_elements > limit:
                raise AsmError(f"operand '{name}' has {ap.free_elements} elements per partition; an instruction"
                               f" takes at most {limit} from {ap.memory.label.upper()}")
        if m not in ("dma_copy", "gpsimd_call") and ap.on_chip and not partition_start_ok(ap.partition, ap.partitions):
            raise AsmError(f"operand '{name}' starts at partition {ap.partition} with {ap.partitions} partitions:"
                           " more than 64 partitions start at 0; 33 to 64 at 0 or 64; up to 32 at 0, 32, 64 or 96")
    if m == "dma_copy" and (problem := dma_sizes(instr.operands["dst"], instr.operands["src"])):
        raise AsmError(f"dma_copy: {problem}")
    if m == "dma_copy" and instr.operands["queue"] >= config.dma_queues_per_engine:
        raise AsmError(f"dma_copy: queue {instr.operands['queue']} does not exist; each DMA engine has"
                       f" {config.dma_queues_per_engine} queues")
    for sem in instr.waits + instr.signals:
        if sem.sem >= config.semaphores:
            raise AsmError(f"semaphore s{sem.sem} does not exist: the core has {config.semaphores}")
    _check_lockstep(instr)
    broken = broken_rule(instr, config)
    if broken:
        raise AsmError(broken)


def dma_sizes(dst: AccessPattern, src: AccessPattern) -> str | None:
    """What is wrong with a DMA's two sides, or None: it copies element for element. The assembler, the
    machine and the timing model all say it so (an object may come from elsewhere)."""
    if dst.num_elements == src.num_elements:
        return None
    return (f"'dst' has {dst.num_elements} elements ({list(dst.shape)}) and 'src' has {src.num_elements}"
            f" ({list(src.shape)}): a DMA copies element for element")


def lockstep(tiles: list[tuple[str, AccessPattern]]) -> str | None:
    """What is wrong with operands walked element for element, or None: they need the same partitions
    and elements per partition. The assembler checks isa.LOCKSTEP with it; Context.rows at run time."""
    first_name, first = tiles[0]
    for name, ap in tiles[1:]:
        if ap.partitions != first.partitions or ap.free_elements != first.free_elements:
            return (f"shapes disagree: '{first_name}' is {list(first.shape)} and '{name}' is {list(ap.shape)}"
                    " (the same partitions and elements per partition are needed)")
    return None


def _check_lockstep(instr: Instruction) -> None:
    tiles = [(n, instr.operands[n]) for n in LOCKSTEP.get(instr.mnemonic, ())
             if isinstance(instr.operands[n], AccessPattern)]
    if tiles and (problem := lockstep(tiles)):
        raise AsmError(problem)


def check_tensor(t: TensorEntry, config: Config) -> None:
    size = t.dtype.itemsize
    if t.memory == "hbm":
        if t.address + t.nbytes > config.hbm_bytes:
            raise AsmError(f"HBM tensor '{t.name}' ends at byte {t.address + t.nbytes}, past HBM's {config.hbm_bytes}")
        return
    partitions = t.shape[0]
    per_partition = size
    for d in t.shape[1:]:
        per_partition *= d
    limit = memory_limit(Memory.SBUF if t.memory == "sbuf" else Memory.PSUM, config)
    if not 1 <= partitions or t.partition + partitions > config.pmax:
        raise AsmError(f"tile '{t.name}' covers partitions {t.partition}:{t.partition + partitions},"
                       f" past the {config.pmax} partitions")
    if t.address + per_partition > limit:
        raise AsmError(f"tile '{t.name}' needs bytes {t.address}..{t.address + per_partition} of each partition,"
                       f" past the {limit} bytes of {t.memory}")


# =========================================================================== the rules of one instruction
@dataclass(frozen=True)
class Rule:
    """A rule some instructions must keep: `check(instr, config)` says what is wrong, or None."""

    name: str
    mnemonics: tuple[str, ...]
    source: str  # where the rule comes from
    check: Callable[[Instruction, Config], str | None]


RULES: dict[str, list[Rule]] = {}  # by mnemonic, in the order they are checked
ALL_RULES: list[Rule] = []


def rule(name: str, mnemonics: tuple[str, ...], source: str) -> Callable[[Callable], Callable]:
    def register(fn: Callable[[Instruction, Config], str | None]) -> Callable:
        r = Rule(name, mnemonics, source, fn)
        ALL_RULES.append(r)
        for m in mnemonics:
            RULES.setdefault(m, []).append(r)
        return fn

    return register


def first_problem(instr: Instruction, config: Config) -> str | None:
    """The first of the instruction's rules that it breaks, as 'what is wrong (rule NAME)', or None.
    The assembler and the loader (check_instruction) and the engines (before they execute) call it."""
    for r in RULES.get(instr.mnemonic, ()):
        problem = r.check(instr, config)
        if problem:
            return f"{problem} (rule {r.name})"
    return None


def broken_rule(instr: Instruction, config: Config) -> str | None:
    problem = first_problem(instr, config)
    return f"{instr.mnemonic}: {problem}" if problem else None


def _ap(instr: Instruction, name: str) -> AccessPattern | None:
    v = instr.operands.get(name)
    return v if isinstance(v, AccessPattern) else None


def _integral(v: Immediate) -> bool:
    return math.isfinite(v.value) and float(v.value).is_integer()


def _shape_is(ap: AccessPattern, partitions: int, free: int) -> bool:
    return ap.partitions == partitions and ap.free_elements == free


def _need_shape(name: str, ap: AccessPattern, partitions: int, free: int) -> str | None:
    if _shape_is(ap, partitions, free):
        return None
    return (f"'{name}' must have {partitions} partitions of {free} elements, not {list(ap.shape)}"
            f" ({ap.partitions} partitions of {ap.free_elements})")


def _need_free_range(name: str, ap: AccessPattern, lo: int, hi: int, limit_name: str) -> str | None:
    if lo <= ap.free_elements <= hi:
        return None
    return (f"'{name}' must have {lo} to {hi} elements per partition ({limit_name}),"
            f" not {ap.free_elements} ({list(ap.shape)})")


def _need_dtype(name: str, ap: AccessPattern, allowed: tuple[str, ...]) -> str | None:
    if ap.dtype.short in allowed:
        return None
    return f"'{name}' must be {' or '.join(allowed)}, not {ap.dtype.short}"


def _first(*problems: str | None) -> str | None:
    return next((p for p in problems if p), None)


# ------------------------------------------------------------------ access-pattern fields
# Trainium/Inferentia2 Architecture Guide for NKI (SDK 2.23: general/nki/arch/trainium_inferentia2_arch.rst,
# "Accessing SBUF/PSUM tensors using compute engines"; docs/hardware.md#access, key ARCH): when an engine
# instruction reads or writes an SBUF/PSUM tensor, each free axis has, at the ISA level, a size held in a
# uint16 and a stride held in an int16, counted in elements. The page says this of the compute engines'
# on-chip operands only: HBM patterns, and dma_copy (a DMA descriptor, not an engine's access) and
# gpsimd_call (the cores address memory themselves) are not covered, so an HBM row longer than 32767
# elements stays expressible.
AP_COUNT_MAX = 2**16 - 1  # uint16
AP_STEP_MIN, AP_STEP_MAX = -(2**15), 2**15 - 1  # int16
AP_FIELD_EXEMPT = ("dma_copy", "gpsimd_call")


@rule("ap-fields", tuple(s.mnemonic for s in TABLE if s.mnemonic not in AP_FIELD_EXEMPT
                         and any(isinstance(o.kind, APKind) for o in s.operands)),
      "Trainium/Inferentia2 Architecture Guide for NKI (SDK 2.23), accessing SBUF/PSUM tensors: each free"
      " axis has a size in uint16 and a stride in int16, in elements")
def _ap_fields(instr: Instruction, config: Config) -> str | None:
    for name, ap in access_patterns(instr):
        if not ap.on_chip:
            continue
        for k, (step, count) in enumerate(ap.dims):
            if count > AP_COUNT_MAX:
                return (f"operand '{name}' has {count} elements on free axis {k}; an engine's SBUF/PSUM access"
                        f" pattern holds a count in a uint16 (at most {AP_COUNT_MAX})")
            # a single element is never stepped over: its step is not part of the access
            if count > 1 and not AP_STEP_MIN <= step <= AP_STEP_MAX:
                return (f"operand '{name}' steps {step} elements on free axis {k}; an engine's SBUF/PSUM access"
                        f" pattern holds a step in an int16 ({AP_STEP_MIN}..{AP_STEP_MAX})")
    return None


# ------------------------------------------------------------------ memories
GPSIMD_CAPABLE = ("tensor_tensor", "tensor_scalar", "tensor_copy", "tensor_copy_dynamic_src",
                  "tensor_copy_dynamic_dst", "memset", "iota", "affine_select", "tensor_partition_reduce",
                  "local_gather")


@rule("gpsimd-memory", GPSIMD_CAPABLE, "NKI nki.isa: the GpSimd engine cannot access PSUM (docs/hardware.md#psum)")
def _gpsimd_memory(instr: Instruction, config: Config) -> str | None:
    if instr.engine != "gpsimd":
        return None
    for name, ap in access_patterns(instr):
        if ap.memory == Memory.PSUM:
            return f"operand '{name}' is in PSUM, which the GpSimd engine cannot reach"
    return None


BOTH_PSUM = {"tensor_tensor": ("data1", "data2"), "scalar_tensor_tensor": ("data", "operand1"),
             "tensor_copy_predicated": ("src", "predicate"), "tensor_tensor_scan": ("data0", "data1")}


@rule("inputs-not-both-psum", tuple(BOTH_PSUM), "NKI nki.isa: the two input tiles cannot both be in PSUM")
def _both_psum(instr: Instruction, config: Config) -> str | None:
    a, b = BOTH_PSUM[instr.mnemonic]
    if all(x is not None and x.memory == Memory.PSUM for x in (_ap(instr, a), _ap(instr, b))):
        return f"'{a}' and '{b}' cannot both be in PSUM"
    return None


# ------------------------------------------------------------------ ALU operators: the v2 engine table
ALU_INSTRUCTIONS = ("tensor_tensor", "tensor_scalar", "tensor_scalar_reduce", "scalar_tensor_tensor", "tensor_reduce",
                    "tensor_tensor_scan")
OPERATOR_KEYS = ("op", "op0", "op1", "reduce_op")
# The operands an elementwise instruction walks (its data and its destination), for the integer rules
WALKED = {**LOCKSTEP, "tensor_reduce": ("dst", "data"), "tensor_partition_reduce": ("dst", "data")}


def alu_operators(instr: Instruction) -> list[tuple[str, str]]:
    """(operand name, ALU operator) of every operator the instruction applies."""
    return [(k, instr.operands[k]) for k in OPERATOR_KEYS if instr.operands.get(k) is not None]


@rule("bitwise-integers", ("tensor_tensor", "tensor_scalar", "tensor_reduce", "tensor_partition_reduce"),
      "nki.api.shared: bitvec operators expect integer data types (nki.isa.tensor_scalar: integer input/output)")
def _bitwise_integers(instr: Instruction, config: Config) -> str | None:
    bitwise = [op for _, op in alu_operators(instr) if alu_info(op)[2] == "bitvec"]
    if not bitwise:
        return None
    for name, ap in access_patterns(instr):
        if not ap.dtype.is_int:
            return f"bitwise operator {bitwise[0]} needs integer tiles; '{name}' is {ap.dtype}"
    for name, v in instr.operands.items():
        if isinstance(v, Immediate) and not _integral(v):
            return f"bitwise operators take integer constants; '{name}' is {v.value}"
    return None


@rule("tensor-scalar-operators", ("tensor_scalar",),
      "NKI nki.isa.tensor_scalar: op1 with operand1; op0 and op1 both arithmetic or both bitvec")
def tensor_scalar_operators(instr: Instruction, config: Config | None = None) -> str | None:
    op0, op1, operand1 = instr.operands["op0"], instr.operands["op1"], instr.operands["operand1"]
    if (op1 is None) != (operand1 is None):
        given, missing = ("op1", "operand1") if operand1 is None else ("operand1", "op1")
        return f"{given} is given without {missing}: the second operation needs both"
    if op1 is not None and (alu_info(op0)[2] == "bitvec") != (alu_info(op1)[2] == "bitvec"):
        return f"op0 ({op0}) and op1 ({op1}) must both be arithmetic or both bitwise operators"
    return None


ARITHMETIC_ONLY = {"scalar_tensor_tensor": ("op0", "op1"), "tensor_scalar_reduce": ("op0",),
                   "tensor_tensor_scan": ("op0", "op1")}


@rule("arithmetic-operators", tuple(ARITHMETIC_ONLY),
      "NKI nki.isa: scalar_tensor_tensor, tensor_scalar_reduce and tensor_tensor_scan take arithmetic operators")
def _arithmetic_only(instr: Instruction, config: Config) -> str | None:
    for key in ARITHMETIC_ONLY[instr.mnemonic]:
        op = instr.operands[key]
        if alu_info(op)[2] == "bitvec":
            return f"{key} is the bitwise operator {op}; {instr.mnemonic} takes arithmetic operators"
        if instr.mnemonic == "tensor_tensor_scan" and alu_info(op)[1] != 2:
            return f"{key} must be a binary arithmetic operator, not {op}"
    return None


@rule("reduce-operator", ("tensor_reduce", "tensor_scalar_reduce", "tensor_partition_reduce"),
      "nki.api.shared: Legal Reduction op; NKI tensor_scalar_reduce and tensor_partition_reduce list theirs")
def _reduce_operator(instr: Instruction, config: Config) -> str | None:
    m = instr.mnemonic
    if m == "tensor_scalar_reduce":
        op = instr.operands["reduce_op"]
        return None if op in REDUCE_OPS else f"reduce_op must be one of {', '.join(REDUCE_OPS)}, not {op}"
    op = instr.operands["op"]
    if m == "tensor_partition_reduce" and op not in PARTITION_REDUCE_OPS:
        return f"reduces with {', '.join(PARTITION_REDUCE_OPS)}, not {op}"
    return None if alu_info(op)[3] else f"{op} is not a reduction operator"


def reduce_axes(data: AccessPattern, axes: tuple[int, ...] | list[int]) -> tuple[int, int] | str:
    """tensor_reduce's axis list against data: (kept, reduced elements per partition), or what is wrong."""
    axes, n = list(axes), len(data.dims)
    want = list(range(n - len(axes) + 1, n + 1))
    if len(axes) > n or sorted(axes) != want:
        hint = f"reducing {len(axes)} of them means axis={want}" if len(axes) <= n else f"it has only {n}"
        return (f"axis {axes} must be distinct free axes ending at the innermost: 'data' is"
                f" {list(data.shape)}, whose free axes are 1..{n}; {hint}")
    kept = 1
    for count in data.free_shape[:n - len(axes)]:
        kept *= count
    return kept, data.free_elements // kept


@rule("reduce-axes", ("tensor_reduce",), "NKI nki.isa.tensor_reduce: axis, the last free axes")
def _reduce_axes(instr: Instruction, config: Config) -> str | None:
    data, dst = instr.operands["data"], instr.operands["dst"]
    plan = reduce_axes(data, instr.operands["axis"])
    if isinstance(plan, str):
        return plan
    kept, p, axis = plan[0], data.partitions, list(instr.operands["axis"])
    if dst.partitions != p or dst.free_elements != kept:
        return (f"'dst' is {list(dst.shape)} but reducing {list(data.shape)} over axis {axis}"
                f" leaves [{p}, {kept}] ({p} partitions of {kept} element{'s' if kept != 1 else ''})")
    if instr.operands.get("keepdims"):
        # nki.isa.tensor_reduce: with keepdims the reduced axes stay in the result with size one.
        k = len(axis)
        want = (p, *data.free_shape[:len(data.free_shape) - k], *(1,) * k)
        if dst.shape != want:
            return (f"'dst' is {list(dst.shape)}; with keepdims=true reducing {list(data.shape)} over axis"
                    f" {axis} gives {list(want)} (each reduced axis kept with size 1)")
    return None


@rule("reduce-negate", ("tensor_reduce",), "NKI nki.isa.tensor_reduce: negate applies to arithmetic operators")
def _reduce_negate(instr: Instruction, config: Config) -> str | None:
    op = instr.operands["op"]
    if instr.operands["negate"] and alu_info(op)[2] == "bitvec":
        return f"negate applies to arithmetic reductions, not to the bitwise operator {op}"
    return None


@rule("alu-engine", ALU_INSTRUCTIONS, "nki.api.shared, Supported Math Operators by NKI ISA (SDK 2.23): isa.ALU_OPS")
def _alu_engine(instr: Instruction, config: Config) -> str | None:
    for key, op in alu_operators(instr):
        engines = alu_info(op)[5]
        if instr.engine not in engines:
            v3 = (" (the Scalar engine runs add and multiply from NeuronCore-v3 on)"
                  if instr.engine == "scalar" and op in ("add", "multiply") else "")
            return (f"{key}={op} does not run on the {instr.engine} engine of NeuronCore-v2{v3}; {op} runs on"
                    f" {' and '.join(engines)}")
    return None


def _int32_tiles(instr: Instruction) -> bool:
    tiles = [_ap(instr, n) for n in WALKED.get(instr.mnemonic, ())]
    return bool(tiles) and all(t is not None and t.dtype.short in INT32 for t in tiles)


@rule("int32-add-multiply", ALU_INSTRUCTIONS,
      "nki.api.shared (SDK 2.23): 32-bit integer Add and Multiply are only supported on GpSIMD Engine")
def _int32_add_multiply(instr: Instruction, config: Config) -> str | None:
    ops = alu_operators(instr)
    int_ops = [op for _, op in ops if op in INT32_GPSIMD_OPS]
    if not int_ops or not _int32_tiles(instr):
        return None
    walked = ", ".join(f"'{n}'" for n in WALKED[instr.mnemonic])
    if instr.engine != "gpsimd":
        return (f"{int_ops[0]} of 32-bit integer tiles ({walked}) runs only on the GpSimd engine of NeuronCore-v2"
                f" (the {instr.engine} engine would compute it in fp32, rounding integers above 2**24)")
    others = [op for _, op in ops if op not in INT32_GPSIMD_OPS]
    if others:
        return f"32-bit integer arithmetic on GpSimd is add or multiply; {others[0]} cannot join it"
    for name, v in instr.operands.items():
        if name in WALKED[instr.mnemonic]:
            continue
        if isinstance(v, Immediate) and not _integral(v):
            return f"32-bit integer {int_ops[0]} takes integer constants; '{name}' is {v.value}"
        if isinstance(v, AccessPattern) and v.dtype.short not in INT32:
            return f"32-bit integer {int_ops[0]} takes 32-bit integer columns; '{name}' is {v.dtype.short}"
    return None


# ------------------------------------------------------------------ [P, 1] columns
COLUMNS = {"tensor_scalar": ("operand0", "operand1"), "tensor_scalar_reduce": ("operand0", "reduce_res"),
           "scalar_tensor_tensor": ("operand0",), "tensor_tensor_scan": ("initial",),
           "activation": ("bias", "scale", "reduce_res"), "activation_reduce": ("bias", "scale", "reduce_res"),
           "dropout": ("prob",)}


def column_problem(name: str, ap: AccessPattern, partitions: int) -> str | None:
    if ap.partitions == partitions and ap.free_elements == 1:
        return None
    return (f"operand '{name}' must be a [{partitions}, 1] column (one value per partition),"
            f" not {list(ap.shape)}")


@rule("column", tuple(COLUMNS), "NKI nki.isa: scalar operands are constants or [P, 1] tiles, one value per partition")
def _columns(instr: Instruction, config: Config) -> str | None:
    p = instr.operands["dst"].partitions
    for name in COLUMNS[instr.mnemonic]:
        ap = _ap(instr, name)
        if ap is not None and (problem := column_problem(name, ap, p)):
            return problem
    return None


BIAS_DTYPES = ("f32", "f16", "bf16")  # NKI activation: bias float32/float16/bfloat16, scale float32


@rule("activation-dtypes", ("activation", "activation_reduce"),
      "NKI nki.isa.activation: scale must be float32, bias float32/float16/bfloat16")
def _activation_dtypes(instr: Instruction, config: Config) -> str | None:
    scale, bias = _ap(instr, "scale"), _ap(instr, "bias")
    if scale is not None and scale.dtype.short != "f32":
        return f"a 'scale' column must be f32, not {scale.dtype.short}"
    if bias is not None and bias.dtype.short not in BIAS_DTYPES:
        return f"'bias' must be {', '.join(BIAS_DTYPES)}, not {bias.dtype.short}"
    return None


@rule("reciprocal-bias", ("activation", "activation_reduce"),
      "nki.api.shared, NKI Engine Selection: activation(op=nl.reciprocal) doesn't support a bias on NeuronCore-v2")
def _reciprocal_bias(instr: Instruction, config: Config) -> str | None:
    if instr.operands["op"] == "reciprocal" and instr.operands["bias"] is not None:
        return ("the reciprocal activation takes no bias on NeuronCore-v2; add the bias first (tensor_scalar"
                " on Vector), or use the Vector engine's reciprocal")
    return None


@rule("predicate", ("tensor_copy_predicated",),
      "NKI nki.isa.tensor_copy_predicated: predicate uint8/16/32, src of dst's dtype (bits copied)")
def _predicate(instr: Instruction, config: Config) -> str | None:
    dst, pred, src = instr.operands["dst"], instr.operands["predicate"], _ap(instr, "src")
    if pred.dtype.short not in ("u8", "u16", "u32", "bool"):
        return f"'predicate' must be a uint8, uint16 or uint32 tile, not {pred.dtype}"
    if src is not None and src.dtype != dst.dtype:
        return f"'src' ({src.dtype}) and 'dst' ({dst.dtype}) must have the same dtype"
    return None


# ------------------------------------------------------------------ Tensor engine
MATMUL_DTYPES = ("fp8e4", "fp8e5", "bf16", "f16", "tf32", "f32")  # NKI nc_matmul: the PE's input types
WIDE = ("tf32", "f32")  # NKI: fp32 and tf32 multiply only with each other


@rule("matmul-shape", ("nc_matmul",), "NKI nki.isa.nc_matmul: [K, M] x [K, N] -> [M, N], K <= 128, M <= 128, N <= 512")
def _matmul_shape(instr: Instruction, config: Config) -> str | None:
    dst, stat, mov = (instr.operands[n] for n in ("dst", "stationary", "moving"))
    k, m, n = stat.partitions, stat.free_elements, mov.free_elements
    if mov.partitions != k:
        return (f"'stationary' {list(stat.shape)} and 'moving' {list(mov.shape)} must contract over the"
                f" same number of partitions, not {k} and {mov.partitions}")
    if k > config.gemm_kmax:
        return f"the contraction K = {k} partitions is more than the PE array's {config.gemm_kmax} rows"
    if m > config.gemm_stationary_fmax:
        return f"'stationary' has {m} elements per partition (M); at most {config.gemm_stationary_fmax}"
    if n > config.gemm_moving_fmax:
        return f"'moving' has {n} elements per partition (N); at most {config.gemm_moving_fmax}"
    if dst.partitions != m or dst.free_elements != n:
        return (f"'dst' must be [M, N] = [{m}, {n}] (M partitions of N elements), not {list(dst.shape)}"
                f" ({dst.partitions} partitions of {dst.free_elements})")
    return None


@rule("matmul-dtypes", ("nc_matmul",),
      "NKI nki.isa.nc_matmul: inputs fp8/bf16/fp16/tf32/fp32, fp32 and tf32 only with each other; fp32 PSUM output")
def _matmul_dtypes(instr: Instruction, config: Config) -> str | None:
    dst, stat, mov = (instr.operands[n] for n in ("dst", "stationary", "moving"))
    if dst.dtype.short != "f32":
        return f"'dst' must be f32 (the PE accumulates in fp32 in PSUM), not {dst.dtype.short}"
    kinds = (stat.dtype.short, mov.dtype.short)
    for name, d in zip(("stationary", "moving"), kinds):
        if d not in MATMUL_DTYPES:
            return f"'{name}' is {d}; the Tensor engine multiplies {', '.join(MATMUL_DTYPES)}"
    if (kinds[0] in WIDE) != (kinds[1] in WIDE):
        return f"'stationary' is {kinds[0]} and 'moving' is {kinds[1]}: f32 and tf32 multiply only with f32 or tf32"
    return None


@rule("psum-bank", ("nc_matmul", "nc_transpose"), "docs/hardware.md#psum: a Tensor engine output lies inside one 2 KiB PSUM bank")
def _psum_bank(instr: Instruction, config: Config) -> str | None:
    dst = instr.operands["dst"]
    if instr.engine != "tensor" or dst.memory != Memory.PSUM:
        return None
    lo, hi = dst.byte_span()
    bank = config.psum_bank_bytes
    if lo // bank != (hi - 1) // bank:
        return (f"the PSUM output 'dst' spans bytes {lo}..{hi - 1} of each partition, across a {bank}-byte bank"
                " boundary (a Tensor engine output lies inside one bank)")
    return None


@rule("transpose", ("nc_transpose",),
      "NKI nki.isa.nc_transpose: Tensor SBUF -> PSUM up to 128x128; Vector up to 32x32; dst [F, P] of data's dtype")
def _transpose(instr: Instruction, config: Config) -> str | None:
    data, dst = instr.operands["data"], instr.operands["dst"]
    p, f = data.partitions, data.free_elements
    if instr.engine == "tensor":
        if data.memory != Memory.SBUF or dst.memory != Memory.PSUM:
            return "on the Tensor engine it reads 'data' from SBUF and writes 'dst' to PSUM"
        if p > config.gemm_kmax or f > config.gemm_stationary_fmax:
            return (f"'data' is {p} partitions of {f} elements; the Tensor engine transposes at most"
                    f" {config.gemm_kmax} x {config.gemm_stationary_fmax}")
    else:
        limit = config.vector_transpose_max
        if p > limit or f > limit:
            return (f"the Vector engine transposes up to {limit}x{limit} (vector_transpose_max),"
                    f" not {p}x{f} ('data' is {list(data.shape)})")
    if dst.partitions != f or dst.free_elements != p:
        return (f"'dst' must be [F, P] = [{f}, {p}] ({f} partitions of {p} elements) for 'data'"
                f" {list(data.shape)}, not {list(dst.shape)}")
    if dst.dtype != data.dtype:
        return f"'dst' must have the dtype of 'data' ({data.dtype.short}), not {dst.dtype.short}"
    return None


# ------------------------------------------------------------------ GpSimd engine
@rule("affine-pattern", ("iota", "affine_select"),
      "NKI nki.isa.iota / affine_select: the pattern's counts multiply to dst's elements per partition")
def _affine_pattern(instr: Instruction, config: Config) -> str | None:
    dims, dst = instr.operands["pattern"], instr.operands["dst"]
    total = 1
    for _, count in dims:
        total *= count
    if total != dst.free_elements:
        counts = " x ".join(str(c) for _, c in dims)
        return (f"the pattern {[list(d) for d in dims]} gives {total} values per partition ({counts}) but 'dst'"
                f" has {dst.free_elements} elements per partition")
    return None


@rule("partition-reduce-shape", ("tensor_partition_reduce",),
      "NKI nki.isa.tensor_partition_reduce: the result is one partition of data's elements")
def _partition_reduce_shape(instr: Instruction, config: Config) -> str | None:
    dst, data = instr.operands["dst"], instr.operands["data"]
    if dst.partitions != 1 or dst.free_elements != data.free_elements:
        return (f"'dst' must be [1, {data.free_elements}] (one partition, the elements of 'data'"
                f" {list(data.shape)}), not {list(dst.shape)}")
    return None


GATHER_WIDTHS = (1, 2, 4, 8, 16, 32)  # NKI local_gather: num_elem_per_idx


def gather_plan(instr: Instruction, config: Config) -> tuple[int, str | None]:
    """(indices per core, what is wrong or None): the shape rules of local_gather."""
    src = instr.operands["src_buffer"]
    index, dst = instr.operands["index"], instr.operands["dst"]
    width, valid = instr.operands["num_elem_per_idx"], instr.operands["num_valid_indices"]
    per_core = config.gpsimd_partitions_per_core
    max_indices = instr.spec.operand("num_valid_indices").kind.hi
    if index.dtype.short != "u16":
        return 0, f"'index' must be u16, not {index.dtype.short}"
    if dst.dtype != src.dtype:
        return 0, (f"'dst' must have the dtype of 'src_buffer' ({src.dtype.short}: a gather copies bits),"
                   f" not {dst.dtype.short}")
    if width not in GATHER_WIDTHS:
        return 0, f"num_elem_per_idx must be one of {', '.join(map(str, GATHER_WIDTHS))}, not {width}"
    if src.partition % per_core or src.partitions % per_core:
        return 0, (f"'src_buffer' covers partitions {src.partition}:{src.partition + src.partitions}; a gather works"
                   f" on whole GpSimd cores of {per_core} partitions (start and count multiples of {per_core})")
    for name, ap in (("index", index), ("dst", dst)):
        if ap.partition != src.partition or ap.partitions != src.partitions:
            return 0, (f"'{name}' covers partitions {ap.partition}:{ap.partition + ap.partitions} and 'src_buffer'"
                       f" {src.partition}:{src.partition + src.partitions}: each core gathers within its own partitions")
    available = per_core * index.free_elements
    count = available if valid is None else valid
    if count > available:
        return 0, f"num_valid_indices={valid} but each core's {per_core} partitions of 'index' hold {available} indices"
    if count > max_indices:
        return 0, f"each core gathers with {count} indices; at most {max_indices}"
    if dst.free_elements != count * width:
        return 0, (f"'dst' must hold {count} indices x {width} elements = {count * width} elements per partition,"
                   f" not {dst.free_elements} ({list(dst.shape)})")
    return count, None


@rule("local-gather", ("local_gather",), "NKI nki.isa.local_gather: index u16, whole 16-partition cores, sizes")
def _local_gather(instr: Instruction, config: Config) -> str | None:
    return gather_plan(instr, config)[1]


# ------------------------------------------------------------------ Vector engine specials
TOP = 8  # max8, nc_find_index8 and nc_match_replace8 work on 8 values per partition
INDEX_DTYPES = ("u16", "u32")


@rule("bn-stats", ("bn_stats",), "NKI nki.isa.bn_stats: at most bn_stats_fmax (512) elements per partition; [P, 6]")
def _bn_stats(instr: Instruction, config: Config) -> str | None:
    data = instr.operands["data"]
    return _first(_need_free_range("data", data, 1, config.bn_stats_fmax, "bn_stats_fmax"),
                  _need_shape("dst", instr.operands["dst"], data.partitions, 6))


@rule("bn-aggr", ("bn_aggr",), "NKI nki.isa.bn_aggr: (count, mean, variance*count) triples in, [P, 2] out")
def _bn_aggr(instr: Instruction, config: Config) -> str | None:
    data = instr.operands["data"]
    if data.free_elements % 3:
        return (f"'data' must hold (count, mean, variance*count) triples: a multiple of 3 elements per"
                f" partition, not {data.free_elements} ({list(data.shape)})")
    return _need_shape("dst", instr.operands["dst"], data.partitions, 2)


@rule("max8", ("max8",), "NKI nki.isa.max8: 8 to 16384 elements per partition (top8_fmax); [P, 8]")
def _max8(instr: Instruction, config: Config) -> str | None:
    src = instr.operands["src"]
    return _first(_need_free_range("src", src, TOP, config.top8_fmax, "top8_fmax"),
                  _need_shape("dst", instr.operands["dst"], src.partitions, TOP))


@rule("find-index8", ("nc_find_index8",),
      "NKI nki.isa.nc_find_index8: 8 to 16384 elements per partition; vals [P, 8]; dst [P, 8] uint16 or uint32")
def _find_index8(instr: Instruction, config: Config) -> str | None:
    data, dst = instr.operands["data"], instr.operands["dst"]
    return _first(_need_free_range("data", data, TOP, config.top8_fmax, "top8_fmax"),
                  _need_shape("vals", instr.operands["vals"], data.partitions, TOP),
                  _need_shape("dst", dst, data.partitions, TOP), _need_dtype("dst", dst, INDEX_DTYPES))


@rule("match-replace8", ("nc_match_replace8",),
      "NKI nki.isa.nc_match_replace8: at most 16384 elements per partition; vals [P, 8]; dst_idx [P, 8] uint32")
def _match_replace8(instr: Instruction, config: Config) -> str | None:
    data, idx = instr.operands["data"], _ap(instr, "dst_idx")
    p = data.partitions
    return _first(_need_free_range("data", data, 1, config.top8_fmax, "top8_fmax"),
                  _need_shape("vals", instr.operands["vals"], p, TOP),
                  idx and _need_shape("dst_idx", idx, p, TOP), idx and _need_dtype("dst_idx", idx, ("u32",)))


SHUFFLE_KEEP = 255  # a shuffle mask entry that leaves its output partition unchanged


@rule("stream-shuffle", ("nc_stream_shuffle",),
      "NKI nki.isa.nc_stream_shuffle: same dtype and elements; mask entries 0..31 or 255; within quadrants")
def _stream_shuffle(instr: Instruction, config: Config) -> str | None:
    dst, src, mask = instr.operands["dst"], instr.operands["src"], instr.operands["shuffle_mask"]
    quadrant = len(mask)
    if dst.dtype != src.dtype:
        return f"'dst' and 'src' must have the same dtype, not {dst.dtype.short} and {src.dtype.short}"
    if dst.free_elements != src.free_elements:
        return (f"'dst' and 'src' must have the same elements per partition, not {dst.free_elements}"
                f" ({list(dst.shape)}) and {src.free_elements} ({list(src.shape)})")
    bad = [m for m in mask if quadrant <= m != SHUFFLE_KEEP]
    if bad:
        return f"shuffle_mask entries must be source partitions 0..{quadrant - 1} or {SHUFFLE_KEEP} (keep), not {bad[0]}"
    active = -(-max(dst.partitions, src.partitions) // quadrant) * quadrant
    for name, ap in (("dst", dst), ("src", src)):
        if not partition_start_ok(ap.partition, active):
            return (f"with {active} active partitions (max of dst's {dst.partitions} and src's {src.partitions},"
                    f" rounded up to {quadrant}), '{name}' may not start at partition {ap.partition}: more than 64"
                    " start at 0, 33 to 64 at 0 or 64")
    for q in range(active // quadrant):
        for i, m in enumerate(mask):
            row, from_row = q * quadrant + i, q * quadrant + m
            if m != SHUFFLE_KEEP and row < dst.partitions and from_row >= src.partitions:
                return (f"shuffle_mask[{i}] = {m}: dst partition {row} would copy src partition {from_row},"
                        f" but src has {src.partitions} partitions")
    return None


@rule("dynamic-index", ("tensor_copy_dynamic_src", "tensor_copy_dynamic_dst"),
      "NKI nki.isa.tensor_copy_dynamic_src/dst: the offset is one int32 element in SBUF")
def _dynamic_index(instr: Instruction, config: Config) -> str | None:
    index = instr.operands["index"]
    if index.dtype.short != "i32" or index.num_elements != 1:
        return f"'index' must be one int32 element, not {index.dtype.short} {list(index.shape)}"
    return None


# ------------------------------------------------------------------ NKI parameters NeuronCore-v2 lacks
# nki.isa of SDK 2.27 (aws-neuron-sdk v2.27.0, nki/api/nki/isa/__init__.py) takes these parameters; the
# values below are the ones it documents as NeuronCore-v3 and later, or as not supported at all.
V2_PE_TILES = (64, 128)  # nki.isa.nc_matmul: 2x64 row (and column) tiles on v2, 4x32 from NeuronCore-v3


@rule("activation-reduce-op", ("activation", "activation_reduce"),
      "nki.isa.activation, nki.isa.activation_reduce (SDK 2.27): reduce_op must be nl.add (on NeuronCore-v2)")
def _activation_reduce_op(instr: Instruction, config: Config) -> str | None:
    op = instr.operands["reduce_op"]
    return None if op in (None, "add") else f"reduce_op={op}: the Scalar engine's reduction is add only"


@rule("dma-rmw-op", ("dma_copy",), "nki.isa.dma_copy (SDK 2.27): only nl.add is supported for dst_rmw_op")
def _dma_rmw_op(instr: Instruction, config: Config) -> str | None:
    op = instr.operands["dst_rmw_op"]
    return None if op in (None, "add") else f"dst_rmw_op={op}: the DMA's read-modify-write is add only"


@rule("dma-dge-mode", ("dma_copy",),
      "nki.isa.dma_copy (SDK 2.27): hardware based DGE is only supported for NeuronCore-v3 or newer")
def _dma_dge_mode(instr: Instruction, config: Config) -> str | None:
    if instr.operands["dge_mode"] == "hwdge":
        return ("dge_mode=hwdge: hardware descriptor generation is NeuronCore-v3 and later; v2 has unknown,"
                " none and swdge")
    return None


@rule("matmul-perf-mode", ("nc_matmul",),
      "nki.isa.nc_matmul (SDK 2.27): on NeuronCore-v2, performance mode is not supported")
def _matmul_perf_mode(instr: Instruction, config: Config) -> str | None:
    mode = instr.operands["perf_mode"]
    if mode != "none":
        return f"perf_mode={mode}: the FP8 double-row mode is NeuronCore-v3 and later; v2 takes perf_mode=none"
    return None


@rule("matmul-pe-tile", ("nc_matmul",),
      "nki.isa.nc_matmul (SDK 2.27): tiling mode, 2x 64 row tiles (NeuronCore-v2 or newer), 4x 32 (v3 or newer);"
      " SDK 2.23: tile sizes cannot be 32 on NeuronCore-v2")
def _matmul_pe_tile(instr: Instruction, config: Config) -> str | None:
    position, size = instr.operands["tile_position"], instr.operands["tile_size"]
    if not position and not size:
        return None
    if len(position) != 2 or len(size) != 2:
        return ("tile_position=[start_row, start_column] and tile_size=[row_size, column_size] are given"
                f" together or not at all, not tile_position={list(position)} and tile_size={list(size)}")
    if 32 in size:
        return f"tile_size={list(size)}: PE tiles of 32 rows or columns are NeuronCore-v3 and later; v2 has 64 or 128"
    if any(v not in V2_PE_TILES for v in size):
        return f"tile_size={list(size)}: rows and columns are 64 or 128 on NeuronCore-v2"
    if any(p % s or p + s > config.pe_rows for p, s in zip(position, size)):
        return (f"tile_position={list(position)} must be multiples of tile_size={list(size)} inside the"
                f" {config.pe_rows}x{config.pe_rows} PE array")
    stat = instr.operands["stationary"]
    if stat.partitions > size[0] or stat.free_elements > size[1]:
        return (f"stationary [{stat.partitions}, {stat.free_elements}] does not fit the PE tile tile_size={list(size)}"
                " (rows: the contraction K, columns: M)")
    return None
