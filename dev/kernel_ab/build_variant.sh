#!/usr/bin/env bash
# Builds a hand-edited kernel file (dev/kernel_ab/arn_variants.cu, the *_hand_edits.cu / *_variants.cu
# under docs/results/) into a cubin for dev/kernel_ab: the JIT emitter's preamble (fz_bf16, fz_pack,
# fz_row_reduce, ...) as `opfuse compile --emit-source` writes it today, then FILE, then nvcc with
# NVRTC's options. The files keep no copy of the preamble: it is the emitter's (kPreamble).
#   bash dev/kernel_ab/build_variant.sh FILE OUT.cubin     (BUILD: the opfuse build, default build/cuda;
#                                                          NVCC_MODE=-ptx writes PTX instead)
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 FILE OUT.cubin" >&2; exit 2; }
src=$1 out=$2
[ -f "$src" ] || { echo "$0: no file $src" >&2; exit 2; }
opfuse=${BUILD:-build/cuda}/opfuse
[ -x "$opfuse" ] || { echo "$0: no $opfuse (build the cuda preset first)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'graph p\ninput a: bf16[T, 64]\ninput b: bf16[T, 64]\ny = swiglu(a, b)\noutput y\n' > "$tmp/p.ofg"
"$opfuse" compile "$tmp/p.ofg" --emit-source "$tmp/src" --no-cache > /dev/null
ls "$tmp"/src/*.cu > /dev/null 2>&1 || { echo "$0: opfuse compile emitted no kernel source" >&2; exit 1; }
sed -n '/^\/\/ ---- opfuse JIT preamble/,/^extern "C"/p' "$tmp"/src/*.cu | sed '$d' > "$tmp/all.cu"
cat "$src" >> "$tmp/all.cu"
nvcc ${NVCC_MODE:--cubin} -arch=sm_90 -O3 --std=c++17 "$tmp/all.cu" -o "$out"
