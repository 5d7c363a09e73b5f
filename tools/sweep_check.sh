#!/usr/bin/env bash
# Issue 30's untuned sweep in one device call: `opfuse bench ops --shapes random:N[:SEED]` (library and
# jit variants, each case with its same-size copy), tools/bench_peer.py on the same cases (torch eager and
# torch.compile, same timing method), merged by `opfuse bench report`, then tools/sweep_targets.py.
# Carry build/carry.tar.xz (tools/build_carry.sh).
#   device: SHAPES=random:24 bash tools/sweep_check.sh
# Env: SHAPES (default random:24: a fresh seed, printed), VARIANTS (default library,jit), PEER=0 (no
# peer: torch.compile compiles every shape afresh, ~5 s a case), PEER_TIMEOUT (s, default 300),
# BENCH_EXTRA (more `bench ops` flags, e.g. --quick).
# Everything lands in $OUT/sweep.tgz; the targets table is printed last.
set -uo pipefail
. "$(dirname "$0")/device_common.sh"
opfuse_device_work sweep || exit 1
t=$SECONDS
# shellcheck disable=SC2086  # BENCH_EXTRA is a list of flags
"$B/opfuse" bench ops --out "$W/bench" --shapes "${SHAPES:-random:24}" --variants "${VARIANTS:-library,jit}" \
  ${BENCH_EXTRA:-} > "$W/bench.md" 2> "$W/bench_stderr.log"
rc=$?
grep -m1 -- "--shapes" "$W/bench_stderr.log"
echo "bench ops rc $rc ($((SECONDS - t)) s)"
[ "$rc" = 0 ] || tail -5 "$W/bench_stderr.log"
if [ "${PEER:-1}" = 1 ]; then
  t=$SECONDS
  timeout "${PEER_TIMEOUT:-300}" python3 tools/bench_peer.py --cases "$W/bench/cases.json" --out "$W/bench/peer.json" \
    > "$W/peer.txt" 2> "$W/peer_stderr.log"
  rc=$?
  echo "bench_peer rc $rc ($((SECONDS - t)) s)"
  [ "$rc" = 0 ] || tail -5 "$W/peer_stderr.log"
  "$B/opfuse" bench report --dir "$W/bench" --peer "$W/bench/peer.json" > "$W/report.md" 2>&1
  echo "report rc $?"
fi
python3 tools/sweep_targets.py "$W/bench/bench_report.json" --json "$W/targets.json" > "$W/targets.md" 2>&1
echo "sweep_targets rc $?"
cp "$W/bench/bench_report.json" "${OUT:-/tmp}/sweep_bench_report.json" 2>/dev/null
tar -C "$W" -czf "${OUT:-/tmp/sweep}/sweep.tgz" .
cat "$W/targets.md" 2>/dev/null | head -60 || echo "no targets table (see sweep.tgz)"
rm -rf "$W"
