#!/usr/bin/env bash
# Device run (session 14): the library norms' exact-cover fast path (norm.cu, KTPR): every norm GPU test,
# memcheck on the new exact-cover prefill cases, then bench ops (library, jit) for the row patterns at ROWS with
# the fast path and without (OPFUSE_ROW_EXACT=0), ROUNDS rounds; a table of library µs last. Carry build/carry.tar.xz.
set -u
mkdir -p build/c && python3 -c "import tarfile; tarfile.open('build/carry.tar.xz').extractall('build/c')"
export OPFUSE_CACHE_DIR=/tmp/oc
build/c/tests/test_gpu --gtest_filter='*orm*' > $OUT/norm_tests.log 2>&1; echo "norm tests rc $?"; grep -E "^\[  PASSED|FAILED" $OUT/norm_tests.log | head -5
compute-sanitizer --tool memcheck build/c/tests/test_gpu --gtest_filter='*rms_norm_bf16_4099x2048*:*add_rms_norm_f16_4097x4096*:*layer_norm_f32_4099x1024*:*rms_norm_bf16_1x2048*:*add_rms_norm_bf16_513x4096*' > $OUT/norm_memcheck.log 2>&1; echo "memcheck rc $?"; grep -E "ERROR SUMMARY|^\[  PASSED" $OUT/norm_memcheck.log | head
# bench ops (library, jit) with the fast path and without (OPFUSE_ROW_EXACT=0), ROUNDS rounds in turn
for r in $(seq 1 "${ROUNDS:-2}"); do
  for e in 1 0; do
    OPFUSE_ROW_EXACT=$e build/c/opfuse bench ops --suite patterns --ops "${OPS:-rmsnorm|add_rmsnorm|layernorm|softmax}" \
      --rows ${ROWS:-1,32,512,2048,16384} --variants library,jit --out /tmp/nb${e}_$r > $OUT/bench_exact${e}_$r.md 2>/dev/null
    echo "bench exact=$e round $r rc $?"
  done
done
python3 - "$OUT" "${ROUNDS:-2}" <<'PY' | tee $OUT/exact_ab.md
import json, statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
def us(e, r):
    rep = json.load(open(f"/tmp/nb{e}_{r}/bench_report.json"))
    return {c["id"]: (c["variants"]["library"].get("us"), c["variants"]["jit"].get("us")) for c in rep["cases"]}
runs = {e: [us(e, r) for r in range(1, n + 1)] for e in (0, 1)}
print("| case | library µs, runtime row group | library µs, exact-cover path | ratio | jit µs |")
print("|---|---:|---:|---:|---:|")
for cid in runs[1][0]:
    off = statistics.median(x[cid][0] for x in runs[0]); on = statistics.median(x[cid][0] for x in runs[1])
    jit = statistics.median(x[cid][1] for x in runs[1])
    print(f"| {cid} | {off:.2f} | {on:.2f} | {on / off:.3f} | {jit:.2f} |")
PY
