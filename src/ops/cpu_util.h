// Small helpers for the CPU references of src/ops: bulk conversion of a HostTensor to an f32
// buffer and back (specialised loops for f32/bf16 so matmul and attention do not pay a per-element
// dtype switch), and element copies that are byte copies when the dtypes agree and go through
// get/set (rounding to the destination dtype) when they do not — which happens when the executor
// keeps a fused group's intermediates in f32 (RunGraphCpu with fuse_groups).
#pragma once
#include <cstring>
#include <vector>

#include "ir/host_tensor.h"

namespace opfuse {

inline std::vector<float> ReadF32(const HostTensor& t) {
  const int64_t n = t.numel();
  std::vector<float> out(static_cast<size_t>(n));
  switch (t.dtype) {
    case DType::kF32:
      if (n) std::memcpy(out.data(), t.data.data(), static_cast<size_t>(n) * 4);
      break;
    case DType::kBF16: {
      const uint8_t* p = t.data.data();
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = BF16ToFloat(h);
      }
      break;
    }
    default:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(t.get(i));
  }
  return out;
}

// Stores `v` (t.numel() floats) into t, rounding to t's dtype.
inline void WriteF32(HostTensor& t, const float* v) {
  const int64_t n = t.numel();
  switch (t.dtype) {
    case DType::kF32:
      if (n) std::memcpy(t.data.data(), v, static_cast<size_t>(n) * 4);
      break;
    case DType::kBF16: {
      uint8_t* p = t.data.data();
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h = FloatToBF16(v[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      break;
    }
    default:
      for (int64_t i = 0; i < n; ++i) t.set(i, v[i]);
  }
}

// Copies `count` elements src[so...] -> dst[d0...].
inline void CopyElements(const HostTensor& src, int64_t so, HostTensor& dst, int64_t d0, int64_t count) {
  if (count <= 0) return;
  if (src.dtype == dst.dtype) {
    const int sz = DTypeSize(src.dtype);
    std::memcpy(dst.data.data() + d0 * sz, src.data.data() + so * sz, static_cast<size_t>(count) * sz);
    return;
  }
  const bool ints = !IsFloat(src.dtype) && !IsFloat(dst.dtype);
  for (int64_t i = 0; i < count; ++i) {
    if (ints) dst.set(d0 + i, static_cast<double>(src.get_int(so + i)));
    else dst.set(d0 + i, src.get(so + i));
  }
}

}  // namespace opfuse
