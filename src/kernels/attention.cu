// attention(q[T,Hq,D], k[S,Hkv,D], v[S,Hkv,D]) -> [T,Hq,D] and kv_attention (below): the library
// kernels and their planners.
//
// Semantics (CpuAttention in src/ops/library.cc): row i of head h attends to keys j < i + S - T + 1
// when causal (the queries are the last T positions), to all S keys otherwise; kv head h / (Hq/Hkv)
// (GQA); scale defaults to 1/sqrt(D); a row with no visible key is zeros; f32 accumulation, output
// in the input dtype. Scores are kept in the log2 domain (q pre-multiplied by scale*log2(e)) so the
// softmax uses exp2f; -inf marks masked scores and a row max of -inf is replaced by 0 before any
// subtraction, so fully masked rows give p = 0 and never NaN.
//
// Three kernels (attention.h says when each runs):
//  * AttnMmaKernel<T, HD>: flash-attention-2 forward for f16/bf16, HD = 64/128. 4 warps, 64 query
//    rows per block (16 per warp), Q fragments in registers (ldmatrix.x4), 64-key K and V tiles in
//    shared memory (rows padded by 16 bytes, so ldmatrix rows fall in distinct banks) loaded with
//    cp.async (zero-filled past S / T), S = QK^T and O += PV with mma.sync m16n8k16 (f32
//    accumulators; the S accumulator layout is reused as the A fragment of P, FA2's register
//    trick), V fragments through ldmatrix.trans. The V load of tile j overlaps QK^T of tile j and
//    the K load of tile j+1 overlaps the softmax and PV of tile j. Causal blocks stop at their last
//    visible tile and are launched heaviest first.
//  * AttnGeneralKernel<T, RB, MAXC>: CUDA cores, any float dtype, D <= 256. A block takes RB query
//    rows (8 for prefill, 4 for decode, 1 for one-row MHA decode) of one kv head (row r -> token
//    r / group, head kvh*group + r % group, so the query heads of a GQA group share K/V reads) and
//    a key range. Each of the 4 warps walks its own key tiles of KT keys: lane j scores key j
//    against all RB rows (its K row read straight from global memory, 8 16-byte loads in flight,
//    q broadcast from shared memory), the warp updates each row's online softmax (row maxima
//    reduced together; sums kept per lane until the end), and the V tile (staged in shared memory
//    by cp.async, overlapping the scoring) is accumulated with lane <-> head-dim element. The
//    warps' states merge through shared memory. With a key split (gridDim.z > 1) the block writes
//    (max, sum, unnormalised acc) to f32 scratch instead of the output and AttnCombineKernel
//    merges the splits (flash-decoding).
//  * kv_attention (attention over a KV cache, issue 6): KvCacheWriteKernel copies the new k/v rows
//    to k_cache/v_cache[b, pos[b] + t] (16-byte units, pos read on the device), then the same two
//    kernels run over the caches with B sequences (grid y = B * Hkv for the general kernel, grid z
//    = B for the mma kernel) and sequence b sees S_b = min(S, pos[b] + T) keys, read from device
//    memory inside the kernel; causal alignment to the end of S_b is exactly "query t sees keys
//    j <= pos[b] + t". Nothing on the host depends on pos, so the decode step is captured once as a
//    CUDA graph and replayed with new positions. The split-K grid is sized for the capacity S;
//    blocks whose key range starts past S_b skip the loop and write an empty partial (max -inf,
//    sum 0) that the combine weighs 0. Why not a separate kernel: the decode (general + split-K)
//    and prefill (mma) kernels are the tuned ones; only where the length comes from changes.
//    A sliding window (attr `window` < S: query at position p sees keys p - window < j <= p, as
//    CpuKvAttention) is a per-row lower bound in both kernels: the general kernel's key range (and
//    its splits) starts at the lowest bound of the block's rows, the mma kernel starts at the tile
//    holding its first row's bound and zero-fills the rows below it; older keys are never read.
//  * Decode in one kernel (general path, the default): the general kernel takes the new k/v rows
//    (GeneralParams::knew) — keys j >= pos[b] are read from them, never from cache rows written in
//    the same launch — and block (0, split 0) of each (sequence, kv head) writes them into the cache,
//    so KvCacheWriteKernel does not run. With arrival counters (GeneralParams::sem, from the executor)
//    the split count follows the device-side length and the last block of a row tile to arrive
//    merges the partials (threadfence + atomicAdd, counter reset by that block): no combine kernel.
//    Without arrival counters from the executor, the splits are merged by a combine kernel.
//  * Early reads (GeneralParams::early, from AttentionPlanOptions::early_reads, which the executor
//    sets when nothing in the run writes pos or the caches): pos is read and the block's cache rows
//    below pos are prefetched into L2 before the PDL wait, overlapping the q/k/v projection.
// Index arithmetic into tensors is 64-bit; per-dimension sizes are checked to fit in int.
#include "kernels/pdl.cuh"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <climits>
#include <limits>
#include <string>

#include "kernels/attention.h"

