#!/usr/bin/env bash
# Fused-kernel probe on the device machine (issue 4's prefill targets): the launch-shape sweep of the
# fused library kernels (LibraryFusedBandwidthTest.DISABLED_ShapeSweep: every candidate row shape
# beside the planner's own, with a same-bytes copy), then `opfuse bench ops` for the fused patterns
# (library + jit) and tools/bench_peer.py (torch eager / torch.compile) for the same cases, merged by
# `opfuse bench report`. Carry build/carry.tar.xz (tools/build_carry.sh).
#   device: ROWS=512,2048,16384 bash tools/fused_probe.sh
# Env: ROWS (bench rows), OPS (bench --ops regex), SWEEP=0 skips the sweep, OPFUSE_SWEEP_ROWS narrows
# the sweep's rows, PEER_TIMEOUT (s), PEER_AB=1 adds the peer with --no-rotate-outputs and a table of both,
# NCU_CASE='patterns/rmsnorm/bf16/rows=512/h=4096' (a case id) adds ncu metrics of opfuse's and torch.compile's
# kernels for that case side by side (clocks left alone). Everything lands in $OUT/probe.tgz; a short table is printed last.
set -uo pipefail
W=${OUT:-/tmp/fused_probe}/work
mkdir -p "$W" build/c
python3 -c "import tarfile; tarfile.open('build/carry.tar.xz').extractall('build/c')" || exit 1
B=build/c
export OPFUSE_CACHE_DIR=/tmp/opfuse_cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/device.txt"
if [ "${SWEEP:-1}" = 1 ]; then
  t=$SECONDS
  timeout "${SWEEP_TIMEOUT:-240}" "$B/tests/test_gpu" --gtest_also_run_disabled_tests \
    --gtest_filter='LibraryFusedBandwidthTest.DISABLED_ShapeSweep' > "$W/sweep.txt" 2>&1
  echo "sweep rc $? ($((SECONDS - t)) s), $(grep -c '^\[lib-bw\].*us' "$W/sweep.txt") rows"
fi
t=$SECONDS
"$B/opfuse" bench ops --suite patterns --ops "${OPS:-rmsnorm|add_rmsnorm|swiglu|softmax}" --rows "${ROWS:-512,2048,16384}" \
  --variants library,jit --out "$W/bench" > "$W/bench.md" 2> "$W/bench_stderr.log"
echo "bench ops rc $? ($((SECONDS - t)) s)"
t=$SECONDS
timeout "${PEER_TIMEOUT:-300}" python3 tools/bench_peer.py --cases "$W/bench/cases.json" --out "$W/bench/peer.json" \
  > "$W/peer.txt" 2> "$W/peer_stderr.log"
echo "bench_peer rc $? ($((SECONDS - t)) s)"
"$B/opfuse" bench report --dir "$W/bench" --peer "$W/bench/peer.json" > "$W/report.md" 2>&1
echo "report rc $?"
if [ "${PEER_AB:-0}" = 1 ]; then
  # The same peer with its results dropped at once (one L2-hot output block), for the A/B of the
  # output rotation; a table of torch.compile µs both ways beside opfuse's best variant.
  timeout "${PEER_TIMEOUT:-300}" python3 tools/bench_peer.py --cases "$W/bench/cases.json" --out "$W/bench/peer_one_output.json" \
    --no-rotate-outputs > "$W/peer_one_output.txt" 2>> "$W/peer_stderr.log"
  echo "bench_peer --no-rotate-outputs rc $?"
  python3 - "$W/bench" <<'PY' | tee "$W/peer_ab.md"
import json, sys
d = sys.argv[1]
def compile_us(f):
    return {r["id"]: r.get("compile_us") for r in json.load(open(f)).get("results", [])}
rot, one = compile_us(f"{d}/peer.json"), compile_us(f"{d}/peer_one_output.json")
fmt = lambda x: f"{x:.2f}" if isinstance(x, (int, float)) else "-"
print("| case | opfuse best µs | compile µs, outputs rotated | compile µs, one output block |")
print("|---|---:|---:|---:|")
for c in json.load(open(f"{d}/bench_report.json")).get("cases", []):
    best = c.get("ratios", {}).get("best_us")
    print(f"| {c['id']} | {fmt(best)} | {fmt(rot.get(c['id']))} | {fmt(one.get(c['id']))} |")
PY
fi
if [ -n "${NCU_CASE:-}" ]; then
  # ncu (clocks left alone) on one case: opfuse's library + jit kernels and torch.compile's Triton
  # kernel, the same metrics side by side (ncu_<side>.csv, ncu_compare.md).
  NCU_BIN=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum
  M=$M,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__block_size,launch__grid_size
  M=$M,lts__t_sector_hit_rate.pct,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio
  op=$(echo "$NCU_CASE" | cut -d/ -f2) rows=$(echo "$NCU_CASE" | sed -n 's/.*rows=\([0-9]*\).*/\1/p')
  timeout 200 "$NCU_BIN" --clock-control none --csv --metrics "$M" --kernel-name regex:'Norm|Softmax|Glu|fz_' \
    --launch-skip 20 --launch-count 6 "$B/opfuse" bench ops --suite patterns --ops "^$op\$" --rows "$rows" \
    --variants library,jit --out "$W/ncu_bench" > "$W/ncu_opfuse.csv" 2> "$W/ncu_opfuse_stderr.log"
  echo "ncu opfuse rc $?"
  timeout 300 "$NCU_BIN" --clock-control none --csv --metrics "$M" --kernel-name regex:triton \
    --launch-skip 20 --launch-count 3 python3 tools/bench_peer.py --cases "$W/bench/cases.json" --ids "$NCU_CASE" \
    --out "$W/ncu_peer.json" > "$W/ncu_peer.csv" 2> "$W/ncu_peer_stderr.log"
  echo "ncu peer rc $?"
  python3 - "$W" <<'PY' | tee "$W/ncu_compare.md"
import csv, io, sys, collections
w = sys.argv[1]
for side in ("opfuse", "peer"):
    text = open(f"{w}/ncu_{side}.csv", errors="replace").read()
    start = text.find('"ID"')
    rows = list(csv.DictReader(io.StringIO(text[start:]))) if start >= 0 else []
    per = collections.defaultdict(dict)
    for r in rows:
        per[(r["ID"], r["Kernel Name"][:60])][r["Metric Name"]] = r["Metric Value"]
    print(f"## {side}: {len(per)} launches")
    for (i, name), m in list(per.items())[:6]:
        print(f"- {name}: " + ", ".join(f"{k.split('__')[1] if '__' in k else k}={v}" for k, v in sorted(m.items())))
PY
fi
tar -C "$W" -czf "${OUT:-/tmp/fused_probe}/probe.tgz" .
grep -E '^\|' "$W/report.md" | head -60
