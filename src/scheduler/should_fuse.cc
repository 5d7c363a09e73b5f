// should_fuse (see should_fuse.h): config rules -> profile (log-rows interpolation, margin) -> cost model.
#include "scheduler/should_fuse.h"

#include <cmath>
#include <set>

#include <fmt/format.h>

#include "fusion/group_info.h"
#include "ops/op_def.h"
#include "target/launch_shape.h"

namespace opfuse::scheduler {

const char* SourceName(DecisionSource s) {
  switch (s) {
    case DecisionSource::kConfig: return "config";
    case DecisionSource::kProfile: return "profile";
    case DecisionSource::kCostModel: return "cost_model";
  }
  return "?";
}

DeviceConstants DeviceConstants::Defaults() {
  // Round figures for an H100/H200-class GPU; never measured here, and every reason using them says so.
  return {3000.0, 4.0, "default constants (not measured): 3000 GB/s, 4 us/launch"};
}

DeviceConstants DeviceConstants::FromDevice(const DeviceInfo& d) {
  const DeviceConstants def = Defaults();
  DeviceConstants c;
  c.copy_gbps = d.copy_gbps > 0 ? d.copy_gbps : def.copy_gbps;
  c.launch_us = d.launch_us > 0 ? d.launch_us : def.launch_us;
  c.label = fmt::format("{} GB/s{}, {} us/launch{} ({})", c.copy_gbps, d.copy_gbps > 0 ? " measured" : " default (not measured)",
                        c.launch_us, d.launch_us > 0 ? " measured" : " default (not measured)", d.name);
  return c;
}

namespace {

bool IsPattern(const FusionGroup& grp) { return grp.kind.rfind("pattern:", 0) == 0; }

// A composite op that can only run as itself (no primitive form, e.g. causal softmax).
bool Indivisible(const Graph& g, int n) {
  const Node& node = g.nodes[n];
  if (GetOpInfo(node.op).kind != FusionKind::kComposite) return false;
  const OpDef& def = GetOpDef(node.op);
  if (!def.decompose) return true;
  Graph scratch = g;
  return !def.decompose(scratch, node).ok();
}

// The variant of a group that is not fused: library ops (and indivisible composites) run their
// library kernel, everything else op by op.
Variant NotFusedVariant(const Graph& g, const FusionGroup& grp) {
  for (int n : grp.nodes)
    if (GetOpInfo(g.nodes[n].op).kind == FusionKind::kLibrary || Indivisible(g, n)) return Variant::kLibrary;
  return Variant::kUnfused;
}

std::optional<int64_t> Bytes(const Graph& g, int v, const Bindings& b) {
  auto n = NumElements(g.values[v].type.shape, b);
  if (!n) return std::nullopt;
  return *n * DTypeSize(g.values[v].type.dtype);
}

// A profile point: measured (or interpolated) variant times and how it was obtained.
struct Point {
  std::optional<double> unfused, library, jit, cublaslt;
  std::string how;
};

std::optional<double> Lerp(const std::optional<double>& a, const std::optional<double>& b, double t) {
  if (!a || !b) return std::nullopt;
  return *a + (*b - *a) * t;
}

Point FromEntry(const ProfileEntry& e, const std::string& how) {
  return {e.unfused_us, e.library_us, e.jit_us, e.cublaslt_us, how};
}

// Nearest measured rows per DESIGN.md: exact, interpolated in log(rows), or the nearest end within 2x.
std::optional<Point> Lookup(const ProfileDb& db, const GroupShape& s, std::string* why_not) {
  const auto series = db.Series(s.pattern, s.dtype, *s.cols);
  if (series.empty()) {
    *why_not = fmt::format("profile has no entry for {} {} cols={}", s.pattern, s.dtype, *s.cols);
    return std::nullopt;
  }
  const int64_t r = *s.rows;
  const std::string key = fmt::format("{} {} cols={}", s.pattern, s.dtype, *s.cols);
  for (size_t i = 0; i < series.size(); ++i) {
    const ProfileEntry& e = *series[i];
    if (e.rows == r) return FromEntry(e, fmt::format("profile point {} rows={} ({} samples)", key, r, e.samples));
    if (e.rows > r) {
      if (i == 0) {
        if (e.rows <= 2 * r)
          return FromEntry(e, fmt::format("nearest profile point {} rows={} (asked rows={}, within 2x)", key, e.rows, r));
        *why_not = fmt::format("rows={} is below the profiled range of {} (smallest rows={}, more than 2x away)", r, key, e.rows);
        return std::nullopt;
      }
      const ProfileEntry& lo = *series[i - 1];
      const double t = (std::log(double(r)) - std::log(double(lo.rows))) / (std::log(double(e.rows)) - std::log(double(lo.rows)));
      return Point{Lerp(lo.unfused_us, e.unfused_us, t), Lerp(lo.library_us, e.library_us, t), Lerp(lo.jit_us, e.jit_us, t),
                   Lerp(lo.cublaslt_us, e.cublaslt_us, t),
                   fmt::format("interpolated in log(rows) between {} rows={} and rows={} (t={:.2f})", key, lo.rows, e.rows, t)};
    }
  }
  const ProfileEntry& last = *series.back();
  if (r <= 2 * last.rows)
    return FromEntry(last, fmt::format("nearest profile point {} rows={} (asked rows={}, within 2x)", key, last.rows, r));
  // Above the measured range a group's time is its bytes, which grow with rows: every variant's time
  // at the largest measured rows, scaled by rows, so that point's measured ranking decides (the cost
  // model, which knows bytes and launches but not how well each kernel streams them, would not).
  // Below the range fixed costs dominate and nothing scales: the cost model decides there.
  const double f = static_cast<double>(r) / static_cast<double>(last.rows);
  auto scaled = [f](const std::optional<double>& t) { return t ? std::optional<double>(*t * f) : std::nullopt; };
  return Point{scaled(last.unfused_us), scaled(last.library_us), scaled(last.jit_us), scaled(last.cublaslt_us),
               fmt::format("profile point {} rows={} scaled by rows to rows={} (above the profiled range: its "
                           "measured ranking holds)",
                           key, last.rows, r)};
}

std::string Us(double v) { return fmt::format("{:.2f} us", v); }

// Without a measurement, which kernel a fused pattern group runs: its library kernel, except where the
// JIT kernel measured faster across the untuned sweeps (docs/BENCHMARKS.md, "Library or JIT for a
// pattern group"):
//   * row patterns off the 16-byte grid. The library row kernels load a row in 16-byte vectors only
//     where it starts on the grid (columns x element size a multiple of 16); off it they take their
//     shifted path, and there the JIT kernel (an aligned body and masked ends) was faster for the norms
//     at every width up to the register path's, and for the softmax (plain, scaled, causal) up to about
//     a thousand columns, while the library softmax was faster at a few thousand columns with hundreds
//     of rows or more. So rms_norm, add_rms_norm and layer_norm off the grid up to kMaxRegisterCols
//     columns, and softmax without a mask tensor off the grid up to kSoftmaxJitMaxCols columns;
//   * geglu in its erf form, at every shape: the JIT's pointwise kernel was faster than the library's
//     GLU kernel from decode sizes (its 4-byte-pack decode function) to prefill sizes (swiglu, the
//     same kernel with a cheaper activation, is level and stays on the library, which fuse_matmul's
//     GEMV epilogue shares).
// The JIT group runs its library kernel while it compiles in the background. Everything else, and a
// row group whose width is unknown, -> the library. Returns the reason for the JIT, or nullopt.
constexpr int64_t kSoftmaxJitMaxCols = 2048;
std::optional<std::string> PatternOnTheJit(const Graph& g, const FusionGroup& grp) {
  const auto compute = fusion::ComputeNodes(g, grp.nodes);
  if (compute.size() != 1) return std::nullopt;
  const Node& node = g.nodes[compute.front()];
  if (node.op == OpKind::kGeglu) {
    if (AttrString(node.attrs, "approximate", "none") != "none") return std::nullopt;
    return std::string("geglu: the JIT kernel (faster than the library's GLU kernel at decode and prefill sizes)");
  }
  const bool row_norm = node.op == OpKind::kRmsNorm || node.op == OpKind::kAddRmsNorm || node.op == OpKind::kLayerNorm;
  const bool plain_softmax = node.op == OpKind::kSoftmax && node.inputs.size() == 1;
  if (!row_norm && !plain_softmax) return std::nullopt;
  const TensorType& x = g.values[node.inputs[0]].type;
  if (x.shape.empty() || !x.shape.back().is_static()) return std::nullopt;
  const int64_t cols = x.shape.back().value;
  const int elem_bytes = DTypeSize(x.dtype);
  const int64_t max_cols = row_norm ? target::kMaxRegisterCols : kSoftmaxJitMaxCols;
  // the library kernels' own test for their shifted-row path (aligned bases, rows off the grid)
  if (!target::ChooseRowAccess(cols, elem_bytes, /*all_aligned=*/true).shifted || cols > max_cols) return std::nullopt;
  return fmt::format("rows of {} {} elements ({} B) are off the 16-byte grid and within {} columns: the JIT kernel "
                     "(the library's shifted rows are slower there)",
                     cols, DTypeName(x.dtype), cols * elem_bytes, max_cols);
}

// Picks between unfused and the best allowed fused variant with the margin. Fills `out`.
void Choose(double unfused, std::optional<double> library, std::optional<double> jit, bool allow_library, double margin,
            FusionChoice& out, const std::string& evidence, const std::string& terms) {
  Variant best = Variant::kUnfused;
  double best_us = 0;
  if (allow_library && library) best = Variant::kLibrary, best_us = *library;
  if (jit && (best == Variant::kUnfused || *jit < best_us)) best = Variant::kJit, best_us = *jit;
  out.evidence = evidence;
  const double saved = unfused - best_us;
  const double frac = unfused > 0 ? saved / unfused : 0;
  if (best != Variant::kUnfused && frac > margin) {
    out.variant = best;
    out.expected_us_saved = saved;
    out.decision = FusionDecision::Yes(fmt::format("{}: {}; {} saves {} ({:.1f}%) > margin {:.0f}%", evidence, terms,
                                                   VariantName(best), Us(saved), 100 * frac, 100 * margin));
  } else {
    out.variant = Variant::kUnfused;
    out.expected_us_saved = 0;
    out.decision = FusionDecision::No(
        best == Variant::kUnfused
            ? fmt::format("{}: {}; no fused variant measured", evidence, terms)
            : fmt::format("{}: {}; best fused ({}) saves {} ({:.1f}%), not more than margin {:.0f}%", evidence, terms,
                          VariantName(best), Us(saved), 100 * frac, 100 * margin));
  }
}

}  // namespace

GroupShape DescribeGroup(const Graph& g, const FusionGroup& grp, const Bindings& bindings) {
  GroupShape s;
  auto bind = [&](const Dim& d) -> std::optional<int64_t> {
    if (d.is_static()) return d.value;
    auto it = bindings.find(d.sym);
    if (it == bindings.end()) return std::nullopt;
    return it->second;
  };
  // rows = the leading dims of `sh` multiplied (nullopt where one is unbound)
  auto leading = [&](const Shape& sh) -> std::optional<int64_t> {
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < sh.size(); ++i) {
      auto d = bind(sh[i]);
      if (!d) return std::nullopt;
      rows *= *d;
    }
    return rows;
  };
  if (grp.kind.rfind("matmul:", 0) == 0 && grp.matmul && !grp.matmul->matmuls.empty()) {
    // fuse_matmul's groups: the GEMV's shape. One kind reads other weights in other models, so the key
    // names the inner dimension K and cols is the matmuls' output columns together (q, k and v:
    // 2048 + 256 + 256 in TinyLlama, 2048 + 512 + 512 in Llama-3.2-1B); rows are the activations'.
    const Node& first = g.nodes[grp.matmul->matmuls.front()];
    const Shape& a = g.values[first.inputs[0]].type.shape;
    s.dtype = DTypeName(g.values[first.outputs[0]].type.dtype);
    if (a.empty() || !a.back().is_static()) return s.pattern = grp.kind, s;
    s.pattern = fmt::format("{}:k{}", grp.kind, a.back().value);
    int64_t cols = 0;
    for (int m : grp.matmul->matmuls) {
      const Shape& o = g.values[g.nodes[m].outputs[0]].type.shape;
      if (o.empty() || !o.back().is_static()) return s;
      cols += o.back().value;
    }
    s.cols = cols;
    s.rows = leading(g.values[first.outputs[0]].type.shape);
    return s;
  }
  if (IsPattern(grp)) s.pattern = grp.kind.substr(8);
  else if (grp.kind == "generic") {
    s.pattern = "generic:";
    const auto ops = fusion::GroupOpNames(g, grp.nodes);
    for (size_t i = 0; i < ops.size(); ++i) s.pattern += (i ? "_" : "") + ops[i];
  }
  // The widest output: largest static last dim (same rule as the kernel names).
  int best = -1;
  int64_t best_w = -1;
  for (int n : fusion::ComputeNodes(g, grp.nodes))
    for (int v : g.nodes[n].outputs) {
      const Shape& sh = g.values[v].type.shape;
      const int64_t w = sh.empty() ? 1 : (sh.back().is_static() ? sh.back().value : (int64_t{1} << 40));
      if (w >= best_w) best_w = w, best = v;
    }
  if (best < 0) return s;
  s.dtype = DTypeName(g.values[best].type.dtype);
  const Shape& sh = g.values[best].type.shape;
  if (sh.empty()) return s.rows = 1, s.cols = 1, s;
  s.cols = bind(sh.back());
  s.rows = leading(sh);
  return s;
}

