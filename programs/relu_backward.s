# relu_backward.s — dx = dy where y > 0, else +0, on f32[N, F]: the gradient torch computes for
# torch.relu (threshold_backward of the output y: where y <= 0 the gradient is 0, elsewhere dy, so a
# NaN in y passes dy through), bit for bit. The backward of the custom-op MLP (examples/mlp_relu.py):
# ncsim.torch.custom_op(..., backward=...) finds its inputs by name, y the forward's output and dy
# the gradient of that output, and its output dx is the gradient of the forward's input x.
#
# Tiling as relu_forward.s: rows in tiles of 128 partitions, columns in chunks of up to 2048, two
# buffers. Per tile: dy is loaded into the output tile, the mask of y <= 0 is made from y, and a
# predicated copy writes +0 through it.
.kernel relu_backward
.param N = 300
.param F = 2500
.hbm dy f32[N, F] in
.hbm y  f32[N, F] in
.hbm dx f32[N, F] out

.if F < 2048
.const C = F
.else
.const C = 2048
.end
.const CHUNKS = (F + C - 1) // C

.sbuf dxt  f32[128, 2, C]
.sbuf yt   f32[128, 2, C]
.sbuf stop u8[128, 2, C]

.for i in 0..(N + 127) // 128
  .for j in 0..CHUNKS
    dma_copy dxt[0 : N - i*128, (i*CHUNKS + j) % 2, 0 : F - j*C], dy[i*128 : i*128 + 128, j*C : j*C + C]
    dma_copy yt[0 : N - i*128, (i*CHUNKS + j) % 2, 0 : F - j*C], y[i*128 : i*128 + 128, j*C : j*C + C]
    tensor_scalar stop[0 : N - i*128, (i*CHUNKS + j) % 2, 0 : F - j*C], yt[0 : N - i*128, (i*CHUNKS + j) % 2, 0 : F - j*C], less_equal, 0.0
    tensor_copy_predicated dxt[0 : N - i*128, (i*CHUNKS + j) % 2, 0 : F - j*C], 0.0, stop[0 : N - i*128, (i*CHUNKS + j) % 2, 0 : F - j*C]
    dma_copy dx[i*128 : i*128 + 128, j*C : j*C + C], dxt[0 : N - i*128, (i*CHUNKS + j) % 2, 0 : F - j*C]
  .end
.end
