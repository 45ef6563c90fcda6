# relu_gpsimd_tcm.s — y = relu(x) on f32[N, F] as a GpSimd custom operator, step 2 of three
# (docs/gpsimd.md#relu): one core, the TCM accessor. Blocks of 1024 floats move between HBM and the
# core's TCM (`tcm_load`, `tcm_store`: one DMA each, gpsimd_tcm_block_cycles + the DMA latency + the
# bytes at one engine's bandwidth), and the core works on them 16 lanes at a time: a compare with zero
# and a select (bit for bit as torch.relu: -0 and NaN kept). The program is step 3's
# (relu_gpsimd_tcm8.s) with CORES = 1.
.kernel relu_gpsimd_tcm
.param N = 32
.param F = 4096
.hbm x f32[N, F] in
.hbm y f32[N, F] out
.const T = N * F
.const CORES = 1
.const B = 1024         # floats per TCM block, as the tutorial's
.const SHARE = ((T + CORES - 1) // CORES + B - 1) // B * B   # a core's elements, whole blocks

.gpsimd relu
    coreid r1
    mul r2, r1, SHARE   # this core's first element
    add r3, r2, SHARE
    min r3, r3, T       # and its end
    bge r2, r3, done    # (no share left for this core)
    talloc r10, B * 4
block:
    sub r4, r3, r2
    min r4, r4, B       # the elements of this block
    tcm_load r10, in0, r2, r4
    add r5, r4, 15
    shr r5, r5, 4       # its vectors of 16 lanes (the last may hold lanes past the block: not stored)
    mov r6, r10
vec:
    vld v0, r6, 0
    vcmp lt, f32, v1, v0, v31   # v31 is zero: lanes where x < 0
    vsel v0, v1, v31, v0        # +0 there, x elsewhere (-0 and NaN kept)
    vst v0, r6, 0
    add r6, r6, 64
    loop r5, vec
    tcm_store out0, r2, r10, r4
    add r2, r2, r4
    blt r2, r3, block
done:
.end

gpsimd_call relu, y, x, cores=CORES
