# giou_gpsimd.s — the GIoU of programs/giou.s (same inputs, same output bit for bit), computed by the
# 8 GpSimd cores instead of the Vector and Scalar engines (docs/gpsimd.md#giou).
#
# Inputs: preds and targets, f32[1024, 1024]; each row holds 256 boxes of 4 corners (x1, y1, x2, y2).
# Output: out f32[1024, 256], the GIoU of each (pred, target) pair.
#
# Tiling: 8 row tiles of 128 rows (one row per partition, all 1024 floats of it), loaded by DMA into
# SBUF slots that alternate (the next tile loads while the cores work on this one). One gpsimd_call
# per tile runs the program on the 8 cores: core c owns partitions [16c, 16c + 16), its 16 rows. A
# core streams its rows through TCM two at a time (tcm_load of 2048 floats of preds and of targets:
# 8 KiB each, the whole 16 KiB tcm_malloc pool; 60 cycles + 64 bytes a cycle from its own
# partitions), splits 16 boxes at a time into corner planes with two rounds of vunzip, computes the
# 16 GIoUs in giou.s's order of fp32 operations (vdiv is an IEEE divide, vmax(x, 0) the relu), and
# stores them over the preds already read (result k at byte 64k, boxes k at 256k), then the pair's
# 512 results go back to its partitions of the output tile (tcm_store), which a DMA writes to out.
# The loop is rotated: the next 16 boxes load while the last divide finishes. The stores are issued
# by the Scalar engine (idle here), so the Sync engine's loads of the next tile never wait behind them.
.kernel giou_gpsimd
.const EPS = 1e-5
.const ROWS = 1024
.const COLS = 1024

.hbm  preds   f32[ROWS, COLS]      in
.hbm  targets f32[ROWS, COLS]      in
.hbm  out     f32[ROWS, COLS / 4]  out

.sbuf p f32[128, 2, COLS]          # two slots of predicted boxes
.sbuf t f32[128, 2, COLS]          # two slots of target boxes
.sbuf o f32[128, 2, COLS / 4]      # two slots of results

.gpsimd giou
    coreid r1
    mul r2, r1, 16          # this core's first row (partition) of the tile
    add r3, r2, 16
    talloc r10, 2 * COLS * 4    # two rows of preds (then their results)
    talloc r11, 2 * COLS * 4    # two rows of targets
    lif r9, EPS
    vbcast f32, v30, r9     # EPS in every lane; v31 stays zero
rows:
    mul r4, r2, COLS
    tcm_load r10, in0, r4, 2 * COLS
    tcm_load r11, in1, r4, 2 * COLS
    mov r6, r10
    mov r7, r11
    mov r8, r10
    li r5, COLS / 32        # 16 boxes a step, two rows
    vld v0, r6, 0           # the first 16 boxes of preds, interleaved x1 y1 x2 y2
    vld v1, r6, 64
    vld v2, r6, 128
    vld v3, r6, 192
    vld v4, r7, 0           # and of targets
    vld v5, r7, 64
    vld v6, r7, 128
    vld v7, r7, 192
box:
    vunzip f32, v8, v0, v1, 0       # x1 x2 of boxes 0..7
    vunzip f32, v9, v0, v1, 1       # y1 y2 of boxes 0..7
    vunzip f32, v10, v2, v3, 0      # boxes 8..15
    vunzip f32, v11, v2, v3, 1
    vunzip f32, v12, v8, v10, 0     # a.x1
    vunzip f32, v13, v8, v10, 1     # a.x2
    vunzip f32, v14, v9, v11, 0     # a.y1
    vunzip f32, v15, v9, v11, 1     # a.y2
    vunzip f32, v8, v4, v5, 0
    vunzip f32, v9, v4, v5, 1
    vunzip f32, v10, v6, v7, 0
    vunzip f32, v11, v6, v7, 1
    vunzip f32, v16, v8, v10, 0     # b.x1
    vunzip f32, v17, v8, v10, 1     # b.x2
    vunzip f32, v18, v9, v11, 0     # b.y1
    vunzip f32, v19, v9, v11, 1     # b.y2
    # areas
    vsub f32, v20, v13, v12
    vsub f32, v21, v15, v14
    vmul f32, v20, v20, v21         # area_a
    vsub f32, v21, v17, v16
    vsub f32, v22, v19, v18
    vmul f32, v21, v21, v22         # area_b
    # intersection
    vmin f32, v22, v13, v17
    vmax f32, v23, v12, v16
    vsub f32, v22, v22, v23
    vmax f32, v22, v22, v31         # w
    vmin f32, v23, v15, v19
    vmax f32, v24, v14, v18
    vsub f32, v23, v23, v24
    vmax f32, v23, v23, v31         # h
    vmul f32, v22, v22, v23         # inter
    # union and IoU
    vadd f32, v23, v20, v21
    vsub f32, v23, v23, v22         # union
    vmax f32, v24, v23, v30
    vdiv f32, v24, v22, v24         # iou
    # enclosing box
    vmax f32, v25, v13, v17
    vmin f32, v26, v12, v16
    vsub f32, v25, v25, v26
    vmax f32, v25, v25, v31         # W
    vmax f32, v26, v15, v19
    vmin f32, v27, v14, v18
    vsub f32, v26, v26, v27
    vmax f32, v26, v26, v31         # H
    vmul f32, v25, v25, v26
    vmax f32, v25, v25, v30         # enclose
    # giou = iou - (enclose - union) / enclose
    vsub f32, v26, v25, v23
    vdiv f32, v26, v26, v25
    add r6, r6, 256         # the next 16 boxes load while the divide runs (after the last step
    add r7, r7, 256         # they read 256 bytes past the rows: still TCM, never used)
    vld v0, r6, 0
    vld v1, r6, 64
    vld v2, r6, 128
    vld v3, r6, 192
    vld v4, r7, 0
    vld v5, r7, 64
    vld v6, r7, 128
    vld v7, r7, 192
    vsub f32, v26, v24, v26
    vst v26, r8, 0          # over preds already read
    add r8, r8, 64
    loop r5, box
    mul r4, r2, COLS / 4
    tcm_store out0, r4, r10, COLS / 2
    add r2, r2, 2
    blt r2, r3, rows
.end

.for r in 0..ROWS / 128
  dma_copy p[:, r % 2, :], preds[r*128 : r*128 + 128, :], queue=0
  dma_copy t[:, r % 2, :], targets[r*128 : r*128 + 128, :], queue=1
  gpsimd_call giou, o[:, r % 2, :], p[:, r % 2, :], in1=t[:, r % 2, :]
  dma_copy out[r*128 : r*128 + 128, :], o[:, r % 2, :], queue=2, engine=scalar
.end
