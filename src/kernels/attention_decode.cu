// The decode attention kernel (f16/bf16, head_dim * element size of 128, 256 or 512 bytes, up to 4
// query rows per block); when it runs: attention_plan.h (DecodeRefusal), the planner: attention.cu.
//
// Design: at decode a kv head's work is a few rows (its GQA group) over a few hundred keys — too
// little for the general kernel's layout (a lane per key dotting a whole K row against every row,
// q staged in shared memory, the V tile through shared memory), whose single busy warp per block runs
// ~2000 dependent instructions: a fixed cost of several µs whatever the length. Here a key is split
// over L = head_dim * size / 16 lanes (each lane holds one 16-byte slice of its K and V rows and the
// matching slice of every query row, pre-scaled, in registers), so a warp scores 32 / L keys per step
// with a few FMAs and log2(L) shuffles per row, and accumulates p * V in the same registers — no
// shared memory and no barrier until the end. The running max is shared by the warp's lane groups
// (one more max-shuffle per row and step), so merging the groups at the end is a plain sum. The
// block's keys go to the warps a step (32 / L keys each) at a time, and each warp loads
// kAttentionDecodeSteps steps' K/V rows before using them (that many 16-byte loads per lane in flight
// per operand, as many bytes as the general kernel's iteration); steps past the block's range are
// neither loaded nor computed, so a split can be as short as one step of the 4 warps. At most 4 rows per block: 8 rows' q slices and accumulators need
// every register, and the compiler then serialises the loads. The warps' states merge through shared memory; with a key split (gridDim.z > 1, at most
// kAttentionDecodeMaxSplits) the block writes a partial in the general kernel's scratch layout, so
// the combine kernel, and the last-block merge with arrival counters, are the same protocol
// (GeneralParams). Invariants shared with the general kernel: the row -> (token, head) mapping, the
// causal/window bounds lim/lo, the split rules, the fused cache write and the early reads.
#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/attention_device.cuh"
#include "kernels/attention_kernels.h"

