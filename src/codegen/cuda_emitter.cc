// CUDA C emitter (design notes in cuda_emitter.h).
#include "codegen/cuda_emitter.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include <fmt/format.h>

#include "ops/scalar_ops.h"

namespace opfuse::codegen {
namespace {

const char* kPreamble = R"CUDA(// ---- opfuse JIT preamble: storage types and f32 conversions (PTX cvt, no headers)
struct __align__(2) fz_bf16 { unsigned short x; };
struct __align__(2) fz_f16 { unsigned short x; };
__device__ __forceinline__ float fz_f32(float v) { return v; }
__device__ __forceinline__ float fz_f32(unsigned char v) { return v ? 1.0f : 0.0f; }
__device__ __forceinline__ float fz_f32(fz_bf16 v) { return __uint_as_float(((unsigned)v.x) << 16); }
__device__ __forceinline__ float fz_f32(fz_f16 v) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.x)); return f; }
template <typename T> struct fz_cvt;
template <> struct fz_cvt<float> { static __device__ __forceinline__ float from(float f) { return f; } };
template <> struct fz_cvt<unsigned char> { static __device__ __forceinline__ unsigned char from(float f) { return f != 0.0f; } };
template <> struct fz_cvt<fz_bf16> { static __device__ __forceinline__ fz_bf16 from(float f) { fz_bf16 r; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.x) : "f"(f)); return r; } };
template <> struct fz_cvt<fz_f16> { static __device__ __forceinline__ fz_f16 from(float f) { fz_f16 r; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.x) : "f"(f)); return r; } };
template <typename T> __device__ __forceinline__ float fz_round(float f) { return fz_f32(fz_cvt<T>::from(f)); }
__device__ __forceinline__ float fz_fmod_floor(float a, float b) { float r = fmodf(a, b); return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r; }
// N consecutive elements from p[i] (p + i aligned to N * sizeof(T) bytes), widened to f32.
template <int N, typename T> __device__ __forceinline__ void fz_load(const T* __restrict__ p, long long i, float* out) {
  constexpr int B = N * (int)sizeof(T);
  if constexpr (B == 16) { uint4 u = *reinterpret_cast<const uint4*>(p + i); const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = fz_f32(e[k]); }
  else if constexpr (B == 8) { uint2 u = *reinterpret_cast<const uint2*>(p + i); const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = fz_f32(e[k]); }
  else {
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = fz_f32(p[i + k]); }
}
template <int N, typename T> __device__ __forceinline__ void fz_store(T* __restrict__ p, long long i, const float* v) {
  constexpr int B = N * (int)sizeof(T);
  if constexpr (B == 16 || B == 8) {
    T e[N];
#pragma unroll
    for (int k = 0; k < N; ++k) e[k] = fz_cvt<T>::from(v[k]);
    if constexpr (B == 16) *reinterpret_cast<uint4*>(p + i) = *reinterpret_cast<const uint4*>(e);
    else *reinterpret_cast<uint2*>(p + i) = *reinterpret_cast<const uint2*>(e);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) p[i + k] = fz_cvt<T>::from(v[k]);
  }
}
__device__ __forceinline__ float fz_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float fz_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide reductions; every thread gets the result. smem holds >= 32 floats.
__device__ __forceinline__ float fz_block_sum(float v, float* smem) {
  v = fz_warp_sum(v);
  if (blockDim.x <= 32) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  return fz_warp_sum(lane < nw ? smem[lane] : 0.0f);
}
__device__ __forceinline__ float fz_block_max(float v, float* smem) {
  v = fz_warp_max(v);
  if (blockDim.x <= 32) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  return fz_warp_max(lane < nw ? smem[lane] : -__int_as_float(0x7f800000));
}
)CUDA";

const char* CType(DType t) {
  switch (t) {
    case DType::kF32: return "float";
    case DType::kBF16: return "fz_bf16";
    case DType::kF16: return "fz_f16";
    case DType::kBool: return "unsigned char";
    default: return nullptr;
  }
}

std::string DimExpr(const Dim& d) { return d.is_static() ? fmt::format("{}LL", d.value) : "s_" + d.sym; }

