// The op benchmark case list: one builder per op writes the graph text, the tensor specs and the
// bytes/flops formula side by side, so a formula cannot drift from the shapes it describes.
// Formulas are documented in docs/bench.md ("What a case counts"); tests/unit/bench_suite_test.cc
// checks a few by hand and checks every graph parses and matches its specs.
#include "bench/op_suite.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <regex>
#include <random>
#include <set>

#include <fmt/format.h>

#include "bench/harness.h"

namespace opfuse::bench {

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const std::vector<std::string>& MicroOps() {
  static const std::vector<std::string> k = {"exp2", "log2", "sin",       "recip",  "sqrt", "add", "mul",
                                             "mod",  "less_than", "gather", "cast",   "sum",  "max"};
  return k;
}

const std::vector<std::string>& PatternOps() {
  static const std::vector<std::string> k = {"matmul",    "softmax", "gelu",        "attention", "layernorm",
                                             "rmsnorm",   "add_rmsnorm", "swiglu",  "geglu",     "rope"};
  return k;
}

const std::vector<int64_t>& DefaultRows() {
  static const std::vector<int64_t> k = {1, 8, 32, 512, 2048, 16384};
  return k;
}

const std::vector<std::string>& SweepOps() {
  static const std::vector<std::string> k = {"rmsnorm", "add_rmsnorm", "layernorm", "softmax_plain", "softmax",
                                             "softmax_causal", "swiglu", "geglu", "logsumexp"};
  return k;
}

std::vector<int64_t> DefaultWidths(const std::string& op) {
  if (op == "swiglu" || op == "geglu") return {5632, 4096};  // TinyLlama's intermediate, and 4096
  if (op == "attention") return {kAttnQHeads * kAttnHeadDim};  // 2048: TinyLlama's 32 heads x 64
  return {2048, 4096};  // hidden sizes (matmul: K; N = 5632 for K = 2048, 4096 for K = 4096)
}

std::string PhaseOf(int64_t rows) { return rows <= kMaxDecodeRows ? "decode" : "prefill"; }

std::string CaseId(const std::string& suite, const std::string& op, DType dtype, int64_t rows, int64_t width) {
  return fmt::format("{}/{}/{}/rows={}/h={}", suite, op, DTypeName(dtype), rows, width);
}

namespace {

bool IsMicro(const std::string& op) {
  return std::find(MicroOps().begin(), MicroOps().end(), op) != MicroOps().end();
}
bool IsPattern(const std::string& op) {
  return std::find(PatternOps().begin(), PatternOps().end(), op) != PatternOps().end() ||
         std::find(SweepOps().begin(), SweepOps().end(), op) != SweepOps().end();
}

// A float attribute in .ofg text: always with '.' or an exponent, so it reads back as a float.
std::string FloatText(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string ShapeText(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

TensorSpec Spec(std::string name, DType dt, std::vector<int64_t> shape, bool rows_leading, Fill fill = Fill::kSigned) {
  TensorSpec t;
  t.name = std::move(name);
  t.dtype = dt;
  t.shape = std::move(shape);
  t.rows_leading = rows_leading;
  t.fill = fill;
  return t;
}

// Writes the graph: declarations (inputs as `input`, the listed names as `param`), one op line,
// the output line.
std::string GraphText(const std::string& name, const OpCase& c, const std::set<std::string>& params,
                      const std::string& op_line) {
  std::string g = fmt::format("graph {}\n", name);
  for (const auto& t : c.inputs)
    g += fmt::format("{} {}: {}{}\n", params.count(t.name) ? "param" : "input", t.name, DTypeName(t.dtype), ShapeText(t.shape));
  g += op_line + "\n";
  std::vector<std::string> outs;
  for (const auto& t : c.outputs) outs.push_back(t.name);
  g += fmt::format("output {}\n", fmt::join(outs, ", "));
  return g;
}

int64_t SumBytes(const std::vector<TensorSpec>& ts) {
  int64_t b = 0;
  for (const auto& t : ts) b += t.nbytes();
  return b;
}

}  // namespace

StatusOr<OpCase> MakeOpCase(const std::string& op, DType dt, int64_t rows, int64_t width, int64_t kv_len) {
  if (!IsFloat(dt)) return InvalidArgument(fmt::format("dtype {}: the op suite runs f32, f16 or bf16", DTypeName(dt)));
  if (rows <= 0 || width <= 0) return InvalidArgument(fmt::format("{}: rows and width must be positive", op));
  OpCase c;
  c.op = op;
  c.suite = IsMicro(op) ? "micro" : IsPattern(op) ? "patterns" : "";
  if (c.suite.empty())
    return InvalidArgument(fmt::format("unknown benchmark op '{}' (micro: {}; patterns: {})", op, fmt::join(MicroOps(), " "),
                                       fmt::join(PatternOps(), " ")));
  c.dtype = dt;
  c.rows = rows;
  c.width = width;
  c.phase = PhaseOf(rows);
  c.id = CaseId(c.suite, op, dt, rows, width);
  const int64_t e = rows * width;  // elements of a [rows, width] tensor
  const std::vector<int64_t> rw = {rows, width};
  std::string line;
  std::set<std::string> params;

  static const std::map<std::string, std::string> kUnary = {
      {"exp2", "exp2"}, {"log2", "log2"}, {"sin", "sin"}, {"recip", "recip"}, {"sqrt", "sqrt"}};
  static const std::map<std::string, std::string> kBinary = {
      {"add", "add"}, {"mul", "mul"}, {"mod", "mod"}, {"less_than", "less_than"}};

  if (kUnary.count(op)) {
    const bool positive = op == "log2" || op == "sqrt";
    c.inputs = {Spec("x", dt, rw, true, positive ? Fill::kPositive : Fill::kSigned)};
    c.outputs = {Spec("y", dt, rw, true)};
    if (positive) c.attrs["positive"] = 1;
    line = fmt::format("y = {}(x)", kUnary.at(op));
    c.flops = e;
  } else if (kBinary.count(op)) {
    c.inputs = {Spec("a", dt, rw, true), Spec("b", dt, rw, true, op == "mod" ? Fill::kPositive : Fill::kSigned)};
    c.outputs = {Spec("y", op == "less_than" ? DType::kBool : dt, rw, true)};
    if (op == "mod") c.attrs["positive_b"] = 1;
    line = fmt::format("y = {}(a, b)", kBinary.at(op));
    c.flops = e;
  } else if (op == "cast") {
    const DType to = dt == DType::kF32 ? DType::kBF16 : DType::kF32;
    c.inputs = {Spec("x", dt, rw, true)};
    c.outputs = {Spec("y", to, rw, true)};
    c.attrs["to"] = DTypeName(to);
    line = fmt::format("y = cast(x) {{dtype={}}}", DTypeName(to));
    c.flops = 0;
  } else if (op == "gather") {
    TensorSpec table = Spec("table", dt, {kGatherVocab, width}, false);
    table.rotate = false;  // a weight: shared by the rotated sets (the ids differ per set)
    TensorSpec ids = Spec("ids", DType::kI32, {rows}, true, Fill::kIds);
    ids.id_range = kGatherVocab;
    c.inputs = {table, ids};
    c.outputs = {Spec("y", dt, rw, true)};
    c.attrs["vocab"] = kGatherVocab;
    params = {"table"};
    line = "y = embedding(table, ids)";
    c.flops = 0;
  } else if (op == "sum" || op == "max") {
    c.inputs = {Spec("x", dt, rw, true)};
    c.outputs = {Spec("y", dt, {rows, 1}, true)};
    line = fmt::format("y = {}(x)", op);
    c.flops = rows * (width - 1);
  } else if (op == "matmul") {
    const int64_t k = width, n = width == 2048 ? 5632 : width;  // TinyLlama gate/up; square otherwise
    c.inputs = {Spec("a", dt, {rows, k}, true), Spec("b", dt, {n, k}, false)};
    c.outputs = {Spec("y", dt, {rows, n}, true)};
    c.attrs["n"] = n;
    c.attrs["k"] = k;
    params = {"b"};
    line = "y = matmul(a, b) {transpose_b=1}";
    c.flops = 2 * rows * n * k;
  } else if (op == "softmax") {
    c.inputs = {Spec("x", dt, rw, true)};
    c.outputs = {Spec("y", dt, rw, true)};
    c.attrs["scale"] = kSoftmaxScale;
    line = fmt::format("y = softmax(x) {{scale={}}}", FloatText(kSoftmaxScale));
    c.flops = 6 * e + rows;
  } else if (op == "softmax_plain") {
    c.inputs = {Spec("x", dt, rw, true)};
    c.outputs = {Spec("y", dt, rw, true)};
    line = "y = softmax(x)";
    c.flops = 5 * e + rows;
  } else if (op == "softmax_causal") {
    // Attention scores of `rows` queries over `width` keys, aligned to the end: query i sees keys
    // 0 .. i + width - rows. Every row keeps a key only while rows <= width.
    if (rows > width)
      return InvalidArgument(fmt::format("softmax_causal: {} query rows over {} keys leave rows fully masked (needs rows <= width)",
                                         rows, width));
    c.rows_independent = false;  // the mask of a row depends on the row count (checked on the last rows)
    c.inputs = {Spec("x", dt, rw, true)};
    c.outputs = {Spec("y", dt, rw, true)};
    c.attrs["scale"] = kSoftmaxScale;
    c.attrs["causal"] = 1;
    line = fmt::format("y = softmax(x) {{scale={}, causal=1}}", FloatText(kSoftmaxScale));
    c.flops = 6 * e + rows;
  } else if (op == "logsumexp") {
    // A row reduction the pattern library has no kernel for: the generic fusion's case.
    c.inputs = {Spec("x", dt, rw, true)};
    c.outputs = {Spec("y", dt, {rows, 1}, true)};
    line = "m = max(x)\nd = sub(x, m)\nex = exp(d)\nsm = sum(ex)\nl = log(sm)\ny = add(l, m)";
    c.flops = 4 * e + 2 * rows;
  } else if (op == "gelu") {
    c.inputs = {Spec("x", dt, rw, true)};
    c.outputs = {Spec("y", dt, rw, true)};
    line = "y = gelu(x)";
    c.flops = 5 * e;
  } else if (op == "attention") {
    if (width % kAttnHeadDim || (width / kAttnHeadDim) % kAttnKvHeads)
      return InvalidArgument(fmt::format("attention: width {} is not a multiple of {} heads of {}", width, kAttnKvHeads,
                                         kAttnHeadDim));
    const int64_t hq = width / kAttnHeadDim, hkv = kAttnKvHeads, d = kAttnHeadDim;
    const int64_t t = rows;
    const int64_t s = kv_len > 0 ? kv_len : c.phase == "decode" ? kAttnDecodeKvLen : rows;
    if (s < t) return InvalidArgument(fmt::format("attention: {} keys for {} queries (need S >= T)", s, t));
    c.kv_len = s;
    c.rows_independent = false;
    c.inputs = {Spec("q", dt, {t, hq, d}, true), Spec("k", dt, {s, hkv, d}, false), Spec("v", dt, {s, hkv, d}, false)};
    c.outputs = {Spec("y", dt, {t, hq, d}, true)};
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    c.attrs = {{"causal", 1}, {"scale", scale}, {"hq", hq}, {"hkv", hkv}, {"d", d}, {"s", s}};
    line = fmt::format("y = attention(q, k, v) {{causal=1, scale={}}}", FloatText(scale));
    // Causal, aligned to the end: query i sees min(S, i + S - T + 1) keys. QK^T and PV are
    // 2 flops per multiply-accumulate each, over the visible (query, key) pairs only.
    int64_t visible = 0;
    for (int64_t i = 0; i < t; ++i) visible += std::min(s, i + s - t + 1);
    c.flops = 4 * hq * d * visible;
  } else if (op == "layernorm") {
    c.inputs = {Spec("x", dt, rw, true), Spec("w", dt, {width}, false), Spec("b", dt, {width}, false)};
    c.outputs = {Spec("y", dt, rw, true)};
    c.attrs["eps"] = kNormEps;
    params = {"w", "b"};
    line = fmt::format("y = layer_norm(x, w, b) {{eps={}}}", FloatText(kNormEps));
    c.flops = 7 * e + 4 * rows;
  } else if (op == "rmsnorm") {
    c.inputs = {Spec("x", dt, rw, true), Spec("w", dt, {width}, false)};
    c.outputs = {Spec("y", dt, rw, true)};
    c.attrs["eps"] = kNormEps;
    params = {"w"};
    line = fmt::format("y = rms_norm(x, w) {{eps={}}}", FloatText(kNormEps));
    c.flops = 4 * e + 3 * rows;
  } else if (op == "add_rmsnorm") {
    c.inputs = {Spec("x", dt, rw, true), Spec("r", dt, rw, true), Spec("w", dt, {width}, false)};
    c.outputs = {Spec("y", dt, rw, true), Spec("s", dt, rw, true)};
    c.attrs["eps"] = kNormEps;
    params = {"w"};
    line = fmt::format("y, s = add_rms_norm(x, r, w) {{eps={}}}", FloatText(kNormEps));
    c.flops = 5 * e + 3 * rows;
  } else if (op == "swiglu" || op == "geglu") {
    c.inputs = {Spec("g", dt, rw, true), Spec("u", dt, rw, true)};
    c.outputs = {Spec("y", dt, rw, true)};
    line = fmt::format("y = {}(g, u)", op);
    c.flops = (op == "swiglu" ? 5 : 6) * e;
  } else if (op == "rope") {
    // 32 heads: head_dim 64 at 2048 (TinyLlama), 128 at 4096 (Llama-2-7B).
    const int64_t h = 32;
    if (width % h || (width / h) % 2)
      return InvalidArgument(fmt::format("rope: width {} is not 32 heads of an even head_dim", width));
    const int64_t d = width / h;
    c.inputs = {Spec("x", dt, {rows, h, d}, true), Spec("cos", dt, {rows, 1, d}, true), Spec("sin", dt, {rows, 1, d}, true)};
    c.outputs = {Spec("y", dt, {rows, h, d}, true)};
    c.attrs = {{"heads", h}, {"head_dim", d}};
    line = "y = rope(x, cos, sin)";
    c.flops = 3 * e;
  }

  c.bytes = SumBytes(c.inputs) + SumBytes(c.outputs);
  if (op == "gather") c.bytes -= c.inputs[0].nbytes() - rows * width * DTypeSize(dt);  // only the gathered rows are read
  std::string gname = op;
  c.graph = GraphText(gname, c, params, line);
  return c;
}

StatusOr<RandomShapesSpec> ParseRandomShapes(const std::string& text) {
  const std::string usage = fmt::format("--shapes '{}': expected random:N or random:N:SEED (N from 1 to {})", text, kMaxRandomShapes);
  if (text.rfind("random:", 0) != 0) return InvalidArgument(usage);
  const std::string rest = text.substr(7);
  const size_t colon = rest.find(':');
  auto parse_u64 = [](const std::string& t, uint64_t* v) {
    if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos || t.size() > 19) return false;
    *v = std::stoull(t);
    return true;
  };
  uint64_t n = 0;
  if (!parse_u64(rest.substr(0, colon), &n) || n < 1 || n > static_cast<uint64_t>(kMaxRandomShapes)) return InvalidArgument(usage);
  RandomShapesSpec spec;
  spec.count = static_cast<int>(n);
  if (colon != std::string::npos) {
    uint64_t seed = 0;
    if (!parse_u64(rest.substr(colon + 1), &seed)) return InvalidArgument(usage);
    spec.seed = seed;
  }
  return spec;
}

StatusOr<std::vector<ShapeSample>> ParseShapeList(const std::string& text) {
  const std::string usage = fmt::format("--shapes '{}': expected random:N[:SEED] or ROWSxWIDTH[,ROWSxWIDTH...]", text);
  std::vector<ShapeSample> out;
  for (size_t pos = 0; pos <= text.size();) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t x = item.find('x');
    auto parse = [](const std::string& t, int64_t* v) {
      if (t.empty() || t.size() > 12 || t.find_first_not_of("0123456789") != std::string::npos) return false;
      *v = std::stoll(t);
      return *v >= 1;
    };
    ShapeSample sh;
    if (x == std::string::npos || !parse(item.substr(0, x), &sh.rows) || !parse(item.substr(x + 1), &sh.width))
      return InvalidArgument(usage);
    if (sh.rows * sh.width > kMaxRandomElements)
      return InvalidArgument(fmt::format("--shapes '{}': {}x{} has more than {} elements", text, sh.rows, sh.width, kMaxRandomElements));
    if (static_cast<int>(out.size()) >= kMaxRandomShapes) return InvalidArgument(fmt::format("--shapes: more than {} shapes", kMaxRandomShapes));
    out.push_back(sh);
  }
  if (out.empty()) return InvalidArgument(usage);
  return out;
}

std::vector<ShapeSample> RandomShapes(int count, uint64_t seed) {
  // Widths: a third model sizes (hidden, intermediate, vocabulary), a third primes, a third
  // log-uniform in [1, kMaxRandomWidth]; rows log-uniform in [1, kMaxRandomRows]. A pair whose
  // [rows, width] tensor would pass kMaxRandomElements gets fewer rows (the sweep stays within GPU
  // memory with the runner's rotated input sets).
  static const int64_t kModelWidths[] = {1536, 2048, 2560, 3072, 3584, 4096, 5120, 5632, 6144, 8192, 4864, 8960, 11008,
                                         13824, 14336, 18944, 32000, 32064, 49152, 128256, 151936, 152064};
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto log_uniform = [&](int64_t hi) {
    return std::clamp<int64_t>(static_cast<int64_t>(std::exp(unit(rng) * std::log(static_cast<double>(hi) + 1))), 1, hi);
  };
  auto is_prime = [](int64_t v) {
    if (v < 2) return false;
    for (int64_t d = 2; d * d <= v; ++d)
      if (v % d == 0) return false;
    return true;
  };
  std::vector<ShapeSample> out;
  for (int i = 0; i < count; ++i) {
    ShapeSample s;
    const int kind = static_cast<int>(rng() % 3);
    if (kind == 0) {
      s.width = kModelWidths[rng() % std::size(kModelWidths)];
    } else {
      s.width = log_uniform(kMaxRandomWidth);
      if (kind == 1)
        while (!is_prime(s.width) && s.width < kMaxRandomWidth) ++s.width;
    }
    s.rows = log_uniform(kMaxRandomRows);
    if (s.rows * s.width > kMaxRandomElements) s.rows = std::max<int64_t>(1, kMaxRandomElements / s.width);
    out.push_back(s);
  }
  return out;
}

StatusOr<OpSuite> BuildOpSuite(const SuiteFilter& f) {
  if (f.suite != "all" && f.suite != "micro" && f.suite != "patterns")
    return InvalidArgument(fmt::format("--suite '{}': expected micro, patterns or all", f.suite));
  if (!IsFloat(f.dtype)) return InvalidArgument(fmt::format("--dtype {}: expected f32, f16 or bf16", DTypeName(f.dtype)));
  std::regex re;
  if (!f.ops_regex.empty()) {
    try {
      re = std::regex(f.ops_regex, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return InvalidArgument(fmt::format("--ops '{}': not a valid regular expression ({})", f.ops_regex, e.what()));
    }
  }
  if (!f.shapes.empty()) {
    if (!f.rows.empty() || !f.widths.empty())
      return InvalidArgument("--shapes replaces the grid of --rows and --widths: give one or the other");
    OpSuite suite;
    suite.shapes = f.shapes_spec;
    std::set<std::string> ids;
    for (const auto& op : SweepOps()) {
      if (!f.ops_regex.empty() && !std::regex_match(op, re)) continue;
      for (const ShapeSample& sh : f.shapes) {
        auto c = MakeOpCase(op, f.dtype, sh.rows, sh.width);
        if (!c.ok()) {
          suite.skipped.push_back({CaseId("patterns", op, f.dtype, sh.rows, sh.width), c.status().message()});
          continue;
        }
        if (!ids.insert(c->id).second) continue;  // the same pair drawn twice
        suite.cases.push_back(std::move(*c));
      }
    }
    if (suite.cases.empty())
      return InvalidArgument(fmt::format("no case matches (--shapes with sweep ops {}{})", fmt::join(SweepOps(), " "),
                                         f.ops_regex.empty() ? "" : ", --ops " + f.ops_regex));
    return suite;
  }
  const std::vector<int64_t>& rows = f.rows.empty() ? DefaultRows() : f.rows;
  for (int64_t r : rows)
    if (r <= 0) return InvalidArgument(fmt::format("--rows: {} is not a positive row count", r));
  std::set<int64_t> known_widths;
  OpSuite suite;
  std::vector<std::string> ops;
  if (f.suite != "patterns") ops.insert(ops.end(), MicroOps().begin(), MicroOps().end());
  if (f.suite != "micro") ops.insert(ops.end(), PatternOps().begin(), PatternOps().end());
  for (const auto& op : ops) {
    for (int64_t w : DefaultWidths(op)) known_widths.insert(w);
    if (!f.ops_regex.empty() && !std::regex_match(op, re)) continue;
    for (int64_t w : DefaultWidths(op)) {
      if (!f.widths.empty() && std::find(f.widths.begin(), f.widths.end(), w) == f.widths.end()) continue;
      for (int64_t r : rows) {
        if (op == "attention" && PhaseOf(r) == "prefill" && r > kAttnMaxPrefill) {
          suite.skipped.push_back(
              {CaseId("patterns", op, f.dtype, r, w),
               fmt::format("attention prefill T = S = {} is skipped: the CPU reference check and the peer's eager "
                           "attention (a {:.0f} GiB score matrix) do not scale to it; rows <= {} are run",
                           r, 4.0 * kAttnQHeads * static_cast<double>(r) * r / (1ull << 30), kAttnMaxPrefill)});
          continue;
        }
        OPFUSE_ASSIGN_OR_RETURN(OpCase c, MakeOpCase(op, f.dtype, r, w));
        suite.cases.push_back(std::move(c));
      }
    }
  }
  for (int64_t w : f.widths)
    if (!known_widths.count(w))
      return InvalidArgument(fmt::format("--widths: no op has width {} in the default grid (widths: {})", w,
                                         fmt::join(known_widths, ", ")));
  if (suite.cases.empty())
    return InvalidArgument(fmt::format("no case matches (--suite {}{}{})", f.suite,
                                       f.ops_regex.empty() ? "" : ", --ops " + f.ops_regex,
                                       f.widths.empty() ? "" : fmt::format(", --widths {}", fmt::join(f.widths, ","))));
  return suite;
}

nlohmann::json CaseToJson(const OpCase& c) {
  // Inputs carry "rotate": whether each rotated input set has its own copy (false: one shared
  // copy), so the peer rotates exactly what opfuse rotates.
  auto tensors = [](const std::vector<TensorSpec>& ts, bool with_rotate) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& t : ts) {
      nlohmann::json o = {{"name", t.name}, {"dtype", DTypeName(t.dtype)}, {"shape", t.shape}};
      if (with_rotate) o["rotate"] = t.rotate;
      a.push_back(std::move(o));
    }
    return a;
  };
  // "bound": the rel_err every output must stay under (ErrorBound), so the peer checks what opfuse checks.
  double bound = 0;
  for (const auto& o : c.outputs) bound = std::max(bound, ErrorBound(o.dtype, c.op));
  return {{"id", c.id},         {"suite", c.suite},   {"op", c.op},       {"dtype", DTypeName(c.dtype)},
          {"phase", c.phase},   {"rows", c.rows},     {"width", c.width}, {"inputs", tensors(c.inputs, true)},
          {"outputs", tensors(c.outputs, false)}, {"attrs", c.attrs}, {"bytes", c.bytes}, {"flops", c.flops},
          {"bound", bound},     {"graph", c.graph}};
}

