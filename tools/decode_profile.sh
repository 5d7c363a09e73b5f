#!/usr/bin/env bash
# Where one decode step's time goes (issue 32 item 3), one device call: `opfuse generate` on the GPU
# under Nsight Compute (clocks left alone; device time and DRAM bytes of every kernel), then the
# last decode step's kernels summed per kernel function beside the weight bytes a step must read and
# the step's wall-clock time (tools/decode_profile.py). Carry build/carry.tar.xz (tools/build_carry.sh).
#   device: BATCHES="1 8" bash tools/decode_profile.sh
# Env: BATCHES (default "1 8"), MODEL (a model directory; default the built-in TinyLlama-1.1B shapes),
# TP (tensor parallel, default 1: rank 0's GPU is profiled).
# Out: $OUT/decode_profile_b<B>.json, $OUT/decode_profile.tgz (the CSVs); tables last.
set -uo pipefail
. "$(dirname "$0")/device_common.sh"
opfuse_device_work decode_profile || exit 1
export NCCL_NVLS_ENABLE=0
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "decode_profile: no ncu on this machine"; exit 2; }
model_args=()
[ -n "${MODEL:-}" ] && model_args=(--model "$MODEL")
for b in ${BATCHES:-1 8}; do
  t=$SECONDS
  timeout 400 "$NCU" --clock-control none --csv --page raw --log-file "$W/ncu_b$b.csv" \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    "$B/opfuse" generate --backend cuda "${model_args[@]}" --ids 1,450,4996,17354 --max-new-tokens 3 --batch "$b" \
    --tensor-parallel "${TP:-1}" > "$W/ncu_b$b.stdout" 2>&1
  echo "batch $b: ncu rc $? ($((SECONDS - t)) s)"
done
# Each step's wall-clock time and kernel count, from a longer run without the profiler
for b in ${BATCHES:-1 8}; do
  "$B/opfuse" generate --backend cuda "${model_args[@]}" --ids 1,450,4996,17354 --max-new-tokens 64 --batch "$b" \
    --tensor-parallel "${TP:-1}" > "$W/gen64_b$b.log" 2>&1
  ms=$(grep -m1 -oE 'decode [0-9.]+ ms/token' "$W/gen64_b$b.log" | grep -oE '[0-9.]+')
  k=$(grep -m1 -oE '[0-9]+ kernels/step' "$W/gen64_b$b.log" | grep -oE '[0-9]+')
  wbytes=$(python3 tools/decode_profile_weights.py "${MODEL:-builtin}" "${TP:-1}")
  python3 tools/decode_profile.py "$W/ncu_b$b.csv" --kernels "$k" --ms-per-token "$ms" --weight-bytes "$wbytes" \
    --json "$OUT/decode_profile_b$b.json" > "$W/table_b$b.md" 2>&1
  echo "decode_profile.py batch $b rc $?"
done
tar -C "$W" -czf "$OUT/decode_profile.tgz" .
for b in ${BATCHES:-1 8}; do echo; echo "## batch $b"; cat "$W/table_b$b.md"; done
