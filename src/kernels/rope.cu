// Fused rotary-embedding library kernel (rotate_half convention, as CpuRope in
// src/ops/composite_cpu.cc): for x[..., D] with half = D / 2,
//   y[c]        = x[c] * cos[c]               - x[c + half] * sin[c]
//   y[c + half] = x[c + half] * cos[c + half] + x[c] * sin[c + half]        (c < half)
// with cos/sin broadcastable to x and of full width D (typically x [T, H, D], tables [T, 1, D]).
//
// Design: one work item is a pair of N-element packs (columns c and c + half of one row), so each
// item reads both halves it needs and writes both results: x is read once and y written once;
// the tables are re-read per head but stay in L1/L2. Table rows come from a broadcast row map
// (fused_common.cuh: [T, H] rows reading [T, 1] tables cost one division, a multiply-high below 2^31 rows). 16-byte packs
// when half is a multiple of the pack and every pointer is aligned, else 1-element items. Table
// dtype: x's or f32 (sin's must equal cos's). f32 math.
// Index arithmetic (FAST, up to 2^31 items, the usual case): the item's row is a FastDivmod
// multiply-high, as is the table row (RowMap), and the sin row reuses the cos row's offset when the
// two maps are equal (they are for same-shape tables). With runtime divisions (and the sin map
// computed again) this kernel was slower at 16384 x 32 x 64 bf16 than the JIT's, whose indices are
// shifts of static sizes (docs/BENCHMARKS.md, bench ops).
#include "kernels/pdl.cuh"
#include "kernels/fused_common.cuh"

namespace opfuse::kernels {
namespace {

using namespace fused;  // NOLINT

template <class T, class CT>
struct RopeParams {
  const T* x;
  const CT* cos;
  const CT* sin;
  T* y;
  int64_t items;     // rows * pairs
  uint32_t pairs;    // pack pairs per row (half / N)
  int d;             // row width D
  int half;
  RowMap cmap, smap;  // row of x -> element offset of the cos / sin row
  bool same_map;      // smap == cmap: the sin row's offset is the cos row's
  FastDivmod pairs_div;  // FAST only: item -> (row, pair)
};

template <bool FAST, class T, class CT, int N>
__global__ void __launch_bounds__(256) RopeKernel(RopeParams<T, CT> p) {
  PdlEnter();  // pdl.cuh: wait for the earlier kernels before any memory access
  const int64_t nthreads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.items; i += nthreads) {
    uint32_t r;
    int c;
    if constexpr (FAST) {  // items < 2^31
      uint32_t q, rem;
      p.pairs_div.DivMod(static_cast<uint32_t>(i), q, rem);
      r = q;
      c = static_cast<int>(rem) * N;
    } else {  // 32-bit division where the item count allows, 64-bit otherwise
      r = p.items <= 0xffffffffLL ? static_cast<uint32_t>(i) / p.pairs : static_cast<uint32_t>(i / p.pairs);
      c = static_cast<int>(i - static_cast<int64_t>(r) * p.pairs) * N;
    }
    const int64_t base = static_cast<int64_t>(r) * p.d;
    const int64_t co = MapRow(p.cmap, r), so = p.same_map ? co : MapRow(p.smap, r);
    const Pack<T, N> x1 = LoadPack<T, N>(p.x + base + c), x2 = LoadPack<T, N>(p.x + base + p.half + c);
    const Pack<CT, N> c1 = LoadPack<CT, N>(p.cos + co + c), c2 = LoadPack<CT, N>(p.cos + co + p.half + c);
    const Pack<CT, N> s1 = LoadPack<CT, N>(p.sin + so + c), s2 = LoadPack<CT, N>(p.sin + so + p.half + c);
    float y1[N], y2[N];
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const float a = x1.get(j), b = x2.get(j);
      y1[j] = a * c1.get(j) - b * s1.get(j);
      y2[j] = b * c2.get(j) + a * s2.get(j);
    }
    StorePack<T, N>(p.y + base + c, MakePack<T, N>(y1));
    StorePack<T, N>(p.y + base + p.half + c, MakePack<T, N>(y2));
  }
}

}  // namespace