namespace opfuse::kernels {

using namespace attn;  // the host-side plan (attention_plan.h): Dims, Ptrs, PlanGeneral, ...

namespace {

constexpr int kWarps = kAttentionWarps;
constexpr int kThreads = kAttentionThreads;

// ------------------------------------------------------------------ device helpers

__device__ __forceinline__ float ToF32(float x) { return x; }
__device__ __forceinline__ float ToF32(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToF32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T FromF32(float x);
template <>
__device__ __forceinline__ float FromF32<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half FromF32<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromF32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// The 16 bytes of a uint4 as 16 / sizeof(T) floats.
__device__ __forceinline__ void Unpack(const uint4& u, float* f, const float*) {
  f[0] = __uint_as_float(u.x);
  f[1] = __uint_as_float(u.y);
  f[2] = __uint_as_float(u.z);
  f[3] = __uint_as_float(u.w);
}
__device__ __forceinline__ void Unpack(const uint4& u, float* f, const __half*) {
  const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __half22float2(h[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}
__device__ __forceinline__ void Unpack(const uint4& u, float* f, const __nv_bfloat16*) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __bfloat1622float2(h[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}

__device__ __forceinline__ float WarpMax(float x) { return fz::warp_reduce<fz::MaxOp>(x, 32); }
__device__ __forceinline__ float WarpSum(float x) { return fz::warp_reduce<fz::SumOp>(x, 32); }

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16-byte global -> shared copy; src_bytes = 0 zero-fills the destination (src is not read).
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(dst)), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ------------------------------------------------------------------ general (CUDA-core) kernel

// n online-softmax partials merged: max m (log2 units), sum l, unnormalised accumulator a. A partial
// that saw no key has m = -inf and weighs 0; so does a merge of only such partials (Value() 0).
struct Merged {
  float m, l, a;
  __device__ float Value() const { return l > 0.f ? a / l : 0.f; }
};
template <class M, class L, class A>
__device__ __forceinline__ Merged MergePartials(int n, M m_of, L l_of, A a_of) {
  Merged r{-INFINITY, 0.f, 0.f};
  for (int i = 0; i < n; ++i) r.m = fmaxf(r.m, m_of(i));
  if (r.m == -INFINITY) return r;
  for (int i = 0; i < n; ++i) {
    const float sc = exp2f(m_of(i) - r.m);
    r.l = fmaf(sc, l_of(i), r.l);
    r.a = fmaf(sc, a_of(i), r.a);
  }
  return r;
}

struct GeneralParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* ws_acc;  // split > 1: [splits][T*Hq][D] unnormalised accumulators; nullptr: write o
  float* ws_ml;   // split > 1: [splits][T*Hq][2] (row max in log2 units, row sum)
  int T, S, Hq, Hkv, D, group;
  int causal;
  float scale_log2;  // scale * log2(e)
  // kv_attention: B sequences; k/v are the caches ([B, S, Hkv, D], S = capacity) and sequence b
  // sees min(S, pos[b] + T) keys, read from device memory here (so a captured graph replays with
  // new positions). Plain attention: B = 1, pos = nullptr.
  int B;
  const int* pos;
  int kt;            // keys per warp tile (<= 32)
  int chunk;         // keys per split (blockIdx.z)
  // kv_attention decode with the cache write fused (knew != nullptr): the new rows k/v[B, T, Hkv, D]
  // are read from here for keys j >= pos[b] (never from the cache rows this kernel writes), and the
  // blocks with blockIdx.x == 0, split 0 write them into the caches k/v[b, pos[b] + t].
  const void* knew;
  const void* vnew;
  // Arrival counters, one per (blockIdx.y, blockIdx.x), zero between runs (nullptr: the split
  // partials are merged by AttnCombineKernel). With them the split count adapts to the length read
  // on the device and the last block of a row tile to arrive merges the partials and resets its
  // counter — no combine launch.
  unsigned* sem;
  int min_chunk;     // with sem: keys per split at least (a multiple of the 4 warps' tile)
  // kv decode: pos and the cache rows below pos[b] may be read before the PDL wait (nothing in
  // this launch's graph writes them; AttentionPlanOptions::early_reads).
  int early;
  int vec;           // K/V rows 16-byte aligned: vector loads and cp.async
  int union_bytes;   // shared bytes of the V tiles / merge area (multiple of 16)
  // Sliding window (kv_attention attr `window`, 0 = none): a row that sees keys j < lim also needs
  // j >= lim - window. The block's key range starts at its rows' lowest such bound, so keys older
  // than every row's window are never read.
  int window;
};

template <typename T, int RB, int MAXC>
__global__ void __launch_bounds__(kThreads) AttnGeneralKernel(GeneralParams p) {
  // pdl.cuh: wait for the earlier kernels before any memory access — except, with p.early (kv
  // decode, AttentionPlanOptions::early_reads), pos and the cache rows below it: the block finds its
  // key range and prefetches those rows into L2 first, overlapping the q/k/v projection's tail.
  PdlAllowNext();
  if (!p.early) PdlWait();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int D = p.D, KT = p.kt;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int b = blockIdx.y / p.Hkv, kvh = blockIdx.y - b * p.Hkv, split = blockIdx.z;
  const int R = p.T * p.group;
  const int r0 = blockIdx.x * RB;
  // Keys of this sequence: the whole S, or pos[b] + T from device memory (kv_attention).
  const int S = p.pos ? min(p.S, max(0, __ldg(p.pos + b) + p.T)) : p.S;
  // Shared layout: [V tiles of the 4 warps | merge area] [sQ: RB x D f32] [sP: 4 x RB x 32 f32].
  T* sV = reinterpret_cast<T*>(smem_raw) + static_cast<size_t>(warp) * KT * D;
  float* sMerge = reinterpret_cast<float*>(smem_raw);
  float* sQ = reinterpret_cast<float*>(smem_raw + p.union_bytes);
  float* sP = sQ + RB * D + warp * RB * 32;  // 16-byte aligned when RB % 4 == 0
  const int64_t q_off = static_cast<int64_t>(b) * p.T * p.Hq;  // first query row (token*Hq) of b
  const T* q = static_cast<const T*>(p.q) + q_off * D;
  const int64_t kv_stride = static_cast<int64_t>(p.Hkv) * D;
  const int64_t kv_off = static_cast<int64_t>(b) * p.S * kv_stride + static_cast<int64_t>(kvh) * D;
  const T* kbase = static_cast<const T*>(p.k) + kv_off;
  const T* vbase = static_cast<const T*>(p.v) + kv_off;

  // Block row r -> token r / group, head kvh * group + r % group -> global query row (b, token, head).
  auto global_row = [&](int r) {
    const int t = r / p.group, h = kvh * p.group + (r - t * p.group);
    return q_off + static_cast<int64_t>(t) * p.Hq + h;
  };
  // Keys visible to each row: j < lim[i]. Rows past R see nothing.
  const int off = S - p.T;
  // With a window, also j >= lo[i]; base = the lowest lo of the block's rows (0 without a window).
  int lim[RB], lo[RB];
  int block_lim = 0, base = INT_MAX;
#pragma unroll
  for (int i = 0; i < RB; ++i) {
    const int r = r0 + i;
    int li = 0;
    if (r < R) li = p.causal ? min(S, max(0, r / p.group + off + 1)) : S;
    lim[i] = li;
    lo[i] = p.window > 0 ? max(0, li - p.window) : 0;
    block_lim = max(block_lim, li);
    if (r < R) base = min(base, lo[i]);
  }
  if (base == INT_MAX) base = 0;
  // Splits: as planned (gridDim.z of p.chunk keys), or with arrival counters and a length read on
  // the device, only as many as this sequence needs: chunks of at least one iteration of the 4 warps.
  // The splits cover [base, S): gridDim.z * chunk >= S >= S - base, so they always do.
  int nsplit = gridDim.z, chunk = p.chunk;
  if (p.sem != nullptr && p.pos != nullptr) {
    const int kpi = kWarps * KT, len = max(0, S - base);
    const int want = (len + static_cast<int>(gridDim.z) - 1) / static_cast<int>(gridDim.z);
    chunk = max(max(kpi, p.min_chunk), (want + kpi - 1) / kpi * kpi);
    nsplit = max(1, (len + chunk - 1) / chunk);
    if (split >= nsplit) return;  // nothing for this block; it does not count as an arrival
  }
  const int kb = base + split * chunk;  // base + split * chunk <= S + chunk fits in int
  // Past this sequence's length (kv_attention) the range is empty: the block writes an empty
  // partial (max -inf, sum 0), which the combine weighs 0.
  const int ke = min(block_lim, min(S, kb + chunk));  // kb + chunk <= S + chunk fits in int
  // Fused cache write (p.knew): keys j >= pos_b come from the new rows (nbase + (j - pos_b) rows).
  const int pos_b = p.knew != nullptr ? __ldg(p.pos + b) : 0;
  const int new_from = p.knew != nullptr && pos_b >= 0 ? pos_b : INT_MAX;
  if (p.early) {  // the cache rows [kb, min(ke, new_from)) of K and V into L2, then wait
    const int pe = min(ke, new_from);
    const int lines = (D * static_cast<int>(sizeof(T)) + 127) / 128;
    for (int idx = tid; idx < (pe - kb) * lines; idx += kThreads) {
      const int j = kb + idx / lines, l = idx - (idx / lines) * lines;
      const char* kr = reinterpret_cast<const char*>(kbase + static_cast<int64_t>(j) * kv_stride) + l * 128;
      const char* vr = reinterpret_cast<const char*>(vbase + static_cast<int64_t>(j) * kv_stride) + l * 128;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(kr));
      asm volatile("prefetch.global.L2 [%0];" ::"l"(vr));
    }
    PdlWait();
  }
  // This block's query rows, pre-scaled, into shared memory; rows past R are zeros.
  for (int idx = tid; idx < RB * D; idx += kThreads) {
    const int i = idx / D, d = idx - i * D, r = r0 + i;
    sQ[idx] = r < R ? ToF32(q[(global_row(r) - q_off) * D + d]) * p.scale_log2 : 0.f;
  }
  const int64_t new_off = (static_cast<int64_t>(b) * p.T * p.Hkv + kvh) * D;
  const T* knb = p.knew != nullptr ? static_cast<const T*>(p.knew) + new_off : kbase;
  const T* vnb = p.knew != nullptr ? static_cast<const T*>(p.vnew) + new_off : vbase;
  if (p.knew != nullptr && blockIdx.x == 0 && split == 0 && pos_b >= 0) {
    T* kw = const_cast<T*>(kbase);
    T* vw = const_cast<T*>(vbase);
    for (int idx = tid; idx < p.T * D; idx += kThreads) {
      const int t = idx / D, d = idx - t * D;
      if (pos_b + t >= p.S) continue;  // past the cache: not written (the engine checks the length)
      const int64_t dst = static_cast<int64_t>(pos_b + t) * kv_stride + d, src = static_cast<int64_t>(t) * kv_stride + d;
      kw[dst] = knb[src];
      vw[dst] = vnb[src];
    }
  }
  __syncthreads();

  float m[RB], l[RB], acc[RB][MAXC];
#pragma unroll
  for (int i = 0; i < RB; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.f;
#pragma unroll
    for (int c = 0; c < MAXC; ++c) acc[i][c] = 0.f;
  }

  constexpr int VW = 16 / sizeof(T);  // elements per 16-byte vector
  const int vpr = D / VW;             // vectors per K/V row (used only when p.vec)
  for (int n0 = kb + warp * KT; n0 < ke; n0 += kWarps * KT) {
    const int nvalid = min(KT, ke - n0);
    // 1. Stage this tile's V rows (asynchronously when aligned; rows past nvalid zero-filled).
    if (p.vec) {
      for (int idx = lane; idx < KT * vpr; idx += 32) {
        const int n = idx / vpr, c = idx - n * vpr;
        const bool ok = n < nvalid;
        const int j = n0 + n;
        const T* src = !ok ? vbase
                       : j >= new_from ? vnb + static_cast<int64_t>(j - new_from) * kv_stride + c * VW
                                       : vbase + static_cast<int64_t>(j) * kv_stride + c * VW;
        CpAsync16(sV + n * D + c * VW, src, ok ? 16 : 0);
      }
      CpAsyncCommit();
    } else {
      for (int idx = lane; idx < nvalid * D; idx += 32) {
        const int n = idx / D, d = idx - n * D, j = n0 + n;
        sV[idx] = j >= new_from ? vnb[static_cast<int64_t>(j - new_from) * kv_stride + d]
                                : vbase[static_cast<int64_t>(j) * kv_stride + d];
      }
    }
    // 2. Lane j scores key n0 + j against every row.
    float s[RB];
#pragma unroll
    for (int i = 0; i < RB; ++i) s[i] = 0.f;
    const int key = n0 + lane;
    const bool kvalid = lane < nvalid;
    if (kvalid) {
      const T* kr = key >= new_from ? knb + static_cast<int64_t>(key - new_from) * kv_stride
                                    : kbase + static_cast<int64_t>(key) * kv_stride;
      if (p.vec) {
        const uint4* kr4 = reinterpret_cast<const uint4*>(kr);
        for (int c0 = 0; c0 < vpr; c0 += 8) {  // up to 8 independent 16-byte loads in flight
          uint4 kv4[8];
#pragma unroll
          for (int u = 0; u < 8; ++u) kv4[u] = c0 + u < vpr ? __ldg(kr4 + c0 + u) : make_uint4(0, 0, 0, 0);
#pragma unroll
          for (int u = 0; u < 8; ++u) {
            if (c0 + u < vpr) {
              float kf[VW];
              Unpack(kv4[u], kf, static_cast<const T*>(nullptr));
              const int d0 = (c0 + u) * VW;
#pragma unroll
              for (int e = 0; e < VW; e += 4) {
#pragma unroll
                for (int i = 0; i < RB; ++i) {
                  const float4 qv = *reinterpret_cast<const float4*>(sQ + i * D + d0 + e);
                  s[i] = fmaf(qv.x, kf[e], s[i]);
                  s[i] = fmaf(qv.y, kf[e + 1], s[i]);
                  s[i] = fmaf(qv.z, kf[e + 2], s[i]);
                  s[i] = fmaf(qv.w, kf[e + 3], s[i]);
                }
              }
            }
          }
        }
      } else {
        for (int d = 0; d < D; ++d) {
          const float kf = ToF32(kr[d]);
#pragma unroll
          for (int i = 0; i < RB; ++i) s[i] = fmaf(sQ[i * D + d], kf, s[i]);
        }
      }
    }
    // 3. Online softmax. The rows' warp maxima are reduced together (independent shuffles
    // interleave); l is kept per lane (alpha is warp-uniform) and summed over the warp at the end.
    // p goes to this warp's sP as [key][row].
    float sv[RB], mx[RB];
#pragma unroll
    for (int i = 0; i < RB; ++i) mx[i] = sv[i] = (kvalid && key < lim[i] && key >= lo[i]) ? s[i] : -INFINITY;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
      for (int i = 0; i < RB; ++i) mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], o));
    }
#pragma unroll
    for (int i = 0; i < RB; ++i) {
      const float m_new = fmaxf(m[i], mx[i]);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = exp2f(m[i] - m_use);
      sv[i] = exp2f(sv[i] - m_use);
      l[i] = l[i] * alpha + sv[i];
      m[i] = m_new;
#pragma unroll
      for (int c = 0; c < MAXC; ++c) acc[i][c] *= alpha;
    }
    if constexpr (RB % 4 == 0) {
#pragma unroll
      for (int i = 0; i < RB; i += 4)
        *reinterpret_cast<float4*>(sP + lane * RB + i) = make_float4(sv[i], sv[i + 1], sv[i + 2], sv[i + 3]);
    } else {
#pragma unroll
      for (int i = 0; i < RB; ++i) sP[lane * RB + i] = sv[i];
    }
    if (p.vec) CpAsyncWait<0>();
    __syncwarp();
    // 4. acc += p V, lane <-> head-dim elements lane + 32c.
    for (int n = 0; n < nvalid; ++n) {
      float vv[MAXC];
#pragma unroll
      for (int c = 0; c < MAXC; ++c) {
        const int d = lane + 32 * c;
        vv[c] = d < D ? ToF32(sV[n * D + d]) : 0.f;
      }
      float pn[RB];
      if constexpr (RB % 4 == 0) {
#pragma unroll
        for (int i = 0; i < RB; i += 4) {
          const float4 p4 = *reinterpret_cast<const float4*>(sP + n * RB + i);
          pn[i] = p4.x;
          pn[i + 1] = p4.y;
          pn[i + 2] = p4.z;
          pn[i + 3] = p4.w;
        }
      } else {
#pragma unroll
        for (int i = 0; i < RB; ++i) pn[i] = sP[n * RB + i];
      }
#pragma unroll
      for (int i = 0; i < RB; ++i) {
#pragma unroll
        for (int c = 0; c < MAXC; ++c) acc[i][c] = fmaf(pn[i], vv[c], acc[i][c]);
      }
    }
    __syncwarp();  // sV / sP are rewritten by the next tile
  }

  // Merge the 4 warps' states (the merge area aliases the V tiles: wait for every warp).
