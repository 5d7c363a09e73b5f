// Elementwise library kernels: every kElementwise (unary, cast) and kBroadcast (binary with numpy
// broadcasting, comparisons -> bool, where) op of ops.def, one node per launch — the never-fuse
// path of the benchmarks, so it is built like PyTorch's TensorIterator loops rather than naively.
//
// Design:
//  * Semantics are the scalar math table (src/ops/scalar_math.def) as __device__ functors (F: f32
//    math for f32/f16/bf16 storage, I: int64 math for i32/i64/bool): the same fz::op_<name>
//    functions the JIT compiles, so a library and a JIT kernel of one op agree bit for bit; where
//    the device differs from the CPU reference (exp, exp2, the divide of sigmoid/silu, gelu's erf)
//    is stated once, in scalar_math.h. Conversions follow the CPU reference (kernel_common.cuh):
//    integer div/mod by zero -> 0, i32 results saturated, float->int casts saturating, NaN -> 0.
//  * One engine for arity 1..3 templated on an element functor E (op x storage dtypes), so the
//    op is resolved at compile time and the planner picks a function pointer from a table built by
//    a switch at plan time — nothing switches on the op inside a kernel.
//  * Broadcasting is planned on the host: each operand gets strides over the output (0 on
//    broadcast dims), dims are coalesced (kernel_common.cuh), and the result picks the form:
//      flat     coalesced rank 1: same-shape operands and scalars; grid-stride, 4 vectors per
//               thread in flight, 16-byte vectors when every non-scalar pointer is aligned (a
//               scalar tail handles numel % VEC);
//      general  rank 2..8 (row broadcast [R,C] op [C], column broadcast [R,C] op [R,1], and any
//               n-d broadcast): per vector the n-d coordinates come from 32-bit FastDivmods;
//               vectors along the innermost dim when it divides VEC and every operand that varies
//               along it stays aligned; operands broadcast along it load one element per vector;
//      wide     the general form with 64-bit division when the output has >= 2^31 elements.
//    Rank > 8 after coalescing is Unimplemented (never seen in the models we run).
//  * Launched with PDL (pdl.cuh; PdlEnter at the top, nothing touched before the wait): in a
//    captured step of never_fuse's ~40 kernels per layer each launch then overlaps its
//    predecessor's drain instead of waiting for it.
//  * Scalar operands (one element) are loaded once per thread, in their own dtype, straight to the
//    compute type: that is how PyTorch-style "weak" rank-0 float scalars (f32 constant times a
//    bf16 tensor) keep their f32 value, exactly as the CPU reference reads them.
//  * VEC = 16 bytes / the widest storage type among the operands and the output, so the widest
//    array moves 16-byte vectors and the narrower ones (a bool condition, a bf16 cast target)
//    proportionally smaller ones.
//  * Operand kinds (scalar, broadcast along the innermost dim) are selected without branching
//    around loads (elementwise_kernels.cuh says why). The kernel templates live in
//    elementwise_kernels.cuh; this file holds the planner and the unary / cast / where tables,
//    elementwise_arith.cu and elementwise_compare.cu the binary tables (parallel compilation).
#include <fmt/format.h>

#include <algorithm>

#include "kernels/elementwise_kernels.cuh"
#include "kernels/library.h"