std::string FloatLit(double v) {
  if (std::isinf(v)) return v > 0 ? "__int_as_float(0x7f800000)" : "(-__int_as_float(0x7f800000))";
  if (std::isnan(v)) return "__int_as_float(0x7fc00000)";
  return fmt::format("{:.9g}f", v).find_first_of(".e") == std::string::npos ? fmt::format("{:.1f}f", v)
                                                                           : fmt::format("{:.9g}f", v);
}

class Emitter {
 public:
  Emitter(const Kernel& k, const EmitOptions& o) : k_(k), o_(o) {}

  StatusOr<EmittedKernel> Run() {
    for (const auto& t : k_.inputs)
      if (!CType(t.type.dtype)) return Unimplemented(fmt::format("input '{}' has dtype {} (no JIT storage type)", t.name, DTypeName(t.type.dtype)));
    for (const auto& o : k_.outputs)
      if (!CType(o.tensor.type.dtype)) return Unimplemented(fmt::format("output '{}' has dtype {}", o.tensor.name, DTypeName(o.tensor.type.dtype)));
    for (const auto& o : k_.outputs)
      if (o.tensor.access == Access::kRowScalar && k_.is_row() && !k_.exprs[o.expr].row_level)
        return Unimplemented(fmt::format("row output '{}' computed per element", o.tensor.name));
    ChooseShape();
    MarkLive();
    EmittedKernel out;
    out.vec = vec_;
    out.row = k_.is_row();
    out.threads = threads_;
    out.row_in_registers = cached_;
    out.rows_per_block = rows_per_block_;
    out.function = fmt::format("{}_v{}", k_.name, vec_);
    std::string& s = out.source;
    s += fmt::format("// opfuse generated kernel {}\n// fuses: {}\n", out.function, k_.summary);
    s += fmt::format("// iteration space {} ({}), {} pass{}, vec {}, {} threads{}\n", ShapeToString(k_.space),
                     !k_.is_row() ? "pointwise" : warp_rows_ ? "row kernel: one warp per row" : "row kernel: one block per row", k_.num_passes,
                     k_.num_passes == 1 ? "" : "es", vec_, threads_, cached_ ? ", row held in registers" : "");
    for (size_t i = 0; i < k_.inputs.size(); ++i)
      s += fmt::format("//   in{}  {} {} [{}]\n", i, k_.inputs[i].name, k_.inputs[i].type.ToString(), AccessName(k_.inputs[i].access));
    for (size_t i = 0; i < k_.outputs.size(); ++i)
      s += fmt::format("//   out{} {} {} [{}]\n", i, k_.outputs[i].tensor.name, k_.outputs[i].tensor.type.ToString(), AccessName(k_.outputs[i].tensor.access));
    s += kPreamble;
    s += fmt::format("\nextern \"C\" __global__ void __launch_bounds__({}) {}(", threads_, out.function);
    std::vector<std::string> params;
    for (size_t i = 0; i < k_.inputs.size(); ++i)
      params.push_back(fmt::format("const {}* __restrict__ in{}", CType(k_.inputs[i].type.dtype), i));
    for (size_t i = 0; i < k_.outputs.size(); ++i)
      params.push_back(fmt::format("{}* __restrict__ out{}", CType(k_.outputs[i].tensor.type.dtype), i));
    for (const auto& sym : k_.symbols) params.push_back("long long s_" + sym);
    for (size_t i = 0; i < params.size(); ++i) s += (i ? ",\n    " : "\n    ") + params[i];
    s += ") {\n";
    s += fmt::format("  const long long C = {};\n", DimExpr(k_.cols()));
    std::string rows = "1LL";
    for (size_t d = 0; d + 1 < k_.space.size(); ++d) rows += " * " + DimExpr(k_.space[d]);
    s += fmt::format("  const long long R = {};\n", rows);
    if (k_.is_row()) EmitRow(s);
    else EmitPointwise(s);
    s += "}\n";
    return out;
  }

