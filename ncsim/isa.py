"""THE instruction table of NeuronCore-v2: every instruction declared once.

Each row gives the NKI mnemonic, a stable opcode, the engines that may run it, its operands (each a
typed field from `ncsim.asm.fields`), and its semantics and cost in words. The assembler's parser,
the encoder and decoder, the disassembler, `ncsim isa` and docs/isa.md are all loops over `TABLE`.
The functions that execute an instruction and time it are attached by the engine modules
(`execute` and `cost` slots), so that this file stays the single declaration.

Operand names, order and defaults follow `nki.isa`'s explicit-`dst` form of SDK 2.27 (NKI_FORMS below):
the destination first, then the parameters in nki.isa's positional order; required operands may be
written by position, optional ones by keyword. Where ncsim's default differs from NKI's, or the
operand is ncsim's own, the operand's `nki` says so and docs/isa.md lists it. What an instruction
computes follows the NeuronCore-v2 `nki.isa` reference of SDK 2.23 and docs/hardware.md#isa, #cost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ncsim import dtypes
from ncsim.asm.fields import (
    SIGNAL_OPS,
    WAIT_OPS,
    APKind,
    BoolKind,
    ConstKind,
    EnumKind,
    FloatKind,
    IntKind,
    IntListKind,
    Kind,
    PatternKind,
    SemListKind,
    SemOneKind,
)
from ncsim.gpsimd.fields import ARG, CMP, LANE, ProgramKind, RegKind, RegOrImmKind, TargetKind
from ncsim.memory.access import Immediate, Memory

# The reference for the operand forms and their defaults: the signatures of nki.isa in SDK 2.27.
NKI_FORMS = ("aws-neuron-sdk v2.27.0, nki/api/nki/isa/__init__.py: the nki.isa API reference"
             " (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/nki.isa.html)")

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")
ENGINE_NAMES = {
    "tensor": "Tensor engine (PE): 128x128 systolic array",
    "vector": "Vector engine (DVE)",
    "scalar": "Scalar engine (ACT)",
    "gpsimd": "GpSimd engine (POOL): 8 cores of 512-bit SIMD",
    "sync": "Sync engine (SP): a sequencer that mostly issues DMAs",
}

# --------------------------------------------------------------------------- ALU operators (SHARED)
# name, arity, class ("arith": computed in fp32; "bitvec": on the integer bits), reducible, summary, and
# the engines of NeuronCore-v2 that run it. The engines column is the table "Supported Math Operators
# by NKI ISA" of `nki.api.shared` (aws-neuron-sdk general/nki/api/nki.api.shared.rst, SDK 2.23), with
# its note applied to v2: "Add and Multiply are supported on Scalar Engine only from NeuronCore-v3.
# 32-bit integer Add and Multiply are only supported on GpSIMD Engine." So on v2 Scalar runs none of
# add/multiply (the pairs multiply-then-add, multiply, add that nki.isa.tensor_scalar lists for the
# Scalar engine are trn2's, NeuronCore-v3). The table lists divide on no engine; ncsim runs it on
# Vector, beside the other binary arithmetic operators. Instructions with an operator list of their own
# in NKI (tensor_partition_reduce: add, maximum, bitwise_or, bitwise_and on GpSimd) follow that list.
# Enforced by ncsim.asm.rules (rule "alu-engine", "int32-add-multiply"), at assembly and at run time.
ALU_OPS: tuple[tuple[str, int, str, bool, str, tuple[str, ...]], ...] = (
    ("add", 2, "arith", True, "a + b", ("vector", "gpsimd")),
    ("subtract", 2, "arith", True, "a - b", ("vector",)),
    ("multiply", 2, "arith", True, "a * b", ("vector", "gpsimd")),
    ("divide", 2, "arith", False, "a / b (IEEE: x/0 is inf or nan)", ("vector",)),
    ("maximum", 2, "arith", True, "max(a, b); NaN if either is NaN", ("vector",)),
    ("minimum", 2, "arith", True, "min(a, b); NaN if either is NaN", ("vector",)),
    ("power", 2, "arith", False, "a ** b", ("gpsimd",)),
    ("equal", 2, "arith", False, "1.0 if a == b else 0.0", ("vector",)),
    ("not_equal", 2, "arith", False, "1.0 if a != b else 0.0", ("vector",)),
    ("greater", 2, "arith", False, "1.0 if a > b else 0.0", ("vector",)),
    ("greater_equal", 2, "arith", False, "1.0 if a >= b else 0.0", ("vector",)),
    ("less", 2, "arith", False, "1.0 if a < b else 0.0", ("vector",)),
    ("less_equal", 2, "arith", False, "1.0 if a <= b else 0.0", ("vector",)),
    ("logical_and", 2, "arith", True, "1.0 if a != 0 and b != 0 else 0.0", ("vector",)),
    ("logical_or", 2, "arith", True, "1.0 if a != 0 or b != 0 else 0.0", ("vector",)),
    ("logical_xor", 2, "arith", True, "1.0 if (a != 0) != (b != 0) else 0.0", ("vector",)),
    ("logical_not", 1, "arith", False, "1.0 if a == 0 else 0.0", ("vector",)),
    ("abs", 1, "arith", False, "|a|", ("vector", "scalar")),
    ("rsqrt", 1, "arith", False, "1 / sqrt(a)", ("gpsimd", "scalar")),
    ("reciprocal", 1, "arith", False, "1 / a", ("vector", "scalar")),
    ("bitwise_and", 2, "bitvec", True, "a & b on the integer bits", ("vector",)),
    ("bitwise_or", 2, "bitvec", True, "a | b on the integer bits", ("vector",)),
    ("bitwise_xor", 2, "bitvec", True, "a ^ b on the integer bits", ("vector",)),
    ("invert", 1, "bitvec", False, "~a on the integer bits", ("vector",)),
    ("left_shift", 2, "bitvec", False, "a << b (logical)", ("vector",)),
    ("right_shift", 2, "bitvec", False, "a >> b (logical)", ("vector",)),
)
# The note's second sentence: on 32-bit integer tiles these run only on GpSimd, which computes them modulo
# 2**32 (Vector would take the integers through fp32 and round those above 2**24).
INT32_GPSIMD_OPS = ("add", "multiply")
ALU_ALIASES = {"max": "maximum", "min": "minimum", "pow": "power", "sub": "subtract", "mul": "multiply",
               "div": "divide", "amax": "maximum", "amin": "minimum"}

# --------------------------------------------------------------------------- activation functions (SHARED)
# name, formula in float64 (ncsim evaluates it in float64 and rounds once to fp32, docs/hardware.md#numerics)
ACTIVATION_FUNCS: tuple[tuple[str, str], ...] = (
    ("copy", "x"),
    ("square", "x * x"),
    ("sigmoid", "1 / (1 + exp(-x))"),
    ("relu", "max(x, 0)"),
    ("gelu", "x * (1 + erf(x / sqrt(2))) / 2"),
    ("gelu_dx", "(1 + erf(x / sqrt(2))) / 2 + x * exp(-x*x/2) / sqrt(2*pi)"),
    ("gelu_apprx_tanh", "x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) / 2"),
    ("silu", "x / (1 + exp(-x))"),
    ("silu_dx", "s + x * s * (1 - s) with s = sigmoid(x)"),
    ("tanh", "tanh(x)"),
    ("softplus", "log(1 + exp(x)), evaluated as max(x, 0) + log1p(exp(-|x|))"),
    ("mish", "x * tanh(softplus(x))"),
    ("erf", "erf(x)"),
    ("erf_dx", "2 / sqrt(pi) * exp(-x*x)"),
    ("exp", "exp(x)"),
    ("log", "log(x)"),
    ("sin", "sin(x)"),
    ("arctan", "arctan(x)"),
    ("sqrt", "sqrt(x)"),
    ("rsqrt", "1 / sqrt(x)"),
    ("reciprocal", "1 / x"),
    ("sign", "-1, 0 or 1 (NaN stays NaN)"),
    ("abs", "|x|"),
)

ALU = EnumKind(table="ALU operators", choices=tuple(o[0] for o in ALU_OPS), aliases=ALU_ALIASES)
ALU_OPTIONAL = EnumKind(table="ALU operators", choices=tuple(o[0] for o in ALU_OPS), aliases=ALU_ALIASES,
                        optional=True)
ACT_FUNC = EnumKind(table="activation functions", choices=tuple(f[0] for f in ACTIVATION_FUNCS))
REDUCE_CMD = EnumKind(table="accumulator commands", choices=("idle", "reset", "reduce", "reset_reduce"))
CMP_OP = EnumKind(table="comparisons", choices=("equal", "not_equal", "greater", "greater_equal", "less",
                                                "less_equal"))
# nc_matmul's PE tiling (nki.isa.nc_matmul): (start_row, start_column) and (row_size, column_size), both or neither.
PE_PAIR = IntListKind(max_len=2, lo=0, hi=128, min_len=0, what="PE rows and columns")
PERF_MODE = EnumKind(table="matmul performance modes", choices=("none", "double_row"))
DGE_MODE = EnumKind(table="DMA descriptor generation modes", choices=("unknown", "none", "swdge", "hwdge"))
OOB_MODE = EnumKind(table="out-of-bounds modes", choices=("error", "skip"))

SBUF_PSUM = (Memory.SBUF, Memory.PSUM)
TILE = APKind(memories=SBUF_PSUM)
SBUF_TILE = APKind(memories=(Memory.SBUF,))
PSUM_TILE = APKind(memories=(Memory.PSUM,))
TILE_OR_CONST = APKind(memories=SBUF_PSUM, imm=True)
OPT_TILE = APKind(memories=SBUF_PSUM, optional=True)
OPT_TILE_OR_CONST = APKind(memories=SBUF_PSUM, imm=True, optional=True)
DMA_AP = APKind(memories=(Memory.SBUF, Memory.HBM))
GPSIMD_ARG = APKind(memories=(Memory.SBUF, Memory.HBM))
OPT_GPSIMD_ARG = APKind(memories=(Memory.SBUF, Memory.HBM), optional=True)
WAITS = SemListKind(ops=WAIT_OPS)
SIGNALS = SemListKind(ops=SIGNAL_OPS)

REQUIRED: Any = object()
ONE = Immediate(1.0, dtypes.FLOAT32)


@dataclass(frozen=True)
class Operand:
    name: str
    kind: Kind
    doc: str
    default: Any = REQUIRED
    role: str = ""  # for access patterns: "in" (read), "out" (written) or "inout" (read and written)
    # NKI's default for an optional operand, in words, where it is not ncsim's (None: nki.isa of SDK
    # 2.27 has this parameter with this very default). docs/isa.md lists both (`isadoc.defaults_rows`).
    nki: str | None = None

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def dst(doc: str = "destination tile", kind: Kind = TILE, role: str = "out") -> Operand:
    return Operand("dst", kind, doc, role=role)


def src(name: str, doc: str, kind: Kind = TILE, default: Any = REQUIRED) -> Operand:
    return Operand(name, kind, doc, default=default, role="in")


def opt(name: str, kind: Kind, default: Any, doc: str, nki: str | None = None) -> Operand:
    return Operand(name, kind, doc, default=default, role="in" if isinstance(kind, APKind) else "", nki=nki)


@dataclass(frozen=True)
class InstrSpec:
    """One row of the table."""

    mnemonic: str
    opcode: int
    engines: tuple[str, ...]  # the first is the default
    operands: tuple[Operand, ...]
    summary: str  # one line, for `ncsim isa`
    semantics: str  # what it computes, in words precise enough to implement
    cost: str  # its cost in engine cycles, in words (docs/hardware.md#cost)
    # "neuroncore": an instruction of the engines' streams (TABLE); "core": an instruction of the GpSimd
    # cores' model ISA (CORE_TABLE), found only inside `.gpsimd` sections (docs/gpsimd.md)
    group: str = "neuroncore"
    # Filled in by ncsim.engines when they are imported (functional and timing issues):
    slots: dict[str, Callable[..., Any]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def engine_field(self) -> Operand | None:
        if len(self.engines) < 2:
            return None
        kind = EnumKind(table="engines of " + self.mnemonic, choices=self.engines)
        return Operand("engine", kind, "the engine that runs it", default=self.engines[0])

    @property
    def all_operands(self) -> tuple[Operand, ...]:
        """The row's operands, then the engine choice (if any), then the semaphore lists every instruction has."""
        extra = (self.engine_field,) if self.engine_field else ()
        return self.operands + extra + (SYNC_OPERANDS if self.group != "core" else ())

    def operand(self, name: str) -> Operand | None:
        return next((o for o in self.all_operands if o.name == name), None)

    def syntax(self) -> str:
        parts = [o.name for o in self.operands if o.required]
        parts += [f"{o.name}={o.kind.format(o.default)}" for o in self.operands if not o.required]
        if self.engine_field:
            parts.append(f"engine={self.engines[0]}")
        return f"{self.mnemonic} " + ", ".join(parts)


