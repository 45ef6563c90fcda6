# layernorm.s — layer norm over the rows of x f32[512, 1024], with gamma and beta f32[1, 1024]:
#   y[n, :] = (x[n, :] - mean(x[n, :])) * (var(x[n, :]) + EPS) ** -0.5 * gamma + beta
# (var the population variance).
#
# Tiling: N = 512 rows in 4 tiles of 128 rows (one row per partition), each row whole (F = 1024
# floats). Input and output tiles are double-buffered by slot i % 2. Loads go on DMA queue 0,
# triggered by the Sync engine; stores on queue 1, triggered by the otherwise idle GpSimd engine (a
# dma_copy waits on the engine that triggers it, so a store triggered by Sync would hold back the
# next load). The assembler inserts the semaphores.
#
# gamma and beta: every partition needs the whole row, so each is loaded once into a [128, F] tile
# by one DMA whose HBM access pattern repeats the row: outer dimension [0, 128] (step 0: the same
# 1024 floats for each of the 128 partitions), inner [1, F]. A slice cannot say step 0, so the
# operand is written as a raw access pattern, and gamma and beta are placed by hand (@GAMMA_AT,
# @BETA_AT, declared first) so that the pattern can name their addresses. The kernel's arguments
# stay the honest f32[1, F]; the alternative, 128 one-row DMAs per parameter, moves the same bytes
# in 256 transfers instead of 2. They go on DMA queue 2, beside the first x tile.
#
# Per tile, in fp32:
#   stats = bn_stats of columns 0:512 and 512:1024   Vector: 2 x [P, 6] (count, mean, var*count of the
#                                                     even and of the odd columns) into [P, 12]
#   mv = bn_aggr(stats)                               Vector: [P, 2] = mean, population variance
#   rstd = rsqrt(var * 1.0 + EPS)                     Scalar: activation with bias = a [P,1] EPS column
#   t = (x - mean) * rstd                             Vector: tensor_scalar with the two columns
#   t = t * gamma;  y = t + beta                      Vector: tensor_tensor, in place
.kernel layernorm
.const N = 512
.const F = 1024
.const EPS = 1e-5
.const CHUNK = 512               # bn_stats takes at most 512 elements per partition
.const GAMMA_AT = 0
.const BETA_AT = F * 4

.hbm gamma f32[1, F] in @GAMMA_AT
.hbm beta  f32[1, F] in @BETA_AT
.hbm x     f32[N, F] in
.hbm y     f32[N, F] out

.sbuf g       f32[128, F]        # gamma in every partition
.sbuf b       f32[128, F]        # beta in every partition
.sbuf eps_col f32[128, 1]
.sbuf xt      f32[128, 2, F]     # two slots of input rows
.sbuf yt      f32[128, 2, F]     # two slots of output rows
.sbuf stats   f32[128, 6 * F / CHUNK]
.sbuf mv      f32[128, 2]        # mean, variance
.sbuf rstd    f32[128, 1]

dma_copy g, hbm.f32[@GAMMA_AT, [0, 128], [1, F]], queue=2
dma_copy b, hbm.f32[@BETA_AT, [0, 128], [1, F]], queue=2
memset   eps_col, EPS

.for i in 0..N / 128
  dma_copy xt[:, i % 2, :], x[i*128 : i*128 + 128, :], queue=0

.for c in 0..F / CHUNK
  bn_stats stats[:, c*6 : c*6 + 6], xt[:, i % 2, c*CHUNK : c*CHUNK + CHUNK]
.end
  bn_aggr    mv, stats
  activation rstd, rsqrt, mv[:, 1:2], bias=eps_col
  tensor_scalar yt[:, i % 2, :], xt[:, i % 2, :], subtract, mv[:, 0:1], op1=multiply, operand1=rstd
  tensor_tensor yt[:, i % 2, :], yt[:, i % 2, :], g, multiply
  tensor_tensor yt[:, i % 2, :], yt[:, i % 2, :], b, add

  dma_copy y[i*128 : i*128 + 128, :], yt[:, i % 2, :], queue=1, engine=gpsimd
.end
