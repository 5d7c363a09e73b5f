// swiglu prefill variants for dev/kernel_ab (session 11, issue 4): is there a pointwise kernel shape
// that beats the emitted one (grid-stride loop, 64-bit indices, one 16-byte pack per input per thread,
// 256 threads) and torch.compile's Triton kernel (XBLOCK 1024, 4 warps: one 16-byte pack per input
// per thread, 128 threads) at 512 / 2048 rows × 5632 / 4096?
// Every kernel takes (g, u, y, n) with n = rows × cols (kernel_ab ARGS x,r,y,N); n % 8 == 0.
// Build: bash dev/kernel_ab/build_variant.sh dev/kernel_ab/swiglu_prefill_variants.cu OUT.cubin
//   s_i32       no loop, 32-bit indices, one pack per input per thread (grid covers n / 8)
//   s_i32_ef    s_i32 with L1 / L2 evict-first loads (fz_pack::load_ef)
//   s_x2        two packs per input per thread, a grid stride apart, all four loads issued first
//   s_x2_ef     s_x2 with evict-first loads
//   s_x4        four packs per input per thread (grid covers n / 32), loads first
//   s_cs        s_i32 with st.global.cs stores (streaming; diagnostic only: the next op reads y)

__device__ __forceinline__ float fz_silu_mul(float g, float u) { return __fdividef(g, 1.0f + __expf(-g)) * u; }

template <bool EF>
__device__ __forceinline__ void fz_swi_pack(const fz_bf16* __restrict__ g, const fz_bf16* __restrict__ u, int i,
                                            fz_pack<fz_bf16, 8>& a, fz_pack<fz_bf16, 8>& b, unsigned long long pol) {
  if constexpr (EF) { a.load_ef(g, i, pol); b.load_ef(u, i, pol); }
  else { a.load(g, i); b.load(u, i); }
}

__device__ __forceinline__ void fz_swi_out(fz_bf16* __restrict__ y, int i, const fz_pack<fz_bf16, 8>& a,
                                           const fz_pack<fz_bf16, 8>& b) {
  float o[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) o[j] = fz_silu_mul(a.get(j), b.get(j));
  fz_store<8, fz_bf16>(y, i, o);
}

template <bool EF>
__device__ __forceinline__ void s_one(const fz_bf16* __restrict__ g, const fz_bf16* __restrict__ u, fz_bf16* __restrict__ y, int n) {
  const int v = (int)blockIdx.x * blockDim.x + threadIdx.x;
  if (v >= n / 8) return;
  unsigned long long pol = 0;
  if constexpr (EF) pol = fz_evict_first();
  fz_pack<fz_bf16, 8> a, b;
  fz_swi_pack<EF>(g, u, v * 8, a, b, pol);
  fz_swi_out(y, v * 8, a, b);
}

template <int K, bool EF>
__device__ __forceinline__ void s_k(const fz_bf16* __restrict__ g, const fz_bf16* __restrict__ u, fz_bf16* __restrict__ y, int n) {
  const int nv = n / 8, stride = (int)gridDim.x * blockDim.x;
  const int v0 = (int)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned long long pol = 0;
  if constexpr (EF) pol = fz_evict_first();
  fz_pack<fz_bf16, 8> a[K], b[K];
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (v0 + k * stride < nv) fz_swi_pack<EF>(g, u, (v0 + k * stride) * 8, a[k], b[k], pol);
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (v0 + k * stride < nv) fz_swi_out(y, (v0 + k * stride) * 8, a[k], b[k]);
}

extern "C" __global__ void __launch_bounds__(256) s_i32(const fz_bf16* __restrict__ g, const fz_bf16* __restrict__ u,
                                                        fz_bf16* __restrict__ y, int n) { s_one<false>(g, u, y, n); }
extern "C" __global__ void __launch_bounds__(256) s_i32_ef(const fz_bf16* __restrict__ g, const fz_bf16* __restrict__ u,
                                                           fz_bf16* __restrict__ y, int n) { s_one<true>(g, u, y, n); }
extern "C" __global__ void __launch_bounds__(256) s_x2(const fz_bf16* __restrict__ g, const fz_bf16* __restrict__ u,
                                                       fz_bf16* __restrict__ y, int n) { s_k<2, false>(g, u, y, n); }
extern "C" __global__ void __launch_bounds__(256) s_x2_ef(const fz_bf16* __restrict__ g, const fz_bf16* __restrict__ u,
                                                          fz_bf16* __restrict__ y, int n) { s_k<2, true>(g, u, y, n); }
extern "C" __global__ void __launch_bounds__(256) s_x4(const fz_bf16* __restrict__ g, const fz_bf16* __restrict__ u,
                                                       fz_bf16* __restrict__ y, int n) { s_k<4, false>(g, u, y, n); }
extern "C" __global__ void __launch_bounds__(256) s_cs(const fz_bf16* __restrict__ g, const fz_bf16* __restrict__ u,
                                                       fz_bf16* __restrict__ y, int n) {
  const int v = (int)blockIdx.x * blockDim.x + threadIdx.x;
  if (v >= n / 8) return;
  fz_pack<fz_bf16, 8> a, b;
  a.load(g, v * 8);
  b.load(u, v * 8);
  unsigned w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) w[k] = fz_cvt2<fz_bf16>::pack(fz_silu_mul(a.get(2 * k), b.get(2 * k)), fz_silu_mul(a.get(2 * k + 1), b.get(2 * k + 1)));
  asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(y + v * 8), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory");
}