SYNC_OPERANDS = (
    Operand("wait", WAITS, "semaphores to wait for before starting: [sN>=value, ...]", default=()),
    Operand("signal", SIGNALS, "semaphores to update on completion: [sN+=value, ...]", default=()),
)

ALL_ENGINES = ("sync", "tensor", "vector", "scalar", "gpsimd")  # sync first: the default

TABLE: tuple[InstrSpec, ...] = (
    # ------------------------------------------------------------------ Tensor engine
    InstrSpec(
        "nc_matmul", 0x01, ("tensor",),
        (
            dst("PSUM tile [M, N], fp32", kind=PSUM_TILE),
            src("stationary", "[K, M] in SBUF: K partitions (contraction, <= 128), M <= 128", SBUF_TILE),
            src("moving", "[K, N] in SBUF: N <= 512", SBUF_TILE),
            opt("is_stationary_onezero", BoolKind(), False, "v2 accepts it: a hint that stationary holds only ones"
                " and zeros (NKI: may make an fp32 matmul up to 2x faster); ncsim computes and times it the same"),
            opt("is_moving_onezero", BoolKind(), False, "v2 accepts it: the same hint for moving; no effect in ncsim"),
            opt("is_transpose", BoolKind(), False, "v2 accepts it: marks the matmul as a transpose for the profiler"
                " (NKI: v2 has no transpose mode; bit-exact transpose is v3 and later); no effect on values or time"),
            opt("accumulate", BoolKind(), False, "add onto the PSUM tile instead of overwriting it",
                nki="absent from 2.27's signature (its text speaks of psum_accumulate_flag); 2.29 adds"
                    " accumulate=None: the first write to a PSUM place overwrites, later ones accumulate"),
            opt("tile_position", PE_PAIR, (), "v2 accepts it: [start_row, start_column] of the PE tile the matmul"
                " uses; each a multiple of the tile's size; given with tile_size or not at all"),
            opt("tile_size", PE_PAIR, (), "v2 accepts 64 or 128 rows and columns: [row_size, column_size] of the PE"
                " tile; stationary must fit (K <= row_size, M <= column_size); 32 is v3 and later, refused"),
            opt("perf_mode", PERF_MODE, "none", "v2 accepts only none; double_row (FP8 double throughput) is v3 and"
                " later, refused"),
        ),
        "dst[M,N] (+)= stationary^T @ moving on the 128x128 systolic array",
        "dst[m, n] = sum over k = 0..K-1, in that order, of stationary[k, m] * moving[k, n]: acc starts at +0.0"
        " (with accumulate=true at the PSUM value), then acc = acc + s * m for each k, the product and the sum each"
        " one fp32 operation (never fused); a NaN result is the canonical NaN 0x7FC00000. Free axes are flattened."
        " accumulate=true adds onto whatever dst holds, in fp32: a matmul's partial sums, or the zeros a memset"
        " wrote (NKI's nl.zeros in PSUM, then acc += matmul); PSUM nothing wrote reads as its sentinel, with the"
        " unwritten-read warning. PE tiling (tile_position and tile_size, NKI: 2x64 rows or columns on v2, 4x32 from"
        " v3) only checks that stationary fits its tile: ncsim computes the same values and does not overlap"
        " matmuls on different tiles in time. Inputs fp8/bf16/fp16/tf32/fp32 (fp32 and tf32 only with each"
        " other); dst is fp32 in"
        " PSUM, inside one bank.",
        "max(min(64, M), N) Tensor cycles, x4 when the operands are fp32; the stationary load runs in the"
        " background and overlaps the previous matmul",
    ),
    InstrSpec(
        "nc_transpose", 0x02, ("tensor", "vector"),
        (dst("the transposed tile [F, P]"), src("data", "[P, F]: up to 128x128 on Tensor, 32x32 on Vector")),
        "swap the partition and free axes",
        "dst[f, p] = data[p, f] (multiple free axes are flattened first). On Tensor: data in SBUF, dst in PSUM"
        " of data's dtype (NKI), computed as nc_matmul with data as stationary and the identity as moving:"
        " dst[f, p] = fp32 sum from +0 over k = 0..P-1 of data[k, f] * I[k, p], narrowed to dst's dtype. So finite"
        " values are exact (integers up to 2**24), -0 becomes +0, and an inf or NaN in column f of data gives NaN"
        " (inf * 0) in row f of dst except an inf's own place (inf when it is the column's only non-finite"
        " value); NaN is the canonical NaN. On Vector: up to 32x32"
        " (config vector_transpose_max), SBUF or PSUM, dst of data's dtype, the bits copied.",
        "Tensor: max(P, min(64, F)) cycles; Vector: max(MIN_II, N)",
    ),
    # ------------------------------------------------------------------ Scalar engine
    InstrSpec(
        "activation", 0x10, ("scalar",),
        (
            dst(),
            Operand("op", ACT_FUNC, "the activation function"),
            src("data", "input tile"),
            opt("bias", OPT_TILE, None, "[P, 1] column added before the function (v2: a vector, not a scalar)"),
            opt("scale", TILE_OR_CONST, ONE, "constant or [P, 1] column multiplying the input"),
            opt("reduce_op", ALU_OPTIONAL, None, "the reduction of the accumulators: add, the only one on v2"
                " (none: add)"),
            Operand("reduce_res", OPT_TILE, "[P, 1] tile that receives the accumulators", default=None, role="out"),
            opt("reduce_cmd", REDUCE_CMD, "idle", "what to do with the 128 fp32 accumulator registers"),
        ),
        "dst = op(data * scale + bias), optionally add-reducing into accumulators",
        "out = op(data * scale + bias) per element: one fp32 multiply, one fp32 add (none without bias), op in"
        " float64 by the formula of ACTIVATION_FUNCS rounded once to fp32 (rules at ±inf, NaN and outside the"
        " domain: ncsim/engines/scalar.py). scale: a constant or an f32 [P, 1] column; bias: an f32/f16/bf16 [P, 1]"
        " column (NKI v2). Each lane (partition) has one fp32 accumulator, NaN until first reset. reduce_op is add"
        " (NKI: the only reduction of activation; none means add, another operator is refused). reduce_cmd: reset"
        " sets the instruction's lanes to +0; reduce adds out[p, 0], out[p, 1], ... one at a time, in fp32, onto"
        " them (the fp32 results, before narrowing); reset_reduce does both; idle neither. reduce_res, when given,"
        " then receives the lanes' accumulators.",
        "max(MIN_II, N) Scalar cycles; + MIN_II when reducing",
    ),
    InstrSpec(
        "activation_reduce", 0x11, ("scalar",),
        (
            dst(),
            Operand("op", ACT_FUNC, "the activation function"),
            src("data", "input tile"),
            Operand("reduce_op", ALU, "the reduction: add (NKI: the only one on v2)"),
            Operand("reduce_res", TILE, "[P, 1] tile receiving the row sums", role="out"),
            opt("bias", OPT_TILE, None, "[P, 1] column added before the function"),
            opt("scale", TILE_OR_CONST, ONE, "constant or [P, 1] column multiplying the input"),
        ),
        "dst = op(data * scale + bias) and reduce_res = its row sums",
        "as activation with reduce_cmd=reset_reduce: reduce_res[p] = ((+0 + out[p, 0]) + out[p, 1]) + ... over the"
        " flattened free axes in fp32, of the fp32 results (add is the only reduction on v2); the accumulators keep"
        " the sums.",
        "max(MIN_II, N) + MIN_II Scalar cycles",
    ),
    # ------------------------------------------------------------------ Vector engine (and friends)
    InstrSpec(
        "tensor_tensor", 0x20, ("vector", "gpsimd"),
        (dst(), src("data1", "first input"), src("data2", "second input, same shape"),
         Operand("op", ALU, "binary ALU operator")),
        "elementwise dst = data1 op data2",
        "out = data1 op data2 elementwise; arithmetic ops in fp32, bitvec ops on the integer bits. The inputs"
        " may not both be in PSUM. The engine must run op (ALU operators table: GpSimd runs add, multiply and power);"
        " add and multiply of 32-bit integer tiles (dst, data1, data2 all i32/u32) run only on GpSimd, on the"
        " integers modulo 2**32 (rule int32-add-multiply). GpSimd cannot reach PSUM.",
        "max(MIN_II, N) if one input is in PSUM and the other in SBUF, or all bf16 add/subtract/multiply with"
        " unit stride; else max(MIN_II, c x N), c = tensor_tensor_cycles_per_element = 1 (the ISA estimates 2N; the chip measured about N: docs/timing.md#calibration)",
    ),
    InstrSpec(
        "tensor_scalar", 0x21, ("vector", "scalar", "gpsimd"),
        (
            dst(),
            src("data", "input tile"),
            Operand("op0", ALU, "first operator"),
            src("operand0", "constant or [P, 1] column", TILE_OR_CONST),
            opt("reverse0", BoolKind(), False, "compute operand0 op0 data instead of data op0 operand0"),
            opt("op1", ALU_OPTIONAL, None, "optional second operator"),
            opt("operand1", OPT_TILE_OR_CONST, None, "constant or [P, 1] column for op1"),
            opt("reverse1", BoolKind(), False, "compute operand1 op1 tmp instead of tmp op1 operand1"),
        ),
        "dst = (data op0 operand0) op1 operand1, operands broadcast along the free axis",
        "tmp = data op0 operand0 (reversed when reverse0), then out = tmp op1 operand1 (reversed when reverse1)"
        " if op1 is given; each op in fp32, tmp not narrowed (a constant is taken as its nearest fp32 value)."
        " op1 and operand1 come together; op0 and op1 are both arithmetic or both bitvec (NKI). Bitvec ops: Vector"
        " only, data, dst and column operands of integer dtypes, constants integers, on the 32-bit patterns of"
        " alu.to_bits. A unary op (abs, invert, ...) applies to the data side and ignores its operand and reverse."
        " Each op runs on the engine only if the ALU operators table says so (v2: Scalar runs abs, rsqrt and"
        " reciprocal, not add or multiply, which are NeuronCore-v3's; GpSimd runs add, multiply, power, rsqrt). On"
        " GpSimd, add and multiply with dst and data 32-bit integers are integer operations modulo 2**32, taking"
        " integer constants or i32/u32 columns (rule int32-add-multiply); on Vector they are refused.",
        "max(MIN_II, N) cycles",
    ),
    InstrSpec(
        "tensor_scalar_reduce", 0x22, ("vector",),
        (
            dst(),
            src("data", "input tile"),
            Operand("op0", ALU, "the operator"),
            src("operand0", "constant or [P, 1] column", TILE_OR_CONST),
            Operand("reduce_op", ALU, "the reduction: add, subtract, multiply, maximum or minimum"),
            Operand("reduce_res", TILE, "[P, 1] tile receiving the reduction", role="out"),
            opt("reverse0", BoolKind(), False, "compute operand0 op0 data"),
        ),
        "dst = data op0 operand0, and reduce_res = its reduction along the free axes",
        "out = data op0 operand0 in fp32 (op0 arithmetic; the unary rule of tensor_scalar); dst = out narrowed;"
        " reduce_res[p] = ((out[p, 0] r out[p, 1]) r out[p, 2]) ... over the fp32 values of out (before"
        " narrowing) along the flattened free axes, with r = reduce_op, one of add, subtract, multiply, maximum,"
        " minimum (NKI); reduce_res is a [P, 1] tile.",
        "max(MIN_II, N) + MIN_II Vector cycles",
    ),
    InstrSpec(
        "scalar_tensor_tensor", 0x23, ("vector",),
        (
            dst(),
            src("data", "input tile"),
            Operand("op0", ALU, "first operator"),
            src("operand0", "constant or [P, 1] column", TILE_OR_CONST),
            Operand("op1", ALU, "second operator"),
            src("operand1", "tile of the same shape as data"),
            opt("reverse0", BoolKind(), False, "compute operand0 op0 data"),
            opt("reverse1", BoolKind(), False, "compute operand1 op1 tmp"),
        ),
        "dst = (data op0 operand0) op1 operand1, with operand1 a full tile",
        "tmp = data op0 operand0 (reversed when reverse0); out = tmp op1 operand1 (reversed when reverse1); fp32,"
        " tmp not narrowed, arithmetic ops only (the unary rule of tensor_scalar). data, operand1 and dst have the"
        " same partitions and elements per partition; data and operand1 may not both be in PSUM.",
        "max(MIN_II, N) Vector cycles for bf16 subtract then multiply with even N; else max(MIN_II, 2N)",
    ),
    InstrSpec(
        "tensor_reduce", 0x24, ("vector",),
        (
            dst("[P, ...] tile of the kept axes"),
            Operand("op", ALU, "reducible operator: add, subtract, multiply, maximum, minimum, logical/bitwise and/or/xor"),
            src("data", "input tile"),
            Operand("axis", IntListKind(max_len=4, lo=1, hi=4, min_len=1, what="free axes"),
                    "free axes to reduce (a number or a list), numbered from 1 after the partition axis; the last"
                    " ones, ending at the innermost"),
            opt("negate", BoolKind(), False, "negate the result"),
            opt("keepdims", BoolKind(), False, "dst keeps the reduced axes with size 1"),
        ),
        "reduce along free axes",
        "out[p, kept...] = ((x0 op x1) op x2) ... over the elements x0, x1, ... of the reduced axes in row-major"
        " order (a fold from the first element: subtract gives x0 - x1 - x2 ...), in fp32; bitvec ops on the bits"
        " of integer tiles. The axes are distinct and the last ones, ending at the innermost (NKI); dst has P"
        " partitions and as many elements per partition as the kept axes hold (1 when all are reduced); with"
        " keepdims=true dst's shape is data's with each reduced axis of size 1 (NKI: [P, A, B] over axis [2] gives"
        " [P, A, 1]), the values the same. negate"
        " (arithmetic ops only, NKI) multiplies the result by -1.0 in fp32.",
        "max(MIN_II, N/2) Vector cycles for bf16 add or maximum; else max(MIN_II, N)",
    ),
    InstrSpec(
        "tensor_tensor_scan", 0x25, ("vector",),
        (
            dst(),
            src("data0", "first input"),
            src("data1", "second input, same shape"),
            src("initial", "constant or [P, 1] column: the value before element 0", TILE_OR_CONST),
            Operand("op0", ALU, "operator combining data0 with the running result"),
            Operand("op1", ALU, "operator combining that with data1"),
            opt("reverse0", BoolKind(), False, "compute result op0 data0 instead of data0 op0 result"),
            opt("reverse1", BoolKind(), False, "compute data1 op1 tmp instead of tmp op1 data1"),
        ),
        "scan along the free axis: res[i] = op1(op0(data0[i], res[i-1]), data1[i])",
        "res[:, -1] = initial; res[:, i] = (data0[:, i] op0 res[:, i-1]) op1 data1[:, i] for i = 0..N-1 in order,"
        " in fp32, over the flattened free axes; the running value stays fp32 (only out is narrowed). op0 and op1"
        " are binary arithmetic operators (NKI).",
        "max(MIN_II, 2N) Vector cycles",
    ),
    InstrSpec(
        "tensor_copy", 0x26, ("vector", "gpsimd", "scalar"),
        (dst(), src("src", "input tile of the same element count per partition")),
        "copy a tile, converting the dtype",
        "out = src element for element (the same partitions and elements per partition); bit-exact when the dtypes"
        " match (Vector, GpSimd), else through fp32. On Scalar always through fp32 (so 32-bit integers above"
        " 2**24 round).",
        "max(MIN_II, N) cycles",
    ),
    InstrSpec(
        "tensor_copy_predicated", 0x27, ("vector",),
        (
            dst("tile updated in place", role="inout"),
            src("src", "tile or constant copied where the predicate holds", TILE_OR_CONST),
            src("predicate", "uint8/16/32 tile: nonzero means copy"),
            opt("reverse_pred", BoolKind(), False, "copy where the predicate is zero instead"),
        ),
        "dst = where(predicate, src, dst)",
        "dst[i] = src[i] where predicate[i] != 0 (== 0 when reverse_pred); other elements keep their value."
        " predicate is uint8/16/32 (or bool), src a tile of dst's dtype whose bits are copied (NKI), or a constant"
        " converted as memset converts it. src and predicate may not both be in PSUM.",
        "max(MIN_II, N) when the operands span memories; max(MIN_II, 2N) all in SBUF",
    ),
    InstrSpec(
        "tensor_copy_dynamic_src", 0x28, ("vector", "gpsimd", "scalar"),
        (
            dst(),
            src("src", "source pattern whose start moves by the dynamic offset"),
            Operand("index", SBUF_TILE, "one int32 element in SBUF holding the offset, in elements of src",
                    role="in", nki="not a parameter in NKI 2.27, whose src access pattern carries the dynamic"
                                   " offset"),
        ),
        "copy from a source at a run-time offset",
        "k = the int32 in index (read at run time); out = the elements of src's pattern with its start moved by k"
        " elements in each partition, copied like tensor_copy (bit-exact when the dtypes match on Vector and"
        " GpSimd, else through fp32). dst and src have the same partitions and elements per partition; an offset"
        " that moves src out of the partition (usable SBUF bytes, PSUM bytes) is an error naming the allowed range.",
        "max(600, N) cycles",
    ),
    InstrSpec(
        "tensor_copy_dynamic_dst", 0x29, ("vector", "gpsimd", "scalar"),
        (
            dst("destination pattern whose start moves by the dynamic offset"),
            src("src", "input tile"),
            Operand("index", SBUF_TILE, "one int32 element in SBUF holding the offset, in elements of dst",
                    role="in", nki="not a parameter in NKI 2.27, whose dst access pattern carries the dynamic"
                                   " offset"),
        ),
        "copy to a destination at a run-time offset",
        "k = the int32 in index (read at run time); the elements of dst's pattern with its start moved by k"
        " elements in each partition = src, copied like tensor_copy (bit-exact when the dtypes match on Vector"
        " and GpSimd, else through fp32). An offset that moves dst out of the partition is an error naming the"
        " allowed range.",
        "max(600, N) cycles",
    ),
    InstrSpec(
        "memset", 0x2A, ("vector", "gpsimd"),
        (dst(), Operand("value", ConstKind(), "the constant")),
        "fill a tile with a constant",
        "every element of dst = value converted to dst's dtype: an integer constant into an integer dtype exactly,"
        " saturated to its range (bool: nonzero is 1); otherwise the constant's nearest fp32 value narrowed by"
        " from_f32 (round to nearest even; into integers half to even and saturating, NaN to 0).",
        "max(MIN_II, N/2) for zero into a 16-bit float dtype; else max(MIN_II, N)",
    ),
    InstrSpec(
        "reciprocal", 0x2B, ("vector",),
        (dst(), src("data", "input tile")),
        "dst = 1 / data (Vector: more precise, slower than activation reciprocal)",
        "out = 1 / data in fp32 (IEEE division: 1/0 = inf, 1/-0 = -inf); dst and data have the same partitions and"
        " elements per partition.",
        "max(MIN_II, 8N) Vector cycles",
    ),
    InstrSpec(
        "bn_stats", 0x2C, ("vector",),
        (dst("[P, 6] statistics"), src("data", "input tile, at most 512 elements per partition")),
        "mean/variance statistics of each partition's elements, split even/odd",
        "out[p] = [count_e, mean_e, m2_e, count_o, mean_o, m2_o] over the elements g at even (e) and odd (o)"
        " positions of the flattened free axis (1 to 512 per partition, config bn_stats_fmax), in fp32, each sum left"
        " to right from +0.0: count = len(g); mean = (g[0] + g[1] + ...) / count; m2 = (g[0] - mean) * (g[0] - mean)"
        " + ... (variance * count). An empty group (a single element in all) gives 0, 0, 0. dst is [P, 6].",
        "max(MIN_II, N) Vector cycles",
    ),
    InstrSpec(
        "bn_aggr", 0x2D, ("vector",),
        (dst("[P, 2]: mean, variance"), src("data", "[P, 3k]: k (count, mean, variance*count) triples")),
        "combine bn_stats triples into mean and population variance",
        "out[p] = [mean, variance] of the union of the groups described by the k >= 1 triples (count_j, mean_j,"
        " m2_j), in free-axis order, in fp32, each sum left to right over j from +0.0: n = sum count_j;"
        " mean = (sum count_j * mean_j) / n; variance = (sum m2_j + count_j * ((mean_j - mean) * (mean_j - mean))) / n"
        " (population variance; n = 0 gives NaN).",
        "max(MIN_II, 13N/3) Vector cycles",
    ),
    InstrSpec(
        "max8", 0x2E, ("vector",),
        (dst("[P, 8]"), src("src", "input tile, 8 to 16384 elements per partition")),
        "the 8 largest values of each partition, in descending order",
        "out[p] = the 8 largest values of src[p] (8 to 16384 per partition, config top8_fmax), compared in fp32,"
        " largest first: NaN ranks above +inf, -0 equals +0, equal values come in order of position and a value"
        " present several times is listed as often. The values are src's, narrowed to dst's dtype (NaN payloads kept).",
        "max(MIN_II, N) Vector cycles",
    ),
    InstrSpec(
        "nc_find_index8", 0x2F, ("vector",),
        (dst("[P, 8] uint16 or uint32 indices"), src("data", "input tile"), src("vals", "[P, 8] values to find")),
        "index of the first occurrence of each of 8 values per partition",
        "out[p, j] = the smallest flat free index i with data[p, i] == vals[p, j], compared in fp32 (-0 finds +0,"
        " NaN finds nothing); 0 if nothing matches (NKI: undefined; ncsim follows nc_match_replace8's NKI equivalent)."
        " data has 8 to 16384 elements per partition (top8_fmax), vals exactly 8; dst is [P, 8] uint16 or uint32.",
        "max(MIN_II, N) Vector cycles",
    ),
    InstrSpec(
        "nc_match_replace8", 0x30, ("vector",),
        (
            dst("copy of data with the matches replaced"),
            src("data", "input tile"),
            src("vals", "[P, 8] values to find"),
            Operand("imm", FloatKind(), "the replacement value"),
            Operand("dst_idx", OPT_TILE, "optional [P, 8] uint32 tile receiving the replaced indices",
                    default=None, role="out"),
        ),
        "replace the first occurrence of each of 8 values per partition",
        "for j = 0..7 in order: the first i with data[p, i] == vals[p, j] (compared in fp32, among elements not yet"
        " replaced) gets imm, and dst_idx[p, j] = i; if none matches, nothing is replaced and dst_idx[p, j] = 0 (NKI's"
        " numpy equivalent). Other elements are copied: bit-exact when dst and data share a dtype, else through fp32."
        " data has at most 16384 elements per partition (top8_fmax), vals exactly 8; dst_idx is uint32.",
        "max(MIN_II, N) Vector cycles",
    ),
    InstrSpec(
        "dropout", 0x31, ("vector",),
        (
            dst(),
            src("data", "input tile"),
            src("prob", "drop probability: constant or [P, 1] column", TILE_OR_CONST),
            opt("seed", IntKind(lo=0, hi=2**32 - 1), 0, "seed of ncsim's counter-based random stream",
                nki="not in NKI (ncsim's: the hardware's random state is not modelled)"),
        ),
        "zero each element with probability prob",
        "out[p, i] = 0 where u(seed, p, i) < prob[p] (in fp32) else data[p, i] (bit-exact when the dtypes match, else"
        " through fp32); kept values are not rescaled. p counts the operand's partitions from 0, i its flat free"
        " index; u = (h >> 8) / 2**24 with h = f(f(f(seed ^ 0x9E3779B9) ^ p) ^ i), f MurmurHash3's 32-bit finalizer"
        " (docs/numerics.md).",
        "max(MIN_II, N) Vector cycles",
    ),
    InstrSpec(
        "nc_stream_shuffle", 0x32, ("vector",),
        (
            dst("destination, updated in place", role="inout"),
            src("src", "source tile"),
            Operand("shuffle_mask", IntListKind(max_len=32, lo=0, hi=255, min_len=32, what="source partitions"),
                    "32 entries: output partition i of each 32-partition quadrant copies source partition"
                    " mask[i]; 255 leaves it unchanged"),
        ),
        "move data between partitions within each 32-partition quadrant",
        "for each quadrant q and i in 0..31 with mask[i] != 255 and 32q + i < dst's partitions: dst[32q + i] ="
        " src[32q + mask[i]], partitions counted from each tile's first, the bits copied; all of src is read first"
        " (dst may be src). Quadrants: ceil(max(P_dst, P_src) / 32), and that many x 32 active partitions decide the"
        " allowed starts of both tiles (docs/hardware.md#access). Same dtype, same elements per partition; mask entries 32..254"
        " and a source partition past src's are errors.",
        "max(MIN_II, N) Vector cycles",
    ),
    # ------------------------------------------------------------------ GpSimd engine
    InstrSpec(
        "iota", 0x40, ("gpsimd",),
        (
            dst("SBUF tile", kind=SBUF_TILE),
            Operand("pattern", PatternKind(), "[[step, count], ...]: the affine pattern over dst's free axes"),
            Operand("offset", IntKind(), "constant term"),
            opt("channel_multiplier", IntKind(), 0, "multiplier of the partition index"),
        ),
        "fill a tile with an affine function of the indices",
        "dst[p, i...] = offset + channel_multiplier * p + sum_k step_k * i_k in 32-bit integers, wrapping modulo"
        " 2**32; p counts dst's partitions from 0, (i_k) runs over the pattern's counts row-major, whose product must"
        " equal dst's elements per partition (taken in dst's iteration order). Converted to dst's dtype: integers"
        " exactly, saturated to the range (bool: nonzero is 1); floats via the nearest fp32, then round to nearest"
        " even.",
        "150 + N GpSimd cycles",
    ),
    InstrSpec(
        "affine_select", 0x41, ("gpsimd",),
        (
            dst("SBUF tile", kind=SBUF_TILE),
            Operand("pattern", PatternKind(), "[[step, count], ...] of the affine value over the free axes"),
            Operand("offset", IntKind(), "constant term of the affine value"),
            Operand("channel_multiplier", IntKind(), "multiplier of the partition index"),
            src("on_true_tile", "SBUF tile selected where the predicate holds", SBUF_TILE),
            Operand("on_false_value", FloatKind(), "fp32 value where the predicate fails"),
            opt("cmp_op", CMP_OP, "equal", "comparison of the affine value with 0"),
        ),
        "select on an affine predicate of the indices (masks, triangles)",
        "v = offset + channel_multiplier * p + sum_k step_k * i_k, as in iota; dst = on_true_tile where cmp_op(v, 0)"
        " else on_false_value (cmp_op equal when not given, as in NKI). on_true_tile and dst have the same"
        " partitions and elements per partition; on_true_tile's bits"
        " are copied when the dtypes match, else converted through fp32 (NKI); on_false_value is narrowed to dst's"
        " dtype.",
        "150 + N GpSimd cycles",
    ),
    InstrSpec(
        "tensor_partition_reduce", 0x42, ("gpsimd",),
        (dst("[1, ...] SBUF tile", kind=SBUF_TILE), Operand("op", ALU, "add, maximum, bitwise_or or bitwise_and"),
         src("data", "SBUF input tile", SBUF_TILE)),
        "reduce across partitions",
        "out[0, i] = ((data[0, i] op data[1, i]) op data[2, i]) ... over partitions 0..P-1 in order, in fp32"
        " (bitvec ops on the 32-bit patterns of alu.to_bits); dst is one partition with data's elements per"
        " partition.",
        "max(MIN_II, N) GpSimd cycles per partition reduced",
    ),
    InstrSpec(
        "local_gather", 0x43, ("gpsimd",),
        (
            dst("SBUF tile", kind=SBUF_TILE),
            src("src_buffer", "SBUF source, partitions a multiple of 16", SBUF_TILE),
            src("index", "uint16 SBUF indices, flattened partition-first within each core's 16 partitions",
                SBUF_TILE),
            opt("num_elem_per_idx", IntKind(lo=1, hi=32), 1, "contiguous elements per index: 1, 2, 4, 8, 16 or 32"),
            opt("num_valid_indices", IntKind(lo=1, hi=4096, optional=True), None, "indices used per core (none: all"
                " of the core's 16 partitions of index)"),
        ),
        "gather within each GpSimd core's 16 partitions",
        "NKI's definition: src_buffer, index and dst cover the same partitions, whole 16-partition GpSimd cores."
        " Core c's indices, partition first: idx[j] = index[16c + j % 16, j // 16] (free axes flattened), the first"
        " V = num_valid_indices (none: all) of them. Each partition q of the core: dst[q, j*E + e] ="
        " src_buffer[q, idx[j] + e] for j < V, e < E = num_elem_per_idx, over the flattened free axes (every"
        " partition gathers from its own row with the core's indices). index is u16; dst has src_buffer's dtype"
        " (bits copied); idx[j] + E past src_buffer's elements per partition is an error.",
        "150 + num_valid_indices * num_elem_per_idx / C GpSimd cycles (C from the NKI reference)",
    ),
    InstrSpec(
        "gpsimd_call", 0x44, ("gpsimd",),
        (
            Operand("program", ProgramKind(), "the .gpsimd section to run"),
            Operand("out0", GPSIMD_ARG, "an output: HBM tensor or SBUF tile the program writes", role="out"),
            Operand("in0", GPSIMD_ARG, "an input: HBM tensor or SBUF tile the program reads", role="in"),
            Operand("out1", OPT_GPSIMD_ARG, "a second output", default=None, role="out",
                    nki="not in NKI (ncsim's: a custom C++ operator's tensors)"),
            Operand("in1", OPT_GPSIMD_ARG, "a second input", default=None, role="in",
                    nki="not in NKI (ncsim's: a custom C++ operator's tensors)"),
            Operand("in2", OPT_GPSIMD_ARG, "a third input", default=None, role="in",
                    nki="not in NKI (ncsim's: a custom C++ operator's tensors)"),
            Operand("in3", OPT_GPSIMD_ARG, "a fourth input", default=None, role="in",
                    nki="not in NKI (ncsim's: a custom C++ operator's tensors)"),
            opt("cores", IntKind(lo=1, hi=8), 8, "run the program on cores 0..cores-1 (1: a single-core"
                " operator, 8: a multicore one)", nki="not in NKI (ncsim's: a custom operator's core count)"),
        ),
        "run a GpSimd program on the cores (a custom C++ operator)",
        "cores 0..cores-1 each run `program` (a .gpsimd section, docs/gpsimd.md) from its first instruction to"
        " halt or its end, with no synchronisation between them; the program reads and writes the operands"
        " (out0, in0, out1, in1..in3) through block transfers and the element accessor, each by its flat element"
        " index in the operand's iteration order. An SBUF operand's element lies in a partition, and a core may"
        " touch only its own 16 ([16c, 16c + 16)). Two cores writing the same element, or one reading what"
        " another wrote, is a race between cores. Only the elements the program writes change.",
        "the slowest core's cycles by the cycle model of docs/gpsimd.md (one instruction per cycle in order,"
        " TCM loads 3 cycles, long ops, taken branches, block transfers)",
    ),
    # ------------------------------------------------------------------ DMA
    InstrSpec(
        "dma_copy", 0x50, ("sync", "scalar", "gpsimd", "vector", "tensor"),
        (
            Operand("dst", DMA_AP, "destination in HBM or SBUF", role="out"),
            src("src", "source in HBM or SBUF, the same number of elements", DMA_AP),
            opt("dst_rmw_op", ALU_OPTIONAL, None, "read-modify-write: add (the only one, NKI) adds src onto dst"
                " through fp32; none overwrites"),
            opt("oob_mode", OOB_MODE, "error", "NKI's handling of out-of-bounds dynamic addresses: ncsim's DMA"
                " addresses are static and checked at assembly, so it changes nothing"),
            opt("dge_mode", DGE_MODE, "unknown", "who generates the DMA descriptors: unknown, none or swdge (no"
                " effect on ncsim's values or time); hwdge is v3 and later (NKI), refused"),
            opt("queue", IntKind(lo=0, hi=15), 0, "DMA queue 0..15: the transfer is split over the DMA engines"
                " (8 partitions each for 128), and each engine runs it on its queue of this number, in order."
                " Not given, under .sync auto: the assembler's, one queue per issuing engine and direction",
                nki="not in NKI (ncsim's: the queue is otherwise the compiler's choice)"),
        ),
        "copy between HBM and SBUF on a DMA queue",
        "dst = src element by element in iteration order, converting the dtype through fp32 when they differ;"
        " with dst_rmw_op=add, dst = dst + src in fp32. Issued by `engine`: its waits stall that engine until met,"
        " then the transfer runs on DMA queue `queue` while the engine goes on. In HBM the outermost"
        " dimension plays the partition dimension's role, and a step of 0 repeats data (broadcast).",
        "~1300 ns latency + bytes / (17 B/ns per DMA engine x efficiency), 8 partitions per engine; the efficiency"
        " is the lower of its chunk size's and its transfer size's (per partition lane), and a piece on an idle"
        " DMA engine does its per-transfer work (the latter's time over the former's) during the latency;"
        " capped by HBM",
    ),
    # ------------------------------------------------------------------ semaphores
    InstrSpec(
        "sem_wait", 0x60, ALL_ENGINES,
        (Operand("cond", SemOneKind(ops=WAIT_OPS), "sN>=value or sN==value"),),
        "stall the engine until a semaphore condition holds",
        "the engine's queue does not advance until the condition holds.",
        "no engine cycles beyond the wait",
    ),
    InstrSpec(
        "sem_signal", 0x61, ALL_ENGINES,
        (Operand("update", SemOneKind(ops=SIGNAL_OPS), "sN+=value, sN-=value or sN=value"),),
        "update a semaphore when the engine reaches this point",
        "applies the update once every earlier instruction of the engine has completed.",
        "no engine cycles",
    ),
)

