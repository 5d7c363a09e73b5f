#!/usr/bin/env bash
# Device run (session 12, issue 4): rms_norm bf16 x 2048 prefill shapes at 512 / 2048 / 16384 rows:
# the emitted prefill function (emitter v7/v8 code: t64x4, 2 rows per 128-thread block, row guard;
# build/kab/rms_{512,2k,16k}_em.cubin) against hand shapes (dev/kernel_ab/big_rows_variants.cu: the
# same without the guard; the emitted decode function, t256x1, which the launcher takes below 4 x SMs rows; 64-thread blocks of one row, a warp per row, 128 x 2). kernel_ab, bench ops'
# set rule, random inputs. Carry build/kab. Writes $OUT/rows_shapes.md.
set -uo pipefail
K=build/kab B=build/kab/big_rows.cubin
W=${OUT:-/tmp/kab}
mkdir -p "$W"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/rows_shapes.md"
for R in 512 2048 16384; do
  case $R in 512) E=$K/rms_512_em.cubin ;; 2048) E=$K/rms_2k_em.cubin ;; *) E=$K/rms_16k_em.cubin ;; esac
  $K/kernel_ab --rows $R --cols 2048 --rounds 7 --fill random \
    emitted=$E:fz_rms_norm_bf16_h2048_x${R}_v8:$((R / 2)):128:0:library:x,w,y \
    emitted_decode=$E:fz_rms_norm_bf16_h2048_x${R}_v8_decode:$R:256:0:library:x,w,y \
    t64x4_r2=$B:rms_t64x4_r2:$((R / 2)):128:0:library:x,w,y,i \
    t64x4=$B:rms_t64x4:$R:64:0:library:x,w,y,i \
    t32x8_r2=$B:rms_t32x8_r2:$((R / 2)):64:0:library:x,w,y,i \
    t32x8=$B:rms_t32x8_r1:$R:32:0:library:x,w,y,i \
    t128x2=$B:rms_t128x2:$R:128:0:library:x,w,y,i 2>&1 | tee -a "$W/rows_shapes.md"
done