 private:
  void ChooseShape() {
    int max_size = 1;
    for (const auto& t : k_.inputs)
      if (t.access == Access::kFull || t.access == Access::kChannel) max_size = std::max(max_size, DTypeSize(t.type.dtype));
    for (const auto& o : k_.outputs)
      if (o.tensor.access == Access::kFull) max_size = std::max(max_size, DTypeSize(o.tensor.type.dtype));
    vec_ = 1;
    const Dim& c = k_.cols();
    if (o_.aligned && c.is_static()) {
      int v = 16 / max_size;
      while (v > 1 && c.value % v) v /= 2;
      vec_ = v;
    }
    threads_ = o_.max_threads;
    if (k_.is_row() && c.is_static() && (c.value + vec_ - 1) / vec_ <= 32 * kMaxWarpIters) {
      // Warp per row: each lane keeps up to kMaxWarpIters independent 16-byte loads in flight,
      // reductions are shuffles only (no barrier), and a block carries kRowsPerBlock rows.
      const int64_t need = (c.value + vec_ - 1) / vec_;
      warp_rows_ = true;
      rows_per_block_ = kRowsPerBlock;
      threads_ = 32 * kRowsPerBlock;
      iters_ = static_cast<int>((need + 31) / 32);
      cached_ = true;
      tid_ = "lane";
      nthr_ = "32";
    } else if (k_.is_row() && c.is_static()) {
      int64_t need = (c.value + vec_ - 1) / vec_;           // vectors per row
      int64_t t = std::min<int64_t>(o_.max_threads, ((need + 31) / 32) * 32);
      threads_ = static_cast<int>(std::max<int64_t>(32, t));
      iters_ = static_cast<int>((need + threads_ - 1) / threads_);
      cached_ = iters_ <= kMaxRegIters;
    }
  }

  // Which exprs the outputs need.
  void MarkLive() {
    live_.assign(k_.exprs.size(), false);
    std::vector<int> stack;
    for (const auto& o : k_.outputs) stack.push_back(o.expr);
    while (!stack.empty()) {
      int e = stack.back();
      stack.pop_back();
      if (live_[e]) continue;
      live_[e] = true;
      for (int a : k_.exprs[e].args) stack.push_back(a);
    }
  }

  std::string GeneralIndex(const KernelTensor& t, const std::string& r, const std::string& c) const {
    // Strides of the tensor's own (right-aligned) dims; broadcast dims contribute nothing.
    const size_t rank = k_.space.size(), off = rank - t.type.shape.size();
    std::vector<std::string> stride(rank, "0LL");
    std::string acc = "1LL";
    for (size_t d = rank; d-- > off;) {
      if (t.varies[d]) stride[d] = acc;
      acc += " * " + DimExpr(t.type.shape[d - off]);
    }
    std::string idx = fmt::format("({}) * ({})", c, stride[rank - 1]);
    std::string div = "1LL";
    for (size_t d = rank - 1; d-- > 0;) {
      if (t.varies[d]) idx += fmt::format(" + ((({}) / ({})) % {}) * ({})", r, div, DimExpr(k_.space[d]), stride[d]);
      div += " * " + DimExpr(k_.space[d]);
    }
    return idx;
  }

  std::string Index(int in, const std::string& r, const std::string& c) const {
    const KernelTensor& t = k_.inputs[in];
    switch (t.access) {
      case Access::kFull: return fmt::format("({}) * C + ({})", r, c);
      case Access::kChannel: return c;
      case Access::kRowScalar: return r;
      case Access::kScalar: return "0";
      case Access::kGeneral: return GeneralIndex(t, r, c);
    }
    return "0";
  }

  bool VectorLoaded(int in) const {
    auto a = k_.inputs[in].access;
    return a == Access::kFull || a == Access::kChannel;
  }

