#!/usr/bin/env bash
# Device run (session 13, issue 4): the peer's process runs rms_norm 16384 x 2048 (and a plain copy of
# the same 134 MB) ~1.1-1.7 µs faster than bench ops and kernel_ab (session 12, 5_big_harness.md). Not the
# clocks, inputs, pooled allocation or the stream. What is left: where the buffers sit relative to each
# other, that PyTorch's peer alternates two output blocks (call i's output lives until call i + 1 has
# allocated its own), and how long the GPU idles before each sample. kernel_ab --outs / --chunk /
# --spin-us vary each; peer_ab gives the peer's reading in the same run.
# Carry build/kab (kernel_ab, big_rms8.cubin, big_rows.cubin, swq.cubin, cases_rms16384.json) and
# build/carry.tar.xz. Writes $OUT/placement.md.
set -uo pipefail
. "$(dirname "$0")/big_common.sh"  # K R C N, specs, peer_big
W=${OUT:-/tmp/kab}
mkdir -p "$W"
M="$W/placement.md"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$M"
if [ "${PEER:-1}" = 1 ]; then
  echo "## peer_ab (the peer's process)" | tee -a "$M"
  peer_big 3 | tee -a "$M"
fi
IFS=';' read -r -a VARIANTS <<< "${VARIANTS-;--outs 2;--chunk 0;--chunk 0 --outs 2;--chunk 1048576;--chunk 3146240;--spin-us 5;--spin-us 20;--spin-us 5 --outs 2}"
for opts in "${VARIANTS[@]}"; do
  echo "## kernel_ab ${opts:-(defaults)}" | tee -a "$M"
  # shellcheck disable=SC2086
  $K/kernel_ab --rows $R --cols $C --rounds ${ROUNDS:-3} $opts "${specs[@]}" 2>&1 | tee -a "$M"
done
# TRACE=1: the same under the CUPTI tracer (carry build/cupti_trace): per kernel its in-place duration and
# the gap from the spin / gate before it to its start, in the peer's process, in kernel_ab and in bench ops
# (rmsnorm 16384 x 2048, jit). Does the peer's process run the kernel faster, or start it sooner?
if [ "${TRACE:-0}" = 1 ]; then
  TRACER=$PWD/build/cupti_trace/libopfuse_cupti_trace.so
  T="env CUDA_INJECTION64_PATH=$TRACER"
  echo "## trace: peer_ab" | tee -a "$M"
  peer_big 3 CUDA_INJECTION64_PATH="$TRACER" OPFUSE_CUPTI_TRACE_OUT="$W/tr_peer.csv" |
    grep -v "^check" | tee -a "$M"
  python3 tools/kernel_trace_summary.py "$W/tr_peer.csv" --by-name --min-count 10 --after opfuse_gate | tee -a "$M"
  echo "## trace: kernel_ab" | tee -a "$M"
  $T OPFUSE_CUPTI_TRACE_OUT=$W/tr_kab.csv $K/kernel_ab --rows $R --cols $C --rounds 3 "${specs[@]}" 2>&1 | grep -v "^cupti" | tee -a "$M"
  python3 tools/kernel_trace_summary.py "$W/tr_kab.csv" --by-name --min-count 10 --after Spin | tee -a "$M"
  echo "## trace: bench ops (jit, rmsnorm 16384 x 2048)" | tee -a "$M"
  $T OPFUSE_CUPTI_TRACE_OUT=$W/tr_ops.csv build/c/opfuse bench ops --suite patterns --ops rmsnorm --rows 16384 --widths 2048 \
    --variants jit --out $W/ops 2>&1 | grep -v "^cupti" | tail -4 | tee -a "$M"
  python3 tools/kernel_trace_summary.py "$W/tr_ops.csv" --by-name --min-count 10 --after Gate | tee -a "$M"
  gzip -f "$W"/tr_*.csv
fi
