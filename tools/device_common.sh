# Sourced by the device scripts (fused_probe.sh, decode_check.sh, attn_probe.sh), run from the repo
# root on the device machine with build/carry.tar.xz carried (tools/build_carry.sh).
# opfuse_device_setup: unpacks the carried build into build/c (B=build/c afterwards) and points the
# JIT kernel cache at a directory of the machine's own (OPFUSE_CACHE_DIR, default /tmp/opfuse_cache).
opfuse_device_setup() {
  mkdir -p build/c || return 1
  python3 -c "import tarfile; tarfile.open('build/carry.tar.xz').extractall('build/c')" || return 1
  B=build/c
  export OPFUSE_CACHE_DIR=${OPFUSE_CACHE_DIR:-/tmp/opfuse_cache}
}
