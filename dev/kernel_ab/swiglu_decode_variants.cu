// swiglu decode variants for dev/kernel_ab/peer_ab.py --graph (session 11, issue 4): 4 elements (8 bytes
// of each input) per thread, the grid covering n / 4 vectors — torch.compile's shape at 8 x 5632 (88
// blocks of 128) — with different load flavours and launch bounds. Arguments (g, u, y, n), n = rows x
// cols, n % 4 == 0. Build: bash dev/kernel_ab/build_variant.sh dev/kernel_ab/swiglu_decode_variants.cu OUT.cubin
//   q4_lb256   plain 8-byte loads, __launch_bounds__(256) (the emitted decode function's bound)
//   q4_lb128   the same, __launch_bounds__(128) (Triton's maxntid for 4 warps)
//   q4_nc      ld.global.nc.L1::no_allocate loads
//   q4_ef      loads with an L2 evict-first policy (fz_pack::load_ef)
//   q4_cs      plain loads, st.global.cs stores (diagnostic: the next op reads y)
//   q4_ld      ld.global (not the read-only .nc path the compiler picks for const __restrict__ pointers)
//   q4_ld_ng   q4_ld without the bounds check (the grid covers n / 4 exactly; Triton drops its mask so)
//   q4_ng      the compiler's loads, no bounds check
//   q4_l2p     ld.global.L2::256B loads (L2 prefetches the 256-byte sector pair), no bounds check (session 12)
//   empty_k    does nothing: the CUDA-graph per-launch floor at the same grid (session 12)
template <int MODE, bool GUARD = true>
__device__ __forceinline__ void q4(const fz_bf16* __restrict__ g, const fz_bf16* __restrict__ u, fz_bf16* __restrict__ y, int n) {
  const int v = (int)blockIdx.x * blockDim.x + threadIdx.x;
  if (GUARD && v >= n / 4) return;
  const int i = v * 4;
  fz_pack<fz_bf16, 4> a, b;
  if constexpr (MODE == 5) {
    asm volatile("ld.global.L2::256B.v2.u32 {%0, %1}, [%2];" : "=r"(a.w[0]), "=r"(a.w[1]) : "l"(g + i));
    asm volatile("ld.global.L2::256B.v2.u32 {%0, %1}, [%2];" : "=r"(b.w[0]), "=r"(b.w[1]) : "l"(u + i));
  } else if constexpr (MODE == 4) {
    asm volatile("ld.global.v2.u32 {%0, %1}, [%2];" : "=r"(a.w[0]), "=r"(a.w[1]) : "l"(g + i));
    asm volatile("ld.global.v2.u32 {%0, %1}, [%2];" : "=r"(b.w[0]), "=r"(b.w[1]) : "l"(u + i));
  } else if constexpr (MODE == 1) {
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(a.w[0]), "=r"(a.w[1]) : "l"(g + i));
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(b.w[0]), "=r"(b.w[1]) : "l"(u + i));
  } else if constexpr (MODE == 2) {
    const unsigned long long pol = fz_evict_first();
    a.load_ef(g, i, pol);
    b.load_ef(u, i, pol);
  } else {
    a.load(g, i);
    b.load(u, i);
  }
  float o[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float x = a.get(j);
    o[j] = __fdividef(x, 1.0f + __expf(-x)) * b.get(j);
  }
  if constexpr (MODE == 3) {
    const unsigned w0 = fz_cvt2<fz_bf16>::pack(o[0], o[1]), w1 = fz_cvt2<fz_bf16>::pack(o[2], o[3]);
    asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" ::"l"(y + i), "r"(w0), "r"(w1) : "memory");
  } else {
    fz_store<4, fz_bf16>(y, i, o);
  }
}
extern "C" __global__ void __launch_bounds__(256) q4_lb256(const fz_bf16* __restrict__ g, const fz_bf16* __restrict__ u,
                                                           fz_bf16* __restrict__ y, int n) { q4<0>(g, u, y, n); }
extern "C" __global__ void __launch_bounds__(128) q4_lb128(const fz_bf16* __restrict__ g, const fz_bf16* __restrict__ u,
                                                           fz_bf16* __restrict__ y, int n) { q4<0>(g, u, y, n); }
extern "C" __global__ void __launch_bounds__(256) q4_nc(const fz_bf16* __restrict__ g, const fz_bf16* __restrict__ u,
                                                        fz_bf16* __restrict__ y, int n) { q4<1>(g, u, y, n); }
extern "C" __global__ void __launch_bounds__(256) q4_ef(const fz_bf16* __restrict__ g, const fz_bf16* __restrict__ u,
                                                        fz_bf16* __restrict__ y, int n) { q4<2>(g, u, y, n); }
extern "C" __global__ void __launch_bounds__(256) q4_cs(const fz_bf16* __restrict__ g, const fz_bf16* __restrict__ u,
                                                        fz_bf16* __restrict__ y, int n) { q4<3>(g, u, y, n); }
extern "C" __global__ void __launch_bounds__(256) q4_ld(const fz_bf16* __restrict__ g, const fz_bf16* __restrict__ u,
                                                        fz_bf16* __restrict__ y, int n) { q4<4>(g, u, y, n); }
extern "C" __global__ void __launch_bounds__(256) q4_ld_ng(const fz_bf16* __restrict__ g, const fz_bf16* __restrict__ u,
                                                           fz_bf16* __restrict__ y, int n) { q4<4, false>(g, u, y, n); }
extern "C" __global__ void __launch_bounds__(256) q4_ng(const fz_bf16* __restrict__ g, const fz_bf16* __restrict__ u,
                                                        fz_bf16* __restrict__ y, int n) { q4<0, false>(g, u, y, n); }
extern "C" __global__ void __launch_bounds__(256) q4_l2p(const fz_bf16* __restrict__ g, const fz_bf16* __restrict__ u,
                                                         fz_bf16* __restrict__ y, int n) { q4<5, false>(g, u, y, n); }
extern "C" __global__ void __launch_bounds__(256) empty_k(const fz_bf16* __restrict__, const fz_bf16* __restrict__,
                                                          fz_bf16* __restrict__, int) {}
