#!/usr/bin/env bash
# Issue 32 item 4 in one device call: prefill attention and matmul as TFLOP/s against the GEMM ceiling
# measured in the same run, at prefill lengths 128..8192, and where a whole prefill's time goes.
#   1. `opfuse bench ops --suite patterns --ops 'matmul|attention' --rows $ROWS --widths 2048,4096`:
#      matmul [L, h] x [h, ffn] (h = 2048: TinyLlama's gate shape, 4096: Llama-3-8B's), causal GQA
#      attention T = S = L (32 query / 4 KV heads of 64), each checked against the CPU reference, with
#      the cuBLASLt 8192^3 ceiling measured at start; PEER=1 (default) adds torch eager / torch.compile
#      (matmul, F.scaled_dot_product_attention) on the same cases (tools/bench_peer.py; PEER_ARGS, default
#      --no-compile: eager only, torch.compile of a lone matmul or SDPA call is the same library kernel).
#   2. `opfuse bench e2e --strategies always --cases '[prefill=L, decode=0]'` for each length, on the
#      builtin TinyLlama-1.1B (LENS_TINY, default 128 512 1024 2048: its context) and on Llama-3.2-1B
#      shapes with random bf16 weights (LENS_L32, default 128 512 2048 8192): the whole prefill's ms,
#      and its model TFLOP/s (matmul flops of every projection and the LM head's last row, plus causal
#      attention's 4 * heads * 64 * L(L+1)/2 a layer).
#   3. TRACE=1 (default; carry build/cupti_trace, dev/cupti_trace/build.sh): a CUPTI kernel trace of
#      one prefill of TRACE_LEN tokens (default 2048), its kernels grouped by tools/kernel_trace_summary.py.
# Carry build/carry.tar.xz (tools/build_carry.sh).   device: bash tools/prefill_check.sh
# Env: ROWS (default 128,256,512,1024,2048,4096,8192), LENS_TINY, LENS_L32, PEER, PEER_ARGS, TRACE,
# TRACE_LEN, E2E_RUNS (default 3). Everything lands in $OUT (prefill_ops/, e2e_prefill_*.json, trace.md,
# prefill_summary.json); a table last.
set -uo pipefail
. "$(dirname "$0")/device_common.sh"
opfuse_device_work prefill || exit 1
say() { echo "== $*" | tee -a "$OUT/progress.txt"; }
ROWS=${ROWS:-128,256,512,1024,2048,4096,8192}
D=$OUT/prefill_ops
t=$SECONDS
"$B/opfuse" bench ops --suite patterns --ops 'matmul|attention' --rows "$ROWS" --widths 2048,4096 --out "$D" \
  > "$W/bench_ops.log" 2>&1
say "bench ops rc $? ($((SECONDS - t)) s)"
if [ "${PEER:-1}" = 1 ]; then
  t=$SECONDS
  # shellcheck disable=SC2086
  timeout 400 python3 tools/bench_peer.py --cases "$D/cases.json" --out "$D/peer.json" ${PEER_ARGS---no-compile} > "$W/peer.log" 2>&1
  say "bench_peer rc $? ($((SECONDS - t)) s)"
  "$B/opfuse" bench report --dir "$D" --peer "$D/peer.json" > "$W/report.log" 2>&1 || say "bench report failed"
fi
# Whole prefills: TinyLlama-1.1B (builtin, context 2048) up to 2048, Llama-3.2-1B shapes (random bf16
# weights, examples/configs/llama-3.2-1b.json) up to 8192.
e2e_ladder() {  # model out-name lengths...
  local m=$1 name=$2 args=() L maxl=0 t=$SECONDS
  shift 2
  for L in "$@"; do args+=(--cases "[prefill=$L, decode=0]"); [ "$L" -gt "$maxl" ] && maxl=$L; done
  "$B/opfuse" bench e2e --model "$m" --strategies always "${args[@]}" --runs "${E2E_RUNS:-3}" --max-context "$maxl" \
    --output "$OUT/$name.json" > "$W/$name.log" 2>&1
  say "bench e2e $name rc $? ($((SECONDS - t)) s)"
}
# shellcheck disable=SC2086
e2e_ladder builtin e2e_prefill_tinyllama ${LENS_TINY:-128 512 1024 2048}
M=/tmp/llama32_1b
"$B/opfuse" init-weights --config examples/configs/llama-3.2-1b.json --dtype bf16 --out "$M" --force > "$W/init.log" 2>&1 ||
  say "init-weights llama-3.2-1b failed"
# shellcheck disable=SC2086
e2e_ladder "$M" e2e_prefill_llama32 ${LENS_L32:-128 512 2048 8192}
if [ "${TRACE:-1}" = 1 ]; then
  LIB=$PWD/build/cupti_trace/libopfuse_cupti_trace.so
  TL=${TRACE_LEN:-2048}
  K=$(python3 -c "import json,sys; d=json.load(open('$OUT/e2e_prefill_tinyllama.json')); print(d['results']['always_fuse']['[prefill=$TL, decode=0]']['kernels_per_prefill'])" 2>/dev/null)
  if [ ! -f "$LIB" ]; then
    say "trace: $LIB missing (dev/cupti_trace/build.sh, carry build/cupti_trace)"
  elif [ -z "$K" ]; then
    say "trace: no kernels_per_prefill for prefill=$TL in e2e_prefill_tinyllama.json (LENS_TINY must include it)"
  else
    t=$SECONDS
    CUDA_INJECTION64_PATH=$LIB OPFUSE_CUPTI_TRACE_OUT=$W/trace.csv "$B/opfuse" bench e2e --model builtin --strategies always \
      --cases "[prefill=$TL, decode=0]" --runs 1 --max-context "$TL" > "$W/trace_e2e.log" 2>&1
    python3 tools/kernel_trace_summary.py "$W/trace.csv" --per-step "$K" --steps 1 --json "$OUT/trace.json" > "$OUT/trace.md" 2>&1
    say "trace prefill=$TL rc $? ($((SECONDS - t)) s): $(grep -m1 -E 'steps of' "$OUT/trace.md")"
  fi
fi
python3 tools/prefill_table.py --ops "$D/bench_report.json" --e2e "TinyLlama-1.1B=$OUT/e2e_prefill_tinyllama.json" \
  --e2e "Llama-3.2-1B=$OUT/e2e_prefill_llama32.json@examples/configs/llama-3.2-1b.json" --json "$OUT/prefill_summary.json"
tar -C "$W" -czf "$OUT/prefill_logs.tgz" . 2>/dev/null
