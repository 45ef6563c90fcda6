"""Shared pieces of the assembler tests: hand-written programs, and `ncsim` run in-process or as a process.

`cli` runs `ncsim.cli.main` in this process with `sys.argv` patched, so the tests see exactly what a
user sees (the formatted error, the exit status) without paying for a new interpreter each time.
`run_ncsim` starts the installed `ncsim` script for the few end-to-end checks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from ncsim.cli import main

NCSIM = Path(sys.executable).with_name("ncsim")  # the console script installed beside this python

# Hand-written raw programs. Together they use every instruction of the table, on every engine
# that each runs on where it matters, the directives, expressions and the three comment styles.
PROGRAMS: dict[str, str] = {
    "matmul_relu": """\
# matmul then activation, with DMAs and semaphores between the engines
.kernel mm_relu
.hbm  x f32[128, 512] in @0
.hbm  y f32[128, 512] out @262144
.sbuf t f32[128, 512] @0:0
.sbuf w bf16[128, 128] @0:2048
.psum acc f32[128, 512] @0:0

dma_copy sbuf.f32[0:128, @0, [1,512]], hbm.f32[@0, [512,128], [1,512]], queue=3, signal=[s1+=1]
sem_wait s1>=1, engine=tensor
nc_matmul psum.f32[0:128, @0, [1,512]], sbuf.bf16[0:128, @2048, [1,128]], sbuf.bf16[0:128, @0, [1,512]], \
wait=[s1>=1], signal=[s2+=1]
activation sbuf.f32[0:128, @0, [1,512]], relu, psum.f32[0:128, @0, [1,512]], bias=sbuf.f32[0:128, @4096, [1,1]], \
scale=0.5, reduce_cmd=reset_reduce, reduce_res=sbuf.f32[0:128, @4100, [1,1]], wait=[s2>=1]
tensor_tensor sbuf.f32[0:64, @0, [1,256]], sbuf.f32[0:64, @1024, [1,256]], psum.f32[0:64, @0, [1,256]], multiply
tensor_scalar sbuf.f32[0:128, @0, [1,512]], sbuf.f32[0:128, @0, [1,512]], multiply, 1.5, op1=add, operand1=0
iota sbuf.i32[0:128, @8192, [1,64]], [[1,64]], 3, channel_multiplier=64
sem_signal s3=0, engine=vector
dma_copy hbm.f32[@262144, [512,128], [1,512]], sbuf.f32[0:128, @0, [1,512]], queue=15, engine=scalar, \
wait=[s2>=1, s3==0]
""",
    "vector_zoo": """\
; every Vector, Scalar and GpSimd instruction once, with integer expressions in the operands
.sbuf a f32[128, 1024] @0:0
.sbuf b bf16[128, 1024] @0:4*1024
.sbuf idx i32[128, 16] @0:8192 + 2048
.psum p f32[128, 512] @0:2048

