#!/usr/bin/env bash
# Issue 31 in one device call: `opfuse profile` of the fuse_matmul groups' alternatives (the fused
# group — one GEMV launch up to the GEMV's capacity, else its matmuls on cuBLASLt — vs its ops one
# by one on their library kernels) on the decoder layer and head of TinyLlama-1.1B and Llama-3.2-1B
# shapes, at decode batch sizes and prefill lengths; each profile's leave-one-out validation; and
# `opfuse bench e2e` of never / always / smart with that profile (random bf16 weights). First the
# GEMV's GPU tests (fused groups up to 4 rows, profile-declined groups) and memcheck on them.
# Carry build/carry.tar.xz (tools/build_carry.sh).
#   device: bash tools/smart_check.sh
# Env: ROWS (layer row counts), HEAD_ROWS, E2E_CASES (';'-separated; prefill 512 and 2048 run smart's
# prefill plans of those lengths: each e2e JSON case has prefill_plan_length), E2E_RUNS (default 7),
# MODELS (default "tinyllama llama32"), TEST_FILTER (empty: no tests), MEMCHECK_FILTER, SWEEP=0 (skip build/gemv_sweep,
# dev/gemv_sweep: the GEMV's forms beside cuBLASLt on plain matmuls; carry it to run it), ORDER_AB=0
# (skip the order A/B: TinyLlama's prefills 128 and 512 with --strategies always,smart and then
# smart,always, 15 runs each — with interleaved runs the two orders must agree).
# Everything lands in $OUT (profile_*.json, e2e_*.json, smart.tgz with the logs); tables last.
set -uo pipefail
. "$(dirname "$0")/device_common.sh"
opfuse_device_work smart || exit 1
ROWS=${ROWS:-1,2,3,4,8,16,32,48,64,96,128,512,2048}
HEAD_ROWS=${HEAD_ROWS:-1,2,3,4,8,16,32,64}
TEST_FILTER=${TEST_FILTER-GemvTest.*:StreamRelease.*}
MEMCHECK_FILTER=${MEMCHECK_FILTER-GemvTest.NormPrologueGroups:GemvTest.RopeEpilogue*:GemvTest.SiblingsAndSwiglu*}
if [ -n "$TEST_FILTER" ]; then
  "$B/tests/test_gpu" --gtest_filter="$TEST_FILTER" > "$W/test_gpu.log" 2>&1
  echo "test_gpu $TEST_FILTER: rc $? ($(grep -cE '^\[       OK' "$W/test_gpu.log") ok, $(grep -cE '^\[  FAILED' "$W/test_gpu.log") failed lines)"
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  if [ -n "$CS" ]; then
    timeout 150 "$CS" --tool memcheck --error-exitcode 9 "$B/tests/test_gpu" --gtest_filter="$MEMCHECK_FILTER" \
      > "$W/memcheck.log" 2>&1
    echo "memcheck rc $? ($(grep -m1 'ERROR SUMMARY' "$W/memcheck.log"))"
  fi
fi
[ -f build/gemv_sweep.xz ] && [ ! -x build/gemv_sweep ] && xz -dk build/gemv_sweep.xz
if [ -x build/gemv_sweep ] && [ "${SWEEP:-1}" = 1 ]; then
  # the GEMV's two forms beside cuBLASLt on plain matmuls, 1..64 rows (dev/gemv_sweep; carry build/gemv_sweep)
  t=$SECONDS
  build/gemv_sweep "$W/gemv_sweep.json" > "$W/gemv_sweep.md" 2>&1
  echo "gemv_sweep rc $? ($((SECONDS - t)) s): $(tail -1 "$W/gemv_sweep.md")"
  cp "$W/gemv_sweep.json" "$W/gemv_sweep.md" "${OUT:-/tmp}/" 2>/dev/null
