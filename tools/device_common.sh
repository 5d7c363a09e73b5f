# Sourced by the device scripts (bench_full.sh, decode_check.sh, eval_gpu_check.sh,
# window_gpu_check.sh), run from the repo root on the device machine with build/carry.tar.xz
# carried (tools/build_carry.sh).
# opfuse_device_setup: unpacks the carried build into build/c (B=build/c afterwards) and points the
# JIT kernel cache at a directory of the machine's own (OPFUSE_CACHE_DIR, default /tmp/opfuse_cache).
# opfuse_device_work NAME: that, with the work directory W=${OUT:-/tmp/NAME}/work made first and the
# device's name and driver recorded in $W/device.txt (and printed).
# opfuse_peer_opfuse_args: PEER_OPFUSE, tools/bench_peer.py's flags that time opfuse in the peer's
# process too (libopfuse_capi.so, PEER_INTERLEAVE rounds, default 3); empty with OPFUSE_LIB=0 or
# without the library.
# Nsight Compute's kernel filter for the fused kernel of one `opfuse bench ops` case: every kernel but
# the bench's own (copy, spin, gate, fill, L2 demote) and cuBLASLt's GEMMs.
FUSED_KERNEL_FILTER="regex:^(?!(Copy16Kernel|SpinKernel|GateKernel|FillKernel|FillIdsKernel|L2DemoteKernel)$)(?!nvjet|cutlass|sm90_xmma|gemm|Gemm).*"

opfuse_device_setup() {
  mkdir -p build/c || return 1
  python3 -c "import tarfile; tarfile.open('build/carry.tar.xz').extractall('build/c')" || return 1
  B=build/c
  export OPFUSE_CACHE_DIR=${OPFUSE_CACHE_DIR:-/tmp/opfuse_cache}
}

opfuse_device_work() {
  W=${OUT:-/tmp/$1}/work
  mkdir -p "$W" || return 1
  opfuse_device_setup || return 1
  # best effort, as each script had it: a missing nvidia-smi leaves device.txt empty, not the run stopped
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/device.txt" || true
}

opfuse_peer_opfuse_args() {
  PEER_OPFUSE=()
  if [ "${OPFUSE_LIB:-1}" = 1 ] && [ -f "$B/libopfuse_capi.so" ]; then
    PEER_OPFUSE=(--opfuse-lib "$B/libopfuse_capi.so" --interleave "${PEER_INTERLEAVE:-3}")
  fi
}
