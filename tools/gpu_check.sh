#!/usr/bin/env bash
# GPU check, run on the device machine over a copy of the tree with build/cuda carried:
#   device run: bash tools/gpu_check.sh     (carry: build/cuda)
# Runs every CTest test labelled gpu (JIT kernels vs the CPU reference, aligned and unaligned),
# then compute-sanitizer memcheck on a subset, and writes logs + a JSON summary under $OUT.
# Prints a short table last. Build here first: cmake --preset cuda && cmake --build build/cuda
set -uo pipefail
OUT=${OUT:-/tmp/opfuse_gpu_out}
mkdir -p "$OUT"
BUILD=${BUILD:-build/cuda}
export OPFUSE_CACHE_DIR=${OPFUSE_CACHE_DIR:-/tmp/opfuse_cache}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/device.txt" 2>&1
DEVICE=$(head -1 "$OUT/device.txt")
echo "device: $DEVICE"

# 1. every gpu-labelled test
"$BUILD/tests/test_gpu" --gtest_output=json:"$OUT/test_gpu.json" > "$OUT/test_gpu.log" 2>&1
GPU_RC=$?
grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/test_gpu.log" | head -40

# 2. compute-sanitizer memcheck on a subset (aligned + unaligned of three kernel shapes)
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -n "$CS" ]; then
  "$CS" --tool memcheck --error-exitcode 3 "$BUILD/tests/test_gpu" \
    --gtest_filter='*add_rms_norm/*:*softmax_causal*:*generic_general_broadcast*:*rope*' > "$OUT/memcheck.log" 2>&1
  CS_RC=$?
  CS_SUMMARY=$(grep -E "ERROR SUMMARY" "$OUT/memcheck.log" | tail -1)
else
  CS_RC=127; CS_SUMMARY="compute-sanitizer not found"
fi

# 3. opfuse compile for the device arch, twice: the second run must compile nothing
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.' | sed 's/^/sm_/')
rm -rf "$OPFUSE_CACHE_DIR"
"$BUILD/opfuse" compile examples/graphs/llama_decoder_layer.ofg --arch "$ARCH" --stats --json > "$OUT/compile1.json" 2>"$OUT/compile1.err"
"$BUILD/opfuse" compile examples/graphs/llama_decoder_layer.ofg --arch "$ARCH" --stats --json > "$OUT/compile2.json" 2>"$OUT/compile2.err"

PASSED=$(grep -c '^\[       OK \]' "$OUT/test_gpu.log")
FAILED=$(grep -c '^\[  FAILED  \]' "$OUT/test_gpu.log")
SKIPPED=$(grep -c '^\[  SKIPPED \]' "$OUT/test_gpu.log")
cat > "$OUT/summary.json" <<JSON
{"device": "$DEVICE", "arch": "$ARCH", "test_gpu_rc": $GPU_RC, "passed": $PASSED, "failed": $FAILED,
 "skipped": $SKIPPED, "memcheck_rc": $CS_RC, "memcheck": "$CS_SUMMARY",
 "compile_first": $(cat "$OUT/compile1.json" 2>/dev/null || echo null),
 "compile_second": $(cat "$OUT/compile2.json" 2>/dev/null || echo null)}
JSON
echo
echo "==== opfuse gpu_check on $DEVICE ($ARCH)"
printf '%-28s %s\n' "gpu tests (pass/fail/skip)" "$PASSED / $FAILED / $SKIPPED (rc $GPU_RC)"
printf '%-28s %s\n' "memcheck" "$CS_SUMMARY (rc $CS_RC)"
printf '%-28s %s\n' "compile, cold cache" "$(cat "$OUT/compile1.json" 2>/dev/null)"
printf '%-28s %s\n' "compile, warm cache" "$(cat "$OUT/compile2.json" 2>/dev/null)"
[ "$GPU_RC" = 0 ] && [ "$FAILED" = 0 ] && [ "$CS_RC" = 0 ]
