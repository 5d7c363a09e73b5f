#!/usr/bin/env bash
# Device run (session 11, issue 4): swiglu prefill kernels against torch.compile's Triton kernel in
# dev/kernel_ab (one process, bench ops' rule): the emitted kernel (build/kab/swe_R_C.cubin, from
# `opfuse compile --emit-source`), the hand variants of dev/kernel_ab/swiglu_prefill_variants.cu
# (build/kab/swp.cubin) and Triton's autotune winner for 512 x 5632 (build/kab/tri_swi.cubin: XBLOCK
# 1024, 4 warps; a runtime xnumel, so it runs at every size). Carry build/kab.
#   device: bash dev/kernel_ab/swiglu_prefill.sh     (ROWS='512 2048', COLS='5632 4096', ROUNDS=5, KAB=0 skips
#   kernel_ab, PEER=1 adds peer_ab below)
set -uo pipefail
K=build/kab
W=${OUT:-/tmp/swp}
mkdir -p "$W"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/device.txt"
if [ "${KAB:-1}" = 1 ]; then  # KAB=0: only the peer section
  for r in ${ROWS:-512 2048}; do
    for c in ${COLS:-5632 4096}; do
      n=$((r * c)) nv=$((r * c / 8))
      P=$K/swp.cubin
      $K/kernel_ab --rows "$r" --cols "$c" --rounds "${ROUNDS:-5}" \
        tri=$K/tri_swi.cubin:triton_poi_fused_mul_silu_0:$((n / 1024)):128:0:module:x,r,y,N,n,n \
        emitted=$K/swe_${r}_${c}.cubin:fz_swiglu_bf16_w${c}_x${r}_v8:$((nv / 256)):256:0:library:x,r,y \
        s_i32=$P:s_i32:$((nv / 256)):256:0:library:x,r,y,N \
        s_i32_128=$P:s_i32:$((nv / 128)):128:0:library:x,r,y,N \
        s_i32_ef=$P:s_i32_ef:$((nv / 256)):256:0:library:x,r,y,N \
        s_x2=$P:s_x2:$((nv / 512)):256:0:library:x,r,y,N \
        s_x2_ef=$P:s_x2_ef:$((nv / 512)):256:0:library:x,r,y,N \
        s_x4=$P:s_x4:$((nv / 1024)):256:0:library:x,r,y,N \
        s_cs=$P:s_cs:$((nv / 256)):256:0:library:x,r,y,N 2>&1 | tee "$W/swiglu_${r}_${c}.md"
    done
  done
fi
# PEER=1: dev/kernel_ab/peer_ab.py for the same cases in the peer's process (build/kab/cases_swi_prefill.json):
# torch.compile, opfuse's executor, the emitted cubin (nvcc) and, at 512 x 5632, the NVRTC cubin from
# opfuse's kernel cache (build/kab/swe_nvrtc_512_5632.cubin) and Triton's winner through ctypes
# cuLaunchKernel, in rounds whose order rotates. SPINS='20 60' adds runs with every path's spin sized
# from one host time (µs): does the spin length move the reading? PEER_EXTRA: more peer_ab arguments
# (e.g. '--delay-us 40'). Needs build/carry.tar.xz carried too.
if [ "${PEER:-0}" = 1 ]; then
  [ -f build/c/libopfuse_capi.so ] ||
    { mkdir -p build/c && python3 -c "import tarfile; tarfile.open('build/carry.tar.xz').extractall('build/c')"; }
  for r in ${ROWS:-512 2048}; do
    for c in ${COLS:-5632 4096}; do
      ours=(--ours "ours_drv=$K/swe_${r}_${c}.cubin:fz_swiglu_bf16_w${c}_x${r}_v8:$((r * c / 8 / 256)):256:g,u,y")
      [ -f "$K/swe_nvrtc_${r}_${c}.cubin" ] &&
        ours+=(--ours "nvrtc_drv=$K/swe_nvrtc_${r}_${c}.cubin:fz_swiglu_bf16_w${c}_x${r}_v8:$((r * c / 8 / 256)):256:g,u,y")
      # RT=1: also the emitted cubin launched from build/kab/librt_launch.so (dev/kernel_ab/rt_launch.cu)
      [ "${RT:-0}" = 1 ] && ours+=(--rt-lib $K/librt_launch.so)
      for spin in own ${SPINS:-}; do
        rm -rf /tmp/ind_pab
        extra=()
        [ "$spin" = own ] || extra=(--spin-host-us "$spin")
        TORCHINDUCTOR_CACHE_DIR=/tmp/ind_pab timeout 300 python3 dev/kernel_ab/peer_ab.py --cases $K/cases_swi_prefill.json \
          --id "patterns/swiglu/bf16/rows=$r/h=$c" --opfuse-lib build/c/libopfuse_capi.so --rounds "${PEER_ROUNDS:-8}" \
          --rotate-order "${ours[@]}" "${extra[@]}" ${PEER_EXTRA:-} 2>&1 | grep -v Warning | tee -a "$W/peer_ab.md"
      done
    done
  done
