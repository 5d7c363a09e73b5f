#!/usr/bin/env bash
# Builds the opfuse Python module with CUDA for the GPU machine's Python and packs it (with the
# package's .py files) as one .tar.xz for the device tool's carry — tools/python_gpu_check.sh then
# runs tests/python there.
# The GPU machine's python3 is 3.12 (/work/.library/device/KINDS.md; python_gpu_check.sh prints and
# checks it): the module is built here against a local CPython 3.12's headers (PYTHON=...).
#   OPFUSE_BUILD_DIR=build/hpcu OPFUSE_CARRY=build/carry_hp PYTHON=/root/.pyenv/versions/3.12.1/bin/python3.12 \
#     bash tools/build_python_carry.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${OPFUSE_BUILD_DIR:-build/cuda_py}
CARRY=${OPFUSE_CARRY:-build/carry_py}
PYTHON=${PYTHON:?set PYTHON to a python3 of the GPU machine\'s minor version (3.12)}
cmake --preset cuda -B "$BUILD_DIR" -DOPFUSE_PYTHON=ON -DPython_EXECUTABLE="$PYTHON" > /dev/null
cmake --build "$BUILD_DIR" -j "${OPFUSE_JOBS:-$(nproc)}" --target _opfuse
rm -rf "$CARRY" && mkdir -p "$CARRY/python"
cp -r "$BUILD_DIR/python/opfuse" "$CARRY/python/"
strip --strip-debug "$CARRY"/python/opfuse/_opfuse*.so
"$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")' > "$CARRY/python/PYTHON_VERSION"
tar -C "$CARRY" -cf - . | xz -T2 -6 > "$CARRY.tar.xz"
du -sh "$CARRY" "$CARRY.tar.xz"
