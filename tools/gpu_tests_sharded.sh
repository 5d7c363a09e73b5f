#!/usr/bin/env bash
# The GPU tests of a filter in parallel processes on one GPU (gtest sharding): the CPU reference each
# case is checked against dominates their time, and the GPU machine has many cores. Carry
# build/carry.tar.xz (tools/build_carry.sh).
#   device: FILTER='Sweep/LibraryFusedGpu.*:JitGpu*' SHARDS=12 bash tools/gpu_tests_sharded.sh
# Env: FILTER (gtest filter, default every test), SHARDS (processes, default the cores less 2),
# BUILD (default: unpack the carry), SHARD_TIMEOUT (s: each shard is stopped after it, and the summary
# still prints — set it below an outer `timeout`, which would kill the script before its summary).
# Out: $OUT/gpu_tests.tgz (the shards' logs: the device tool returns at most 8 files); exit 1 if any
# shard failed or did not finish.
set -uo pipefail
. "$(dirname "$0")/device_common.sh"
if [ -n "${BUILD:-}" ]; then B=$BUILD; else opfuse_device_setup || exit 1; fi
n=${SHARDS:-$(( $(nproc) > 3 ? $(nproc) - 2 : 1 ))}
o=/tmp/gpu_tests_work
rm -rf "$o" && mkdir -p "$o" "${OUT:-/tmp/gpu_tests}"
pids=()
for i in $(seq 0 $((n - 1))); do
  GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$i ${SHARD_TIMEOUT:+timeout "$SHARD_TIMEOUT"} "$B/tests/test_gpu" --gtest_filter="${FILTER:-*}" \
    > "$o/gpu_tests_shard$i.log" 2>&1 &
  pids+=($!)
done
rc=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  st=$?
  [ "$st" = 0 ] || { rc=1; echo "shard $i failed (exit $st$([ "$st" = 124 ] && echo ': SHARD_TIMEOUT'))"; }
done
passed=$(grep -h "^\[  PASSED  \]" "$o"/gpu_tests_shard*.log | awk '{s += $4} END {print s + 0}')
# a failing test's result line ends with its time ("[  FAILED  ] Suite.Test (12 ms)", parameterised
# ones with ", where GetParam() = ..." before it); the closing list repeats the names without it
failed=$(grep -hE "^\[  FAILED  \] .* \([0-9]+ ms\)$" "$o"/gpu_tests_shard*.log | wc -l)
skipped=$(grep -h "^\[  SKIPPED \] [0-9]" "$o"/gpu_tests_shard*.log | awk '{s += $4} END {print s + 0}')
echo "gpu tests (${FILTER:-*}, $n shards): $passed passed, $failed failed, $skipped skipped"
grep -hE "^\[  FAILED  \] .* \([0-9]+ ms\)$" "$o"/gpu_tests_shard*.log | sort -u | head -20
# a shard stopped by SHARD_TIMEOUT (or a crash) ends without gtest's closing summary: name its last test
for f in "$o"/gpu_tests_shard*.log; do
  grep -qE "^\[  PASSED  \]|FAILED TESTS?$" "$f" || { rc=1; echo "unfinished: $(basename "$f") (last: $(grep -E '^\[ RUN      \]' "$f" | tail -1 | cut -c14-))"; }
done
tar -C "$o" -czf "${OUT:-/tmp/gpu_tests}/gpu_tests.tgz" .
exit $rc
