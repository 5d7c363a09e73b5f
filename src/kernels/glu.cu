// Fused gated-linear-unit library kernels: swiglu y = silu(gate) * up, geglu y = gelu(gate) * up
// (approximate="none": the erf form; "tanh": the tanh form).
//
// Design: a pointwise kernel over gate/up/y (same shape, contiguous). Each thread handles U
// 16-byte packs per grid-stride step (U = 1 by default, measured; 2 and 4 for sweeps), all loads
// issued before the first use, each pack index strided by the whole grid so every warp access is
// coalesced; the grid covers the tensor in one step. Large tensors (prefill) use 256-thread
// blocks; small ones (decode) 64-thread blocks, so even one row of 5632 bf16 spreads over 11 SMs. Elements after the last full pack (numel not a
// multiple of the pack) are done one per thread by the same launch. Unaligned pointers take the
// 1-element path. The activations are the scalar math table's silu, gelu and
// gelu_tanh (fz::op_*, src/ops/scalar_math.h), the functions the JIT and the elementwise kernels call. Launched with PDL,
// PdlEnter first (pdl.cuh), as the other library kernels of a decode step.
#include "kernels/fused_common.cuh"
#include "kernels/pdl.cuh"

namespace opfuse::kernels {
namespace {

using namespace fused;  // NOLINT

enum GluAct : int { kSiluAct = 0, kGeluErfAct = 1, kGeluTanhAct = 2 };

template <class T>
struct GluParams {
  const T* gate;
  const T* up;
  T* y;
  int64_t packs;   // numel / N
  int64_t numel;
};

template <int ACT>
__device__ __forceinline__ float Act(float x) {
  if constexpr (ACT == kSiluAct) return fz::op_silu(x);
  else if constexpr (ACT == kGeluErfAct) return fz::op_gelu(x);
  else return fz::op_gelu_tanh(x);
}

template <class T, int N, int U, int ACT>
__global__ void __launch_bounds__(256) GluKernel(GluParams<T> p) {
  PdlEnter();  // pdl.cuh: wait for the earlier kernels before any memory access
  const int64_t nthreads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i0 = tid; i0 < p.packs; i0 += nthreads * U) {
    Pack<T, N> g[U], u[U];
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const int64_t i = i0 + k * nthreads;
      if (i < p.packs) {
        g[k] = LoadPack<T, N>(p.gate + i * N);
        u[k] = LoadPack<T, N>(p.up + i * N);
      }
    }
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const int64_t i = i0 + k * nthreads;
      if (i < p.packs) {
        float o[N];
#pragma unroll
        for (int j = 0; j < N; ++j) o[j] = Act<ACT>(g[k].get(j)) * u[k].get(j);
        StorePack<T, N>(p.y + i * N, MakePack<T, N>(o));
      }
    }
  }
  if constexpr (N > 1) {  // tail: elements after the last full pack
    const int64_t e = p.packs * N + tid;
    if (e < p.numel) p.y[e] = FromF<T>(Act<ACT>(ToF(p.gate[e])) * ToF(p.up[e]));
  }
}

}  // namespace

