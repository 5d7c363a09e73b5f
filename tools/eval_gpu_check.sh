#!/usr/bin/env bash
# The evaluator's anti-cheat rules on the GPU (issue 29, docs/eval.md "Rules"), one device call, from
# the repository root with build/carry.tar.xz carried (tools/build_carry.sh):
#   1. the EvalCandidateGpu tests (honest kernels pass; one planted kernel per cheating class is
#      rejected with the rule named; memorised answers pass under their seed and fail under a fresh one);
#   2. `opfuse eval baseline` and `opfuse eval run` (opfuse's scheduled plans) over every problem,
#      each with a fresh seed: every plan must stay correct under the new rules;
#   3. `opfuse eval run --candidate` on every tests/data/eval/*.cu with its problem, as a user runs
#      it: the verdict and the rule that decided;
#   4. compute-sanitizer memcheck on one eval run (the fills and the after-timing path).
# PEER=1 adds tools/eval_peer.py (torch eager / torch.compile) to the baseline before step 2's run;
# QUICK="" times with the full sample counts (default --quick: the verdicts are what is checked).
# Logs and JSON under $OUT; a table last. Exit 1 when a test fails, an opfuse plan is not correct, a
# planted kernel passes or an honest one fails.
set -uo pipefail
source tools/device_common.sh
opfuse_device_work eval_check || exit 1
O=${OUT:-/tmp/eval_check}
QUICK=${QUICK:---quick}
rc=0
"$B/tests/test_gpu" --gtest_filter='EvalCandidateGpu.*' > "$W/test_gpu.log" 2>&1 || rc=1
echo "== EvalCandidateGpu: $(grep -cE '^\[       OK \]' "$W/test_gpu.log") passed, $(grep -cE '^\[  FAILED  \] [A-Za-z]' "$W/test_gpu.log") failed (rc $rc)"
grep -E '^\[ eval \]|FAILED|Failure' "$W/test_gpu.log" | head -40

t0=$SECONDS
"$B/opfuse" eval baseline --output "$O/baseline_time.json" $QUICK > "$W/baseline.md" 2> "$W/baseline.err" || { rc=1; tail -3 "$W/baseline.err"; }
echo "== eval baseline: $((SECONDS - t0)) s"
if [ "${PEER:-0}" = 1 ]; then  # torch eager / torch.compile into the same baseline file
  t0=$SECONDS
  "$B/opfuse" eval list --json > "$W/problems.json"
  python3 tools/eval_peer.py --problems "$W/problems.json" --baseline "$O/baseline_time.json" > "$W/peer.log" 2>&1 || { rc=1; tail -3 "$W/peer.log"; }
  echo "== tools/eval_peer.py: $((SECONDS - t0)) s, $(grep -c 'Error' "$W/peer.log") error lines"
fi
t0=$SECONDS
"$B/opfuse" eval run --baseline "$O/baseline_time.json" --output "$O/eval_auto.json" --markdown "$O/eval_auto.md" $QUICK \
  > /dev/null 2> "$W/eval_auto.err" || { rc=1; tail -3 "$W/eval_auto.err"; }
echo "== eval run (opfuse auto): $((SECONDS - t0)) s"
sed -n '/^| against/,$p' "$O/eval_auto.md"

declare -A PROBLEM=(
  [gelu_ok]=gelu_f32_prefill [gelu_zeros]=gelu_f32_prefill [gelu_half]=gelu_f32_prefill [gelu_mutate]=gelu_f32_prefill
  [gelu_uninit]=gelu_f32_prefill [gelu_slow]=gelu_f32_prefill [rms_norm_ok]=rms_norm_bf16_prefill
  [logsumexp_ok]=logsumexp_bf16_prefill [argmax_ok]=argmax_f32_decode [cheat_sniff]=gelu_f32_prefill
  [cheat_sampled_rows]=rms_norm_bf16_prefill [cheat_constant]=logsumexp_bf16_prefill
  [cheat_mutate_unsampled]=rms_norm_bf16_prefill [cheat_repeat_pointers]=gelu_f32_prefill [cheat_precision]=gelu_f32_prefill)
for k in "${!PROBLEM[@]}"; do
  "$B/opfuse" eval run --candidate "tests/data/eval/$k.cu" --problem "${PROBLEM[$k]}" --baseline "$O/baseline_time.json" \
    --output "$O/cand_$k.json" $QUICK > "$W/cand_$k.md" 2> "$W/cand_$k.err" || { echo "eval run $k failed: $(tail -1 "$W/cand_$k.err")"; rc=1; }
done

if command -v compute-sanitizer > /dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 9 "$B/opfuse" eval run --problems rms_norm_bf16_decode,gelu_tanh_bf16_decode \
    --baseline "$O/baseline_time.json" --output "$W/memcheck.json" --quick > "$W/memcheck.log" 2>&1
  mc=$?
  echo "== compute-sanitizer memcheck on eval run (2 problems): rc $mc, $(grep -c 'Invalid\|ERROR SUMMARY: [1-9]' "$W/memcheck.log") error lines"
  [ $mc = 0 ] || rc=1
fi

python3 - "$O" <<'PY' || rc=1
import glob, json, os, sys
o = sys.argv[1]
bad = 0
auto = json.load(open(f"{o}/eval_auto.json"))
wrong = [r for r in auto["results"] if not r["correct"]]
print(f"== opfuse plans (eval run, seed {auto.get('seed')}): {len(auto['results']) - len(wrong)} of {len(auto['results'])} correct")
for r in wrong:
    print(f"   NOT CORRECT {r['problem']}: [{r.get('rule')}] {r['error'][:300]}")
bad += len(wrong)
base = json.load(open(f"{o}/baseline_time.json"))
nb = [n for n, e in base["problems"].items() if not e.get("opfuse_unfused", {}).get("correct")]
print(f"== baseline (op-by-op): {len(base['problems']) - len(nb)} of {len(base['problems'])} correct" + (f"; not: {nb}" if nb else ""))
bad += len(nb)
print("\n| kernel | problem | expected | verdict | rule | seed | µs | error (start) |\n|---|---|---|---|---|---|---:|---|")
for f in sorted(glob.glob(f"{o}/cand_*.json")):
    k = os.path.basename(f)[5:-5]
    j = json.load(open(f))
    r = j["results"][0]
    honest = k.endswith("_ok") or k == "gelu_slow"
    exp = "correct" if honest else "rejected"
    got = "correct" if r["correct"] else "rejected"
    if exp != got:
        bad += 1
    us = f"{r['runtime_us']:.2f}" if r.get("runtime_us") else "—"
    print(f"| {k} | {r['problem']} | {exp} | {got}{'' if exp == got else ' (WRONG)'} | {r.get('rule') or '—'} | {j.get('seed')} | {us} | {r['error'][:110]} |")
sys.exit(1 if bad else 0)
PY
# one archive instead of ~50 small files (the device tool returns a limited number)
tar -czf "$O/eval_check.tgz" -C "$O" work $(cd "$O" && ls cand_*.json) && rm -rf "$W" "$O"/cand_*.json
exit $rc