fi
IFS=';' read -r -a cases <<< "${E2E_CASES:-[prefill=128, decode=32];[prefill=128, decode=32, batch=2];[prefill=128, decode=32, batch=4];[prefill=128, decode=32, batch=8];[prefill=128, decode=32, batch=32];[prefill=512, decode=0];[prefill=2048, decode=0]}"
args=()
for c in "${cases[@]}"; do args+=(--cases "$c"); done
for m in ${MODELS:-tinyllama llama32}; do
  P="$W/profile_$m.json"
  if [ "$m" = tinyllama ]; then layer=examples/graphs/llama_decoder_layer.ofg; head=examples/graphs/tinyllama_head.ofg; model=builtin
  else
    layer=examples/graphs/llama32_1b_decoder_layer.ofg; head=examples/graphs/llama32_1b_head.ofg; model=/tmp/llama32_weights
    t=$SECONDS
    "$B/opfuse" init-weights --config examples/configs/llama-3.2-1b.json --dtype bf16 --out "$model" --force > "$W/init_$m.log" 2>&1
    echo "$m init-weights rc $? ($((SECONDS - t)) s)"
  fi
  t=$SECONDS
  "$B/opfuse" profile --fresh --graph "$layer" --out "$P" --rows "$ROWS" > /dev/null 2> "$W/profile_${m}_layer.log"
  echo "$m profile layer rc $? ($((SECONDS - t)) s)"
  "$B/opfuse" profile --graph "$head" --out "$P" --rows "$HEAD_ROWS" > /dev/null 2> "$W/profile_${m}_head.log"
  echo "$m profile head rc $?"
  # the pattern groups on their own too (what runs with OPFUSE_DISABLE=fuse_matmul)
  "$B/opfuse" profile --disable fuse_matmul --graph "$layer" --out "$P" --rows "$ROWS" > /dev/null 2> "$W/profile_${m}_patterns.log"
  echo "$m profile patterns rc $?"
  grep -ih 'warning' "$W/profile_${m}_layer.log" "$W/profile_${m}_head.log" "$W/profile_${m}_patterns.log" | head -3
  "$B/opfuse" profile --validate --graph "$layer" --out "$P" --rows "$ROWS" > "$W/validation_${m}_layer.md" 2>&1
  "$B/opfuse" profile --validate --graph "$head" --out "$P" --rows "$HEAD_ROWS" > "$W/validation_${m}_head.md" 2>&1
  "$B/opfuse" profile --validate --disable fuse_matmul --graph "$layer" --out "$P" --rows "$ROWS" > "$W/validation_${m}_patterns.md" 2>&1
  t=$SECONDS
  "$B/opfuse" bench e2e --model "$model" --strategies never,always,smart --profile "$P" "${args[@]}" --runs "${E2E_RUNS:-7}" \
    --output "$W/e2e_$m.json" > "$W/e2e_$m.md" 2> "$W/e2e_${m}_stderr.log"
  echo "$m bench e2e rc $? ($((SECONDS - t)) s)"
  grep -v '^\[' "$W/e2e_${m}_stderr.log" | tail -3
  cp "$P" "$W/e2e_$m.json" "${OUT:-/tmp}/" 2>/dev/null
done
if [ "${ORDER_AB:-1}" = 1 ] && [ -f "$W/profile_tinyllama.json" ]; then
  for order in always,smart smart,always; do
    "$B/opfuse" bench e2e --model builtin --strategies "$order" --profile "$W/profile_tinyllama.json" \
      --cases '[prefill=128, decode=0]' --cases '[prefill=512, decode=0]' --runs 15 --output "$W/order_$order.json" \
      > "$W/order_$order.md" 2> "$W/order_${order}_stderr.log"
    echo "order $order rc $?"
  done
fi
tar -C "$W" -czf "${OUT:-/tmp/smart}/smart.tgz" --exclude='*.safetensors' .
for m in ${MODELS:-tinyllama llama32}; do
  echo "== $m"
  for part in layer head patterns; do echo "$part: $(sed -n 3p "$W/validation_${m}_$part.md")"; done
  grep -E '^\|' "$W/e2e_$m.md" | cut -d'|' -f2-5
  grep -E 'smart_schedule ran' "$W/e2e_$m.md"
done
for order in always,smart smart,always; do
  [ -f "$W/order_$order.md" ] && { echo "== order $order"; grep -E '^\| (always|smart)' "$W/order_$order.md" | cut -d'|' -f2-4; }
done
