#!/usr/bin/env bash
# Fused-kernel probe on the device machine (issue 4's prefill targets): the launch-shape sweep of the
# fused library kernels (LibraryFusedBandwidthTest.DISABLED_ShapeSweep: every candidate row shape
# beside the planner's own, with a same-bytes copy), then `opfuse bench ops` for the fused patterns
# (library + jit) and tools/bench_peer.py (torch eager / torch.compile) for the same cases, merged by
# `opfuse bench report`. Carry build/carry.tar.xz (tools/build_carry.sh).
#   device: ROWS=512,2048,16384 bash tools/fused_probe.sh
# Env: ROWS (bench rows), OPS (bench --ops regex), SWEEP=0 skips the sweep, OPFUSE_SWEEP_ROWS narrows
# the sweep's rows, PEER_TIMEOUT (s), PEER_AB=1 adds the peer with --no-rotate-outputs and a table of both,
# OPFUSE_LIB=0 keeps opfuse out of the peer's process (by default libopfuse_capi.so, when carried, is timed
# there too: the one-process comparison, torch.compile and opfuse timed in PEER_INTERLEAVE rounds in turn, default 3), NCU_CASE='patterns/rmsnorm/bf16/rows=512/h=4096 ...' (case ids) adds ncu metrics of opfuse's and torch.compile's
# kernels for each case side by side (clocks left alone), FIT_ROWS='16384,32768,65536' adds bench ops (library)
# at those rows and a least-squares line µs = a + bytes / B per case: a is the fixed cost of one call under
# the timing rules, B the bandwidth the kernel streams at once running, ROUNDS=N repeats bench ops + peer N
# times in turn and tabulates torch.compile / opfuse per round and the median, TRACE_CASES='<case id> ...'
# runs bench ops and the peer for each case under the CUPTI tracer (carry build/cupti_trace) and lists
# each kernel's in-place duration and its launch gap after the spin, ENV_AB='VAR=value ...' runs bench ops
# (no peer) AB_ROUNDS times (default 3) without and with those variables, in turn, and tabulates the
# medians, MAIN=0 skips the default bench ops + peer + report (with ENV_AB etc.). Everything lands in $OUT/probe.tgz; a short table is printed last.
set -uo pipefail
. "$(dirname "$0")/device_common.sh"
opfuse_device_work fused_probe || exit 1
# bench ops over the fused patterns (OPS, ROWS), library + jit, into directory $1; further arguments
# go to bench ops. Its markdown goes to stdout, its stderr to bench_stderr.log.
bench_fused() {
  local dir=$1
  shift
  "$B/opfuse" bench ops --suite patterns --ops "${OPS:-rmsnorm|add_rmsnorm|swiglu|softmax}" --rows "${ROWS:-512,2048,16384}" \
    --variants library,jit --out "$dir" "$@" 2>> "$W/bench_stderr.log"
}
# op, rows and width of a case id (patterns/<op>/<dtype>/rows=<R>/h=<W>) into $op $rows $width.
case_parts() {
  op=$(echo "$1" | cut -d/ -f2) rows=$(echo "$1" | sed -n 's/.*rows=\([0-9]*\).*/\1/p')
  width=$(echo "$1" | sed -n 's/.*h=\([0-9]*\).*/\1/p')
}
if [ "${SWEEP:-1}" = 1 ]; then
  t=$SECONDS
  timeout "${SWEEP_TIMEOUT:-240}" "$B/tests/test_gpu" --gtest_also_run_disabled_tests \
    --gtest_filter='LibraryFusedBandwidthTest.DISABLED_ShapeSweep' > "$W/sweep.txt" 2>&1
  echo "sweep rc $? ($((SECONDS - t)) s), $(grep -c '^\[lib-bw\].*us' "$W/sweep.txt") rows"
