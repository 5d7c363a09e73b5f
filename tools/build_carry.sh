#!/usr/bin/env bash
# Builds the CUDA binaries here (no GPU needed) and copies them, stripped, to build/carry — the folder
# the device tool carries to the GPU machine (build/ is git-excluded; all of build/cuda is > 64 MiB).
#   bash tools/build_carry.sh && device run: BUILD=build/carry bash tools/gpu_check.sh (carry build/carry)
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset cuda > /dev/null
cmake --build build/cuda -j "${OPFUSE_JOBS:-$(nproc)}" --target opfuse_cli test_gpu
rm -rf build/carry && mkdir -p build/carry/tests
cp build/cuda/opfuse build/carry/
cp build/cuda/tests/test_gpu build/carry/tests/
strip build/carry/opfuse build/carry/tests/test_gpu
du -sh build/carry