#pragma unroll
  for (int i = 0; i < RB; ++i) l[i] = WarpSum(l[i]);
  __syncthreads();
  float* mw = sMerge + warp * RB * (D + 2);
#pragma unroll
  for (int i = 0; i < RB; ++i) {
    if (lane == 0) {
      mw[i * (D + 2)] = m[i];
      mw[i * (D + 2) + 1] = l[i];
    }
#pragma unroll
    for (int c = 0; c < MAXC; ++c) {
      const int d = lane + 32 * c;
      if (d < D) mw[i * (D + 2) + 2 + d] = acc[i][c];
    }
  }
  __syncthreads();
  T* o = static_cast<T*>(p.o);
  for (int idx = tid; idx < RB * D; idx += kThreads) {
    const int i = idx / D, d = idx - i * D, r = r0 + i;
    if (r >= R) continue;
    const float* e = sMerge + i * (D + 2);  // warp w's partial at e + w * RB * (D + 2)
    const Merged mg = MergePartials(
        kWarps, [&](int w) { return e[w * RB * (D + 2)]; }, [&](int w) { return e[w * RB * (D + 2) + 1]; },
        [&](int w) { return e[w * RB * (D + 2) + 2 + d]; });
    const int64_t grow = global_row(r);
    if (p.ws_acc == nullptr || nsplit == 1) {
      o[grow * D + d] = FromF32<T>(mg.Value());
    } else {
      const int64_t wrow = static_cast<int64_t>(split) * p.B * p.T * p.Hq + grow;
      p.ws_acc[wrow * D + d] = mg.a;
      if (d == 0) {
        p.ws_ml[wrow * 2] = mg.m;
        p.ws_ml[wrow * 2 + 1] = mg.l;
      }
    }
  }
  if (p.sem == nullptr || p.ws_acc == nullptr || nsplit == 1) return;

  // Last block to arrive for this row tile merges the nsplit partials (threadfence reduction, as in
  // the CUDA samples): every block publishes its partial before counting itself.
  __shared__ int s_last;
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    unsigned* c = p.sem + static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
    const unsigned old = atomicAdd(c, 1u);
    s_last = old == static_cast<unsigned>(nsplit - 1);
    if (s_last) *c = 0u;  // every split has arrived: ready for the next run
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  const int64_t rows = static_cast<int64_t>(p.B) * p.T * p.Hq;
  for (int idx = tid; idx < RB * D; idx += kThreads) {
    const int i = idx / D, d = idx - i * D, r = r0 + i;
    if (r >= R) continue;
    const int64_t grow = global_row(r);
    // The other blocks' partials: through L2 (__ldcg), never a stale L1 line.
    const Merged mg = MergePartials(
        nsplit, [&](int s2) { return __ldcg(p.ws_ml + (s2 * rows + grow) * 2); },
        [&](int s2) { return __ldcg(p.ws_ml + (s2 * rows + grow) * 2 + 1); },
        [&](int s2) { return __ldcg(p.ws_acc + (s2 * rows + grow) * D + d); });
    o[grow * D + d] = FromF32<T>(mg.Value());
  }
}