FusionDecision ApplyConfigRules(const Graph& g, const FusionGroup& grp, const FusionConfig& c, const Bindings& bindings,
                                bool size_gate) {
  if (!grp.decision.fuse) return grp.decision;
  if (!c.enable_fusion) return FusionDecision::No("fusion disabled (enable_fusion=false)");
  const bool pattern = IsPattern(grp);
  const int ops = static_cast<int>(fusion::ComputeNodes(g, grp.nodes).size());
  if (!pattern && ops > c.max_group_size)
    return FusionDecision::No(fmt::format("group of {} ops > max_group_size {}", ops, c.max_group_size));
  if (!pattern && ops < c.min_nodes_for_fusion)
    return FusionDecision::No(fmt::format("group of {} ops < min_nodes_for_fusion {}", ops, c.min_nodes_for_fusion));
  if (!size_gate) return grp.decision;
  const auto size = fusion::MeasureGroup(g, grp.nodes, bindings);
  if (size.largest_known && *size.largest_known >= c.min_tensor_elements) return grp.decision;
  if (!size.unbound.empty()) {
    std::string syms;
    for (const auto& s : size.unbound) syms += (syms.empty() ? "" : ", ") + s;
    return FusionDecision::Yes(grp.decision.reason + "; size depends on " + syms);
  }
  if (size.largest_known)
    return FusionDecision::No(fmt::format("tensor has {} elements < min_tensor_elements {}{}", *size.largest_known,
                                          c.min_tensor_elements,
                                          size.largest_known_at.empty() ? "" : " (at " + size.largest_known_at + ")"));
  return grp.decision;
}

