#!/usr/bin/env bash
# Sliding-window attention on the GPU (issue 26), one device call, from the repository root with
# build/carry.tar.xz carried (tools/build_carry.sh):
#   1. the kv_attention GPU tests (window cases included: decode on the general kernel, prefill on
#      the tensor-core kernel, cache rows older than the window poisoned) and the attention tests;
#   2. compute-sanitizer memcheck on KvAttentionGpu.MatchesCpuReference;
#   3. tools/family_gpu_check.sh: every family against transformers, the windowed Mistral / Qwen2
#      models with a 90-token prompt (tensor-core prefill with the window, decode past it).
# Logs under $OUT/work (packed into $OUT/gpu_check.tgz by gpu_check.sh); a short table last.
set -uo pipefail
source tools/device_common.sh
opfuse_device_setup || exit 1
FINAL=${OUT:-/tmp/window_out}
mkdir -p "$FINAL/work/fam"
BUILD=$B NEW_TOKENS=${NEW_TOKENS:-17} OUT=$FINAL/work/fam bash tools/family_gpu_check.sh > "$FINAL/work/family.log" 2>&1
fam_rc=$?
OUT=$FINAL BUILD=$B STAGES=tests,memcheck TEST_FILTER='KvAttentionGpu.*:*LibraryAttention*' \
  MEMCHECK_FILTER='KvAttentionGpu.MatchesCpuReference' bash tools/gpu_check.sh
gc_rc=$?
echo "== families (tools/family_gpu_check.sh, rc $fam_rc)"
grep -E "^== |^hf_compare:|^  [a-z_]+ +(ok|FAIL)" "$FINAL/work/family.log" | head -60
exit $(( fam_rc != 0 || gc_rc != 0 ))
