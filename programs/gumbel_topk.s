# gumbel_topk.s — sample 8 tokens per row without replacement by the Gumbel-top-k trick:
#   z = logits + G,  G = -log(-log(u)),  u uniform in [0, 1) from a counter-based hash;
#   top = the 8 largest z of each row (descending), idx = their positions (the sampled tokens).
#
# Inputs: logits f32[N, V] (N = 256 rows, V = 1024 tokens). Outputs: top f32[N, 8], idx u32[N, 8].
#
# The random numbers: element (n, v) has the counter c = n * V + v (iota: the row tile's offset, V per
# partition, 1 per column), hashed by MurmurHash3's 32-bit finalizer of c ^ SEED, all in uint32:
#   x = c ^ SEED;  x ^= x >> 16;  x *= C1;  x ^= x >> 13;  x *= C2;  x ^= x >> 16
# The shifts and xors run on the Vector engine (tensor_scalar right_shift, tensor_tensor bitwise_xor
# on u32 tiles); the multiplies modulo 2**32 on GpSimd (tensor_tensor multiply of two u32 tiles, the
# constants memset into u32 tiles), since Vector's multiply is an fp32 one. Then
#   u  = (x >> 8) * 2**-24                Vector: right_shift into u32, then a multiply into f32 (exact)
#   g1 = log(u)                           Scalar: activation log (log(0) = -inf)
#   g2 = log(-1.0 * g1)                   Scalar: activation log with scale -1.0
#   z  = logits - g2                      Vector
#   top = max8(z);  idx = nc_find_index8(z, top)   Vector (the first position of each value)
# The hash tiles are single-buffered: Vector and GpSimd share the SBUF port, so a second slot gains
# nothing (tried: 2% slower). logits and z have two slots; the results of both row tiles collect in
# one SBUF tile per output, stored by GpSimd at the end.
.kernel gumbel_topk
.const N = 256
.const V = 1024
.const SEED = 0x9E3779B9
.const C1 = 0x85EBCA6B
.const C2 = 0xC2B2AE35
.const TWO_M24 = 5.9604644775390625e-08   # 2**-24

.hbm logits f32[N, V] in
.hbm top    f32[N, 8] out
.hbm idx    u32[N, 8] out

.sbuf lt    f32[128, 2, V]
.sbuf c1    u32[128, V]
.sbuf c2    u32[128, V]
.sbuf x     u32[128, V]
.sbuf t     u32[128, V]
.sbuf u     f32[128, V]
.sbuf g     f32[128, V]
.sbuf z     f32[128, 2, V]
.sbuf topt  f32[128, N / 128, 8]
.sbuf idxt  u32[128, N / 128, 8]

memset c1, C1, engine=gpsimd
memset c2, C2, engine=gpsimd

.for i in 0..N / 128
  dma_copy lt[:, i % 2, :], logits[i*128 : i*128 + 128, :], queue=i % 2
  iota          x, [[1, V]], i*128*V, channel_multiplier=V
  tensor_scalar x, x, bitwise_xor, SEED
  tensor_scalar t, x, right_shift, 16
  tensor_tensor x, x, t, bitwise_xor
  tensor_tensor x, x, c1, multiply, engine=gpsimd
  tensor_scalar t, x, right_shift, 13
  tensor_tensor x, x, t, bitwise_xor
  tensor_tensor x, x, c2, multiply, engine=gpsimd
  tensor_scalar t, x, right_shift, 16
  tensor_tensor x, x, t, bitwise_xor
  tensor_scalar t, x, right_shift, 8
  tensor_scalar u, t, multiply, TWO_M24
  activation    g, log, u
  activation    g, log, g, scale=-1.0
  tensor_tensor z[:, i % 2, :], lt[:, i % 2, :], g, subtract
  max8           topt[:, i, :], z[:, i % 2, :]
  nc_find_index8 idxt[:, i, :], z[:, i % 2, :], topt[:, i, :]
.end

.for i in 0..N / 128
  dma_copy top[i*128 : i*128 + 128, :], topt[:, i, :], queue=2, engine=gpsimd
  dma_copy idx[i*128 : i*128 + 128, :], idxt[:, i, :], queue=3, engine=gpsimd
.end
