#!/usr/bin/env bash
# Decode-step check on the device machine (issue 6's decode target): GPU tests of the GEMV and the
# executor, opfuse bench e2e of the default build beside ablations in the same call (prev = the
# step without the norm prologue / RoPE epilogue; no_norm, no_rope; base = cuBLASLt per matmul, no
# PDL), and the per-kernel device time of one decode
# step under ncu (--clock-control none: clocks left alone), default vs prev.
#   here:   bash tools/build_carry.sh
#   device: bash tools/decode_check.sh          (carry: build/carry.tar.xz)
# Env: TEST_FILTER (gtest filter), MEMCHECK_FILTER ("" skips memcheck), NCU=0 skips ncu, TRACE=1 adds the
# in-place kernel times of the replayed decode graph (CUPTI tracer, carry build/cupti_trace too), E2E_CASES,
# E2E_RUNS, STRATS, HF=1 adds tools/hf_e2e_bench.py (transformers eager / static-cache compiled) and
# tools/hf_compare.py (HF=compare: only the latter). AB="ENV=a;ENV=b;" replaces the fixed ablations by always_fuse under each setting
# (';'-separated, an empty one = the default), ROUNDS times in turn; E2E_CASES takes ';'-separated cases.
# Everything lands under $OUT/work, packed into $OUT/decode_check.tgz (the device tool returns at most
# 8 files); summary.txt stays beside it and is printed last.
set -uo pipefail
FINAL_OUT=${OUT:-/tmp/decode_out}
OUT=$FINAL_OUT/work
mkdir -p "$OUT"
. "$(dirname "$0")/device_common.sh"
opfuse_device_setup || exit 1
DEV=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
echo "device: $DEV" | tee "$OUT/device.txt"
declare -a SUMMARY

t=$SECONDS
"$B/tests/test_gpu" --gtest_filter="${TEST_FILTER:-Gemv*:ExecutorTest.*:ExecutorVariant*:*KvAttention*}" > "$OUT/tests.log" 2>&1
rc=$?
SUMMARY+=("tests: $(grep -c '^\[       OK \]' "$OUT/tests.log") ok, $(grep -c '^\[  FAILED  \]' "$OUT/tests.log") failed (rc $rc, $((SECONDS - t)) s)")
grep '^\[  FAILED  \]' "$OUT/tests.log" | sort -u | head -20

MF=${MEMCHECK_FILTER-Gemv*:ExecutorTest.CudaGraph*:*KvAttention*Graph*}
if [ -n "$MF" ]; then
  t=$SECONDS
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  "$CS" --tool memcheck --error-exitcode 3 "$B/tests/test_gpu" --gtest_filter="$MF" > "$OUT/memcheck.log" 2>&1
  rc=$?
  SUMMARY+=("memcheck ($MF): $(grep -E "ERROR SUMMARY" "$OUT/memcheck.log" | tail -1) (rc $rc, $(grep -c '^\[       OK \]' "$OUT/memcheck.log") tests, $((SECONDS - t)) s)")
fi

M=/tmp/opfuse_tinyllama_bf16
"$B/opfuse" init-weights --config tinyllama-1.1b --dtype bf16 --out "$M" > "$OUT/init.log" 2>&1 || { cat "$OUT/init.log"; exit 1; }
CASES=${E2E_CASES:-}   # empty: bench e2e's default cases; several: separated by ';'
CASE_ARGS=()
if [ -n "$CASES" ]; then IFS=';' read -ra _cs <<< "$CASES"; for c in "${_cs[@]}"; do CASE_ARGS+=(--cases "$c"); done; fi
RUNS=${E2E_RUNS:-3}
e2e() {  # tag, env..., strategies
  local tag=$1; shift
  local strats=$1; shift
  env "$@" "$B/opfuse" bench e2e --model "$M" --backend cuda --strategies "$strats" "${CASE_ARGS[@]}" --runs "$RUNS" \
    --output "$OUT/e2e_$tag.json" > "$OUT/e2e_$tag.md" 2> "$OUT/e2e_${tag}_stderr.log"
  local rc=$?
  SUMMARY+=("e2e $tag (rc $rc): $(grep -E '^\| (never|always|smart)' "$OUT/e2e_$tag.md" | awk -F'|' '{printf "%s %s prefill %s ms, %s ms/token, %s kernels; ", $2, $3, $4, $5, $8}')")
}
t=$SECONDS
e2e new "${STRATS:-never,always,smart}"
# Ablations, always_fuse, same run: the decode step before its fusions (no norm prologue, separate KV write +
# combine kernels), each of those two alone, and the step before the GEMV (cuBLASLt, no PDL).
if [ -n "${AB:-}" ]; then
  # A/B instead of the fixed ablations: AB="ENV=a ENV2=b;ENV=c" (';' between settings), always_fuse each,
  # ROUNDS times in turn (machine drift spreads over all settings alike).
  IFS=';' read -ra AB_CFGS <<< "$AB"
  for round in $(seq 1 "${ROUNDS:-1}"); do
    i=0
    for cfg in "${AB_CFGS[@]}"; do
      i=$((i + 1))
      # shellcheck disable=SC2086
      e2e "ab${i}_r${round}" always $cfg
      SUMMARY[-1]="[$cfg] ${SUMMARY[-1]}"
    done
  done
