// CPU references of the composite ops (rms_norm, add_rms_norm, layer_norm, softmax, swiglu,
// geglu, rope) — the semantics every fused kernel and every decomposition is checked against.
//
// Kept apart from composite.cc (inference + decompositions) so the two can evolve independently;
// RegisterCompositeCpu (called from op_registry.cc after RegisterCompositeOps) only fills
// OpDef::cpu. Math: norms, softmax and rope entirely in double (free here, and it avoids f32
// cancellation in x - mean, x*w + b and x*cos + rot*sin), except swiglu/geglu, whose activations
// use the f32 scalar functions of scalar_ops.h so that they agree bit for bit with silu/gelu on
// the op-by-op path. Each result is rounded once to the output dtype by HostTensor::set.
// Inputs are read through get(), outputs written through set(), so any float dtype mix works
// (the executor keeps fused-group intermediates in f32).
//
// Attribute defaults: rms_norm/add_rms_norm eps 1e-6; layer_norm eps 1e-5; softmax scale 1.0,
// causal 0; geglu approximate="none" (erf gelu) or "tanh" (gelu_tanh). Causal softmax works on
// the last two dims [.., Tq, Tk]: key j is masked for query i when j > i + (Tk - Tq) (aligned to
// the end, as in decoding with a KV cache). A row with every key masked (only possible when
// Tq > Tk or through an additive -inf mask) is written as zeros.
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "ops/broadcast.h"
#include "ops/op_def.h"
#include "ops/scalar_ops.h"

namespace opfuse {
namespace {

using In = std::vector<const HostTensor*>;
using Out = std::vector<HostTensor*>;

Status CpuRmsNorm(const Node& n, const In& in, const Out& out) {
  const HostTensor& x = *in[0];
  const HostTensor* w = in.size() > 1 ? in[1] : nullptr;
  HostTensor& y = *out[0];
  const double eps = AttrFloat(n.attrs, "eps", 1e-6);
  const int64_t rows = x.rows(), cols = x.cols();
  if (cols == 0) return Status::Ok();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * cols;
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double v = x.get(base + c);
      ss += v * v;
    }
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) {
      double v = x.get(base + c) * inv;
      if (w) v *= w->get(c);
      y.set(base + c, v);
    }
  }
  return Status::Ok();
}

// (x, residual, weight) -> (y, s): s = x + residual rounded to s's dtype (as the op-by-op path
// stores it), then y = rms_norm(s) * weight computed from the rounded s.
Status CpuAddRmsNorm(const Node& n, const In& in, const Out& out) {
  const HostTensor &x = *in[0], &res = *in[1], &w = *in[2];
  HostTensor &y = *out[0], &s = *out[1];
  const double eps = AttrFloat(n.attrs, "eps", 1e-6);
  const int64_t rows = x.rows(), cols = x.cols();
  if (cols == 0) return Status::Ok();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * cols;
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c) {
      s.set(base + c, static_cast<float>(x.get(base + c)) + static_cast<float>(res.get(base + c)));
      const double v = s.get(base + c);
      ss += v * v;
    }
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) y.set(base + c, s.get(base + c) * inv * w.get(c));
  }
  return Status::Ok();
}

Status CpuLayerNorm(const Node& n, const In& in, const Out& out) {
  const HostTensor& x = *in[0];
  const HostTensor* w = in.size() > 1 ? in[1] : nullptr;
  const HostTensor* b = in.size() > 2 ? in[2] : nullptr;
  HostTensor& y = *out[0];
  const double eps = AttrFloat(n.attrs, "eps", 1e-5);
  const int64_t rows = x.rows(), cols = x.cols();
  if (cols == 0) return Status::Ok();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * cols;
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += x.get(base + c);
    const double mean = sum / static_cast<double>(cols);
    double var = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double d = x.get(base + c) - mean;
      var += d * d;
    }
    var /= static_cast<double>(cols);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t c = 0; c < cols; ++c) {
      double v = (x.get(base + c) - mean) * inv;
      if (w) v *= w->get(c);
      if (b) v += b->get(c);
      y.set(base + c, v);
    }
  }
  return Status::Ok();
}