namespace opfuse::kernels::attn {

namespace {

template <typename T, int L, int RB>
__global__ void __launch_bounds__(kThreads) AttnDecodeKernel(GeneralParams p) {
  PdlAllowNext();
  if (!p.early) PdlWait();
  constexpr int VW = 16 / sizeof(T);  // elements of a 16-byte slice
  constexpr int D = L * VW;
  constexpr int KPS = 32 / L;  // keys a warp scores per step, one per lane group
  constexpr int U = kAttentionDecodeSteps;  // steps whose K/V loads are in flight together
  constexpr int kStep = kWarps * KPS;  // keys per block step (== p.kt): the split granularity
  constexpr int kMaxSplits = kAttentionDecodeMaxSplits;
  static_assert(kMaxSplits == 32, "the last-block merge gives each lane of a warp one split");
  __shared__ __align__(16) float sMerge[kWarps * RB * (D + 2)];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int grp = lane / L, sub = lane % L;
  const int b = blockIdx.y / p.Hkv, kvh = blockIdx.y - b * p.Hkv, split = blockIdx.z;
  const int R = p.T * p.group;
  const int r0 = blockIdx.x * RB;
  const int S = p.pos ? min(p.S, max(0, __ldg(p.pos + b) + p.T)) : p.S;
  const int64_t q_off = static_cast<int64_t>(b) * p.T * p.Hq;
  const int64_t kv_stride = static_cast<int64_t>(p.Hkv) * D;
  const int64_t kv_off = static_cast<int64_t>(b) * p.S * kv_stride + static_cast<int64_t>(kvh) * D;
  const T* kbase = static_cast<const T*>(p.k) + kv_off;
  const T* vbase = static_cast<const T*>(p.v) + kv_off;

  // Row r0 + i -> token t, head kvh * group + h, walked from one division; its offset from q_off
  // (token * Hq + head), visible keys j < lim[i] (and j >= lo[i] with a window).
  const int off = S - p.T;
  int rowoff[RB], lim[RB], lo[RB];
  int block_lim = 0, base = INT_MAX;
  {
    int t = r0 / p.group, h = r0 - t * p.group;
#pragma unroll
    for (int i = 0; i < RB; ++i) {
      const bool valid = r0 + i < R;
      rowoff[i] = t * p.Hq + kvh * p.group + h;
      const int li = !valid ? 0 : p.causal ? min(S, max(0, t + off + 1)) : S;
      lim[i] = li;
      lo[i] = p.window > 0 ? max(0, li - p.window) : 0;
      block_lim = max(block_lim, li);
      if (valid) base = min(base, lo[i]);
      if (++h == p.group) h = 0, ++t;
    }
  }
  if (base == INT_MAX) base = 0;
  // Splits: as the general kernel (attention_general.cu).
  int nsplit = gridDim.z, chunk = p.chunk;
  if (p.sem != nullptr && p.pos != nullptr) {
    const int kpi = kStep, len = max(0, S - base);
    const int want = (len + static_cast<int>(gridDim.z) - 1) / static_cast<int>(gridDim.z);
    chunk = max(max(kpi, p.min_chunk), (want + kpi - 1) / kpi * kpi);
    nsplit = max(1, (len + chunk - 1) / chunk);
    if (split >= nsplit) return;  // nothing for this block; it does not count as an arrival
  }
  const int kb = base + split * chunk;
  const int ke = min(block_lim, min(S, kb + chunk));
  const int pos_b = p.knew != nullptr ? __ldg(p.pos + b) : 0;
  const int new_from = p.knew != nullptr && pos_b >= 0 ? pos_b : INT_MAX;
  if (p.early) {  // this block's cache rows [kb, min(ke, new_from)) of K and V into L2, then wait
    constexpr int kLines = (D * static_cast<int>(sizeof(T)) + 127) / 128;
    const int pe = min(ke, new_from);
    for (int idx = tid; idx < (pe - kb) * kLines; idx += kThreads) {
      const int j = kb + idx / kLines, ln = idx - (idx / kLines) * kLines;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const char*>(kbase + j * kv_stride) + ln * 128));
      asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const char*>(vbase + j * kv_stride) + ln * 128));
    }
    PdlWait();
  }
  // This lane's 16-byte slice of every query row, pre-scaled (rows past R: zeros).
  const T* q = static_cast<const T*>(p.q) + q_off * D + sub * VW;
  float qf[RB][VW];
#pragma unroll
  for (int i = 0; i < RB; ++i) {
    const uint4 u = r0 + i < R ? __ldg(reinterpret_cast<const uint4*>(q + static_cast<int64_t>(rowoff[i]) * D))
                               : make_uint4(0, 0, 0, 0);
    Unpack(u, qf[i], static_cast<const T*>(nullptr));
#pragma unroll
    for (int e = 0; e < VW; ++e) qf[i][e] *= p.scale_log2;
  }
  // Fused cache write (p.knew): keys j >= pos_b are read from the new rows, never from the cache
  // rows written here, so no barrier is needed.
  const int64_t new_off = (static_cast<int64_t>(b) * p.T * p.Hkv + kvh) * D;
  const T* knb = p.knew != nullptr ? static_cast<const T*>(p.knew) + new_off : kbase;
  const T* vnb = p.knew != nullptr ? static_cast<const T*>(p.vnew) + new_off : vbase;
  if (p.knew != nullptr && blockIdx.x == 0 && split == 0 && pos_b >= 0) {
    T* kw = const_cast<T*>(kbase);
    T* vw = const_cast<T*>(vbase);
    for (int idx = tid; idx < p.T * L; idx += kThreads) {  // 16-byte units
      const int t = idx / L, c = idx - t * L;
      if (pos_b + t >= p.S) continue;  // past the cache: not written (the engine checks the length)
      const int64_t dst = static_cast<int64_t>(pos_b + t) * kv_stride + c * VW, src = t * kv_stride + c * VW;
      *reinterpret_cast<uint4*>(kw + dst) = __ldg(reinterpret_cast<const uint4*>(knb + src));
      *reinterpret_cast<uint4*>(vw + dst) = __ldg(reinterpret_cast<const uint4*>(vnb + src));
    }
  }

  float m[RB], l[RB], acc[RB][VW];
