// Interpreter of the kernel IR (see kernel_interpreter.h for why it exists).
#include "codegen/kernel_interpreter.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "ops/scalar_ops.h"

namespace opfuse::codegen {
namespace {

float RoundTo(float v, DType t) {
  switch (t) {
    case DType::kBF16: return BF16ToFloat(FloatToBF16(v));
    case DType::kF16: return HalfToFloat(FloatToHalf(v));
    default: return v;
  }
}

struct Indexer {
  Access access;
  std::vector<int64_t> strides;  // kGeneral: per space dim, 0 where broadcast
};

class Interp {
 public:
  Interp(const Kernel& k, const std::vector<const HostTensor*>& in, const std::vector<HostTensor*>& out,
         std::vector<int64_t> space)
      : k_(k), in_(in), out_(out), space_(std::move(space)) {
    cols_ = space_.back();
    rows_ = 1;
    for (size_t i = 0; i + 1 < space_.size(); ++i) rows_ *= space_[i];
    for (const auto& t : k_.inputs) idx_.push_back(MakeIndexer(t));
    val_.resize(k_.exprs.size());
    row_.resize(k_.exprs.size());
    row_done_.resize(k_.exprs.size());
  }

  Status Run() {
    for (int64_t r = 0; r < rows_; ++r) {
      r_ = r;
      std::fill(row_done_.begin(), row_done_.end(), 0);
      for (int p = 1; p <= k_.num_passes; ++p) {
        std::vector<int> reds;
        for (size_t e = 0; e < k_.exprs.size(); ++e)
          if (k_.exprs[e].kind == ExprKind::kReduce && k_.exprs[e].depth == p) reds.push_back(static_cast<int>(e));
        std::vector<float> acc(reds.size());
        for (size_t i = 0; i < reds.size(); ++i)
          acc[i] = k_.exprs[reds[i]].op == OpKind::kMax ? -std::numeric_limits<float>::infinity() : 0.0f;
        for (int64_t c = 0; c < cols_; ++c) {
          NewElement(c);
          for (size_t i = 0; i < reds.size(); ++i) {
            float v = Eval(k_.exprs[reds[i]].args[0]);
            acc[i] = k_.exprs[reds[i]].op == OpKind::kMax ? std::fmax(acc[i], v) : acc[i] + v;
          }
        }
        for (size_t i = 0; i < reds.size(); ++i) {
          row_[reds[i]] = acc[i];
          row_done_[reds[i]] = 1;
        }
      }
      for (size_t o = 0; o < k_.outputs.size(); ++o) {
        const auto& out = k_.outputs[o];
        if (out.tensor.access == Access::kFull) {
          for (int64_t c = 0; c < cols_; ++c) {
            NewElement(c);
            out_[o]->set(r * cols_ + c, Eval(out.expr));
          }
        } else if (out.tensor.access == Access::kRowScalar) {
          NewElement(0);
          out_[o]->set(r, Eval(out.expr));
        } else if (out.tensor.access == Access::kScalar || out.tensor.access == Access::kChannel) {
          // Same value for every row: written by every row, like the CUDA kernel (benign race there).
          for (int64_t c = 0; c < (out.tensor.access == Access::kChannel ? cols_ : 1); ++c) {
            NewElement(c);
            out_[o]->set(c, Eval(out.expr));
          }
        } else {
          return Internal("general-access output");
        }
      }
    }
    return Status::Ok();
  }