std::optional<CostEstimate> EstimateCost(const Graph& g, const FusionGroup& grp, const Bindings& b, const DeviceConstants& c) {
  CostEstimate est;
  std::set<int> members(grp.nodes.begin(), grp.nodes.end());
  // Fused: the values crossing the group boundary, once, in one launch.
  std::set<int> boundary;
  const auto users = g.Users();
  for (int n : grp.nodes) {
    if (g.nodes[n].op == OpKind::kConstant) continue;
    for (int v : g.nodes[n].inputs) {
      const Value& val = g.values[v];
      if (val.kind != ValueKind::kNode || !members.count(val.producer)) boundary.insert(v);
    }
    for (int v : g.nodes[n].outputs) {
      bool escapes = g.IsGraphOutput(v);
      for (int u : users[v]) escapes |= !members.count(u);
      if (escapes) boundary.insert(v);
    }
  }
  for (int v : boundary) {
    auto by = Bytes(g, v, b);
    if (!by) return std::nullopt;
    est.fused_bytes += *by;
  }
  // Unfused: every primitive reads its inputs and writes its outputs; composites count as their decomposition.
  // Decompositions leave new values' types to inference, so the scratch graph is re-inferred; a
  // composite that cannot be written out counts as the one launch it is.
  Graph scratch = g;
  for (int n : grp.nodes) {
    const Node node = g.nodes[n];
    if (node.op == OpKind::kConstant) continue;
    std::vector<int> prims{n};
    if (GetOpInfo(node.op).kind == FusionKind::kComposite && GetOpDef(node.op).decompose) {
      const size_t nodes_before = scratch.nodes.size(), values_before = scratch.values.size();
      if (GetOpDef(node.op).decompose(scratch, node).ok() && VerifyAndInfer(scratch).ok()) {
        prims.clear();
        for (size_t k = nodes_before; k < scratch.nodes.size(); ++k) prims.push_back(static_cast<int>(k));
      } else {
        scratch.nodes.resize(nodes_before);
        scratch.values.resize(values_before);
      }
    }
    for (int p : prims) {
      const Node& pn = scratch.nodes[p];
      if (pn.op == OpKind::kConstant) continue;
      ++est.unfused_launches;
      for (const auto* list : {&pn.inputs, &pn.outputs})
        for (int v : *list) {
          auto by = Bytes(scratch, v, b);
          if (!by) return std::nullopt;
          est.unfused_bytes += *by;
        }
    }
  }
  const double bytes_per_us = c.copy_gbps * 1e3;
  est.unfused_us = est.unfused_bytes / bytes_per_us + est.unfused_launches * c.launch_us;
  est.fused_us = est.fused_bytes / bytes_per_us + c.launch_us;
  return est;
}