  // The f32 expression text for expr e inside an element body (names e<N> already defined).
  std::string ExprText(int id) const {
    const Expr& e = k_.exprs[id];
    auto arg = [&](int i) { return fmt::format("e{}", e.args[i]); };
    switch (e.kind) {
      case ExprKind::kLoad:
        if (!e.row_level && VectorLoaded(e.input)) return fmt::format("x{}[j]", e.input);
        return fmt::format("fz_f32(in{}[{}])", e.input, Index(e.input, "r", "c"));
      case ExprKind::kLoadRotHalf:
        return fmt::format("(c < C / 2 ? -fz_f32(in{0}[{1}]) : fz_f32(in{0}[{2}]))", e.input,
                           Index(e.input, "r", "c + C / 2"), Index(e.input, "r", "c - C / 2"));
      case ExprKind::kConst: return FloatLit(e.constant);
      case ExprKind::kCols: return "(float)C";
      case ExprKind::kRound: return fmt::format("fz_round<{}>({})", CType(e.dtype), arg(0));
      case ExprKind::kCausal: {
        std::string tq = DimExpr(k_.space[k_.space.size() - 2]);
        return fmt::format("(c <= (r % {0}) + (C - {0}) ? {1} : -__int_as_float(0x7f800000))", tq, arg(0));
      }
      case ExprKind::kReduce: return fmt::format("acc{}", id);
      case ExprKind::kOp: {
        std::string t = CudaScalarExpr(e.op);
        for (size_t i = 0; i < e.args.size(); ++i) {
          std::string ph = "$" + std::to_string(i);
          for (size_t p = t.find(ph); p != std::string::npos; p = t.find(ph, p + 1)) t.replace(p, ph.size(), arg(i));
        }
        return t;
      }
    }
    return "0.0f";
  }

  // Emits element-level definitions needed by `targets` (in id order) into s.
  void EmitElementDefs(std::string& s, const std::vector<int>& targets, const std::string& ind) const {
    std::vector<bool> need(k_.exprs.size(), false);
    std::vector<int> stack(targets.begin(), targets.end());
    while (!stack.empty()) {
      int e = stack.back();
      stack.pop_back();
      if (need[e] || k_.exprs[e].row_level) continue;
      need[e] = true;
      for (int a : k_.exprs[e].args) stack.push_back(a);
    }
    for (size_t e = 0; e < k_.exprs.size(); ++e)
      if (need[e]) s += fmt::format("{}const float e{} = {};\n", ind, e, ExprText(static_cast<int>(e)));
  }

  // Row-level definitions ready after pass `depth` (emitted once per row).
  void EmitRowDefs(std::string& s, int depth, const std::string& ind) {
    for (size_t e = 0; e < k_.exprs.size(); ++e) {
      const Expr& x = k_.exprs[e];
      if (!live_[e] || !x.row_level || x.depth != depth || emitted_row_.count(static_cast<int>(e))) continue;
      emitted_row_.insert(static_cast<int>(e));
      s += fmt::format("{}const float e{} = {};\n", ind, e, ExprText(static_cast<int>(e)));
    }
  }

  std::set<int> UsedVectorInputs(const std::vector<int>& targets) const {
    std::set<int> used;
    std::vector<bool> seen(k_.exprs.size(), false);
    std::vector<int> stack(targets.begin(), targets.end());
    while (!stack.empty()) {
      int e = stack.back();
      stack.pop_back();
      if (seen[e] || k_.exprs[e].row_level) continue;
      seen[e] = true;
      if (k_.exprs[e].kind == ExprKind::kLoad && VectorLoaded(k_.exprs[e].input)) used.insert(k_.exprs[e].input);
      for (int a : k_.exprs[e].args) stack.push_back(a);
    }
    return used;
  }

  std::string LoadVec(int in, const std::string& dst, const std::string& r, const std::string& c0) const {
    return fmt::format("fz_load<{}>(in{}, {}, {});", vec_, in, Index(in, r, c0), dst);
  }

  void EmitPointwise(std::string& s) {
    std::vector<int> targets;
    for (const auto& o : k_.outputs) targets.push_back(o.expr);
    s += "  const long long NV = R * C / " + std::to_string(vec_) + ";\n";
    s += "  for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < NV; v += (long long)gridDim.x * blockDim.x) {\n";
    s += fmt::format("    const long long i0 = v * {};\n    const long long r = i0 / C;\n    const long long c0 = i0 - r * C;\n", vec_);
    EmitRowDefs(s, 0, "    ");
    for (int in : UsedVectorInputs(targets))
      s += fmt::format("    float x{}[{}];\n    {}\n", in, vec_, LoadVec(in, "x" + std::to_string(in), "r", "c0"));
    for (size_t o = 0; o < k_.outputs.size(); ++o) s += fmt::format("    float o{}[{}];\n", o, vec_);
    s += fmt::format("#pragma unroll\n    for (int j = 0; j < {}; ++j) {{\n      const long long c = c0 + j;\n      (void)c;\n", vec_);
    EmitElementDefs(s, targets, "      ");
    for (size_t o = 0; o < k_.outputs.size(); ++o) s += fmt::format("      o{}[j] = e{};\n", o, k_.outputs[o].expr);
    s += "    }\n";
    for (size_t o = 0; o < k_.outputs.size(); ++o) EmitStore(s, static_cast<int>(o), "    ", "i0");
    s += "  }\n";
  }

