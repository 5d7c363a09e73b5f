#!/usr/bin/env bash
# Where a row kernel's instructions go, per SASS line: Nsight Compute's SourceCounters section for
# the first launch of the fused kernel of each case (`opfuse bench ops --quick`, clocks left alone),
# exported as the source page (SASS with executed instructions per line), then summarised by
# tools/sass_profile.py: the hottest lines and the executed instructions per opcode. Carry
# build/carry.tar.xz (tools/build_carry.sh).
#   device: CASES="layernorm:2000x3203:jit softmax_plain:2000x3203:library" bash tools/sass_profile.sh
# A case is OP:ROWSxCOLS:VARIANT, as tools/row_profile.sh's. Env: DTYPE (default bf16), TOP (lines
# listed per case, default 40). Out: $OUT/sass_profile.tgz (the CSVs), the summaries printed.
set -uo pipefail
. "$(dirname "$0")/device_common.sh"
opfuse_device_work sass_profile || exit 1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "sass_profile: no ncu on this machine"; exit 2; }
for c in ${CASES:?CASES=\"op:RxC:variant ...\"}; do
  IFS=: read -r op shape variant <<< "$c"
  tag="${op}_${shape}_${variant}"
  t=$SECONDS
  timeout 240 "$NCU" --clock-control none --kernel-name-base function -k "$FUSED_KERNEL_FILTER" -c 1 --section SourceCounters \
    --import-source no -f -o "$W/$tag" "$B/opfuse" bench ops --quick --shapes "$shape" --dtype "${DTYPE:-bf16}" \
    --ops "$op" --variants "$variant" --no-copy-reference --out "$W/bench_$tag" > "$W/ncu_${tag}.log" 2>&1
  echo "$tag: ncu rc $? ($((SECONDS - t)) s)"
  "$NCU" -i "$W/$tag.ncu-rep" --page source --csv --print-source sass > "$W/sass_$tag.csv" 2> "$W/sass_${tag}_stderr.log"
  python3 tools/sass_profile.py "$W/sass_$tag.csv" --top "${TOP:-40}" > "$W/summary_$tag.txt" 2>&1
  echo "== $tag"; cat "$W/summary_$tag.txt"
done
rm -f "$W"/*.ncu-rep
tar -C "$W" -czf "${OUT:-/tmp/sass_profile}/sass_profile.tgz" .
rm -rf "$W"
