// Shared pieces of the unfused library kernels (elementwise.cu, reduction.cu, view.cu,
// embedding.cu): dtype storage traits with f32 / int64 compute conversions that follow the CPU
// reference (HostTensor::get/set), a 32-bit fast divider, the launch-shape helpers, and the
// host-side dimension coalescing used by the broadcast and copy planners.
//
// Why these pieces: every kernel here is memory bound, so the code that matters is (a) moving
// 16-byte vectors when the planner has proved every pointer and stride allows it, (b) keeping
// several independent loads in flight per thread, and (c) not paying a 64-bit division per element
// for n-d indexing. FastDivmod is the Granlund–Montgomery "round-up" divider (as in CUTLASS): exact
// for dividends and divisors below 2^31, which every tensor under 2^31 elements satisfies; the
// kernels switch to plain 64-bit division (a `kWide` template flag) above that.
//
// Conversions (must equal src/ir/host_tensor.h so GPU results are bit-comparable):
//   * f16/bf16 -> f32 exact; f32 -> f16/bf16 round-to-nearest-even (NaN stays NaN);
//   * float -> int: NaN -> 0, saturating at the integer range, else truncation toward zero;
//   * int -> float: through double (i64 double-rounds exactly like the reference);
//   * int -> int: saturating; anything -> bool: != 0; bool -> anything: 0 / 1.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "opfuse/graph.h"
#include "kernels/fast_divmod.cuh"
#include "target/launch_shape.h"