nlohmann::json SuiteToJson(const OpSuite& s) {
  nlohmann::json cases = nlohmann::json::array(), skipped = nlohmann::json::array();
  for (const auto& c : s.cases) cases.push_back(CaseToJson(c));
  for (const auto& k : s.skipped) skipped.push_back({{"id", k.id}, {"reason", k.reason}});
  nlohmann::json j = {{"schema", 1}, {"harness", HarnessJson()}, {"cases", cases}, {"skipped", skipped}};
  if (!s.shapes.empty()) j["shapes"] = s.shapes;
  return j;
}

const char* DistName(Dist d) {
  switch (d) {
    case Dist::kUniform: return "uniform";
    case Dist::kRowScaled: return "row-scaled";
    case Dist::kOutliers: return "outliers";
    case Dist::kNormal: return "normal";
  }
  return "?";
}

StatusOr<CheckPlan> PlanCheck(const OpCase& c, int sample, std::optional<uint64_t> random_seed) {
  CheckPlan p;
  if (c.rows <= kMaxCheckAllRows || sample <= 0 || sample >= c.rows) {
    for (int64_t r = 0; r < c.rows; ++r) p.rows.push_back(r);
    p.reference = c;
    p.description = fmt::format("all {} rows", c.rows);
    return p;
  }
  sample = std::max(sample, 2);
  if (c.rows_independent && random_seed) {
    std::mt19937_64 rng(*random_seed);
    std::set<int64_t> picked;
    while (static_cast<int>(picked.size()) < sample)
      picked.insert(static_cast<int64_t>(rng() % static_cast<uint64_t>(c.rows)));
    p.rows.assign(picked.begin(), picked.end());
    p.description = fmt::format("{} random rows of {}", p.rows.size(), c.rows);
  } else if (c.rows_independent) {
    for (int64_t i = 0; i < sample; ++i) {
      const int64_t r = (i * (c.rows - 1) + (sample - 1) / 2) / (sample - 1);  // rounded, 0 .. rows-1
      if (p.rows.empty() || r > p.rows.back()) p.rows.push_back(r);
    }
    p.description = fmt::format("{} rows sampled from {}", p.rows.size(), c.rows);
  } else {
    for (int64_t r = c.rows - sample; r < c.rows; ++r) p.rows.push_back(r);
    p.description = fmt::format("last {} of {} query rows", sample, c.rows);
  }
  const int64_t n = static_cast<int64_t>(p.rows.size());
  if (c.remake) {
    OPFUSE_ASSIGN_OR_RETURN(p.reference, c.remake(n));
  } else {
    OPFUSE_ASSIGN_OR_RETURN(p.reference, MakeOpCase(c.op, c.dtype, n, c.width, c.kv_len));
  }
  return p;
}

