// The tensor-core (mma.sync) flash-attention kernel; what it computes and when it runs:
// src/kernels/attention.cu (the planners) and attention.h.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "cuda/cuda_check.h"
#include "kernels/attention_device.cuh"
#include "kernels/attention_kernels.h"
#include "kernels/mma.cuh"

namespace opfuse::kernels::attn {

namespace {

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

// 2^x on the SFU, denormal results flushed to zero (softmax weights that small are zero in the sum).
__device__ __forceinline__ float Ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// One block: NW warps of WR 16-row tiles each (BM = 16 * WR * NW query rows) against 64-key K and V
// tiles, double-buffered in shared memory: tile j + 1 is issued right after the one block barrier of
// tile j, which both publishes tile j and retires tile j - 1's buffers, so a load has a whole tile of
// compute to land. Q's fragments stay in registers (staged through the second buffer pair, hence
// BM <= 128). Each K/V fragment read from shared memory feeds 2 * WR MMAs. A warp none of whose rows
// sees a key of the tile (causal, the block's last tiles) skips its MMAs but keeps the barriers.
// Row tiles: with p.fold (causal), block x takes row tiles nq - 1 - x and then x, so every block has
// the same number of key tiles and a wave of blocks ends together; otherwise causal blocks take the
// heaviest tiles first. The instances and the choice between them: MmaInstances below, ChooseMma in
// attention_plan.cc. The tile loader's trip count is a compile-time constant on purpose: a runtime
// strided loop there costs a third more instructions in the whole kernel.
template <typename T, int HD, int WR, int NW, int MINB>
__global__ void __launch_bounds__(NW * 32, MINB) AttnMmaKernel(MmaParams p) {
  constexpr int BN = kMmaKeyTile;                   // keys per tile
  constexpr int BM = 16 * WR * NW, TH = NW * 32;    // query rows / threads per block
  constexpr int LD = HD + 8;                        // padded shared row (elements): 16-byte shift per row
  constexpr int CPR = HD / 8;                       // 16-byte chunks per row
  constexpr int STAGE = 2 * BN * LD;                // one buffer pair: K then V
  static_assert(BM <= 2 * BN, "Q is staged in the second buffer pair");
  static_assert(BN * CPR % TH == 0 && BM * CPR % TH == 0, "tile loader assumes this");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* const smem = reinterpret_cast<T*>(smem_raw);
  const T* tp = nullptr;  // tag for the dtype overloads

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int h = blockIdx.y, kvh = h / p.group, b = blockIdx.z;
  const int S = p.pos ? min(p.S, max(0, __ldg(p.pos + b) + p.T)) : p.S;  // this sequence's keys
  const int off = S - p.T;
  const int64_t q_stride = static_cast<int64_t>(p.Hq) * HD, kv_stride = static_cast<int64_t>(p.Hkv) * HD;
  const int64_t q_off = static_cast<int64_t>(b) * p.T * q_stride;  // sequence b's first query row
  const T* qbase = static_cast<const T*>(p.q) + q_off + static_cast<int64_t>(h) * HD;
  const int64_t kv_off = static_cast<int64_t>(b) * p.S * kv_stride + static_cast<int64_t>(kvh) * HD;
  const T* kbase = static_cast<const T*>(p.k) + kv_off;
  const T* vbase = static_cast<const T*>(p.v) + kv_off;

  // ROWS rows from row0 of a [rows, heads, HD] tensor -> padded shared tile; rows outside
  // [first, nrows) -> 0.
  auto load_rows = [&](auto rows_c, T* dst, const T* base, int64_t stride, int row0, int nrows, int first) {
    constexpr int ROWS = decltype(rows_c)::value;
#pragma unroll
    for (int i = 0; i < ROWS * CPR / TH; ++i) {
      const int idx = tid + i * TH;
      const int r = idx / CPR, c = idx - (idx / CPR) * CPR;
      const bool ok = row0 + r < nrows && row0 + r >= first;
      const T* src = ok ? base + static_cast<int64_t>(row0 + r) * stride + c * 8 : base;
      CpAsync16(dst + r * LD + c * 8, src, ok ? 16 : 0);
    }
  };

  const int nq = (p.T + BM - 1) / BM, bx = static_cast<int>(blockIdx.x);
  const int npass = p.fold && 2 * bx + 1 < nq ? 2 : 1;
  for (int pass = 0; pass < npass; ++pass) {
    const int mt = p.fold ? (pass == 0 ? nq - 1 - bx : bx) : p.causal ? static_cast<int>(gridDim.x) - 1 - bx : bx;
    const int m0 = mt * BM;
    const int kv_end = p.causal ? min(S, max(0, m0 + BM + off)) : S;  // keys any row here sees
    const int ntiles = (kv_end + BN - 1) / BN;
    // With a window, keys below kv_begin (the first row's lower bound) are seen by no row here: the
    // tiles start at the one holding kv_begin, and its rows below kv_begin are zero-filled, never read.
    const int kv_begin = p.window > 0 && p.causal ? max(0, m0 + off + 1 - p.window) : 0;
    const int j0 = kv_begin / BN;
    const int win_lo_last = p.window > 0 && p.causal ? m0 + BM + off - p.window : INT_MIN;  // last row's bound
    const int wrow0 = m0 + warp * 16 * WR;  // this warp's first query row
    const int wlast = min(wrow0 + 16 * WR, p.T) - 1;
    auto stage = [&](int j) { return smem + ((j - j0) & 1) * STAGE; };
    // K/V tile j: this thread's chunks are rows kr0 + i * KSTEP, 16-byte column kc. A tile wholly
    // inside [kv_begin, S) (all but the first and last) is copied without per-row checks.
    auto load_kv = [&](int j) {
      constexpr int KSTEP = TH / CPR, KITERS = BN * CPR / TH;
      const int kr0 = tid / CPR, kc = tid - (tid / CPR) * CPR, n0 = j * BN;
      T* dk = stage(j) + kr0 * LD + kc * 8;
      const int64_t g0 = static_cast<int64_t>(n0 + kr0) * kv_stride + kc * 8;
      if (n0 >= kv_begin && n0 + BN <= S) {
#pragma unroll
        for (int i = 0; i < KITERS; ++i) {
          const int64_t g = g0 + static_cast<int64_t>(i) * KSTEP * kv_stride;
          CpAsync16(dk + i * KSTEP * LD, kbase + g, 16);
          CpAsync16(dk + BN * LD + i * KSTEP * LD, vbase + g, 16);
        }
      } else {
        load_rows(std::integral_constant<int, BN>{}, stage(j), kbase, kv_stride, n0, S, kv_begin);
        load_rows(std::integral_constant<int, BN>{}, stage(j) + BN * LD, vbase, kv_stride, n0, S, kv_begin);
      }
    };

    if (pass) __syncthreads();  // every warp is done with the previous row tile's buffers
    load_rows(std::integral_constant<int, BM>{}, smem + STAGE, qbase, q_stride, m0, p.T, 0);
    if (j0 < ntiles) load_kv(j0);
    CpAsyncCommit();
    CpAsyncWait<0>();
    __syncthreads();
    // Q fragments (A operand, 16 rows x HD a row tile): matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15).
    uint32_t qf[WR][HD / 16][4];
#pragma unroll
    for (int r = 0; r < WR; ++r)
#pragma unroll
      for (int kc = 0; kc < HD / 16; ++kc)
        LdMatrixX4(qf[r][kc], smem + STAGE + ((warp * WR + r) * 16 + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8);

    float oacc[WR][HD / 8][4];
    float mrow[WR][2], lrow[WR][2];  // rows g and g + 8 of each row tile
#pragma unroll
    for (int r = 0; r < WR; ++r) {
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt) oacc[r][dt][0] = oacc[r][dt][1] = oacc[r][dt][2] = oacc[r][dt][3] = 0.f;
      mrow[r][0] = mrow[r][1] = -INFINITY;
      lrow[r][0] = lrow[r][1] = 0.f;
    }

    for (int j = j0; j < ntiles; ++j) {
      const int n0 = j * BN;
      CpAsyncWait<0>();  // tile j has landed (issued a tile ago) ...
      __syncthreads();   // ... for every thread, and every warp is done with tile j - 1 (and Q's copy)
      if (j + 1 < ntiles) load_kv(j + 1);
      CpAsyncCommit();
      const bool active = wrow0 <= wlast && !(p.causal && n0 > wlast + off);  // a row here sees a key
      const T* sK = stage(j);
      const T* sV = sK + BN * LD;

      // S = Q K^T: per row tile 16 x 64, 8 n-tiles of 8 keys.
      float sacc[WR][BN / 8][4];
#pragma unroll
      for (int r = 0; r < WR; ++r)
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) sacc[r][nt][0] = sacc[r][nt][1] = sacc[r][nt][2] = sacc[r][nt][3] = 0.f;
      if (active) {
#pragma unroll
        for (int kc = 0; kc < HD / 16; ++kc) {
#pragma unroll
          for (int ntp = 0; ntp < BN / 16; ++ntp) {
            // matrices: (keys 0-7, d 0-7), (keys 0-7, d 8-15), (keys 8-15, d 0-7), (keys 8-15, d 8-15)
            uint32_t bk[4];
            LdMatrixX4(bk, sK + (ntp * 16 + ((lane >> 4) << 3) + (lane & 7)) * LD + kc * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
            for (int r = 0; r < WR; ++r) {
              Mma(sacc[r][2 * ntp], qf[r][kc], bk[0], bk[1], tp);
              Mma(sacc[r][2 * ntp + 1], qf[r][kc], bk[2], bk[3], tp);
            }
          }
        }
      }

      // Masking in its own pass, only on the tiles past S, crossing the causal diagonal of this warp's
      // first row, or (window) below the block's last row's lower bound, so the common tile's softmax
      // carries no per-element compare.
      if (active && ((n0 + BN > S) || (p.causal && n0 + BN - 1 > wrow0 + off) || n0 < win_lo_last)) {
#pragma unroll
        for (int r = 0; r < WR; ++r) {
          const int qrow = wrow0 + r * 16 + (lane >> 2);  // query row of c0/c1 (c2/c3: + 8)
          const int wlo = p.window > 0 && p.causal ? qrow + off + 1 - p.window : INT_MIN;  // its bound
#pragma unroll
          for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int key = n0 + nt * 8 + (lane & 3) * 2 + e;
              if (key >= S || (p.causal && key > qrow + off) || key < wlo) sacc[r][nt][e] = -INFINITY;
              if (key >= S || (p.causal && key > qrow + 8 + off) || key < wlo + 8) sacc[r][nt][2 + e] = -INFINITY;
            }
          }
        }
      }

      // Online softmax in the log2 domain (scale_log2 > 0, the planner's condition): the maximum is
      // taken over the raw scores, and each weight is 2^(s * scale_log2 - mu) in one FMA and one ex2.
      if (active) {
#pragma unroll
        for (int r = 0; r < WR; ++r) {
          float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
          for (int nt = 0; nt < BN / 8; ++nt) {
            mx[0] = fmaxf(mx[0], fmaxf(sacc[r][nt][0], sacc[r][nt][1]));
            mx[1] = fmaxf(mx[1], fmaxf(sacc[r][nt][2], sacc[r][nt][3]));
          }
          float mu[2], alpha[2];
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
            const float m_new = fmaxf(mrow[r][i], mx[i] * p.scale_log2);
            mu[i] = m_new == -INFINITY ? 0.f : m_new;
            alpha[i] = Ex2(mrow[r][i] - mu[i]);
            mrow[r][i] = m_new;
          }
          float rs[2] = {0.f, 0.f};
#pragma unroll
          for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              sacc[r][nt][e] = Ex2(fmaf(sacc[r][nt][e], p.scale_log2, -mu[0]));
              sacc[r][nt][2 + e] = Ex2(fmaf(sacc[r][nt][2 + e], p.scale_log2, -mu[1]));
              rs[0] += sacc[r][nt][e];
              rs[1] += sacc[r][nt][2 + e];
            }
          }
          lrow[r][0] = lrow[r][0] * alpha[0] + rs[0];  // per-thread partial sums; the quad is summed at the end
          lrow[r][1] = lrow[r][1] * alpha[1] + rs[1];
          // Once the row maxima settle, alpha is exactly 1 for the whole warp: skip the rescale
          // (multiplying by 1 changes nothing).
          if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
            for (int dt = 0; dt < HD / 8; ++dt) {
              oacc[r][dt][0] *= alpha[0];
              oacc[r][dt][1] *= alpha[0];
              oacc[r][dt][2] *= alpha[1];
              oacc[r][dt][3] *= alpha[1];
            }
          }
        }

        // O += P V: P's accumulators are the A fragments (keys 16*kc2 .. +15); V via ldmatrix.trans.