fi
# TRACE=1: peer_ab for swiglu 512 x 5632 and 2048 x 4096 under the CUPTI tracer (carry build/cupti_trace):
# per path, the kernel's own duration and the gap from the spin's end to its start. ours_drv is the
# emitted kernel renamed drv_swiglu_* (build/kab/swr_R_C.cubin) so that it and opfuse's are told apart.
if [ "${TRACE:-0}" = 1 ]; then
  [ -f build/c/libopfuse_capi.so ] ||
    { mkdir -p build/c && python3 -c "import tarfile; tarfile.open('build/carry.tar.xz').extractall('build/c')"; }
  for rc in "512 5632" "2048 4096"; do
    set -- $rc
    r=$1 c=$2
    rm -rf /tmp/ind_pab
    CUDA_INJECTION64_PATH=$PWD/build/cupti_trace/libopfuse_cupti_trace.so OPFUSE_CUPTI_TRACE_OUT=$W/trace_${r}_${c}.csv \
      TORCHINDUCTOR_CACHE_DIR=/tmp/ind_pab timeout 300 python3 dev/kernel_ab/peer_ab.py --cases $K/cases_swi_prefill.json \
      --id "patterns/swiglu/bf16/rows=$r/h=$c" --opfuse-lib build/c/libopfuse_capi.so --rounds "${PEER_ROUNDS:-8}" --rotate-order \
      --ours "ours_drv=$K/swr_${r}_${c}.cubin:drv_swiglu_w${c}_x${r}:$((r * c / 8 / 256)):256:g,u,y" 2>&1 |
      grep -v "Warning\|^check" | tee -a "$W/trace.md"
    python3 tools/kernel_trace_summary.py "$W/trace_${r}_${c}.csv" --by-name --min-count 10 --after 'spin_kernel' | tee -a "$W/trace.md"
    gzip -f "$W/trace_${r}_${c}.csv"
  done
fi
# GAP=1: kernel_ab at 512 x 5632 under the CUPTI tracer: which property of a kernel makes it start
# later after the spin? Triton's cubin; the emitted kernel from a library and from a module, with 256
# and 128 threads; built for sm_90a (swe_a90.cubin); with Triton's three extra parameters (swe_p6.cubin).
if [ "${GAP:-0}" = 1 ]; then
  E=fz_swiglu_bf16_w5632_x512_v8
  for spin in sleep clock; do
    CUDA_INJECTION64_PATH=$PWD/build/cupti_trace/libopfuse_cupti_trace.so OPFUSE_CUPTI_TRACE_OUT=$W/gap_$spin.csv \
      $K/kernel_ab --rows 512 --cols 5632 --rounds "${ROUNDS:-5}" --spin $spin \
      tri=$K/tri_swi.cubin:triton_poi_fused_mul_silu_0:2816:128:0:module:x,r,y,N,n,n \
      lib256=$K/swe_512_5632.cubin:$E:1408:256:0:library:x,r,y \
      mod256=$K/swr_512_5632.cubin:drv_swiglu_w5632_x512:1408:256:0:module:x,r,y \
      lib128=$K/swp.cubin:s_i32:2816:128:0:library:x,r,y,N \
      a90=$K/swe_a90.cubin:a90_swiglu:1408:256:0:library:x,r,y \
      p6=$K/swe_p6.cubin:p6_swiglu:1408:256:0:library:x,r,y,N,n,n 2>&1 | tee -a "$W/gap.md"
    python3 tools/kernel_trace_summary.py "$W/gap_$spin.csv" --by-name --min-count 10 --after 'Spin' | tee -a "$W/gap.md"
    gzip -f "$W/gap_$spin.csv"
  done
