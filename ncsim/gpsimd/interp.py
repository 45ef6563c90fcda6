"""The GpSimd core interpreter (numba) and its cycle model; docs/gpsimd.md states both.

`run_cores(program, cores, args, config)` runs a program on cores 0..cores-1, one after the other
(they share nothing but the call's operands, and writing an element another core wrote, or reading
it, is a race between cores, so the order cannot matter for a program without races). Each core has
32 scalar registers (int32 storage; fp32 instructions see their bits), 32 vector registers of
gpsimd_simd_bits, and gpsimd_tcm_bytes of TCM, all zero at the start.

The call's operands reach the interpreter as one byte buffer: operand j's elements, in its iteration
order, from byte `base[j]`, `count[j]` of `itemsize[j]` bytes; per element the core that last wrote it
(`owner`, 0: none) and where (`owner_pc`), and for the writable operands the first core that read it
(`reader`, 0: none; cores run in order, so that is the lowest) and where (`reader_pc`).

Cycle model (in-order, one instruction issued a cycle): an instruction issues when its source registers
are ready; it occupies the core 1 cycle (strided accesses: one cycle a lane; vld4: 4 cycles, one 64-byte
TCM access each; block transfers and the element accessor: their whole cost, the core waits); its result is
ready `latency` cycles after its last cycle (1; TCM loads gpsimd_tcm_access_cycles; fdiv and vdiv
gpsimd_divide_cycles); a taken branch adds
gpsimd_branch_taken_cycles. A core's time is the cycle after its last instruction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from ncsim import isa
from ncsim.config import Config
from ncsim.gpsimd.code import CoreProgram
from ncsim.gpsimd.fields import ARGS, LANE_BYTES, LANE_TYPES, RegKind, RegOrImmKind, width

OP = {mnemonic: spec.opcode for mnemonic, spec in isa.CORE_BY_MNEMONIC.items()}
NAN_BITS = 0x7FC00000
# the opcodes as module constants (numba compiles them in)
O_ADD = OP["add"]
O_AND = OP["and"]
O_BEQ = OP["beq"]
O_BGE = OP["bge"]
O_BLT = OP["blt"]
O_BNE = OP["bne"]
O_COREID = OP["coreid"]
O_ELD = OP["eld"]
O_EST = OP["est"]
O_FADD = OP["fadd"]
O_FEQ = OP["feq"]
O_FLT = OP["flt"]
O_FTOI = OP["ftoi"]
O_HALT = OP["halt"]
O_ITOF = OP["itof"]
O_JMP = OP["jmp"]
O_LD = OP["ld"]
O_LI = OP["li"]
O_LIF = OP["lif"]
O_LOOP = OP["loop"]
O_MAX = OP["max"]
O_MIN = OP["min"]
O_MOV = OP["mov"]
O_MUL = OP["mul"]
O_NCORES = OP["ncores"]
O_OR = OP["or"]
O_SEQ = OP["seq"]
O_SHL = OP["shl"]
O_SHR = OP["shr"]
O_SLT = OP["slt"]
O_SRA = OP["sra"]
O_ST = OP["st"]
O_SUB = OP["sub"]
O_TALLOC = OP["talloc"]
O_TCM_LOAD = OP["tcm_load"]
O_TCM_STORE = OP["tcm_store"]
O_VADD = OP["vadd"]
O_VAND = OP["vand"]
O_VBCAST = OP["vbcast"]
O_VCMP = OP["vcmp"]
O_VCVT = OP["vcvt"]
O_VEXT = OP["vext"]
O_VLANE = OP["vlane"]
O_VLD = OP["vld"]
O_VLD4 = OP["vld4"]
O_VLDS = OP["vlds"]
O_VMAX = OP["vmax"]
O_VOR = OP["vor"]
O_VSEL = OP["vsel"]
O_VST = OP["vst"]
O_VSTS = OP["vsts"]
O_VUNZIP = OP["vunzip"]
O_VXOR = OP["vxor"]
O_XOR = OP["xor"]
LANE_SIZE = np.array([LANE_BYTES[t] for t in LANE_TYPES], np.int64)  # by lane type code

# Error codes of the interpreter (err[0]); err[1] is the pc, err[2..] say more (see `message`).
(E_NONE, E_TCM, E_POOL, E_INDEX, E_PARTITION, E_BRANCH, E_STEPS, E_RACE_WRITE, E_RACE_READ, E_ABSENT, E_INPUT,
 E_WIDTH, E_LANE, E_DTYPE, E_OPCODE, E_RACE_AFTER_READ) = range(16)

# Per-opcode register tables, from the rows' operand names: which columns are source registers
# (kind 1 scalar, 2 vector, 3 a register-or-immediate whose flag is that column), the destination
# (column, kind: 1 scalar, 2 vector, 3 vld4's 4 vector registers) and the result's latency class (0: 1 cycle, 1: TCM load, 2: divide).
_SOURCES = ("ra", "rs", "rt", "ri", "b", "va", "vb", "vs", "vm")
_DESTS = ("rd", "vd")


def _tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    src_col = np.full((256, 4), -1, np.int64)
    src_kind = np.zeros((256, 4), np.int64)
    dst_col = np.full(256, -1, np.int64)
    dst_kind = np.zeros(256, np.int64)
    lat = np.zeros(256, np.int64)
    for row in isa.CORE_TABLE:
        col, j = 1, 0
        for o in row.operands:
            w = width(o.kind)
            if o.name in _SOURCES and isinstance(o.kind, (RegKind, RegOrImmKind)):
                src_col[row.opcode, j] = col
                src_kind[row.opcode, j] = 3 if w == 2 else (1 if o.kind.prefix == "r" else 2)
                j += 1
            if o.name in _DESTS:
                dst_col[row.opcode] = col
                dst_kind[row.opcode] = 1 if o.kind.prefix == "r" else 2 if o.kind.group == 1 else 3  # 3: v..v+3
            col += w
        lat[row.opcode] = 1 if row.mnemonic in ("ld", "vld", "vld4", "vlds") else 2 if row.mnemonic in ("fdiv", "vdiv") else 0
    return src_col, src_kind, dst_col, dst_kind, lat


SRC_COL, SRC_KIND, DST_COL, DST_KIND, LAT = _tables()


@dataclass
class Operands:
    """The call's operands as the interpreter sees them (module docstring)."""

    buf: np.ndarray  # uint8
    base: np.ndarray  # int64 [6]: byte offset of each operand's first element
    count: np.ndarray  # int64 [6]: elements (0: absent)
    itemsize: np.ndarray  # int64 [6]
    present: np.ndarray  # int64 [6]: 1 if given
    writable: np.ndarray  # int64 [6]: 1 for out0, out1
    hbm: np.ndarray  # int64 [6]: 1 in HBM, 0 in SBUF
    part0: np.ndarray  # int64 [6]: first partition (SBUF)
    per_row: np.ndarray  # int64 [6]: elements per partition (SBUF)
    elem0: np.ndarray  # int64 [6]: first element's index in owner / owner_pc
    owner: np.ndarray  # int32 [elements]
    owner_pc: np.ndarray  # int32 [elements]
    reader: np.ndarray  # int32 [elements]: the first core that read it, + 1 (writable operands)
    reader_pc: np.ndarray  # int32 [elements]

    @classmethod
    def make(cls, specs: list[tuple[np.ndarray, bool, bool, int, int] | None]) -> Operands:
        """`specs[j]`: (raw values in iteration order, writable, in HBM, first partition, elements per
        partition) of operand j (ARGS order), or None if absent."""
        n = len(ARGS)
        base, count, isz, present, wr, hbm, part0, per_row, elem0 = (np.zeros(n, np.int64) for _ in range(9))
        chunks, at, elems = [], 0, 0
        for j, spec in enumerate(specs):
            if spec is None:
                continue
            raw, writable, in_hbm, p0, f = spec
            flat = np.ascontiguousarray(raw).reshape(-1)
            base[j], count[j], isz[j], present[j] = at, flat.size, flat.dtype.itemsize, 1
            wr[j], hbm[j], part0[j], per_row[j], elem0[j] = int(writable), int(in_hbm), p0, max(f, 1), elems
            chunks.append(flat.view(np.uint8))
            at += flat.nbytes
            elems += flat.size
        buf = np.concatenate(chunks) if chunks else np.zeros(0, np.uint8)
        return cls(buf, base, count, isz, present, wr, hbm, part0, per_row, elem0, *(np.zeros(elems, np.int32)
                                                                                   for _ in range(4)))

    def values(self, j: int, dtype: np.dtype) -> np.ndarray:
        lo = int(self.base[j])
        return self.buf[lo:lo + int(self.count[j] * self.itemsize[j])].view(dtype)