// ------------------------------------------------------------------ split combine

struct CombineParams {
  const float* ws_acc;
  const float* ws_ml;
  void* o;
  int rows;  // B * T * Hq
  int D;
  int splits;
};

// One block per output row. Warp 0 reads every split's (max, sum) in one round (8 per lane) and
// turns them into weights; then each thread sums its head-dim element over the splits with 16 loads
// in flight (the partials were just written, so they come from L2: the cost is round trips).
template <typename T>
__global__ void __launch_bounds__(kThreads) AttnCombineKernel(CombineParams p) {
  PdlEnter();  // pdl.cuh: wait for the earlier kernels before any memory access
  constexpr int kPerLane = kAttentionMaxSplits / 32;
  __shared__ float w[kAttentionMaxSplits];
  __shared__ float s_inv;
  const int64_t row = blockIdx.x;
  const int64_t rows = p.rows;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    float mv[kPerLane], lv[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int s = lane + 32 * j;
      mv[j] = -INFINITY;
      lv[j] = 0.f;
      if (s < p.splits) {
        mv[j] = p.ws_ml[(s * rows + row) * 2];
        lv[j] = p.ws_ml[(s * rows + row) * 2 + 1];
      }
    }
    float M = -INFINITY;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) M = fmaxf(M, mv[j]);
    M = WarpMax(M);
    float L = 0.f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int s = lane + 32 * j;
      const float ws = M == -INFINITY ? 0.f : exp2f(mv[j] - M);  // an empty split has mv = -inf: 0
      if (s < p.splits) w[s] = ws;
      L = fmaf(ws, lv[j], L);
    }
    L = WarpSum(L);
    if (lane == 0) s_inv = L > 0.f ? 1.f / L : 0.f;
  }
  __syncthreads();
  const float inv = s_inv;
  T* o = static_cast<T*>(p.o);
  for (int d = threadIdx.x; d < p.D; d += kThreads) {
    const float* src = p.ws_acc + row * p.D + d;
    const int64_t split_stride = rows * p.D;
    float a[4] = {0.f, 0.f, 0.f, 0.f};
    int s = 0;
    for (; s + 16 <= p.splits; s += 16) {
      float x[16];
#pragma unroll
      for (int u = 0; u < 16; ++u) x[u] = src[(s + u) * split_stride];
#pragma unroll
      for (int u = 0; u < 16; ++u) a[u & 3] = fmaf(w[s + u], x[u], a[u & 3]);
    }
    for (; s < p.splits; ++s) a[0] = fmaf(w[s], src[s * split_stride], a[0]);
    o[row * p.D + d] = FromF32<T>(((a[0] + a[1]) + (a[2] + a[3])) * inv);
  }
}