fi
# opfuse's kernels timed inside the peer's process too (one-process comparison) unless OPFUSE_LIB=0.
opfuse_peer_opfuse_args
if [ "${MAIN:-1}" = 1 ]; then  # MAIN=0: only the modes asked for (ENV_AB, FIT_ROWS, ...)
  t=$SECONDS
  bench_fused "$W/bench" > "$W/bench.md"
  echo "bench ops rc $? ($((SECONDS - t)) s)"
  t=$SECONDS
  timeout "${PEER_TIMEOUT:-300}" python3 tools/bench_peer.py --cases "$W/bench/cases.json" --out "$W/bench/peer.json" \
    "${PEER_OPFUSE[@]}" > "$W/peer.txt" 2> "$W/peer_stderr.log"
  echo "bench_peer rc $? ($((SECONDS - t)) s)"
  "$B/opfuse" bench report --dir "$W/bench" --peer "$W/bench/peer.json" > "$W/report.md" 2>&1
  echo "report rc $?"
fi
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
if [ "${ROUNDS:-1}" -gt 1 ]; then
  t=$SECONDS
  for r in $(seq 2 "$ROUNDS"); do
    bench_fused "$W/bench_r$r" > /dev/null
    timeout "${PEER_TIMEOUT:-300}" python3 tools/bench_peer.py --cases "$W/bench_r$r/cases.json" --out "$W/bench_r$r/peer.json" \
      "${PEER_OPFUSE[@]}" > /dev/null 2>> "$W/peer_stderr.log"
    "$B/opfuse" bench report --dir "$W/bench_r$r" --peer "$W/bench_r$r/peer.json" > /dev/null 2>&1
  done
  echo "rounds 2..$ROUNDS ($((SECONDS - t)) s)"
  python3 - "$W" "$ROUNDS" <<'PY' | tee "$W/rounds.md"
import json, statistics, sys
w, n = sys.argv[1], int(sys.argv[2])
dirs = [f"{w}/bench"] + [f"{w}/bench_r{r}" for r in range(2, n + 1)]
runs = [{c["id"]: c for c in json.load(open(f"{d}/bench_report.json"))["cases"]} for d in dirs]
f = lambda x, p=2: f"{x:.{p}f}" if isinstance(x, (int, float)) else "-"
print(f"| case | opfuse best µs, median of {n} | compile µs, median | compile / opfuse per round | median ratio "
      f"| one process: opfuse µs, median | one process: compile / opfuse per round | median |")
print("|---|---:|---:|---|---:|---:|---|---:|")
for cid in runs[0]:
    best, comp, ratio, one, one_ratio = [], [], [], [], []
    for run in runs:
        c = run.get(cid, {})
        b = (c.get("ratios") or {}).get("best_us")
        cu = (c.get("peer") or {}).get("compile_us")
        ou = (c.get("peer") or {}).get("opfuse_us")
        if isinstance(b, (int, float)):
            best.append(b)
        if isinstance(cu, (int, float)):
            comp.append(cu)
        if isinstance(ou, (int, float)):
            one.append(ou)
        ratio.append(cu / b if isinstance(b, (int, float)) and isinstance(cu, (int, float)) else None)
        one_ratio.append(cu / ou if isinstance(ou, (int, float)) and isinstance(cu, (int, float)) else None)
    med = lambda v: statistics.median(v) if v else None
    rs = [x for x in ratio if x is not None]
    os_ = [x for x in one_ratio if x is not None]
    print(f"| {cid} | {f(med(best))} | {f(med(comp))} | {' '.join(f(x, 3) for x in ratio)} | **{f(med(rs), 3)}** "
          f"| {f(med(one))} | {' '.join(f(x, 3) for x in one_ratio)} | **{f(med(os_), 3)}** |")
PY
fi
if [ -n "${ENV_AB:-}" ]; then
  t=$SECONDS
  for r in $(seq 1 "${AB_ROUNDS:-3}"); do
    bench_fused "$W/ab_off_$r" > /dev/null
    (export $ENV_AB && bench_fused "$W/ab_on_$r" > /dev/null)
  done
  echo "env A/B ($((SECONDS - t)) s)"
  python3 - "$W" "${AB_ROUNDS:-3}" "$ENV_AB" <<'PY' | tee "$W/env_ab.md"
