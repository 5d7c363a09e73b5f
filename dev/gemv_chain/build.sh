#!/usr/bin/env bash
# Builds build/gemv_chain (dev/gemv_chain/gemv_chain.cc) against build/cuda's libopfuse.a, with the
# opfuse binary's link line. Carry build/gemv_chain to the device.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=build/cuda
[ -f "$B/libopfuse.a" ] || { echo "build $B first (cmake --preset cuda && cmake --build $B)" >&2; exit 2; }
libs=$(ninja -C "$B" -t commands opfuse | tail -1 | grep -oE ' -o opfuse .*&&' | sed -e 's/^ -o opfuse//' -e 's/&&$//')
cd "$B"
/usr/bin/c++ -std=c++20 -O2 -DFMT_HEADER_ONLY=1 -DOPFUSE_WITH_CUDA=1 -I../../include -I../../src -isystem /usr/local/cuda/include \
  ../../dev/gemv_chain/gemv_chain.cc -o ../gemv_chain -static-libstdc++ -static-libgcc $libs
echo "built build/gemv_chain"
