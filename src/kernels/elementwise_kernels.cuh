// Elementwise kernel templates shared by the elementwise TUs (see elementwise.cu for the design):
// the scalar functors (scalar_ops.h on the device), the element functors E, the flat and general
// kernels, and the per-(op, dtype) kernel tables. The tables are split over three .cu files —
// elementwise.cu (unary, cast, where, and the planner), elementwise_arith.cu (+ - * / max min pow
// mod) and elementwise_compare.cu (comparisons) — only so that the ~700 kernel instantiations
// compile in parallel.
#pragma once
#include <algorithm>

#include "kernels/kernel_common.cuh"
#include "kernels/pdl.cuh"
#include "ops/scalar_math.h"

namespace opfuse::kernels::ew {

// ------------------------------------------------------------------ scalar functors
// One functor per op of the scalar math table (ops/scalar_math.def), calling the fz::op_<name> /
// fz::iop_<name> functions the CPU reference and the JIT call. F: f32 compute; I: int64 compute
// (present when the op accepts integer inputs); kCompare ops return bool.
#define OPFUSE_SCALAR_UNARY_F(K, name, fexpr)                               \
  struct U##K {                                                             \
    static constexpr bool kInt = false;                                     \
    __device__ __forceinline__ static float F(float x) { return fz::op_##name(x); } \
  };
#define OPFUSE_SCALAR_UNARY_FI(K, name, fexpr, iexpr)                          \
  struct U##K {                                                                \
    static constexpr bool kInt = true;                                         \
    __device__ __forceinline__ static float F(float x) { return fz::op_##name(x); }     \
    __device__ __forceinline__ static int64_t I(int64_t x) { return fz::iop_##name(x); } \
  };
#define OPFUSE_SCALAR_BINARY_F(K, name, fexpr)                                        \
  struct B##K {                                                                       \
    static constexpr bool kCompare = false;                                           \
    static constexpr bool kInt = false;                                               \
    __device__ __forceinline__ static float F(float a, float b) { return fz::op_##name(a, b); } \
  };
#define OPFUSE_SCALAR_BINARY_FI(K, name, fexpr, iexpr)                                          \
  struct B##K {                                                                                 \
    static constexpr bool kCompare = false;                                                     \
    static constexpr bool kInt = true;                                                          \
    __device__ __forceinline__ static float F(float a, float b) { return fz::op_##name(a, b); }     \
    __device__ __forceinline__ static int64_t I(int64_t a, int64_t b) { return fz::iop_##name(a, b); } \
  };
#define OPFUSE_SCALAR_COMPARE(K, name, expr)                                                  \
  struct B##K {                                                                               \
    static constexpr bool kCompare = true;                                                    \
    static constexpr bool kInt = true;                                                        \
    __device__ __forceinline__ static bool F(float a, float b) { return fz::op_##name(a, b); }    \
    __device__ __forceinline__ static bool I(int64_t a, int64_t b) { return fz::iop_##name(a, b); } \
  };
#include "ops/scalar_math.def"

// ------------------------------------------------------------------ element functors
// E: kArity operands of storage types S0..S2 (unused slots repeat S0), output storage Out, and
// Do() on the operands' compute values (CompOf<S>).
template <class F, class T>
struct UnaryE {
  static constexpr int kArity = 1;
  using S0 = T; using S1 = T; using S2 = T; using Out = T;
  __device__ __forceinline__ static Out Do(CompOf<T> a, CompOf<T>, CompOf<T>) {
    if constexpr (kIsFloatStorage<T>) return FromFloat<T>(F::F(a));
    else return FromInt<T>(F::I(a));
  }
};

template <class TI, class TO>
struct CastE {
  static constexpr int kArity = 1;
  using S0 = TI; using S1 = TI; using S2 = TI; using Out = TO;
  __device__ __forceinline__ static Out Do(CompOf<TI> a, CompOf<TI>, CompOf<TI>) {
    if constexpr (kIsFloatStorage<TI>) return FromFloat<TO>(a);
    else return FromInt<TO>(a);
  }
};

template <class F, class T>
struct BinaryE {
  static constexpr int kArity = 2;
  using S0 = T; using S1 = T; using S2 = T;
  using Out = std::conditional_t<F::kCompare, BoolStorage, T>;
  __device__ __forceinline__ static Out Do(CompOf<T> a, CompOf<T> b, CompOf<T>) {
    if constexpr (F::kCompare) {
      if constexpr (kIsFloatStorage<T>) return F::F(a, b) ? 1 : 0;
      else return F::I(a, b) ? 1 : 0;
    } else if constexpr (kIsFloatStorage<T>) {
      return FromFloat<T>(F::F(a, b));
    } else {
      return FromInt<T>(F::I(a, b));
    }
  }
};

constexpr int kUnroll = 4;  // vectors in flight per thread
// Vectors per thread per step for element functor E: kUnroll, but 1 for floored mod and pow, whose
// f32 math is a long inlined library routine (fmodf's loop, powf), so kUnroll x VEC copies of it per
// thread bloat the kernel; at kUnroll the mod kernel for 16384 x 2048 bf16 was far slower than the
// JIT's one-vector-per-thread kernel (docs/BENCHMARKS.md has the result of this change).
template <class E> struct UnrollOf { static constexpr int value = kUnroll; };
template <class T> struct UnrollOf<BinaryE<BMod, T>> { static constexpr int value = 1; };
template <class T> struct UnrollOf<BinaryE<BPow, T>> { static constexpr int value = 1; };

template <class T>
struct WhereE {
  static constexpr int kArity = 3;
  using S0 = BoolStorage; using S1 = T; using S2 = T; using Out = T;
  __device__ __forceinline__ static Out Do(int64_t c, CompOf<T> a, CompOf<T> b) { return FromComp<T>(c ? a : b); }
};

// ------------------------------------------------------------------ kernels
constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 16;  // grid cap: 16 x 256 threads per SM, grid-stride beyond

struct EwParams {
  void* out = nullptr;
  const void* in[3] = {nullptr, nullptr, nullptr};
  DType dtype[3] = {DType::kF32, DType::kF32, DType::kF32};  // of each operand (read for scalars)
  uint8_t scalar[3] = {0, 0, 0};        // one element: preloaded once per thread
  uint8_t inner_bcast[3] = {0, 0, 0};   // general form: stride 0 along the innermost dim
  int64_t n = 0;                        // output elements
  // General form (dims outermost first; the innermost in units of VEC elements).
  int rank = 1;
  int64_t shape[kMaxRank] = {};
  FastDivmod div[kMaxRank];
  int64_t stride[3][kMaxRank] = {};     // element strides of each operand (0: broadcast)
};

template <class E, int K>
using SlotT = std::conditional_t<K == 0, typename E::S0, std::conditional_t<K == 1, typename E::S1, typename E::S2>>;

template <class E>
struct Scalars {
  CompOf<typename E::S0> s0{};
  CompOf<typename E::S1> s1{};
  CompOf<typename E::S2> s2{};
  __device__ __forceinline__ explicit Scalars(const EwParams& p) {
    if (p.scalar[0]) s0 = LoadScalarAs<CompOf<typename E::S0>>(p.in[0], p.dtype[0]);
    if constexpr (E::kArity > 1) if (p.scalar[1]) s1 = LoadScalarAs<CompOf<typename E::S1>>(p.in[1], p.dtype[1]);
    if constexpr (E::kArity > 2) if (p.scalar[2]) s2 = LoadScalarAs<CompOf<typename E::S2>>(p.in[2], p.dtype[2]);
  }
};

// Operand loads are unconditional: a scalar operand (preloaded) reads a 16-byte dummy in device
// memory instead of its buffer, and in the inner-broadcast variant every operand does both a vector
// load and an element load, one of them from the dummy. Branching around loads on the (uniform)
// operand kinds measured much slower: loads in separate basic blocks are not batched.
namespace {
__device__ __align__(16) unsigned char g_dummy[16];  // one per TU
}  // namespace

template <class S>
__device__ __forceinline__ const S* Dummy() { return reinterpret_cast<const S*>(g_dummy); }

// Where operand K's loads go: vector loads at vec + off * vm, element loads at elem + off * em.
template <class S>
struct Src {
  const S* vec;
  const S* elem;
  int64_t vm, em;
};
template <class E, int K, bool kIB>
__device__ __forceinline__ Src<SlotT<E, K>> MakeSrc(const EwParams& p) {
  using S = SlotT<E, K>;
  if constexpr (K >= E::kArity) {
    return {Dummy<S>(), Dummy<S>(), 0, 0};
  } else {
    // Scalars never advance (the dummy), broadcast operands only through their element loads.
    const bool scalar = p.scalar[K] != 0;
    const S* base = scalar ? Dummy<S>() : static_cast<const S*>(p.in[K]);
    const bool ib = kIB && !scalar && p.inner_bcast[K];
    return {ib ? Dummy<S>() : base, ib ? base : Dummy<S>(), (ib || scalar) ? 0 : 1, ib ? 1 : 0};
  }
}

template <class S, int VEC>
__device__ __forceinline__ VecOf<S, VEC> LoadVec(const S* p) { return *reinterpret_cast<const VecOf<S, VEC>*>(p); }

// Applies E to VEC elements: operand k is its preloaded scalar, its broadcast element (kIB and the
// operand is broadcast along the innermost dim), or vector element j — chosen by selects.
template <class E, int VEC, bool kIB>
__device__ __forceinline__ VecOf<typename E::Out, VEC> ApplyVec(
    const EwParams& p, const Scalars<E>& sc, const VecOf<typename E::S0, VEC>& a, const VecOf<typename E::S1, VEC>& b,
    const VecOf<typename E::S2, VEC>& c, typename E::S0 ea, typename E::S1 eb, typename E::S2 ec) {
  VecOf<typename E::Out, VEC> o;
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    auto x0 = ToComp(kIB && p.inner_bcast[0] ? ea : a.v[j]);
    x0 = p.scalar[0] ? sc.s0 : x0;
    CompOf<typename E::S1> x1{};
    CompOf<typename E::S2> x2{};
    if constexpr (E::kArity > 1) {
      x1 = ToComp(kIB && p.inner_bcast[1] ? eb : b.v[j]);
      x1 = p.scalar[1] ? sc.s1 : x1;
    }
    if constexpr (E::kArity > 2) {
      x2 = ToComp(kIB && p.inner_bcast[2] ? ec : c.v[j]);
      x2 = p.scalar[2] ? sc.s2 : x2;
    }
    o.v[j] = E::Do(x0, x1, x2);
  }
  return o;
}

// Flat form: every operand is either contiguous over the whole output or a scalar.
template <class E, int VEC>
__global__ void __launch_bounds__(kThreads) EwFlat(EwParams p) {
  PdlEnter();  // launched with PDL (elementwise.cu): nothing is touched before the wait
  using Out = typename E::Out;
  using S0 = typename E::S0;
  using S1 = typename E::S1;
  using S2 = typename E::S2;
  const Scalars<E> sc(p);
  const Src<S0> s0 = MakeSrc<E, 0, false>(p);
  const Src<S1> s1 = MakeSrc<E, 1, false>(p);
  const Src<S2> s2 = MakeSrc<E, 2, false>(p);
  const int64_t nvec = p.n / VEC;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  Out* out = static_cast<Out*>(p.out);
  constexpr int U = UnrollOf<E>::value;
  for (int64_t base = tid; base < nvec; base += step * U) {
    VecOf<S0, VEC> a[U];
    VecOf<S1, VEC> b[U];
    VecOf<S2, VEC> c[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t v = base + u * step, e = v * VEC;
      if (v < nvec) {
        a[u] = LoadVec<S0, VEC>(s0.vec + e * s0.vm);
        if constexpr (E::kArity > 1) b[u] = LoadVec<S1, VEC>(s1.vec + e * s1.vm);
        if constexpr (E::kArity > 2) c[u] = LoadVec<S2, VEC>(s2.vec + e * s2.vm);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t v = base + u * step, e = v * VEC;
      if (v < nvec)
        *reinterpret_cast<VecOf<Out, VEC>*>(out + e) = ApplyVec<E, VEC, false>(p, sc, a[u], b[u], c[u], {}, {}, {});
    }
  }
  if constexpr (VEC > 1) {  // the numel % VEC tail, one element per thread
    for (int64_t i = nvec * VEC + tid; i < p.n; i += step) {
      const VecOf<S0, 1> a = LoadVec<S0, 1>(s0.vec + i * s0.vm);
      VecOf<S1, 1> b{};
      VecOf<S2, 1> c{};
      if constexpr (E::kArity > 1) b = LoadVec<S1, 1>(s1.vec + i * s1.vm);
      if constexpr (E::kArity > 2) c = LoadVec<S2, 1>(s2.vec + i * s2.vm);
      out[i] = ApplyVec<E, 1, false>(p, sc, a, b, c, {}, {}, {}).v[0];
    }
  }
}

// Offsets of the operands of unit `v` (VEC elements) from its n-d coordinates.
template <bool kWide>
__device__ __forceinline__ void Offsets(const EwParams& p, int64_t v, int arity, int64_t off[3]) {
  off[0] = off[1] = off[2] = 0;
  if constexpr (kWide) {
    uint64_t idx = static_cast<uint64_t>(v);
#pragma unroll
    for (int d = kMaxRank - 1; d >= 0; --d) {
      if (d >= p.rank) continue;
      uint64_t q = d == 0 ? 0 : idx / static_cast<uint64_t>(p.shape[d]);
      const int64_t coord = static_cast<int64_t>(idx - q * static_cast<uint64_t>(p.shape[d]));
      for (int k = 0; k < arity; ++k) off[k] += coord * p.stride[k][d];
      idx = q;
    }
  } else {
    uint32_t idx = static_cast<uint32_t>(v);
#pragma unroll
    for (int d = kMaxRank - 1; d >= 0; --d) {
      if (d >= p.rank) continue;
      uint32_t q = 0, coord = idx;
      if (d > 0) p.div[d].DivMod(idx, q, coord);
      for (int k = 0; k < arity; ++k) off[k] += static_cast<int64_t>(coord) * p.stride[k][d];
      idx = q;
    }
  }
}

// General form: n-d broadcast, coordinates per vector. kIB: some operand is broadcast along the
// innermost dim (one element per vector); only meaningful with VEC > 1.
template <class E, int VEC, bool kIB, bool kWide>
__global__ void __launch_bounds__(kThreads) EwGeneral(EwParams p) {
  PdlEnter();  // launched with PDL (elementwise.cu): nothing is touched before the wait
  using Out = typename E::Out;
  using S0 = typename E::S0;
  using S1 = typename E::S1;
  using S2 = typename E::S2;
  const Scalars<E> sc(p);
  const Src<S0> s0 = MakeSrc<E, 0, kIB>(p);
  const Src<S1> s1 = MakeSrc<E, 1, kIB>(p);
  const Src<S2> s2 = MakeSrc<E, 2, kIB>(p);
  const int64_t nvec = p.n / VEC;  // the planner guarantees VEC divides the innermost dim
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  Out* out = static_cast<Out*>(p.out);
  constexpr int U = UnrollOf<E>::value;
  for (int64_t base = tid; base < nvec; base += step * U) {
    VecOf<S0, VEC> a[U];
    VecOf<S1, VEC> b[U];
    VecOf<S2, VEC> c[U];
    S0 ea[U];
    S1 eb[U];
    S2 ec[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t v = base + u * step;
      if (v < nvec) {
        int64_t off[3];
        Offsets<kWide>(p, v, E::kArity, off);
        a[u] = LoadVec<S0, VEC>(s0.vec + off[0] * s0.vm);
        if constexpr (kIB) ea[u] = s0.elem[off[0] * s0.em];
        if constexpr (E::kArity > 1) {
          b[u] = LoadVec<S1, VEC>(s1.vec + off[1] * s1.vm);
          if constexpr (kIB) eb[u] = s1.elem[off[1] * s1.em];
        }
        if constexpr (E::kArity > 2) {
          c[u] = LoadVec<S2, VEC>(s2.vec + off[2] * s2.vm);
          if constexpr (kIB) ec[u] = s2.elem[off[2] * s2.em];
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t v = base + u * step;
      if (v < nvec) {
        if constexpr (kIB)
          *reinterpret_cast<VecOf<Out, VEC>*>(out + v * VEC) = ApplyVec<E, VEC, true>(p, sc, a[u], b[u], c[u], ea[u], eb[u], ec[u]);
        else
          *reinterpret_cast<VecOf<Out, VEC>*>(out + v * VEC) = ApplyVec<E, VEC, false>(p, sc, a[u], b[u], c[u], {}, {}, {});
      }
    }
  }
}

// ------------------------------------------------------------------ dispatch tables
using EwKernel = void (*)(EwParams);
struct EwKernels {
  EwKernel flat_vec = nullptr, flat_scalar = nullptr;
  EwKernel general_vec = nullptr, general_vec_ib = nullptr, general_scalar = nullptr, general_wide = nullptr;
  int vec = 1;
  int size[3] = {0, 0, 0};  // storage bytes of each slot
  int out_size = 0;
  bool ok() const { return flat_scalar != nullptr; }
};

template <class E>
EwKernels Make(bool general) {
  constexpr int kMaxSize = std::max({sizeof(typename E::S0), E::kArity > 1 ? sizeof(typename E::S1) : 1,
                                     E::kArity > 2 ? sizeof(typename E::S2) : 1, sizeof(typename E::Out)});
  constexpr int V = 16 / kMaxSize;
  EwKernels k;
  k.vec = V;
  k.flat_vec = EwFlat<E, V>;
  k.flat_scalar = EwFlat<E, 1>;
  if (general) {
    k.general_vec = EwGeneral<E, V, false, false>;
    k.general_vec_ib = EwGeneral<E, V, true, false>;
    k.general_scalar = EwGeneral<E, 1, false, false>;
    k.general_wide = EwGeneral<E, 1, false, true>;
  }
  k.size[0] = sizeof(typename E::S0);
  k.size[1] = sizeof(typename E::S1);
  k.size[2] = sizeof(typename E::S2);
  k.out_size = sizeof(typename E::Out);
  return k;
}

// Kernel tables (an empty EwKernels when the op has no kernel for the dtype).
EwKernels UnaryKernels(OpKind op, DType t);
EwKernels CastKernels(DType from, DType to);
EwKernels ArithKernels(OpKind op, DType t);    // elementwise_arith.cu
EwKernels CompareKernels(OpKind op, DType t);  // elementwise_compare.cu
EwKernels WhereKernels(DType t);

}  // namespace opfuse::kernels::ew