StatusOr<std::vector<cuda::KernelLaunch>> PlanGluEx(const Node& n, const std::vector<TensorRef>& in,
                                                    const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev,
                                                    const FusedPlanOptions& opt) {
  const char* op = OpName(n.op);
  int act;
  if (n.op == OpKind::kSwiglu) {
    act = kSiluAct;
  } else if (n.op == OpKind::kGeglu) {
    const std::string approx = AttrString(n.attrs, "approximate", "none");
    if (approx != "none" && approx != "tanh")
      return InvalidArgument(fmt::format("{}: approximate must be \"none\" or \"tanh\", got \"{}\"", op, approx));
    act = approx == "tanh" ? kGeluTanhAct : kGeluErfAct;
  } else {
    return InvalidArgument(fmt::format("{}: not swiglu/geglu", op));
  }
  if (in.size() != 2 || out.size() != 1) return InvalidArgument(fmt::format("{}: {} inputs / {} outputs", op, in.size(), out.size()));
  const DType dt = in[0].dtype;
  if (!IsFloat(dt)) return Unimplemented(fmt::format("{}: dtype {} (the library kernel takes f32, f16, bf16)", op, DTypeName(dt)));
  if (in[1].dtype != dt || out[0].dtype != dt)
    return Unimplemented(fmt::format("{}: mixed dtypes ({}, {} -> {}); the library kernel needs one dtype", op, DTypeName(dt),
                                     DTypeName(in[1].dtype), DTypeName(out[0].dtype)));
  const int64_t numel = in[0].numel();
  if (in[1].numel() != numel || out[0].numel() != numel)
    return InvalidArgument(fmt::format("{}: gate has {} elements, up {}, y {}", op, numel, in[1].numel(), out[0].numel()));
  if (numel == 0) return std::vector<cuda::KernelLaunch>{};

  int vec = 16 / DTypeSize(dt);
  if (opt.force_scalar || !Aligned(in[0].data, 16) || !Aligned(in[1].data, 16) || !Aligned(out[0].data, 16)) vec = 1;
  const int64_t packs = numel / vec;
  const int64_t sms = std::max(dev.sm_count, 1);
  // Large: 4 packs per thread in flight, 256 threads; small: 1 pack, 64 threads (more SMs busy).
  const bool large = packs >= sms * 256 * 4;
  // One pack per thread per step: at 16384 x 5632 bf16 unroll 1, 2 and 4 were level (at the copy's
  // time) and a capped, grid-stride grid was slower.
  const int unroll = opt.unroll ? opt.unroll : 1, block = large ? 256 : 64;
  if (unroll != 1 && unroll != 2 && unroll != 4) return InvalidArgument(fmt::format("{}: unroll {} (1, 2 or 4)", op, unroll));
  // Enough threads for every pack, and at least one per tail element.
  const int64_t threads = std::max<int64_t>((packs + unroll - 1) / unroll, numel - packs * vec);
  int64_t blocks = (threads + block - 1) / block;
  if (opt.max_blocks > 0 && blocks > opt.max_blocks)  // grid-stride; the tail needs < 16 threads
    blocks = opt.max_blocks;
  const dim3 grid(GridFor(blocks));
  const std::string name = fmt::format("lib:{}{}_{}_v{}_u{}", op, act == kGeluTanhAct ? "_tanh" : "", DTypeName(dt), vec, unroll);

  return DispatchFloat(dt, [&](auto tag) -> StatusOr<std::vector<cuda::KernelLaunch>> {
    using T = typename decltype(tag)::type;
    GluParams<T> p{static_cast<const T*>(in[0].data), static_cast<const T*>(in[1].data), static_cast<T*>(out[0].data),
                   packs, numel};
    constexpr int kVec = 16 / static_cast<int>(sizeof(T));
    auto make = [&](auto kernel) {
      return std::vector<cuda::KernelLaunch>{cuda::KernelLaunch::Make(name, kernel, grid, dim3(block), 0, p).Pdl()};
    };
    auto by_act = [&](auto n_c, auto u_c) {
      constexpr int N = decltype(n_c)::value, U = decltype(u_c)::value;
      switch (act) {
        case kSiluAct: return make(GluKernel<T, N, U, kSiluAct>);
        case kGeluErfAct: return make(GluKernel<T, N, U, kGeluErfAct>);
        default: return make(GluKernel<T, N, U, kGeluTanhAct>);
      }
    };
    using One = std::integral_constant<int, 1>;
    using VecN = std::integral_constant<int, kVec>;
    auto by_unroll = [&](auto n_c) {
      switch (unroll) {
        case 2: return by_act(n_c, std::integral_constant<int, 2>{});
        case 4: return by_act(n_c, std::integral_constant<int, 4>{});
        default: return by_act(n_c, One{});
      }
    };
    return vec == 1 ? by_unroll(One{}) : by_unroll(VecN{});
  });
}

StatusOr<std::vector<cuda::KernelLaunch>> PlanGlu(const Node& n, const std::vector<TensorRef>& in,
                                                  const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev) {
  return PlanGluEx(n, in, out, dev, {});
}

}  // namespace opfuse::kernels