@dataclass
class CoreRun:
    cycles: np.ndarray  # int64 [cores]
    # int64 [cores, 4]: the TCM accessor's blocks from and to HBM (they go through the DMA model): loads,
    # their bytes, stores, their bytes
    hbm_blocks: np.ndarray


def params(config: Config) -> np.ndarray:
    """The cycle model's constants, in the order `_run` reads them."""
    hbm_bytes_per_cycle = config.dma_engine_bandwidth / config.gpsimd_clock_hz
    dma_cycles = math.ceil(config.dma_latency_ns * config.gpsimd_clock_hz / 1e9)
    return np.array([config.gpsimd_tcm_access_cycles, config.gpsimd_divide_cycles, config.gpsimd_branch_taken_cycles,
                     config.gpsimd_sbuf_setup_cycles, config.gpsimd_element_access_cycles,
                     config.gpsimd_tcm_block_cycles + dma_cycles, int(hbm_bytes_per_cycle * 1024),
                     config.gpsimd_tcm_bytes, config.gpsimd_tcm_pool_bytes, config.gpsimd_step_limit,
                     config.pmax // config.gpsimd_cores, config.gpsimd_simd_bits // 8], np.int64)


def run_cores(program: CoreProgram, cores: int, ops: Operands, config: Config) -> CoreRun:
    """Run `program` on cores 0..cores-1 over `ops`; raises CoreError on the first fault."""
    code = program.matrix
    p = params(config)
    vbytes = int(p[11])
    cycles = np.zeros(cores, np.int64)
    err = np.zeros(8, np.int64)
    blocks = np.zeros((cores, 4), np.int64)
    for c in range(cores):
        sregs = np.zeros(32, np.int32)
        vregs = np.zeros((32, vbytes), np.uint8)
        scratch = np.zeros(2, np.int32)
        tcm = np.zeros(config.gpsimd_tcm_bytes, np.uint8)
        cycles[c], _ = _run(code, c, cores, p, sregs, sregs.view(np.float32), scratch, scratch.view(np.float32), vregs, vregs.view(np.float32),
                                   vregs.view(np.int32), vregs.view(np.int16), vregs.view(np.int8), tcm, ops.buf,
                                   ops.base, ops.count, ops.itemsize, ops.present, ops.writable, ops.hbm, ops.part0,
                                   ops.per_row, ops.elem0, ops.owner, ops.owner_pc, ops.reader, ops.reader_pc,
                                   SRC_COL, SRC_KIND, DST_COL,
                                   DST_KIND, LAT, LANE_SIZE, err, blocks[c])
        if err[0] != E_NONE:
            raise CoreError(message(program, c, err), program.loc(int(err[1])))
    return CoreRun(cycles, blocks)


class CoreError(Exception):
    def __init__(self, message: str, loc):
        super().__init__(message)
        self.message = message
        self.loc = loc


def message(program: CoreProgram, core: int, err: np.ndarray) -> str:
    code, pc, a, b, c, d = (int(x) for x in err[:6])
    where = f"GpSimd core {core}, {program.where(pc)}"
    if code == E_TCM:
        return f"{where}: TCM bytes {a}..{a + b} are outside the core's {c} bytes of TCM"
    if code == E_POOL:
        return f"{where}: talloc of {a} bytes: the TCM pool (gpsimd_tcm_pool_bytes = {c}) has {c - b} bytes left"
    if code == E_INDEX:
        return f"{where}: elements {b}..{b + c} of {ARGS[a]}, which has {d} elements (an offset outside the tensor)"
    if code == E_PARTITION:
        return (f"{where}: element {d} of {ARGS[a]} lies in SBUF partition {b}, but core {core} reaches only"
                f" partitions {core * c}..{core * c + c - 1}")
    if code == E_BRANCH:
        return f"{where}: branch to {a}, outside the program (instructions 0..{len(program) - 1}, or {len(program)}: its end)"
    if code == E_STEPS:
        return (f"{where}: the core ran {a} instructions without ending (gpsimd_step_limit): a loop that never"
                " ends?")
    if code in (E_RACE_WRITE, E_RACE_READ):
        other = program.where(d)
        verb = "writes" if code == E_RACE_WRITE else "reads"
        return (f"race between GpSimd cores: core {core} {verb} element {b} of {ARGS[a]} at {program.where(pc)},"
                f" which core {c - 1} wrote at {other}; cores run with no synchronisation between them")
    if code == E_RACE_AFTER_READ:
        return (f"race between GpSimd cores: core {core} writes element {b} of {ARGS[a]} at {program.where(pc)},"
                f" which core {c - 1} read at {program.where(d)}; cores run with no synchronisation between them,"
                f" so core {c - 1} may read it before or after the write")
    if code == E_ABSENT:
        return f"{where}: the call gives no operand {ARGS[a]}"
    if code == E_INPUT:
        return f"{where}: {ARGS[a]} is an input of the call: a program writes only out0 and out1"
    if code == E_WIDTH:
        return f"{where}: {ARGS[a]} has {b}-byte elements; the element accessor moves 32-bit elements"
    if code == E_LANE:
        return f"{where}: lane {a} is past the {b} lanes of the lane type"
    if code == E_DTYPE:
        return f"{where}: vdiv divides f32 lanes only"
    return f"{where}: opcode 0x{a:02x} is no GpSimd core instruction"


# --------------------------------------------------------------------------- numba helpers

@numba.njit(inline="always")
def _f(x):
    return np.float32(x)


@numba.njit(inline="always")
def _canon_s(sf, si, rd, r):
    sf[rd] = r
    if np.isnan(r):
        si[rd] = NAN_BITS


@numba.njit(inline="always")
def _fop(op, x, y):
    """One fp32 operation of the scalar and vector float instructions (0 add, 1 sub, 2 mul, 3 div, 4 min, 5 max)."""
    if op == 0:
        return _f(x + y)
    if op == 1:
        return _f(x - y)
    if op == 2:
        return _f(x * y)
    if op == 3:
        return _f(x / y) if y != 0 else (_f(np.nan) if x == 0 or np.isnan(x) else
                                         _f(np.inf) if (x > 0) == (np.copysign(1.0, y) > 0) else _f(-np.inf))
    if np.isnan(x) or np.isnan(y):
        return _f(np.nan)
    if op == 4:
        return min(y, x)
    return max(y, x)


@numba.njit(inline="always")
def _wrap(x, bits):
    m = np.int64(1) << bits
    h = np.int64(1) << (bits - 1)
    return ((x + h) & (m - 1)) - h


@numba.njit(inline="always")
def _rint_sat(x, lo, hi):
    if np.isnan(x):
        return np.int64(0)
    r = np.float64(np.rint(np.float64(x)))
    if r < lo:
        return np.int64(lo)
    if r > hi:
        return np.int64(hi)
    return np.int64(r)


@numba.njit(inline="always")
def _get_int(t, vi32, vi16, vi8, r, i):
    if t == 1 or t == 0:
        return np.int64(vi32[r, i])
    if t == 2:
        return np.int64(vi16[r, i])
    return np.int64(vi8[r, i])


@numba.njit(inline="always")
def _set_int(t, vi32, vi16, vi8, r, i, x):
    if t == 1 or t == 0:
        vi32[r, i] = np.int32(_wrap(x, 32))
    elif t == 2:
        vi16[r, i] = np.int16(_wrap(x, 16))
    else:
        vi8[r, i] = np.int8(_wrap(x, 8))


@numba.njit(cache=True)
def _run(code, core, ncores, p, si, sf, scr_i, scr_f, vr, vf, vi32, vi16, vi8, tcm, buf, base, count, isz, present, writable, hbm,
         part0, per_row, elem0, owner, owner_pc, reader, reader_pc, src_col, src_kind, dst_col, dst_kind, lat_class,
         lane_size, err, hbm_io):
    tcm_lat, div_lat, taken, sbuf_setup, elem_cycles, block_fixed, hbm_bpc_k, tcm_bytes, pool_bytes, limit, ppc, vbytes = (
        p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11])
    n = code.shape[0] - 1
    sready = np.zeros(32, np.int64)
    vready = np.zeros(32, np.int64)
    tmp = np.zeros(2 * vbytes, np.uint8)
    pool = np.int64(0)
    t = np.int64(0)
    pc = np.int64(0)
    steps = np.int64(0)
    while True:
        row = code[pc]
        op = row[0]
        if op == O_HALT:
            break
        steps += 1
        if steps > limit:
            err[0], err[1], err[2] = E_STEPS, pc, limit
            return t, steps
        # ---- issue: wait for the source registers
        issue = t
        for j in range(4):
            col = src_col[op, j]
            k = src_kind[op, j]
            if col < 0:
                break
            if k == 1:
                issue = max(issue, sready[row[col]])
            elif k == 2:
                issue = max(issue, vready[row[col]])
            elif k == 3 and row[col] == 0:
                issue = max(issue, sready[row[col + 1]])
        busy = np.int64(1)
        nxt = pc + 1
        c1, c2, c3, c4, c5 = row[1], row[2], row[3], row[4], row[5]
        # ---- scalar
        if op == O_LI or op == O_LIF:
            si[c1] = np.int32(_wrap(c2, 32))
        elif op == O_MOV:
            si[c1] = si[c2]
        elif O_ADD <= op <= O_SEQ:
            a = np.int64(si[c2])
            b = np.int64(si[c4]) if c3 == 0 else _wrap(c4, 32)
            if op == O_ADD:
                r = a + b
            elif op == O_SUB:
                r = a - b
            elif op == O_MUL:
                r = _wrap(a * b, 32)
            elif op == O_AND:
                r = a & b
            elif op == O_OR:
                r = a | b
            elif op == O_XOR:
                r = a ^ b
            elif op == O_SHL:
                r = a << (b & 31)
            elif op == O_SHR:
                r = (a & 0xFFFFFFFF) >> (b & 31)
            elif op == O_SRA:
                r = a >> (b & 31)
            elif op == O_MIN:
                r = min(a, b)
            elif op == O_MAX:
                r = max(a, b)
            elif op == O_SLT:
                r = np.int64(1) if a < b else np.int64(0)
            else:
                r = np.int64(1) if a == b else np.int64(0)
            si[c1] = np.int32(_wrap(r, 32))
        elif O_FADD <= op <= O_FEQ:
            scr_i[0] = si[c2]
            scr_i[1] = si[c4] if c3 == 0 else np.int32(_wrap(c4, 32))  # a register's bits, or the immediate's
            x = scr_f[0]
            y = scr_f[1]
            if op == O_FLT:
                si[c1] = 1 if x < y else 0
            elif op == O_FEQ:
                si[c1] = 1 if x == y else 0
            else:
                fo = op - O_FADD
                if fo >= 4 and x == y:  # min(-0, +0) = -0, max(-0, +0) = +0: by the bits
                    si[c1] = (scr_i[0] | scr_i[1]) if fo == 4 else (scr_i[0] & scr_i[1])
                else:
                    _canon_s(sf, si, c1, _fop(fo, x, y))
        elif op == O_ITOF:
            sf[c1] = np.float32(si[c2])
        elif op == O_FTOI:
            si[c1] = np.int32(_rint_sat(sf[c2], -2147483648.0, 2147483647.0))
        elif O_BEQ <= op <= O_BGE:
            a = np.int64(si[c1])
            b = np.int64(si[c3]) if c2 == 0 else _wrap(c3, 32)
            go = (a == b) if op == O_BEQ else (a != b) if op == O_BNE else (a < b) if op == O_BLT else (a >= b)
            if go:
                nxt = c4
                busy += taken
        elif op == O_JMP:
            nxt = c1
            busy += taken
        elif op == O_LOOP:
            si[c1] = np.int32(_wrap(np.int64(si[c1]) - 1, 32))
            if si[c1] != 0:
                nxt = c2
                busy += taken
        elif op == O_COREID:
            si[c1] = core
        elif op == O_NCORES:
            si[c1] = ncores
        elif op == O_LD or op == O_ST:
            addr = np.int64(si[c2]) + _wrap(c3, 32)
            if addr < 0 or addr + 4 > tcm_bytes:
                err[0], err[1], err[2], err[3], err[4] = E_TCM, pc, addr, 4, tcm_bytes
                return t, steps
            if op == O_LD:
                si[c1] = np.int32(_wrap(np.int64(tcm[addr]) | (np.int64(tcm[addr + 1]) << 8) |
                                        (np.int64(tcm[addr + 2]) << 16) | (np.int64(tcm[addr + 3]) << 24), 32))
            else:
                v = np.int64(si[c1]) & 0xFFFFFFFF
                for q in range(4):
                    tcm[addr + q] = np.uint8((v >> (8 * q)) & 0xFF)
        elif op == O_TALLOC:
            size = np.int64(si[c3]) if c2 == 0 else c3
            size = (size + 63) // 64 * 64
            if size < 0 or pool + size > pool_bytes:
                err[0], err[1], err[2], err[3], err[4] = E_POOL, pc, size, pool, pool_bytes
                return t, steps
            si[c1] = np.int32(pool)
            pool += size
        # ---- vector
        elif op == O_VLD or op == O_VST:
            addr = np.int64(si[c2]) + _wrap(c3, 32)
            if addr < 0 or addr + vbytes > tcm_bytes:
                err[0], err[1], err[2], err[3], err[4] = E_TCM, pc, addr, vbytes, tcm_bytes
                return t, steps
            for q in range(vbytes):
                if op == O_VLD:
                    vr[c1, q] = tcm[addr + q]
                else:
                    tcm[addr + q] = vr[c1, q]
        elif op == O_VLD4:
            s = lane_size[c1]
            addr = np.int64(si[c3]) + _wrap(c4, 32)
            if addr < 0 or addr + 4 * vbytes > tcm_bytes:
                err[0], err[1], err[2], err[3], err[4] = E_TCM, pc, addr, 4 * vbytes, tcm_bytes
                return t, steps
            for i in range(vbytes // s):
                for k in range(4):
                    for q in range(s):
                        vr[c2 + k, i * s + q] = tcm[addr + (4 * i + k) * s + q]
            busy = 4  # 4 x 64 bytes over the 512-bit TCM port
        elif op == O_VLDS or op == O_VSTS:
            s = lane_size[c1]
            lanes = vbytes // s
            stride = np.int64(si[c4]) if c3 == 0 else _wrap(c4, 32)
            a0 = np.int64(si[c3])
            for i in range(lanes):
                addr = a0 + i * stride
                if addr < 0 or addr + s > tcm_bytes:
                    err[0], err[1], err[2], err[3], err[4] = E_TCM, pc, addr, s, tcm_bytes
                    return t, steps
                for q in range(s):
                    if op == O_VLDS:
                        vr[c2, i * s + q] = tcm[addr + q]
                    else:
                        tcm[addr + q] = vr[c2, i * s + q]
            busy = lanes
        elif O_VADD <= op <= O_VMAX:
            tt = c1
            lanes = vbytes // lane_size[tt]
            vo = op - O_VADD
            if tt == 0:
                for i in range(lanes):
                    x = vf[c3, i]
                    y = vf[c4, i]
                    if vo >= 4 and x == y:
                        bx = np.int64(vi32[c3, i])
                        by = np.int64(vi32[c4, i])
                        vi32[c2, i] = np.int32(_wrap((bx | by) if vo == 4 else (bx & by), 32))
                    else:
                        r = _fop(vo, x, y)
                        vf[c2, i] = r
                        if np.isnan(r):
                            vi32[c2, i] = NAN_BITS
            else:
                if vo == 3:
                    err[0], err[1] = E_DTYPE, pc
                    return t, steps
                for i in range(lanes):
                    a = _get_int(tt, vi32, vi16, vi8, c3, i)
                    b = _get_int(tt, vi32, vi16, vi8, c4, i)
                    r = a + b if vo == 0 else a - b if vo == 1 else a * b if vo == 2 else min(a, b) if vo == 4 else max(a, b)
                    _set_int(tt, vi32, vi16, vi8, c2, i, r)
        elif O_VAND <= op <= O_VXOR:
            for q in range(vbytes):
                x = vr[c2, q]
                y = vr[c3, q]
                vr[c1, q] = (x & y) if op == O_VAND else (x | y) if op == O_VOR else (x ^ y)
        elif op == O_VCMP:
            tt = c2
            lanes = vbytes // lane_size[tt]
            for i in range(lanes):
                if tt == 0:
                    x = np.float64(vf[c4, i])
                    y = np.float64(vf[c5, i])
                else:
                    x = np.float64(_get_int(tt, vi32, vi16, vi8, c4, i))
                    y = np.float64(_get_int(tt, vi32, vi16, vi8, c5, i))
                ok = (x == y) if c1 == 0 else (x != y) if c1 == 1 else (x < y) if c1 == 2 else (x <= y) if c1 == 3 \
                    else (x > y) if c1 == 4 else (x >= y)
                _set_int(tt, vi32, vi16, vi8, c3, i, -1 if ok else 0)
        elif op == O_VSEL:
            for q in range(vbytes):
                m = vr[c2, q]
                vr[c1, q] = (m & vr[c3, q]) | (~m & vr[c4, q])
        elif op == O_VCVT:
            dt, st = c1, c2
            nd = vbytes // lane_size[dt]
            ns = vbytes // lane_size[st]
            k = min(nd, ns)
            vals = np.zeros(k, np.float64)  # every source lane first: vd may be va
            ivals = np.zeros(k, np.int64)
            for i in range(k):
                if st == 0:
                    vals[i] = vf[c4, i]
                ivals[i] = _get_int(st, vi32, vi16, vi8, c4, i)
            for q in range(vbytes):
                vr[c3, q] = 0
            for i in range(k):
                if dt == 0 and st == 0:
                    vi32[c3, i] = np.int32(ivals[i])  # f32 to f32: the bits
                elif dt == 0:
                    vf[c3, i] = np.float32(ivals[i])
                else:
                    bits = 32 if dt == 1 else 16 if dt == 2 else 8
                    lo = -(np.int64(1) << (bits - 1))
                    hi = (np.int64(1) << (bits - 1)) - 1
                    if st == 0:
                        x = _rint_sat(vals[i], np.float64(lo), np.float64(hi))
                    else:
                        x = min(max(ivals[i], lo), hi)
                    _set_int(dt, vi32, vi16, vi8, c3, i, x)
        elif op == O_VBCAST:
            s = lane_size[c1]
            v = np.int64(si[c3]) & 0xFFFFFFFF
            for i in range(vbytes // s):
                for q in range(s):
                    vr[c2, i * s + q] = np.uint8((v >> (8 * q)) & 0xFF)
        elif op == O_VLANE or op == O_VEXT:
            s = lane_size[c1]
            if c4 >= vbytes // s:
                err[0], err[1], err[2], err[3] = E_LANE, pc, c4, vbytes // s
                return t, steps
            if op == O_VLANE:
                for q in range(s):
                    tmp[q] = vr[c3, c4 * s + q]
                for i in range(vbytes // s):
                    for q in range(s):
                        vr[c2, i * s + q] = tmp[q]
            else:
                si[c2] = np.int32(_get_int(c1, vi32, vi16, vi8, c3, c4))
        elif op == O_VUNZIP:
            s = lane_size[c1]
            lanes = vbytes // s
            for q in range(vbytes):
                tmp[q] = vr[c3, q]
                tmp[vbytes + q] = vr[c4, q]
            for i in range(lanes):
                j = 2 * i + c5
                for q in range(s):
                    vr[c2, i * s + q] = tmp[j * s + q]
        # ---- the call's operands
        elif op == O_TCM_LOAD or op == O_TCM_STORE or op == O_ELD or op == O_EST:
            if op == O_TCM_LOAD:
                arg, first, addr, cnt = c2, np.int64(si[c3]), np.int64(si[c1]), (np.int64(si[c5]) if c4 == 0 else c5)
            elif op == O_TCM_STORE:
                arg, first, addr, cnt = c1, np.int64(si[c2]), np.int64(si[c3]), (np.int64(si[c5]) if c4 == 0 else c5)
            elif op == O_ELD:
                arg, first, addr, cnt = c2, np.int64(si[c3]), np.int64(0), np.int64(1)
            else:
                arg, first, addr, cnt = c1, np.int64(si[c2]), np.int64(0), np.int64(1)
            write = op == O_TCM_STORE or op == O_EST
            if present[arg] == 0:
                err[0], err[1], err[2] = E_ABSENT, pc, arg
                return t, steps
            if write and writable[arg] == 0:
                err[0], err[1], err[2] = E_INPUT, pc, arg
                return t, steps
            sz = isz[arg]
            if (op == O_ELD or op == O_EST) and sz != 4:
                err[0], err[1], err[2], err[3] = E_WIDTH, pc, arg, sz
                return t, steps
            if cnt < 0 or first < 0 or first + cnt > count[arg]:
                err[0], err[1], err[2], err[3], err[4], err[5] = E_INDEX, pc, arg, first, cnt, count[arg]
                return t, steps
            nbytes = cnt * sz
            if (op == O_TCM_LOAD or op == O_TCM_STORE) and (addr < 0 or addr + nbytes > tcm_bytes):
                err[0], err[1], err[2], err[3], err[4] = E_TCM, pc, addr, nbytes, tcm_bytes
                return t, steps
            if hbm[arg] == 0 and cnt > 0:
                for e in (first, first + cnt - 1):
                    part = part0[arg] + e // per_row[arg]
                    if part < core * ppc or part >= (core + 1) * ppc:
                        err[0], err[1], err[2], err[3], err[4], err[5] = E_PARTITION, pc, arg, part, ppc, e
                        return t, steps
            for e in range(first, first + cnt):
                g = elem0[arg] + e
                o = owner[g]
                if o != 0 and o != core + 1:
                    err[0], err[1], err[2], err[3], err[4], err[5] = (E_RACE_WRITE if write else E_RACE_READ), pc, arg, \
                        e, o, owner_pc[g]
                    return t, steps
                if write:
                    first_reader = reader[g]
                    if first_reader != 0 and first_reader != core + 1:
                        err[0], err[1], err[2], err[3], err[4], err[5] = (E_RACE_AFTER_READ, pc, arg, e, first_reader,
                                                                          reader_pc[g])
                        return t, steps
                    owner[g] = core + 1
                    owner_pc[g] = pc
                elif writable[arg] == 1 and reader[g] == 0:
                    reader[g] = core + 1
                    reader_pc[g] = pc
            b0 = base[arg] + first * sz
            if op == O_TCM_LOAD:
                for q in range(nbytes):
                    tcm[addr + q] = buf[b0 + q]
            elif op == O_TCM_STORE:
                for q in range(nbytes):
                    buf[b0 + q] = tcm[addr + q]
            elif op == O_ELD:
                si[c1] = np.int32(_wrap(np.int64(buf[b0]) | (np.int64(buf[b0 + 1]) << 8) |
                                        (np.int64(buf[b0 + 2]) << 16) | (np.int64(buf[b0 + 3]) << 24), 32))
            else:
                v = np.int64(si[c3]) & 0xFFFFFFFF
                for q in range(4):
                    buf[b0 + q] = np.uint8((v >> (8 * q)) & 0xFF)
            if op == O_ELD or op == O_EST:
                busy = elem_cycles
            elif hbm[arg] == 1:
                busy = block_fixed + (nbytes * 1024 + hbm_bpc_k - 1) // hbm_bpc_k
                j = 0 if op == O_TCM_LOAD else 2
                hbm_io[j] += 1
                hbm_io[j + 1] += nbytes
            else:
                busy = sbuf_setup + (nbytes + 63) // 64
        else:
            err[0], err[1], err[2] = E_OPCODE, pc, op
            return t, steps
        # ---- the result's readiness, the next instruction
        d = dst_col[op]
        if d >= 0:
            lc = lat_class[op]
            ready = issue + busy - 1 + (tcm_lat if lc == 1 else div_lat if lc == 2 else 1)
            if dst_kind[op] == 1:
                sready[row[d]] = ready
            elif dst_kind[op] == 2:
                vready[row[d]] = ready
            else:
                for k in range(4):
                    vready[row[d] + k] = ready
        t = issue + busy
        if nxt < 0 or nxt > n:
            err[0], err[1], err[2] = E_BRANCH, pc, nxt
            return t, steps
        pc = nxt
    return t, steps