# Operands an instruction walks in lockstep, element for element: they need the same partitions and
# the same number of elements per partition (their shapes may differ). The assembler checks it
# (ncsim.asm.rules) and so does the machine (Context.rows); a constant where a tile may stand is skipped.
LOCKSTEP: dict[str, tuple[str, ...]] = {
    "activation": ("dst", "data"),
    "activation_reduce": ("dst", "data"),
    "tensor_tensor": ("dst", "data1", "data2"),
    "tensor_scalar": ("dst", "data"),
    "tensor_scalar_reduce": ("dst", "data"),
    "scalar_tensor_tensor": ("dst", "data", "operand1"),
    "tensor_tensor_scan": ("dst", "data0", "data1"),
    "tensor_copy": ("dst", "src"),
    "tensor_copy_predicated": ("dst", "src", "predicate"),
    "tensor_copy_dynamic_src": ("dst", "src"),
    "tensor_copy_dynamic_dst": ("dst", "src"),
    "reciprocal": ("dst", "data"),
    "nc_match_replace8": ("dst", "data"),
    "dropout": ("dst", "data"),
    "affine_select": ("dst", "on_true_tile"),
}

BY_MNEMONIC: dict[str, InstrSpec] = {row.mnemonic: row for row in TABLE}
BY_OPCODE: dict[int, InstrSpec] = {row.opcode: row for row in TABLE}


