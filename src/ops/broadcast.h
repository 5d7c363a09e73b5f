// Numpy-style broadcasting on bound shapes, shared by every CPU reference that reads an operand
// broadcast to an output (elementwise ops, softmax masks, rope cos/sin).
//
// BroadcastIndex maps one flat output index to the operand's flat index (simple, no state).
// BroadcastIndexer precomputes the operand's strides (0 on broadcast dims) once, for loops over
// every element of a large output; both right-align the operand's shape against the output's.
#pragma once
#include <cstdint>
#include <vector>

namespace opfuse {

// Index of the element of an operand (shape `ishape`, right-aligned) that broadcasts to flat
// index `i` of `oshape`.
inline int64_t BroadcastIndex(int64_t i, const std::vector<int64_t>& oshape, const std::vector<int64_t>& ishape) {
  int64_t idx = 0, stride = 1;
  const size_t off = oshape.size() - ishape.size();
  for (size_t d = oshape.size(); d-- > 0;) {
    int64_t coord = i % oshape[d];
    i /= oshape[d];
    if (d >= off) {
      int64_t n = ishape[d - off];
      if (n != 1) idx += coord * stride;
      stride *= n;
    }
  }
  return idx;
}

class BroadcastIndexer {
 public:
  BroadcastIndexer(const std::vector<int64_t>& oshape, const std::vector<int64_t>& ishape) : oshape_(oshape) {
    strides_.assign(oshape.size(), 0);
    identity_ = oshape == ishape;
    int64_t stride = 1;
    const size_t off = oshape.size() - ishape.size();
    for (size_t d = oshape.size(); d-- > off;) {
      int64_t n = ishape[d - off];
      strides_[d] = n == 1 ? 0 : stride;
      stride *= n;
    }
  }
  int64_t operator()(int64_t i) const {
    if (identity_) return i;
    int64_t idx = 0;
    for (size_t d = oshape_.size(); d-- > 0;) {
      const int64_t n = oshape_[d];
      idx += (i % n) * strides_[d];
      i /= n;
    }
    return idx;
  }

 private:
  std::vector<int64_t> oshape_, strides_;
  bool identity_ = false;
};

}  // namespace opfuse
