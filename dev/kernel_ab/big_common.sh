# Sourced by dev/kernel_ab/big_harness.sh and placement.sh (sessions 12-13, issue 4): rms_norm 16384 x 2048
# (the emitted v8 kernel), a 16-byte copy of the same 134 MB and an empty kernel, the same cubins in the
# peer's process (peer_big) and in kernel_ab (the specs array). Needs build/kab (big_rms8.cubin,
# big_rows.cubin, swq.cubin, cases_rms16384.json); unpacks build/carry.tar.xz for libopfuse_capi.so.
K=build/kab
R=16384 C=2048 N=$((16384 * 2048))
[ -f build/c/libopfuse_capi.so ] ||
  { mkdir -p build/c && python3 -c "import tarfile; tarfile.open('build/carry.tar.xz').extractall('build/c')"; }
specs=(
  v8=$K/big_rms8.cubin:fz_rms_norm_bf16_h2048_x16384_v8:$((R / 2)):128:0:library:x,w,y
  copy_v1=$K/big_rows.cubin:copy_v1:$((N / 8 / 256)):256:0:library:x,y,N
  empty=$K/swq.cubin:empty_k:1:32:0:library:x,w,y,N
)
# peer_big ROUNDS [VAR=VALUE ...]: peer_ab (torch.compile, opfuse, then the three cubins by cuLaunchKernel)
# with the given environment, from a fresh private inductor cache; PyTorch's warnings dropped.
peer_big() {
  local rounds=$1
  shift
  rm -rf /tmp/ind_big
  env "$@" TORCHINDUCTOR_CACHE_DIR=/tmp/ind_big timeout 300 python3 dev/kernel_ab/peer_ab.py --cases $K/cases_rms16384.json \
    --id 'patterns/rmsnorm/bf16/rows=16384/h=2048' --opfuse-lib build/c/libopfuse_capi.so --rounds "$rounds" --rotate-order \
    --ours "v8=$K/big_rms8.cubin:fz_rms_norm_bf16_h2048_x16384_v8:$((R / 2)):128:x,w,y" \
    --ours "copy_v1=$K/big_rows.cubin:copy_v1:$((N / 8 / 256)):256:x,y,N" \
    --ours "empty=$K/swq.cubin:empty_k:1:32:x,w,y,N" --unchecked copy_v1 --unchecked empty 2>&1 | grep -v "Warning\|^cupti"
}