FusionChoice ShouldFuse(const Graph& g, const FusionGroup& grp, const Bindings& bindings, const FusionConfig& config,
                        const ShouldFuseOptions& opts) {
  FusionChoice out;
  if (grp.kind.rfind("matmul:", 0) == 0 && grp.decision.fuse) {
    // fuse_matmul's groups have up to three forms, each a variant of the profile: `library`, the fused
    // group — one GEMV launch with its norm prologue, RoPE or SwiGLU epilogue up to kDecodeGemvMaxRows
    // rows, or up to the GEMV's capacity (kGemvCapacityRows) where the profile measured it there;
    // above that the executor runs its matmuls through cuBLASLt one by one —; `unfused`, its ops one
    // by one, each on its own library kernel (matmuls on the GEMV or cuBLASLt, the norm, RoPE and
    // SwiGLU kernels), run as the group's library nodes; and `cublaslt` (measured up to
    // kDecodeGemvMaxRows rows, where the other two run the GEMV), the group with its matmuls on
    // cuBLASLt at every row count (gemv_max_rows 0) and the norm, RoPE and SwiGLU kernels around them.
    // The fused group is the default: another form is taken only where it measured faster by more
    // than the margin (the faster of the two where both are). Without a profile, or where it has no
    // point for the group: the fused group (there is no cost model for matmul groups).
    out.decision = grp.decision;
    out.variant = out.run_now = Variant::kLibrary;
    if (!opts.profile) return out;
    const GroupShape shape = DescribeGroup(g, grp, bindings);
    if (!shape.rows || !shape.cols) {
      out.decision.reason += "; profile not consulted: rows unknown (bind the symbols with --shape)";
      return out;
    }
    std::string why_not;
    const auto p = Lookup(*opts.profile, shape, &why_not);
    if (!p || !p->unfused || !p->library) {
      out.decision.reason += fmt::format("; {}; no cost model for matmul groups: the fused group",
                                         p ? p->how + " lacks unfused or library times" : why_not);
      return out;
    }
    out.source = DecisionSource::kProfile;
    out.evidence = p->how;
    const double fused = *p->library, ops = *p->unfused;
    // the cuBLASLt form where it was measured (and the GEMV would otherwise run: at most
    // kDecodeGemvMaxRows rows; above, the ops one by one are that form)
    const std::optional<double> lt = *shape.rows <= kDecodeGemvMaxRows ? p->cublaslt : std::nullopt;
    const bool lt_best = lt && *lt < ops;
    const double alt = lt_best ? *lt : ops;
    const double frac = fused > 0 ? (fused - alt) / fused : 0;
    const std::string terms = fmt::format("ops one by one {}, fused group {}{}", Us(ops), Us(fused),
                                          lt ? ", matmuls on cuBLASLt " + Us(*lt) : "");
    if (frac > opts.margin && lt_best) {
      out.gemv_max_rows = 0;  // the group's matmuls on cuBLASLt at every row count
      out.expected_us_saved = fused - *lt;
      out.decision = FusionDecision::Yes(fmt::format("{}: {}; its matmuls on cuBLASLt save {} ({:.1f}%) > margin {:.0f}%",
                                                     p->how, terms, Us(fused - *lt), 100 * frac, 100 * opts.margin));
    } else if (frac > opts.margin) {
      out.decision = FusionDecision::No(fmt::format("{}: {}; its ops one by one save {} ({:.1f}%) > margin {:.0f}%", p->how,
                                                    terms, Us(fused - ops), 100 * frac, 100 * opts.margin));
    } else {
      out.gemv_max_rows = kGemvCapacityRows;  // measured as one GEMV launch up to the GEMV's capacity
      out.expected_us_saved = std::max(0.0, ops - fused);
      out.decision = FusionDecision::Yes(fmt::format("{}: {}; the fused group (its ops one by one{} save no more than margin {:.0f}%)",
                                                     p->how, terms, lt ? " and its matmuls on cuBLASLt" : "", 100 * opts.margin));
    }
    return out;  // variant library either way: the group's kernel, or its ops' library kernels
  }
  if (fusion::IsCollectiveGroup(grp) && grp.decision.fuse) {
    // fuse_collective's groups have one form: the communicator runs them fused where its transport
    // (chosen by measurement when the group was made) takes the message, else member by member.
    out.decision = grp.decision;
    out.variant = out.run_now = Variant::kLibrary;
    return out;
  }
  out.decision = ApplyConfigRules(g, grp, config, bindings, /*size_gate=*/opts.profile == nullptr);
  out.source = DecisionSource::kConfig;
  // With a profile, min_tensor_elements does not veto: measurements (or the cost model) decide.
  std::string size_note;
  if (opts.profile && out.decision.fuse) {
    const FusionDecision gated = ApplyConfigRules(g, grp, config, bindings, true);
    if (!gated.fuse) size_note = "; min_tensor_elements not applied with a profile (it would say: " + gated.reason + ")";
  }
  const bool pattern = IsPattern(grp);
  const std::optional<std::string> on_jit = pattern ? PatternOnTheJit(g, grp) : std::nullopt;
  const Variant fused = pattern && !on_jit ? Variant::kLibrary : Variant::kJit;
  out.variant = out.decision.fuse ? fused : NotFusedVariant(g, grp);
  out.run_now = out.variant;
  if (!out.decision.fuse) return out;
  if (!opts.profile) {  // config rules only
    if (on_jit) out.decision.reason += "; " + *on_jit;
    return out;
  }

  // Step 2: the profile.
  const GroupShape shape = DescribeGroup(g, grp, bindings);
  std::string why_not;
  if (!shape.rows || !shape.cols) {
    out.decision.reason += "; profile not consulted: rows unknown (bind the symbols with --shape)" + size_note;
    return out;
  }
  if (auto p = Lookup(*opts.profile, shape, &why_not)) {
    if (p->unfused && ((pattern && p->library) || p->jit)) {
      std::string terms = "unfused " + Us(*p->unfused);
      if (p->library) terms += ", library " + Us(*p->library) + (pattern ? "" : " (n/a for a generic group)");
      if (p->jit) terms += ", jit " + Us(*p->jit);
      Choose(*p->unfused, p->library, p->jit, pattern, opts.margin, out, p->how + size_note, terms);
      out.source = DecisionSource::kProfile;
    } else {
      why_not = p->how + " lacks unfused or fused times";
    }
  }
  if (out.source != DecisionSource::kProfile) {
    // Step 3: the cost model.
    const DeviceConstants c = opts.constants ? *opts.constants : DeviceConstants::FromDevice(opts.profile->device);
    auto est = EstimateCost(g, grp, bindings, c);
    if (!est) {
      out.decision.reason += "; " + why_not + "; cost model: sizes unknown" + size_note;
      return out;
    }
    const std::string evidence = why_not + "; cost model with " + c.label + size_note;
    std::string terms = fmt::format("unfused {} ({} B, {} launches), fused {} ({} B, 1 launch)", Us(est->unfused_us),
                                    est->unfused_bytes, est->unfused_launches, Us(est->fused_us), est->fused_bytes);
    if (on_jit) terms += " as " + *on_jit;
    const bool on_library = fused == Variant::kLibrary;
    Choose(est->unfused_us, on_library ? std::optional<double>(est->fused_us) : std::nullopt,
           on_library ? std::nullopt : std::optional<double>(est->fused_us), on_library, opts.margin, out, evidence, terms);
    out.source = DecisionSource::kCostModel;
  }
  out.run_now = out.variant;
  if (!out.decision.fuse) out.variant = out.run_now = NotFusedVariant(g, grp);
  // Compile cost: an uncached JIT kernel runs the fallback now and is swapped in when compiled.
  if (out.variant == Variant::kJit && opts.jit_cached && !*opts.jit_cached) {
    out.compile_in_background = true;
    out.run_now = pattern ? Variant::kLibrary : Variant::kUnfused;
    out.decision.reason += fmt::format("; jit kernel not cached yet: running {} now, compiling in the background",
                                       VariantName(out.run_now));
  }
  return out;
}

}  // namespace opfuse::scheduler
