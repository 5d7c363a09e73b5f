#!/usr/bin/env bash
# GPU check, run on the device machine over a copy of the tree with the binaries carried:
#   device run: BUILD=build/carry bash tools/gpu_check.sh          (carry: build/carry)
# Build here first (no GPU needed): bash tools/build_carry.sh
#
# Stages (STAGES=tests,memcheck,run,compile,bench; default all but bench):
#   tests     every gpu-labelled test: each op's library kernel, each fused library kernel, attention,
#             each JIT pattern, the executor under every variant — all vs the CPU reference, poisoned
#             outputs, fresh signed random inputs, odd widths, unaligned pointers
#   memcheck  compute-sanitizer memcheck on a subset (library kernels, JIT kernels, executor, graphs)
#   run       `opfuse run --backend cuda --check` on the example graphs under every variant
#   compile   opfuse compile for the device arch twice: the second run must compile nothing
#   bench     `opfuse bench ops` + tools/bench_peer.py (PyTorch eager / torch.compile) + merged report
#   profile   `opfuse profile` of the TinyLlama layer (PROFILE_ARGS) + its validation table (issue 5)
#   e2e       `opfuse bench e2e` never/always/smart on TinyLlama-1.1B bf16 random weights (E2E_ARGS, E2E_RUNS),
#             tools/hf_e2e_bench.py (HF eager / static-cache compiled), tools/hf_compare.py (issue 6)
#   eval      `opfuse eval baseline` + tools/eval_peer.py (torch eager / torch.compile) + `opfuse eval run` over
#             every problem + the planted-wrong-kernel GPU tests (EvalCandidateGpu.*) (issue 7; EVAL_ARGS)
# TEST_FILTER narrows the tests stage (a gtest filter). Logs and JSON go under $OUT; a short table is printed last. Exit 0 only if every stage run passed.
set -uo pipefail
# The device tool returns only a few files from $OUT: everything is written under $OUT/work and
# packed into $OUT/gpu_check.tgz at the end (summary.json stays beside it).
FINAL_OUT=${OUT:-/tmp/opfuse_gpu_out}
OUT=$FINAL_OUT/work
mkdir -p "$OUT"
BUILD=${BUILD:-build/carry}
STAGES=${STAGES:-tests,memcheck,run,compile}
export OPFUSE_CACHE_DIR=${OPFUSE_CACHE_DIR:-/tmp/opfuse_cache}
has() { [[ ",$STAGES," == *",$1,"* ]]; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/device.txt" 2>&1
DEVICE=$(head -1 "$OUT/device.txt")
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.' | sed 's/^/sm_/')
echo "device: $DEVICE ($ARCH); stages: $STAGES"
declare -A RESULT
FAIL=0

if has tests; then
  t=$SECONDS
  "$BUILD/tests/test_gpu" --gtest_filter="${TEST_FILTER:-*}" --gtest_output=json:"$OUT/test_gpu.json" > "$OUT/test_gpu.log" 2>&1
  rc=$?
  PASSED=$(grep -c '^\[       OK \]' "$OUT/test_gpu.log")
  FAILED=$(grep -c '^\[  FAILED  \].* ms)$' "$OUT/test_gpu.log")
  SKIPPED=$(grep -c '^\[  SKIPPED \].* ms)$' "$OUT/test_gpu.log")
  grep '^\[  FAILED  \]' "$OUT/test_gpu.log" | sort -u | head -40
  RESULT[tests]="$PASSED passed / $FAILED failed / $SKIPPED skipped (rc $rc, $((SECONDS - t)) s)"
  [ "$rc" = 0 ] || FAIL=1
  # On a GPU machine a GPU test that skips did not run: nothing passed is a failure, and so is any
  # skip except the tests of the no-GPU path, which skip with "a GPU is present", and the multi-GPU
  # tests on a machine with fewer GPUs ("needs N GPUs, this machine has M").
  UNEXPECTED_SKIPS=$(grep -B3 '^\[  SKIPPED \]' "$OUT/test_gpu.log" | grep -c 'Skipped$' || true)
  EXPECTED_SKIPS=$(grep -A1 'Skipped$' "$OUT/test_gpu.log" | grep -cE 'a GPU is present|needs [0-9]+ GPUs, this machine has [0-9]+' || true)
  UNEXPECTED_SKIPS=$((UNEXPECTED_SKIPS - EXPECTED_SKIPS))
  if [ "$PASSED" = 0 ]; then
    RESULT[tests]="${RESULT[tests]}: NO GPU TEST PASSED"
    FAIL=1
  elif [ "$UNEXPECTED_SKIPS" -gt 0 ]; then
    RESULT[tests]="${RESULT[tests]}: $UNEXPECTED_SKIPS skipped on a GPU machine (see test_gpu.log)"
    FAIL=1
  fi
fi

if has memcheck; then
  t=$SECONDS
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
  if [ -n "$CS" ]; then
    "$CS" --tool memcheck --error-exitcode 3 "$BUILD/tests/test_gpu" \
      --gtest_filter="${MEMCHECK_FILTER:-*add_rms_norm/*:*softmax_causal*:*generic_general_broadcast*:*rope*:*ExecutorVariant*swiglu*:ExecutorTest.Unaligned*:ExecutorTest.CudaGraph*:ExecutorTest.JitPdlChain*:Ops/LibraryOpsGpu.Unaligned/*_bf16_*x77*:Ops/LibraryOpsGpu.Unaligned/*_bf16_513x1001*:*LibraryFusedGpu*_unaligned:*LibraryFusedGpu*split*:*LibraryFusedGpu*shifted_many*:*JitGpu*wide*:*JitGpu*odd*:*JitGpu*split*:*JitGpu*tpr96*:*ScalarMathAgree*:*LibraryAttentionTest*bf16_T17*:*LibraryAttentionTest*bf16_T1_S1000*}" \
      > "$OUT/memcheck.log" 2>&1
    rc=$?
    RESULT[memcheck]="$(grep -E "ERROR SUMMARY" "$OUT/memcheck.log" | tail -1) (rc $rc, $(grep -c '^\[       OK \]' "$OUT/memcheck.log") tests, $((SECONDS - t)) s)"
    [ "$rc" = 0 ] || FAIL=1
  else
    RESULT[memcheck]="compute-sanitizer not found"
    FAIL=1
  fi
fi

if has run; then
  : > "$OUT/run.log"
  ok=0; bad=0
  for g in examples/graphs/*.ofg; do
    for v in unfused library jit auto; do
      if "$BUILD/opfuse" run "$g" --backend cuda --variant "$v" --shape T=37 --check >> "$OUT/run.log" 2>&1; then
        ok=$((ok + 1))
      else
        bad=$((bad + 1)); echo "FAILED: opfuse run $g --variant $v" | tee -a "$OUT/run.log"
      fi
    done
  done
  RESULT[run]="$ok ok / $bad failed (opfuse run --backend cuda --check, every example x variant)"
  [ "$bad" = 0 ] || FAIL=1
fi

if has compile; then
  # The decoder layer with the matmul fusions off (OPFUSE_DISABLE=fuse_matmul): by default its norms and
  # SwiGLU join the matmuls (library kernels) and nothing is left for the JIT to compile. The cold run
  # must compile kernels, the warm one none.
  rm -rf "$OPFUSE_CACHE_DIR.compile"
  for n in 1 2; do
    OPFUSE_DISABLE=fuse_matmul OPFUSE_CACHE_DIR="$OPFUSE_CACHE_DIR.compile" "$BUILD/opfuse" compile examples/graphs/llama_decoder_layer.ofg \
      --arch "$ARCH" --stats --json > "$OUT/compile$n.json" 2>"$OUT/compile$n.err"
  done
  RESULT[compile]="cold: $(cat "$OUT/compile1.json" 2>/dev/null | head -c 300) | warm: $(cat "$OUT/compile2.json" 2>/dev/null | head -c 300)"
  python3 - "$OUT/compile1.json" "$OUT/compile2.json" <<'PY' || { RESULT[compile]+=" — FAILED: the cold run compiled nothing or the warm run compiled again"; FAIL=1; }
import json, sys
cold, warm = (json.load(open(f)) for f in sys.argv[1:3])
sys.exit(0 if cold.get("compiles", 0) > 0 and warm.get("compiles", 1) == 0 else 1)
PY
fi

if has bench; then
  t=$SECONDS
  mkdir -p "$OUT/bench"
  "$BUILD/opfuse" bench ops --out "$OUT/bench" ${BENCH_ARGS:-} > "$OUT/bench/bench_stdout.md" 2> "$OUT/bench/bench_stderr.log"
  rc=$?
  tail -c 2000 "$OUT/bench/bench_stderr.log" | tr '\r' '\n' | tail -5
  RESULT[bench]="opfuse bench ops rc $rc ($((SECONDS - t)) s)"
  [ "$rc" = 0 ] || FAIL=1
  if [ -f "$OUT/bench/cases.json" ]; then
    t=$SECONDS
    python3 tools/bench_peer.py --cases "$OUT/bench/cases.json" --out "$OUT/bench/peer.json" ${PEER_ARGS:-} \
      > "$OUT/bench/peer_stdout.txt" 2> "$OUT/bench/peer_stderr.log"
    prc=$?
    "$BUILD/opfuse" bench report --dir "$OUT/bench" --peer "$OUT/bench/peer.json" > "$OUT/bench/report_stdout.md" 2>&1
    rrc=$?
    RESULT[peer]="bench_peer.py rc $prc ($((SECONDS - t)) s); bench report rc $rrc"
    [ "$prc" = 0 ] && [ "$rrc" = 0 ] || FAIL=1
  fi
fi

if has profile; then
  # issue 5: the fusion profile of the TinyLlama layer (default grid) + the validation table
  t=$SECONDS
  mkdir -p "$OUT/profile"
  "$BUILD/opfuse" profile --out "$OUT/profile/profile_result.json" --bench-dir "$OUT/profile/bench" ${PROFILE_ARGS:-} \
    > "$OUT/profile/validation.md" 2> "$OUT/profile/profile_stderr.log"
  rc=$?
  "$BUILD/opfuse" profile --validate --json --out "$OUT/profile/profile_result.json" ${PROFILE_ARGS:-} \
    > "$OUT/profile/validation.json" 2>> "$OUT/profile/profile_stderr.log"
  head -3 "$OUT/profile/validation.md"
  RESULT[profile]="opfuse profile rc $rc ($((SECONDS - t)) s): $(sed -n 3p "$OUT/profile/validation.md" | head -c 300)"
  [ "$rc" = 0 ] || FAIL=1
fi

if has e2e; then
  # issue 6: bench e2e of the three strategies (TinyLlama-1.1B shapes, bf16, random weights), the HF
  # transformers peer (eager, static-cache compiled) on the same weights, and the logits comparison.
  t=$SECONDS
  mkdir -p "$OUT/e2e"
  MODEL=/tmp/opfuse_tinyllama_bf16
  "$BUILD/opfuse" init-weights --config tinyllama-1.1b --dtype bf16 --out "$MODEL" > "$OUT/e2e/init.log" 2>&1
  E2E_PROFILE_ARG=""
  [ -f "$OUT/profile/profile_result.json" ] && E2E_PROFILE_ARG="--profile $OUT/profile/profile_result.json"
  "$BUILD/opfuse" bench e2e --model "$MODEL" --backend cuda --runs ${E2E_RUNS:-3} $E2E_PROFILE_ARG ${E2E_ARGS:-} \
    --output "$OUT/e2e/e2e.json" > "$OUT/e2e/e2e.md" 2> "$OUT/e2e/e2e_stderr.log"
  rc=$?
  cat "$OUT/e2e/e2e.md"; tail -3 "$OUT/e2e/e2e_stderr.log"
  RESULT[e2e]="opfuse bench e2e rc $rc ($((SECONDS - t)) s)"
  [ "$rc" = 0 ] || FAIL=1
  if [ -z "${E2E_NO_PEER:-}" ]; then
    t=$SECONDS
    timeout ${HF_TIMEOUT:-300} python3 tools/hf_e2e_bench.py --model "$MODEL" --runs ${E2E_RUNS:-3} --output "$OUT/e2e/hf_e2e.json" \
      > "$OUT/e2e/hf_e2e.md" 2> "$OUT/e2e/hf_e2e_stderr.log"
    hrc=$?
    cat "$OUT/e2e/hf_e2e.md"
    [ -n "${E2E_NO_COMPARE:-}" ] || timeout ${HF_TIMEOUT:-300} python3 tools/hf_compare.py --opfuse "$BUILD/opfuse" --model "$MODEL" --dtype bf16 --backend cuda \
      --strategies never,always,smart --new-tokens 33 --out-dir "$OUT/e2e" > "$OUT/e2e/hf_compare.md" 2> "$OUT/e2e/hf_compare_stderr.log"
    crc=$?
    tail -8 "$OUT/e2e/hf_compare.md"
    RESULT[hf]="hf_e2e_bench rc $hrc; hf_compare rc $crc ($((SECONDS - t)) s)"
    [ "$hrc" = 0 ] && [ "$crc" = 0 ] || FAIL=1
  fi
fi

if has eval; then
  # issue 7: baseline (opfuse op-by-op) -> PyTorch peer into the same file -> opfuse's plans scored.
  t=$SECONDS
  mkdir -p "$OUT/eval"
  "$BUILD/opfuse" eval list --json > "$OUT/eval/problems.json" 2> "$OUT/eval/list_stderr.log"
  "$BUILD/opfuse" eval baseline --output "$OUT/eval/baseline_time.json" ${EVAL_ARGS:-} \
    > "$OUT/eval/baseline.md" 2> "$OUT/eval/baseline_stderr.log"
  brc=$?
  timeout ${EVAL_PEER_TIMEOUT:-900} python3 tools/eval_peer.py --problems "$OUT/eval/problems.json" \
    --baseline "$OUT/eval/baseline_time.json" > "$OUT/eval/peer.md" 2> "$OUT/eval/peer_stderr.log"
  prc=$?
  "$BUILD/opfuse" eval run --baseline "$OUT/eval/baseline_time.json" --output "$OUT/eval/eval.json" ${EVAL_ARGS:-} \
    > "$OUT/eval/eval.md" 2> "$OUT/eval/eval_stderr.log"
  erc=$?
  "$BUILD/tests/test_gpu" --gtest_filter='EvalCandidateGpu.*' > "$OUT/eval/planted.log" 2>&1
  grc=$?
  cat "$OUT/eval/eval.md"; tail -3 "$OUT/eval/eval_stderr.log" | tr '\r' '\n' | tail -3
  SUMMARY=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("; ".join("%s: correct %d/%d fast_1 %.2f geomean %s" % (s["against"], s["correct"], s["problems"], s["fast_1"], "%.2fx" % s["geomean_speedup"] if s["geomean_speedup"] else "-") for s in j["summary"] if s["with_baseline"]))' "$OUT/eval/eval.json" 2>/dev/null)
  ALLOK=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(int(all(r["correct"] for r in j["results"])))' "$OUT/eval/eval.json" 2>/dev/null)
  RESULT[eval]="baseline rc $brc, eval_peer rc $prc, eval run rc $erc, planted tests rc $grc ($(grep -c '^\[       OK \]' "$OUT/eval/planted.log") ok) ($((SECONDS - t)) s): $SUMMARY"
  [ "$brc" = 0 ] && [ "$prc" = 0 ] && [ "$erc" = 0 ] && [ "$grc" = 0 ] && [ "${ALLOK:-0}" = 1 ] || FAIL=1
fi

{
  echo "{\"device\": \"$DEVICE\", \"arch\": \"$ARCH\", \"stages\": \"$STAGES\", \"ok\": $([ $FAIL = 0 ] && echo true || echo false),"
  first=1
  for k in "${!RESULT[@]}"; do
    [ $first = 1 ] || echo ","
    first=0
    printf '"%s": %s' "$k" "$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "${RESULT[$k]}")"
  done
  echo "}"
} > "$OUT/summary.json"
cp "$OUT/summary.json" "$FINAL_OUT/summary.json"
tar -czf "$FINAL_OUT/gpu_check.tgz" -C "$OUT" . && rm -rf "$OUT"

[ -f "$OUT/bench/report_stdout.md" ] && tail -60 "$OUT/bench/report_stdout.md"
echo
echo "==== opfuse gpu_check on $DEVICE ($ARCH)"
for k in tests memcheck run compile bench peer profile e2e hf eval; do
  [ -n "${RESULT[$k]:-}" ] && printf '%-9s %s\n' "$k" "${RESULT[$k]}"
done
exit $FAIL
