#!/usr/bin/env bash
# Device run (session 13, issue 4): the peer's process reads a 134 MB copy / norm 1.1 µs (H200) to 3 µs (H100)
# faster than bench ops. Bisected on an H100 (docs/results/2026-11-24-s13/5_h100_bisect.md): it happens only
# while torch.compile's Triton rms-norm kernel runs in the same rounds (peer_ab times torch.compile beside
# opfuse). This confirms it with dev/kernel_ab/loop_ab.py: the copy timed with no companion, with the
# compiled rms norm, with a compiled pointwise x * 2; at 16384 and 65536 rows; and with an L2 flush before
# each sample. Carry build/kab. Prints the tables.
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 16384 65536; do for c in none compile compile_mul; do
echo "## rows $r companion $c"; rm -rf /tmp/indl; TORCHINDUCTOR_CACHE_DIR=/tmp/indl python3 dev/kernel_ab/loop_ab.py --cubin build/kab/big_rows.cubin --fn copy_v1 --grid $((r * 2048 / 8 / 256)) --block 256 --args x,y,N --rows $r --modes timer_fixed --samples 150 --companion $c 2>&1 | grep "^| [tbc]\|rror"
done; done
echo "## rows 16384 companion compile, L2 flushed"; rm -rf /tmp/indl; TORCHINDUCTOR_CACHE_DIR=/tmp/indl python3 dev/kernel_ab/loop_ab.py --cubin build/kab/big_rows.cubin --fn copy_v1 --grid 16384 --block 256 --args x,y,N --modes timer_fixed --samples 150 --companion compile --flush 2>&1 | grep "^| [tbc]\|rror"
echo "## rows 16384 companion none, L2 flushed"; python3 dev/kernel_ab/loop_ab.py --cubin build/kab/big_rows.cubin --fn copy_v1 --grid 16384 --block 256 --args x,y,N --modes timer_fixed --samples 150 --flush 2>&1 | grep "^| [tbc]\|rror"
