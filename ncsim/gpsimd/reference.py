"""The plain reference of the GpSimd core instructions: each written from its row's semantics with
numpy scalars and arrays, one instruction at a time, values only (no cycles, no race bookkeeping).
The tests run programs both here and in the numba interpreter and compare every register and byte.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ncsim.config import DEFAULT, Config
from ncsim.gpsimd.code import CoreProgram
from ncsim.gpsimd.fields import ARGS, LANE_BYTES, Reg

NAN = np.uint32(0x7FC00000).view(np.float32)
LANE_DTYPE = {"f32": np.float32, "i32": np.int32, "i16": np.int16, "i8": np.int8}


class Core:
    def __init__(self, core: int, cores: int, config: Config):
        self.core, self.cores, self.config = core, cores, config
        self.r = np.zeros(32, np.uint32)
        self.v = np.zeros((32, config.gpsimd_simd_bits // 8), np.uint8)
        self.tcm = np.zeros(config.gpsimd_tcm_bytes, np.uint8)
        self.pool = 0

    # registers as values
    def i(self, n: int) -> int:
        return int(self.r[n].view(np.int32))

    def f(self, n: int) -> np.float32:
        return self.r[n:n + 1].view(np.float32)[0]

    def set_i(self, n: int, x: int) -> None:
        self.r[n] = np.uint32(x & 0xFFFFFFFF)

    def set_f(self, n: int, x: np.float32) -> None:
        self.r[n:n + 1].view(np.float32)[0] = NAN if np.isnan(x) else x

    def b_int(self, b: Any) -> int:
        return self.i(b.n) if isinstance(b, Reg) else int(b)

    def b_f32(self, b: Any) -> np.float32:
        return self.f(b.n) if isinstance(b, Reg) else np.float32(b)

    def lanes(self, t: str, n: int) -> np.ndarray:
        return self.v[n].view(LANE_DTYPE[t]).copy()

    def set_lanes(self, n: int, values: np.ndarray) -> None:
        self.v[n] = np.ascontiguousarray(values).view(np.uint8)


def _fbin(op: str, x: np.float32, y: np.float32) -> np.float32:
    with np.errstate(all="ignore"):
        if op in ("add", "vadd"):
            return np.float32(x + y)
        if op in ("sub", "vsub"):
            return np.float32(x - y)
        if op in ("mul", "vmul"):
            return np.float32(x * y)
        if op in ("div", "vdiv"):
            return np.float32(np.divide(x, y, dtype=np.float32))
    if np.isnan(x) or np.isnan(y):
        return NAN
    if x == y:  # -0 against +0: min takes -0, max +0 (by the bits)
        bx, by = np.float32(x).view(np.uint32), np.float32(y).view(np.uint32)
        return np.uint32(bx | by if op in ("min", "vmin") else bx & by).view(np.float32)
    return min(x, y) if op in ("min", "vmin") else max(x, y)


def _sat_round(x: float, lo: int, hi: int) -> int:
    if np.isnan(x):
        return 0
    return int(min(max(np.rint(np.float64(x)), lo), hi))


def step(c: Core, instr: Any, args: dict[str, np.ndarray]) -> int | None:
    """Run one instruction on core state `c`; the next pc, or None to stay on course (pc + 1)."""
    m, o = instr.mnemonic, instr.operands
    wrap = lambda x: ((x + 2**31) % 2**32) - 2**31
    if m == "li":
        c.set_i(o["rd"], o["imm"])
    elif m == "lif":
        c.set_f(o["rd"], np.float32(o["imm"])) if not np.isnan(o["imm"]) else c.set_i(o["rd"], int(np.float32(o["imm"]).view(np.uint32)))
    elif m == "mov":
        c.r[o["rd"]] = c.r[o["ra"]]
    elif m in ("add", "sub", "mul", "and", "or", "xor", "shl", "shr", "sra", "min", "max", "slt", "seq"):
        a, b = c.i(o["ra"]), c.b_int(o["b"])
        s = b & 31
        r = {"add": a + b, "sub": a - b, "mul": a * b, "and": a & b, "or": a | b, "xor": a ^ b, "shl": a << s,
             "shr": (a & 0xFFFFFFFF) >> s, "sra": a >> s, "min": min(a, b), "max": max(a, b), "slt": int(a < b),
             "seq": int(a == b)}[m]
        c.set_i(o["rd"], wrap(r))
    elif m in ("fadd", "fsub", "fmul", "fdiv", "fmin", "fmax"):
        c.set_f(o["rd"], _fbin(m[1:], c.f(o["ra"]), c.b_f32(o["b"])))
    elif m in ("flt", "feq"):
        x, y = c.f(o["ra"]), c.b_f32(o["b"])
        c.set_i(o["rd"], int(x < y) if m == "flt" else int(x == y))
    elif m == "itof":
        c.set_f(o["rd"], np.float32(c.i(o["ra"])))
    elif m == "ftoi":
        c.set_i(o["rd"], _sat_round(float(c.f(o["ra"])), -2**31, 2**31 - 1))
    elif m in ("beq", "bne", "blt", "bge"):
        a, b = c.i(o["ra"]), c.b_int(o["b"])
        if {"beq": a == b, "bne": a != b, "blt": a < b, "bge": a >= b}[m]:
            return o["target"]
    elif m == "jmp":
        return o["target"]
    elif m == "loop":
        c.set_i(o["ra"], wrap(c.i(o["ra"]) - 1))
        if c.i(o["ra"]) != 0:
            return o["target"]
    elif m == "coreid":
        c.set_i(o["rd"], c.core)
    elif m == "ncores":
        c.set_i(o["rd"], c.cores)
    elif m in ("ld", "st"):
        a = c.i(o["ra"]) + o["off"]
        if m == "ld":
            c.r[o["rd"]] = c.tcm[a:a + 4].view(np.uint32)[0]
        else:
            c.tcm[a:a + 4] = np.array([c.r[o["rs"]]], np.uint32).view(np.uint8)
    elif m == "talloc":
        size = (c.b_int(o["b"]) + 63) // 64 * 64
        c.set_i(o["rd"], c.pool)
        c.pool += size
    elif m in ("vld", "vst"):
        a = c.i(o["ra"]) + o["off"]
        n = c.v.shape[1]
        if m == "vld":
            c.v[o["vd"]] = c.tcm[a:a + n]
        else:
            c.tcm[a:a + n] = c.v[o["vs"]]
    elif m == "vld4":
        size = LANE_BYTES[o["t"]]
        n = c.v.shape[1]
        a = c.i(o["ra"]) + o["off"]
        elems = c.tcm[a:a + 4 * n].view({1: np.uint8, 2: np.uint16, 4: np.uint32}[size])
        for k in range(4):
            c.v[o["vd"] + k] = elems[k::4].copy().view(np.uint8)
    elif m in ("vlds", "vsts"):
        size = LANE_BYTES[o["t"]]
        lanes = c.v.shape[1] // size
        a0, stride = c.i(o["ra"]), c.b_int(o["b"])
        reg = o["vd"] if m == "vlds" else o["vs"]
        for i in range(lanes):
            a = a0 + i * stride
            if m == "vlds":
                c.v[reg, i * size:(i + 1) * size] = c.tcm[a:a + size]
            else:
                c.tcm[a:a + size] = c.v[reg, i * size:(i + 1) * size]
    elif m in ("vadd", "vsub", "vmul", "vdiv", "vmin", "vmax"):
        t = o["t"]
        x, y = c.lanes(t, o["va"]), c.lanes(t, o["vb"])
        if t == "f32":
            out = np.array([_fbin(m, a, b) for a, b in zip(x, y)], np.float32)
            out[np.isnan(out)] = NAN
        else:
            a, b = x.astype(np.int64), y.astype(np.int64)
            r = {"vadd": a + b, "vsub": a - b, "vmul": a * b, "vmin": np.minimum(a, b), "vmax": np.maximum(a, b)}[m]
            out = r.astype(LANE_DTYPE[t])  # numpy's cast keeps the low bits: wraps
        c.set_lanes(o["vd"], out)
    elif m in ("vand", "vor", "vxor"):
        a, b = c.v[o["va"]], c.v[o["vb"]]
        c.v[o["vd"]] = a & b if m == "vand" else a | b if m == "vor" else a ^ b
    elif m == "vcmp":
        t = o["t"]
        x, y = c.lanes(t, o["va"]), c.lanes(t, o["vb"])
        ok = {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}[o["cmp"]]
        c.set_lanes(o["vd"], np.where(ok, -1, 0).astype(LANE_DTYPE["i32" if t == "f32" else t]))
    elif m == "vsel":
        mask = c.v[o["vm"]]
        c.v[o["vd"]] = (mask & c.v[o["va"]]) | (~mask & c.v[o["vb"]])
    elif m == "vcvt":
        dt, st = o["dt"], o["st"]
        src = c.lanes(st, o["va"])
        n = c.v.shape[1]
        out = np.zeros(n // LANE_BYTES[dt], LANE_DTYPE[dt])
        k = min(len(out), len(src))
        for i in range(k):
            if dt == "f32":
                out[i] = src[i] if st == "f32" else np.float32(int(src[i]))
            else:
                info = np.iinfo(LANE_DTYPE[dt])
                out[i] = (_sat_round(float(src[i]), int(info.min), int(info.max)) if st == "f32"
                          else min(max(int(src[i]), int(info.min)), int(info.max)))
        c.set_lanes(o["vd"], out)
    elif m == "vbcast":
        size = LANE_BYTES[o["t"]]
        raw = np.array([c.r[o["ra"]]], np.uint32).view(np.uint8)[:size]
        c.v[o["vd"]] = np.tile(raw, c.v.shape[1] // size)
    elif m == "vlane":
        size = LANE_BYTES[o["t"]]
        raw = c.v[o["va"], o["lane"] * size:(o["lane"] + 1) * size].copy()
        c.v[o["vd"]] = np.tile(raw, c.v.shape[1] // size)
    elif m == "vext":
        c.set_i(o["rd"], int(c.lanes(o["t"], o["va"])[o["lane"]].astype(np.int64)) if o["t"] != "f32"
                else int(c.lanes("i32", o["va"])[o["lane"]]))
    elif m == "vunzip":
        t = o["t"]
        both = np.concatenate([c.lanes(t, o["va"]).view(np.uint8), c.lanes(t, o["vb"]).view(np.uint8)])
        lanes = both.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[LANE_BYTES[t]])
        c.v[o["vd"]] = lanes[o["part"]::2].copy().view(np.uint8)
    elif m in ("tcm_load", "tcm_store", "eld", "est"):
        arr = args[o["arg"]]
        first = c.i(o["ri"])
        if m in ("eld", "est"):
            view = arr.view(np.uint32)
            if m == "eld":
                c.r[o["rd"]] = view[first]
            else:
                view[first] = c.r[o["rs"]]
        else:
            count = c.b_int(o["count"])
            raw = arr.view(np.uint8)
            size = arr.dtype.itemsize
            a = c.i(o["rt"])
            if m == "tcm_load":
                c.tcm[a:a + count * size] = raw[first * size:(first + count) * size]
            else:
                raw[first * size:(first + count) * size] = c.tcm[a:a + count * size]
    elif m == "halt":
        return -1
    else:
        raise AssertionError(m)
    return None


def run_core(c: Core, program: CoreProgram, args: dict[str, np.ndarray], limit: int = 10**7) -> None:
    pc = 0
    for _ in range(limit):
        if pc >= len(program):
            return
        nxt = step(c, program.instrs[pc], args)
        if nxt == -1:
            return
        pc = pc + 1 if nxt is None else nxt
    raise RuntimeError("step limit")


def run_program(program: CoreProgram, cores: int, args: dict[str, np.ndarray], aps: dict[str, Any],
                config: Config | None = None) -> dict[str, np.ndarray]:
    """The operands after the program ran on cores 0..cores-1 in order (flat, their storage dtypes)."""
    config = config or DEFAULT
    flat = {name: np.array(a).reshape(-1) for name, a in args.items()}
    for c in range(cores):
        run_core(Core(c, cores, config), program, flat)
    return {name: flat[name] for name in ARGS if name in flat}
