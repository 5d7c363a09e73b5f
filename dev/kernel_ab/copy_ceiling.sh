#!/usr/bin/env bash
# Device run (session 12, issue 4): is bench ops' copy kernel (grid-stride, 4 vectors in flight, 8 x SMs
# blocks: the 1 GiB ceiling and the same-size copy) the fastest copy at 134 MB and at 1 GiB? Beside a
# one-vector-per-thread copy on a full grid (copy_v1) and two vectors per thread (copy_v2), by dev/kernel_ab
# (event-timed, spin rule; 1 set). Carry build/kab. Writes $OUT/copy_ceiling.md.
set -uo pipefail
K=build/kab B=build/kab/big_rows.cubin
W=${OUT:-/tmp/kab}
mkdir -p "$W"
SMS=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100 && echo 132 || echo 132)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/copy_ceiling.md"
for rows in 16384 262144; do
  N=$((rows * 2048))
  $K/kernel_ab --rows $rows --cols 2048 --rounds 5 \
    copy_v1=$B:copy_v1:$((N / 8 / 256)):256:0:library:x,y,N copy_v2=$B:copy_v2:$((N / 16 / 256)):256:0:library:x,y,N \
    copy_p4_8sm=$B:copy_p4:$((SMS * 8)):256:0:library:x,y,N copy_p4_16sm=$B:copy_p4:$((SMS * 16)):256:0:library:x,y,N \
    copy_p4_full=$B:copy_p4:$((N / 8 / 256 / 4)):256:0:library:x,y,N 2>&1 | tee -a "$W/copy_ceiling.md"
done
