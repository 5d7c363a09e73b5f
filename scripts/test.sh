#!/usr/bin/env bash
# The test command (README.md; .ci/run runs exactly this). With nvcc on the PATH it first checks
# that the `release` preset picks an sm_90+ CUDA architecture (configure only). Then two builds:
#   1. preset `cpu` (g++, CUDA off): build everything, run every CTest label
#      (unit, passes, numerics, error, gpu — gpu tests skip themselves without a GPU), then pytest
#      on tests/python (the tools/ scripts and the opfuse Python module).
#   2. preset `asan` (clang, ASan+UBSan, OPFUSE_FUZZ=ON): build the unit and error tests and the
#      libFuzzer targets, run the unit and error tests under the sanitizers, then each fuzzer for
#      OPFUSE_FUZZ_SECONDS (default 30) over tests/fuzz/corpus + examples/graphs (CTest label fuzz).
# Env: OPFUSE_JOBS (default: number of CPUs), OPFUSE_FUZZ_SECONDS, OPFUSE_SKIP_ASAN=1 (step 1 only),
#   OPFUSE_PRUNE=1 (default when CI=true): remove build/cpu once its tests have run, before the asan
#   build. With debug info the two builds take ~1.8 + 1.9 GB; a CI runner ran out of disk in the asan
#   link with both on disk (2026-11-24). Free space is printed at the start and before the asan build.
# Prints the time of every step; CI (2 cores) has a budget of about 25 minutes in all. The cpu preset
# builds with -g1 (line tables: backtraces keep file and line) rather than -g, a quarter less compile
# time; the fuzzers run side by side, one per core.
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS="${OPFUSE_JOBS:-$(nproc)}"
FUZZ_SECONDS="${OPFUSE_FUZZ_SECONDS:-30}"
T0=$SECONDS
PRUNE="${OPFUSE_PRUNE:-$([ "${CI:-}" = true ] && echo 1 || echo 0)}"
free_space() { echo "==> free disk: $(df -h --output=avail . | tail -1 | tr -d ' ') at $PWD"; }
free_space
step() {
  local t=$SECONDS
  echo "==> $*"
  "$@"
  echo "==> done in $((SECONDS - t)) s: $*"
}

# The README's first command configures the `release` preset; with nvcc present it must choose a
# CUDA architecture the kernels build for (sm_90+), not the compiler's default (configure only).
check_release_arch() {
  mkdir -p build && rm -rf build/release-arch-check
  cmake --preset release -B build/release-arch-check > build/release-arch-check.log 2>&1 || { cat build/release-arch-check.log; return 1; }
  local arch
  arch=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' build/release-arch-check/CMakeCache.txt)
  rm -rf build/release-arch-check build/release-arch-check.log
  echo "release preset: CUDA architectures '$arch'"
  [[ "$arch" =~ ^(9[0-9]|[1-9][0-9]{2,})a?$ ]] || { echo "release preset chose CUDA architecture '$arch' (needs 90 or newer)"; return 1; }
}
if command -v nvcc > /dev/null 2>&1; then
  step check_release_arch
fi

# The Python module never touches Python while the GIL is released (a crash on CUDA builds without
# a GPU, which CI does not build): checked on the source, so every build is covered.
step python3 scripts/check_gil.py
# Every #include points down the layer order (docs/layers.md): checked on the sources.
step python3 scripts/check_layers.py
step cmake --preset cpu
step cmake --build --preset cpu -j "$JOBS"
step ctest --preset cpu -j "$JOBS"
# Python tests (tools/ scripts and the opfuse module, imported from the build tree; torch-dependent
# parts skip where torch or CUDA is missing). OPFUSE_REQUIRE_PYTHON=1: a module that does not
# import fails the run instead of skipping. Debian's python3-pytest/python3-numpy (install_deps.sh)
# live under /usr/bin/python3; a python3 earlier on PATH (pyenv, venv) may lack them.
PY=python3
python3 -c "import pytest, numpy" 2>/dev/null || PY=/usr/bin/python3
step env PYTHONPATH="$PWD/build/cpu/python${PYTHONPATH:+:$PYTHONPATH}" OPFUSE_REQUIRE_PYTHON=1 \
  "$PY" -m pytest -q -p no:cacheprovider tests/python

if [ "${OPFUSE_SKIP_ASAN:-0}" != 1 ]; then
  if [ "$PRUNE" = 1 ]; then
    step rm -rf build/cpu
  fi
  free_space
  # Fuzz targets are the files in tests/fuzz/*.cc (tests/CMakeLists.txt makes one target each).
  fuzzers=()
  for f in tests/fuzz/*.cc; do
    [ -e "$f" ] && fuzzers+=("$(basename "$f" .cc)")
  done
  step cmake --preset asan -DOPFUSE_FUZZ_SECONDS="$FUZZ_SECONDS"
  step cmake --build --preset asan -j "$JOBS" --target opfuse_cli test_unit test_public_api test_error "${fuzzers[@]}"
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
  step ctest --preset asan -j "$JOBS" -L '^(unit|error)$'
  if [ ${#fuzzers[@]} -gt 0 ]; then
    step ctest --preset asan -j "$JOBS" -L '^fuzz$'  # each fuzzer one core, its own scratch corpus
  fi
fi

echo "==> all tests passed in $((SECONDS - T0)) s"