memset sbuf.i32[0:128, @10240, [1,16]], 0, engine=gpsimd   # offsets of the dynamic copies below
\tnc_transpose psum.f32[0:128, @0, [1,128]], sbuf.f32[0:128, @0, [1,128]]   # Tensor: SBUF -> PSUM
nc_transpose sbuf.f32[0:32, @512, [1,32]], sbuf.f32[0:32, @0, [1,32]], engine=vector
activation_reduce sbuf.f32[0:128, @0, [1,512]], exp, sbuf.f32[0:128, @0, [1,512]], add, sbuf.f32[0:128, @2048, [1,1]], \
scale=-1.0
activation sbuf.bf16[0:128, @4096, [2,256]], gelu_apprx_tanh, psum.f32[0:128, @2048, [1,256]], \
scale=sbuf.f32[0:128, @2052, [1,1]], reduce_cmd=reduce
tensor_scalar_reduce sbuf.f32[0:128, @0, [1,512]], sbuf.f32[0:128, @0, [1,512]], multiply, 2, maximum, \
sbuf.f32[0:128, @2056, [1,1]], reverse0=true
scalar_tensor_tensor sbuf.f32[0:128, @0, [16,32], [1,16]], sbuf.f32[0:128, @0, [16,32], [1,16]], subtract, \
sbuf.f32[0:128, @2060, [1,1]], multiply, psum.f32[0:128, @0, [16,32], [1,16]], reverse1=true
tensor_reduce sbuf.f32[0:128, @2064, [1,4]], max, sbuf.f32[0:128, @0, [128,4], [1,128]], [2], negate=true
tensor_tensor_scan sbuf.f32[0:128, @0, [1,256]], sbuf.f32[0:128, @0, [1,256]], sbuf.f32[0:128, @1024, [1,256]], \
0.0, multiply, add
tensor_copy sbuf.bf16[0:96, @4096, [1,512]], sbuf.f32[0:96, @0, [1,512]], engine=gpsimd
tensor_copy sbuf.f32[64:96, @0, [1,8]], psum.f32[64:96, @0, [1,8]], engine=scalar
tensor_copy_predicated sbuf.f32[0:128, @0, [1,64]], -inf, sbuf.u8[0:128, @6144, [1,64]], reverse_pred=true
tensor_copy_dynamic_src sbuf.f32[0:128, @0, [1,64]], sbuf.f32[0:128, @1024, [1,64]], sbuf.i32[0:1, @10240, [1,1]]
tensor_copy_dynamic_dst sbuf.f32[0:128, @0, [1,64]], sbuf.f32[0:128, @1024, [1,64]], \
sbuf.i32[0:1, @10244, [1,1]], engine=gpsimd
memset sbuf.f32[0:128, @0, [1,1024]], 0
memset sbuf.i32[0:128, @10240, [1,16]], -2147483648, engine=gpsimd
memset sbuf.u32[0:128, @10240, [1,16]], 0xffff_ffff
memset sbuf.f32[0:128, @0, [1,8]], 1e-45
reciprocal sbuf.f32[0:128, @0, [1,512]], psum.f32[0:128, @0, [1,512]]
bn_stats sbuf.f32[0:128, @2048, [1,6]], sbuf.f32[0:128, @0, [1,512]]
bn_aggr sbuf.f32[0:128, @2072, [1,2]], sbuf.f32[0:128, @2048, [1,6]]
max8 sbuf.f32[0:128, @2048, [1,8]], sbuf.f32[0:128, @0, [1,1024]]
nc_find_index8 sbuf.u32[0:128, @2080, [1,8]], sbuf.f32[0:128, @0, [1,1024]], sbuf.f32[0:128, @2048, [1,8]]
nc_match_replace8 sbuf.f32[0:128, @0, [1,1024]], sbuf.f32[0:128, @0, [1,1024]], sbuf.f32[0:128, @2048, [1,8]], \
-3.5, dst_idx=sbuf.u32[0:128, @2080, [1,8]]
dropout sbuf.f32[0:128, @0, [1,512]], sbuf.f32[0:128, @0, [1,512]], 0.25, seed=0xdead_beef
nc_stream_shuffle sbuf.f32[0:128, @0, [1,16]], sbuf.f32[0:128, @1024, [1,16]], \
[31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 255]
tensor_tensor sbuf.i32[0:128, @10240, [1,16]], sbuf.i32[0:128, @10240, [1,16]], sbuf.i32[0:128, @10304, [1,16]], \
bitwise_xor
tensor_tensor sbuf.f32[0:128, @0, [1,16]], sbuf.f32[0:128, @0, [1,16]], sbuf.f32[0:128, @64, [1,16]], pow, \
engine=gpsimd
tensor_scalar sbuf.f32[0:128, @0, [1,16]], sbuf.f32[0:128, @0, [1,16]], rsqrt, 0, engine=gpsimd
affine_select sbuf.f32[0:128, @0, [1,128]], [[-1,128]], 0, 0, sbuf.f32[0:128, @0, [1,128]], -inf, cmp_op=greater_equal
tensor_partition_reduce sbuf.f32[0:1, @0, [1,128]], add, sbuf.f32[0:128, @0, [1,128]]
local_gather sbuf.f32[0:128, @0, [1,64]], sbuf.f32[0:128, @1024, [1,64]], sbuf.u16[0:128, @10240, [1,8]], \
num_elem_per_idx=4, num_valid_indices=16
sem_wait s255==4294967295, engine=gpsimd
sem_signal s255-=1, engine=gpsimd, wait=[s0>=0, s1>=1, s2>=2, s3>=3, s4>=4, s5>=5, s6>=6, s7>=7]
dma_copy sbuf.bf16[0:128, @4096, [1,1024]], hbm.f32[@65536, [1024,128], [1,1024]], dst_rmw_op=add, engine=gpsimd
""",
    "locations": """\
.kernel with_locations
.file 1 "kernel.py"
.file 7 "other.s"
.loc 1 120 9
sem_signal s1+=1
sem_signal s2+=2
.loc 7 3 1
sem_wait s1>=1, engine=vector
""",
    "named_sems": """\
# .sem names: s0 is written by number first, so 'ready' is s1; 'done' is placed by hand at s9
.kernel named_sems
.sync manual
sem_signal s0+=1
.sem ready
.sem done @9
sem_signal ready+=1, wait=[s0>=1]
sem_wait ready>=1, engine=vector, signal=[done+=2, s3+=1]
sem_wait done>=2, engine=scalar
""",
    "gpsimd_program": """\
# a GpSimd program (its core instructions live in the .gpsimd section) called on all eight cores
.kernel gp
.hbm x f32[128, 16] in
.hbm y f32[128, 16] out
.gpsimd copy
    coreid r1
    li r2, 0
top:
    eld r3, in0, r2
    est out0, r2, r3
    add r2, r2, 1
    blt r2, 1, top
.end
gpsimd_call copy, y, x, cores=8
""",
    "tensors_only": """\
.hbm  big bf16[16, 1024, 1024] scratch @1
.hbm  io  u8[1] inout @17179869183
.sbuf top f32[32, 8] @96:180192
.psum bank7 f32[128, 512] @0:14336
""",
}


@dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys, monkeypatch, tmp_path):
    """Run `ncsim ARGS...` in-process, in `tmp_path`; give the exit status, stdout and stderr."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NCSIM_DEBUG", raising=False)

    def run(*args: str | os.PathLike) -> CliResult:
        capsys.readouterr()
        monkeypatch.setattr(sys, "argv", ["ncsim", *map(str, args)])
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run


def run_ncsim(*args: str | os.PathLike, cwd: Path) -> CliResult:
    """Run the installed `ncsim` script as its own process."""
    if not NCSIM.exists():
        pytest.skip(f"the ncsim script is not installed at {NCSIM}")
    env = {k: v for k, v in os.environ.items() if k != "NCSIM_DEBUG"}
    done = subprocess.run([str(NCSIM), *map(str, args)], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    return CliResult(done.returncode, done.stdout, done.stderr)
