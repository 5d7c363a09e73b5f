#!/usr/bin/env bash
# On the GPU machine: runs the opfuse Python tests (tests/python/test_opfuse_*.py) with torch on
# CUDA against the module packed by tools/build_python_carry.sh (extracted under $BUILD/python).
# First prints python/torch versions and checks that the module was built for this python's minor
# version; a mismatch is reported (exit 3), not papered over.
#   BUILD=build/c OUT=$OUT bash tools/python_gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/c}
OUT=${OUT:-/tmp}
PY=${PY:-python3}
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
have=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
want=$(cat "$BUILD/python/PYTHON_VERSION" 2>/dev/null || echo unknown)
if [ "$have" != "$want" ]; then
  echo "python_gpu_check: the module was built for python $want, this machine has $have: rebuild it with" \
       "PYTHON=<a python$have> bash tools/build_python_carry.sh" >&2
  exit 3
fi
export PYTHONPATH="$PWD/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" OPFUSE_REQUIRE_PYTHON=1 PYTHONUNBUFFERED=1
"$PY" -c 'import opfuse; print("opfuse", opfuse.__file__, "built_with_cuda", opfuse.built_with_cuda, opfuse.cuda_available())'
"$PY" -m pytest -q -p no:cacheprovider -rs tests/python/test_opfuse_api.py tests/python/test_opfuse_torch.py \
  tests/python/test_opfuse_readme.py 2>&1 | tee "$OUT/python_gpu_check.log"
exit "${PIPESTATUS[0]}"
