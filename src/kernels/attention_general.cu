// The general (CUDA-core) attention kernel and the split combine kernel; what they compute and when
// they run: src/kernels/attention.cu (the planners) and attention.h.
#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/attention_device.cuh"
#include "kernels/attention_kernels.h"

namespace opfuse::kernels::attn {

namespace {

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

}  // namespace

namespace {
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
}  // namespace

GeneralFn PickGeneral(DType t, int rb, int maxc) {
  switch (t) {
    case DType::kF16: return PickGeneralRb<__half>(rb, maxc);
    case DType::kBF16: return PickGeneralRb<__nv_bfloat16>(rb, maxc);
    default: return PickGeneralRb<float>(rb, maxc);
  }
}

CombineFn PickCombine(DType t) {
  switch (t) {
    case DType::kF16: return AttnCombineKernel<__half>;
    case DType::kBF16: return AttnCombineKernel<__nv_bfloat16>;
    default: return AttnCombineKernel<float>;
  }
}

}  // namespace opfuse::kernels::attn