fi
# STREAMS=1: does the stream the events and kernels go to move the fixed cost of an event-timed call?
# kernel_ab --stream nonblocking (bench ops' own stream) / blocking / legacy (the NULL stream, PyTorch's
# default, where the peer times) for swiglu 512 x 5632 (Triton's and ours) and the JIT rms_norm and
# softmax at 16384 x 2048 (build/kab/big_{rms,smx}.cubin), under CUPTI (kernel durations and gaps).
if [ "${STREAMS:-0}" = 1 ]; then
  for st in nonblocking legacy blocking; do
    {
      CUDA_INJECTION64_PATH=$PWD/build/cupti_trace/libopfuse_cupti_trace.so OPFUSE_CUPTI_TRACE_OUT=$W/st_swi_$st.csv \
        $K/kernel_ab --rows 512 --cols 5632 --rounds "${ROUNDS:-5}" --stream $st \
        tri=$K/tri_swi.cubin:triton_poi_fused_mul_silu_0:2816:128:0:module:x,r,y,N,n,n \
        ours=$K/swe_512_5632.cubin:fz_swiglu_bf16_w5632_x512_v8:1408:256:0:library:x,r,y
      python3 tools/kernel_trace_summary.py "$W/st_swi_$st.csv" --by-name --min-count 10 --after 'Spin'
      CUDA_INJECTION64_PATH=$PWD/build/cupti_trace/libopfuse_cupti_trace.so OPFUSE_CUPTI_TRACE_OUT=$W/st_big_$st.csv \
        $K/kernel_ab --rows 16384 --cols 2048 --rounds "${ROUNDS:-5}" --stream $st \
        rms=$K/big_rms.cubin:fz_rms_norm_bf16_h2048_x16384_v8:8192:128:0:library:x,w,y \
        smx=$K/big_smx.cubin:fz_softmax_bf16_h2048_x16384_v8:16384:128:0:library:x,y
      python3 tools/kernel_trace_summary.py "$W/st_big_$st.csv" --by-name --min-count 10 --after 'Spin'
    } 2>&1 | grep -v "^cupti_trace" | tee -a "$W/streams.md"
    rm -f "$W"/st_*.csv
  done
fi
# DECODE=1: swiglu 32 x 4096 by CUDA-graph replay in the peer's process (peer_ab --graph): torch.compile,
# opfuse, Triton's winner, and pointwise decode shapes of ours (build/kab/swd_32_4096.cubin: the emitted
# decode function, 2 elements x 128 threads, and hand variants of 1 / 2 / 4 / 8 elements per thread at
# 64-256 threads per block).
if [ "${DECODE:-0}" = 1 ]; then
  [ -f build/c/libopfuse_capi.so ] ||
    { mkdir -p build/c && python3 -c "import tarfile; tarfile.open('build/carry.tar.xz').extractall('build/c')"; }
  D=$K/swd_32_4096.cubin
  rm -rf /tmp/ind_pab
  TORCHINDUCTOR_CACHE_DIR=/tmp/ind_pab timeout 300 python3 dev/kernel_ab/peer_ab.py --cases $K/cases_swi_dec.json \
    --id 'patterns/swiglu/bf16/rows=32/h=4096' --opfuse-lib build/c/libopfuse_capi.so --rounds "${PEER_ROUNDS:-8}" \
    --rotate-order --graph \
    --ours "emitted_p2_t128=$D:fz_swiglu_bf16_w4096_x32_v8_decode:512:128:g,u,y" \
    --ours "p2_t256=$D:d_p2_t256:256:256:g,u,y" --ours "p2_t64=$D:d_p2_t256:1024:64:g,u,y" \
    --ours "p4_t128=$D:d_p4:256:128:g,u,y" --ours "p4_t64=$D:d_p4:512:64:g,u,y" \
    --ours "p8_t128=$D:d_p8:128:128:g,u,y" --ours "p8_t64=$D:d_p8:256:64:g,u,y" \
    --ours "p1_t256=$D:d_p1:512:256:g,u,y" ${PEER_EXTRA:-} 2>&1 | grep -v Warning | tee -a "$W/peer_ab_decode.md"
