#!/usr/bin/env bash
# Device run (session 12, issue 4): rms_norm bf16 16384 x 2048 row shapes against softmax and a plain
# copy of the same bytes, in one process (dev/kernel_ab, event-timed by its spin rule) and in place
# (CUPTI kernel durations). Carry build/kab (kernel_ab, big_rows.cubin, big_smx.cubin, big_rms.cubin: emitter v7, big_rms8.cubin: v8)
# and build/cupti_trace. Writes $OUT/big_rows.md.
set -uo pipefail
K=build/kab
W=${OUT:-/tmp/kab}
mkdir -p "$W"
B=$K/big_rows.cubin
R=16384 C=2048
N=$((R * C))
specs=(
  emitted=$K/big_rms.cubin:fz_rms_norm_bf16_h2048_x16384_v8:$((R / 2)):128:0:library:x,w,y
  emitted_v8=$K/big_rms8.cubin:fz_rms_norm_bf16_h2048_x16384_v8:$((R / 2)):128:0:library:x,w,y
  t64x4_r2=$B:rms_t64x4_r2:$((R / 2)):128:0:library:x,w,y,i
  t64x4_r2_p1056=$B:rms_t64x4_r2:1056:128:0:library:x,w,y,i
  t64x4_r2_p2112=$B:rms_t64x4_r2:2112:128:0:library:x,w,y,i
  t64x4=$B:rms_t64x4:$R:64:0:library:x,w,y,i
  t64x4_r4=$B:rms_t64x4_r4:$((R / 4)):256:0:library:x,w,y,i
  t64x4_r2_ef=$B:rms_t64x4_r2_ef:$((R / 2)):128:0:library:x,w,y,i
  t64x4_r2_nc=$B:rms_t64x4_r2_nc:$((R / 2)):128:0:library:x,w,y,i
  t64x4_r2_l2p=$B:rms_t64x4_r2_l2p:$((R / 2)):128:0:library:x,w,y,i
  t64x4_r2_cs=$B:rms_t64x4_r2_cs:$((R / 2)):128:0:library:x,w,y,i
  t32x8_r2=$B:rms_t32x8_r2:$((R / 2)):64:0:library:x,w,y,i
  t128x2=$B:rms_t128x2:$R:128:0:library:x,w,y,i
  t128x2_r2=$B:rms_t128x2_r2:$((R / 2)):256:0:library:x,w,y,i
  t256x1=$B:rms_t256x1:$R:256:0:library:x,w,y,i
  t32x8_r4=$B:rms_t32x8_r4:$((R / 4)):128:0:library:x,w,y,i
  t128x2_2r=$B:rms_t128x2_2r:$((R / 2)):128:0:library:x,w,y
  smx=$K/big_smx.cubin:fz_softmax_bf16_h2048_x16384_v8:$R:128:0:library:x,y
  copy_v1=$B:copy_v1:$((N / 8 / 256)):256:0:library:x,y,N
  copy_v2=$B:copy_v2:$((N / 16 / 256)):256:0:library:x,y,N
)
# SETS='1 2 4' (session 12): only the emitted v8 kernel, softmax and copy_v1, event-timed over that many
# rotated input / output sets each (bench ops takes 1 at this size: 134 MB > 2 x L2), to $W/big_rows_sets.md.
if [ -n "${SETS:-}" ]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/big_rows_sets.md"
  for k in $SETS; do
    $K/kernel_ab --rows $R --cols $C --rounds "${ROUNDS:-5}" --sets "$k" "${specs[1]}" "${specs[17]}" "${specs[18]}" 2>&1 |
      tee -a "$W/big_rows_sets.md"
  done
  exit 0
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/big_rows.md"
echo "## event-timed (kernel_ab spin rule), µs" | tee -a "$W/big_rows.md"
$K/kernel_ab --rows $R --cols $C --rounds "${ROUNDS:-5}" "${specs[@]}" 2>&1 | tee -a "$W/big_rows.md"
echo "## in place (CUPTI durations), µs" | tee -a "$W/big_rows.md"
CUDA_INJECTION64_PATH=$PWD/build/cupti_trace/libopfuse_cupti_trace.so OPFUSE_CUPTI_TRACE_OUT=/tmp/big_rows.csv \
  $K/kernel_ab --rows $R --cols $C --rounds 3 "${specs[@]}" > /dev/null 2>&1
python3 tools/kernel_trace_summary.py /tmp/big_rows.csv --by-name --min-count 10 --after 'Spin' 2>&1 | tee -a "$W/big_rows.md"