def alu_info(name: str) -> tuple[str, int, str, bool, str, tuple[str, ...]]:
    return next(o for o in ALU_OPS if o[0] == name)


# =========================================================================== GpSimd core instructions
# The model ISA of the GpSimd engine's eight cores (docs/gpsimd.md). The real cores' instruction set is
# not public, so this one is ncsim's own: small, regular and RISC-like, enough to write a custom
# operator. Its rows live only inside `.gpsimd NAME` sections (group "core"): the engines' streams refuse
# them, and `ncsim isa` lists them apart. Registers: r0..r31 (32 bits, int32 or fp32 bits), v0..v31
# (512 bits, seen as 16 x 32, 32 x 16 or 64 x 8 lanes by a lane type). Arithmetic follows docs/numerics.md:
# fp32 is one IEEE operation rounded to nearest even, every NaN made is 0x7FC00000; integers wrap. Costs are
# in GpSimd cycles by the in-order model of docs/gpsimd.md (config: gpsimd_* parameters).
SREG, VREG = RegKind("r"), RegKind("v")
VREG4 = RegKind("v", group=4)  # vld4's destinations: 4 consecutive vector registers
INT_B = RegOrImmKind(float_imm=False)
FLT_B = RegOrImmKind(float_imm=True)
TARGET = TargetKind()
ISSUE = "1 cycle"


