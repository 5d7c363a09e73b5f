// Device helpers shared by the library kernels (src/kernels/, compiled by nvcc) and the JIT kernels
// (this file's text is embedded in the JIT preamble and compiled by NVRTC): 16-bit conversions at
// the bit level, the row / warp / block reductions, programmatic dependent launch and the L2
// evict-first policy. It includes nothing (NVRTC has no CUDA headers here): 16-bit values are raw
// bits (unsigned short halves of 32-bit words) converted with the PTX cvt instructions that
// cuda_bf16.h / cuda_fp16.h use on sm_90, so library and JIT round identically.
#pragma once

#include "ops/scalar_math.h"

namespace fz {

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }
constexpr float kLog2e = 1.4426950408889634f;

// ---- 16-bit conversions: exact widening; f32 -> 16 bits rounds to nearest even (NaN stays NaN)
__device__ __forceinline__ float bf16_to_f32(unsigned bits) { return __uint_as_float((bits & 0xffffu) << 16); }
__device__ __forceinline__ float f16_to_f32(unsigned bits) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)bits));
  return f;
}
__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
  unsigned short r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
}
__device__ __forceinline__ unsigned short f32_to_f16(float f) {
  unsigned short r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
}
// Two f32 to one word of two 16-bit values (lo in the low half), one instruction.
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
  unsigned u;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(hi), "f"(lo));
  return u;
}
__device__ __forceinline__ unsigned pack_f16x2(float lo, float hi) {
  unsigned u;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(hi), "f"(lo));
  return u;
}
// f rounded to bf16 and widened back, in one instruction: the pair conversion with a zero low half
// is the rounded value's f32 bit pattern.
__device__ __forceinline__ float round_bf16(float f) { return __uint_as_float(pack_bf16x2(0.0f, f)); }

// ---- reductions
struct SumOp {
  static __device__ __forceinline__ float apply(float a, float b) { return a + b; }
  static __device__ __forceinline__ float identity() { return 0.0f; }
};
struct MaxOp {
  static __device__ __forceinline__ float apply(float a, float b) { return fmaxf(a, b); }
  static __device__ __forceinline__ float identity() { return neg_inf(); }
};

// Butterfly over aligned groups of `width` lanes (a power of two <= 32): every lane of a group ends
// with the bit-identical value.
template <class Op>
__device__ __forceinline__ float warp_reduce(float v, int width) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < width) v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Reduction over a row group of `tpr` threads (threadIdx.x / tpr is the group; a power of two below
// 32, else a multiple of 32): butterflies, then for groups wider than a warp one exchange through a
// double-buffered shared array — one __syncthreads, safe because a buffer is rewritten only two
// reductions later, after every reader passed the barrier between. Every thread of the block calls
// it equally often (it may contain a barrier); `smem` holds 64 floats; `phase` counts the calls.
// WHOLE: the group is the whole block (tpr == blockDim.x), so every warp reads the block's partials
// from the start, with no division for its group's first warp.
template <class Op, bool WHOLE = false>
__device__ __forceinline__ float row_reduce(float v, int tpr, float* smem, int& phase) {
  v = warp_reduce<Op>(v, tpr < 32 ? tpr : 32);
  if (tpr <= 32) return v;
  float* buf = smem + (phase & 1) * 32;
  ++phase;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wpr = tpr >> 5;
  if (lane == 0) buf[warp] = v;
  __syncthreads();
  const float s = lane < wpr ? buf[(WHOLE ? 0 : (warp / wpr) * wpr) + lane] : Op::identity();
  return warp_reduce<Op>(s, 32);
}

// Block-wide reduction; every thread gets the result. smem holds >= 32 floats; the leading barrier
// lets a caller reuse smem right after an earlier reduction.
template <class Op>
__device__ __forceinline__ float block_reduce(float v, float* smem) {
  v = warp_reduce<Op>(v, 32);
  if (blockDim.x <= 32) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  return warp_reduce<Op>(lane < nw ? smem[lane] : Op::identity(), 32);
}

// The 32-bit shared-memory address of generic pointer `p` (into this block's shared memory): the
// operand of the cluster and asynchronous-copy instructions below.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  unsigned long long s;
  asm("cvta.to.shared.u64 %0, %1;" : "=l"(s) : "l"(reinterpret_cast<unsigned long long>(p)));
  return static_cast<unsigned>(s);
}

