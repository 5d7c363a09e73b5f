#!/usr/bin/env bash
# Builds the CUDA binaries here (no GPU needed), strips them and packs them as one .tar.xz — the file
# the device tool carries to the GPU machine (build/ is git-excluded; build/cuda is > 64 MiB and even
# the stripped binaries are ~70 MB, over the carry limit).
#   bash tools/build_carry.sh            → build/carry.tar.xz (opfuse, tests/test_gpu, libopfuse_capi.so)
#   OPFUSE_BUILD_DIR=build/hK OPFUSE_CARRY=build/carry_hK bash tools/build_carry.sh
#                                          (a second checkout of the build, e.g. for a parallel worker)
# On the device (carry ["build/carry.tar.xz"]):
#   mkdir -p build/c && python3 -c "import tarfile;tarfile.open('build/carry.tar.xz').extractall('build/c')"
#   BUILD=build/c bash tools/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${OPFUSE_BUILD_DIR:-build/cuda}
CARRY=${OPFUSE_CARRY:-build/carry}
cmake --preset cuda -B "$BUILD_DIR" > /dev/null
# libopfuse_capi.so (tools/bench_peer.py --opfuse-lib) exists where the Python module is built (pybind11).
CAPI=""
grep -q "opfuse_capi" "$BUILD_DIR/build.ninja" 2>/dev/null && CAPI=opfuse_capi
cmake --build "$BUILD_DIR" -j "${OPFUSE_JOBS:-$(nproc)}" --target opfuse_cli test_gpu $CAPI ${OPFUSE_EXTRA_TARGETS:-}
rm -rf "$CARRY" && mkdir -p "$CARRY/tests"
cp "$BUILD_DIR/opfuse" "$CARRY/"
cp "$BUILD_DIR/tests/test_gpu" "$CARRY/tests/"
# the SentencePiece module (dlopen()ed next to the binary) and the Debian library it links
if [ -f "$BUILD_DIR/libopfuse_sentencepiece.so" ]; then
  cp "$BUILD_DIR/libopfuse_sentencepiece.so" "$CARRY/"
  for lib in $(ldd "$BUILD_DIR/libopfuse_sentencepiece.so" | awk '/sentencepiece|protobuf-lite|absl/ {print $3}'); do cp "$lib" "$CARRY/"; done
fi
strip "$CARRY/opfuse" "$CARRY/tests/test_gpu"
if [ -n "$CAPI" ]; then
  cp "$BUILD_DIR/libopfuse_capi.so" "$CARRY/"
  strip --strip-unneeded "$CARRY/libopfuse_capi.so"
fi
tar -C "$CARRY" -cf - . | xz -T2 -6 > "$CARRY.tar.xz"
du -sh "$CARRY" "$CARRY.tar.xz"
