#!/usr/bin/env bash
# Issue 33 on a multi-GPU machine in one device call: the tensor-parallel GPU tests (the collectives
# through NCCL against the CPU reference, the family fixtures on 2 GPUs — and 4 where there are 4 —
# against one GPU and transformers), greedy tokens at TP = 1 and each N on TinyLlama-1.1B shapes
# (built-in) and on Llama-3-8B shapes (random bf16 weights, examples/configs/llama-3-8b.json; with
# F32_TOKENS=1 also f32 weights), and `opfuse bench e2e` of the 8B model at TP = 1 and each N (decode
# batch 1). Beside each N, one rank's share of the model (heads, KV heads, intermediate and vocabulary
# divided by N) runs alone on one GPU: the step without communication, so the difference is what the
# collectives and the ranks' waiting cost. Carry build/carry.tar.xz (tools/build_carry.sh).
#   device (kind nvidia-h100-x2, nvidia-h200-x2 or the x4 kinds): bash tools/tp_check.sh
# Env: TPS (default: 2, and 4 with 4 GPUs), E2E_RUNS (default 5), DECODE (new tokens, default 64),
# E2E_CASES (bench e2e cases, ';'-separated; default "[prefill=128, decode=$DECODE]", e.g.
# "[prefill=128, decode=64];[batch=8, prefill=128, decode=64]"), SKIP_8B=1, F32_TOKENS=1, SHARD_ALONE=0 (skip the one-rank-share runs), KEEP_SHARE=1 (leave the
# share models in /tmp/llama3_8b_share<N>), TINY=0 (skip TinyLlama), MEMCHECK=0,
# TESTS (gtest filter, default TensorParallelGpu.*; empty: none), TRACE=1 (a CUPTI kernel trace of
# each TP's decode: dev/cupti_trace/build.sh, carry build/cupti_trace). Lines marked "==" also go to
# $OUT/progress.txt as they happen, so a run cut short still says how far it came.
# Everything lands in $OUT (e2e_8b_tp*.json, tp.tgz with the logs); a table last.
set -uo pipefail
. "$(dirname "$0")/device_common.sh"
opfuse_device_work tp || exit 1
say() { echo "== $*" | tee -a "$OUT/progress.txt"; }
export NCCL_NVLS_ENABLE=0  # never NVLink multicast (opfuse sets it too)
NGPU=$(nvidia-smi -L | wc -l)
TPS=${TPS:-$([ "$NGPU" -ge 4 ] && echo "2 4" || echo 2)}
DECODE=${DECODE:-64}
nvidia-smi topo -m > "$W/topo.txt" 2>&1; head -5 "$W/topo.txt"
TESTS=${TESTS-TensorParallelGpu.*}
if [ -n "$TESTS" ]; then
  t=$SECONDS
  "$B/tests/test_gpu" --gtest_filter="$TESTS" > "$W/test_tp.log" 2>&1
  say "test_gpu $TESTS: rc $? ($(grep -cE '^\[       OK' "$W/test_tp.log") ok, $(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)' "$W/test_tp.log") failed) $((SECONDS - t)) s"
  grep -E "NCCL:|one-shot|bytes: one-shot" "$W/test_tp.log" | head -12
fi
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$CS" ] && [ "${MEMCHECK:-1}" = 1 ]; then
  t=$SECONDS
  timeout 150 "$CS" --tool memcheck --report-api-errors no --error-exitcode 9 "$B/tests/test_gpu" --gtest_filter='TensorParallelGpu.Collectives*:TensorParallelGpu.Fused*' \
    > "$W/memcheck.log" 2>&1
  say "memcheck rc $? ($((SECONDS - t)) s): $(grep -m1 'ERROR SUMMARY' "$W/memcheck.log")"
fi
tokens() { grep -oE '^\[0\] prompt [0-9]+ tokens -> [0-9,]+' "$1" | sed 's/.*-> //'; }
ids=128000,791,6864,315,9822,374,12366,13,578
for tp in 1 $TPS; do
  [ "${TINY:-1}" = 1 ] || break
  t=$SECONDS
  "$B/opfuse" generate --backend cuda --ids 1,450,4996,17354,1701 --max-new-tokens "$DECODE" --tensor-parallel "$tp" \
    > "$W/gen_tiny_tp$tp.log" 2>&1
  say "tinyllama generate tp=$tp rc $? ($((SECONDS - t)) s): $(grep -m1 'ms/token' "$W/gen_tiny_tp$tp.log" | sed 's/, compile.*//')"