// ------------------------------------------------------------------ tensor-core kernel

struct MmaParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  int T, S, Hq, Hkv, group;
  int causal;
  float scale_log2;
  const int* pos;  // kv_attention (blockIdx.z = sequence): keys min(S, pos[b] + T); else nullptr
  int window;      // sliding window (causal only): row i sees keys [i + off + 1 - window, i + off]; 0 = none
};

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}

// c += a (16x16, row) * b (16x8, col), f32 accumulators.
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, const __nv_bfloat16*) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, const __half*) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a packed pair (lo in the low half), in T.
__device__ __forceinline__ uint32_t Pack2(float lo, float hi, const __nv_bfloat16*) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t Pack2(float lo, float hi, const __half*) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

template <typename T, int HD>
__global__ void __launch_bounds__(kThreads) AttnMmaKernel(MmaParams p) {
  constexpr int BM = 64, BN = 64;  // query rows / keys per tile
  constexpr int LD = HD + 8;       // padded shared row (elements): 16-byte shift per row
  constexpr int CPR = HD / 8;      // 16-byte chunks per row
  static_assert(BM * CPR % kThreads == 0 && BM == BN, "tile loader assumes this");
  __shared__ __align__(16) T sK[BN * LD];
  __shared__ __align__(16) T sV[BN * LD];  // holds the Q tile before the first V tile
  const T* tp = nullptr;                   // tag for the dtype overloads

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int mt = p.causal ? static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x) : blockIdx.x;
  const int m0 = mt * BM;
  const int h = blockIdx.y, kvh = h / p.group, b = blockIdx.z;
  const int S = p.pos ? min(p.S, max(0, __ldg(p.pos + b) + p.T)) : p.S;  // this sequence's keys
  const int off = S - p.T;
  const int64_t q_stride = static_cast<int64_t>(p.Hq) * HD, kv_stride = static_cast<int64_t>(p.Hkv) * HD;
  const int64_t q_off = static_cast<int64_t>(b) * p.T * q_stride;  // sequence b's first query row
  const T* qbase = static_cast<const T*>(p.q) + q_off + static_cast<int64_t>(h) * HD;
  const int64_t kv_off = static_cast<int64_t>(b) * p.S * kv_stride + static_cast<int64_t>(kvh) * HD;
  const T* kbase = static_cast<const T*>(p.k) + kv_off;
  const T* vbase = static_cast<const T*>(p.v) + kv_off;
  const int kv_end = p.causal ? min(S, max(0, m0 + BM + off)) : S;  // keys any row here sees
  const int ntiles = (kv_end + BN - 1) / BN;
  // With a window, keys below kv_begin (the first row's lower bound) are seen by no row here: the
  // tiles start at the one holding kv_begin, and its rows below kv_begin are zero-filled, never read.
  const int kv_begin = p.window > 0 && p.causal ? max(0, m0 + off + 1 - p.window) : 0;
  const int j0 = kv_begin / BN;
  const int win_lo_last = p.window > 0 && p.causal ? m0 + BM + off - p.window : INT_MIN;  // last row's bound

  // rows [row0, row0 + 64) of a [rows, heads, HD] tensor -> padded shared tile; rows outside
  // [first, nrows) -> 0.
  auto load_tile = [&](T* dst, const T* base, int64_t stride, int row0, int nrows, int first) {
#pragma unroll
    for (int i = 0; i < BM * CPR / kThreads; ++i) {
      const int idx = tid + i * kThreads;
      const int r = idx / CPR, c = idx - (idx / CPR) * CPR;
      const bool ok = row0 + r < nrows && row0 + r >= first;
      const T* src = ok ? base + static_cast<int64_t>(row0 + r) * stride + c * 8 : base;
      CpAsync16(dst + r * LD + c * 8, src, ok ? 16 : 0);
    }
  };

  load_tile(sV, qbase, q_stride, m0, p.T, 0);
  CpAsyncCommit();
  if (j0 < ntiles) load_tile(sK, kbase, kv_stride, j0 * BN, S, kv_begin);
  CpAsyncCommit();
  CpAsyncWait<0>();
  __syncthreads();
  // Q fragments (A operand, 16 rows x HD) of this warp: matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15).
  uint32_t qf[HD / 16][4];
#pragma unroll
  for (int kc = 0; kc < HD / 16; ++kc)
    LdMatrixX4(qf[kc], sV + (warp * 16 + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8);
  __syncthreads();  // the Q tile's buffer becomes the V buffer

  float oacc[HD / 8][4];
#pragma unroll
  for (int dt = 0; dt < HD / 8; ++dt) oacc[dt][0] = oacc[dt][1] = oacc[dt][2] = oacc[dt][3] = 0.f;
  float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};  // rows g and g + 8 of the warp
  const int qrow = m0 + warp * 16 + (lane >> 2);                  // query row of c0/c1 (c2/c3: +8)

  for (int j = j0; j < ntiles; ++j) {
    const int n0 = j * BN;
    load_tile(sV, vbase, kv_stride, n0, S, kv_begin);
    CpAsyncCommit();
    CpAsyncWait<1>();  // K tile j has landed (V tile j may be in flight)
    __syncthreads();

    // S = Q K^T: 16 x 64 per warp, 8 n-tiles of 8 keys.
    float sacc[BN / 8][4];
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) sacc[nt][0] = sacc[nt][1] = sacc[nt][2] = sacc[nt][3] = 0.f;
#pragma unroll
    for (int kc = 0; kc < HD / 16; ++kc) {
#pragma unroll
      for (int ntp = 0; ntp < BN / 16; ++ntp) {
        // matrices: (keys 0-7, d 0-7), (keys 0-7, d 8-15), (keys 8-15, d 0-7), (keys 8-15, d 8-15)
        uint32_t b[4];
        LdMatrixX4(b, sK + (ntp * 16 + ((lane >> 4) << 3) + (lane & 7)) * LD + kc * 16 + ((lane >> 3) & 1) * 8);
        Mma(sacc[2 * ntp], qf[kc], b[0], b[1], tp);
        Mma(sacc[2 * ntp + 1], qf[kc], b[2], b[3], tp);
      }
    }
    __syncthreads();  // every warp is done with sK
    if (j + 1 < ntiles) load_tile(sK, kbase, kv_stride, n0 + BN, S, kv_begin);
    CpAsyncCommit();  // (possibly empty) group, so the wait counts below stay uniform

    // Online softmax in the log2 domain. Masking is needed only on the tile past S, crossing the
    // causal diagonal of this block's first row, or (window) below the last row's lower bound.
    const bool need_mask = (n0 + BN > S) || (p.causal && n0 + BN - 1 > m0 + off) || n0 < win_lo_last;
    const int wlo = p.window > 0 && p.causal ? qrow + off + 1 - p.window : INT_MIN;  // row qrow's bound
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float s0 = sacc[nt][e] * p.scale_log2, s1 = sacc[nt][2 + e] * p.scale_log2;
        if (need_mask) {
          const int key = n0 + nt * 8 + (lane & 3) * 2 + e;
          if (key >= S || (p.causal && key > qrow + off) || key < wlo) s0 = -INFINITY;
          if (key >= S || (p.causal && key > qrow + 8 + off) || key < wlo + 8) s1 = -INFINITY;
        }
        sacc[nt][e] = s0;
        sacc[nt][2 + e] = s1;
        mx[0] = fmaxf(mx[0], s0);
        mx[1] = fmaxf(mx[1], s1);
      }
    }
    float mu[2], alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(mrow[r], mx[r]);
      mu[r] = m_new == -INFINITY ? 0.f : m_new;
      alpha[r] = exp2f(mrow[r] - mu[r]);
      mrow[r] = m_new;
    }
    float rs[2] = {0.f, 0.f};
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        sacc[nt][e] = exp2f(sacc[nt][e] - mu[0]);
        sacc[nt][2 + e] = exp2f(sacc[nt][2 + e] - mu[1]);
        rs[0] += sacc[nt][e];
        rs[1] += sacc[nt][2 + e];
      }
    }
    lrow[0] = lrow[0] * alpha[0] + rs[0];  // per-thread partial sums; the quad is summed at the end
    lrow[1] = lrow[1] * alpha[1] + rs[1];
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt) {
      oacc[dt][0] *= alpha[0];
      oacc[dt][1] *= alpha[0];
      oacc[dt][2] *= alpha[1];
      oacc[dt][3] *= alpha[1];
    }

    CpAsyncWait<1>();  // V tile j has landed (K tile j + 1 may be in flight)
    __syncthreads();
    // O += P V: P's accumulators are the A fragments (keys 16*kc2 .. +15); V via ldmatrix.trans.
