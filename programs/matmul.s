# matmul.s — C = A @ B in bf16 with fp32 accumulation in PSUM, tiled over M, N and K.
#
# Inputs: a_t bf16[K, M] (A transposed: the contraction dimension K on partitions, as the Tensor
# engine reads the stationary operand) and b bf16[K, N]. Output: c f32[M, N].
# Tiles: M in 128-row blocks (stationary [128, 128]), N in 512-column blocks (moving [128, 512]:
# one fp32 PSUM bank per partition), K in 128-deep slices accumulated onto the same PSUM tile
# (accumulate on every slice but the first). The Vector engine copies each finished PSUM tile to
# SBUF and a DMA issued by GpSimd stores it (so its wait does not hold up the loads the Sync engine
# issues); A and B slices load on DMA queues 0 and 1.
.kernel matmul
.const M = 256
.const N = 1024
.const K = 512

.hbm a_t bf16[K, M] in
.hbm b   bf16[K, N] in
.hbm c   f32[M, N]  out

.sbuf at   bf16[128, K / 128, 128]   # all K slices of one M block of A^T
.sbuf bt   bf16[128, 2, 512]         # two slots of B slices
.sbuf ct   f32[128, 512]
.psum acc  f32[128, 512]

.for m in 0..M / 128
.for k in 0..K / 128
  dma_copy at[:, k, :], a_t[k*128 : k*128 + 128, m*128 : m*128 + 128], queue=0
.end
.for n in 0..N / 512
.for k in 0..K / 128
  dma_copy  bt[:, k % 2, :], b[k*128 : k*128 + 128, n*512 : n*512 + 512], queue=1
  nc_matmul acc, at[:, k, :], bt[:, k % 2, :], accumulate=k > 0
.end
  tensor_copy ct, acc
  dma_copy c[m*128 : m*128 + 128, n*512 : n*512 + 512], ct, queue=2, engine=gpsimd
.end
.end