namespace opfuse::kernels {

// ------------------------------------------------------------------ storage types
using BoolStorage = uint8_t;  // DType::kBool is one byte, 0 or 1 (any non-zero byte reads as true)

template <DType D> struct StorageOf;
template <> struct StorageOf<DType::kF32> { using type = float; };
template <> struct StorageOf<DType::kF16> { using type = __half; };
template <> struct StorageOf<DType::kBF16> { using type = __nv_bfloat16; };
template <> struct StorageOf<DType::kI32> { using type = int32_t; };
template <> struct StorageOf<DType::kI64> { using type = int64_t; };
template <> struct StorageOf<DType::kBool> { using type = BoolStorage; };
template <DType D> using Storage = typename StorageOf<D>::type;

template <class T> inline constexpr bool kIsFloatStorage =
    std::is_same_v<T, float> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
// The compute type of a storage type: f32 for floats, int64 for integers and bool.
template <class T> using CompOf = std::conditional_t<kIsFloatStorage<T>, float, int64_t>;

// Storage -> compute value.
template <class T> __device__ __forceinline__ float ToFloat(T v);
template <> __device__ __forceinline__ float ToFloat<float>(float v) { return v; }
template <> __device__ __forceinline__ float ToFloat<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float ToFloat<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float ToFloat<int32_t>(int32_t v) { return static_cast<float>(v); }
template <> __device__ __forceinline__ float ToFloat<int64_t>(int64_t v) {
  return static_cast<float>(static_cast<double>(v));  // double rounding, as HostTensor::get then (float)
}
template <> __device__ __forceinline__ float ToFloat<BoolStorage>(BoolStorage v) { return v ? 1.0f : 0.0f; }

template <class T> __device__ __forceinline__ int64_t ToInt(T v) {
  if constexpr (std::is_same_v<T, BoolStorage>) return v ? 1 : 0;
  else if constexpr (std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>) return static_cast<int64_t>(v);
  else return static_cast<int64_t>(ToFloat(v));  // not used: int math never sees float storage
}

// float -> integer storage with HostTensor::set's saturation (the comparison is done in double).
template <class I> __device__ __forceinline__ I SaturateFloat(float x) {
  const double d = x;
  if (d != d) return 0;
  if (d >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  if (d <= static_cast<double>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  return static_cast<I>(d);
}

// Compute value -> storage.
template <class T> __device__ __forceinline__ T FromFloat(float x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else if constexpr (std::is_same_v<T, __half>) return __float2half_rn(x);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(x);
  else if constexpr (std::is_same_v<T, BoolStorage>) return x != 0.0f ? 1 : 0;
  else return SaturateFloat<T>(x);
}
template <class T> __device__ __forceinline__ T FromInt(int64_t x) {
  if constexpr (std::is_same_v<T, int64_t>) return x;
  else if constexpr (std::is_same_v<T, int32_t>) {
    return x > INT32_MAX ? INT32_MAX : (x < INT32_MIN ? INT32_MIN : static_cast<int32_t>(x));
  } else if constexpr (std::is_same_v<T, BoolStorage>) return x != 0 ? 1 : 0;
  else return FromFloat<T>(static_cast<float>(static_cast<double>(x)));
}

// One operand element of any dtype as f32 (used outside hot loops: scalar operands).
__device__ __forceinline__ float LoadAnyAsFloat(const void* p, DType t) {
  switch (t) {
    case DType::kF32: return *static_cast<const float*>(p);
    case DType::kF16: return __half2float(*static_cast<const __half*>(p));
    case DType::kBF16: return __bfloat162float(*static_cast<const __nv_bfloat16*>(p));
    case DType::kI32: return ToFloat(*static_cast<const int32_t*>(p));
    case DType::kI64: return ToFloat(*static_cast<const int64_t*>(p));
    case DType::kBool: return *static_cast<const BoolStorage*>(p) ? 1.0f : 0.0f;
  }
  return 0.0f;
}
__device__ __forceinline__ int64_t LoadAnyAsInt(const void* p, DType t) {
  switch (t) {
    case DType::kI32: return *static_cast<const int32_t*>(p);
    case DType::kI64: return *static_cast<const int64_t*>(p);
    case DType::kBool: return *static_cast<const BoolStorage*>(p) ? 1 : 0;
    default: return static_cast<int64_t>(LoadAnyAsFloat(p, t));
  }
}

// Storage <-> compute type of the same slot.
template <class T> __device__ __forceinline__ CompOf<T> ToComp(T v) {
  if constexpr (kIsFloatStorage<T>) return ToFloat(v);
  else return ToInt(v);
}
template <class T> __device__ __forceinline__ T FromComp(CompOf<T> v) {
  if constexpr (kIsFloatStorage<T>) return FromFloat<T>(v);
  else return FromInt<T>(v);
}
// A scalar operand of dtype `t` read once as the compute type C (float or int64).
template <class C> __device__ __forceinline__ C LoadScalarAs(const void* p, DType t) {
  if constexpr (std::is_same_v<C, float>) return LoadAnyAsFloat(p, t);
  else return LoadAnyAsInt(p, t);
}

// VEC consecutive elements moved as one access (VEC * sizeof(T) is 1..16 bytes, a power of two).
template <class T, int VEC>
struct alignas(sizeof(T) * VEC) VecOf {
  T v[VEC];
};


// ------------------------------------------------------------------ launch shapes
inline constexpr int kMaxRank = 8;  // n-d indexing limit (after coalescing)

// Grid for a grid-stride loop over `work` items of `per_block` items each: target::WaveGrid.
inline unsigned GridFor(int64_t work, int64_t per_block, int sm_count, int blocks_per_sm = 8) {
  return static_cast<unsigned>(target::WaveGrid(work, per_block, sm_count, blocks_per_sm));
}

inline bool Aligned(const void* p, int64_t bytes) { return bytes <= 1 || reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// ------------------------------------------------------------------ dimension coalescing
// An output shape with the strides (in elements) of several operands over it. Coalesce() drops
// size-1 dims and merges neighbours d, d+1 whenever stride[d] == stride[d+1] * shape[d+1] for every
// operand, so [R, C] op [C] stays 2-d, same-shape operands become 1-d, and a permutation's
// adjacent runs collapse. Dims are outermost first.
struct StridedShape {
  std::vector<int64_t> shape;
  std::vector<std::vector<int64_t>> strides;  // [operand][dim]

  void Coalesce() {
    std::vector<int64_t> ns;
    std::vector<std::vector<int64_t>> nst(strides.size());
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == 1) continue;
      bool merge = !ns.empty();
      for (size_t k = 0; merge && k < strides.size(); ++k)
        if (nst[k].back() != strides[k][d] * shape[d]) merge = false;
      if (merge) {
        ns.back() *= shape[d];
        for (size_t k = 0; k < strides.size(); ++k) nst[k].back() = strides[k][d];
      } else {
        ns.push_back(shape[d]);
        for (size_t k = 0; k < strides.size(); ++k) nst[k].push_back(strides[k][d]);
      }
    }
    shape = std::move(ns);
    strides = std::move(nst);
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// Row-major strides of a contiguous shape.
inline std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

}  // namespace opfuse::kernels
