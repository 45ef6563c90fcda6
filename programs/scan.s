# scan.s — two scans along the rows of f32[N, T] with tensor_tensor_scan, chained over column chunks:
#   h[n, t] = a[n, t] * h[n, t-1] + b[n, t],  h[n, -1] = h0[n]    (a linear recurrence: an EMA, the
#                                                                 state update of a linear RNN / SSM)
#   m[n, t] = max(b[n, 0], ..., b[n, t])                          (the running maximum of b)
#
# Tiling: N = 256 rows in 2 tiles of 128 partitions, T = 2048 columns in 4 chunks of 512. Each chunk
# loads by its own DMA (queues 0 and 1 alternate), so the scan of chunk c runs while chunk c + 1 loads.
# The scan of chunk c starts from the last column of chunk c - 1: tensor_tensor_scan's initial is
# a [P, 1] column, here h0's column for c = 0 and ht[:, s, c*512 - 1] after that, and -inf for the
# first chunk of m. Row tiles are double-buffered by slot i % 2; stores are issued by GpSimd on
# queue 2, so that their waits do not hold up the Sync engine's loads.
#
# Per element, in fp32 (tensor_tensor_scan: res = (data0 op0 res) op1 data1):
#   h: data0 = a, op0 = multiply, data1 = b, op1 = add
#   m: data0 = b, op0 = maximum,  data1 = b, op1 = maximum   (max(max(b, m), b) = max(b, m))
.kernel scan
.const N = 256
.const T = 2048
.const C = 512                    # columns per chunk

.hbm a  f32[N, T] in
.hbm b  f32[N, T] in
.hbm h0 f32[N, 1] in
.hbm h  f32[N, T] out
.hbm m  f32[N, T] out

.sbuf at  f32[128, 2, T]          # two slots of row tiles
.sbuf bt  f32[128, 2, T]
.sbuf h0t f32[128, N / 128]       # h0, one column per row tile
.sbuf ht  f32[128, 2, T]
.sbuf mt  f32[128, 2, T]

.for i in 0..N / 128
  dma_copy h0t[:, i : i + 1], h0[i*128 : i*128 + 128, :], queue=i % 2
.end

.for i in 0..N / 128
.for c in 0..T / C
  dma_copy at[:, i % 2, c*C : c*C + C], a[i*128 : i*128 + 128, c*C : c*C + C], queue=c % 2
  dma_copy bt[:, i % 2, c*C : c*C + C], b[i*128 : i*128 + 128, c*C : c*C + C], queue=c % 2
.end
  tensor_tensor_scan ht[:, i % 2, 0:C], at[:, i % 2, 0:C], bt[:, i % 2, 0:C], h0t[:, i : i + 1], multiply, add
  tensor_tensor_scan mt[:, i % 2, 0:C], bt[:, i % 2, 0:C], bt[:, i % 2, 0:C], -inf, maximum, maximum
.for c in 1..T / C
  tensor_tensor_scan ht[:, i % 2, c*C : c*C + C], at[:, i % 2, c*C : c*C + C], bt[:, i % 2, c*C : c*C + C], ht[:, i % 2, c*C - 1 : c*C], multiply, add
  tensor_tensor_scan mt[:, i % 2, c*C : c*C + C], bt[:, i % 2, c*C : c*C + C], bt[:, i % 2, c*C : c*C + C], mt[:, i % 2, c*C - 1 : c*C], maximum, maximum
.end
  dma_copy h[i*128 : i*128 + 128, :], ht[:, i % 2, :], queue=2, engine=gpsimd
  dma_copy m[i*128 : i*128 + 128, :], mt[:, i % 2, :], queue=2, engine=gpsimd
.end