#pragma unroll
    for (int kc2 = 0; kc2 < BN / 16; ++kc2) {
      uint32_t a[4];
      a[0] = Pack2(sacc[2 * kc2][0], sacc[2 * kc2][1], tp);
      a[1] = Pack2(sacc[2 * kc2][2], sacc[2 * kc2][3], tp);
      a[2] = Pack2(sacc[2 * kc2 + 1][0], sacc[2 * kc2 + 1][1], tp);
      a[3] = Pack2(sacc[2 * kc2 + 1][2], sacc[2 * kc2 + 1][3], tp);
#pragma unroll
      for (int dtp = 0; dtp < HD / 16; ++dtp) {
        // matrices: (keys 0-7, d 0-7), (keys 8-15, d 0-7), (keys 0-7, d 8-15), (keys 8-15, d 8-15)
        uint32_t b[4];
        LdMatrixX4Trans(b, sV + (kc2 * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LD + dtp * 16 + (lane >> 4) * 8);
        Mma(oacc[2 * dtp], a, b[0], b[1], tp);
        Mma(oacc[2 * dtp + 1], a, b[2], b[3], tp);
      }
    }
    __syncthreads();  // every warp is done with sV before the next V tile lands in it
  }
  CpAsyncWait<0>();  // nothing is outstanding here; keeps the exit clean regardless

  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 1);
    lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 2);
    inv[r] = lrow[r] > 0.f ? 1.f / lrow[r] : 0.f;
  }
  T* o = static_cast<T*>(p.o);
#pragma unroll
  for (int dt = 0; dt < HD / 8; ++dt) {
    const int col = dt * 8 + (lane & 3) * 2;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = qrow + 8 * r;
      if (row < p.T) {
        const uint32_t packed = Pack2(oacc[dt][2 * r] * inv[r], oacc[dt][2 * r + 1] * inv[r], tp);
        *reinterpret_cast<uint32_t*>(o + q_off + (static_cast<int64_t>(row) * p.Hq + h) * HD + col) = packed;
      }
    }
  }
}

// ------------------------------------------------------------------ kv_attention cache write

struct KvWriteParams {
  const void* k;
  const void* v;
  void* kc;
  void* vc;
  const int* pos;
  int64_t total;  // B * T * units
  int T, S, units;  // units of E per token row (Hkv * D elements)
};

// k[b, t] -> k_cache[b, pos[b] + t] (and v), one E (16 bytes when aligned) per thread and grid
// stride; pos read from device memory. A row past the cache (pos[b] + t >= S, or pos < 0) is not
// written — the caller's error, which the attention kernels also clamp to S.
template <typename E>
__global__ void __launch_bounds__(256) KvCacheWriteKernel(KvWriteParams p) {
  PdlEnter();  // pdl.cuh: wait for the earlier kernels before any memory access
  const E* k = static_cast<const E*>(p.k);
  const E* v = static_cast<const E*>(p.v);
  E* kc = static_cast<E*>(p.kc);
  E* vc = static_cast<E*>(p.vc);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t bt = i / p.units;
    const int u = static_cast<int>(i - bt * p.units);
    const int b = static_cast<int>(bt / p.T), t = static_cast<int>(bt - static_cast<int64_t>(b) * p.T);
    const int ps = __ldg(p.pos + b);
    if (ps < 0 || ps + t >= p.S) continue;
    const int64_t dst = (static_cast<int64_t>(b) * p.S + ps + t) * p.units + u;
    const E kx = k[i], vx = v[i];
    kc[dst] = kx;
    vc[dst] = vx;
  }
}

// ------------------------------------------------------------------ host side

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

using GeneralFn = void (*)(GeneralParams);

template <typename T, int RB>
GeneralFn PickGeneralC(int maxc) {
  switch (maxc) {
    case 2: return AttnGeneralKernel<T, RB, 2>;
    case 4: return AttnGeneralKernel<T, RB, 4>;
    default: return AttnGeneralKernel<T, RB, 8>;
  }
}
template <typename T>
GeneralFn PickGeneralRb(int rb, int maxc) {
  switch (rb) {
    case 1: return PickGeneralC<T, 1>(maxc);
    case 4: return PickGeneralC<T, 4>(maxc);
    default: return PickGeneralC<T, 8>(maxc);
  }
}
GeneralFn PickGeneral(DType t, int rb, int maxc) {
  switch (t) {
    case DType::kF16: return PickGeneralRb<__half>(rb, maxc);
    case DType::kBF16: return PickGeneralRb<__nv_bfloat16>(rb, maxc);
    default: return PickGeneralRb<float>(rb, maxc);
  }
}
using CombineFn = void (*)(CombineParams);
CombineFn PickCombine(DType t) {
  switch (t) {
    case DType::kF16: return AttnCombineKernel<__half>;
    case DType::kBF16: return AttnCombineKernel<__nv_bfloat16>;
    default: return AttnCombineKernel<float>;
  }
}
using MmaFn = void (*)(MmaParams);
MmaFn PickMma(DType t, int64_t hd) {
  if (t == DType::kBF16) return hd == 64 ? AttnMmaKernel<__nv_bfloat16, 64> : AttnMmaKernel<__nv_bfloat16, 128>;
  return hd == 64 ? AttnMmaKernel<__half, 64> : AttnMmaKernel<__half, 128>;
}