 private:
  Indexer MakeIndexer(const KernelTensor& t) {
    Indexer ix{t.access, {}};
    if (t.access != Access::kGeneral) return ix;
    ix.strides.assign(space_.size(), 0);
    int64_t stride = 1;
    const size_t off = space_.size() - t.type.shape.size();
    for (size_t d = space_.size(); d-- > off;) {
      const Dim& dim = t.type.shape[d - off];
      int64_t n = space_[d];
      bool varies = t.varies[d];
      if (varies) ix.strides[d] = stride;
      stride *= varies ? n : (dim.is_static() ? dim.value : 1);
    }
    return ix;
  }
  int64_t Index(int in, int64_t c) const {
    const Indexer& ix = idx_[in];
    switch (ix.access) {
      case Access::kFull: return r_ * cols_ + c;
      case Access::kChannel: return c;
      case Access::kRowScalar: return r_;
      case Access::kScalar: return 0;
      case Access::kGeneral: {
        int64_t idx = c * ix.strides.back(), rem = r_;
        for (size_t d = space_.size() - 1; d-- > 0;) {
          idx += (rem % space_[d]) * ix.strides[d];
          rem /= space_[d];
        }
        return idx;
      }
    }
    return 0;
  }
  void NewElement(int64_t c) {
    c_ = c;
    ++stamp_;
    if (stamp_of_.size() != k_.exprs.size()) stamp_of_.assign(k_.exprs.size(), 0);
  }
  float Eval(int id) {
    const Expr& e = k_.exprs[id];
    if (e.row_level) {
      if (!row_done_[id]) {
        row_[id] = Compute(e);
        row_done_[id] = 1;
      }
      return row_[id];
    }
    if (stamp_of_[id] != stamp_) {
      val_[id] = Compute(e);
      stamp_of_[id] = stamp_;
    }
    return val_[id];
  }
  float Compute(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kLoad: return static_cast<float>(in_[e.input]->get(Index(e.input, c_)));
      case ExprKind::kLoadRotHalf: {
        int64_t half = cols_ / 2;
        int64_t src = c_ < half ? c_ + half : c_ - half;
        float v = static_cast<float>(in_[e.input]->get(Index(e.input, src)));
        return c_ < half ? -v : v;
      }
      case ExprKind::kConst: return static_cast<float>(e.constant);
      case ExprKind::kCols: return static_cast<float>(cols_);
      case ExprKind::kRound: return RoundTo(Eval(e.args[0]), e.dtype);
      case ExprKind::kCausal: {
        int64_t tq = space_[space_.size() - 2];
        int64_t qi = r_ % tq;
        float v = Eval(e.args[0]);
        return c_ <= qi + (cols_ - tq) ? v : -std::numeric_limits<float>::infinity();
      }
      case ExprKind::kReduce: return row_[&e - k_.exprs.data()];  // filled by its pass
      case ExprKind::kOp: {
        if (e.op == OpKind::kWhere) return Eval(e.args[0]) != 0.0f ? Eval(e.args[1]) : Eval(e.args[2]);
        if (e.args.size() == 1) return ScalarUnary(e.op, Eval(e.args[0]));
        return ScalarBinary(e.op, Eval(e.args[0]), Eval(e.args[1]));
      }
    }
    return std::nanf("");
  }

  const Kernel& k_;
  const std::vector<const HostTensor*>& in_;
  const std::vector<HostTensor*>& out_;
  std::vector<int64_t> space_;
  int64_t rows_ = 1, cols_ = 1, r_ = 0, c_ = 0;
  std::vector<Indexer> idx_;
  std::vector<float> val_, row_;
  std::vector<char> row_done_;
  std::vector<uint64_t> stamp_of_;
  uint64_t stamp_ = 0;
};

}  // namespace

Status RunKernelCpu(const Kernel& k, const std::vector<const HostTensor*>& inputs,
                    const std::vector<HostTensor*>& outputs, const Bindings& bindings) {
  if (inputs.size() != k.inputs.size() || outputs.size() != k.outputs.size())
    return InvalidArgument(fmt::format("{}: expected {} inputs and {} outputs, got {} and {}", k.name, k.inputs.size(),
                                       k.outputs.size(), inputs.size(), outputs.size()));
  OPFUSE_ASSIGN_OR_RETURN(std::vector<int64_t> space, BindShape(k.space, bindings));
  for (size_t i = 0; i < inputs.size(); ++i) {
    OPFUSE_ASSIGN_OR_RETURN(std::vector<int64_t> s, BindShape(k.inputs[i].type.shape, bindings));
    if (s != inputs[i]->shape) return InvalidArgument(fmt::format("{}: input '{}' has the wrong shape", k.name, k.inputs[i].name));
  }
  Interp interp(k, inputs, outputs, space);
  return interp.Run();
}

}  // namespace opfuse::codegen