#pragma unroll
        for (int kc2 = 0; kc2 < BN / 16; ++kc2) {
          uint32_t a[WR][4];
#pragma unroll
          for (int r = 0; r < WR; ++r) {
            a[r][0] = Pack2<T>(sacc[r][2 * kc2][0], sacc[r][2 * kc2][1]);
            a[r][1] = Pack2<T>(sacc[r][2 * kc2][2], sacc[r][2 * kc2][3]);
            a[r][2] = Pack2<T>(sacc[r][2 * kc2 + 1][0], sacc[r][2 * kc2 + 1][1]);
            a[r][3] = Pack2<T>(sacc[r][2 * kc2 + 1][2], sacc[r][2 * kc2 + 1][3]);
          }
#pragma unroll
          for (int dtp = 0; dtp < HD / 16; ++dtp) {
            // matrices: (keys 0-7, d 0-7), (keys 8-15, d 0-7), (keys 0-7, d 8-15), (keys 8-15, d 8-15)
            uint32_t bv[4];
            LdMatrixX4Trans(bv, sV + (kc2 * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LD + dtp * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int r = 0; r < WR; ++r) {
              Mma(oacc[r][2 * dtp], a[r], bv[0], bv[1], tp);
              Mma(oacc[r][2 * dtp + 1], a[r], bv[2], bv[3], tp);
            }
          }
        }
      }
    }
    CpAsyncWait<0>();  // nothing is outstanding here; keeps the exit clean regardless

