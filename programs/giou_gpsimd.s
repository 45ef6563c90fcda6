# giou_gpsimd.s — the GIoU of programs/giou.s (same inputs, same output bit for bit), computed by the
# 8 GpSimd cores instead of the Vector and Scalar engines (docs/gpsimd.md#giou).
#
# Inputs: preds and targets, f32[1024, 1024]; each row holds 256 boxes of 4 corners (x1, y1, x2, y2).
# Output: out f32[1024, 256], the GIoU of each (pred, target) pair.
#
# Tiling: 16 tiles of 128 rows x W = 512 columns (one row per partition), loaded by DMA into SBUF
# slots that alternate (the next tile loads while the cores work on this one; half rows keep the
# first load and the last store short). One gpsimd_call per tile runs the program on the 8 cores:
# core c owns partitions [16c, 16c + 16), its 16 half rows. A core streams them through TCM four at
# a time (tcm_load of BLOCK = 2048 floats of preds and of targets: 8 KiB each, the whole 16 KiB
# tcm_malloc pool, targets TGT bytes after preds; 60 cycles + 64 bytes a cycle from its own
# partitions). A step takes 16 boxes: vld4 loads 16 boxes of preds (256 bytes) as the registers of
# their x1, y1, x2 and y2, another those of targets, then giou.s's fp32 operations in giou.s's order
# (vdiv is an IEEE divide, vmax(x, 0) the relu) give 16 GIoUs, stored over the preds already read
# (step j's results at byte 64j, its boxes at 256j). The block's 512 results go back to its
# partitions of the output tile (tcm_store), which a DMA writes to out.
# The loop body holds 4 steps (the loop's own cycles shared by 4); each step loads the next step's
# boxes while its last divide runs, into the other of two register sets (v0..v7, v8..v15), so no
# step waits for a load or a divide. The last step of a block loads the 16 boxes after it (TCM, 256
# bytes of it past the pool; never used). The stores are issued by the Scalar engine (idle here), so
# the Sync engine's loads of the next tile never wait behind them.
.kernel giou_gpsimd
.const EPS = 1e-5
.const ROWS = 1024
.const COLS = 1024
.const W = 512                      # columns of a tile (a call's share of a row: 128 boxes)
.const BLOCK = 2048                 # floats of a TCM block: BLOCK / W rows of preds (8 KiB), as many of targets
.const TGT = BLOCK * 4              # the targets' TCM block, right after the preds'

.hbm  preds   f32[ROWS, COLS]      in
.hbm  targets f32[ROWS, COLS]      in
.hbm  out     f32[ROWS, COLS / 4]  out

.sbuf p f32[128, 2, W]             # two slots of predicted boxes
.sbuf t f32[128, 2, W]             # two slots of target boxes
.sbuf o f32[128, 2, W / 4]         # two slots of results

.gpsimd giou
    coreid r1
    mul r2, r1, 16          # this core's first row (partition) of the tile
    add r3, r2, 16
    talloc r10, TGT         # BLOCK / W rows of preds (then their results)
    talloc r11, TGT         # as many rows of targets: at r10 + TGT
    lif r9, EPS
    vbcast f32, v30, r9     # EPS in every lane; v31 stays zero
rows:
    mul r4, r2, W
    tcm_load r10, in0, r4, BLOCK
    tcm_load r11, in1, r4, BLOCK
    mov r6, r10             # the boxes of the next steps (preds; targets at r6 + TGT)
    mov r8, r10             # where their results go
    li r5, BLOCK / (64 * 4)     # 4 steps of 16 boxes a trip
    vld4 f32, v0, r6, 0
    vld4 f32, v4, r6, TGT
