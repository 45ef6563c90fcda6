# relu_forward.s — y = relu(x) on f32[N, F], bit for bit as torch.relu computes it: x where x is not
# below zero (so -0 stays -0 and NaN stays NaN), +0 where it is. The forward of the custom-op MLP
# (examples/mlp_relu.py), registered as a torch operator by ncsim.torch.custom_op, which binds N and F
# from the shape of the tensor it is called with (docs/torch.md). `ncsim run programs/relu_forward.s
# -D N=64 -D F=120` runs it at another shape.
#
# Tiling: rows in tiles of 128 partitions (the last may be partial), columns in chunks of up to
# C = 2048 (the last may be partial); two buffers, so the load of the next tile overlaps the work
# on this one. Per tile: the load puts x into the output tile, one comparison makes the mask of
# negative elements (u8: the predicate of tensor_copy_predicated), and a predicated copy writes +0
# through it. (The Scalar engine's activation relu gives +0 for -0, where torch keeps -0.)
.kernel relu_forward
.param N = 300
.param F = 2500
.hbm x f32[N, F] in
.hbm y f32[N, F] out

.if F < 2048
.const C = F
.else
.const C = 2048
.end
.const CHUNKS = (F + C - 1) // C

.sbuf yt  f32[128, 2, C]
.sbuf neg u8[128, 2, C]

.for i in 0..(N + 127) // 128
  .for j in 0..CHUNKS
    dma_copy yt[0 : N - i*128, (i*CHUNKS + j) % 2, 0 : F - j*C], x[i*128 : i*128 + 128, j*C : j*C + C]
    tensor_scalar neg[0 : N - i*128, (i*CHUNKS + j) % 2, 0 : F - j*C], yt[0 : N - i*128, (i*CHUNKS + j) % 2, 0 : F - j*C], less, 0.0
    tensor_copy_predicated yt[0 : N - i*128, (i*CHUNKS + j) % 2, 0 : F - j*C], 0.0, neg[0 : N - i*128, (i*CHUNKS + j) % 2, 0 : F - j*C]
    dma_copy y[i*128 : i*128 + 128, j*C : j*C + C], yt[0 : N - i*128, (i*CHUNKS + j) % 2, 0 : F - j*C]
  .end
.end
