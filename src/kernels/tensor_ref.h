// TensorRef: a device tensor as the planners see it (pointer, dtype, bound shape) — host-only, so
// the planning rules that read it (attention_plan.h, gemv_args.h) compile without CUDA.
#pragma once
#include <cstdint>
#include <vector>

#include "opfuse/graph.h"

namespace opfuse::kernels {

// A device tensor with a bound (concrete) shape, contiguous row-major.
struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

}  // namespace opfuse::kernels
