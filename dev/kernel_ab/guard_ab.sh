#!/usr/bin/env bash
# Device run (session 12, issue 4): emitter v8 drops the prefill row guard where static rows are a
# multiple of rows-per-block. rms_norm 2048 x 2048 (t64x4, 2 rows per block, grid 1024 x 128), v7
# (guard: build/kab/r2k_v7.cubin) against v8 (none: r2k_v8.cubin), event-timed (kernel_ab, bench ops'
# set rule). Carry build/kab. Writes $OUT/guard_ab.md.
set -uo pipefail
K=build/kab
W=${OUT:-/tmp/kab}
mkdir -p "$W"
F=fz_rms_norm_bf16_h2048_x2048_v8
specs=(v7=$K/r2k_v7.cubin:$F:1024:128:0:library:x,w,y v8=$K/r2k_v8.cubin:$F:1024:128:0:library:x,w,y)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/guard_ab.md"
$K/kernel_ab --rows 2048 --cols 2048 --rounds 7 --fill random "${specs[@]}" 2>&1 | tee -a "$W/guard_ab.md"
