#!/usr/bin/env bash
# Device run (session 14): why the library softmax was slower than the JIT's at the same launch shape (ncu on
# `opfuse run`: the library kernel at the planner's shape and at OPFUSE_SOFTMAX_PREFILL_VPT=2 (t128x2, the JIT's), and the
# JIT kernel; NCU_ROWS, empty skips), then bench ops softmax (library, jit) at each prefill vpt of VPTS (BENCH_ROWS,
# BENCH_WIDTHS, BENCH_ROUNDS). Carry build/carry.tar.xz.
set -u
mkdir -p build/c && python3 -c "import tarfile; tarfile.open('build/carry.tar.xz').extractall('build/c')"
export OPFUSE_CACHE_DIR=/tmp/oc
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
M=gpu__time_duration.sum,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio
for rows in ${NCU_ROWS-16384 2048}; do
  printf 'graph p\ninput x: bf16[%d, 2048]\ny = softmax(x)\noutput y\n' $rows > /tmp/sm$rows.ofg
  for v in "library:" "library:OPFUSE_SOFTMAX_PREFILL_VPT=2" "jit:"; do
    var=${v%%:*} env=${v#*:}
    echo "## rows $rows variant $var ${env:-(default shape)}"
    env $env "$NCU" --kernel-name 'regex:[Ss]oftmax' --metrics $M --csv build/c/opfuse run /tmp/sm$rows.ofg --backend cuda --variant $var 2>&1 \
      | grep '^"' | python3 -c "
import csv, sys
rows = list(csv.reader(sys.stdin))
h = rows[0]; ki = h.index('Kernel Name'); mi = h.index('Metric Name'); vi = h.index('Metric Value')
for r in rows[1:]: print(f'{r[ki][:60]:60s} {r[mi]:80s} {r[vi]}')
"
  done
done
# bench ops (library, jit) at each OPFUSE_SOFTMAX_PREFILL_VPT of VPTS, BENCH_ROUNDS rounds in turn.
for r in $(seq 1 "${BENCH_ROUNDS:-2}"); do
  for v in ${VPTS:-8 2}; do
    OPFUSE_SOFTMAX_PREFILL_VPT=$v build/c/opfuse bench ops --suite patterns --ops softmax --rows ${BENCH_ROWS:-2048,16384} \
      --widths ${BENCH_WIDTHS:-2048} --variants library,jit --out /tmp/bv${v}_$r 2>/dev/null | grep softmax | sed "s/^/vpt $v round $r /"
  done
done
