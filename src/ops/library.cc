// Library ops (matmul, attention, embedding): opaque to the fuser; cuBLASLt / hand-written
// kernels on CUDA, straightforward loops (f32 accumulation) on the CPU.
#include <fmt/format.h>

#include "ops/op_def.h"

namespace opfuse {
namespace {

bool DimsMayMatch(const Dim& a, const Dim& b) { return a == b; }

StatusOr<std::vector<TensorType>> InferLibrary(const Node& n, const std::vector<TensorType>& in) {
  switch (n.op) {
    case OpKind::kMatmul: {
      const TensorType &a = in[0], &b = in[1];
      if (a.dtype != b.dtype) return NodeError(n, fmt::format("dtype mismatch: a is {}, b is {}", DTypeName(a.dtype), DTypeName(b.dtype)));
      if (!IsFloat(a.dtype)) return NodeError(n, fmt::format("dtype mismatch: matmul needs float, got {}", DTypeName(a.dtype)));
      if (a.shape.empty()) return NodeError(n, "shape mismatch: a must have rank >= 1");
      if (b.shape.size() != 2) return NodeError(n, fmt::format("shape mismatch: b must be 2-d, got {}", ShapeToString(b.shape)));
      const bool tb = AttrInt(n.attrs, "transpose_b", 0) != 0;
      const Dim& k_b = tb ? b.shape[1] : b.shape[0];
      const Dim& n_b = tb ? b.shape[0] : b.shape[1];
      if (!DimsMayMatch(a.shape.back(), k_b))
        return NodeError(n, fmt::format("shape mismatch: a {} and b {}{} disagree on K", ShapeToString(a.shape), ShapeToString(b.shape), tb ? " (transpose_b=1)" : ""));
      if (in.size() == 3) {
        if (in[2].dtype != a.dtype) return NodeError(n, "dtype mismatch: bias dtype differs from a");
        if (in[2].shape.size() != 1 || !(in[2].shape[0] == n_b))
          return NodeError(n, fmt::format("shape mismatch: bias must be [{}], got {}", n_b.ToString(), ShapeToString(in[2].shape)));
      }
      TensorType out = a;
      out.shape.back() = n_b;
      return std::vector<TensorType>{out};
    }
    case OpKind::kAttention: {
      const TensorType &q = in[0], &k = in[1], &v = in[2];
      for (const auto* t : {&k, &v})
        if (t->dtype != q.dtype) return NodeError(n, "dtype mismatch: q, k, v must share a dtype");
      if (!IsFloat(q.dtype)) return NodeError(n, "dtype mismatch: attention needs float");
      if (q.shape.size() != 3 || k.shape.size() != 3 || v.shape.size() != 3)
        return NodeError(n, fmt::format("shape mismatch: q, k, v must be [tokens, heads, head_dim], got {}, {}, {}",
                                        ShapeToString(q.shape), ShapeToString(k.shape), ShapeToString(v.shape)));
      if (!(k.shape == v.shape)) return NodeError(n, fmt::format("shape mismatch: k {} and v {} differ", ShapeToString(k.shape), ShapeToString(v.shape)));
      if (!(q.shape[2] == k.shape[2])) return NodeError(n, "shape mismatch: q and k head_dim differ");
      if (q.shape[1].is_static() && k.shape[1].is_static() && (k.shape[1].value == 0 || q.shape[1].value % k.shape[1].value))
        return NodeError(n, fmt::format("shape mismatch: {} query heads not a multiple of {} kv heads", q.shape[1].value, k.shape[1].value));
      return std::vector<TensorType>{q};
    }
    case OpKind::kEmbedding: {
      const TensorType &table = in[0], &ids = in[1];
      if (table.shape.size() != 2) return NodeError(n, fmt::format("shape mismatch: table must be [vocab, dim], got {}", ShapeToString(table.shape)));
      if (!IsInt(ids.dtype)) return NodeError(n, fmt::format("dtype mismatch: ids must be i32 or i64, got {}", DTypeName(ids.dtype)));
      TensorType out{table.dtype, ids.shape};
      out.shape.push_back(table.shape[1]);
      return std::vector<TensorType>{out};
    }
    default:
      return NodeError(n, "not a library op");
  }
}

}  // namespace

void RegisterLibraryOps(OpDefTable& t) {
  for (OpKind op : {OpKind::kMatmul, OpKind::kAttention, OpKind::kEmbedding}) t[static_cast<int>(op)].infer = InferLibrary;
}

}  // namespace opfuse
