#!/usr/bin/env bash
# A row-kernel change checked in one device call, from the repository root with build/carry.tar.xz
# carried (tools/build_carry.sh):
#   1. the GPU tests of FILTER in parallel shards (tools/gpu_tests_sharded.sh);
#   2. compute-sanitizer memcheck on MEMCHECK_FILTER (skipped when empty);
#   3. `opfuse bench ops --shapes SHAPES --ops OPS` (library and jit, each case beside its same-size
#      copy) — one table of the best variant's fraction of the copy per case (tools/sweep_targets.py's
#      input: bench_report.json).
#   device: FILTER='*Stream*:*Stage*' MEMCHECK_FILTER='*Stream*' SHAPES=2249x59669,3441x38998 OPS=logsumexp \
#           bash tools/row_change_check.sh
# Env: FILTER (default '*Stream*:*Stage*:Sweep*'), SHARDS (default the cores less 2), SHARD_TIMEOUT (s,
# default 420), MEMCHECK_FILTER (default empty), MEMCHECK_TIMEOUT (s, default 240), SHAPES (default
# empty: no bench), OPS (default: every sweep op), VARIANTS (default library,jit), BENCH_TIMEOUT (s,
# default 300). Logs in $OUT/row_check.tgz, the bench report in $OUT/bench_report.json; the summary last.
set -uo pipefail
. "$(dirname "$0")/device_common.sh"
opfuse_device_work row_check || exit 1
rc=0
summary=()
t=$SECONDS
BUILD=$B OUT=$W FILTER="${FILTER:-*Stream*:*Stage*:Sweep*}" SHARD_TIMEOUT="${SHARD_TIMEOUT:-420}" \
  bash tools/gpu_tests_sharded.sh > "$W/tests.txt" 2>&1 || rc=1
summary+=("tests: $(grep -m1 '^gpu tests' "$W/tests.txt") ($((SECONDS - t)) s)")
if [ -n "${MEMCHECK_FILTER:-}" ]; then
  t=$SECONDS
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
  if [ -n "$CS" ]; then
    timeout "${MEMCHECK_TIMEOUT:-240}" "$CS" --tool memcheck --error-exitcode 3 "$B/tests/test_gpu" \
      --gtest_filter="$MEMCHECK_FILTER" > "$W/memcheck.log" 2>&1
    m=$?
    [ "$m" = 0 ] || rc=1
    summary+=("memcheck: $(grep -E 'ERROR SUMMARY' "$W/memcheck.log" | tail -1) (rc $m, $(grep -c '^\[       OK \]' "$W/memcheck.log") tests, $((SECONDS - t)) s)")
  else
    rc=1
    summary+=("memcheck: compute-sanitizer not found")
  fi
fi
if [ -n "${SHAPES:-}" ]; then
  t=$SECONDS
  timeout "${BENCH_TIMEOUT:-300}" "$B/opfuse" bench ops --out "$W/bench" --shapes "$SHAPES" ${OPS:+--ops "$OPS"} \
    --variants "${VARIANTS:-library,jit}" > "$W/bench.md" 2> "$W/bench_stderr.log"
  b=$?
  [ "$b" = 0 ] || rc=1
  summary+=("bench ops: rc $b ($((SECONDS - t)) s)")
  cp "$W/bench/bench_report.json" "${OUT:-/tmp}/bench_report.json" 2>/dev/null
fi
tar -C "$W" -czf "${OUT:-/tmp/row_check}/row_check.tgz" .
grep -E "^shard|^unfinished|FAILED" "$W/tests.txt" | head -20
if [ -f "$W/bench/bench_report.json" ]; then
  python3 - "$W/bench/bench_report.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(r.get("device", ""))
print("| case | copy µs | library µs | jit µs | best of copy | correct |")
print("|---|---:|---:|---:|---:|---|")
for c in r["cases"]:
    v = c.get("variants", {})
    us = lambda n: f"{v[n]['us']:.1f}" if n in v and v[n].get("us") else "-"
    ok = all(x.get("correct", False) for x in v.values() if x.get("us"))
    print(f"| {c['id']} | {c.get('copy_same_us') or 0:.1f} | {us('library')} | {us('jit')} | "
          f"{c['ratios'].get('best_of_same_size_copy') or 0:.2f} | {'yes' if ok else 'NO'} |")
EOF
fi
printf '%s\n' "${summary[@]}"
exit $rc