// ---- raw 16-bit pairs: a 32-bit word holding two bf16 (BF16) or f16 elements, element 0 low
// The pairwise max, max.bf16x2 / max.f16x2 (NaN skipped as fmaxf skips it) — a max reduction over
// an input's own elements without converting them (the library softmax's and the JIT's raw-pair
// max passes) —; below sm_80, which has neither, the elements compared as f32. kNegInfPair: the pair
// (-inf, -inf) a running max starts from; pair_max_f32: the larger element of a word as f32.
template <bool BF16>
inline constexpr unsigned kNegInfPair = BF16 ? 0xff80ff80u : 0xfc00fc00u;
template <bool BF16>
__device__ __forceinline__ float u16_to_f32(unsigned bits) {
  if constexpr (BF16) return bf16_to_f32(bits);
  else return f16_to_f32(bits);
}
template <bool BF16>
__device__ __forceinline__ unsigned max_pair(unsigned a, unsigned b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned r;
  if constexpr (BF16) asm("max.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  else asm("max.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
#else
  unsigned r = 0;
  for (int k = 0; k < 2; ++k) {
    const unsigned x = (a >> (16 * k)) & 0xffffu, y = (b >> (16 * k)) & 0xffffu;
    const float fx = u16_to_f32<BF16>(x), fy = u16_to_f32<BF16>(y);
    r |= (fy > fx || fx != fx ? y : x) << (16 * k);
  }
  return r;
#endif
}
template <bool BF16>
__device__ __forceinline__ float pair_max_f32(unsigned w) {
  return fmaxf(u16_to_f32<BF16>(w & 0xffffu), u16_to_f32<BF16>(w >> 16));
}

// ---- one 16-byte store: four words to 16-byte aligned global `p` as one st.global.v4 (the staged and
// looped row kernels, library and JIT: there nvcc split a C++ 16-byte store into four 32-bit ones,
// the row's address not being known to be 16-byte aligned)
__device__ __forceinline__ void store_global_v4(void* p, unsigned w0, unsigned w1, unsigned w2, unsigned w3) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w0), "r"(w1), "r"(w2), "r"(w3) : "memory");
}

// ---- 16-bit elements off the 16-byte grid as 32-bit words
// N 16-bit elements of read-only `p` (4-byte aligned) from element i >= 0 into N / 2 words, element
// 2k in word k's low half — a pack's layout: N / 2 aligned words at an even i; at an odd i N / 2 + 1
// words from element i - 1, each output word shifted by one element from two of them (so element
// i + N is read too: the caller guarantees it exists). Loads through the non-coherent path
// (ld.global.nc, what __ldg emits). A shifted row's per-column operands (library LoadColumnPack, the
// JIT's fz_load_elems): one or two words a pair of elements instead of one load per element.
__device__ __forceinline__ unsigned load_nc_u32(const unsigned* q) {
  unsigned v;
  asm("ld.global.nc.b32 %0, [%1];" : "=r"(v) : "l"(q));
  return v;
}
template <int N>
__device__ __forceinline__ void load_u16_words(const unsigned short* p, long long i, unsigned* w) {
  const unsigned* q = reinterpret_cast<const unsigned*>(p + (i & ~1LL));
  if ((i & 1) == 0) {
#pragma unroll
    for (int k = 0; k < N / 2; ++k) w[k] = load_nc_u32(q + k);
  } else {
    unsigned u[N / 2 + 1];
#pragma unroll
    for (int k = 0; k <= N / 2; ++k) u[k] = load_nc_u32(q + k);
#pragma unroll
    for (int k = 0; k < N / 2; ++k) w[k] = (u[k] >> 16) | (u[k + 1] << 16);
  }
}