RowError RowwiseRelativeError(const HostTensor& out, const HostTensor& ref) {
  RowError r;
  if (out.shape != ref.shape || out.dtype != ref.dtype) {
    r.worst = std::numeric_limits<double>::infinity();
    return r;
  }
  const int64_t n = ref.numel();
  const int64_t rows = ref.shape.size() >= 2 ? ref.shape[0] : 1;
  if (n == 0 || rows == 0) return r;
  const int64_t len = n / rows;
  std::vector<double> num(static_cast<size_t>(rows), 0), den(static_cast<size_t>(rows), 0);
  std::vector<char> bad(static_cast<size_t>(rows), 0);
  for (int64_t i = 0; i < n; ++i) {
    const double o = out.get(i), e = ref.get(i);
    const size_t row = static_cast<size_t>(i / len);
    if (std::isfinite(e)) den[row] += e * e;
    if (o == e) continue;
    if (!std::isfinite(o) || !std::isfinite(e)) {
      bad[row] = 1;
      continue;
    }
    num[row] += (o - e) * (o - e);
  }
  double mean_den = 0;
  for (double d : den) mean_den += d / static_cast<double>(rows);
  const double floor = std::max(1e-3 * std::sqrt(mean_den), 1e-30);
  for (int64_t row = 0; row < rows; ++row) {
    const double e = bad[row] ? std::numeric_limits<double>::infinity()
                              : (num[row] == 0 ? 0 : std::sqrt(num[row]) / std::max(std::sqrt(den[row]), floor));
    if (r.row < 0 || e > r.worst) r.worst = e, r.row = row;
  }
  return r;
}

