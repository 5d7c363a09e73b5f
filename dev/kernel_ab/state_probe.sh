#!/usr/bin/env bash
# Device run (session 14, issue 4): which GPU state does torch.compile's Triton rms-norm kernel leave that
# makes a later 134 MB copy ~1 µs faster (session 13, companion.sh)? kernel_ab times copy_v1 (16384 x 2048
# bf16, bench ops' rule) alone and beside each companion of dev/kernel_ab/state_companions.cu, in
# interleaved rounds (the companion runs between the copy's batches of samples). Carry build/kab
# (kernel_ab, big_rows.cubin, state.cubin). Prints one table per run and a summary last.
set -uo pipefail
K=build/kab R=16384 C=2048 N=$((16384 * 2048))
KAB="$K/kernel_ab --rows $R --cols $C --rounds ${ROUNDS:-5}"
copy="copy=$K/big_rows.cubin:copy_v1:$((N / 8 / 256)):256:0:module:x,y,N"
s=$K/state.cubin
declare -A comp=(
  [none]=""
  [read_el_x]="c=$s:read_el:$((N / 8 / 256)):256:0:module:x,h,N"
  [read_el_r]="c=$s:read_el:$((N / 8 / 256)):256:0:module:r,h,N"
  [read_ef_r]="c=$s:read_ef:$((N / 8 / 256)):256:0:module:r,h,N"
  [read_plain_r]="c=$s:read_plain:$((N / 8 / 256)):256:0:module:r,h,N"
  [rms2_hint_r]="c=$s:rms2_hint:$R:512:0:module:r,w,h"
  [rms2_plain_r]="c=$s:rms2_plain:$R:512:0:module:r,w,h"
  [rms2_smem_r]="c=$s:rms2_smem:$R:512:8192:module:r,w,h"
  [rms2_hint_smem_r]="c=$s:rms2_hint_smem:$R:512:8192:module:r,w,h"
)
if [ "${PART:-a}" = b ]; then
  # Part b (after part a found read_el_x): do a demote of x, cudaCtxResetPersistingL2Cache or a deep flush
  # remove the bonus; and how the emitted rms_norm (v8, bench ops' kernel) reads under each flush.
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  el="c=$s:read_el:$((N / 8 / 256)):256:0:module:x,h,N" dm="d=$s:demote:2048:256:0:module:x,N"
  v8="v8=$K/big_rms8.cubin:fz_rms_norm_bf16_h2048_x16384_v8:$((R / 2)):128:0:library:x,w,y"
  summary=""
  row() {  # label, kernel_ab options and specs
    local label=$1
    shift
    echo "## $label"
    out=$($KAB "$@" 2>&1)
    echo "$out"
    summary+="| $label | $(echo "$out" | awk -F'|' '/^\| (copy|v8) /{gsub(/ /,"",$6); printf "%s ", $6}') |"$'\n'
  }
  row "copy alone" "$copy"
  row "copy + read_el x" "$copy" "$el"
  row "copy + read_el x + demote x" "$copy" "$el" "$dm"
  row "copy + read_el x, reset persisting" --reset-persisting "$copy" "$el"
  row "copy + read_el x, memset flush" --flush "$copy" "$el"
  row "copy + read_el x, deep flush" --flush-kind deep "$copy" "$el"
  row "copy + read_el x, reset + memset" --reset-persisting --flush "$copy" "$el"
  row "copy alone, deep flush" --flush-kind deep "$copy"
  row "copy alone, reset persisting" --reset-persisting "$copy"
  row "v8 alone" "$v8"
  row "v8 alone, memset flush" --flush "$v8"
  row "v8 alone, deep flush" --flush-kind deep "$v8"
  row "v8 alone, reset persisting" --reset-persisting "$v8"
  row "v8 + read_el x" "$v8" "$el"
  row "v8 + read_el x, reset persisting" --reset-persisting "$v8" "$el"
  for keep in "" --keep-l2-tags; do for c in none compile; do
    echo "## loop_ab companion $c ${keep:-(tags reset)}"
    rm -rf /tmp/indl
    out=$(TORCHINDUCTOR_CACHE_DIR=/tmp/indl python3 dev/kernel_ab/loop_ab.py --cubin $K/big_rows.cubin --fn copy_v1 \
      --grid $((N / 8 / 256)) --block 256 --args x,y,N --modes timer_fixed --samples 150 --companion $c $keep 2>&1 | grep -v Warning)
    echo "$out"
    summary+="| loop_ab copy, companion $c ${keep:-tags reset} | $(echo "$out" | awk -F'|' '/^\| timer_fixed /{gsub(/ /,"",$4); print $4}') |"$'\n'
  done; done
  echo
  echo "| run | median µs (copy or v8) |"
  echo "|---|---:|"
  printf "%s" "$summary"
  exit 0
fi
order=${ORDER:-none read_el_x read_el_r read_ef_r read_plain_r rms2_hint_r rms2_plain_r rms2_smem_r rms2_hint_smem_r}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
summary=""
for flush in "" --flush; do
  for c in $order; do
    echo "## companion $c ${flush:-(no flush)}"
    out=$($KAB $flush $copy ${comp[$c]} 2>&1)
    echo "$out"
    med=$(echo "$out" | awk -F'|' '/^\| copy /{gsub(/ /,"",$6); print $6}')
    cmed=$(echo "$out" | awk -F'|' '/^\| c /{gsub(/ /,"",$6); print $6}')
    summary+="| $c | ${flush:-no} | $med | ${cmed:--} |"$'\n'
  done
  # read_el then demote (the tags removed before the copy runs again)
  echo "## companion read_el_r + demote ${flush:-(no flush)}"
  out=$($KAB $flush $copy "c=$s:read_el:$((N / 8 / 256)):256:0:module:r,h,N" "d=$s:demote:2048:256:0:module:r,N" 2>&1)
  echo "$out"
  med=$(echo "$out" | awk -F'|' '/^\| copy /{gsub(/ /,"",$6); print $6}')
  summary+="| read_el_r+demote | ${flush:-no} | $med | - |"$'\n'
done
echo
echo "| companion | flush | copy median µs | companion µs |"
echo "|---|---|---:|---:|"
printf "%s" "$summary"
