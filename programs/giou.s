# giou.s — generalized IoU of 1024 x 256 pairs of boxes.
#
# Inputs: preds and targets, f32[1024, 1024]; each row holds 256 boxes of 4 corners (x1, y1, x2, y2).
# Output: out f32[1024, 256], the GIoU of each (pred, target) pair.
#
# Tiling: 8 row tiles of 128 rows (one row per partition) x 2 column tiles of 512 floats (128 boxes),
# 16 tiles in all. Each tile is loaded by DMA into a [128, 512] slot, viewed as 4 strided coordinate
# planes (x1 = p[:, 0::4], y1 = p[:, 1::4], ...) of [128, 128]; the Vector engine does the arithmetic,
# the Scalar engine the clamps at zero (relu); the [128, 128] result goes back by DMA.
# Input slots are double-buffered (slot c: consecutive tiles alternate), so one tile loads while the
# other computes; loads go on DMA queues 0 and 1 (issued by the Sync engine), stores on queue 2,
# issued by the idle GpSimd engine so that a store waiting for its tile never holds up the next load.
#
# The formula, in fp32, every operation rounded, in this order:
#   area_a = (a.x2 - a.x1) * (a.y2 - a.y1)          area_b likewise
#   w = max(min(a.x2, b.x2) - max(a.x1, b.x1), 0)    h likewise with y      inter = w * h
#   union = (area_a + area_b) - inter                iou = inter / max(union, EPS)
#   W = max(max(a.x2, b.x2) - min(a.x1, b.x1), 0)    H likewise             enclose = max(W * H, EPS)
#   giou = iou - (enclose - union) / enclose
.kernel giou
.const EPS = 1e-5
.const ROWS = 1024
.const COLS = 1024

.hbm  preds   f32[ROWS, COLS]      in
.hbm  targets f32[ROWS, COLS]      in
.hbm  out     f32[ROWS, COLS / 4]  out

.sbuf p      f32[128, 2, 512]      # two slots of predicted boxes
.sbuf t      f32[128, 2, 512]      # two slots of target boxes
.sbuf area_a f32[128, 128]
.sbuf area_b f32[128, 128]
.sbuf w      f32[128, 128]
.sbuf h      f32[128, 128]
.sbuf tmp    f32[128, 128]
.sbuf inter  f32[128, 128]
.sbuf union  f32[128, 128]
.sbuf iou    f32[128, 128]
.sbuf res    f32[128, 128]

.for r in 0..ROWS / 128
.for c in 0..COLS / 512
  dma_copy p[:, c, :], preds[r*128 : r*128 + 128, c*512 : c*512 + 512], queue=c
  dma_copy t[:, c, :], targets[r*128 : r*128 + 128, c*512 : c*512 + 512], queue=c

  # areas: (x2 - x1) * (y2 - y1)
  tensor_tensor w, p[:, c, 2::4], p[:, c, 0::4], subtract
  tensor_tensor h, p[:, c, 3::4], p[:, c, 1::4], subtract
  tensor_tensor area_a, w, h, multiply
  tensor_tensor w, t[:, c, 2::4], t[:, c, 0::4], subtract
  tensor_tensor h, t[:, c, 3::4], t[:, c, 1::4], subtract
  tensor_tensor area_b, w, h, multiply

  # intersection: w = max(min(x2) - max(x1), 0), h likewise
  tensor_tensor tmp, p[:, c, 2::4], t[:, c, 2::4], minimum
  tensor_tensor w, p[:, c, 0::4], t[:, c, 0::4], maximum
  tensor_tensor w, tmp, w, subtract
  activation    w, relu, w
  tensor_tensor tmp, p[:, c, 3::4], t[:, c, 3::4], minimum
  tensor_tensor h, p[:, c, 1::4], t[:, c, 1::4], maximum
  tensor_tensor h, tmp, h, subtract
  activation    h, relu, h
  tensor_tensor inter, w, h, multiply

  # union and IoU
  tensor_tensor union, area_a, area_b, add
  tensor_tensor union, union, inter, subtract
  tensor_scalar tmp, union, maximum, EPS
  tensor_tensor iou, inter, tmp, divide

  # enclosing box: W = max(max(x2) - min(x1), 0), H likewise; enclose = max(W * H, EPS)
  tensor_tensor tmp, p[:, c, 2::4], t[:, c, 2::4], maximum
  tensor_tensor w, p[:, c, 0::4], t[:, c, 0::4], minimum
  tensor_tensor w, tmp, w, subtract
  activation    w, relu, w
  tensor_tensor tmp, p[:, c, 3::4], t[:, c, 3::4], maximum
  tensor_tensor h, p[:, c, 1::4], t[:, c, 1::4], minimum
  tensor_tensor h, tmp, h, subtract
  activation    h, relu, h
  tensor_tensor tmp, w, h, multiply
  tensor_scalar tmp, tmp, maximum, EPS

  # giou = iou - (enclose - union) / enclose
  tensor_tensor union, tmp, union, subtract
  tensor_tensor union, union, tmp, divide
  tensor_tensor res, iou, union, subtract
  dma_copy out[r*128 : r*128 + 128, c*128 : c*128 + 128], res, queue=2, engine=gpsimd
.end
.end