#pragma unroll
    for (int r = 0; r < WR; ++r) {
      float inv[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float l = lrow[r][i];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        inv[i] = l > 0.f ? 1.f / l : 0.f;
      }
      const int qrow = wrow0 + r * 16 + (lane >> 2);
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt) {
        const int col = dt * 8 + (lane & 3) * 2;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int row = qrow + 8 * i;
          if (row < p.T) {
            const uint32_t packed = Pack2<T>(oacc[r][dt][2 * i] * inv[i], oacc[r][dt][2 * i + 1] * inv[i]);
            *reinterpret_cast<uint32_t*>(static_cast<T*>(p.o) + q_off + static_cast<int64_t>(row) * q_stride +
                                         static_cast<int64_t>(h) * HD + col) = packed;
          }
        }
      }
    }
  }
}

template <typename T, int HD, int WR, int NW, int MINB>
MmaInstance Instance() {
  constexpr int BM = 16 * WR * NW;
  return {AttnMmaKernel<T, HD, WR, NW, MINB>, BM, NW * 32,
          static_cast<int>(2 * 2 * kMmaKeyTile * (HD + 8) * sizeof(T)), MINB};
}

template <typename T>
std::vector<MmaInstance> InstancesOf(int64_t hd) {
  // Largest row tile first. head_dim 64: two 16-row tiles a warp (each K/V fragment feeds four MMAs)
  // at 2 blocks a SM, or one at 3; head_dim 128 (twice the accumulators): one 16-row tile a warp,
  // 8 warps at 1 block a SM or 4 at 2.
  if (hd == 64) return {Instance<T, 64, 2, 4, 2>(), Instance<T, 64, 1, 4, 3>()};
  return {Instance<T, 128, 1, 8, 1>(), Instance<T, 128, 1, 4, 2>()};
}

}  // namespace