import json, statistics, sys
w, n, env = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(side):
    out = {}
    for r in range(1, n + 1):
        for c in json.load(open(f"{w}/ab_{side}_{r}/bench_report.json"))["cases"]:
            for v, x in c["variants"].items():
                if isinstance(x.get("us"), (int, float)):
                    out.setdefault((c["id"], v), []).append(x["us"])
    return out
off, on = load("off"), load("on")
f = lambda x: f"{x:.2f}" if isinstance(x, (int, float)) else "-"
print(f"median µs of {n} rounds, without / with `{env}`")
print("| case | variant | without | with | with / without |")
print("|---|---|---:|---:|---:|")
for k in off:
    a, b = statistics.median(off[k]), statistics.median(on[k]) if k in on else None
    print(f"| {k[0]} | {k[1]} | {f(a)} | {f(b)} | {f(b / a if b else None)} |")
PY
fi
if [ -n "${TRACE_CASES:-}" ]; then
  LIB=$PWD/build/cupti_trace/libopfuse_cupti_trace.so
  if [ ! -f "$LIB" ]; then
    echo "trace: $LIB missing (dev/cupti_trace/build.sh, carry build/cupti_trace)"
  else
    n=0
    for case in $TRACE_CASES; do
      n=$((n + 1))
      case_parts "$case"
      CUDA_INJECTION64_PATH=$LIB OPFUSE_CUPTI_TRACE_OUT=$W/trace_${n}_opfuse.csv "$B/opfuse" bench ops --suite patterns \
        --ops "^$op\$" --rows "$rows" --widths "$width" --variants library,jit --out "$W/trace_bench_$n" \
        > /dev/null 2> "$W/trace_${n}_opfuse.log"
      CUDA_INJECTION64_PATH=$LIB OPFUSE_CUPTI_TRACE_OUT=$W/trace_${n}_peer.csv timeout 300 python3 tools/bench_peer.py \
        --cases "$W/trace_bench_$n/cases.json" --ids "$case" --out "$W/trace_peer_$n.json" "${PEER_OPFUSE[@]}" \
        > /dev/null 2> "$W/trace_${n}_peer.log"
      # Only the kernels right after a spin: the timed samples (not warm-up, checks or host loops);
      # the gap is then the spin's end to the kernel's start, what the start event sees beyond the kernel.
      { echo "## $case (CUPTI; kernels right after a spin kernel, seen >= 10 times)"; echo "opfuse bench ops:";
        python3 tools/kernel_trace_summary.py "$W/trace_${n}_opfuse.csv" --by-name --min-count 10 --after 'SpinKernel|spin_kernel';
        echo "peer:"; python3 tools/kernel_trace_summary.py "$W/trace_${n}_peer.csv" --by-name --min-count 10 \
          --after 'SpinKernel|spin_kernel'; } \
        | tee -a "$W/trace.md"
    done
  fi
fi
if [ -n "${FIT_ROWS:-}" ]; then
  t=$SECONDS
  "$B/opfuse" bench ops --suite patterns --ops "${FIT_OPS:-rmsnorm|softmax|add_rmsnorm|swiglu}" --rows "$FIT_ROWS" \
    --variants library --out "$W/fit" > "$W/fit.md" 2>> "$W/bench_stderr.log"
  echo "fit bench rc $? ($((SECONDS - t)) s)"
  python3 - "$W/fit" <<'PY' | tee "$W/fit_line.md"
import json, sys, collections
r = json.load(open(f"{sys.argv[1]}/bench_report.json"))
copy = r["ceilings"]["copy_gbps"]
groups = collections.defaultdict(list)
for c in r["cases"]:
    us = c["variants"].get("library", {}).get("us")
    if isinstance(us, (int, float)):
        groups[(c["op"], c["width"])].append((c["bytes"], us, c["rows"]))
