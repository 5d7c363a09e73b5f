#!/usr/bin/env bash
# Issue 4's targets measured in one device call: `opfuse bench ops` over the patterns suite (every
# pattern at decode and prefill rows, unfused / library / jit), tools/bench_peer.py (torch eager and
# torch.compile, and opfuse timed in the peer's process where libopfuse_capi.so is carried), merged
# by `opfuse bench report`, then tools/bench_targets.py: one verdict per target, its worst case and
# every miss. Carry build/carry.tar.xz (tools/build_carry.sh).
#   device: bash tools/bench_full.sh
# Env: BENCH_ARGS (`opfuse bench ops` flags; default "--suite patterns": every target is about patterns,
# and micro + patterns with the peer's torch.compile warm-ups may not fit one 600 s device call;
# BENCH_ARGS="--suite micro" for the rest, BENCH_ARGS= for every suite), PEER_TIMEOUT (s, default 420), OPFUSE_LIB=0 (no one-process
# reading), PEER_INTERLEAVE (default 3).
# Everything lands in $OUT/bench_full.tgz (bench_report.json, bench_metrics.json, report.html,
# peer.json, cases.json, logs, targets.json / targets.md); the targets table is printed last.
set -uo pipefail
. "$(dirname "$0")/device_common.sh"
opfuse_device_work bench_full || exit 1
t=$SECONDS
# shellcheck disable=SC2086  # BENCH_ARGS is a list of flags
"$B/opfuse" bench ops --out "$W/bench" ${BENCH_ARGS---suite patterns} > "$W/bench.md" 2> "$W/bench_stderr.log"
rc=$?
echo "bench ops rc $rc ($((SECONDS - t)) s)"
[ "$rc" = 0 ] || tail -5 "$W/bench_stderr.log"
opfuse_peer_opfuse_args
t=$SECONDS
timeout "${PEER_TIMEOUT:-420}" python3 tools/bench_peer.py --cases "$W/bench/cases.json" --out "$W/bench/peer.json" \
  "${PEER_OPFUSE[@]}" > "$W/peer.txt" 2> "$W/peer_stderr.log"
rc=$?
echo "bench_peer rc $rc ($((SECONDS - t)) s)"
[ "$rc" = 0 ] || tail -5 "$W/peer_stderr.log"
"$B/opfuse" bench report --dir "$W/bench" --peer "$W/bench/peer.json" > "$W/report.md" 2>&1
echo "report rc $?"
python3 tools/bench_targets.py "$W/bench/bench_report.json" --json "$W/targets.json" --max-misses 30 > "$W/targets.md" 2>&1
echo "bench_targets rc $?"
tar -C "$W" -czf "${OUT:-/tmp/bench_full}/bench_full.tgz" .
head -12 "$W/targets.md" 2>/dev/null || echo "no targets table (see bench_full.tgz)"
rm -rf "$W"  # $OUT keeps the one archive
