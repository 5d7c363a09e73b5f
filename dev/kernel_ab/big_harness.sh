#!/usr/bin/env bash
# Device run (session 12, issue 4): rms_norm 16384 x 2048 reads ~1.2 µs faster in the peer's process
# (34.2-34.5 µs, opfuse through libopfuse_capi.so) than in bench ops (35.35-35.6) and dev/kernel_ab
# (35.65-35.85), while at 2048 rows the harnesses agree. The same cubins in both processes:
#   1. peer_ab (the peer's Timer, gate, torch-allocated tensors on torch's stream): the emitted v8
#      kernel, a 16-byte copy of the same bytes, an empty kernel (the event floor there);
#   2. kernel_ab (spin rule) with const / random inputs, cudaMalloc / pooled buffers, non-blocking /
#      legacy stream.
# Carry build/kab (kernel_ab, big_rms8.cubin, big_rows.cubin, swq.cubin, cases_rms16384.json) and
# build/carry.tar.xz. Writes $OUT/big_harness.md.
set -uo pipefail
K=build/kab
W=${OUT:-/tmp/kab}
mkdir -p "$W"
[ -f build/c/libopfuse_capi.so ] ||
  { mkdir -p build/c && python3 -c "import tarfile; tarfile.open('build/carry.tar.xz').extractall('build/c')"; }
R=16384 C=2048 N=$((16384 * 2048))
M="$W/big_harness.md"
# CLOCKS=1: nvidia-smi samples SM / memory clocks and power every 50 ms throughout (clocks.csv), each
# phase's start time printed, to see whether the two processes run the GPU at different clocks.
if [ "${CLOCKS:-0}" = 1 ]; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv,noheader -lms 50 > "$W/clocks.csv" 2>&1 &
  SMI=$!
  trap 'kill $SMI 2>/dev/null' EXIT
fi
phase() { echo "phase $1 $(date +%H:%M:%S.%N | cut -c1-12)" | tee -a "$M"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$M"
echo "## peer_ab (the peer's process)" | tee -a "$M"
phase peer_ab
rm -rf /tmp/ind_bh
TORCHINDUCTOR_CACHE_DIR=/tmp/ind_bh timeout 300 python3 dev/kernel_ab/peer_ab.py --cases $K/cases_rms16384.json \
  --id 'patterns/rmsnorm/bf16/rows=16384/h=2048' --opfuse-lib build/c/libopfuse_capi.so --rounds 5 --rotate-order \
  --ours "v8=$K/big_rms8.cubin:fz_rms_norm_bf16_h2048_x16384_v8:$((R / 2)):128:x,w,y" \
  --ours "copy_v1=$K/big_rows.cubin:copy_v1:$((N / 8 / 256)):256:x,y,N" \
  --ours "empty=$K/swq.cubin:empty_k:1:32:x,w,y,N" --unchecked copy_v1 --unchecked empty 2>&1 | grep -v Warning | tee -a "$M"
specs=(
  v8=$K/big_rms8.cubin:fz_rms_norm_bf16_h2048_x16384_v8:$((R / 2)):128:0:library:x,w,y
  copy_v1=$K/big_rows.cubin:copy_v1:$((N / 8 / 256)):256:0:library:x,y,N
  empty=$K/swq.cubin:empty_k:1:32:0:library:x,w,y,N
)
for opts in "" "--fill random" "--pool" "--stream legacy" "--fill random --pool --stream legacy"; do
  echo "## kernel_ab ${opts:-(defaults)}" | tee -a "$M"
  phase "kernel_ab ${opts:-defaults}"
  $K/kernel_ab --rows $R --cols $C --rounds 5 $opts "${specs[@]}" 2>&1 | tee -a "$M"
done