double ErrorBound(DType out_dtype, const std::string& op) {
  switch (out_dtype) {
    case DType::kBF16: return 3e-2;
    case DType::kF16: return 5e-3;
    case DType::kF32: return op == "matmul" || op == "attention" ? 1e-3 : 2e-5;
    case DType::kBool: return 0;
    default: return 0;
  }
}

OutputScan ScanOutput(const uint8_t* h, DType dtype, int64_t n) {
  OutputScan s;
  switch (dtype) {
    case DType::kF32:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t u;
        std::memcpy(&u, h + 4 * i, 4);
        s.nan += (u & 0x7fffffffu) > 0x7f800000u;
        s.zero += (u & 0x7fffffffu) == 0;
      }
      break;
    case DType::kBF16:
    case DType::kF16: {
      const uint16_t inf = dtype == DType::kBF16 ? 0x7f80 : 0x7c00;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t u;
        std::memcpy(&u, h + 2 * i, 2);
        s.nan += (u & 0x7fff) > inf;
        s.zero += (u & 0x7fff) == 0;
      }
      break;
    }
    case DType::kBool:
      for (int64_t i = 0; i < n; ++i) s.nan += h[i] > 1, s.zero += h[i] == 0;
      break;
    case DType::kI32:
      for (int64_t i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, h + 4 * i, 4);
        s.zero += v == 0;
      }
      break;
    case DType::kI64:
      for (int64_t i = 0; i < n; ++i) {
        int64_t v;
        std::memcpy(&v, h + 8 * i, 8);
        s.zero += v == 0;
      }
      break;
  }
  return s;
}

StatusOr<std::vector<int64_t>> ParseIntList(const std::string& text, const std::string& flag) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    char* end = nullptr;
    errno = 0;
    const long long v = item.empty() ? 0 : std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno || v <= 0)
      return InvalidArgument(fmt::format("{} '{}': expected comma-separated positive integers, e.g. 1,8,32", flag, text));
    out.push_back(v);
    pos = comma + 1;
  }
  return out;
}

}  // namespace opfuse::bench