box:
    # step 0: boxes 0..15 of the 64 in v0, v1, v2, v3, v4, v5, v6, v7
    vsub f32, v20, v2, v0
    vsub f32, v21, v3, v1
    vmul f32, v20, v20, v21         # area_a
    vsub f32, v21, v6, v4
    vsub f32, v22, v7, v5
    vmul f32, v21, v21, v22         # area_b
    vmin f32, v22, v2, v6
    vmax f32, v23, v0, v4
    vsub f32, v22, v22, v23
    vmax f32, v22, v22, v31         # w
    vmin f32, v23, v3, v7
    vmax f32, v24, v1, v5
    vsub f32, v23, v23, v24
    vmax f32, v23, v23, v31         # h
    vmul f32, v22, v22, v23         # inter
    vadd f32, v23, v20, v21
    vsub f32, v23, v23, v22         # union
    vmax f32, v24, v23, v30
    vdiv f32, v24, v22, v24         # iou
    vmax f32, v25, v2, v6
    vmin f32, v26, v0, v4
    vsub f32, v25, v25, v26
    vmax f32, v25, v25, v31         # W
    vmax f32, v26, v3, v7
    vmin f32, v27, v1, v5
    vsub f32, v26, v26, v27
    vmax f32, v26, v26, v31         # H
    vmul f32, v25, v25, v26
    vmax f32, v25, v25, v30         # enclose
    vsub f32, v26, v25, v23
    vdiv f32, v26, v26, v25
    vld4 f32, v8, r6, 256            # the next 16 boxes, while the divide runs
    vld4 f32, v12, r6, TGT + 256
    vsub f32, v26, v24, v26         # giou
    vst v26, r8, 0
    # step 1: boxes 16..31 of the 64 in v8, v9, v10, v11, v12, v13, v14, v15
    vsub f32, v20, v10, v8
    vsub f32, v21, v11, v9
    vmul f32, v20, v20, v21         # area_a
    vsub f32, v21, v14, v12
    vsub f32, v22, v15, v13
    vmul f32, v21, v21, v22         # area_b
    vmin f32, v22, v10, v14
    vmax f32, v23, v8, v12
    vsub f32, v22, v22, v23
    vmax f32, v22, v22, v31         # w
    vmin f32, v23, v11, v15
    vmax f32, v24, v9, v13
    vsub f32, v23, v23, v24
    vmax f32, v23, v23, v31         # h
    vmul f32, v22, v22, v23         # inter
    vadd f32, v23, v20, v21
    vsub f32, v23, v23, v22         # union
    vmax f32, v24, v23, v30
    vdiv f32, v24, v22, v24         # iou
    vmax f32, v25, v10, v14
    vmin f32, v26, v8, v12
    vsub f32, v25, v25, v26
    vmax f32, v25, v25, v31         # W
    vmax f32, v26, v11, v15
    vmin f32, v27, v9, v13
    vsub f32, v26, v26, v27
    vmax f32, v26, v26, v31         # H
    vmul f32, v25, v25, v26
    vmax f32, v25, v25, v30         # enclose
    vsub f32, v26, v25, v23
    vdiv f32, v26, v26, v25
    vld4 f32, v0, r6, 512            # the next 16 boxes, while the divide runs
    vld4 f32, v4, r6, TGT + 512
    vsub f32, v26, v24, v26         # giou
    vst v26, r8, 64
    # step 2: boxes 32..47 of the 64 in v0, v1, v2, v3, v4, v5, v6, v7
    vsub f32, v20, v2, v0
    vsub f32, v21, v3, v1
    vmul f32, v20, v20, v21         # area_a
    vsub f32, v21, v6, v4
    vsub f32, v22, v7, v5
    vmul f32, v21, v21, v22         # area_b
    vmin f32, v22, v2, v6
    vmax f32, v23, v0, v4
    vsub f32, v22, v22, v23
    vmax f32, v22, v22, v31         # w
    vmin f32, v23, v3, v7
    vmax f32, v24, v1, v5
    vsub f32, v23, v23, v24
    vmax f32, v23, v23, v31         # h
    vmul f32, v22, v22, v23         # inter
    vadd f32, v23, v20, v21
    vsub f32, v23, v23, v22         # union
    vmax f32, v24, v23, v30
    vdiv f32, v24, v22, v24         # iou
    vmax f32, v25, v2, v6
    vmin f32, v26, v0, v4
    vsub f32, v25, v25, v26
    vmax f32, v25, v25, v31         # W
    vmax f32, v26, v3, v7
    vmin f32, v27, v1, v5
    vsub f32, v26, v26, v27
    vmax f32, v26, v26, v31         # H
    vmul f32, v25, v25, v26
    vmax f32, v25, v25, v30         # enclose
    vsub f32, v26, v25, v23
    vdiv f32, v26, v26, v25
    vld4 f32, v8, r6, 768            # the next 16 boxes, while the divide runs
    vld4 f32, v12, r6, TGT + 768
    vsub f32, v26, v24, v26         # giou
    vst v26, r8, 128
    # step 3: boxes 48..63 of the 64 in v8, v9, v10, v11, v12, v13, v14, v15
    vsub f32, v20, v10, v8
    vsub f32, v21, v11, v9
    vmul f32, v20, v20, v21         # area_a
    vsub f32, v21, v14, v12
    vsub f32, v22, v15, v13
    vmul f32, v21, v21, v22         # area_b
    vmin f32, v22, v10, v14
    vmax f32, v23, v8, v12
    vsub f32, v22, v22, v23
    vmax f32, v22, v22, v31         # w
    vmin f32, v23, v11, v15
    vmax f32, v24, v9, v13
    vsub f32, v23, v23, v24
    vmax f32, v23, v23, v31         # h
    vmul f32, v22, v22, v23         # inter
    vadd f32, v23, v20, v21
    vsub f32, v23, v23, v22         # union
    vmax f32, v24, v23, v30
    vdiv f32, v24, v22, v24         # iou
    vmax f32, v25, v10, v14
    vmin f32, v26, v8, v12
    vsub f32, v25, v25, v26
    vmax f32, v25, v25, v31         # W
    vmax f32, v26, v11, v15
    vmin f32, v27, v9, v13
    vsub f32, v26, v26, v27
    vmax f32, v26, v26, v31         # H
    vmul f32, v25, v25, v26
    vmax f32, v25, v25, v30         # enclose
    vsub f32, v26, v25, v23
    vdiv f32, v26, v26, v25
    vld4 f32, v0, r6, 1024            # the next 16 boxes, while the divide runs
    vld4 f32, v4, r6, TGT + 1024
    vsub f32, v26, v24, v26         # giou
    vst v26, r8, 192

    add r6, r6, 1024
    add r8, r8, 256
    loop r5, box
    mul r4, r2, W / 4
    tcm_store out0, r4, r10, BLOCK / 4
    add r2, r2, BLOCK / W
    blt r2, r3, rows
.end

.for r in 0..ROWS / 128
.for c in 0..COLS / W
  dma_copy p[:, c % 2, :], preds[r*128 : r*128 + 128, c*W : c*W + W], queue=0
  dma_copy t[:, c % 2, :], targets[r*128 : r*128 + 128, c*W : c*W + W], queue=1
  gpsimd_call giou, o[:, c % 2, :], p[:, c % 2, :], in1=t[:, c % 2, :]
  dma_copy out[r*128 : r*128 + 128, c*W/4 : c*W/4 + W/4], o[:, c % 2, :], queue=2, engine=scalar
.end
.end
