#!/usr/bin/env bash
# Device run of dev/kernel_ab (scratch, session 9): carry build/kab (kernel_ab, the cubins, cases.json).
#   1. torch.compile's Triton kernels for build/kab/cases.json, from a private inductor cache: sources,
#      cubins and their metadata (num_warps, shared) land in $OUT (triton.tgz) for reading here.
#   2. kernel_ab tables: rms_norm 512 x 4096 (Triton's cubin beside opfuse's JIT kernel loaded three
#      ways) and add_rms_norm 512 x 4096 (opfuse JIT variants: residual stored early / late, row shapes).
#   3. swiglu 512 x 5632: Triton's cubin beside opfuse's JIT kernel.
# Extra kernel_ab specs for one more table: KAB_EXTRA='label=... label=...' (cubins under build/kab).
set -uo pipefail
K=build/kab
W=${OUT:-/tmp/kab}/work
mkdir -p "$W"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/device.txt"
if [ "${TRITON:-1}" = 1 ]; then
  rm -rf /tmp/ind
  TORCHINDUCTOR_CACHE_DIR=/tmp/ind timeout 300 python3 tools/bench_peer.py --cases $K/cases.json --out "$W/peer.json" \
    --reps 20 > "$W/peer.txt" 2>&1
  echo "peer rc $?"
  mkdir -p "$W/triton"
  # autotuning compiles several configs of one kernel name (one directory each): keep the directory
  # in the file name; *.best_config (inductor's autotune winner) says which one the peer ran
  find /tmp/ind -name 'triton_*' \( -name '*.cubin' -o -name '*.json' -o -name '*.ptx' \) |
    while read -r f; do cp "$f" "$W/triton/$(basename "$(dirname "$f")")_$(basename "$f")"; done
  find /tmp/ind -name '*.best_config' | while read -r f; do cp "$f" "$W/triton/"; done
  grep -rl "def triton_" /tmp/ind --include=*.py | while read -r f; do cp "$f" "$W/triton/src_$(basename "$f")"; done
  ls "$W/triton" | head -40
  tar -C "$W" -czf "${OUT:-/tmp/kab}/triton.tgz" triton
fi
[ "${TABLES:-1}" = 1 ] || exit 0
R="$K/kernel_ab --rounds ${ROUNDS:-3}"
# Triton's kernels: their autotune winners (*.best_config): rms_norm / add R0_BLOCK 4096, 16 warps; silu*mul XBLOCK 1024, 4 warps
T=$K/tri_rms.cubin:triton_red_fused__fused_rms_norm_0:512:512:64:module:x,w,y,i,I,n,n
J=fz_rms_norm_bf16_h4096_x512_v8_decode
for sets in 0 1; do
  $R --sets $sets triton_rms=$T jit_rms_module=$K/rms.cubin:$J:512:256:0:module:x,w,y \
    jit_rms_library=$K/rms.cubin:$J:512:256:0:library:x,w,y jit_rms_pdl=$K/rms.cubin:$J:512:256:0:pdl:x,w,y \
    jit_rms_t512=$K/rms_t512.cubin:$J:512:512:0:library:x,w,y 2>&1 | tee -a "$W/rms.md"
done
A=fz_add_rms_norm_bf16_h4096_x512_v8
for sets in 0 1; do
  $R --sets $sets arn_late=$K/arn_late.cubin:$A:512:256:0:library:x,r,w,y,h arn_early=$K/arn_early.cubin:$A:512:256:0:library:x,r,w,y,h \
    tri_arn=$K/tri_arn.cubin:triton_red_fused__fused_rms_norm_add_0:512:512:64:module:x,r,w,h,y,i,I,n,n \
    arn_evict_first=$K/arn_ef.cubin:$A:512:256:0:library:x,r,w,y,h \
    arn_t512_early=$K/arn_t512.cubin:${A}_decode:512:512:0:library:x,r,w,y,h arn_t128_early=$K/arn_t128.cubin:${A}_decode:512:128:0:library:x,r,w,y,h \
    arn_t512_late=$K/arn_t512_late.cubin:${A}_decode:512:512:0:library:x,r,w,y,h arn_t128_late=$K/arn_t128_late.cubin:${A}_decode:512:128:0:library:x,r,w,y,h \
    ${KAB_EXTRA:-} 2>&1 | tee -a "$W/arn.md"
done
for sets in 0 1; do
  $R --sets $sets --cols 5632 tri_swi=$K/tri_swi.cubin:triton_poi_fused_mul_silu_0:2816:128:0:module:x,r,y,N,n,n \
    jit_swi=$K/swi.cubin:fz_swiglu_bf16_w5632_x512_v8:1408:256:0:library:x,r,y 2>&1 | tee -a "$W/swi.md"
done
cp "$W"/*.md "$W/device.txt" "${OUT:-/tmp/kab}/" 2>/dev/null
