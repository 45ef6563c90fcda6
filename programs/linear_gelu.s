# linear_gelu.s — a linear layer with GELU, y = gelu(x @ w + b), its activations x in their natural
# layout (tokens on rows), so the kernel transposes them on the Tensor engine; it also writes y^T.
#
# Inputs: x bf16[N, K] (N = 256 tokens, K = 256 features), w bf16[K, F] (F = 512), b f32[1, F].
# Outputs: y f32[N, F] and y_t f32[F, N] (y transposed).
#
# The Tensor engine contracts over partitions, so each 128-token block of x needs x^T, K on
# partitions. Per block m of 128 tokens, in order:
#   xT[:, k, :] = transpose(x_m[:, k*128 : k*128 + 128])   Tensor: nc_transpose bf16 SBUF -> PSUM
#                                                           (bf16 in PSUM, exact), k = 0, 1
#   xts = xT                                                Vector: tensor_copy PSUM -> SBUF
#   acc = sum over k of xts[:, k, :]^T @ w[k*128 : ...]     Tensor: nc_matmul, accumulate on k = 1
#   h = acc + b                                             Vector: tensor_tensor, PSUM + SBUF -> SBUF
#   yb = gelu(h)                                            Scalar: activation
#   yT[:, c, :] = transpose(yb[:, c*128 : c*128 + 128])     Tensor: nc_transpose f32, c = 0..3 (into
#                                                           one 2 KiB PSUM bank): exact, but -0 -> +0
#   yts[:, :, block m] = yT                                 Scalar: activation copy PSUM -> SBUF
# y^T collects in one SBUF tile and is stored at the end, row block c of y_t from yts[:, c, :]: rows
# of 1 KiB, where storing each [128, 128] block as it comes would move rows of 512 bytes (DMA
# chunks of half the efficiency; the kernel is DMA-bound). b is loaded once into every partition by
# one DMA whose HBM pattern repeats the row (step 0; b placed by hand at 0 so that the raw pattern can
# name it, as layernorm.s does). Loads are issued by the Sync engine on queues 0 and 1; stores by the
# otherwise idle GpSimd engine on queues 2 to 4.
.kernel linear_gelu
.const N = 256
.const K = 256
.const F = 512

.hbm b   f32[1, F]  in @0
.hbm x   bf16[N, K] in
.hbm w   bf16[K, F] in
.hbm y   f32[N, F]  out
.hbm y_t f32[F, N]  out

.sbuf bt  f32[128, F]             # b in every partition
.sbuf ws  bf16[128, K / 128, F]   # w, K split into slices of 128 rows
.sbuf xs  bf16[128, 2, K]         # two slots of token blocks
.sbuf xts bf16[128, K / 128, 128] # x_m^T, one [128, 128] block per K slice
.sbuf h   f32[128, F]
.sbuf yb  f32[128, 2, F]          # two slots of y blocks
.sbuf yts f32[128, F / 128, N]    # y^T: row block c of y_t in [:, c, :]
.psum xT  bf16[128, K / 128, 128]
.psum acc f32[128, F]             # one bank
.psum yT  f32[128, F / 128, 128]  # one bank

dma_copy bt, hbm.f32[@0, [0, 128], [1, F]], queue=1
.for k in 0..K / 128
  dma_copy ws[:, k, :], w[k*128 : k*128 + 128, :], queue=1
.end

.for m in 0..N / 128
  dma_copy xs[:, m % 2, :], x[m*128 : m*128 + 128, :], queue=0
.for k in 0..K / 128
  nc_transpose xT[:, k, :], xs[:, m % 2, k*128 : k*128 + 128]
.end
  tensor_copy xts, xT
.for k in 0..K / 128
  nc_matmul acc, xts[:, k, :], ws[:, k, :], accumulate=k > 0
.end
  tensor_tensor h, acc, bt, add
  activation    yb[:, m % 2, :], gelu, h
  dma_copy y[m*128 : m*128 + 128, :], yb[:, m % 2, :], queue=2, engine=gpsimd
.for c in 0..F / 128
  nc_transpose yT[:, c, :], yb[:, m % 2, c*128 : c*128 + 128]
.end
  activation yts[:, :, m*128 : m*128 + 128], copy, yT
.end
.for c in 0..F / 128
  dma_copy y_t[c*128 : c*128 + 128, :], yts[:, c, :], queue=3 + c % 2, engine=gpsimd
.end
