#!/usr/bin/env bash
# Behaviour and speed before and after a change, in one device call (the same GPU, the same run):
# `opfuse bench ops` (patterns suite, library and jit) and `opfuse bench e2e` (TinyLlama-1.1B shapes,
# never and always, decode batch 1 and 8, prefill 2048), each binary in turn, then a table of
# after/before ratios (tools/before_after_table.py).
#   here:   OPFUSE_BEFORE=DIR bash tools/before_after.sh --pack   (DIR: a stripped `opfuse` built at the
#           earlier commit, with its libopfuse_sentencepiece.so beside it; packs build/ba.tar.xz with
#           build/carry's opfuse as "after"; the GPU check runs from build/carry.tar.xz)
#   device: bash tools/before_after.sh                            (carry ["build/ba.tar.xz"])
# Env: BA_OPS (bench ops flags, default "--suite patterns --variants library,jit"; split on spaces, so no
# quotes inside it: --ops rmsnorm|softmax, not --ops 'rmsnorm|softmax'), BA_RUNS (e2e runs, 3),
# BA_E2E=0 (no e2e part), BA_PER_CASE=1 (the table lists each case that moved by more than 3 %);
# when packing, BA_WITH_TESTS=1 adds tests/test_gpu to "after" (then BUILD=build/ba/after bash tools/gpu_check.sh
# runs from the same carry), and OPFUSE_ALSO=DIR a third binary, "also" (say, one of two changes alone: the
# tables then compare after and also with before, and also with after).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
if [ "${1:-}" = --pack ]; then
  [ -x "${OPFUSE_BEFORE:-}/opfuse" ] || { echo "before_after.sh: OPFUSE_BEFORE=DIR with DIR/opfuse required" >&2; exit 2; }
  rm -rf build/ba && mkdir -p build/ba/before build/ba/after
  cp "$OPFUSE_BEFORE"/* build/ba/before/
  cp build/carry/opfuse build/carry/libopfuse_sentencepiece.so build/carry/libsentencepiece.so* build/ba/after/
  if [ -n "${OPFUSE_ALSO:-}" ]; then
    [ -x "$OPFUSE_ALSO/opfuse" ] || { echo "before_after.sh: OPFUSE_ALSO=DIR needs DIR/opfuse" >&2; exit 2; }
    mkdir -p build/ba/also && cp "$OPFUSE_ALSO"/opfuse "$OPFUSE_ALSO"/lib*.so* build/ba/also/
  fi
  # BA_WITH_TESTS=1: the GPU tests too, so one carry serves tools/gpu_check.sh (BUILD=build/ba/after)
  if [ "${BA_WITH_TESTS:-0}" = 1 ]; then mkdir -p build/ba/after/tests && cp build/carry/tests/test_gpu build/ba/after/tests/; fi
  # -9e: its 64 MiB dictionary spans both opfuse binaries, which share most of their bytes (about half
  # the size of -6's archive, so the GPU tests fit beside them under the carry limit)
  tar -C build/ba -cf - . | xz -T2 -9e > build/ba.tar.xz
  du -sh build/ba.tar.xz
  exit 0
fi
# the device tool returns at most 8 files: the work stays in W, $OUT gets the table and one archive
W=/tmp/before_after_work
O=${OUT:-/tmp/before_after}
rm -rf "$W" && mkdir -p "$W" "$O" build/ba
python3 -c "import tarfile; tarfile.open('build/ba.tar.xz').extractall('build/ba')" || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/device.txt" || true
MODEL=/tmp/ba_tinyllama_bf16
if [ "${BA_E2E:-1}" != 0 ]; then
  build/ba/after/opfuse init-weights --config tinyllama-1.1b --dtype bf16 --out "$MODEL" > "$W/init.log" 2>&1 || { cat "$W/init.log"; exit 1; }
fi
RUNS=(before after)
[ -x build/ba/also/opfuse ] && RUNS+=(also)
for which in "${RUNS[@]}"; do
  B=build/ba/$which
  export OPFUSE_CACHE_DIR=/tmp/ba_cache_$which
  t=$SECONDS
  # shellcheck disable=SC2086  # BA_OPS is a list of flags
  "$B/opfuse" bench ops --out "$W/ops_$which" ${BA_OPS:---suite patterns --variants library,jit} \
    > "$W/ops_$which.md" 2> "$W/ops_$which.log" || echo "$which: bench ops rc $?"
  echo "$which: bench ops $((SECONDS - t)) s"
  [ "${BA_E2E:-1}" = 0 ] && continue
  t=$SECONDS
  "$B/opfuse" bench e2e --model "$MODEL" --backend cuda --strategies never,always --runs "${BA_RUNS:-3}" \
    --cases '[prefill=128, decode=32]' --cases '[prefill=128, decode=32, batch=8]' --cases '[prefill=2048, decode=0]' \
    --output "$W/e2e_$which.json" > "$W/e2e_$which.md" 2> "$W/e2e_$which.log" || echo "$which: bench e2e rc $?"
  echo "$which: bench e2e $((SECONDS - t)) s"
done
PER_CASE=()
[ "${BA_PER_CASE:-0}" = 1 ] && PER_CASE=(--per-case)
python3 tools/before_after_table.py "$W" "${PER_CASE[@]}" | tee "$W/table.md"
if [ -x build/ba/also/opfuse ]; then
  for pair in "before also" "after also"; do
    echo
    # shellcheck disable=SC2086  # two names
    python3 tools/before_after_table.py "$W" "${PER_CASE[@]}" --pair $pair
  done | tee -a "$W/table.md"
fi
# the device tool returns a few files only: the reports, tables and logs travel as one archive
(cd "$W" && shopt -s nullglob && tar -czf "$O/before_after.tgz" device.txt table.md ops_*.md ops_*.log ops_*/bench_report.json e2e_*) || true
cp "$W/table.md" "$W/device.txt" "$O/" 2>/dev/null || true
