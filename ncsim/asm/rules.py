"""Hardware rules an instruction or tensor must keep, checked against a `Config` (docs/hardware.md#access).

The operand kinds check what the encoding can hold; these check what the NeuronCore allows:
memory bounds, partition starts, which engine reaches which memory, matmul and transpose limits.
The assembler runs them on every instruction (the error points at the source line) and the loader
runs them again on objects, against the configuration of the run.
"""

from __future__ import annotations

from ncsim.asm.instruction import Instruction
from ncsim.asm.objfile import TensorEntry
from ncsim.config import Config
from ncsim.errors import AsmError
from ncsim.isa import LOCKSTEP, alu_info
from ncsim.memory.access import AccessPattern, Memory

PARTITION_REDUCE_OPS = ("add", "maximum", "bitwise_or", "bitwise_and")  # NKI tensor_partition_reduce
GPSIMD_TENSOR_OPS = ("power", "add", "subtract", "multiply")  # NKI: power and 32-bit integer add/sub/mul


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
        if instr.engine == "gpsimd" and ap.memory == Memory.PSUM:
            raise AsmError(f"operand '{name}' is in PSUM, which the GpSimd engine cannot reach")
        if m != "dma_copy" and ap.on_chip:
            limit = config.free_elements_max_psum if ap.memory == Memory.PSUM else config.free_elements_max_sbuf
            if ap.free_elements > limit:
                raise AsmError(f"operand '{name}' has {ap.free_elements} elements per partition; an instruction"
                               f" takes at most {limit} from {ap.memory.label.upper()}")
        if m != "dma_copy" and ap.on_chip and not partition_start_ok(ap.partition, ap.partitions):
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
    both_psum = {"tensor_tensor": ("data1", "data2"), "scalar_tensor_tensor": ("data", "operand1"),
                 "tensor_copy_predicated": ("src", "predicate"), "tensor_tensor_scan": ("data0", "data1")}
    if m in both_psum:
        a, b = (instr.operands[n] for n in both_psum[m])
        if all(isinstance(x, AccessPattern) and x.memory == Memory.PSUM for x in (a, b)):
            raise AsmError(f"{m}: '{both_psum[m][0]}' and '{both_psum[m][1]}' cannot both be in PSUM")
    if instr.engine == "gpsimd" and m == "tensor_tensor" and instr.operands["op"] not in GPSIMD_TENSOR_OPS:
        raise AsmError(f"tensor_tensor on GpSimd runs {', '.join(GPSIMD_TENSOR_OPS)}, not {instr.operands['op']}")
    if instr.engine == "gpsimd" and m == "tensor_scalar" and instr.operands["op0"] != "rsqrt":
        raise AsmError("tensor_scalar on GpSimd runs only rsqrt")
    if instr.engine != "vector" and m not in ("activation", "activation_reduce", "tensor_partition_reduce"):
        for key in ("op", "op0", "op1"):
            op = instr.operands.get(key)
            if op is not None and alu_info(op)[2] == "bitvec":
                raise AsmError(f"bitwise operator {op} runs only on the Vector engine")
    if m == "tensor_partition_reduce" and instr.operands["op"] not in PARTITION_REDUCE_OPS:
        raise AsmError(f"tensor_partition_reduce reduces with {', '.join(PARTITION_REDUCE_OPS)},"
                       f" not {instr.operands['op']}")
    if m in ("tensor_reduce", "tensor_partition_reduce", "tensor_scalar_reduce"):
        op = instr.operands["reduce_op" if m == "tensor_scalar_reduce" else "op"]
        if not alu_info(op)[3]:
            raise AsmError(f"{op} is not a reduction operator")
    _check_lockstep(instr)
    if m == "tensor_scalar":
        problem = tensor_scalar_operators(instr)
        if problem:
            raise AsmError(f"tensor_scalar: {problem}")
    if m == "nc_matmul":
        _check_matmul(instr, config)
    elif m == "nc_transpose":
        data, dst = instr.operands["data"], instr.operands["dst"]
        if instr.engine == "tensor":
            if data.memory != Memory.SBUF or dst.memory != Memory.PSUM:
                raise AsmError("nc_transpose on the Tensor engine reads SBUF and writes PSUM")
            limit = config.pe_rows
        else:
            limit = 32
        if data.partitions > limit or data.free_elements > limit:
            raise AsmError(f"nc_transpose on the {instr.engine} engine handles up to {limit}x{limit},"
                           f" not {data.partitions}x{data.free_elements}")


SCALAR_ENGINE_PAIRS = (("multiply", "add"), ("multiply", None), ("add", None))  # NKI: Scalar's tensor_scalar


def tensor_scalar_operators(instr: Instruction) -> str | None:
    """What is wrong with a tensor_scalar's operators, or None: op1 and operand1 come together; op0 and
    op1 are both arithmetic or both bitwise; the Scalar engine runs only multiply then add, multiply
    alone or add alone (NKI tensor_scalar)."""
    op0, op1, operand1 = instr.operands["op0"], instr.operands["op1"], instr.operands["operand1"]
    if (op1 is None) != (operand1 is None):
        given, missing = ("op1", "operand1") if operand1 is None else ("operand1", "op1")
        return f"{given} is given without {missing}: the second operation needs both"
    if op1 is not None and (alu_info(op0)[2] == "bitvec") != (alu_info(op1)[2] == "bitvec"):
        return f"op0 ({op0}) and op1 ({op1}) must both be arithmetic or both bitwise operators"
    if instr.engine == "scalar" and (op0, op1) not in SCALAR_ENGINE_PAIRS:
        pairs = ", ".join(f"{a} then {b}" if b else f"{a} alone" for a, b in SCALAR_ENGINE_PAIRS)
        return f"the Scalar engine runs tensor_scalar only as {pairs}; not op0={op0}, op1={op1}"
    return None


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


def _check_matmul(instr: Instruction, config: Config) -> None:
    dst, stat, mov = (instr.operands[n] for n in ("dst", "stationary", "moving"))
    if stat.partitions != mov.partitions:
        raise AsmError(f"nc_matmul: stationary and moving contract over the same partitions,"
                       f" not {stat.partitions} and {mov.partitions}")
    if stat.free_elements > config.gemm_stationary_fmax:
        raise AsmError(f"nc_matmul: stationary has {stat.free_elements} columns, at most {config.gemm_stationary_fmax}")
    if mov.free_elements > config.gemm_moving_fmax:
        raise AsmError(f"nc_matmul: moving has {mov.free_elements} columns, at most {config.gemm_moving_fmax}")
    lo, hi = dst.byte_span()
    bank = config.psum_bank_bytes
    if lo // bank != (hi - 1) // bank:
        raise AsmError(f"nc_matmul: the PSUM output spans bytes {lo}..{hi - 1}, across a {bank}-byte bank boundary")
    if dst.dtype.short != "f32":
        raise AsmError(f"nc_matmul writes fp32 into PSUM, not {dst.dtype.short}")


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