  void EmitStore(std::string& s, int o, const std::string& ind, const std::string& flat_i0) const {
    const auto& out = k_.outputs[o];
    const char* ct = CType(out.tensor.type.dtype);
    switch (out.tensor.access) {
      case Access::kFull:
        s += fmt::format("{}fz_store<{}, {}>(out{}, {}, o{});\n", ind, vec_, ct, o, flat_i0, o);
        break;
      case Access::kRowScalar:
        s += fmt::format("{}if (c0 == 0) out{}[r] = fz_cvt<{}>::from(o{}[0]);\n", ind, o, ct, o);
        break;
      case Access::kChannel:
        s += fmt::format("{}if (r == 0) fz_store<{}, {}>(out{}, c0, o{});\n", ind, vec_, ct, o, o);
        break;
      default:
        s += fmt::format("{}if (r == 0 && c0 == 0) out{}[0] = fz_cvt<{}>::from(o{}[0]);\n", ind, o, ct, o);
    }
  }

  // Loop over this thread's vectors of the row; `body` is emitted once inside with c0, x<in>[] ready.
  void EmitRowLoop(std::string& s, const std::vector<int>& targets, const std::function<void(std::string&)>& pre,
                   const std::function<void(std::string&)>& inner, const std::function<void(std::string&)>& after_vec) {
    auto used = UsedVectorInputs(targets);
    if (cached_) {
      s += fmt::format("#pragma unroll\n    for (int it = 0; it < {}; ++it) {{\n", iters_);
      s += fmt::format("      const long long c0 = ((long long)it * {} + {}) * {};\n", nthr_, tid_, vec_);
      s += "      if (c0 < C) {\n";
      for (int in : used) s += fmt::format("        const float* x{0} = xr{0}[it];\n", in);
    } else {
      s += fmt::format("    for (long long c0 = (long long){1} * {0}; c0 < C; c0 += (long long){2} * {0}) {{\n", vec_, tid_, nthr_);
      s += "      {\n";
      for (int in : used) s += fmt::format("        float x{}[{}];\n        {}\n", in, vec_, LoadVec(in, "x" + std::to_string(in), "r", "c0"));
    }
    pre(s);
    s += fmt::format("#pragma unroll\n        for (int j = 0; j < {}; ++j) {{\n          const long long c = c0 + j;\n          (void)c;\n", vec_);
    EmitElementDefs(s, targets, "          ");
    inner(s);
    s += "        }\n";
    after_vec(s);
    s += "      }\n    }\n";
  }