else
e2e prev always OPFUSE_DISABLE=matmul_norm,matmul_rope
e2e no_norm always OPFUSE_DISABLE=matmul_norm
e2e no_rope always OPFUSE_DISABLE=matmul_rope
e2e base always OPFUSE_DISABLE=gemv,fuse_matmul,pdl,matmul_norm,matmul_rope
fi
if [ "${HF:-0}" = 1 ] || [ "${HF:-0}" = compare ]; then
  t=$SECONDS
  if [ "$HF" = 1 ]; then
    timeout ${HF_TIMEOUT:-300} python3 tools/hf_e2e_bench.py --model "$M" --runs "$RUNS" --output "$OUT/hf_e2e.json" > "$OUT/hf_e2e.md" 2> "$OUT/hf_e2e_stderr.log"
    SUMMARY+=("hf_e2e_bench rc $? ($((SECONDS - t)) s): $(grep -E '^\| hf' "$OUT/hf_e2e.md" | awk -F'|' '{printf "%s %s %s ms/token; ", $2, $3, $5}')")
  fi
  t=$SECONDS
  timeout ${HF_TIMEOUT:-300} python3 tools/hf_compare.py --opfuse "$B/opfuse" --model "$M" --dtype bf16 --backend cuda \
    --strategies never,always,smart --new-tokens 33 --out-dir "$OUT/hfc" > "$OUT/hf_compare.md" 2> "$OUT/hf_compare_stderr.log"
  SUMMARY+=("hf_compare rc $? ($((SECONDS - t)) s): $(grep -E '^  (never|always|smart)' "$OUT/hf_compare.md" | tr -s ' ' | tr '\n' ';')")
fi
SUMMARY+=("e2e took $((SECONDS - t)) s")

# Kernels per decode step of always_fuse in e2e_<tag>.json (the smallest over its cases); empty if unknown.
kernels_per_step() {
  python3 -c "import json; d=json.load(open('$OUT/e2e_$1.json')); r=d['results']['always_fuse']; print(min(v['kernels_per_decode_step'] for v in r.values()))" 2>/dev/null
}

if [ "${NCU:-1}" = 1 ]; then
  NCU_BIN=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  for tag in new prev; do
    envs=""
    [ "$tag" = prev ] && envs="OPFUSE_DISABLE=matmul_norm,matmul_rope"
    K=$(kernels_per_step "$tag")
    [ -n "$K" ] || { SUMMARY+=("ncu $tag: no kernel count from e2e_$tag.json"); continue; }
    t=$SECONDS
    env $envs timeout 300 "$NCU_BIN" --clock-control none --metrics gpu__time_duration.sum --csv \
      "$B/opfuse" generate --model "$M" --backend cuda --strategy always --ids 1,2,3,4,5,6,7,8 --max-new-tokens 3 \
      > "$OUT/ncu_$tag.csv" 2> "$OUT/ncu_${tag}_stderr.log"
    python3 tools/ncu_summary.py "$OUT/ncu_$tag.csv" --last "$K" --json "$OUT/ncu_$tag.json" > "$OUT/ncu_$tag.md" 2>&1
    SUMMARY+=("ncu $tag: $(tail -1 "$OUT/ncu_$tag.md") ($((SECONDS - t)) s)")
    head -14 "$OUT/ncu_$tag.md"
  done
fi

if [ "${TRACE:-0}" = 1 ]; then
  # In-place kernel times of the replayed decode graph: the CUPTI tracer (dev/cupti_trace; nsys is
  # not on the device machine) over `opfuse generate`, summarised by tools/kernel_trace_summary.py.
  K=$(kernels_per_step new)
  LIB=$PWD/build/cupti_trace/libopfuse_cupti_trace.so
  if [ ! -f "$LIB" ]; then
    SUMMARY+=("trace: $LIB missing (build it with dev/cupti_trace/build.sh and carry build/cupti_trace)")
  elif [ -z "$K" ]; then
    SUMMARY+=("trace: no kernel count from e2e_new.json")
  else
    t=$SECONDS
    CUDA_INJECTION64_PATH=$LIB OPFUSE_CUPTI_TRACE_OUT=$OUT/trace.csv timeout 300 "$B/opfuse" generate --model "$M" --backend cuda \
      --strategy always --ids "$(seq -s, 1 128)" --max-new-tokens 24 > "$OUT/trace_generate.log" 2>&1
    python3 tools/kernel_trace_summary.py "$OUT/trace.csv" --per-step "$K" --first 12 --json "$OUT/trace.json" > "$OUT/trace.md" 2>&1
    SUMMARY+=("trace: $(grep -E 'steps of' "$OUT/trace.md") ($((SECONDS - t)) s)")
    cat "$OUT/trace.md"
  fi
fi

{ echo "== summary ($DEV)"; for s in "${SUMMARY[@]}"; do echo "$s"; done; } > "$FINAL_OUT/summary.txt"
tar -C "$OUT" -czf "$FINAL_OUT/decode_check.tgz" .
echo
cat "$FINAL_OUT/summary.txt"
