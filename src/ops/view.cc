// Views (reshape, transpose, slice, concat). On the CPU they copy into a dense result; on CUDA
// reshape is free and the others are small copy kernels.
//
// CPU references copy elements with CopyElements (a byte copy when input and output dtypes agree,
// get/set otherwise — the executor may hand a fused group's f32 intermediate to a view whose
// result leaves the group in the graph dtype). Slice bounds are re-checked on the bound shape,
// since a symbolic dim is only known at run time.
#include <algorithm>
#include <fmt/format.h>

#include "ops/cpu_util.h"
#include "ops/op_def.h"

namespace opfuse {
namespace {

const DimList* AttrDims(const Node& n, const char* key) {
  auto it = n.attrs.find(key);
  if (it == n.attrs.end()) return nullptr;
  return std::get_if<DimList>(&it->second);
}

// Splits a shape into its static product and its sorted symbols.
void Factor(const Shape& s, int64_t* prod, std::vector<std::string>* syms, int* minus_one) {
  *prod = 1;
  for (const auto& d : s) {
    if (!d.is_static()) syms->push_back(d.sym);
    else if (d.value == -1 && minus_one) ++*minus_one;
    else *prod *= d.value;
  }
  std::sort(syms->begin(), syms->end());
}

int64_t NormAxis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

StatusOr<std::vector<TensorType>> InferView(const Node& n, const std::vector<TensorType>& in) {
  const TensorType& x = in[0];
  switch (n.op) {
    case OpKind::kReshape: {
      const DimList* shape = AttrDims(n, "shape");
      if (!shape) return NodeError(n, "needs attribute shape=[...]");
      int64_t in_prod, out_prod;
      std::vector<std::string> in_syms, out_syms;
      int minus = 0;
      Factor(x.shape, &in_prod, &in_syms, nullptr);
      Factor(*shape, &out_prod, &out_syms, &minus);
      if (minus > 1) return NodeError(n, "reshape: at most one -1 in shape");
      for (const auto& d : *shape)
        if (d.is_static() && d.value < -1) return NodeError(n, fmt::format("reshape: negative dim {}", d.value));
      if (in_syms != out_syms) return NodeError(n, fmt::format("shape mismatch: cannot reshape {} to {} (symbols differ)", ShapeToString(x.shape), AttrToString(*shape)));
      Shape out = *shape;
      if (minus) {
        if (out_prod == 0 || in_prod % out_prod) return NodeError(n, fmt::format("shape mismatch: cannot reshape {} to {}", ShapeToString(x.shape), AttrToString(*shape)));
        for (auto& d : out)
          if (d.is_static() && d.value == -1) d.value = in_prod / out_prod;
      } else if (in_prod != out_prod) {
        return NodeError(n, fmt::format("shape mismatch: cannot reshape {} to {}", ShapeToString(x.shape), AttrToString(*shape)));
      }
      return std::vector<TensorType>{{x.dtype, out}};
    }
    case OpKind::kTranspose: {
      const DimList* perm = AttrDims(n, "perm");
      if (!perm) return NodeError(n, "needs attribute perm=[...]");
      if (perm->size() != x.shape.size()) return NodeError(n, fmt::format("transpose: perm {} has the wrong length for rank {}", AttrToString(*perm), x.shape.size()));
      std::vector<bool> seen(x.shape.size());
      Shape out;
      for (const auto& p : *perm) {
        if (!p.is_static() || p.value < 0 || p.value >= static_cast<int64_t>(x.shape.size()) || seen[p.value])
          return NodeError(n, fmt::format("transpose: perm {} is not a permutation", AttrToString(*perm)));
        seen[p.value] = true;
        out.push_back(x.shape[p.value]);
      }
      return std::vector<TensorType>{{x.dtype, out}};
    }
    case OpKind::kSlice: {
      if (x.shape.empty()) return NodeError(n, "cannot slice a scalar");
      int64_t axis = NormAxis(AttrInt(n.attrs, "axis", -1), x.shape.size());
      if (axis < 0 || axis >= static_cast<int64_t>(x.shape.size())) return NodeError(n, fmt::format("slice: axis out of range for rank {}", x.shape.size()));
      const Dim& d = x.shape[axis];
      int64_t start = AttrInt(n.attrs, "start", 0);
      bool has_end = n.attrs.count("end") > 0;
      int64_t end = AttrInt(n.attrs, "end", 0);
      Shape out = x.shape;
      if (d.is_static()) {
        if (start < 0) start += d.value;
        if (!has_end) end = d.value;
        else if (end < 0) end += d.value;
        if (start < 0 || end > d.value || start > end)
          return NodeError(n, fmt::format("slice: range [{}, {}) out of bounds for dim {}", start, end, d.value));
        out[axis] = Dim(end - start);
      } else {
        if (start < 0 || (has_end && end < 0)) return NodeError(n, fmt::format("slice: negative bounds on symbolic dim {}", d.sym));
        if (!has_end) {
          if (start != 0) return NodeError(n, fmt::format("slice: open-ended slice from {} of symbolic dim {}", start, d.sym));
        } else {
          if (start > end) return NodeError(n, "slice: start > end");
          out[axis] = Dim(end - start);
        }
      }
      return std::vector<TensorType>{{x.dtype, out}};
    }
    case OpKind::kConcat: {
      int64_t axis = NormAxis(AttrInt(n.attrs, "axis", -1), x.shape.size());
      if (axis < 0 || axis >= static_cast<int64_t>(x.shape.size())) return NodeError(n, "concat: axis out of range");
      Shape out = x.shape;
      for (size_t i = 1; i < in.size(); ++i) {
        if (in[i].dtype != x.dtype) return NodeError(n, "dtype mismatch: concat inputs must share a dtype");
        if (in[i].shape.size() != x.shape.size()) return NodeError(n, "shape mismatch: concat inputs must share a rank");
        for (size_t d = 0; d < x.shape.size(); ++d) {
          if (static_cast<int64_t>(d) == axis) continue;
          if (!(in[i].shape[d] == x.shape[d])) return NodeError(n, fmt::format("shape mismatch: concat {} with {}", ShapeToString(x.shape), ShapeToString(in[i].shape)));
        }
        const Dim& a = out[axis];
        const Dim& b = in[i].shape[axis];
        if (!a.is_static() || !b.is_static()) return NodeError(n, "joining along a symbolic dim is not supported");
        out[axis] = Dim(a.value + b.value);
      }
      return std::vector<TensorType>{{x.dtype, out}};
    }
    default:
      return NodeError(n, "not a view op");
  }
}

using In = std::vector<const HostTensor*>;
using Out = std::vector<HostTensor*>;

// Product of shape[from, to).
int64_t Prod(const std::vector<int64_t>& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < s.size(); ++i) p *= s[i];
  return p;
}

Status CpuReshape(const Node& n, const In& in, const Out& out) {
  if (in[0]->numel() != out[0]->numel())
    return NodeError(n, fmt::format("shape mismatch: cannot reshape {} elements to {}", in[0]->numel(), out[0]->numel()));
  CopyElements(*in[0], 0, *out[0], 0, out[0]->numel());
  return Status::Ok();
}

Status CpuTranspose(const Node& n, const In& in, const Out& out) {
  const HostTensor& x = *in[0];
  HostTensor& y = *out[0];
  const auto* perm = std::get_if<DimList>(&n.attrs.at("perm"));
  const size_t rank = x.shape.size();
  if (!perm || perm->size() != rank) return NodeError(n, "transpose: perm does not match the rank");
  std::vector<int64_t> istride(rank, 1);
  for (size_t d = rank; d-- > 1;) istride[d - 1] = istride[d] * x.shape[d];
  // Stride in x of each output dim; walk the output with an odometer.
  std::vector<int64_t> ostep(rank), coord(rank, 0);
  for (size_t d = 0; d < rank; ++d) ostep[d] = istride[(*perm)[d].value];
  const int64_t total = y.numel();
  int64_t src = 0;
  for (int64_t i = 0; i < total; ++i) {
    CopyElements(x, src, y, i, 1);
    for (size_t d = rank; d-- > 0;) {
      if (++coord[d] < y.shape[d]) {
        src += ostep[d];
        break;
      }
      src -= ostep[d] * (coord[d] - 1);
      coord[d] = 0;
    }
  }
  return Status::Ok();
}

Status CpuSlice(const Node& n, const In& in, const Out& out) {
  const HostTensor& x = *in[0];
  HostTensor& y = *out[0];
  const size_t rank = x.shape.size();
  int64_t axis = AttrInt(n.attrs, "axis", -1);
  if (axis < 0) axis += static_cast<int64_t>(rank);
  const int64_t dim = x.shape[axis], len = y.shape[axis];
  int64_t start = AttrInt(n.attrs, "start", 0);
  if (start < 0) start += dim;
  if (start < 0 || start + len > dim)
    return NodeError(n, fmt::format("range [{}, {}) out of bounds for axis {} of the bound shape [{}]", start, start + len,
                                    axis, fmt::join(x.shape, ", ")));
  const int64_t outer = Prod(x.shape, 0, axis), inner = Prod(x.shape, axis + 1, rank);
  for (int64_t o = 0; o < outer; ++o)
    CopyElements(x, (o * dim + start) * inner, y, o * len * inner, len * inner);
  return Status::Ok();
}

Status CpuConcat(const Node& n, const In& in, const Out& out) {
  HostTensor& y = *out[0];
  const size_t rank = y.shape.size();
  int64_t axis = AttrInt(n.attrs, "axis", -1);
  if (axis < 0) axis += static_cast<int64_t>(rank);
  const int64_t outer = Prod(y.shape, 0, axis), inner = Prod(y.shape, axis + 1, rank), ydim = y.shape[axis];
  int64_t offset = 0;
  for (const HostTensor* x : in) {
    const int64_t xdim = x->shape[axis];
    if (Prod(x->shape, axis + 1, rank) != inner || Prod(x->shape, 0, axis) != outer || offset + xdim > ydim)
      return NodeError(n, "shape mismatch: concat inputs disagree with the output shape");
    for (int64_t o = 0; o < outer; ++o)
      CopyElements(*x, o * xdim * inner, y, (o * ydim + offset) * inner, xdim * inner);
    offset += xdim;
  }
  return Status::Ok();
}

}  // namespace

void RegisterViewOps(OpDefTable& t) {
  t[static_cast<int>(OpKind::kReshape)].cpu = CpuReshape;
  t[static_cast<int>(OpKind::kTranspose)].cpu = CpuTranspose;
  t[static_cast<int>(OpKind::kSlice)].cpu = CpuSlice;
  t[static_cast<int>(OpKind::kConcat)].cpu = CpuConcat;
  for (OpKind op : {OpKind::kReshape, OpKind::kTranspose, OpKind::kSlice, OpKind::kConcat}) t[static_cast<int>(op)].infer = InferView;
  t[static_cast<int>(OpKind::kReshape)].attrs = {{"shape", AttrRule::kDims}};
  t[static_cast<int>(OpKind::kTranspose)].attrs = {{"perm", AttrRule::kDims}};
  t[static_cast<int>(OpKind::kSlice)].attrs = {{"axis", AttrRule::kInt}, {"start", AttrRule::kInt}, {"end", AttrRule::kInt}};
  t[static_cast<int>(OpKind::kConcat)].attrs = {{"axis", AttrRule::kInt}};
}

}  // namespace opfuse
