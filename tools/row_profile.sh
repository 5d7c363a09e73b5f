#!/usr/bin/env bash
# Where a fused row kernel's time goes, one Nsight Compute run per case: `opfuse bench ops` for one
# op, shape and variant under ncu (clocks left alone), the bench's own kernels (copy, fill, gate, L2
# demote) excluded, the first launch of the fused kernel profiled. Carry build/carry.tar.xz
# (tools/build_carry.sh).
#   device: CASES="logsumexp:12192x11008:jit softmax:25214x5323:library copy:25214x5323" bash tools/row_profile.sh
# A case is OP:ROWSxCOLS:VARIANT (VARIANT library or jit), or copy:ROWSxCOLS (the same-size copy of a
# bf16 rows x cols tensor: opfuse bench ops' Copy16Kernel for rmsnorm at that shape).
# Env: DTYPE (default bf16). Out: $OUT/row_profile.tgz (ncu CSVs) and $OUT/row_profile.json; a table
# last (tools/row_profile.py).
set -uo pipefail
. "$(dirname "$0")/device_common.sh"
opfuse_device_work row_profile || exit 1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "row_profile: no ncu on this machine"; exit 2; }
METRICS="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,smsp__inst_executed.sum"
METRICS+=",smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active"
METRICS+=",launch__registers_per_thread,launch__block_size,launch__grid_size,launch__shared_mem_per_block_dynamic"
METRICS+=",launch__cluster_dim_x,smsp__inst_executed_pipe_xu.sum,smsp__average_warp_latency_per_inst_issued.ratio"
METRICS+=",regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio"
for c in ${CASES:?CASES=\"op:RxC:variant ...\"}; do
  IFS=: read -r op shape variant <<< "$c"
  tag="${op}_${shape}_${variant:-copy}"
  if [ "$op" = copy ]; then
    args=(--ops rmsnorm --variants library) kfilter="regex:^Copy16Kernel$" count=3
  else
    args=(--ops "$op" --variants "$variant" --no-copy-reference) kfilter=$FUSED_KERNEL_FILTER count=1
  fi
  t=$SECONDS
  timeout 240 "$NCU" --clock-control none --kernel-name-base function -k "$kfilter" -c "$count" --csv --page raw \
    --metrics "$METRICS" "$B/opfuse" bench ops --quick --shapes "$shape" --dtype "${DTYPE:-bf16}" "${args[@]}" \
    --out "$W/bench_$tag" > "$W/ncu_$tag.csv" 2> "$W/ncu_${tag}_stderr.log"
  echo "$tag: ncu rc $? ($((SECONDS - t)) s)"
done
python3 tools/row_profile.py "$W" --json "${OUT:-/tmp}/row_profile.json" > "$W/table.md" 2>&1
echo "row_profile.py rc $?"
tar -C "$W" -czf "${OUT:-/tmp/row_profile}/row_profile.tgz" .
cat "$W/table.md"
rm -rf "$W"
