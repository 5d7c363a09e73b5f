// Last-axis reductions (sum, max, mean, argmax): the axis is kept with size 1 so the result
// broadcasts straight back over the row — the shape of every norm and softmax.
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "ops/op_def.h"

namespace opfuse {
namespace {

StatusOr<std::vector<TensorType>> InferReduction(const Node& n, const std::vector<TensorType>& in) {
  if (in[0].shape.empty()) return NodeError(n, "shape mismatch: reduction needs rank >= 1, got a scalar");
  if (in[0].dtype == DType::kBool) return NodeError(n, "dtype mismatch: reduction of bool");
  if ((GetOpInfo(n.op).flags & kFloatOnly) && !IsFloat(in[0].dtype))
    return NodeError(n, fmt::format("dtype mismatch: needs a float input, got {}", in[0].ToString()));
  TensorType out = in[0];
  out.shape.back() = Dim(1);
  if (n.op == OpKind::kArgmax) out.dtype = DType::kI64;
  return std::vector<TensorType>{out};
}

Status CpuReduction(const Node& n, const std::vector<const HostTensor*>& in, const std::vector<HostTensor*>& out) {
  const HostTensor& x = *in[0];
  HostTensor& y = *out[0];
  const int64_t cols = x.cols(), rows = x.rows();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * cols;
    double acc = 0;
    if (n.op == OpKind::kSum || n.op == OpKind::kMean) {
      for (int64_t c = 0; c < cols; ++c) acc += x.get(base + c);
      if (n.op == OpKind::kMean) acc /= static_cast<double>(cols);
    } else {
      double best = -std::numeric_limits<double>::infinity();
      int64_t arg = 0;
      for (int64_t c = 0; c < cols; ++c) {
        double v = x.get(base + c);
        if (v > best || (std::isnan(v) && !std::isnan(best))) { best = v; arg = c; }
      }
      acc = n.op == OpKind::kArgmax ? static_cast<double>(arg) : best;
    }
    y.set(r, acc);
  }
  return Status::Ok();
}

}  // namespace

void RegisterReductionOps(OpDefTable& t) {
  for (OpKind op : {OpKind::kSum, OpKind::kMax, OpKind::kMean, OpKind::kArgmax})
    t[static_cast<int>(op)] = {InferReduction, CpuReduction, nullptr, {}, {}};
}

}  // namespace opfuse