StatusOr<std::vector<MmaInstance>> MmaInstances(DType t, int64_t hd) {
  if ((t != DType::kBF16 && t != DType::kF16) || (hd != 64 && hd != 128))
    return Internal(fmt::format("attention: no tensor-core kernel for {} head_dim {}", DTypeName(t), hd));
  std::vector<MmaInstance> v = t == DType::kBF16 ? InstancesOf<__nv_bfloat16>(hd) : InstancesOf<__half>(hd);
  // Without a device (host-only planning: explain, the planner tests) the runtime answers "no device"
  // and the instances keep their __launch_bounds__ minimum as the occupancy.
  auto no_device = [](cudaError_t e) { return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver; };
  for (MmaInstance& k : v) {
    const void* fn = reinterpret_cast<const void*>(k.fn);
    cudaError_t e = cudaSuccess;
    if (k.smem_bytes > 48 * 1024) e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, k.smem_bytes);
    int occ = 0;
    if (e == cudaSuccess)
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k.fn, k.threads, static_cast<size_t>(k.smem_bytes));
    if (no_device(e)) {
      cudaGetLastError();
      continue;
    }
    OPFUSE_RETURN_IF_ERROR(cuda::CudaStatus(e, "attention: tensor-core kernel shared memory / occupancy"));
    if (occ < 1) return Internal(fmt::format("attention: a {}-row tensor-core block does not fit on this device", k.rows));
    k.blocks_per_sm = occ;
  }
  return v;
}

}  // namespace opfuse::kernels::attn
