#!/usr/bin/env bash
# Issue 26's GPU check: one random-weight bf16 model per family (llama with llama3 rope and tied
# embeddings, mistral, qwen2 with Q/K/V bias and yarn, qwen3 with q/k norm and q_dim > hidden, and
# mistral / qwen2 with sliding windows shorter than the context), each
# saved by the GPU machine's transformers 5 (`tools/make_family_fixtures.py --gpu-models`), compared
# with transformers under every strategy by tools/hf_compare.py (teacher-forced logits, greedy
# tokens). Run on the device machine from the repository root:
#   BUILD=build/cuda bash tools/family_gpu_check.sh
# Writes $OUT/family_<name>.json and $OUT/family_gpu_check.log; prints one table last. Exit 1 when
# any family fails.
set -uo pipefail
BUILD=${BUILD:-build/cuda}
OUT=${OUT:-/tmp/family_out}
NEW_TOKENS=${NEW_TOKENS:-17}
mkdir -p "$OUT"
LOG=$OUT/family_gpu_check.log
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$LOG"
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)" | tee -a "$LOG"
MODELS=/tmp/family_models
python3 tools/make_family_fixtures.py --gpu-models "$MODELS" 2>&1 | grep -v -i warn | tee -a "$LOG"
rc=0
summary=()
# The windowed models get a 90-token prompt (deterministic ids), longer than their windows and than
# the decode path's 16 rows, so prefill runs the tensor-core kernel with the window and decode runs
# past it.
LONG_IDS=$(python3 -c "print(','.join(str((7919 * i + 13) % 31000 + 3) for i in range(90)))")
for fam in llama mistral qwen2 qwen3 mistral_window qwen2_window; do
  echo "== $fam" | tee -a "$LOG"
  ids=()
  case $fam in *_window) ids=(--ids "$LONG_IDS") ;; esac
  python3 tools/hf_compare.py --opfuse "$BUILD/opfuse" --model "$MODELS/$fam" --dtype bf16 --backend cuda \
      --strategies never,always,smart --new-tokens "$NEW_TOKENS" "${ids[@]}" --out-dir "/tmp/hf_$fam" 2>&1 | grep -v -i warn | tee -a "$LOG"
  r=${PIPESTATUS[0]}
  [ "$r" -ne 0 ] && rc=1
  cp "/tmp/hf_$fam/hf_compare.json" "$OUT/family_$fam.json" 2>/dev/null
  summary+=("$fam: $([ "$r" -eq 0 ] && echo ok || echo FAIL)")
done
echo "== summary" | tee -a "$LOG"
for s in "${summary[@]}"; do echo "  $s" | tee -a "$LOG"; done
rm -rf "$MODELS"
exit $rc