done
same() { [ -n "$(tokens "$1")" ] && [ "$(tokens "$1")" = "$(tokens "$2")" ] && echo yes || echo no; }
# One rank's share of the 8B model as a model of its own: config DIR N.
shard_config() {
  python3 - "$1" "$2" <<'PY'
import json, os, sys
d, n = sys.argv[1], int(sys.argv[2])
c = json.load(open("examples/configs/llama-3-8b.json"))
for k in ("num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size"):
    c[k] //= n
c["bos_token_id"], c["eos_token_id"] = 1, 2  # inside the smaller vocabulary
os.makedirs(d, exist_ok=True)
json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=1)
PY
}
e2e() {  # model-dir tp out-name
  local t=$SECONDS c args=()
  IFS=';' read -r -a cases <<< "${E2E_CASES:-[prefill=128, decode=$DECODE]}"
  for c in "${cases[@]}"; do args+=(--cases "$c"); done
  "$B/opfuse" bench e2e --model "$1" --strategies always "${args[@]}" --runs "${E2E_RUNS:-5}" \
    --max-context 1024 --tensor-parallel "$2" --output "$OUT/$3.json" > "$W/$3.log" 2>&1
  say "bench e2e $3 rc $? ($((SECONDS - t)) s): $(grep -m1 -oE 'decode [0-9.]+ ms/token' "$W/$3.log")"
}
if [ "${SKIP_8B:-0}" != 1 ]; then
  M=/tmp/llama3_8b
  t=$SECONDS
  "$B/opfuse" init-weights --config examples/configs/llama-3-8b.json --dtype bf16 --out "$M" --force > "$W/init_8b.log" 2>&1
  say "8b init-weights rc $? ($((SECONDS - t)) s)"
  for tp in 1 $TPS; do
    t=$SECONDS
    "$B/opfuse" generate --backend cuda --model "$M" --ids "$ids" --max-new-tokens "$DECODE" --max-context 1024 \
      --tensor-parallel "$tp" > "$W/gen_8b_tp$tp.log" 2>&1
    say "8b generate tp=$tp rc $? ($((SECONDS - t)) s): $(grep -m1 'ms/token' "$W/gen_8b_tp$tp.log" | sed 's/, compile.*//')"
    e2e "$M" "$tp" "e2e_8b_tp$tp"
    if [ "${TRACE:-0}" = 1 ]; then
      # Every kernel of every rank in place (the CUPTI tracer, dev/cupti_trace; carry build/cupti_trace):
      # rank 0's decode step, kernel by kernel, and each rank's step span.
      LIB=$PWD/build/cupti_trace/libopfuse_cupti_trace.so
      K=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(next(r['kernels_per_decode_step'] for c in d['results'].values() for r in c.values()))" "$OUT/e2e_8b_tp$tp.json" 2>/dev/null)
      if [ -f "$LIB" ] && [ -n "$K" ]; then
        CUDA_INJECTION64_PATH=$LIB OPFUSE_CUPTI_TRACE_OUT=$W/trace_tp$tp.csv timeout 200 "$B/opfuse" generate --backend cuda --model "$M" \
          --ids "$ids" --max-new-tokens 16 --max-context 1024 --tensor-parallel "$tp" > "$W/trace_gen_tp$tp.log" 2>&1
        for d in $(seq 0 $((tp - 1))); do
          python3 tools/kernel_trace_summary.py "$W/trace_tp$tp.csv" --per-step "$K" --device "$d" --first 24 \
            --json "$W/trace_tp${tp}_dev$d.json" > "$W/trace_tp${tp}_dev$d.md" 2>&1
          say "trace tp=$tp device $d: $(grep -m1 'steps of' "$W/trace_tp${tp}_dev$d.md")"
        done
      else
        say "trace tp=$tp: skipped (no $LIB, or no kernel count)"
      fi
    fi
    if [ "$tp" != 1 ] && [ "${SHARD_ALONE:-1}" = 1 ]; then
      shard_config "/tmp/llama3_8b_share$tp" "$tp"
      "$B/opfuse" init-weights --config "/tmp/llama3_8b_share$tp/config.json" --dtype bf16 --out "/tmp/llama3_8b_share$tp" --force \
        > "$W/init_share$tp.log" 2>&1
      e2e "/tmp/llama3_8b_share$tp" 1 "e2e_8b_share$tp"
      [ "${KEEP_SHARE:-0}" = 1 ] || rm -rf "/tmp/llama3_8b_share$tp"
    fi
  done
  for tp in 1 $TPS; do say "8b tp=$tp tokens: $(tokens "$W/gen_8b_tp$tp.log")"; done
  if [ "${F32_TOKENS:-0}" = 1 ]; then
    rm -rf "$M"
    "$B/opfuse" init-weights --config examples/configs/llama-3-8b.json --dtype f32 --out "$M" --force > "$W/init_8b_f32.log" 2>&1
    for tp in 1 $TPS; do
      t=$SECONDS
      "$B/opfuse" generate --backend cuda --model "$M" --ids "$ids" --max-new-tokens "$DECODE" --max-context 1024 \
        --tensor-parallel "$tp" > "$W/gen_8b_f32_tp$tp.log" 2>&1
      say "8b f32 generate tp=$tp rc $? ($((SECONDS - t)) s): $(grep -m1 'ms/token' "$W/gen_8b_f32_tp$tp.log" | sed 's/, compile.*//')"
    done
  fi
