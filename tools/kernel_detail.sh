#!/usr/bin/env bash
# Nsight Compute's full section set (clocks left alone) for the kernels of one command that match a
# regex: launch shape, occupancy, throughput, warp stall reasons — what a kernel's fixed cost is made
# of, where a per-kernel time (tools/decode_profile.sh) alone does not say. Carry build/carry.tar.xz.
#   device: KERNEL='regex:AttnGeneral' SKIP=40 COUNT=2 bash tools/kernel_detail.sh -- build/c/opfuse generate --backend cuda --max-new-tokens 3
# The command's paths may use $B (build/c). Env: KERNEL (ncu -k filter, required), SKIP (launches
# of matching kernels skipped first, default 0), COUNT (profiled, default 1), NAME (report file stem,
# default detail). Out: $OUT/NAME.ncu-rep, $OUT/NAME.txt (the details page); the details last.
set -uo pipefail
. "$(dirname "$0")/device_common.sh"
opfuse_device_work "${NAME:-detail}" || exit 1
export NCCL_NVLS_ENABLE=0
[ "${1:-}" = -- ] && shift
[ $# -gt 0 ] && [ -n "${KERNEL:-}" ] || { echo "kernel_detail: usage: KERNEL=regex:NAME bash tools/kernel_detail.sh -- COMMAND..."; exit 2; }
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "kernel_detail: no ncu on this machine"; exit 2; }
rep="${OUT:-/tmp}/${NAME:-detail}"
timeout 500 "$NCU" --clock-control none --set full -k "$KERNEL" -s "${SKIP:-0}" -c "${COUNT:-1}" -f -o "$rep" "$@" \
  > "$W/command.log" 2>&1
echo "ncu rc $? ($(tail -1 "$W/command.log"))"
"$NCU" --import "$rep.ncu-rep" --page details --print-details all > "$rep.txt" 2>&1
# the lines that say where the time goes; the whole page is in $rep.txt
grep -E '^  [A-Za-z].*\(|Duration|Elapsed Cycles|DRAM Throughput|Memory Throughput|Registers Per|Grid Size|Block Size|Dynamic Shared|Achieved Occupancy|Theoretical Occupancy|Waves Per SM|Warp Cycles Per Issued|Issued Warp|No Eligible|Stall|L2 Hit|Executed Ipc|One or More' \
  "$rep.txt" | grep -vE '^\s*$' | cut -c1-150 | head -150
