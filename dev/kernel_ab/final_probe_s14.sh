#!/usr/bin/env bash
# Device run (session 14, issue 4): the fused patterns' report under the L2-tag demote rule, prefill
# (512, 2048, 16384 rows) then decode (1, 8, 32), bench ops + peer in 2 rounds each (tools/fused_probe.sh);
# prints both rounds tables. Carry build/carry.tar.xz. docs/results/2026-11-24-s14/5_final_*.txt.
set -u
O=$OUT
OUT=$O/prefill SWEEP=0 ROWS=512,2048,16384 ROUNDS=2 bash tools/fused_probe.sh > $O/prefill.txt 2>&1; echo "prefill rc $?"
OUT=$O/decode SWEEP=0 ROWS=1,8,32 ROUNDS=2 bash tools/fused_probe.sh > $O/decode.txt 2>&1; echo "decode rc $?"
grep -A40 "^| case | opfuse best" $O/prefill.txt | head -30
grep -A30 "^| case | opfuse best" $O/decode.txt | head -28
