# softmax.s — row softmax of x f32[512, 1024]: y[n, :] = exp(x[n, :] - max x[n, :]) / sum exp(...).
#
# Tiling: N = 512 rows in 4 tiles of 128 rows (one row per partition), each row whole (F = 1024
# floats, 4 KiB per partition per tile). Input and output tiles are double-buffered by slot i % 2,
# so tile i + 1 loads while tile i computes and tile i - 1 is stored. Loads go on DMA queue 0,
# triggered by the Sync engine; stores on queue 1, triggered by the otherwise idle GpSimd engine: a
# dma_copy waits for its data on the engine that triggers it, so a store triggered by Sync would hold
# back the next load behind it and undo the double buffering. The assembler inserts the semaphores.
#
# Per tile, in fp32 (the numerically stable form: every exponent is <= 0, so no overflow):
#   neg_m = -(max over the row of x)           Vector: tensor_reduce maximum, negate=true (exact)
#   e = exp(x + neg_m), s = row sum of e        Scalar: activation_reduce (bias = the [P,1] column
#                                               neg_m; the sum is sequential, left to right, in fp32)
#   r = 1 / s                                   Vector: reciprocal (IEEE division)
#   y = e * r                                   Vector: tensor_scalar with the [P,1] column r, in place
.kernel softmax
.const N = 512
.const F = 1024

.hbm x f32[N, F] in
.hbm y f32[N, F] out

.sbuf xt    f32[128, 2, F]    # two slots of input rows
.sbuf yt    f32[128, 2, F]    # two slots of e, then y (in place)
.sbuf neg_m f32[128, 1]
.sbuf s     f32[128, 1]
.sbuf r     f32[128, 1]

.for i in 0..N / 128
  dma_copy xt[:, i % 2, :], x[i*128 : i*128 + 128, :], queue=0

  tensor_reduce     neg_m, maximum, xt[:, i % 2, :], 1, negate=true
  activation_reduce yt[:, i % 2, :], exp, xt[:, i % 2, :], add, s, bias=neg_m
  reciprocal        r, s
  tensor_scalar     yt[:, i % 2, :], yt[:, i % 2, :], multiply, r

  dma_copy y[i*128 : i*128 + 128, :], yt[:, i % 2, :], queue=1, engine=gpsimd
.end