print(f"copy ceiling {copy:.0f} GB/s (1 GiB)")
print("| op | width | rows: µs (% of copy) | fixed a µs | streaming B GB/s | B % of copy |")
print("|---|---:|---|---:|---:|---:|")
for (op, w), pts in sorted(groups.items()):
    pts.sort()
    n = len(pts)
    pt = ", ".join(f"{rows}: {us:.1f} ({b / us / 1e3 / copy * 100:.0f}%)" for b, us, rows in pts)
    if n < 2:
        print(f"| {op} | {w} | {pt} | - | - | - |")
        continue
    mx = sum(b for b, _, _ in pts) / n
    my = sum(u for _, u, _ in pts) / n
    slope = sum((b - mx) * (u - my) for b, u, _ in pts) / sum((b - mx) ** 2 for b, _, _ in pts)
    a = my - slope * mx
    bw = 1 / slope / 1e3
    print(f"| {op} | {w} | {pt} | {a:.2f} | {bw:.0f} | {bw / copy * 100:.1f} |")
PY
fi
if [ -n "${NCU_CASE:-}" ]; then
  # ncu (clocks left alone; ncu flushes caches before each profiled launch) on each case of NCU_CASE
  # (space-separated ids): opfuse's library and jit kernels and torch.compile's Triton kernel, the same
  # metrics side by side (ncu_<n>_<side>.csv, ncu_compare.md).
  NCU_BIN=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum
  M=$M,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__block_size,launch__grid_size
  M=$M,lts__t_sector_hit_rate.pct,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio
  M=$M,smsp__average_warp_latency_issue_stalled_barrier.ratio,sm__cycles_elapsed.avg,smsp__inst_executed.sum
  n=0
  for case in $NCU_CASE; do
    n=$((n + 1))
    case_parts "$case"
    for v in library jit; do
      timeout 200 "$NCU_BIN" --clock-control none --csv --metrics "$M" --kernel-name regex:'Norm|Softmax|Glu|fz_' \
        --launch-skip 20 --launch-count 4 "$B/opfuse" bench ops --suite patterns --ops "^$op\$" --rows "$rows" \
        --widths "$width" --variants $v --quick --out "$W/ncu_bench_$n" > "$W/ncu_${n}_$v.csv" 2> "$W/ncu_${n}_$v.log"
      echo "ncu $case $v rc $?"
    done
    timeout 300 "$NCU_BIN" --clock-control none --csv --metrics "$M" --kernel-name regex:triton \
      --launch-skip 20 --launch-count 4 python3 tools/bench_peer.py --cases "$W/bench/cases.json" --ids "$case" \
      --reps 30 --out "$W/ncu_peer_$n.json" > "$W/ncu_${n}_compile.csv" 2> "$W/ncu_${n}_compile.log"
    echo "ncu $case compile rc $?"
    python3 - "$W" "$n" "$case" <<'PY' | tee -a "$W/ncu_compare.md"
import csv, io, sys, collections
w, n, case = sys.argv[1:4]
print(f"## {case}")
keys = ["gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_read.sum",
        "dram__bytes_write.sum", "launch__grid_size", "launch__block_size", "launch__registers_per_thread",
        "sm__warps_active.avg.pct_of_peak_sustained_active",
        "smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio",
        "smsp__average_warp_latency_issue_stalled_barrier.ratio", "smsp__inst_executed.sum"]
print("| side | kernel | " + " | ".join(k.split("__")[1].split(".")[0] if "__" in k else k for k in keys) + " |")
print("|---|---|" + "---:|" * len(keys))
for side in ("library", "jit", "compile"):
    try:
        text = open(f"{w}/ncu_{n}_{side}.csv", errors="replace").read()
    except OSError:
        continue
    start = text.find('"ID"')
    rows = list(csv.DictReader(io.StringIO(text[start:]))) if start >= 0 else []
    per = collections.OrderedDict()
    for r in rows:
        per.setdefault((r["ID"], r["Kernel Name"][:50]), {})[r["Metric Name"]] = (r["Metric Value"], r.get("Metric Unit", ""))
    for (i, name), m in list(per.items())[-2:]:
        cells = [f"{m[k][0]} {m[k][1]}".strip() if k in m else "-" for k in keys]
        print(f"| {side} | {name} | " + " | ".join(cells) + " |")
PY
  done
fi
tar -C "$W" -czf "${OUT:-/tmp/fused_probe}/probe.tgz" .
[ -f "$W/report.md" ] && grep -E '^\|' "$W/report.md" | head -60