Status CpuSoftmax(const Node& n, const In& in, const Out& out) {
  const HostTensor& x = *in[0];
  const HostTensor* mask = in.size() > 1 ? in[1] : nullptr;
  HostTensor& y = *out[0];
  const double scale = AttrFloat(n.attrs, "scale", 1.0);
  const bool causal = AttrInt(n.attrs, "causal", 0) != 0;
  const int64_t rows = x.rows(), cols = x.cols();
  const int64_t tq = x.shape.size() >= 2 ? x.shape[x.shape.size() - 2] : 1;
  if (cols == 0) return Status::Ok();
  std::optional<BroadcastIndexer> mi;
  if (mask) mi.emplace(x.shape, mask->shape);
  std::vector<double> z(static_cast<size_t>(cols));
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * cols;
    const int64_t i = tq > 0 ? r % tq : 0;
    const int64_t last_visible = i + (cols - tq);  // keys j > this are masked when causal
    double mx = kNegInf;
    for (int64_t c = 0; c < cols; ++c) {
      double v = x.get(base + c) * scale;
      if (mask) v += mask->get((*mi)(base + c));
      if (causal && c > last_visible) v = kNegInf;
      z[c] = v;
      if (v > mx || std::isnan(v)) mx = std::isnan(mx) ? mx : v;
    }
    if (mx == kNegInf) {  // every key masked
      for (int64_t c = 0; c < cols; ++c) y.set(base + c, 0.0);
      continue;
    }
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) {
      z[c] = std::exp(z[c] - mx);
      sum += z[c];
    }
    for (int64_t c = 0; c < cols; ++c) y.set(base + c, z[c] / sum);
  }
  return Status::Ok();
}

Status CpuGatedUnit(const Node& n, const In& in, const Out& out) {
  const HostTensor &gate = *in[0], &up = *in[1];
  HostTensor& y = *out[0];
  OpKind act = OpKind::kSilu;
  if (n.op == OpKind::kGeglu) {
    const std::string approx = AttrString(n.attrs, "approximate", "none");
    if (approx != "none" && approx != "tanh")
      return NodeError(n, fmt::format("approximate must be \"none\" or \"tanh\", got \"{}\"", approx));
    act = approx == "tanh" ? OpKind::kGeluTanh : OpKind::kGelu;
  }
  for (int64_t i = 0; i < y.numel(); ++i)
    y.set(i, ScalarUnary(act, static_cast<float>(gate.get(i))) * static_cast<float>(up.get(i)));
  return Status::Ok();
}

// x*cos + rotate_half(x)*sin; rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2]).
Status CpuRope(const Node& n, const In& in, const Out& out) {
  const HostTensor &x = *in[0], &cos = *in[1], &sin = *in[2];
  HostTensor& y = *out[0];
  const int64_t d = x.cols(), half = d / 2;
  if (d % 2) return NodeError(n, fmt::format("shape mismatch: rope needs an even last dim, got {}", d));
  const BroadcastIndexer ci(x.shape, cos.shape), si(x.shape, sin.shape);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = i % d;
    const double rot = c < half ? -x.get(i + half) : x.get(i - half);
    y.set(i, x.get(i) * cos.get(ci(i)) + rot * sin.get(si(i)));
  }
  return Status::Ok();
}

}  // namespace

void RegisterCompositeCpu(OpDefTable& t) {
  t[static_cast<int>(OpKind::kRmsNorm)].cpu = CpuRmsNorm;
  t[static_cast<int>(OpKind::kAddRmsNorm)].cpu = CpuAddRmsNorm;
  t[static_cast<int>(OpKind::kLayerNorm)].cpu = CpuLayerNorm;
  t[static_cast<int>(OpKind::kSoftmax)].cpu = CpuSoftmax;
  t[static_cast<int>(OpKind::kSwiglu)].cpu = CpuGatedUnit;
  t[static_cast<int>(OpKind::kGeglu)].cpu = CpuGatedUnit;
  t[static_cast<int>(OpKind::kRope)].cpu = CpuRope;
}

}  // namespace opfuse
