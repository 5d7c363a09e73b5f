#!/usr/bin/env bash
set -u
# Device run (session 14, issue 4): the library softmax exact-cover fast path: every softmax GPU test,
# memcheck on five cases (three new exact-cover prefill ones), bench ops softmax (library, jit) twice. Carry build/carry.tar.xz.
mkdir -p build/c && python3 -c "import tarfile; tarfile.open('build/carry.tar.xz').extractall('build/c')"
export OPFUSE_CACHE_DIR=/tmp/oc
build/c/tests/test_gpu --gtest_filter='*oftmax*:LibraryFusedPlan*' > $OUT/softmax_tests.log 2>&1; echo "softmax tests rc $?"; grep -E "PASSED|FAILED" $OUT/softmax_tests.log | head -5
compute-sanitizer --tool memcheck build/c/tests/test_gpu --gtest_filter='*softmax_bf16_4099x2048*:*softmax_f16_4097x4096*:*softmax_f32_4099x1024*:*softmax_bf16_513x2048*:*softmax_f32_1x2048*' > $OUT/softmax_memcheck.log 2>&1; echo "memcheck rc $?"; grep -E "ERROR SUMMARY|PASSED|tests ran" $OUT/softmax_memcheck.log | head
for r in 1 2; do build/c/opfuse bench ops --suite patterns --ops softmax --rows ${ROWS:-512,2048,16384} --variants library,jit --out /tmp/b$r > $OUT/bench_softmax_$r.md 2>/dev/null; echo "bench rc $?"; done
grep "softmax" $OUT/bench_softmax_1.md | head -8; grep "softmax" $OUT/bench_softmax_2.md | head -8
