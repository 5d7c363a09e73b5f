#!/usr/bin/env bash
# Device run (session 12, issue 4): why does swiglu at decode sizes read 0.3 µs faster in bench ops than
# in the peer's process, while the norms read the same in both? dev/kernel_ab's CUDA-graph rule (--graph
# 64, L2 flushed, bench ops' set count) for the emitted swiglu decode function (8 x 5632), Triton's
# shape (q4_ng) and an empty kernel of the same grid (the per-launch floor), under the four
# combinations of stream (bench ops' non-blocking stream / the legacy NULL stream the peer times on)
# and allocation (one cudaMalloc per buffer as bench ops / PyTorch-like 20 MiB segments, --pool).
# Carry build/kab (kernel_ab, swd_8_5632.cubin, swq.cubin). Writes $OUT/decode_harness.md.
set -uo pipefail
K=build/kab
W=${OUT:-/tmp/kab}
mkdir -p "$W"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/decode_harness.md"
specs=(
  emitted=$K/swd_8_5632.cubin:fz_swiglu_bf16_w5632_x8_v8_decode:88:256:0:library:x,r,y
  q4_ng=$K/swq.cubin:q4_ng:88:128:0:library:x,r,y,N
  empty=$K/swq.cubin:empty_k:88:128:0:library:x,r,y,N
)
for stream in nonblocking legacy; do
  for pool in "" --pool; do
    echo "### stream $stream ${pool:-(cudaMalloc each)}" | tee -a "$W/decode_harness.md"
    $K/kernel_ab --rows 8 --cols 5632 --graph 64 --flush --rounds "${ROUNDS:-5}" --stream $stream $pool "${specs[@]}" 2>&1 |
      tee -a "$W/decode_harness.md"
  done
done
