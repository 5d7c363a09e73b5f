// Elementwise kernel table for the comparisons (less_than ... not_equal -> bool); see
// elementwise.cu for the design and elementwise_kernels.cuh for why this is its own file.
#include "kernels/elementwise_kernels.cuh"

namespace opfuse::kernels::ew {
namespace {
template <class F>
EwKernels BinaryFor(DType t) {
  switch (t) {
    case DType::kF32: return Make<BinaryE<F, float>>(true);
    case DType::kF16: return Make<BinaryE<F, __half>>(true);
    case DType::kBF16: return Make<BinaryE<F, __nv_bfloat16>>(true);
    case DType::kI32: if constexpr (F::kInt) return Make<BinaryE<F, int32_t>>(true); else return {};
    case DType::kI64: if constexpr (F::kInt) return Make<BinaryE<F, int64_t>>(true); else return {};
    case DType::kBool: if constexpr (F::kCompare) return Make<BinaryE<F, BoolStorage>>(true); else return {};
  }
  return {};
}

}  // namespace

EwKernels CompareKernels(OpKind op, DType t) {
  switch (op) {
    case OpKind::kLessThan: return BinaryFor<BLessThan>(t);
    case OpKind::kLessEqual: return BinaryFor<BLessEqual>(t);
    case OpKind::kGreaterThan: return BinaryFor<BGreaterThan>(t);
    case OpKind::kGreaterEqual: return BinaryFor<BGreaterEqual>(t);
    case OpKind::kEqual: return BinaryFor<BEqual>(t);
    case OpKind::kNotEqual: return BinaryFor<BNotEqual>(t);
    default: return {};
  }
}

}  // namespace opfuse::kernels::ew
