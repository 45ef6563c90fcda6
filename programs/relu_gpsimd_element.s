# relu_gpsimd_element.s — y = relu(x) on f32[N, F] as a GpSimd custom operator, step 1 of the three a
# developer goes through (docs/gpsimd.md#relu): one core, the plain element accessor. Each element is
# read with `eld` and written with `est`, a slow round trip each (gpsimd_element_access_cycles, fitted
# to the custom-operator performance tutorial's 8.10 iter/s). Bit for bit as torch.relu: x where x is
# not below zero (-0 and NaN kept), +0 where it is; no branch on the data, so the timing run on zeros
# takes the same path as the real one. Steps 2 and 3: relu_gpsimd_tcm.s, relu_gpsimd_tcm8.s.
.kernel relu_gpsimd_element
.param N = 32           # the defaults: the tutorial MLP's first ReLU (batch 32, 4096 features)
.param F = 4096
.hbm x f32[N, F] in
.hbm y f32[N, F] out
.const T = N * F

.gpsimd relu
    li r2, 0            # the element
    li r3, T
    lif r6, 0.0
top:
    eld r4, in0, r2
    flt r5, r4, r6      # 1 where x < 0
    sub r5, r5, 1       # a mask: 0 where x < 0, all ones elsewhere
    and r4, r4, r5
    est out0, r2, r4
    add r2, r2, 1
    blt r2, r3, top
.end

gpsimd_call relu, y, x, cores=1
