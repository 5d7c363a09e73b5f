// Composite ops (rms_norm, add_rms_norm, layer_norm, softmax, swiglu, geglu, rope): inference,
// a fused CPU reference, and the decomposition into primitives (used when a pattern is disabled
// and by the numerics tests, which check fused == decomposed op by op).
#include <fmt/format.h>

#include "ops/op_def.h"

namespace opfuse {
namespace {

Status SameType(const Node& n, const TensorType& a, const TensorType& b, const char* what) {
  if (a.dtype != b.dtype) return NodeError(n, fmt::format("dtype mismatch: {} is {}, x is {}", what, DTypeName(b.dtype), DTypeName(a.dtype)));
  if (!(a.shape == b.shape)) return NodeError(n, fmt::format("shape mismatch: {} is {}, x is {}", what, ShapeToString(b.shape), ShapeToString(a.shape)));
  return Status::Ok();
}

// A per-channel vector (norm weight/bias): [C] where C is x's last dim.
Status ChannelVector(const Node& n, const TensorType& x, const TensorType& w, const char* what) {
  if (w.dtype != x.dtype) return NodeError(n, fmt::format("dtype mismatch: {} is {}, x is {}", what, DTypeName(w.dtype), DTypeName(x.dtype)));
  if (w.shape.size() != 1 || !(w.shape[0] == x.shape.back()))
    return NodeError(n, fmt::format("shape mismatch: {} must be [{}], got {}", what, x.shape.back().ToString(), ShapeToString(w.shape)));
  return Status::Ok();
}

StatusOr<std::vector<TensorType>> InferComposite(const Node& n, const std::vector<TensorType>& in) {
  const TensorType& x = in[0];
  if (!IsFloat(x.dtype)) return NodeError(n, fmt::format("dtype mismatch: needs a float input, got {}", x.ToString()));
  if (x.shape.empty()) return NodeError(n, "shape mismatch: needs rank >= 1, got a scalar");
  switch (n.op) {
    case OpKind::kRmsNorm:
    case OpKind::kLayerNorm:
      for (size_t i = 1; i < in.size(); ++i) OPFUSE_RETURN_IF_ERROR(ChannelVector(n, x, in[i], i == 1 ? "weight" : "bias"));
      return std::vector<TensorType>{x};
    case OpKind::kAddRmsNorm:
      OPFUSE_RETURN_IF_ERROR(SameType(n, x, in[1], "residual"));
      OPFUSE_RETURN_IF_ERROR(ChannelVector(n, x, in[2], "weight"));
      return std::vector<TensorType>{x, x};
    case OpKind::kSoftmax:
      if (in.size() == 2) {
        if (!IsFloat(in[1].dtype)) return NodeError(n, fmt::format("dtype mismatch: mask must be float, got {}", in[1].ToString()));
        auto s = BroadcastShapes(x.shape, in[1].shape);
        if (!s.ok()) return NodeError(n, "mask: " + s.status().message());
        if (!(*s == x.shape)) return NodeError(n, fmt::format("shape mismatch: mask {} must broadcast to x {}", ShapeToString(in[1].shape), ShapeToString(x.shape)));
      }
      return std::vector<TensorType>{x};
    case OpKind::kSwiglu:
    case OpKind::kGeglu:
      OPFUSE_RETURN_IF_ERROR(SameType(n, x, in[1], "up"));
      return std::vector<TensorType>{x};
    case OpKind::kRope: {
      const Dim& d = x.shape.back();
      if (d.is_static() && d.value % 2) return NodeError(n, fmt::format("shape mismatch: rope needs an even last dim, got {}", d.value));
      for (int i = 1; i <= 2; ++i) {
        if (!IsFloat(in[i].dtype)) return NodeError(n, fmt::format("dtype mismatch: {} must be float", i == 1 ? "cos" : "sin"));
        auto s = BroadcastShapes(x.shape, in[i].shape);
        if (!s.ok() || !(*s == x.shape))
          return NodeError(n, fmt::format("shape mismatch: {} {} must broadcast to x {}", i == 1 ? "cos" : "sin", ShapeToString(in[i].shape), ShapeToString(x.shape)));
      }
      return std::vector<TensorType>{x};
    }
    default:
      return NodeError(n, "not a composite op");
  }
}

}  // namespace

void RegisterCompositeOps(OpDefTable& t) {
  for (OpKind op : {OpKind::kRmsNorm, OpKind::kAddRmsNorm, OpKind::kLayerNorm, OpKind::kSoftmax, OpKind::kSwiglu,
                    OpKind::kGeglu, OpKind::kRope})
    t[static_cast<int>(op)].infer = InferComposite;
  for (OpKind op : {OpKind::kRmsNorm, OpKind::kAddRmsNorm, OpKind::kLayerNorm})
    t[static_cast<int>(op)].attrs = {{"eps", AttrRule::kPositive}};
  t[static_cast<int>(OpKind::kSoftmax)].attrs = {{"scale", AttrRule::kFinite}, {"causal", AttrRule::kFlag}};
  t[static_cast<int>(OpKind::kGeglu)].attrs = {{"approximate", AttrRule::kString}};
  RegisterCompositeDecompositions(t);
}

}  // namespace opfuse