def _core(mnemonic: str, opcode: int, operands: tuple[Operand, ...], summary: str, semantics: str,
          cost: str = ISSUE) -> InstrSpec:
    return InstrSpec(mnemonic, opcode, ("gpsimd",), operands, summary, semantics, cost, group="core")


def _r(name: str, doc: str) -> Operand:
    return Operand(name, SREG, doc)


def _v(name: str, doc: str) -> Operand:
    return Operand(name, VREG, doc)


_LANE = Operand("t", LANE, "lane type: f32, i32 (16 lanes), i16 (32), i8 (64)")
_INT_OPS = (
    ("add", "rd = ra + b, modulo 2**32"), ("sub", "rd = ra - b, modulo 2**32"), ("mul", "rd = ra * b, modulo 2**32"),
    ("and", "rd = ra & b"), ("or", "rd = ra | b"), ("xor", "rd = ra ^ b"),
    ("shl", "rd = ra << (b & 31)"), ("shr", "rd = ra >> (b & 31), logical"), ("sra", "rd = ra >> (b & 31), arithmetic"),
    ("min", "rd = min(ra, b), signed"), ("max", "rd = max(ra, b), signed"),
    ("slt", "rd = 1 if ra < b (signed) else 0"), ("seq", "rd = 1 if ra == b else 0"),
)
_FLT_OPS = (
    ("fadd", "rd = ra + b"), ("fsub", "rd = ra - b"), ("fmul", "rd = ra * b"),
    ("fdiv", "rd = ra / b (IEEE: x/0 is inf or nan)"),
    ("fmin", "rd = min(ra, b): NaN if either is NaN; min(-0, +0) = -0"),
    ("fmax", "rd = max(ra, b): NaN if either is NaN; max(-0, +0) = +0"),
    ("flt", "rd = 1 if ra < b else 0 (an integer; false with a NaN)"),
    ("feq", "rd = 1 if ra == b else 0 (an integer; -0 equals +0, NaN equals nothing)"),
)
_BRANCHES = (("beq", "ra == b"), ("bne", "ra != b"), ("blt", "ra < b (signed)"), ("bge", "ra >= b (signed)"))
_VEC_OPS = (
    ("vadd", "a + b"), ("vsub", "a - b"), ("vmul", "a * b"), ("vdiv", "a / b (f32 only; IEEE)"),
    ("vmin", "min(a, b) (f32: as fmin; integers signed)"), ("vmax", "max(a, b) (f32: as fmax; integers signed)"),
)
_TAKEN = "1 cycle; taken: + gpsimd_branch_taken_cycles"
_LONG = "1 cycle; the result is ready gpsimd_divide_cycles later"
_TCM_LOAD = "1 cycle; the result is ready gpsimd_tcm_access_cycles (3) later"