#pragma unroll
  for (int i = 0; i < RB; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.f;
#pragma unroll
    for (int e = 0; e < VW; ++e) acc[i][e] = 0.f;
  }
  // Step u of an iteration covers keys n0 + u * kStep + [0, kStep): warp w the KPS from w * KPS.
  for (int n0 = kb; n0 < ke; n0 += U * kStep) {
    uint4 kr[U], vr[U];
    int key[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      key[u] = n0 + u * kStep + warp * KPS + grp;
      const bool ok = key[u] < ke;
      const int64_t ro = key[u] >= new_from ? static_cast<int64_t>(key[u] - new_from) * kv_stride
                                            : static_cast<int64_t>(key[u]) * kv_stride;
      const T* kp = (key[u] >= new_from ? knb : kbase) + ro + sub * VW;
      const T* vp = (key[u] >= new_from ? vnb : vbase) + ro + sub * VW;
      kr[u] = ok ? __ldg(reinterpret_cast<const uint4*>(kp)) : make_uint4(0, 0, 0, 0);
      vr[u] = ok ? __ldg(reinterpret_cast<const uint4*>(vp)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (n0 + u * kStep >= ke) break;  // the block's range ends here (uniform: no shuffle is skipped by half a warp)
      float kf[VW], vf[VW], s[RB], mx[RB];
      Unpack(kr[u], kf, static_cast<const T*>(nullptr));
#pragma unroll
      for (int i = 0; i < RB; ++i) {
        s[i] = 0.f;
#pragma unroll
        for (int e = 0; e < VW; ++e) s[i] = fmaf(qf[i][e], kf[e], s[i]);
      }
      // The key's score: its L lanes summed (a butterfly: every lane of the group gets the same sum).
#pragma unroll
      for (int o = L / 2; o > 0; o >>= 1) {
#pragma unroll
        for (int i = 0; i < RB; ++i) s[i] += __shfl_xor_sync(0xffffffffu, s[i], o);
      }
      const int j = key[u];
#pragma unroll
      for (int i = 0; i < RB; ++i) mx[i] = s[i] = (j < ke && j < lim[i] && j >= lo[i]) ? s[i] : -INFINITY;
      // The step's max over the warp's lane groups: m stays warp-uniform.
#pragma unroll
      for (int o = L; o < 32; o <<= 1) {
#pragma unroll
        for (int i = 0; i < RB; ++i) mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], o));
      }
      Unpack(vr[u], vf, static_cast<const T*>(nullptr));
#pragma unroll
      for (int i = 0; i < RB; ++i) {
        const float m_new = fmaxf(m[i], mx[i]);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;
        const float alpha = exp2f(m[i] - m_use);
        const float pr = exp2f(s[i] - m_use);
        l[i] = fmaf(l[i], alpha, pr);
        m[i] = m_new;
#pragma unroll
        for (int e = 0; e < VW; ++e) acc[i][e] = fmaf(pr, vf[e], acc[i][e] * alpha);
      }
    }
  }
  // The lane groups share m: their sums and accumulators add.
#pragma unroll
  for (int o = L; o < 32; o <<= 1) {
#pragma unroll
    for (int i = 0; i < RB; ++i) {
      l[i] += __shfl_xor_sync(0xffffffffu, l[i], o);
#pragma unroll
      for (int e = 0; e < VW; ++e) acc[i][e] += __shfl_xor_sync(0xffffffffu, acc[i][e], o);
    }
  }
  if (grp == 0) {
    float* mw = sMerge + warp * RB * (D + 2);
#pragma unroll
    for (int i = 0; i < RB; ++i) {
      if (sub == 0) {
        mw[i * (D + 2)] = m[i];
        mw[i * (D + 2) + 1] = l[i];
      }
#pragma unroll
      for (int e = 0; e < VW; ++e) mw[i * (D + 2) + 2 + sub * VW + e] = acc[i][e];
    }
  }
  __syncthreads();
  T* o = static_cast<T*>(p.o);
  const int64_t rows = static_cast<int64_t>(p.B) * p.T * p.Hq;
  const bool partial = p.ws_acc != nullptr && nsplit > 1;
