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
. "$(dirname "$0")/big_common.sh"  # K R C N, specs, peer_big
W=${OUT:-/tmp/kab}
mkdir -p "$W"
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
peer_big 5 | tee -a "$M"
for opts in "" "--fill random" "--pool" "--stream legacy" "--fill random --pool --stream legacy"; do
  echo "## kernel_ab ${opts:-(defaults)}" | tee -a "$M"
  phase "kernel_ab ${opts:-defaults}"
  $K/kernel_ab --rows $R --cols $C --rounds 5 $opts "${specs[@]}" 2>&1 | tee -a "$M"
done