fi
tar -C "$W" -czf "$OUT/tp.tgz" . 2>/dev/null
echo
echo "| check | result |"
echo "|---|---|"
echo "| device | $(head -1 "$W/device.txt") x $NGPU |"
echo "| TensorParallelGpu tests | $(grep -E '^\[  (PASSED|FAILED)' "$W/test_tp.log" | tr '\n' ' ') |"
for tp in $TPS; do
  [ "${TINY:-1}" = 1 ] && echo "| TinyLlama greedy tokens tp=1 vs tp=$tp ($DECODE) | same: $(same "$W/gen_tiny_tp1.log" "$W/gen_tiny_tp$tp.log") |"
  if [ "${SKIP_8B:-0}" != 1 ]; then
    echo "| Llama-3-8B bf16 greedy tokens tp=1 vs tp=$tp | same: $(same "$W/gen_8b_tp1.log" "$W/gen_8b_tp$tp.log") |"
    [ "${F32_TOKENS:-0}" = 1 ] && echo "| Llama-3-8B f32 greedy tokens tp=1 vs tp=$tp | same: $(same "$W/gen_8b_f32_tp1.log" "$W/gen_8b_f32_tp$tp.log") |"
  fi
done
if [ "${SKIP_8B:-0}" != 1 ]; then
  python3 - "$OUT" 1 $TPS <<'PY'
import json, os, sys
out, tps = sys.argv[1], sys.argv[2:]
def results(name):
    try:
        d = json.load(open(os.path.join(out, name + ".json")))
        return {c: r for cases in d["results"].values() for c, r in cases.items()}
    except Exception:
        return {}
base = results("e2e_8b_tp1")
for tp in tps:
    rs = results(f"e2e_8b_tp{tp}")
    if not rs:
        print(f"| 8b tp={tp} | no report |")
    share = results(f"e2e_8b_share{tp}")
    for case, r in rs.items():
        b = base.get(case)
        speed = f", {b['decode_ms_per_token'] / r['decode_ms_per_token']:.2f}x tp=1" if b else ""
        line = (f"| 8b always tp={tp} {case} | {r['decode_ms_per_token']:.3f} ms/token, {r['decode_tokens_per_s']:.0f} tok/s{speed}, "
                f"{r['kernels_per_decode_step']} kernels/step, prefill {r['prefill_ms']:.2f} ms")
        if case in share:
            line += f"; one rank's share alone {share[case]['decode_ms_per_token']:.3f} ms/token"
        if r.get("decode_all_reduce_us"):
            line += "; all-reduce µs " + ", ".join(f"{k} {v:.2f}" for k, v in r["decode_all_reduce_us"].items() if k != "one_shot_max_bytes")
        if r.get("decode_all_reduce_error"):
            line += "; all-reduce timing failed: " + r["decode_all_reduce_error"]
        print(line + " |")
PY
fi