fi
# DECODE8=1: the same for swiglu 8 x 5632 (build/kab/swd_8_5632.cubin: the emitted decode function and
# 1 / 4 elements per thread; 45056 elements).
if [ "${DECODE8:-0}" = 1 ]; then
  [ -f build/c/libopfuse_capi.so ] ||
    { mkdir -p build/c && python3 -c "import tarfile; tarfile.open('build/carry.tar.xz').extractall('build/c')"; }
  D=$K/swd_8_5632.cubin E=fz_swiglu_bf16_w5632_x8_v8_decode
  rm -rf /tmp/ind_pab
  TORCHINDUCTOR_CACHE_DIR=/tmp/ind_pab timeout 300 python3 dev/kernel_ab/peer_ab.py --cases $K/cases_swi_dec.json \
    --id 'patterns/swiglu/bf16/rows=8/h=5632' --opfuse-lib build/c/libopfuse_capi.so --rounds "${PEER_ROUNDS:-8}" \
    --rotate-order --graph \
    --ours "p2_t128=$D:$E:176:128:g,u,y" --ours "p2_t256=$D:$E:88:256:g,u,y" --ours "p2_t64=$D:$E:352:64:g,u,y" \
    --ours "p1_t128=$D:d8_p1:352:128:g,u,y" --ours "p1_t256=$D:d8_p1:176:256:g,u,y" --ours "p1_t64=$D:d8_p1:704:64:g,u,y" \
    --ours "p4_t64=$D:d8_p4:176:64:g,u,y" --ours "p4_t128=$D:d8_p4:88:128:g,u,y" ${PEER_EXTRA:-} 2>&1 |
    grep -v Warning | tee -a "$W/peer_ab_decode8.md"
fi
# DECODEQ=1: load flavours and launch bounds at Triton's decode shape (4 elements x 128 threads;
# build/kab/swq.cubin from dev/kernel_ab/swiglu_decode_variants.cu), swiglu 8 x 5632 and 32 x 4096.
if [ "${DECODEQ:-0}" = 1 ]; then
  [ -f build/c/libopfuse_capi.so ] ||
    { mkdir -p build/c && python3 -c "import tarfile; tarfile.open('build/carry.tar.xz').extractall('build/c')"; }
  Q=$K/swq.cubin
  for rc in "8 5632" "32 4096"; do
    set -- $rc
    r=$1 c=$2 b=$((r * c / 4 / 128))
    if [ "${QSET:-1}" = 3 ]; then  # QSET=3 (session 12): L2::256B prefetch loads, and an empty kernel (the graph floor)
      more=(--ours "q4_ng=$Q:q4_ng:$b:128:g,u,y,N" --ours "q4_l2p=$Q:q4_l2p:$b:128:g,u,y,N" --ours "empty=$Q:empty_k:$b:128:g,u,y,N")
    elif [ "${QSET:-1}" = 2 ]; then  # QSET=2: plain ld.global, and no bounds check
      more=(--ours "q4_ld=$Q:q4_ld:$b:128:g,u,y,N" --ours "q4_ld_ng=$Q:q4_ld_ng:$b:128:g,u,y,N" --ours "q4_ng=$Q:q4_ng:$b:128:g,u,y,N")
    else
      more=(--ours "q4_nc=$Q:q4_nc:$b:128:g,u,y,N" --ours "q4_ef=$Q:q4_ef:$b:128:g,u,y,N" --ours "q4_cs=$Q:q4_cs:$b:128:g,u,y,N")
    fi
    rm -rf /tmp/ind_pab
    TORCHINDUCTOR_CACHE_DIR=/tmp/ind_pab timeout 300 python3 dev/kernel_ab/peer_ab.py --cases $K/cases_swi_dec.json \
      --id "patterns/swiglu/bf16/rows=$r/h=$c" --opfuse-lib build/c/libopfuse_capi.so --rounds "${PEER_ROUNDS:-8}" \
      --rotate-order --graph --ours "q4_lb256=$Q:q4_lb256:$b:128:g,u,y,N" --ours "q4_lb128=$Q:q4_lb128:$b:128:g,u,y,N" \
      "${more[@]}" \
      ${PEER_EXTRA:-} 2>&1 | grep -v Warning | tee -a "$W/peer_ab_decodeq.md"
  done
fi
