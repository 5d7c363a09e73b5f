#!/usr/bin/env bash
# Decode-attention probe on the device machine: opfuse bench e2e (always_fuse, batch 1, short and long
# context) under attention settings given as env assignments, plus the attention kernel alone under
# ncu (--clock-control none) with its warp-state sections. Carry build/carry.tar.xz.
#   device: bash tools/attn_probe.sh "" "OPFUSE_ATTENTION_DECODE=1" ...
set -uo pipefail
mkdir -p "$OUT"
. "$(dirname "$0")/device_common.sh"
opfuse_device_setup || exit 1
M=/tmp/opfuse_tinyllama_bf16
"$B/opfuse" init-weights --config tinyllama-1.1b --dtype bf16 --out "$M" > /dev/null 2>&1 || exit 1
NCU_BIN=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
declare -a SUMMARY
i=0
for cfg in "$@"; do
  i=$((i + 1))
  env $cfg "$B/opfuse" bench e2e --model "$M" --backend cuda --strategies always --cases "[prefill=128, decode=32]" \
    --cases "[prefill=1024, decode=32]" --runs "${RUNS:-3}" --output "$OUT/e2e_$i.json" > "$OUT/e2e_$i.md" 2>&1
  SUMMARY+=("[$cfg] $(grep -E '^\| always' "$OUT/e2e_$i.md" | awk -F'|' '{printf "%s %s ms/token; ", $3, $5}')")
  if [ "${NCU:-1}" = 1 ]; then
    env $cfg timeout 120 "$NCU_BIN" --clock-control none --kernel-name regex:Attn --launch-skip 130 --launch-count 3 \
      --metrics gpu__time_duration.sum,launch__grid_size "$B/opfuse" generate --model "$M" --backend cuda --strategy always \
      --ids "$(seq -s, 1 128)" --max-new-tokens 8 > "$OUT/ncu_$i.txt" 2>&1
    SUMMARY+=("   ncu attention: $(grep -E 'gpu__time_duration.sum' "$OUT/ncu_$i.txt" | awk '{printf "%s %s, ", $(NF-1), $NF}')")
  fi
done
if [ -n "${DETAIL:-}" ]; then
  env $DETAIL timeout 200 "$NCU_BIN" --clock-control none --kernel-name regex:Attn --launch-skip 130 --launch-count 1 \
    --section SpeedOfLight --section LaunchStats --section WarpStateStats --section SchedulerStats --section Occupancy \
    "$B/opfuse" generate --model "$M" --backend cuda --strategy always --ids "$(seq -s, 1 128)" --max-new-tokens 8 \
    > "$OUT/ncu_detail.txt" 2>&1
  grep -v '^==PROF==' "$OUT/ncu_detail.txt" | grep -vE '^\s*$' | tail -80
fi
printf '%s\n' "${SUMMARY[@]}" | tee "$OUT/summary.txt"