StatusOr<std::vector<cuda::KernelLaunch>> PlanRopeEx(const Node& n, const std::vector<TensorRef>& in,
                                                     const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev,
                                                     const FusedPlanOptions& opt) {
  const char* op = OpName(n.op);
  if (n.op != OpKind::kRope) return InvalidArgument(fmt::format("{}: not rope", op));
  if (in.size() != 3 || out.size() != 1) return InvalidArgument(fmt::format("{}: {} inputs / {} outputs", op, in.size(), out.size()));
  const TensorRef &x = in[0], &cs = in[1], &sn = in[2];
  const DType dt = x.dtype;
  if (!IsFloat(dt)) return Unimplemented(fmt::format("{}: dtype {} (the library kernel takes f32, f16, bf16)", op, DTypeName(dt)));
  if (out[0].dtype != dt) return Unimplemented(fmt::format("{}: output dtype {} differs from x's {}", op, DTypeName(out[0].dtype), DTypeName(dt)));
  if (cs.dtype != sn.dtype || (cs.dtype != dt && cs.dtype != DType::kF32))
    return Unimplemented(fmt::format("{}: cos {} / sin {} with x {} (tables must be x's dtype or f32, both the same)", op,
                                     DTypeName(cs.dtype), DTypeName(sn.dtype), DTypeName(dt)));
  if (x.shape.empty()) return InvalidArgument(fmt::format("{}: x is a scalar", op));
  const int64_t d = x.shape.back(), numel = x.numel();
  if (d % 2) return InvalidArgument(fmt::format("{}: shape mismatch: rope needs an even last dim, got {}", op, d));
  if (out[0].numel() != numel) return InvalidArgument(fmt::format("{}: output has {} elements, x has {}", op, out[0].numel(), numel));
  for (const TensorRef* t : {&cs, &sn})
    if (t->shape.empty() || t->shape.back() != d)
      return Unimplemented(fmt::format("{}: cos/sin last dim must be {} (full rotate_half tables)", op, d));
  if (d > (int64_t{1} << 30)) return Unimplemented(fmt::format("{}: row of {} columns", op, d));
  auto cmap = BuildRowMap(x.shape, cs.shape);
  if (!cmap.ok()) return Status(cmap.status().code(), fmt::format("{}: cos: {}", op, cmap.status().message()));
  auto smap = BuildRowMap(x.shape, sn.shape);
  if (!smap.ok()) return Status(smap.status().code(), fmt::format("{}: sin: {}", op, smap.status().message()));
  if (numel == 0) return std::vector<cuda::KernelLaunch>{};

  const int64_t rows = numel / d, half = d / 2;
  int vec = 16 / DTypeSize(dt);
  if (opt.force_scalar || half % vec || !Aligned(x.data, 16) || !Aligned(out[0].data, 16) ||
      !Aligned(cs.data, vec * DTypeSize(cs.dtype)) || !Aligned(sn.data, vec * DTypeSize(sn.dtype)))
    vec = 1;
  const int64_t pairs = half / vec, items = rows * pairs;
  const int64_t sms = std::max(dev.sm_count, 1);
  const int block = items >= sms * 256 ? 256 : 64;
  const dim3 grid(GridFor((items + block - 1) / block));
  const std::string name = fmt::format("lib:rope_{}{}{}_v{}", DTypeName(dt), cs.dtype != dt ? "_tab" : "",
                                       cs.dtype != dt ? DTypeName(cs.dtype) : "", vec);

  return DispatchFloat(dt, [&](auto tag) -> StatusOr<std::vector<cuda::KernelLaunch>> {
    using T = typename decltype(tag)::type;
    constexpr int kVec = 16 / static_cast<int>(sizeof(T));
    auto launch = [&](auto ct_tag) {
      using CT = typename decltype(ct_tag)::type;
      RopeParams<T, CT> p{};
      p.x = static_cast<const T*>(x.data);
      p.cos = static_cast<const CT*>(cs.data);
      p.sin = static_cast<const CT*>(sn.data);
      p.y = static_cast<T*>(out[0].data);
      p.items = items;
      p.pairs = static_cast<uint32_t>(pairs);
      p.d = static_cast<int>(d);
      p.half = static_cast<int>(half);
      p.cmap = *cmap;
      p.smap = *smap;
      p.same_map = SameRowMap(*cmap, *smap);
      const bool fast = items <= kFastIndexLimit;
      if (fast) p.pairs_div = FastDivmod(static_cast<uint32_t>(pairs));
      auto k = fast ? (vec == 1 ? RopeKernel<true, T, CT, 1> : RopeKernel<true, T, CT, kVec>)
                    : (vec == 1 ? RopeKernel<false, T, CT, 1> : RopeKernel<false, T, CT, kVec>);
      return std::vector<cuda::KernelLaunch>{cuda::KernelLaunch::Make(name, k, grid, dim3(block), 0, p).Pdl()};
    };
    if (cs.dtype == dt) return launch(TypeTag<T>{});
    return launch(TypeTag<float>{});
  });
}

StatusOr<std::vector<cuda::KernelLaunch>> PlanRope(const Node& n, const std::vector<TensorRef>& in,
                                                   const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev) {
  return PlanRopeEx(n, in, out, dev, {});
}

}  // namespace opfuse::kernels
