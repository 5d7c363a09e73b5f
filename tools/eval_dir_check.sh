#!/usr/bin/env bash
# `opfuse eval` over a problem directory outside the built-in suite, with the PyTorch peer, exactly as
# a user runs it (each step a fresh process; issue 30 item 3):
#   opfuse eval list --problems-dir DIR --json > problems.json
#   opfuse eval baseline --problems-dir DIR --output baseline_time.json
#   python3 tools/eval_peer.py --problems problems.json --baseline baseline_time.json
#   opfuse eval run --problems-dir DIR --baseline baseline_time.json --output eval.json
# On the device machine from the repository root, build/carry.tar.xz carried (tools/build_carry.sh):
#   bash tools/eval_dir_check.sh eval/untuned
# QUICK=--quick for a smoke run. Results under $OUT (baseline_time.json, eval.json, eval.md, logs);
# a table last. Exit 1 when a step fails, a torch baseline is missing or an opfuse plan is incorrect.
set -uo pipefail
source tools/device_common.sh
DIR=${1:?usage: eval_dir_check.sh PROBLEMS_DIR}
opfuse_device_work eval_dir || exit 1
O=${OUT:-/tmp/eval_dir}
QUICK=${QUICK:-}
rc=0
"$B/opfuse" eval list --problems-dir "$DIR" --json > "$O/problems.json" || exit 1
"$B/opfuse" eval baseline --problems-dir "$DIR" --output "$O/baseline_time.json" $QUICK > "$W/baseline.md" 2> "$W/baseline.err" \
  || { rc=1; tail -3 "$W/baseline.err"; }
python3 tools/eval_peer.py --problems "$O/problems.json" --baseline "$O/baseline_time.json" > "$W/peer.log" 2> "$W/peer.err" \
  || { rc=1; tail -3 "$W/peer.err"; }
"$B/opfuse" eval run --problems-dir "$DIR" --baseline "$O/baseline_time.json" --output "$O/eval.json" --markdown "$O/eval.md" $QUICK \
  > /dev/null 2> "$W/eval.err" || { rc=1; tail -3 "$W/eval.err"; }
python3 - "$O" <<'PY' || rc=1
import json, sys
o = sys.argv[1]
base = json.load(open(f"{o}/baseline_time.json"))["problems"]
run = json.load(open(f"{o}/eval.json"))
bad = 0
def cell(entry):
    return f"{entry['us']:.2f}" if entry.get("us") else "— " + str(entry.get("error", "no time"))[:60]
print("| problem | opfuse µs | opfuse op-by-op µs | torch eager µs | torch.compile µs | compile / opfuse | correct |")
print("|---|---:|---:|---:|---:|---:|---|")
for r in run["results"]:
    b = base.get(r["problem"], {})
    e, c, u = b.get("torch_eager", {}), b.get("torch_compile", {}), b.get("opfuse_unfused", {})
    us, ok = r.get("runtime_us"), bool(r.get("correct"))
    if not ok or not us or not e.get("us") or not c.get("us"):
        bad += 1
    ratio = f"{c['us'] / us:.2f}" if us and c.get("us") else "—"
    print(f"| {r['problem']} | {us if us is None else f'{us:.2f}'} | {cell(u)} | {cell(e)} | {cell(c)} | {ratio} | "
          f"{'yes' if ok else 'NO: ' + str(r.get('error'))[:60]} |")
print(f"{len(run['results'])} problems, {bad} without a correct opfuse plan or a torch baseline")
sys.exit(1 if bad else 0)
PY
exit $rc
