#!/usr/bin/env bash
# Builds the CUPTI kernel tracer (cupti_trace.cc) into OUT_DIR (default build/cupti_trace/ of the
# checkout) and copies libcupti.so.13 next to it; rpath $ORIGIN makes the tracer load that copy, so
# OUT_DIR can be carried to a machine without the toolkit.  CUDA_HOME picks the toolkit.
#   dev/cupti_trace/build.sh [OUT_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$(cd "$here/../.." && pwd)/build/cupti_trace}
cuda=${CUDA_HOME:-/usr/local/cuda-13.0}

libdir=
for d in lib64 lib extras/CUPTI/lib64 targets/x86_64-linux/lib targets/sbsa-linux/lib; do
  if [[ -e $cuda/$d/libcupti.so ]]; then libdir=$cuda/$d; break; fi
done
[[ -n $libdir ]] || { echo "build.sh: libcupti.so not found under $cuda" >&2; exit 1; }

mkdir -p "$out"
g++ -std=c++20 -O2 -fPIC -shared -Wall -Wextra -fvisibility=hidden \
  -I"$cuda/include" -I"$cuda/extras/CUPTI/include" \
  "$here/cupti_trace.cc" -o "$out/libopfuse_cupti_trace.so" \
  -L"$libdir" -lcupti -Wl,-rpath,'$ORIGIN' -Wl,--no-undefined

soname=$(objdump -p "$libdir/libcupti.so" | awk '$1 == "SONAME" { print $2 }')
cp -L "$libdir/libcupti.so" "$out/${soname:-libcupti.so.13}"

ls -l "$out/libopfuse_cupti_trace.so" "$out/${soname:-libcupti.so.13}" | awk '{ printf "%10d  %s\n", $5, $NF }'