CORE_TABLE: tuple[InstrSpec, ...] = (
    # ------------------------------------------------------------------ scalar
    _core("li", 0x80, (_r("rd", "destination"), Operand("imm", IntKind(), "int32 constant")),
          "load an integer constant", "rd = imm (int32)."),
    _core("lif", 0x81, (_r("rd", "destination"), Operand("imm", FloatKind(), "fp32 constant")),
          "load an fp32 constant", "rd = the bits of the fp32 constant."),
    _core("mov", 0x82, (_r("rd", "destination"), _r("ra", "source")), "copy a register", "rd = ra (the bits)."),
    *(_core(m, 0x83 + i, (_r("rd", "destination"), _r("ra", "first operand"),
                          Operand("b", INT_B, "second operand: register or int32 constant")),
            f"integer {m}", f"{text}: int32 arithmetic on the registers' bits.")
      for i, (m, text) in enumerate(_INT_OPS)),
    *(_core(m, 0x90 + i, (_r("rd", "destination"), _r("ra", "first operand"),
                          Operand("b", FLT_B, "second operand: register or fp32 constant")),
            f"fp32 {m[1:]}", f"{text}: one fp32 operation, round to nearest even; a NaN made is 0x7FC00000.",
            _LONG if m == "fdiv" else ISSUE)
      for i, (m, text) in enumerate(_FLT_OPS)),
    _core("itof", 0x98, (_r("rd", "destination"), _r("ra", "int32")), "int32 to fp32",
          "rd = the fp32 nearest the int32 ra (ties to even)."),
    _core("ftoi", 0x99, (_r("rd", "destination"), _r("ra", "fp32")), "fp32 to int32",
          "rd = ra rounded half to even and saturated to int32; NaN gives 0 (docs/numerics.md)."),
    *(_core(m, 0x9A + i, (_r("ra", "first operand"), Operand("b", INT_B, "register or int32 constant"),
                          Operand("target", TARGET, "label to branch to")),
            f"branch if {cond}", f"go to target if {cond}, else on to the next instruction.", _TAKEN)
      for i, (m, cond) in enumerate(_BRANCHES)),
    _core("jmp", 0x9E, (Operand("target", TARGET, "label to go to"),), "branch always", "go to target.", _TAKEN),
    _core("loop", 0x9F, (_r("ra", "the counter"), Operand("target", TARGET, "label to branch to")),
          "count down and branch", "ra = ra - 1; go to target if ra != 0 (a loop of ra trips ends with ra = 0).",
          _TAKEN),
    _core("coreid", 0xA0, (_r("rd", "destination"),), "this core's number (get_cpu_id)",
          "rd = the core's number, 0..cores-1."),
    _core("ncores", 0xA1, (_r("rd", "destination"),), "the cores running the program (get_cpu_count)",
          "rd = the call's cores."),
    _core("halt", 0xA2, (), "end the program on this core", "the core stops; running past the last instruction"
          " stops it too."),
    _core("ld", 0xA3, (_r("rd", "destination"), _r("ra", "TCM byte address"), Operand("off", IntKind(), "byte offset")),
          "load 32 bits from TCM", "rd = the 4 bytes of TCM at ra + off (a multiple of 4, inside the TCM).",
          _TCM_LOAD),
    _core("st", 0xA4, (_r("rs", "value"), _r("ra", "TCM byte address"), Operand("off", IntKind(), "byte offset")),
          "store 32 bits to TCM", "the 4 bytes of TCM at ra + off (a multiple of 4) = rs."),
    _core("talloc", 0xA5, (_r("rd", "destination: the block's TCM address"),
                           Operand("b", INT_B, "bytes: register or constant")),
          "allocate TCM (tcm_malloc)", "rd = the address of b fresh bytes (rounded up to 64) of the core's TCM"
          " pool (gpsimd_tcm_pool_bytes, from address 0); more than the pool holds is an error."),
    # ------------------------------------------------------------------ vector
    _core("vld", 0xB0, (_v("vd", "destination"), _r("ra", "TCM byte address"), Operand("off", IntKind(), "byte offset")),
          "load a vector register from TCM", "vd = the 64 bytes of TCM at ra + off.", _TCM_LOAD),
    _core("vst", 0xB1, (_v("vs", "value"), _r("ra", "TCM byte address"), Operand("off", IntKind(), "byte offset")),
          "store a vector register to TCM", "the 64 bytes of TCM at ra + off = vs."),
    _core("vlds", 0xB2, (_LANE, _v("vd", "destination"), _r("ra", "TCM byte address of lane 0"),
                         Operand("b", INT_B, "stride in bytes: register or constant")),
          "strided load", "lane i of vd = the lane-sized element of TCM at ra + i * b.",
          "lanes cycles (one TCM element a cycle); the result is ready gpsimd_tcm_access_cycles after the last"),
    _core("vsts", 0xB3, (_LANE, _v("vs", "value"), _r("ra", "TCM byte address of lane 0"),
                         Operand("b", INT_B, "stride in bytes: register or constant")),
          "strided store", "the lane-sized element of TCM at ra + i * b = lane i of vs, for i in order.",
          "lanes cycles (one TCM element a cycle)"),
    _core("vld4", 0xC4, (_LANE, Operand("vd", VREG4, "the first of 4 destinations: vd..vd+3"),
                                      _r("ra", "TCM byte address"), Operand("off", IntKind(), "byte offset")),
          "load and de-interleave structures of 4 lanes (like ARM's LD4)",
          "with e = the 4n lane-sized elements of TCM at ra + off (n lanes of the type: 256 bytes), lane i of"
          " v(vd+k) = e[4i + k] for k = 0..3: 16 boxes of 4 f32 corners (x1 y1 x2 y2) become the registers of"
          " their x1, y1, x2 and y2.",
          "4 cycles (256 bytes over the 64-byte TCM port, one access a cycle); the 4 results are ready"
          " gpsimd_tcm_access_cycles (3) after the last"),
    *(_core(m, 0xB4 + i, (_LANE, _v("vd", "destination"), _v("va", "first operand"), _v("vb", "second operand")),
            f"lanewise {m[1:]}", f"lane i of vd = {text} of the lanes i of va and vb: f32 as one fp32 operation"
            " (docs/numerics.md), integers modulo 2**bits.", _LONG if m == "vdiv" else ISSUE)
      for i, (m, text) in enumerate(_VEC_OPS)),
    *(_core(m, 0xBA + i, (_v("vd", "destination"), _v("va", "first operand"), _v("vb", "second operand")),
            f"bitwise {m[1:]}", f"vd = va {sym} vb, bit by bit.")
      for i, (m, sym) in enumerate((("vand", "&"), ("vor", "|"), ("vxor", "^")))),
    _core("vcmp", 0xBD, (Operand("cmp", CMP, "eq, ne, lt, le, gt or ge"), _LANE, _v("vd", "destination"),
                         _v("va", "first operand"), _v("vb", "second operand")),
          "lanewise compare", "lane i of vd = all ones if cmp(a_i, b_i) else 0 (f32: IEEE, a NaN compares false"
          " except ne; integers signed)."),
    _core("vsel", 0xBE, (_v("vd", "destination"), _v("vm", "mask"), _v("va", "where the mask is 1"),
                         _v("vb", "where the mask is 0")),
          "bitwise select", "vd = (vm & va) | (~vm & vb), bit by bit (with vcmp's masks: lane by lane)."),
    _core("vcvt", 0xBF, (Operand("dt", LANE, "destination lane type"), Operand("st", LANE, "source lane type"),
                         _v("vd", "destination"), _v("va", "source")),
          "convert lanes", "lane i of vd = lane i of va converted, for i < min(lanes of dt, lanes of st); the other"
          " lanes of vd are 0. Integers to f32: nearest, ties to even; f32 to integers: half to even, saturated, NaN"
          " to 0; integer to integer: saturated."),
    _core("vbcast", 0xC0, (_LANE, _v("vd", "destination"), _r("ra", "value")),
          "broadcast a scalar register", "every lane of vd = ra (its low lane-size bits)."),
    _core("vlane", 0xC1, (_LANE, _v("vd", "destination"), _v("va", "source"),
                          Operand("lane", IntKind(lo=0, hi=63), "lane index")),
          "broadcast one lane", "every lane of vd = lane `lane` of va (an error past va's lanes)."),
    _core("vext", 0xC2, (_LANE, _r("rd", "destination"), _v("va", "source"),
                         Operand("lane", IntKind(lo=0, hi=63), "lane index")),
          "extract one lane", "rd = lane `lane` of va: f32 and i32 its bits, i16 and i8 sign-extended."),
    _core("vunzip", 0xC3, (_LANE, _v("vd", "destination"), _v("va", "low half"), _v("vb", "high half"),
                           Operand("part", IntKind(lo=0, hi=1), "0: even lanes, 1: odd lanes")),
          "de-interleave two registers", "with c = the lanes of va then the lanes of vb (2n lanes), lane i of vd"
          " = c[2i + part]: vunzip twice splits boxes of 4 corners into 4 registers."),
    # ------------------------------------------------------------------ the operands of the call
    _core("tcm_load", 0xD0, (_r("rt", "TCM byte address"), Operand("arg", ARG, "the call's operand"),
                             _r("ri", "first element (flat index)"),
                             Operand("count", INT_B, "elements: register or constant")),
          "block transfer operand -> TCM (tensor_to_tcm)", "TCM bytes from rt = elements ri..ri+count-1 of the"
          " operand, their bytes as stored. From HBM through the DMA; from SBUF over the core's port, only its own"
          " partitions.",
          "HBM: gpsimd_tcm_block_cycles + DMA latency + bytes at dma_engine_bandwidth; SBUF:"
          " gpsimd_sbuf_setup_cycles + bytes / 64"),
    _core("tcm_store", 0xD1, (Operand("arg", ARG, "the call's operand"), _r("ri", "first element (flat index)"),
                              _r("rt", "TCM byte address"), Operand("count", INT_B, "elements: register or constant")),
          "block transfer TCM -> operand (tcm_to_tensor)", "elements ri..ri+count-1 of the operand = the TCM bytes"
          " from rt.",
          "HBM: gpsimd_tcm_block_cycles + DMA latency + bytes at dma_engine_bandwidth; SBUF:"
          " gpsimd_sbuf_setup_cycles + bytes / 64"),
    _core("eld", 0xD2, (_r("rd", "destination"), Operand("arg", ARG, "the call's operand"),
                        _r("ri", "element (flat index)")),
          "read one element (the element accessor)", "rd = the bits of element ri of the operand (a 32-bit dtype).",
          "gpsimd_element_access_cycles (a round trip per element)"),
    _core("est", 0xD3, (Operand("arg", ARG, "the call's operand"), _r("ri", "element (flat index)"),
                        _r("rs", "value")),
          "write one element (the element accessor)", "element ri of the operand (a 32-bit dtype) = the bits of rs.",
          "gpsimd_element_access_cycles (a round trip per element)"),
)
CORE_BY_MNEMONIC: dict[str, InstrSpec] = {row.mnemonic: row for row in CORE_TABLE}
CORE_BY_OPCODE: dict[int, InstrSpec] = {row.opcode: row for row in CORE_TABLE}
