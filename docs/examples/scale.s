# docs/examples/scale.s: y = 2 * x + 1 on f32[256, 512], two tiles of 128 rows
.kernel scale
.hbm  x  f32[256, 512] in
.hbm  y  f32[256, 512] out
.sbuf xt f32[128, 2, 512]          # one slot per tile

.for i in 0..2
  dma_copy      xt[:, i, :], x[i*128 : i*128 + 128, :], queue=0
  tensor_scalar xt[:, i, :], xt[:, i, :], multiply, 2.0, op1=add, operand1=1.0
  dma_copy      y[i*128 : i*128 + 128, :], xt[:, i, :], queue=1, engine=gpsimd
.end
