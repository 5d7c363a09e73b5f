#!/usr/bin/env bash
# Issue 33 on a multi-GPU machine in one device call: the tensor-parallel GPU tests (the collectives
# through NCCL against the CPU reference, the family fixtures on 2 GPUs against one GPU and
# transformers), greedy tokens at TP = 1 and N on TinyLlama-1.1B shapes (built-in) and on
# Llama-3-8B shapes (random bf16 weights, examples/configs/llama-3-8b.json), and `opfuse bench e2e`
# of the 8B model at TP = 1 and N (decode batch 1). Carry build/carry.tar.xz (tools/build_carry.sh).
#   device (kind nvidia-h100-x2 or nvidia-h200-x2): bash tools/tp_check.sh
# Env: TP (default 2), E2E_RUNS (default 5), DECODE (new tokens, default 64), SKIP_8B=1.
# Everything lands in $OUT (e2e_8b_tp*.json, tp.tgz with the logs); a table last.
set -uo pipefail
. "$(dirname "$0")/device_common.sh"
opfuse_device_work tp || exit 1
export NCCL_NVLS_ENABLE=0  # never NVLink multicast (opfuse sets it too)
TP=${TP:-2}
DECODE=${DECODE:-64}
nvidia-smi topo -m > "$W/topo.txt" 2>&1; head -5 "$W/topo.txt"
t=$SECONDS
"$B/tests/test_gpu" --gtest_filter='TensorParallelGpu.*' > "$W/test_tp.log" 2>&1
echo "test_gpu TensorParallelGpu.*: rc $? ($(grep -cE '^\[       OK' "$W/test_tp.log") ok, $(grep -cE '^\[  FAILED' "$W/test_tp.log") failed) $((SECONDS - t)) s"
grep -m1 "NCCL:" "$W/test_tp.log"; grep -m1 "one-shot" "$W/test_tp.log"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$CS" ] && [ "${MEMCHECK:-1}" = 1 ]; then
  t=$SECONDS
  timeout 150 "$CS" --tool memcheck --report-api-errors no --error-exitcode 9 "$B/tests/test_gpu" --gtest_filter='TensorParallelGpu.Collectives*' \
    > "$W/memcheck.log" 2>&1
  echo "memcheck rc $? ($((SECONDS - t)) s): $(grep -m1 'ERROR SUMMARY' "$W/memcheck.log")"
fi
tokens() { grep -oE '^\[0\] prompt [0-9]+ tokens -> [0-9,]+' "$1" | sed 's/.*-> //'; }
ids=128000,791,6864,315,9822,374,12366,13,578
for tp in 1 "$TP"; do
  t=$SECONDS
  "$B/opfuse" generate --backend cuda --ids 1,450,4996,17354,1701 --max-new-tokens "$DECODE" --tensor-parallel "$tp" \
    > "$W/gen_tiny_tp$tp.log" 2>&1
  echo "tinyllama generate tp=$tp rc $? ($((SECONDS - t)) s): $(grep -m1 'ms/token' "$W/gen_tiny_tp$tp.log" | sed 's/, compile.*//')"
done
same_tiny=$([ "$(tokens "$W/gen_tiny_tp1.log")" = "$(tokens "$W/gen_tiny_tp$TP.log")" ] && echo yes || echo no)
if [ "${SKIP_8B:-0}" != 1 ]; then
  M=/tmp/llama3_8b
  t=$SECONDS
  "$B/opfuse" init-weights --config examples/configs/llama-3-8b.json --dtype bf16 --out "$M" --force > "$W/init_8b.log" 2>&1
  echo "8b init-weights rc $? ($((SECONDS - t)) s)"
  for tp in 1 "$TP"; do
    t=$SECONDS
    "$B/opfuse" generate --backend cuda --model "$M" --ids "$ids" --max-new-tokens "$DECODE" --max-context 1024 \
      --tensor-parallel "$tp" > "$W/gen_8b_tp$tp.log" 2>&1
    echo "8b generate tp=$tp rc $? ($((SECONDS - t)) s): $(grep -m1 'ms/token' "$W/gen_8b_tp$tp.log" | sed 's/, compile.*//')"
    t=$SECONDS
    "$B/opfuse" bench e2e --model "$M" --strategies always --cases "[prefill=128, decode=$DECODE]" --runs "${E2E_RUNS:-5}" \
      --max-context 1024 --tensor-parallel "$tp" --output "$OUT/e2e_8b_tp$tp.json" > "$W/e2e_8b_tp$tp.log" 2>&1
    echo "8b bench e2e tp=$tp rc $? ($((SECONDS - t)) s)"
    tail -3 "$W/e2e_8b_tp$tp.log"
  done
  same_8b=$([ "$(tokens "$W/gen_8b_tp1.log")" = "$(tokens "$W/gen_8b_tp$TP.log")" ] && echo yes || echo no)
  echo "8b tp=1 tokens:   $(tokens "$W/gen_8b_tp1.log")"
  echo "8b tp=$TP tokens:   $(tokens "$W/gen_8b_tp$TP.log")"
fi
tar -C "$W" -czf "$OUT/tp.tgz" . 2>/dev/null
echo
echo "| check | result |"
echo "|---|---|"
echo "| device | $(head -1 "$W/device.txt") x $(nvidia-smi -L | wc -l) |"
echo "| TensorParallelGpu tests | $(grep -E '^\[  (PASSED|FAILED)' "$W/test_tp.log" | tr '\n' ' ') |"
echo "| TinyLlama greedy tokens tp=1 vs tp=$TP ($DECODE) | same: $same_tiny |"
if [ "${SKIP_8B:-0}" != 1 ]; then
  echo "| Llama-3-8B greedy tokens tp=1 vs tp=$TP | same: $same_8b |"
  for tp in 1 "$TP"; do
    python3 - "$OUT/e2e_8b_tp$tp.json" "$tp" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    for s, cases in d["results"].items():
        for c, r in cases.items():
            print(f"| 8b {s} tp={sys.argv[2]} {c} | {r['decode_ms_per_token']:.3f} ms/token, {r['decode_tokens_per_s']:.0f} tok/s, "
                  f"{r['kernels_per_decode_step']} kernels/step, prefill {r['prefill_ms']:.2f} ms |")
except Exception as e:
    print(f"| 8b tp={sys.argv[2]} | no report: {e} |")
PY
  done
fi
