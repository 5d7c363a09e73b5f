// Elementwise ops (unary, broadcast binary, where): inference and CPU reference.
//
// Dtype rule: operands share one dtype, except a rank-0 float operand (a constant), which is
// "weak" and adopts the other operand's dtype, as in PyTorch. Comparisons produce bool.
#include <fmt/format.h>

#include "ops/broadcast.h"
#include "ops/op_def.h"
#include "ops/scalar_ops.h"

namespace opfuse {
namespace {

StatusOr<std::vector<TensorType>> InferUnary(const Node& n, const std::vector<TensorType>& in) {
  TensorType out = in[0];
  if (n.op == OpKind::kCast) {
    std::string name = AttrString(n.attrs, "dtype", "");
    auto dt = DTypeFromName(name);
    if (!dt) return NodeError(n, name.empty() ? "needs attribute dtype=<f32|f16|bf16|i32|i64|bool>"
                                              : fmt::format("unknown dtype '{}'", name));
    out.dtype = *dt;
    return std::vector<TensorType>{out};
  }
  if ((GetOpInfo(n.op).flags & kFloatOnly) && !IsFloat(in[0].dtype))
    return NodeError(n, fmt::format("dtype mismatch: needs a float input, got {}", in[0].ToString()));
  if (in[0].dtype == DType::kBool) return NodeError(n, "dtype mismatch: bool input");
  return std::vector<TensorType>{out};
}

// Common dtype of value operands with weak rank-0 floats.
StatusOr<DType> CommonDType(const Node& n, const std::vector<TensorType>& ops) {
  std::optional<DType> strong, weak;
  for (const auto& t : ops) {
    bool is_weak = t.shape.empty() && IsFloat(t.dtype);
    auto& slot = is_weak ? weak : strong;
    if (!slot) slot = t.dtype;
    else if (*slot != t.dtype && !is_weak)
      return NodeError(n, fmt::format("dtype mismatch: {} vs {}", DTypeName(*slot), DTypeName(t.dtype)));
  }
  if (strong) {
    if (weak && !IsFloat(*strong))
      return NodeError(n, fmt::format("dtype mismatch: float scalar with {} tensor", DTypeName(*strong)));
    return *strong;
  }
  return *weak;
}

StatusOr<std::vector<TensorType>> InferBroadcast(const Node& n, const std::vector<TensorType>& in) {
  std::vector<TensorType> value_ops = in;
  if (n.op == OpKind::kWhere) {
    if (in[0].dtype != DType::kBool)
      return NodeError(n, fmt::format("dtype mismatch: condition must be bool, got {}", in[0].ToString()));
    value_ops.erase(value_ops.begin());
  }
  auto dt = CommonDType(n, value_ops);
  if (!dt.ok()) return dt.status();
  if ((GetOpInfo(n.op).flags & kFloatOnly) && !IsFloat(*dt))
    return NodeError(n, fmt::format("dtype mismatch: needs float operands, got {}", DTypeName(*dt)));
  if (*dt == DType::kBool && !(GetOpInfo(n.op).flags & kBoolOut) && n.op != OpKind::kWhere)
    return NodeError(n, "dtype mismatch: arithmetic on bool");
  Shape shape = in[0].shape;
  for (size_t i = 1; i < in.size(); ++i) {
    auto s = BroadcastShapes(shape, in[i].shape);
    if (!s.ok()) return NodeError(n, s.status().message());
    shape = *s;
  }
  DType out = (GetOpInfo(n.op).flags & kBoolOut) ? DType::kBool : *dt;
  return std::vector<TensorType>{{out, shape}};
}

Status CpuUnary(const Node& n, const std::vector<const HostTensor*>& in, const std::vector<HostTensor*>& out) {
  const HostTensor& x = *in[0];
  HostTensor& y = *out[0];
  const bool int_path = !IsFloat(x.dtype) && (n.op != OpKind::kCast);
  for (int64_t i = 0; i < y.numel(); ++i) {
    if (n.op == OpKind::kCast) {
      // f32 compute: go through float unless both sides are integers (exact int64 casts).
      if (!IsFloat(x.dtype) && !IsFloat(y.dtype)) y.set(i, static_cast<double>(x.get_int(i)));
      else y.set(i, static_cast<float>(x.get(i)));
    } else if (int_path) {
      y.set(i, static_cast<double>(ScalarUnaryInt(n.op, x.get_int(i))));
    } else {
      y.set(i, ScalarUnary(n.op, static_cast<float>(x.get(i))));
    }
  }
  return Status::Ok();
}

Status CpuBroadcast(const Node& n, const std::vector<const HostTensor*>& in, const std::vector<HostTensor*>& out) {
  HostTensor& y = *out[0];
  const int64_t total = y.numel();
  const bool fast = [&] {
    for (auto* t : in)
      if (t->shape != y.shape) return false;
    return true;
  }();
  const bool int_math = !IsFloat(in[n.op == OpKind::kWhere ? 1 : 0]->dtype) &&
                        !(in.size() > 1 && IsFloat(in[1]->dtype));
  std::vector<int64_t> idx(in.size());
  std::vector<BroadcastIndexer> index;
  for (auto* t : in) index.emplace_back(y.shape, t->shape);
  for (int64_t i = 0; i < total; ++i) {
    for (size_t k = 0; k < in.size(); ++k) idx[k] = fast ? i : index[k](i);
    if (n.op == OpKind::kWhere) {
      y.set(i, in[0]->get(idx[0]) != 0.0 ? in[1]->get(idx[1]) : in[2]->get(idx[2]));
    } else if (int_math) {
      y.set(i, static_cast<double>(ScalarBinaryInt(n.op, in[0]->get_int(idx[0]), in[1]->get_int(idx[1]))));
    } else {
      y.set(i, ScalarBinary(n.op, static_cast<float>(in[0]->get(idx[0])), static_cast<float>(in[1]->get(idx[1]))));
    }
  }
  return Status::Ok();
}

}  // namespace

void RegisterElementwiseOps(OpDefTable& t) {
  for (int i = 0; i < kNumOps; ++i) {
    auto op = static_cast<OpKind>(i);
    if (GetOpInfo(op).kind == FusionKind::kElementwise) t[i] = {InferUnary, CpuUnary, nullptr, {}, {}};
    if (GetOpInfo(op).kind == FusionKind::kBroadcast) t[i] = {InferBroadcast, CpuBroadcast, nullptr, {}, {}};
  }
  t[static_cast<int>(OpKind::kCast)].attrs = {{"dtype", AttrRule::kDType}};
}

}  // namespace opfuse