namespace opfuse::kernels {
namespace ew {

template <class F>
EwKernels UnaryFor(DType t) {
  switch (t) {
    case DType::kF32: return Make<UnaryE<F, float>>(false);
    case DType::kF16: return Make<UnaryE<F, __half>>(false);
    case DType::kBF16: return Make<UnaryE<F, __nv_bfloat16>>(false);
    case DType::kI32: if constexpr (F::kInt) return Make<UnaryE<F, int32_t>>(false); else return {};
    case DType::kI64: if constexpr (F::kInt) return Make<UnaryE<F, int64_t>>(false); else return {};
    case DType::kBool: return {};
  }
  return {};
}

EwKernels UnaryKernels(OpKind op, DType t) {
  switch (op) {
    case OpKind::kNeg: return UnaryFor<UNeg>(t);
    case OpKind::kAbs: return UnaryFor<UAbs>(t);
    case OpKind::kExp: return UnaryFor<UExp>(t);
    case OpKind::kExp2: return UnaryFor<UExp2>(t);
    case OpKind::kLog: return UnaryFor<ULog>(t);
    case OpKind::kLog2: return UnaryFor<ULog2>(t);
    case OpKind::kSqrt: return UnaryFor<USqrt>(t);
    case OpKind::kRsqrt: return UnaryFor<URsqrt>(t);
    case OpKind::kRecip: return UnaryFor<URecip>(t);
    case OpKind::kSin: return UnaryFor<USin>(t);
    case OpKind::kCos: return UnaryFor<UCos>(t);
    case OpKind::kTanh: return UnaryFor<UTanh>(t);
    case OpKind::kSigmoid: return UnaryFor<USigmoid>(t);
    case OpKind::kSilu: return UnaryFor<USilu>(t);
    case OpKind::kGelu: return UnaryFor<UGelu>(t);
    case OpKind::kGeluTanh: return UnaryFor<UGeluTanh>(t);
    case OpKind::kRelu: return UnaryFor<URelu>(t);
    default: return {};
  }
}

template <class TI>
EwKernels CastFrom(DType to) {
  switch (to) {
    case DType::kF32: return Make<CastE<TI, float>>(false);
    case DType::kF16: return Make<CastE<TI, __half>>(false);
    case DType::kBF16: return Make<CastE<TI, __nv_bfloat16>>(false);
    case DType::kI32: return Make<CastE<TI, int32_t>>(false);
    case DType::kI64: return Make<CastE<TI, int64_t>>(false);
    case DType::kBool: return Make<CastE<TI, BoolStorage>>(false);
  }
  return {};
}

EwKernels CastKernels(DType from, DType to) {
  switch (from) {
    case DType::kF32: return CastFrom<float>(to);
    case DType::kF16: return CastFrom<__half>(to);
    case DType::kBF16: return CastFrom<__nv_bfloat16>(to);
    case DType::kI32: return CastFrom<int32_t>(to);
    case DType::kI64: return CastFrom<int64_t>(to);
    case DType::kBool: return CastFrom<BoolStorage>(to);
  }
  return {};
}

EwKernels WhereKernels(DType t) {
  switch (t) {
    case DType::kF32: return Make<WhereE<float>>(true);
    case DType::kF16: return Make<WhereE<__half>>(true);
    case DType::kBF16: return Make<WhereE<__nv_bfloat16>>(true);
    case DType::kI32: return Make<WhereE<int32_t>>(true);
    case DType::kI64: return Make<WhereE<int64_t>>(true);
    case DType::kBool: return Make<WhereE<BoolStorage>>(true);
  }
  return {};
}

}  // namespace ew

namespace {
using namespace ew;

EwKernels BinaryKernels(OpKind op, DType t) {
  if (GetOpInfo(op).flags & kBoolOut) return CompareKernels(op, t);
  return ArithKernels(op, t);
}

// ------------------------------------------------------------------ planning
std::string ShapeStr(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

Status Err(const Node& n, const std::string& msg) { return InvalidArgument(fmt::format("{}: {}", OpName(n.op), msg)); }
Status Unimpl(const Node& n, const std::string& msg) { return Unimplemented(fmt::format("{}: {}", OpName(n.op), msg)); }

StatusOr<std::vector<cuda::KernelLaunch>> PlanUnary(const Node& n, const TensorRef& x, const TensorRef& y,
                                                    const cuda::DeviceInfo& dev) {
  if (x.shape != y.shape)
    return Err(n, fmt::format("input shape {} differs from output shape {}", ShapeStr(x.shape), ShapeStr(y.shape)));
  EwKernels k;
  if (n.op == OpKind::kCast) {
    const std::string want = AttrString(n.attrs, "dtype", "");
    if (!want.empty()) {
      auto dt = DTypeFromName(want);
      if (!dt || *dt != y.dtype)
        return Err(n, fmt::format("attribute dtype={} but the output is {}", want, DTypeName(y.dtype)));
    }
    k = CastKernels(x.dtype, y.dtype);
  } else {
    if (x.dtype != y.dtype)
      return Err(n, fmt::format("input dtype {} differs from output dtype {}", DTypeName(x.dtype), DTypeName(y.dtype)));
    k = UnaryKernels(n.op, x.dtype);
  }
  if (!k.ok()) return Unimpl(n, fmt::format("no library kernel for dtype {} -> {}", DTypeName(x.dtype), DTypeName(y.dtype)));
  EwParams p;
  p.out = y.data;
  p.in[0] = x.data;
  p.dtype[0] = x.dtype;
  p.n = y.numel();
  const bool vec = k.vec > 1 && Aligned(x.data, int64_t{k.vec} * k.size[0]) && Aligned(y.data, int64_t{k.vec} * k.out_size);
  const int v = vec ? k.vec : 1;
  const unsigned g = p.n > 0 ? std::max(GridFor(p.n / v, int64_t{kThreads} * kUnroll, dev.sm_count, kBlocksPerSm), 1u) : 0u;
  std::string name = fmt::format("ew_{}_{}{}_flat_v{}", OpName(n.op), DTypeName(x.dtype),
                                 n.op == OpKind::kCast ? std::string("_to_") + DTypeName(y.dtype) : "", v);
  return std::vector<cuda::KernelLaunch>{
      cuda::KernelLaunch::Make(std::move(name), vec ? k.flat_vec : k.flat_scalar, dim3(g), dim3(kThreads), 0, p).Pdl()};
}

StatusOr<std::vector<cuda::KernelLaunch>> PlanBroadcast(const Node& n, const std::vector<TensorRef>& in,
                                                        const TensorRef& y, const cuda::DeviceInfo& dev) {
  const bool where = n.op == OpKind::kWhere;
  const bool compare = (GetOpInfo(n.op).flags & kBoolOut) != 0;
  const size_t arity = in.size();
  if (arity != (where ? 3u : 2u)) return Err(n, fmt::format("expected {} inputs, got {}", where ? 3 : 2, arity));
  // The value dtype T: the output's, or for comparisons the operands' (a one-element float operand
  // of another float dtype is a weak scalar and adopts the other's).
  const size_t v0 = where ? 1 : 0;
  DType t = y.dtype;
  if (compare) {
    const TensorRef &a = in[v0], &b = in[v0 + 1];
    t = (a.dtype == b.dtype || b.numel() == 1) ? a.dtype : b.dtype;
    if (y.dtype != DType::kBool) return Err(n, fmt::format("comparison output must be bool, got {}", DTypeName(y.dtype)));
  }
  if (where && in[0].dtype != DType::kBool)
    return Err(n, fmt::format("condition must be bool, got {}", DTypeName(in[0].dtype)));
  for (size_t k = v0; k < arity; ++k) {
    const TensorRef& x = in[k];
    if (x.dtype == t) continue;
    if (!(x.numel() == 1 && IsFloat(x.dtype) && IsFloat(t)))
      return Err(n, fmt::format("dtype mismatch: operand {} is {}, expected {}", k, DTypeName(x.dtype), DTypeName(t)));
  }
  const EwKernels k = where ? WhereKernels(t) : BinaryKernels(n.op, t);
  if (!k.ok()) return Unimpl(n, fmt::format("no library kernel for dtype {}", DTypeName(t)));

  // Strides of each operand over the output (right-aligned numpy broadcasting).
  const size_t rank = y.shape.size();
  StridedShape ss;
  ss.shape = y.shape;
  ss.strides.assign(arity, std::vector<int64_t>(rank, 0));
  EwParams p;
  p.out = y.data;
  p.n = y.numel();
  for (size_t k = 0; k < arity; ++k) {
    const TensorRef& x = in[k];
    if (x.shape.size() > rank)
      return Err(n, fmt::format("operand {} {} has a higher rank than the output {}", k, ShapeStr(x.shape), ShapeStr(y.shape)));
    const size_t off = rank - x.shape.size();
    const auto cs = ContiguousStrides(x.shape);
    for (size_t d = 0; d < x.shape.size(); ++d) {
      const int64_t od = y.shape[off + d];
      if (x.shape[d] == od) ss.strides[k][off + d] = od == 1 ? 0 : cs[d];
      else if (x.shape[d] == 1) ss.strides[k][off + d] = 0;
      else
        return Err(n, fmt::format("operand {} {} does not broadcast to the output {}", k, ShapeStr(x.shape), ShapeStr(y.shape)));
    }
    p.in[k] = x.data;
    p.dtype[k] = x.dtype;
    p.scalar[k] = x.numel() == 1 ? 1 : 0;
    if (p.scalar[k]) std::fill(ss.strides[k].begin(), ss.strides[k].end(), 0);
  }
  ss.Coalesce();
  if (ss.shape.empty()) {  // one element
    ss.shape = {1};
    for (auto& s : ss.strides) s = {0};
  }
  const int crank = static_cast<int>(ss.shape.size());
  std::string base = fmt::format("ew_{}_{}", OpName(n.op), DTypeName(t));
  auto aligned_vec = [&](int vec) {  // every array that is read or written as vectors is aligned
    if (!Aligned(y.data, int64_t{vec} * k.out_size)) return false;
    for (size_t i = 0; i < arity; ++i)
      if (!p.scalar[i] && !Aligned(in[i].data, int64_t{vec} * k.size[i])) return false;
    return true;
  };

  if (crank == 1) {  // flat: contiguous operands and scalars
    const bool vec = k.vec > 1 && aligned_vec(k.vec);
    const int v = vec ? k.vec : 1;
    const unsigned g = p.n > 0 ? std::max(GridFor(p.n / v, int64_t{kThreads} * kUnroll, dev.sm_count, kBlocksPerSm), 1u) : 0u;
    return std::vector<cuda::KernelLaunch>{cuda::KernelLaunch::Make(
        fmt::format("{}_flat_v{}", base, v), vec ? k.flat_vec : k.flat_scalar, dim3(g), dim3(kThreads), 0, p).Pdl()};
  }
  if (crank > kMaxRank)
    return Unimpl(n, fmt::format("broadcast needs {} dims after coalescing, the kernel handles {}", crank, kMaxRank));

  const bool wide = p.n > kFastIndexLimit;
  int v = 1;
  if (!wide && k.vec > 1 && ss.shape.back() % k.vec == 0 && aligned_vec(k.vec)) {
    bool ok = true;
    for (size_t i = 0; i < arity && ok; ++i) {
      if (p.scalar[i] || ss.strides[i].back() == 0) continue;  // scalar / one element per vector
      for (int d = 0; d + 1 < crank; ++d)
        if (ss.strides[i][d] % k.vec != 0) ok = false;  // every vector start stays aligned
    }
    if (ok) v = k.vec;
  }
  p.rank = crank;
  for (int d = 0; d < crank; ++d) {
    const bool inner = d == crank - 1;
    p.shape[d] = inner ? ss.shape[d] / v : ss.shape[d];
    if (!wide) p.div[d] = FastDivmod(static_cast<uint32_t>(p.shape[d]));
    for (size_t i = 0; i < arity; ++i) p.stride[i][d] = inner ? ss.strides[i][d] * v : ss.strides[i][d];
  }
  for (size_t i = 0; i < arity; ++i) p.inner_bcast[i] = (!p.scalar[i] && ss.strides[i].back() == 0) ? 1 : 0;
  bool any_ib = false;
  for (size_t i = 0; i < arity; ++i) any_ib = any_ib || p.inner_bcast[i];
  EwKernel fn = wide ? k.general_wide : (v > 1 ? (any_ib ? k.general_vec_ib : k.general_vec) : k.general_scalar);
  const unsigned g = p.n > 0 ? std::max(GridFor(p.n / v, int64_t{kThreads} * kUnroll, dev.sm_count, kBlocksPerSm), 1u) : 0u;
  return std::vector<cuda::KernelLaunch>{cuda::KernelLaunch::Make(
      fmt::format("{}_{}{}_v{}{}", base, wide ? "wide" : "nd", crank, v, v > 1 && any_ib ? "_ib" : ""), fn, dim3(g), dim3(kThreads), 0, p).Pdl()};
}

}  // namespace

StatusOr<std::vector<cuda::KernelLaunch>> PlanElementwise(const Node& n, const std::vector<TensorRef>& in,
                                                          const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev) {
  const OpInfo& info = GetOpInfo(n.op);
  if (info.kind != FusionKind::kElementwise && info.kind != FusionKind::kBroadcast)
    return Internal(fmt::format("{}: not an elementwise op", OpName(n.op)));
  if (out.size() != 1) return Err(n, fmt::format("expected 1 output, got {}", out.size()));
  for (const auto& t : in)
    if (!t.data && t.numel() > 0) return Err(n, "null input pointer");
  if (!out[0].data && out[0].numel() > 0) return Err(n, "null output pointer");
  if (info.kind == FusionKind::kElementwise) {
    if (in.size() != 1) return Err(n, fmt::format("expected 1 input, got {}", in.size()));
    return PlanUnary(n, in[0], out[0], dev);
  }
  return PlanBroadcast(n, in, out[0], dev);
}

}  // namespace opfuse::kernels