  void EmitRow(std::string& s) {
    if (warp_rows_) {
      s += fmt::format("  const int lane = threadIdx.x & 31;\n"
                       "  for (long long r = (long long)blockIdx.x * {0} + (threadIdx.x >> 5); r < R; r += (long long)gridDim.x * {0}) {{\n",
                       rows_per_block_);
    } else {
      s += "  __shared__ float smem[32];\n";
      s += "  for (long long r = blockIdx.x; r < R; r += gridDim.x) {\n";
    }
    if (cached_) {
      // Load every vector-accessed input's row slice into registers once.
      std::set<int> all;
      for (size_t e = 0; e < k_.exprs.size(); ++e)
        if (live_[e] && k_.exprs[e].kind == ExprKind::kLoad && !k_.exprs[e].row_level && VectorLoaded(k_.exprs[e].input)) all.insert(k_.exprs[e].input);
      for (int in : all) s += fmt::format("    float xr{}[{}][{}];\n", in, iters_, vec_);
      s += fmt::format("#pragma unroll\n    for (int it = 0; it < {}; ++it) {{\n", iters_);
      s += fmt::format("      const long long c0 = ((long long)it * {} + {}) * {};\n", nthr_, tid_, vec_);
      s += "      if (c0 < C) {\n";
      for (int in : all) s += fmt::format("        {}\n", LoadVec(in, fmt::format("xr{}[it]", in), "r", "c0"));
      s += "      }\n    }\n";
    }
    EmitRowDefs(s, 0, "    ");
    for (int p = 1; p <= k_.num_passes; ++p) {
      std::vector<int> reds;
      for (size_t e = 0; e < k_.exprs.size(); ++e)
        if (live_[e] && k_.exprs[e].kind == ExprKind::kReduce && k_.exprs[e].depth == p) reds.push_back(static_cast<int>(e));
      std::vector<int> args;
      for (int rd : reds) {
        bool mx = k_.exprs[rd].op == OpKind::kMax;
        s += fmt::format("    float acc{} = {};\n", rd, mx ? "-__int_as_float(0x7f800000)" : "0.0f");
        args.push_back(k_.exprs[rd].args[0]);
      }
      s += fmt::format("    // pass {}: {} reduction{}\n", p, reds.size(), reds.size() == 1 ? "" : "s");
      EmitRowLoop(s, args, [](std::string&) {}, [&](std::string& b) {
        for (int rd : reds) {
          bool mx = k_.exprs[rd].op == OpKind::kMax;
          b += mx ? fmt::format("          acc{0} = fmaxf(acc{0}, e{1});\n", rd, k_.exprs[rd].args[0])
                  : fmt::format("          acc{0} += e{1};\n", rd, k_.exprs[rd].args[0]);
        }
      }, [](std::string&) {});
      for (int rd : reds)
        s += warp_rows_ ? fmt::format("    acc{0} = fz_warp_{1}(acc{0});\n", rd, k_.exprs[rd].op == OpKind::kMax ? "max" : "sum")
                        : fmt::format("    acc{0} = fz_block_{1}(acc{0}, smem);\n", rd, k_.exprs[rd].op == OpKind::kMax ? "max" : "sum");
      EmitRowDefs(s, p, "    ");
    }
    // Epilogue: outputs.
    std::vector<int> targets;
    for (const auto& o : k_.outputs) targets.push_back(o.expr);
    s += "    // epilogue\n";
    bool any_full = false;
    for (const auto& o : k_.outputs) any_full |= o.tensor.access != Access::kRowScalar;
    if (any_full) {
      std::vector<int> vec_targets;
      for (const auto& o : k_.outputs)
        if (o.tensor.access != Access::kRowScalar) vec_targets.push_back(o.expr);
      EmitRowLoop(s, vec_targets, [&](std::string& b) {
        for (size_t o = 0; o < k_.outputs.size(); ++o)
          if (k_.outputs[o].tensor.access != Access::kRowScalar) b += fmt::format("        float o{}[{}];\n", o, vec_);
      }, [&](std::string& b) {
        for (size_t o = 0; o < k_.outputs.size(); ++o)
          if (k_.outputs[o].tensor.access != Access::kRowScalar) b += fmt::format("          o{}[j] = e{};\n", o, k_.outputs[o].expr);
      }, [&](std::string& b) {
        for (size_t o = 0; o < k_.outputs.size(); ++o)
          if (k_.outputs[o].tensor.access != Access::kRowScalar) EmitStore(b, static_cast<int>(o), "        ", "r * C + c0");
      });
    }
    for (size_t o = 0; o < k_.outputs.size(); ++o)
      if (k_.outputs[o].tensor.access == Access::kRowScalar) {
        int e = k_.outputs[o].expr;
        s += fmt::format("    if ({} == 0) out{}[r] = fz_cvt<{}>::from(e{});\n", warp_rows_ ? "lane" : "threadIdx.x", o,
                         CType(k_.outputs[o].tensor.type.dtype), e);
      }
    s += "  }\n";
  }

  const Kernel& k_;
  EmitOptions o_;
  int vec_ = 1, threads_ = 256, iters_ = 0, rows_per_block_ = 1;
  bool cached_ = false, warp_rows_ = false;
  std::string tid_ = "threadIdx.x", nthr_ = "blockDim.x";  // this thread's index / threads per row
  std::vector<bool> live_;
  std::set<int> emitted_row_;
};

}  // namespace

StatusOr<EmittedKernel> EmitCuda(const Kernel& k, const EmitOptions& opts) { return Emitter(k, opts).Run(); }

}  // namespace opfuse::codegen