Status PlanAttentionCore(const Dims& d, const Ptrs& ptr, bool causal, double scale, const cuda::DeviceInfo& dev,
                         const AttentionPlanOptions& opts, const char* op, std::vector<cuda::KernelLaunch>& launches);

}  // namespace

StatusOr<std::vector<cuda::KernelLaunch>> PlanAttentionWith(const Node& n, const std::vector<TensorRef>& in,
                                                            const std::vector<TensorRef>& out,
                                                            const cuda::DeviceInfo& dev,
                                                            const AttentionPlanOptions& opts) {
  Dims d;
  if (Status s = CheckDims(in, &out, &d); !s.ok()) return s;
  const bool causal = AttrInt(n.attrs, "causal", 1) != 0;
  const double scale = AttrFloat(n.attrs, "scale", d.D > 0 ? 1.0 / std::sqrt(static_cast<double>(d.D)) : 1.0);
  std::vector<cuda::KernelLaunch> launches;
  OPFUSE_RETURN_IF_ERROR(PlanAttentionCore(d, PtrsOf(in, &out), causal, scale, dev, opts, "attention", launches));
  return launches;
}

namespace {

// The GeneralParams fields every general-kernel launch fills: pointers, sizes, causal and
// scale, the new k/v rows, early reads, and with splits > 1 the scratch: [splits][B*T*Hq][D] f32
// accumulators, then [splits][B*T*Hq][2] (max, sum).
GeneralParams BaseParams(const Dims& d, const Ptrs& ptr, bool causal, float scale_log2, const AttentionPlanOptions& opts,
                         int splits) {
  GeneralParams p{};
  p.q = ptr.q;
  p.k = ptr.k;
  p.v = ptr.v;
  p.o = ptr.o;
  p.B = static_cast<int>(d.B);
  p.pos = ptr.pos;
  p.T = static_cast<int>(d.T);
  p.S = static_cast<int>(d.S);
  p.Hq = static_cast<int>(d.Hq);
  p.Hkv = static_cast<int>(d.Hkv);
  p.D = static_cast<int>(d.D);
  p.group = static_cast<int>(d.group);
  p.causal = causal ? 1 : 0;
  p.scale_log2 = scale_log2;
  p.knew = ptr.knew;
  p.vnew = ptr.vnew;
  p.window = static_cast<int>(d.window);
  p.early = opts.early_reads && ptr.pos != nullptr && ptr.knew != nullptr ? 1 : 0;
  if (splits > 1) {
    p.ws_acc = static_cast<float*>(opts.workspace);
    p.ws_ml = reinterpret_cast<float*>(static_cast<char*>(opts.workspace) +
                                       static_cast<size_t>(splits) * d.B * d.T * d.Hq * d.D * sizeof(float));
  }
  return p;
}

// The launches of attention over Dims `d` (B sequences; with ptr.pos, sequence b has
// min(S, pos[b] + T) keys, read on the device), appended to `launches`.
Status PlanAttentionCore(const Dims& d, const Ptrs& ptr, bool causal, double scale, const cuda::DeviceInfo& dev,
                         const AttentionPlanOptions& opts, const char* op, std::vector<cuda::KernelLaunch>& launches) {
  if (!IsFloat(d.dtype)) return Unimplemented(fmt::format("{}: dtype {} (needs f32/f16/bf16)", op, DTypeName(d.dtype)));
  if (d.D > 256) return Unimplemented(fmt::format("{}: head_dim {} > 256", op, d.D));
  const float scale_log2 = static_cast<float>(scale * 1.4426950408889634);
  if (d.B == 0 || d.T == 0 || d.Hq == 0 || d.D == 0) return Status::Ok();  // empty output: nothing to compute

  bool mma = false;
  if (opts.path == AttentionPath::kTensorCore) {
    const std::string why = MmaRefusal(d, ptr);
    if (!why.empty()) return Unimplemented(fmt::format("{}: tensor-core kernel does not apply: {}", op, why));
    mma = true;
  } else if (opts.path == AttentionPath::kAuto) {
    mma = AutoUsesMma(d, ptr);
  }
  const std::string prefix = op;

  if (mma) {
    MmaParams p{ptr.q, ptr.k, ptr.v, ptr.o, static_cast<int>(d.T), static_cast<int>(d.S),
                static_cast<int>(d.Hq), static_cast<int>(d.Hkv), static_cast<int>(d.group), causal ? 1 : 0,
                scale_log2, ptr.pos, static_cast<int>(d.window)};
    if (d.Hq > 65535 || d.B > 65535) return Unimplemented(fmt::format("{}: {} query heads or {} sequences > 65535", op, d.Hq, d.B));
    const dim3 grid(static_cast<unsigned>((d.T + 63) / 64), static_cast<unsigned>(d.Hq), static_cast<unsigned>(d.B));
    launches.push_back(cuda::KernelLaunch::Make(fmt::format("{}_mma_{}_d{}", prefix, DTypeName(d.dtype), d.D),
                                                PickMma(d.dtype, d.D), grid, dim3(kThreads), 0, p));
    return Status::Ok();
  }

  if (d.Hkv * d.B > 65535) return Unimplemented(fmt::format("{}: {} kv heads x {} sequences > 65535", op, d.Hkv, d.B));
  const GeneralPlan g = PlanGeneral(d, GeneralVec(d, ptr), dev, opts.workspace ? opts.workspace_bytes : 0,
                                    opts.max_splits);
  if (g.smem_bytes > static_cast<size_t>(std::max<int64_t>(dev.max_shared_mem_per_block, 48 * 1024)))
    return Internal(fmt::format("attention: general kernel needs {} bytes of shared memory", g.smem_bytes));
  if (g.splits > 1 && (opts.workspace == nullptr || opts.workspace_bytes < g.ws_bytes ||
                        reinterpret_cast<uintptr_t>(opts.workspace) % alignof(float) != 0))
    return Internal("attention: split plan without enough aligned workspace");
  GeneralParams p = BaseParams(d, ptr, causal, scale_log2, opts, g.splits);
  p.kt = g.kt;
  p.chunk = g.chunk;
  p.vec = g.vec ? 1 : 0;
  p.union_bytes = static_cast<int>(g.union_bytes);
  const int64_t tiles = g.row_tiles * d.Hkv * d.B;
  if (g.splits > 1 && opts.counters != nullptr && opts.counter_count >= static_cast<size_t>(tiles))
    p.sem = opts.counters;
  p.min_chunk = MinSplitChunk(static_cast<int>(kWarps) * g.kt);
  const dim3 grid(static_cast<unsigned>(g.row_tiles), static_cast<unsigned>(d.Hkv * d.B), static_cast<unsigned>(g.splits));
  std::string name = fmt::format("{}_general_{}_rb{}_c{}", prefix, DTypeName(d.dtype), g.rb, g.maxc);
  if (g.splits > 1) name += fmt::format("_split{}", g.splits);
  if (p.sem) name += "_lastblock";
  if (p.knew) name += "_cachewrite";
  launches.push_back(cuda::KernelLaunch::Make(std::move(name), PickGeneral(d.dtype, g.rb, g.maxc), grid,
                                              dim3(kThreads), g.smem_bytes, p)
                         .Pdl());
  if (g.splits > 1 && p.sem == nullptr) {
    CombineParams c{p.ws_acc, p.ws_ml, ptr.o, static_cast<int>(d.B * d.T * d.Hq), static_cast<int>(d.D), g.splits};
    launches.push_back(cuda::KernelLaunch::Make(fmt::format("{}_combine_{}", prefix, DTypeName(d.dtype)),
                                                PickCombine(d.dtype), dim3(static_cast<unsigned>(d.B * d.T * d.Hq)),
                                                dim3(kThreads), 0, c)
                           .Pdl());
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<cuda::KernelLaunch>> PlanAttention(const Node& n, const std::vector<TensorRef>& in,
                                                        const std::vector<TensorRef>& out,
                                                        const cuda::DeviceInfo& dev) {
  AttentionPlanOptions opts;
  if (in.size() > 3) {  // optional scratch from the executor (AttentionWorkspaceBytes)
    opts.workspace = in[3].data;
    opts.workspace_bytes = static_cast<size_t>(in[3].numel()) * DTypeSize(in[3].dtype);
  }
  if (in.size() > 4) {  // optional arrival counters (AttentionCounterCount), zero between runs
    opts.counters = static_cast<unsigned*>(in[4].data);
    opts.counter_count = static_cast<size_t>(in[4].numel());
  }
  return PlanAttentionWith(n, in, out, dev, opts);
}

// ------------------------------------------------------------------ kv_attention

size_t KvAttentionWorkspaceBytesFor(const std::vector<TensorRef>& in, const cuda::DeviceInfo& dev, AttentionPath path,
                                    int max_splits) {
  Dims d;
  if (!CheckKvDims(in, nullptr, &d).ok() || d.D > 256 || !IsFloat(d.dtype)) return 0;
  if (path == AttentionPath::kTensorCore) return 0;
  const Ptrs ptr = KvPtrsOf(in, nullptr);
  if (path == AttentionPath::kAuto && AutoUsesMma(d, ptr)) return 0;
  return PlanGeneral(d, GeneralVec(d, ptr), dev, std::numeric_limits<size_t>::max(), max_splits).ws_bytes;
}

StatusOr<std::vector<cuda::KernelLaunch>> PlanKvAttentionWith(const Node& n, const std::vector<TensorRef>& in,
                                                              const std::vector<TensorRef>& out,
                                                              const cuda::DeviceInfo& dev,
                                                              const AttentionPlanOptions& opts) {
  Dims d;
  if (Status s = CheckKvDims(in, &out, &d); !s.ok()) return s;
  // Sliding window (CpuKvAttention's semantics): one at least as long as the cache changes nothing.
  const int64_t window = AttrInt(n.attrs, "window", 0);
  if (window < 0) return InvalidArgument(fmt::format("kv_attention: window must be >= 0, got {}", window));
  d.window = window < d.S ? window : 0;
  std::vector<cuda::KernelLaunch> launches;
  if (d.B == 0 || d.T == 0) return launches;
  const double scale = AttrFloat(n.attrs, "scale", d.D > 0 ? 1.0 / std::sqrt(static_cast<double>(d.D)) : 1.0);
  Ptrs ptr = KvPtrsOf(in, &out);
  // Decode (the general kernel): the attention kernel writes the new rows itself — one launch.
  const bool mma = opts.path == AttentionPath::kTensorCore || (opts.path == AttentionPath::kAuto && AutoUsesMma(d, ptr));
  if (!mma) {
    ptr.knew = in[1].data;
    ptr.vnew = in[2].data;
    OPFUSE_RETURN_IF_ERROR(PlanAttentionCore(d, ptr, true, scale, dev, opts, "kv_attention", launches));
    return launches;
  }
  // 1. The cache write: 16-byte units when every row and pointer allows, else elements.
  const int64_t esize = DTypeSize(d.dtype), row_bytes = d.Hkv * d.D * esize;
  const bool vec = row_bytes % 16 == 0 && Aligned16(in[1].data) && Aligned16(in[2].data) && Aligned16(in[3].data) &&
                   Aligned16(in[4].data);
  KvWriteParams w{in[1].data, in[2].data, in[3].data, in[4].data, static_cast<const int*>(in[5].data), 0,
                  static_cast<int>(d.T), static_cast<int>(d.S), 0};
  w.units = static_cast<int>(vec ? row_bytes / 16 : d.Hkv * d.D);
  w.total = d.B * d.T * w.units;
  if (w.total > 0) {
    const int64_t blocks = std::clamp<int64_t>((w.total + 255) / 256, 1, int64_t{8} * std::max(1, dev.sm_count));
    void (*fn)(KvWriteParams) = vec ? KvCacheWriteKernel<uint4>
                                : esize == 4 ? KvCacheWriteKernel<uint32_t>
                                             : KvCacheWriteKernel<uint16_t>;
    launches.push_back(cuda::KernelLaunch::Make(fmt::format("kv_cache_write_{}{}", DTypeName(d.dtype), vec ? "_v16" : ""),
                                                fn, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, w)
                           .Pdl());
  }
  // 2. Attention over the caches, causal at absolute positions: the existing kernels with
  //    S_b = pos[b] + T read on the device (query t sees keys j <= pos[b] + t).
  OPFUSE_RETURN_IF_ERROR(PlanAttentionCore(d, ptr, true, scale, dev, opts, "kv_attention", launches));
  return launches;
}

StatusOr<std::vector<cuda::KernelLaunch>> PlanKvAttention(const Node& n, const std::vector<TensorRef>& in,
                                                          const std::vector<TensorRef>& out,
                                                          const cuda::DeviceInfo& dev) {
  AttentionPlanOptions opts;
  if (in.size() > 6) {  // optional split-K scratch from the executor (AttentionWorkspaceBytes)
    opts.workspace = in[6].data;
    opts.workspace_bytes = static_cast<size_t>(in[6].numel()) * DTypeSize(in[6].dtype);
  }
  if (in.size() > 7) {  // optional arrival counters (AttentionCounterCount), zero between runs
    opts.counters = static_cast<unsigned*>(in[7].data);
    opts.counter_count = static_cast<size_t>(in[7].numel());
  }
  opts.early_reads = AttrInt(n.attrs, kEarlyReadsAttr, 0) != 0;  // set by the CUDA executor
  return PlanKvAttentionWith(n, in, out, dev, opts);
}

}  // namespace opfuse::kernels
