// state_companions: scratch probe (dev/, session 14, issue 4). Session 13 found that a 134 MB copy
// reads ~1 µs (H200) to 3 µs (H100) faster while torch.compile's Triton rms-norm kernel
// (triton_red_..., 16 warps, two passes over each row: pass 1 loads x with eviction_policy=
// 'evict_last', pass 2 re-loads it 'evict_first') runs in the same timing rounds; a Triton pointwise
// kernel, eager kernels and opfuse's kernels do not do it. Which GPU state is it? These kernels, run
// as kernel_ab companions beside copy_v1, split the Triton kernel into its parts:
//   read_el      reads N bf16 of x with an L2::evict_last policy (the lines it leaves tagged)
//   read_ef      the same with L2::evict_first
//   read_plain   the same with plain loads
//   demote       applypriority.L2::evict_normal over N bf16 of x (un-tags what read_el tagged)
//   rms2_hint    Triton-shaped two-pass rms_norm over 2048-wide rows, 512 threads, x evict_last then
//                evict_first, w evict_last (what Inductor emits)
//   rms2_plain   the same without hints
//   rms2_smem    rms2_plain with 8 KiB of dynamic shared memory touched (Triton's layout conversion)
// Kernel parameters are kernel_ab's ARGS: x (bf16 R x C), w (bf16 C), y (bf16 R x C), N (int32 R x C).
// Build: nvcc -cubin -arch=sm_90 -O3 dev/kernel_ab/state_companions.cu -o build/kab/state.cubin
#include <cstdint>

__device__ __forceinline__ unsigned long long Policy(int kind) {
  unsigned long long p = 0;
  if (kind == 1) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  if (kind == 2) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

__device__ __forceinline__ uint4 Load(const uint4* p, int kind, unsigned long long pol) {
  uint4 v;
  if (kind == 0) {
    v = *p;
  } else {
    asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(pol));
  }
  return v;
}

template <int kKind>
__device__ __forceinline__ void ReadAll(const uint4* x, int n, uint4* sink) {
  const unsigned long long pol = Policy(kKind);
  unsigned acc = 0;
  const int nv = n / 8, stride = gridDim.x * blockDim.x;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += stride) {
    const uint4 v = Load(x + i, kKind, pol);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) sink[0] = make_uint4(acc, 0, 0, 0);  // keeps the loads; practically never
}

extern "C" __global__ void __launch_bounds__(256) read_el(const uint4* x, uint4* y, int n) { ReadAll<1>(x, n, y); }
extern "C" __global__ void __launch_bounds__(256) read_ef(const uint4* x, uint4* y, int n) { ReadAll<2>(x, n, y); }
extern "C" __global__ void __launch_bounds__(256) read_plain(const uint4* x, uint4* y, int n) { ReadAll<0>(x, n, y); }

extern "C" __global__ void __launch_bounds__(256) demote(const uint4* x, int n) {
  const long long lines = (long long)n * 2 / 128, stride = (long long)gridDim.x * blockDim.x;
  const char* base = reinterpret_cast<const char*>(x);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < lines; i += stride)
    asm volatile("applypriority.global.L2::evict_normal [%0], 128;" ::"l"(base + i * 128));
}

__device__ __forceinline__ float Lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float Hi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }
__device__ __forceinline__ unsigned Pack(float a, float b) {
  unsigned short ha, hb;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(ha) : "f"(a));
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(hb) : "f"(b));
  return (unsigned)ha | ((unsigned)hb << 16);
}

// One 2048-wide row per block of 512 threads, 4 bf16 (8 bytes) per thread per pass, as Triton's
// layout for R0_BLOCK 2048 / 16 warps. kHints: Inductor's eviction policies. kSmem: bounce the row's
// squares through 8 KiB of dynamic shared memory (Triton's convert_layout) before reducing.
template <bool kHints, bool kSmem>
__device__ __forceinline__ void Rms2(const uint2* __restrict__ x, const uint2* __restrict__ w, uint2* __restrict__ y) {
  extern __shared__ float dyn[];
  __shared__ float part[16];
  const unsigned long long el = kHints ? Policy(1) : 0, ef = kHints ? Policy(2) : 0;
  const uint2* xr = x + (long long)blockIdx.x * 512;
  auto load = [&](const uint2* p, unsigned long long pol) {
    uint2 v;
    if (!kHints) {
      v = *p;
    } else {
      asm volatile("ld.global.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;" : "=r"(v.x), "=r"(v.y) : "l"(p), "l"(pol));
    }
    return v;
  };
  const uint2 a = load(xr + threadIdx.x, el);
  float ss = Lo(a.x) * Lo(a.x) + Hi(a.x) * Hi(a.x) + Lo(a.y) * Lo(a.y) + Hi(a.y) * Hi(a.y);
  if (kSmem) {
    dyn[threadIdx.x * 4] = ss;  // 512 x 4 floats = 8 KiB
    __syncthreads();
    ss = dyn[((threadIdx.x * 4) ^ 64) & 2047];
    __syncthreads();
  }
#pragma unroll
  for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
  __syncthreads();
  float tot = 0;
#pragma unroll
  for (int i = 0; i < 16; ++i) tot += part[i];
  const float inv = rsqrtf(tot / 2048.0f + 1e-6f);
  const uint2 b = load(xr + threadIdx.x, ef), g = load(w + threadIdx.x, el);
  y[(long long)blockIdx.x * 512 + threadIdx.x] = make_uint2(Pack(Lo(b.x) * inv * Lo(g.x), Hi(b.x) * inv * Hi(g.x)),
                                                            Pack(Lo(b.y) * inv * Lo(g.y), Hi(b.y) * inv * Hi(g.y)));
}

extern "C" __global__ void __launch_bounds__(512) rms2_hint(const uint2* x, const uint2* w, uint2* y) { Rms2<true, false>(x, w, y); }
extern "C" __global__ void __launch_bounds__(512) rms2_plain(const uint2* x, const uint2* w, uint2* y) { Rms2<false, false>(x, w, y); }
extern "C" __global__ void __launch_bounds__(512) rms2_smem(const uint2* x, const uint2* w, uint2* y) { Rms2<false, true>(x, w, y); }
extern "C" __global__ void __launch_bounds__(512) rms2_hint_smem(const uint2* x, const uint2* w, uint2* y) { Rms2<true, true>(x, w, y); }
