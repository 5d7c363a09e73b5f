// Elementwise kernel table for the arithmetic binary ops (add sub mul div maximum minimum pow mod);
// see elementwise.cu for the design and elementwise_kernels.cuh for why this is its own file.
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

EwKernels ArithKernels(OpKind op, DType t) {
  switch (op) {
    case OpKind::kAdd: return BinaryFor<BAdd>(t);
    case OpKind::kSub: return BinaryFor<BSub>(t);
    case OpKind::kMul: return BinaryFor<BMul>(t);
    case OpKind::kDiv: return BinaryFor<BDiv>(t);
    case OpKind::kMaximum: return BinaryFor<BMaximum>(t);
    case OpKind::kMinimum: return BinaryFor<BMinimum>(t);
    case OpKind::kPow: return BinaryFor<BPow>(t);
    case OpKind::kMod: return BinaryFor<BMod>(t);
    default: return {};
  }
}

}  // namespace opfuse::kernels::ew