// ---- thread block clusters (sm_90+): the split row kernels combine a row's per-block partial
// reductions through distributed shared memory. cluster_sync is a full barrier of the cluster with
// release/acquire semantics (a block's shared-memory writes before it are visible to the others after).
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
  return r;
}
// Blocks in this block's cluster (1 when launched without clusters).
__device__ __forceinline__ unsigned cluster_blocks() {
  unsigned n = 1;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
#endif
  return n;
}
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}
// ---- the push exchange of a cluster (sm_90+): each block writes its partial into every block's
// shared memory with st.async, which completes on the receiving block's mbarrier, so a block waits
// only for the partials written into it and reads them from its own shared memory — no reads of a
// peer's memory, hence no closing cluster barrier (a block waits for every write into it before it
// exits; the writes it sent complete at blocks that are still waiting for them). One cluster barrier
// stays, before the first push: every block's mbarrier must be initialised and armed first — the
// kernels place it while their row's loads are in flight. Each mbarrier is used for one exchange
// (phase 0).
// push_arm: thread 0, before that cluster barrier: the mbarrier at `bar` expects `bytes` (the cluster's
// partials for one exchange) and this thread's single arrival.
__device__ __forceinline__ void push_arm(unsigned long long* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
#endif
}
// Writes v into block `rank`'s copy of `slot` (this block's address of it), completing on block
// `rank`'s copy of `bar`.
__device__ __forceinline__ void push_send(float* slot, unsigned long long* bar, unsigned rank, float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned ra, rb;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(smem_addr(slot)), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rb) : "r"(smem_addr(bar)), "r"(rank));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(ra), "r"(__float_as_uint(v)),
               "r"(rb)
               : "memory");
#endif
}
// Every thread: waits until the partials armed for at `bar` have landed in this block.
__device__ __forceinline__ void push_wait(unsigned long long* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n.reg .pred p;\nPUSH_WAIT_%=:\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], 0;\n@!p bra "
      "PUSH_WAIT_%=;\n}\n" ::"r"(smem_addr(bar))
      : "memory");
#endif
}

// Reduction over a cluster of `cl` blocks of `tpb` threads each: row_reduce over the block, then the
// blocks' values pushed into every block's `parts` (kRowSplitBlocks floats for this reduction, its
// mbarrier `bar` armed by push_arm for 4 x cl bytes before the kernel's cluster barrier): every
// thread of the cluster gets the bit-identical value (ranks combined in order 0..cl-1). Every thread
// of every block calls it.
template <class Op>
__device__ __forceinline__ float cluster_reduce(float v, int tpb, float* smem, int& phase, float* parts,
                                                unsigned long long* bar, int cl) {
  v = row_reduce<Op, true>(v, tpb, smem, phase);
  if (static_cast<int>(threadIdx.x) < cl) push_send(parts + cluster_rank(), bar, threadIdx.x, v);
  push_wait(bar);
  float t = Op::identity();
  for (int k = 0; k < cl; ++k) t = Op::apply(t, parts[k]);
  return t;
}

// ---- asynchronous global -> shared copies (sm_80+): the staged row kernels bring a whole row into
// shared memory with every 16-byte piece in flight at once. `dst` and `src` are 16-byte aligned;
// src_bytes (0..16) bytes are read and the rest of the 16 zero-filled (0 reads nothing).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes) : "memory");
#endif
}
// A whole 16-byte copy (no source size: nothing to zero-fill).
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
// This launch's dynamic shared memory per block, in bytes.
__device__ __forceinline__ unsigned dynamic_smem_bytes() {
  unsigned n;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
  return n;
}
// Waits until at most N committed groups of this thread are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// ---- programmatic dependent launch (sm_90+). allow_next lets the next kernel on the stream be
// scheduled once every block of this one has started (it promises nothing about memory); wait
// returns once every earlier grid has completed and its memory is visible, so a kernel launched
// with the PDL attribute must wait before it touches memory another kernel uses. Both are no-ops
// without the attribute.
__device__ __forceinline__ void pdl_allow_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_enter() {
  pdl_allow_next();
  pdl_wait();
}

// An L2 cache policy that evicts first (what Triton's eviction_policy='evict_first' loads carry).
__device__ __forceinline__ unsigned long long evict_first() {
  unsigned long long p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

}  // namespace fz
