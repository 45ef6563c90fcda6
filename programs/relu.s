# relu.s — forward and backward of ReLU on f32[N, F], the custom-op example of an MLP.
#
#   forward:  y  = relu(x)                       (Scalar engine: activation relu)
#   backward: dx = dy * (x > 0)                  (Vector engine: one scalar_tensor_tensor)
#
# Tiling: N = 512 rows in 4 tiles of 128 partitions, F = 1024 columns in one go (4 KiB per
# partition per tile). Loads on DMA queues 0 and 1, stores on queue 2 issued by GpSimd (a store's
# wait must not hold up the Sync engine's next load); the assembler inserts the
# semaphores between the DMA queues and the two engines.
.kernel relu
.const N = 512
.const F = 1024

.hbm x  f32[N, F] in
.hbm dy f32[N, F] in
.hbm y  f32[N, F] out
.hbm dx f32[N, F] out

.sbuf xt  f32[128, F]
.sbuf dyt f32[128, F]
.sbuf yt  f32[128, F]
.sbuf dxt f32[128, F]

.for i in 0..N / 128
  dma_copy xt, x[i*128 : i*128 + 128, :], queue=0
  dma_copy dyt, dy[i*128 : i*128 + 128, :], queue=1
  activation yt, relu, xt
  # (x > 0) * dy: op0 compares x with 0.0, op1 multiplies by dy
  scalar_tensor_tensor dxt, xt, greater, 0.0, multiply, dyt
  dma_copy y[i*128 : i*128 + 128, :], yt, queue=2, engine=gpsimd
  dma_copy dx[i*128 : i*128 + 128, :], dxt, queue=2, engine=gpsimd
.end