#pragma unroll
  for (int i = 0; i < RB; ++i) {
    if (r0 + i >= R) break;
    const int64_t grow = q_off + rowoff[i];
    for (int d = tid; d < D; d += kThreads) {
      const float* e = sMerge + i * (D + 2);  // warp w's partial at e + w * RB * (D + 2)
      const Merged mg = MergePartials(
          kWarps, [&](int w) { return e[w * RB * (D + 2)]; }, [&](int w) { return e[w * RB * (D + 2) + 1]; },
          [&](int w) { return e[w * RB * (D + 2) + 2 + d]; });
      if (!partial) {
        o[grow * D + d] = FromF32<T>(mg.Value());
      } else {
        const int64_t wrow = static_cast<int64_t>(split) * rows + grow;
        p.ws_acc[wrow * D + d] = mg.a;
        if (d == 0) {
          p.ws_ml[wrow * 2] = mg.m;
          p.ws_ml[wrow * 2 + 1] = mg.l;
        }
      }
    }
  }
  if (p.sem == nullptr || !partial) return;

  // Last block to arrive for this row tile merges the nsplit (<= kMaxSplits) partials, as the
  // general kernel; the (max, sum) of every (row, split) are read once into shared memory and turned
  // into weights by a warp per row, then each output sums its splits with 8 loads in flight.
  __shared__ int s_last;
  __shared__ float sW[RB][kMaxSplits], sL[RB][kMaxSplits], sInv[RB];
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
#pragma unroll
  for (int i = 0; i < RB; ++i) {
    const int64_t grow = q_off + rowoff[i];
    for (int s2 = tid; s2 < kMaxSplits; s2 += kThreads) {
      const bool ok = s2 < nsplit && r0 + i < R;
      sW[i][s2] = ok ? __ldcg(p.ws_ml + (s2 * rows + grow) * 2) : -INFINITY;
      sL[i][s2] = ok ? __ldcg(p.ws_ml + (s2 * rows + grow) * 2 + 1) : 0.f;
    }
  }
  __syncthreads();
  for (int i = warp; i < RB; i += kWarps) {
    const float mv = sW[i][lane], lv = sL[i][lane];  // kMaxSplits == 32: one split per lane
    const float M = WarpMax(mv);
    const float w = M == -INFINITY ? 0.f : exp2f(mv - M);
    const float Lsum = WarpSum(w * lv);
    sW[i][lane] = w;
    if (lane == 0) sInv[i] = Lsum > 0.f ? 1.f / Lsum : 0.f;
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < RB; ++i) {
    if (r0 + i >= R) break;
    const int64_t grow = q_off + rowoff[i];
    for (int d = tid; d < D; d += kThreads) {
      float a = 0.f;
      for (int s0 = 0; s0 < nsplit; s0 += 8) {
        float x[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) x[u] = s0 + u < nsplit ? __ldcg(p.ws_acc + ((s0 + u) * rows + grow) * D + d) : 0.f;
#pragma unroll
        for (int u = 0; u < 8; ++u) a = fmaf(s0 + u < nsplit ? sW[i][s0 + u] : 0.f, x[u], a);
      }
      o[grow * D + d] = FromF32<T>(a * sInv[i]);
    }
  }
}

template <typename T, int L>
DecodeFn PickDecodeRb(int rb) {
  switch (rb) {
    case 1: return AttnDecodeKernel<T, L, 1>;
    case 2: return AttnDecodeKernel<T, L, 2>;
    default: return AttnDecodeKernel<T, L, 4>;
  }
}
template <typename T>
DecodeFn PickDecodeL(int lanes, int rb) {
  switch (lanes) {
    case 8: return PickDecodeRb<T, 8>(rb);
    case 16: return PickDecodeRb<T, 16>(rb);
    default: return PickDecodeRb<T, 32>(rb);
  }
}

}  // namespace

DecodeFn PickDecode(DType t, int lanes, int rb) {
  return t == DType::kF16 ? PickDecodeL<__half>(lanes, rb) : PickDecodeL<__nv_bfloat16>(lanes, rb);
}

}  // namespace opfuse::kernels::attn
