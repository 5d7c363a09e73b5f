#!/usr/bin/env bash
# Device run (session 14, issue 4): what the L2-tag reset before each sample (tools/bench_peer.py L2Tags,
# src/bench/cuda/timing.cc) changes in the peer's readings. bench ops writes the fused patterns' cases.json
# (ROWS, OPS), then tools/bench_peer.py times them with opfuse in its process, under each --l2-tags mode (RULES), ROUNDS times in turn; a table of torch.compile and opfuse µs per rule
# (median over rounds) last. Carry build/carry.tar.xz.
set -uo pipefail
. "$(dirname "$0")/../../tools/device_common.sh"
opfuse_device_work tags_ab || exit 1
"$B/opfuse" bench ops --suite patterns --ops "${OPS:-rmsnorm|add_rmsnorm|swiglu|softmax}" --rows "${ROWS:-512,2048,16384}" \
  --variants jit --out "$W/bench" > "$W/bench.md" 2> "$W/bench_stderr.log" || { echo "bench ops failed"; exit 1; }
# RULES: bench_peer's --l2-tags modes (demote, reset, keep)
RULES=${RULES:-demote reset keep}
IDS=${IDS:-.}
for r in $(seq 1 "${ROUNDS:-2}"); do
  for rule in $RULES; do
    timeout 400 python3 tools/bench_peer.py --cases "$W/bench/cases.json" --ids "$IDS" --l2-tags $rule \
      --out "$W/peer_${rule}_$r.json" --opfuse-lib "$B/libopfuse_capi.so" --opfuse-variants jit \
      > /dev/null 2> "$W/peer_${rule}_$r.log"
    echo "peer $rule round $r rc $?"
  done
done
python3 - "$W" "${ROUNDS:-2}" $RULES <<'PY' | tee "$W/tags_ab.md"
import json, statistics, sys
w, n, rules = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
runs = {rule: [json.load(open(f"{w}/peer_{rule}_{r}.json"))["results"] for r in range(1, n + 1)] for rule in rules}
def med(rule, cid, key):
    v = [x[key] for res in runs[rule] for x in res if x["id"] == cid and x.get(key)]
    return f"{statistics.median(v):.2f}" if v else "-"
print("| case | " + " | ".join(f"compile µs, {r}" for r in rules) + " | " + " | ".join(f"opfuse jit µs, {r}" for r in rules) + " |")
print("|---|" + "---:|" * (2 * len(rules)))
for x in runs[rules[0]][0]:
    c = x["id"]
    print(f"| {c} | " + " | ".join(med(r, c, "compile_us") for r in rules) + " | "
          + " | ".join(med(r, c, "opfuse_jit_us") for r in rules) + " |")
PY
