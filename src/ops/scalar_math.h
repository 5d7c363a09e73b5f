// The scalar math of the elementwise ops, compiled three ways from this one file: by the host
// compiler (the CPU reference and the kernel-IR interpreter, through scalar_ops.h), by nvcc (the
// library kernels in src/kernels/), and by NVRTC (the JIT preamble embeds this file's text, with
// scalar_math.def inlined). The table of ops is scalar_math.def; this file defines the primitives
// its expressions use and expands the table into fz::op_<name> (f32) and fz::iop_<name> (int64).
//
// The deliberate differences between the host and the device are all here, one primitive each:
//   exp2     host std::exp2; device ex2.approx.ftz (one MUFU.EX2: ~2 ulp, results below 2^-126
//            flush to 0).
//   exp      host std::exp; device exp2(x * log2 e): one FMUL + MUFU.EX2, 2 + 1.2|x| ulp, results
//            below 2^-126 flush to 0 (__expf without the ftz fix-up). Softmax and the GLUs evaluate
//            one per element; the accurate expf is several times the instructions, enough to make
//            a 16-bit row compute bound.
//   fdiv     the divide of sigmoid and silu: host IEEE a / b; device __fdividef (~2 ulp; a finite
//            a over an infinite b gives 0, so silu(-inf-ish) = x * 0 = 0). An IEEE divide is about
//            ten instructions per element.
//   rsqrt    host 1 / sqrt (two correctly rounded steps); device rsqrtf (MUFU.RSQ, ~2 ulp), as
//            torch's rsqrt: the IEEE divide and square root add registers to every norm kernel
//            (a JIT layer_norm row fell below its residency target with them).
//   erf1p    1 + erf(z), gelu's: host std::erfc(-z), which keeps the relative accuracy of the far
//            negative tail (1 + erf cancels for z << 0); device erfc by Numerical Recipes' erfcc
//            (a Chebyshev fit, fractional error below 1.2e-7 for every z): erfc(a) = t exp(-a^2 +
//            P(t)), t = 1 / (1 + a / 2), a = |z|, P of degree 9, so 1 + erf(z) = erfc(a) for z < 0
//            and 2 - erfc(a) otherwise — branch-free, one MUFU.RCP and one MUFU.EX2. torch's and
//            Triton's 1 + erff(z) evaluates two polynomial branches that diverge within a warp of
//            signed inputs, which made geglu slower than swiglu over the same bytes (dev/geglu_erf;
//            docs/BENCHMARKS.md, "geglu's erf"). Host and device differ by at most 4e-7 absolute
//            (dev/geglu_erf checks fz::erf1p on the device over z in [-12, 12]), and the device
//            keeps the relative accuracy of the negative tail (within 1e-5 down to results near
//            2^-126, where ex2.approx.ftz flushes; 1 + erff(z) is 0 below z = -3.9).
// Every other primitive is the correctly rounded (or IEEE) operation on both sides; NVRTC and nvcc
// both compile with --fmad=true and without fast math, so library and JIT kernels evaluating the
// same op agree bit for bit (tests/gpu/scalar_math_agree_test.cc).
#pragma once

#if defined(__CUDACC_RTC__)
#define FZ_FN __device__ __forceinline__
#elif defined(__CUDACC__)
#include <cmath>
#define FZ_FN __host__ __device__ __forceinline__
#else
#include <cmath>
#define FZ_FN inline
#endif

namespace fz {

// ---- primitives (float)
#if defined(__CUDA_ARCH__)
#define FZ_PRIM(name, dev, host) FZ_FN float name(float x) { return dev; }
#define FZ_PRIM2(name, dev, host) FZ_FN float name(float a, float b) { return dev; }
#else
#define FZ_PRIM(name, dev, host) FZ_FN float name(float x) { return host; }
#define FZ_PRIM2(name, dev, host) FZ_FN float name(float a, float b) { return host; }
#endif
//          name   device                        host
FZ_PRIM(fabs,  fabsf(x),                     std::fabs(x))
FZ_PRIM(log,   logf(x),                      std::log(x))
FZ_PRIM(log2,  log2f(x),                     std::log2(x))
FZ_PRIM(sqrt,  sqrtf(x),                     std::sqrt(x))
FZ_PRIM(rsqrt, rsqrtf(x),                    1.0f / std::sqrt(x))
FZ_PRIM(sin,   sinf(x),                      std::sin(x))
FZ_PRIM(cos,   cosf(x),                      std::cos(x))
FZ_PRIM(tanh,  tanhf(x),                     std::tanh(x))
FZ_PRIM2(fdiv, __fdividef(a, b),             a / b)
FZ_PRIM2(fmax, fmaxf(a, b),                  std::fmax(a, b))
FZ_PRIM2(fmin, fminf(a, b),                  std::fmin(a, b))
FZ_PRIM2(pow,  powf(a, b),                   std::pow(a, b))
FZ_PRIM2(fmod, fmodf(a, b),                  std::fmod(a, b))
#undef FZ_PRIM
#undef FZ_PRIM2

FZ_FN float exp2(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return std::exp2(x);
#endif
}
FZ_FN float exp(float x) {
#if defined(__CUDA_ARCH__)
  return exp2(x * 1.4426950408889634f);
#else
  return std::exp(x);
#endif
}

// 1 + erf(z) (the header's note): Numerical Recipes' erfcc on the device, std::erfc(-z) on the host.
FZ_FN float erf1p(float z) {
#if defined(__CUDA_ARCH__)
  const float a = fabsf(z);
  const float t = __fdividef(1.0f, fmaf(0.5f, a, 1.0f));
  float p = 0.17087277f;
  p = fmaf(p, t, -0.82215223f);
  p = fmaf(p, t, 1.48851587f);
  p = fmaf(p, t, -1.13520398f);
  p = fmaf(p, t, 0.27886807f);
  p = fmaf(p, t, -0.18628806f);
  p = fmaf(p, t, 0.09678418f);
  p = fmaf(p, t, 0.37409196f);
  p = fmaf(p, t, 1.00002368f);
  p = fmaf(p, t, -1.26551223f);
  const float e = t * exp2(fmaf(-a, a, p) * 1.4426950408889634f);
  return z < 0.0f ? e : 2.0f - e;
#else
  return std::erfc(-z);
#endif
}

// Floored modulo, like Python's %: the result has the sign of b (integer b == 0 gives 0).
FZ_FN float fmod_floor(float a, float b) {
  const float r = fmod(a, b);
  return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}
FZ_FN long long imod_floor(long long a, long long b) {
  if (b == 0) return 0;
  const long long r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

// ---- the table, expanded
#define OPFUSE_SCALAR_UNARY_F(K, name, fexpr) FZ_FN float op_##name(float x) { return fexpr; }
#define OPFUSE_SCALAR_UNARY_FI(K, name, fexpr, iexpr) \
  FZ_FN float op_##name(float x) { return fexpr; }    \
  FZ_FN long long iop_##name(long long x) { return iexpr; }
#define OPFUSE_SCALAR_BINARY_F(K, name, fexpr) FZ_FN float op_##name(float a, float b) { return fexpr; }
#define OPFUSE_SCALAR_BINARY_FI(K, name, fexpr, iexpr)           \
  FZ_FN float op_##name(float a, float b) { return fexpr; }      \
  FZ_FN long long iop_##name(long long a, long long b) { return iexpr; }
#define OPFUSE_SCALAR_COMPARE(K, name, expr)                \
  FZ_FN bool op_##name(float a, float b) { return expr; }    \
  FZ_FN bool iop_##name(long long a, long long b) { return expr; }
#include "ops/scalar_math.def"

}  // namespace fz
