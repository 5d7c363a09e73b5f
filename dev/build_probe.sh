#!/usr/bin/env bash
# Builds build/NAME from dev/NAME/NAME.cc against build/cuda's libopfuse.a, with the opfuse binary's
# link line (the C++ probes that call the library: gemv_sweep, gemv_chain). Carry build/NAME to the
# device.   bash dev/build_probe.sh NAME
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:?usage: bash dev/build_probe.sh NAME}
[ -f "dev/$N/$N.cc" ] || { echo "no dev/$N/$N.cc" >&2; exit 2; }
B=build/cuda
[ -f "$B/libopfuse.a" ] || { echo "build $B first (cmake --preset cuda && cmake --build $B)" >&2; exit 2; }
libs=$(ninja -C "$B" -t commands opfuse | tail -1 | grep -oE ' -o opfuse .*&&' | sed -e 's/^ -o opfuse//' -e 's/&&$//')
cd "$B"
/usr/bin/c++ -std=c++20 -O2 -DFMT_HEADER_ONLY=1 -DOPFUSE_WITH_CUDA=1 -I../../include -I../../src -isystem /usr/local/cuda/include \
  "../../dev/$N/$N.cc" -o "../$N" -static-libstdc++ -static-libgcc $libs
echo "built build/$N"
