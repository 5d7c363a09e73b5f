// CUDA C emitter (design notes in cuda_emitter.h).
#include "codegen/cuda_emitter.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "ops/scalar_ops.h"
#include "target/launch_shape.h"

// src/codegen/device/jit_preamble.cuh with its includes inlined (generated at build time by
// cmake/embed_text.cmake).
extern const char kOpfuseJitPreamble[];

namespace opfuse::codegen {
namespace {



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

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Threads per row for `n` wanted threads: a power of two below 32, else a multiple of 32; 0 above
// 1024 (as the library's row_shape.cu).
int RoundThreads(int64_t n) {
  if (n <= 1) return 1;
  if (n < 32) {
    int p = 1;
    while (p < n) p *= 2;
    return p;
  }
  return n > 1024 ? 0 : static_cast<int>(CeilDiv(n, 32) * 32);
}

// Smallest of 1, 2, 4, 8 vectors per thread that is >= need (0 when none).
int SmallestVpt(int64_t need) {
  for (int v : {1, 2, 4, 8})
    if (v >= need) return v;
  return 0;
}

bool Transcendental(OpKind op) {
  switch (op) {
    case OpKind::kExp: case OpKind::kExp2: case OpKind::kLog: case OpKind::kLog2: case OpKind::kSin: case OpKind::kCos:
    case OpKind::kTanh: case OpKind::kSigmoid: case OpKind::kSilu: case OpKind::kGelu: case OpKind::kGeluTanh: case OpKind::kPow:
      return true;
    default:
      return false;
  }
}

class Emitter {
 public:
  // Register path: element expr -> the text of its value where registers already hold it: an early
  // output's kept packs (`sv<o>[it].get(j)`) or a pass's cached f32 values (`ce<e>[it][j]`).
  using KeptPacks = std::map<int, std::string>;
  Emitter(const Kernel& k, const EmitOptions& o) : k_(k), o_(o) {}

  StatusOr<EmittedKernel> Run() {
    for (const auto& t : k_.inputs)
      if (!CType(t.type.dtype)) return Unimplemented(fmt::format("input '{}' has dtype {} (no JIT storage type)", t.name, DTypeName(t.type.dtype)));
    for (const auto& o : k_.outputs)
      if (!CType(o.tensor.type.dtype)) return Unimplemented(fmt::format("output '{}' has dtype {}", o.tensor.name, DTypeName(o.tensor.type.dtype)));
    for (const auto& o : k_.outputs)
      if (o.tensor.access == Access::kRowScalar && k_.is_row() && !k_.exprs[o.expr].row_level)
        return Unimplemented(fmt::format("row output '{}' computed per element", o.tensor.name));
    MarkLive();
    ChooseShape();
    EmittedKernel out;
    out.vec = vec_;
    out.row = k_.is_row();
    out.row_in_registers = reg_rows_;
    out.function = fmt::format("{}_v{}", k_.name, vec_);
    if (reg_rows_) {
      // Whole row groups only: the function computes its rows per block as blockDim.x / TPR and every
      // thread of the block belongs to one (a row group of 96 in a block of 128 would leave 32 threads
      // reading and writing past their row).
      out.threads = tpr_p_ >= kPrefillRowBlock ? tpr_p_ : (kPrefillRowBlock / tpr_p_) * tpr_p_;
      out.rows_per_block = out.threads / tpr_p_;
      out.threads_per_row = tpr_p_;
      out.vectors_per_thread = vpt_p_;
      // One function when both shapes are the same: its rows per block are compiled in (rpb), so the
      // decode launch must use the function's block, not a decode-sized one (a smaller block would
      // leave the rows of the missing groups unwritten).
      const bool same = tpr_d_ == tpr_p_ && vpt_d_ == vpt_p_ && decode_vec_ == vec_;
      out.decode_function = same ? out.function : out.function + "_decode";
      out.decode_threads = same ? out.threads : std::max(tpr_d_, 32);
      out.decode_rows_per_block = out.decode_threads / tpr_d_;
    } else {
      out.threads = threads_;
      out.rows_per_block = 1;
      // Pointwise kernels over vectors wider than 4 bytes get a decode function for tiny tensors (at
      // most jit::kPointwiseDecodeBlocksPerSm of its blocks per SM, the launcher's rule): 4-byte
      // packs, blocks of up to kPointwiseDecodeWideThreads (the launcher picks 128 or 256), no loop,
      // 32-bit indices. swiglu 1 x 5632 bf16 (CUDA-graph replay of 64 launches, L2 flushed) ran faster
      // in blocks of 128 than as 16-byte vectors in blocks of 64, level with torch.compile's Triton
      // kernel (1-element packs in 44 blocks of 128); swiglu 32 x 4096 in the peer's process: 256-thread
      // blocks faster than 128, level with Triton (2 elements x 256 threads) (docs/BENCHMARKS.md).
      const int dv = std::max(1, 4 / std::max(1, max_size_));
      if (!k_.is_row() && dv < vec_) {
        out.decode_function = out.function + "_decode";
        out.decode_threads = kPointwiseDecodeWideThreads;
        out.decode_vec = dv;
      }
    }
    std::string& s = out.source;
    s += fmt::format("// opfuse generated kernel {}\n// fuses: {}\n", out.function, k_.summary);
    s += fmt::format("// emitter v{}; iteration space {} ({}), {} pass{}, vec {}\n", kEmitterVersion, ShapeToString(k_.space),
                     !k_.is_row() ? "pointwise" : reg_rows_ ? "row kernel, row held in registers" : "row kernel: one block per row, looped",
                     k_.num_passes, k_.num_passes == 1 ? "" : "es", vec_);
    if (reg_rows_)
      s += fmt::format("// prefill {}: {} threads x {} vectors per row, {} rows per block; decode {}: {} threads x {} vectors of {}, {} rows per block{}\n",
                       out.function, tpr_p_, vpt_p_, out.rows_per_block, out.decode_function, tpr_d_, vpt_d_, decode_vec_,
                       out.decode_rows_per_block, reg_window_ ? "; window mode (16-byte vectors of each row's aligned window)" : "");
    else if (!out.decode_function.empty())
      s += fmt::format("// {} threads per block, one vector per thread; decode {}: {} threads, one {}-element pack per thread\n",
                       threads_, out.decode_function, out.decode_threads, out.decode_vec);
    else if (stream_vec_)
      s += fmt::format("// {} threads per block, one row per block, streamed: {} vectors of {} in flight a thread{}\n", threads_,
                       StreamUnroll(), stream_vec_, stream_window_ ? " over each row's aligned window (window mode)" : "");
    else
      s += fmt::format("// {} threads per block{}\n", threads_, k_.is_row() ? ", one row per block" : ", one vector per thread");
    for (size_t i = 0; i < k_.inputs.size(); ++i)
      s += fmt::format("//   in{}  {} {} [{}]\n", i, k_.inputs[i].name, k_.inputs[i].type.ToString(), AccessName(k_.inputs[i].access));
    for (size_t i = 0; i < k_.outputs.size(); ++i)
      s += fmt::format("//   out{} {} {} [{}]\n", i, k_.outputs[i].tensor.name, k_.outputs[i].tensor.type.ToString(), AccessName(k_.outputs[i].tensor.access));
    s += kOpfuseJitPreamble;
    if (reg_rows_) {
      // early stores (EarlyOutputs) in the decode function only: at prefill sizes they measured
      // slower (add_rms_norm 2048 and 16384 rows); when both shapes are one function, none
      const bool separate = out.decode_function != out.function;
      // PDL prologue in the functions the launcher takes at decode sizes only: at prefill sizes there
      // is no launch latency to hide, and a prefill function launched with it was slower per
      // event-timed call (EmittedKernel::PdlIn).
      EmitFunction(s, out.function, out.threads, out.PdlIn(out.function),
                   [&](std::string& b) { EmitRowRegisters(b, tpr_p_, vpt_p_, out.rows_per_block, false); });
      if (separate)
        EmitDecodeFunction(s, out.decode_function, out.decode_threads, decode_vec_, out.PdlIn(out.decode_function),
                           [&](std::string& b) { EmitRowRegisters(b, tpr_d_, vpt_d_, out.decode_rows_per_block, true); });
    } else {
      out.stream = stream_vec_ > 0;
      const int saved_vec = vec_;
      if (out.stream) vec_ = stream_vec_;
      stream_now_ = out.stream;
      EmitFunction(s, out.function, threads_, out.PdlIn(out.function), [&](std::string& b) {
        if (k_.is_row()) EmitRowLooped(b);
        else EmitPointwise(b, false);
      });
      stream_now_ = false;
      vec_ = saved_vec;
      if (!stage_inputs_.empty()) {
        out.stage_function = out.function + "_stage";
        out.stage_bytes = stage_bytes_;
        out.stage_vectors = stage_vectors_;
        s += fmt::format("// {}: persistent blocks, the row windows of {} input{} ({} bytes) staged in shared memory{}\n",
                         out.stage_function, stage_inputs_.size(), stage_inputs_.size() == 1 ? "" : "s", stage_bytes_,
                         window_vec_ > 0 ? fmt::format(", computed over their 16-byte vectors ({} elements)", window_vec_) : "");
        const int saved_vec = vec_;
        if (window_vec_ > 0) vec_ = window_vec_;
        ix_ = "int";  // a staged row fits shared memory: 32-bit column indices (rows stay 64-bit)
        EmitFunction(s, out.stage_function, target::kRowStageMaxThreads, out.PdlIn(out.stage_function), [&](std::string& b) {
          stage_now_ = true;
          EmitRowLooped(b);
          stage_now_ = false;
        });
        if (ssplit_elem_ > 0) {
          out.stage_split_function = out.function + "_stagesplit";
          out.stage_split_elem_bytes = ssplit_elem_;
          out.stage_split_inputs = static_cast<int>(stage_inputs_.size());
          s += fmt::format("// {}: a cluster of 2 to {} blocks a row (the launch's), each staging its share of the row windows "
                           "in shared memory, the reductions over the cluster\n",
                           out.stage_split_function, target::kRowSplitBlocks);
          EmitFunction(s, out.stage_split_function, target::kRowStageSplitMaxThreads, out.PdlIn(out.stage_split_function),
                       [&](std::string& b) {
                         stage_now_ = ssplit_now_ = true;
                         ssplit_xch_ = 0;
                         EmitRowLooped(b);
                         stage_now_ = ssplit_now_ = false;
                       });
        }
        vec_ = saved_vec;
        ix_ = "long long";
      }
      if (split_) {
        out.split_function = out.function + "_split";
        out.split_vpt = split_->vpt;
        out.split_min_blocks = split_->min_blocks;
        // 16-byte vectors (aligned rows, or window mode over shifted ones): the split at any row count
        // where the stage function does not take the rows (target::UseRowSplit); the looped function's
        // narrow vectors at odd widths read a row two or three times in 1-element loads
        out.split_many_rows = split_vec_ > 0 || vec_ * max_size_ >= 16;
        out.split_window_vec = split_vec_;
        out.stage_gives_way = !(split_vec_ > 0 && RowOutputsOnly());
        const int saved_vec = vec_;
        if (split_vec_ > 0) vec_ = split_vec_;
        s += fmt::format("// {}: a cluster of {} to {} blocks per row (the launch's), {} vectors of {} per thread{}\n",
                         out.split_function, split_->min_blocks, target::kRowSplitBlocks, split_->vpt, vec_,
                         split_vec_ > 0 ? " over each row's aligned window (window mode)" : "");
        EmitFunction(s, out.split_function, target::kRowSplitMaxThreads, out.PdlIn(out.split_function),
                     [&](std::string& b) { EmitRowRegisters(b, 0, split_->vpt, 1, false, true); });
        vec_ = saved_vec;
      }
      if (!out.decode_function.empty())
        EmitDecodeFunction(s, out.decode_function, out.decode_threads, out.decode_vec, out.PdlIn(out.decode_function),
                           [&](std::string& b) { EmitPointwise(b, true); });
    }
    return out;
  }

 private:
  // A decode function: EmitFunction with 32-bit indices and `vec`-element packs (the launcher takes
  // it only where every index fits 32 bits and its grid covers the work).
  void EmitDecodeFunction(std::string& s, const std::string& name, int bounds, int vec, bool pdl,
                          const std::function<void(std::string&)>& body) {
    const int saved_vec = vec_;
    ix_ = "int";
    vec_ = vec;
    EmitFunction(s, name, bounds, pdl, body);
    ix_ = "long long";
    vec_ = saved_vec;
  }

  // `pdl`: the function opens with fz::pdl_enter() (EmittedKernel::PdlIn).
  void EmitFunction(std::string& s, const std::string& name, int bounds, bool pdl,
                    const std::function<void(std::string&)>& body) {
    s += fmt::format("\nextern \"C\" __global__ void __launch_bounds__({}) {}(", bounds, name);
    std::vector<std::string> params;
    for (size_t i = 0; i < k_.inputs.size(); ++i)
      params.push_back(fmt::format("const {}* __restrict__ in{}", CType(k_.inputs[i].type.dtype), i));
    for (size_t i = 0; i < k_.outputs.size(); ++i)
      params.push_back(fmt::format("{}* __restrict__ out{}", CType(k_.outputs[i].tensor.type.dtype), i));
    for (const auto& sym : k_.symbols) params.push_back("long long s_" + sym);
    for (size_t i = 0; i < params.size(); ++i) s += (i ? ",\n    " : "\n    ") + params[i];
    s += ") {\n";
    if (pdl) s += "  fz::pdl_enter();  // PDL: wait for the earlier kernels before any memory access\n";
    std::string rows = "1LL";
    for (size_t d = 0; d + 1 < k_.space.size(); ++d) rows += " * " + DimExpr(k_.space[d]);
    if (ix_ == "long long") {
      s += fmt::format("  const long long C = {};\n", DimExpr(k_.cols()));
      s += fmt::format("  const long long R = {};\n", rows);
    } else {  // the decode function: every index fits 32 bits (the launcher's rule, kDecodeMaxElements)
      s += fmt::format("  const {0} C = ({0})({1});\n", ix_, DimExpr(k_.cols()));
      s += fmt::format("  const {0} R = ({0})({1});\n", ix_, rows);
    }
    emitted_row_.clear();
    body(s);
    s += "}\n";
  }

  // The looped function streams (target::kRowStreamThreads; EmittedKernel::stream) where the kernel
  // writes one value per row, reads its rows in one pass (an online max and sum counts as one), the
  // pointers are 16-byte aligned and its vectors are 16 bytes — the width's own, or the row's aligned
  // window's (window mode) —: stream_vec_ is that vector, stream_window_ says which.
  void ChooseStream() {
    if (!o_.aligned || !RowOutputsOnly() || CachedInputs().empty() || ReadPasses() != 1) return;
    const int wv = WindowVec();
    if (vec_ * max_size_ >= 16) {
      stream_vec_ = vec_;
    } else if (wv > vec_ && wv <= 8) {
      stream_vec_ = wv;
      stream_window_ = true;
    } else {
      return;
    }
    threads_ = target::kRowStreamThreads;
  }

  // The looped function's reads of the row: its passes, a max and sum-of-exp pair taken online as one.
  int ReadPasses() const {
    int n = 0;
    for (int p = 1; p <= k_.num_passes; ++p, ++n)
      if (FindOnlineMaxSum(p).max_rd >= 0) ++p;
    return n;
  }

  // The stage function (static widths past the register path, EmitOptions::stage, 16-byte aligned
  // pointers): every full-shape input's row window (target::RowStageWindowBytes) in shared memory at
  // a static offset, the windows' total and the widest window's 16-byte vectors for the launcher's
  // target::RowStageFor. None where an input's element does not divide 16 bytes.
  void ChooseStage() {
    if (!o_.stage || !o_.aligned || !k_.cols().is_static()) return;
    int64_t off = 0, widest = 0;
    std::map<int, int64_t> offs;
    for (int in : CachedInputs()) {
      const int64_t w = target::RowStageWindowBytes(k_.cols().value, DTypeSize(k_.inputs[in].type.dtype));
      if (w == 0) return;
      offs[in] = off;
      off += w;
      widest = std::max(widest, w / 16);
    }
    if (offs.empty()) return;
    stage_inputs_ = std::move(offs);
    stage_bytes_ = off;
    stage_vectors_ = widest;
    // Window mode: the stage function computes over the staged windows' aligned 16-byte vectors —
    // odd widths too — instead of the looped function's narrower vectors: columns c0 = v x W - sh.
    const int w = WindowVec();
    if (w > vec_) window_vec_ = w;
    // The staged split function (target::ChooseRowStageSplit; clusters): where every staged input has
    // one element size and the stage function computes over their 16-byte vectors (the blocks' shares
    // are whole window vectors of every input), for kernels that write rows (a kernel with per-row
    // outputs only streams its rows or stages them whole).
    if (o_.clusters && !RowOutputsOnly()) {
      int size = 0;
      bool one = true;
      for (const auto& [in, off] : stage_inputs_) {
        const int z = DTypeSize(k_.inputs[in].type.dtype);
        one = one && (size == 0 || size == z);
        size = z;
      }
      if (one && size > 0 && (window_vec_ > 0 ? window_vec_ : vec_) * size == 16) ssplit_elem_ = size;
    }
  }

  // The window vector (16 / the element size) where a row kernel can compute over 16-byte vectors
  // of each row's aligned window: every full-shape input and output has one element size and every
  // other per-element operand is a per-column or row-contiguous one (loaded element by element, under
  // a column guard at the row's edges); else 0.
  int WindowVec() const {
    int size = 0;
    bool ok = true;
    for (size_t e = 0; e < k_.exprs.size() && ok; ++e) {
      if (!live_[e] || k_.exprs[e].row_level) continue;
      const ExprKind kind = k_.exprs[e].kind;
      if (kind == ExprKind::kLoadRotHalf) ok = false;
      if (kind != ExprKind::kLoad) continue;
      const KernelTensor& t = k_.inputs[k_.exprs[e].input];
      if (t.access == Access::kFull) {
        ok = size == 0 || size == DTypeSize(t.type.dtype);
        size = DTypeSize(t.type.dtype);
      } else if (t.access != Access::kChannel && !RowContiguous(k_.exprs[e].input)) {
        ok = false;
      }
    }
    for (const auto& o : k_.outputs)
      if (o.tensor.access == Access::kFull) ok = ok && DTypeSize(o.tensor.type.dtype) == size;
      else if (o.tensor.access != Access::kRowScalar) ok = false;
    return ok && size > 0 && size <= 16 ? 16 / size : 0;
  }

  // Emitting in window mode — the stage function's (window_vec_) or the register path's (reg_window_)
  // —: vectors of 16 bytes at columns v x W - sh, so the first and last vector of a row reach outside
  // it (loads of other operands and stores guarded by column, reductions skip those columns).
  bool Windowed() const {
    return (stage_now_ && window_vec_ > 0) || (reg_now_ && reg_window_) || (split_now_ && split_vec_ > 0) ||
           (stream_now_ && stream_window_);
  }

  // The looped functions' row start past the 16-byte boundary in window mode: the stage function's
  // first staged input's (they share it: one element size, aligned bases), the stream's `sh`.
  std::string ShiftName() const { return stage_now_ ? fmt::format("sh{}", stage_inputs_.begin()->first) : "sh"; }

  // The streamed looped function's vectors in flight a thread: kRowStreamUnroll, fewer where the
  // inputs' packs of a step would pass kLoopedRowFloats words.
  int StreamUnroll() const {
    const int inputs = std::max<int>(1, static_cast<int>(CachedInputs().size()));
    return std::clamp(kLoopedRowFloats / (4 * inputs), 1, target::kRowStreamUnroll);
  }

  // Every output is one value a row (a row reduction: logsumexp).
  bool RowOutputsOnly() const {
    for (const auto& o : k_.outputs)
      if (o.tensor.access != Access::kRowScalar) return false;
    return true;
  }

  // Full-shape inputs the row kernel loads element by element: held in registers as raw packs.
  std::set<int> CachedInputs() const {
    std::set<int> all;
    for (size_t e = 0; e < k_.exprs.size(); ++e)
      if (live_[e] && k_.exprs[e].kind == ExprKind::kLoad && !k_.exprs[e].row_level && k_.inputs[k_.exprs[e].input].access == Access::kFull)
        all.insert(k_.exprs[e].input);
    return all;
  }

  // Per-column inputs (a norm's weight) that the register path loads once per thread, before the
  // row loop: they do not depend on the row, and loaded there their L2 round trip no longer follows
  // the reductions. Only up to kMaxChannelVpt vectors per thread (registers).
  static constexpr int kMaxChannelVpt = 4;
  std::set<int> ChannelInputs(int vpt) const {
    std::set<int> all;
    if (vpt > kMaxChannelVpt) return all;
    for (size_t e = 0; e < k_.exprs.size(); ++e)
      if (live_[e] && k_.exprs[e].kind == ExprKind::kLoad && !k_.exprs[e].row_level &&
          k_.inputs[k_.exprs[e].input].access == Access::kChannel)
        all.insert(k_.exprs[e].input);
    return all;
  }

  void ChooseShape() {
    int max_size = 1;
    for (const auto& t : k_.inputs)
      if (t.access == Access::kFull || t.access == Access::kChannel) max_size = std::max(max_size, DTypeSize(t.type.dtype));
    for (const auto& o : k_.outputs)
      if (o.tensor.access == Access::kFull) max_size = std::max(max_size, DTypeSize(o.tensor.type.dtype));
    max_size_ = max_size;
    vec_ = 1;
    const Dim& c = k_.cols();
    if (o_.aligned && !k_.is_row() && !PointwiseNeedsRowCol()) {
      // A flat pointwise kernel indexes the tensors as one array: 16-byte vectors from an aligned base
      // at any width, the last vector masked (FlatTail).
      vec_ = 16 / max_size;
    } else if (o_.aligned && c.is_static()) {
      int v = 16 / max_size;
      while (v > 1 && c.value % v) v /= 2;
      vec_ = v;
    }
    threads_ = o_.max_threads;
    if (!k_.is_row() || !c.is_static()) return;
    // Register path, the library's row layout (src/kernels/fused.h): a row group of TPR threads,
    // VPT vectors each, the row's raw packs in registers, every load issued before the first use.
    bool transcendental = false;
    for (size_t e = 0; e < k_.exprs.size(); ++e)
      transcendental |= live_[e] && !k_.exprs[e].row_level && k_.exprs[e].kind == ExprKind::kOp && Transcendental(k_.exprs[e].op);
    const bool row_outputs_only = RowOutputsOnly();
    // Prefill: ~16 registers of row data per thread (rms_norm 4 vectors, add_rms_norm 2 x 2); 8 for
    // multi-pass kernels with a MUFU op per element (softmax 2: more threads per row, 32 registers
    // instead of 85). JIT softmax bf16 (docs/BENCHMARKS.md): at 2048 and 16384 rows
    // x 2048 t128x2 beat t32x8; at h4096 t256x2 is level with t64x8. The library's softmax keeps 8
    // (its t128x2 is slower).
    // Rows that fit so go on the register path; there a kernel that writes per-row values only (a row
    // reduction: logsumexp) holds 32: it moves half the bytes per element of a row-to-row kernel, so
    // its issue budget per element is half, and each row's fixed cost (index set-up, a block reduction
    // per pass) must spread over more elements per thread: at 8 its instructions per element, not
    // its bytes, set the time (Nsight Compute, docs/BENCHMARKS.md, the untuned sweep).
    const int fit_want = o_.prefill_row_words > 0 ? o_.prefill_row_words
                         : k_.num_passes >= 2 && transcendental ? target::kRegisterRowWords / 2
                                                                : target::kRegisterRowWords;
    const int want = o_.prefill_row_words > 0 || !row_outputs_only ? fit_want : 32;
    // The row group for vectors of `vec` over `v` vectors per row: {tpr, vpt}, tpr 0 past the register
    // path (fit_want's row group wider than 1024 threads).
    auto group = [&](int vec, int64_t v) {
      const int words = PackWords(vec);
      auto for_want = [&](int w) {
        const int target = std::clamp(w / std::max(words, 1), 1, 8);
        const int tpr = RoundThreads(std::max(CeilDiv(v, target), std::min<int64_t>(v, 8)));
        const int vpt = tpr ? SmallestVpt(CeilDiv(v, tpr)) : 0;
        return std::pair<int, int>(vpt ? tpr : 0, vpt);
      };
      return for_want(fit_want).first == 0 ? std::pair<int, int>(0, 0) : for_want(want);
    };
    // Window mode (widths whose row starts are off the 16-byte grid, e.g. odd widths, 16-byte aligned
    // bases): the row's aligned window in 16-byte vectors, cols + W - 1 columns of it covered, so every
    // vector inside the row is one aligned access and only the first and last are loaded, reduced and
    // stored column by column — instead of 1-element vectors (one load and a column index per element).
    // Only the prefill function, for rows of at least kMinWindowVectors window vectors (narrower rows
    // are mostly edge vectors, and a warp holding one runs both element loops) and kernels that keep
    // no f32 values between passes (softmax measured slower in window mode at several widths; docs/
    // BENCHMARKS.md, the untuned sweep). The decode function keeps the width's own vectors (at decode
    // row counts the window's fewer, longer threads measured slower) where they form a row group;
    // else the prefill function serves both.
    const int base_vec = vec_;
    std::pair<int, int> shape{0, 0};  // {tpr, vpt}
    const int wv = o_.aligned ? WindowVec() : 0;
    if (wv > vec_ && wv <= 8 && !CachedInputs().empty() && !KeepsPassValues()) {  // 16-bit or f32 elements
      const int64_t nv = CeilDiv(c.value + wv - 1, wv);
      if (nv >= kMinWindowVectors) shape = group(wv, nv);
      if (shape.first > 0) {
        vec_ = wv;
        reg_window_ = true;
      }
    }
    if (!reg_window_) shape = group(vec_, CeilDiv(c.value, vec_));
    const auto [tpr, vpt] = shape;
    if (tpr == 0 || vpt == 0) {  // wider than 1024 x 8 vectors: looped, one block per row
      // Vectors narrower than 16 bytes (odd widths: 1 element): kLoopedRowThreads threads, so a block
      // still has its bytes in flight; 16-byte vectors keep max_threads, so more rows share an SM
      // (blocks of 1024 left a last partial wave of rows and measured slower; docs/BENCHMARKS.md).
      if (vec_ * max_size_ < 16) threads_ = kLoopedRowThreads;
      ChooseStream();
      if (o_.clusters) {
        // Rows off the 16-byte grid (1-element vectors, aligned bases): the split function in window
        // mode — 16-byte vectors over each row's aligned window, as the library's split kernels —
        // where the kernel allows it; with 1-element vectors a vocabulary row took 64 scalar loads a
        // thread (docs/BENCHMARKS.md, issue 30).
        const int wv = o_.aligned ? WindowVec() : 0;
        if (wv > vec_ && wv <= 8) {
          const int saved = vec_;
          vec_ = wv;
          split_ = target::PlanRowSplit(c.value + wv - 1, wv, 16, SplitWordsPerVector(), kSplitMaxVpt);
          vec_ = saved;
          if (split_) split_vec_ = wv;
        }
        if (!split_) split_ = target::PlanRowSplit(c.value, vec_, vec_ * max_size_, SplitWordsPerVector(), kSplitMaxVpt);
      }
      if (!stream_vec_) ChooseStage();
      return;
    }
    tpr_p_ = tpr;
    vpt_p_ = vpt;
    // Decode (few rows): the fewest vectors per thread whose row group fits decode_row_threads, so
    // a row's loads and MUFU work spread over many threads.
    // Two or more 16-byte packs of row data per vector (add_rms_norm's x and residual): twice the
    // threads, so a thread holds one vector (add_rms_norm 512 x 4096: t512x1 faster than t256x2;
    // level at 1 and 32 rows; docs/BENCHMARKS.md).
    // Single-pass kernels without a MUFU op per element (rms_norm) double it too: rms_norm x 4096 bf16
    // t512x1 against t256x2 in bench ops was faster at 1 and 32 rows and level at 512; not softmax
    // (doubled, slower at 4096) nor two-pass layer_norm (doubled, slower at 512 rows) (docs/BENCHMARKS.md).
    const int64_t dv = CeilDiv(c.value, base_vec);  // vectors per row at the width's own vector (the decode function's)
    const int words = std::max(PackWords(base_vec), 1);
    const bool doubled = words >= 8 || (k_.num_passes == 1 && !transcendental);
    const int cap = std::clamp(o_.decode_row_threads * (doubled ? 2 : 1), 1, 1024);
    for (int cand : {1, 2, 4, 8}) {
      const int t = RoundThreads(CeilDiv(dv, cand));
      if ((t > 0 && t <= cap) || cand == 8) {
        tpr_d_ = t;
        vpt_d_ = cand;
        break;
      }
    }
    // No decode row group at base_vec (wider than 1024 x 8 of its vectors): the prefill function serves
    // both (its vectors, in window mode too).
    const bool fallback = tpr_d_ == 0;
    if (fallback) tpr_d_ = tpr_p_, vpt_d_ = vpt_p_;
    decode_vec_ = fallback ? vec_ : base_vec;
    // The doubled group (two or more 16-byte packs of row data per vector) with one vector per thread
    // (add_rms_norm 4096 bf16: t512x1) takes two 8-byte packs per thread instead, half a row apart
    // (Triton's layout for this case): add_rms_norm 512 x 4096 bf16 with evict-first loads and 32-bit
    // indices, rotating sets, read marginally faster than with one 16-byte pack. Not for one pack per
    // vector: there rms_norm 512 x 4096 in 8-byte packs (t512x2) was slower than t512x1 in 16-byte ones
    // (docs/BENCHMARKS.md).
    if (!fallback && words >= 8 && vpt_d_ == 1 && tpr_d_ >= 512 && base_vec % 2 == 0) {
      decode_vec_ = base_vec / 2;
      vpt_d_ = 2;
      decode_half_ = true;
    }
    reg_rows_ = true;
  }

  // Register path, decode function: per-element outputs that depend on no reduction (depth 0), when
  // the kernel has reductions at all; stored right after the row's loads and re-read in the epilogue.
  std::vector<int> EarlyOutputs() const {
    std::vector<int> out;
    if (k_.num_passes == 0) return out;
    for (size_t o = 0; o < k_.outputs.size(); ++o)
      if (k_.outputs[o].tensor.access != Access::kRowScalar && k_.exprs[k_.outputs[o].expr].depth == 0)
        out.push_back(static_cast<int>(o));
    return out;
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
      // The outermost dim needs no modulo: r < R, so r / (the inner dims' product) < its size. That
      // was a 64-bit remainder by a runtime size per access (RoPE's [T, 1, D] tables: % s_T).
      if (t.varies[d] && d == 0) idx += fmt::format(" + (({}) / ({})) * ({})", r, div, stride[d]);
      else if (t.varies[d]) idx += fmt::format(" + ((({}) / ({})) % {}) * ({})", r, div, DimExpr(k_.space[d]), stride[d]);
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

  // A broadcast input whose last dim is the whole row (RoPE's [T, 1, D] tables beside x [T, H, D]):
  // a vector's elements are contiguous at the row's offset + c0, so it loads as one pack like a
  // full-shape input (was one scalar load per element).
  bool RowContiguous(int in) const {
    const KernelTensor& t = k_.inputs[in];
    return t.access == Access::kGeneral && !t.varies.empty() && t.varies.back() && !t.type.shape.empty() &&
           t.type.shape.back() == k_.space.back();
  }

  bool VectorLoaded(int in) const {
    auto a = k_.inputs[in].access;
    return a == Access::kFull || a == Access::kChannel || RowContiguous(in);
  }

  // A pass whose one reduction is the max of a 16-bit full-shape input's own elements, or of those
  // times a positive constant (logsumexp's max, softmax's max of x * scale * log2(e)), read in 16-byte
  // vectors. Such a pass compares the input's raw words two elements at a time (fz_max2: max.bf16x2 /
  // max.f16x2, which skip NaN as fmaxf does; sm_80+, which EmitOptions::stage says) — a conversion, a
  // multiply and a compare an element fewer — and scales the maximum once: max(x * c) == max(x) * c
  // for c > 0 (rounding is monotone). Vectors with columns outside the row take the element path.
  // `kept`: exprs read from registers (not the input), which keep the element path.
  struct RawMax {
    int input = -1;  // -1: the pass takes the element path
    int scale = -1;  // the constant's expr, or -1 (the input's elements themselves)
  };
  RawMax RawMaxInput(const std::vector<int>& reds, const KeptPacks& kept = {}) const {
    if (!o_.stage || reds.size() != 1 || k_.exprs[reds[0]].op != OpKind::kMax) return {};
    const int a = k_.exprs[reds[0]].args[0];
    if (kept.count(a)) return {};
    RawMax m;
    auto plain_load = [&](int e) {
      const Expr& x = k_.exprs[e];
      return x.kind == ExprKind::kLoad && !x.row_level && !kept.count(e);
    };
    const Expr& x = k_.exprs[a];
    if (plain_load(a)) {
      m.input = x.input;
    } else if (x.kind == ExprKind::kOp && x.op == OpKind::kMul && x.args.size() == 2) {
      for (int i = 0; i < 2; ++i) {
        const Expr& c = k_.exprs[x.args[1 - i]];
        if (plain_load(x.args[i]) && c.kind == ExprKind::kConst && c.constant > 0 && std::isfinite(c.constant)) {
          m.input = k_.exprs[x.args[i]].input;
          m.scale = x.args[1 - i];
        }
      }
    }
    if (m.input < 0) return {};
    const KernelTensor& t = k_.inputs[m.input];
    if (t.access != Access::kFull || DTypeSize(t.type.dtype) != 2 || vec_ * 2 != 16) return {};
    return m;
  }
  // An element's value in a RawMax pass's element path, and the pass's closing combination.
  std::string RawMaxElement(const RawMax& m, const std::string& x) const {
    return m.scale < 0 ? x : fmt::format("{} * e{}", x, m.scale);
  }
  std::string RawMaxClose(const RawMax& m, int rd) const {
    const std::string v = fmt::format("fz_max2<{}>::value(accw{})", CType(k_.inputs[m.input].type.dtype), rd);
    return fmt::format("    acc{0} = fmaxf(acc{0}, {1});\n", rd, RawMaxElement(m, v));
  }
  // The raw-word max of vector `pack` (an fz_pack<T, 8> expression) into accw<rd>, at indentation `ind`.
  std::string RawMaxStep(int rd, int in, const std::string& pack, const std::string& ind) const {
    return fmt::format("#pragma unroll\n{0}for (int k = 0; k < {1}; ++k) accw{2} = fz_max2<{3}>::op(accw{2}, {4}.w[k]);\n", ind,
                       vec_ / 2, rd, CType(k_.inputs[in].type.dtype), pack);
  }
  // The max pass of RawMaxInput in the register path: the row's packs xr<in> compared as raw words;
  // in window mode the row's first and last vector element by element over the row's columns.
  void EmitRawMaxRegPass(std::string& s, int rd, const RawMax& m) const {
    const int in = m.input;
    const char* ct = CType(k_.inputs[in].type.dtype);
    s += fmt::format("    unsigned accw{} = fz_max2<{}>::kInit;  // the max of each element pair so far (raw words)\n", rd, ct);
    s += "#pragma unroll\n    for (int it = 0; it < VPT; ++it) {\n";
    s += fmt::format("      const {} c0 = {};\n", ColType(), C0Expr());
    s += fmt::format("      if ({}) {{\n", ColGuard());
    if (Windowed()) {
      s += fmt::format("        if (c0 >= 0 && c0 + {} <= C) {{\n", vec_);
      s += RawMaxStep(rd, in, fmt::format("xr{}[it]", in), "          ");
      s += "        } else {\n";
      s += fmt::format("#pragma unroll\n          for (int j = 0; j < {0}; ++j)\n"
                       "            if (c0 + j >= 0 && c0 + j < C) acc{1} = fmaxf(acc{1}, {2});\n", vec_, rd,
                       RawMaxElement(m, fmt::format("xr{}[it].get(j)", in)));
      s += "        }\n";
    } else {
      s += RawMaxStep(rd, in, fmt::format("xr{}[it]", in), "        ");
    }
    s += "      }\n    }\n";
    s += RawMaxClose(m, rd);
  }
  // The max pass of RawMaxInput in the stage and looped functions: one 16-byte vector a step, raw
  // words where the vector is inside the row, else its converted elements over the row's columns.
  void EmitRawMaxLoopedPass(std::string& s, int rd, const RawMax& m) const {
    const int in = m.input;
    const char* ct = CType(k_.inputs[in].type.dtype);
    const bool staged = stage_now_ && stage_inputs_.count(in);
    s += fmt::format("    unsigned accw{} = fz_max2<{}>::kInit;  // the max of each element pair so far (raw words)\n", rd, ct);
    s += fmt::format("    for ({2} c0 = {3}({2})threadIdx.x * {0}{1}; c0 < {4}; c0 += ({2})blockDim.x * {0}) {{\n", vec_,
                     Windowed() ? " - " + ShiftName() : "", ix_, LoopStart(), LoopEnd());
    s += fmt::format("      if (c0 >= 0 && c0 + {} <= C) {{\n", vec_);
    s += fmt::format("        fz_pack<{}, {}> q;\n", ct, vec_);
    s += staged ? fmt::format("        q.load(xs{0}, sh{0} + (c0));\n", in) : fmt::format("        q.load(in{}, {});\n", in, Index(in, "r", "c0"));
    s += RawMaxStep(rd, in, "q", "        ");
    s += "      } else {\n";
    s += fmt::format("        float xe[{}];\n        {}\n", vec_, LoadVec(in, "xe", "r", "c0"));
    s += fmt::format("#pragma unroll\n        for (int j = 0; j < {0}; ++j)\n"
                     "          if (c0 + j >= 0 && c0 + j < C) acc{1} = fmaxf(acc{1}, {2});\n", vec_, rd, RawMaxElement(m, "xe[j]"));
    s += "      }\n    }\n";
    s += RawMaxClose(m, rd);
  }

  // rotate_half's partner elements (c + C/2 or c - C/2) as one pack per vector: every vector lies in
  // one half when the half width is a multiple of the pack (c0 is a multiple of vec).
  bool RotHalfVectorized() const {
    const Dim& c = k_.cols();
    return vec_ > 1 && c.is_static() && (c.value / 2) % vec_ == 0 && c.value % 2 == 0;
  }

  // Declares and loads the rotate_half partner packs xh<in> of the kLoadRotHalf exprs `targets`
  // reach (when RotHalfVectorized()), at row `r`, vector c0.
  void EmitRotHalfLoads(std::string& s, const std::vector<int>& targets, const std::string& ind, const KeptPacks& kept = {}) const {
    if (!RotHalfVectorized()) return;
    const std::vector<bool> reached = Reached(targets, kept);
    std::set<int> ins;
    for (size_t e = 0; e < k_.exprs.size(); ++e)
      if (reached[e] && !kept.count(static_cast<int>(e)) && k_.exprs[e].kind == ExprKind::kLoadRotHalf) ins.insert(k_.exprs[e].input);
    for (int in : ins)
      s += fmt::format("{0}float xh{1}[{2}];  // rotate_half's partner pack (the other half of the row)\n"
                       "{0}fz_load<{2}>(in{1}, {3}, xh{1});\n",
                       ind, in, vec_, Index(in, "r", "(c0 < C / 2 ? c0 + C / 2 : c0 - C / 2)"));
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
        if (RotHalfVectorized()) return fmt::format("(c0 < C / 2 ? -xh{0}[j] : xh{0}[j])", e.input);
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

  // The element-level exprs `targets` compute: reached through args, not through row-level values
  // (defined once per row) and not past `kept` (read from an early output's kept packs: leaves).
  std::vector<bool> Reached(const std::vector<int>& targets, const KeptPacks& kept = {}) const {
    std::vector<bool> seen(k_.exprs.size(), false);
    std::vector<int> stack(targets.begin(), targets.end());
    while (!stack.empty()) {
      const int e = stack.back();
      stack.pop_back();
      if (seen[e] || k_.exprs[e].row_level) continue;
      seen[e] = true;
      if (!kept.count(e))
        for (int a : k_.exprs[e].args) stack.push_back(a);
    }
    return seen;
  }

  // Whether element expr `x` has a transcendental (MUFU) op among the element-level exprs it computes.
  bool HasElementMufu(int x) const {
    const std::vector<bool> r = Reached({x});
    for (size_t e = 0; e < k_.exprs.size(); ++e)
      if (r[e] && k_.exprs[e].kind == ExprKind::kOp && Transcendental(k_.exprs[e].op)) return true;
    return false;
  }

  // Emits element-level definitions needed by `targets` (in id order) into s; the exprs in `kept`
  // are read from the registers that hold them (the kept packs sv<o>[it] of the early outputs that
  // stored them, or a pass's cached values ce<e>[it][j]).
  void EmitElementDefs(std::string& s, const std::vector<int>& targets, const std::string& ind, const KeptPacks& kept = {}) const {
    const std::vector<bool> need = Reached(targets, kept);
    for (size_t e = 0; e < k_.exprs.size(); ++e) {
      if (!need[e]) continue;
      auto kp = kept.find(static_cast<int>(e));
      s += kp != kept.end() ? fmt::format("{}const float e{} = {};\n", ind, e, kp->second)
                               : fmt::format("{}const float e{} = {};\n", ind, e, ExprText(static_cast<int>(e)));
    }
  }

  // Whether output `o` is a rounding to its own dtype: its store does that rounding (the same
  // round-to-nearest-even), and the stored value is exactly the expression's.
  bool StoreRounds(size_t o) const {
    const Expr& x = k_.exprs[k_.outputs[o].expr];
    return x.kind == ExprKind::kRound && x.dtype == k_.outputs[o].tensor.type.dtype && !x.args.empty();
  }
  // The expression an output's store converts: a rounding to the output's own dtype is left to the
  // store, not done twice.
  int StoredExpr(size_t o) const { return StoreRounds(o) ? k_.exprs[k_.outputs[o].expr].args[0] : k_.outputs[o].expr; }

  // Row-level definitions ready after pass `depth` (emitted once per row).
  void EmitRowDefs(std::string& s, int depth, const std::string& ind) {
    for (size_t e = 0; e < k_.exprs.size(); ++e) {
      const Expr& x = k_.exprs[e];
      if (!live_[e] || !x.row_level || x.depth != depth || emitted_row_.count(static_cast<int>(e))) continue;
      emitted_row_.insert(static_cast<int>(e));
      s += fmt::format("{}const float e{} = {};\n", ind, e, ExprText(static_cast<int>(e)));
    }
  }

  std::set<int> UsedVectorInputs(const std::vector<int>& targets, const KeptPacks& kept = {}) const {
    std::set<int> used;
    const std::vector<bool> reached = Reached(targets, kept);
    for (size_t e = 0; e < k_.exprs.size(); ++e)
      if (reached[e] && !kept.count(static_cast<int>(e)) && k_.exprs[e].kind == ExprKind::kLoad && VectorLoaded(k_.exprs[e].input))
        used.insert(k_.exprs[e].input);
    return used;
  }

  std::string LoadVec(int in, const std::string& dst, const std::string& r, const std::string& c0) const {
    if (stage_now_ && stage_inputs_.count(in)) return fmt::format("fz_load<{}>(xs{}, sh{} + ({}), {});", vec_, in, in, c0, dst);
    if (Windowed()) return fmt::format("fz_load_cols<{}>(in{}, {}, {}, C, {});", vec_, in, Index(in, r, c0), c0, dst);
    return fmt::format("fz_load<{}>(in{}, {}, {});", vec_, in, Index(in, r, c0), dst);
  }

  // Whether a pointwise kernel needs the row / column of its vector (anything but full-shape and
  // scalar operands, or a row-level value): otherwise the 64-bit r = i0 / C is left out.
  bool PointwiseNeedsRowCol() const {
    for (size_t e = 0; e < k_.exprs.size(); ++e) {
      if (!live_[e]) continue;
      const Expr& x = k_.exprs[e];
      if (x.row_level && x.kind != ExprKind::kConst && x.kind != ExprKind::kCols) return true;
      if (x.kind == ExprKind::kLoadRotHalf || x.kind == ExprKind::kCausal) return true;
      if (x.kind == ExprKind::kLoad && k_.inputs[x.input].access != Access::kFull && k_.inputs[x.input].access != Access::kScalar) return true;
    }
    for (const auto& o : k_.outputs)
      if (o.tensor.access != Access::kFull) return true;
    return false;
  }

  // One vector per thread, the grid covering the tensor in one step (the launcher sizes it; the
  // loop only runs again for grids capped by the hardware limit). The library's glu kernel measured
  // 1, 2 and 4 vectors per thread level at this layout and a capped grid-stride grid slower
  // (src/kernels/glu.cu), so the emitter follows it.
  // `decode`: the decode function (Run() sets its pack width and 32-bit index type): no loop, the
  // launcher's grid covers the vectors.
  void EmitPointwise(std::string& s, bool decode) {
    std::vector<int> targets;
    for (size_t o = 0; o < k_.outputs.size(); ++o) targets.push_back(StoredExpr(o));
    const bool rc = PointwiseNeedsRowCol();
    const bool tail = !rc && FlatTail();
    if (tail) s += fmt::format("  const {0} NE = R * C;\n  const {0} NV = (NE + {1}) / {2};  // the last vector masked\n", ix_, vec_ - 1, vec_);
    else s += fmt::format("  const {} NV = R * C / {};\n", ix_, vec_);
    if (decode) {
      // No bounds check where the launcher's grid (blocks of 128 or 256) covers the vectors exactly, as
      // Triton drops its mask: swiglu 8 x 5632 and 32 x 4096 read slightly faster by graph replay in the
      // peer's process (the q4_ng hand variant, in dev/kernel_ab's git history).
      int64_t n = 1;
      for (const Dim& d : k_.space) n = d.is_static() && n > 0 ? n * d.value : -1;
      const bool exact = !tail && n > 0 && n % vec_ == 0 && (n / vec_) % kPointwiseDecodeWideThreads == 0;
      s += fmt::format("  {{\n    const {0} v = ({0})blockIdx.x * blockDim.x + threadIdx.x;  // the grid covers the vectors{1}\n",
                       ix_, exact ? " exactly" : "");
      s += exact ? "    (void)NV;\n" : "    if (v >= NV) return;\n";
    } else {
      s += "  for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < NV; v += (long long)gridDim.x * blockDim.x) {\n";
    }
    s += fmt::format("    const {} i0 = v * {};\n", ix_, vec_);
    if (rc) s += fmt::format("    const {0} r = i0 / C;\n    const {0} c0 = i0 - r * C;\n", ix_);
    EmitRowDefs(s, 0, "    ");
    for (int in : UsedVectorInputs(targets))
      s += fmt::format("    float x{}[{}];\n    {}\n", in, vec_,
                       rc     ? LoadVec(in, "x" + std::to_string(in), "r", "c0")
                       : tail ? fmt::format("if (i0 + {0} <= NE) fz_load<{0}>(in{1}, i0, x{1}); else fz_load_cols<{0}>(in{1}, i0, i0, NE, x{1});", vec_, in)
                              : fmt::format("fz_load<{0}>(in{1}, i0, x{1});", vec_, in));
    EmitRotHalfLoads(s, targets, "    ");
    for (size_t o = 0; o < k_.outputs.size(); ++o) s += fmt::format("    float o{}[{}];\n", o, vec_);
    s += fmt::format("#pragma unroll\n    for (int j = 0; j < {}; ++j) {{\n", vec_);
    if (rc) s += fmt::format("      const {} c = c0 + j;\n      (void)c;\n", ix_);
    EmitElementDefs(s, targets, "      ");
    for (size_t o = 0; o < k_.outputs.size(); ++o) s += fmt::format("      o{}[j] = e{};\n", o, StoredExpr(o));
    s += "    }\n";
    for (size_t o = 0; o < k_.outputs.size(); ++o) {
      if (tail)
        s += fmt::format("    fz_store_cols<{}, {}>(out{}, i0, i0, NE, o{});\n", vec_, CType(k_.outputs[o].tensor.type.dtype), o, o);
      else
        EmitStore(s, static_cast<int>(o), "    ", "i0");
    }
    s += "  }\n";
  }

  // Whether a flat pointwise kernel's element count may leave a partial last vector: unless the
  // iteration space is static and a multiple of the vector.
  bool FlatTail() const {
    if (vec_ <= 1) return false;
    int64_t n = 1;
    for (const Dim& d : k_.space) {
      if (!d.is_static()) return true;
      n *= d.value;
    }
    return n % vec_ != 0;
  }

  void EmitStore(std::string& s, int o, const std::string& ind, const std::string& flat_i0) const {
    const auto& out = k_.outputs[o];
    const char* ct = CType(out.tensor.type.dtype);
    switch (out.tensor.access) {
      case Access::kFull:
        // the stage function's stores as one st.global.v4 (fz_store's V4: nvcc split them there)
        s += Windowed() ? fmt::format("{}fz_store_cols<{}, {}{}>(out{}, {}, c0, C, o{});\n", ind, vec_, ct, stage_now_ ? ", true" : "", o,
                                      flat_i0, o)
                        : fmt::format("{}fz_store<{}, {}{}>(out{}, {}, o{});\n", ind, vec_, ct, stage_now_ ? ", true" : "", o, flat_i0, o);
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

  // ---------------------------------------------------------------- register path (static rows)
  // One loop over this thread's VPT vectors; `inner` is emitted inside the element loop with the
  // element exprs of `targets` defined, `pre` / `after` around it; vectors where `guard` holds.
  // `kept`: exprs read from registers that already hold them (EmitElementDefs).
  void EmitRegLoop(std::string& s, const std::vector<int>& targets, const std::string& guard,
                   const std::function<void(std::string&)>& pre, const std::function<void(std::string&)>& inner,
                   const std::function<void(std::string&)>& after, const KeptPacks& kept = {}) {
    const std::set<int> cached = CachedInputs();
    const std::set<int>& channels = reg_channels_;
    s += "#pragma unroll\n    for (int it = 0; it < VPT; ++it) {\n";
    s += fmt::format("      const {} c0 = {};\n", ColType(), C0Expr());
    s += fmt::format("      if ({}) {{\n", guard);
    if (Windowed()) {
      // window mode: the row's inputs from their packs; the other per-element operands (off the
      // 16-byte grid at a shifted row's columns) element by element; the element loop twice — vectors
      // inside the row without a column guard, the first and last with it (edge_now_: the reductions
      // skip columns outside the row, the loads read none).
      std::set<int> others;
      for (int in : UsedVectorInputs(targets, kept)) {
        if (cached.count(in))
          s += fmt::format("        float x{0}[{1}];\n#pragma unroll\n        for (int j = 0; j < {1}; ++j) x{0}[j] = xr{0}[it].get(j);\n", in, vec_);
        else
          s += fmt::format("        float x{}[{}];\n", in, vec_), others.insert(in);
      }
      pre(s);
      EmitInteriorAndEdges(s, [&](const std::string& ind) {
        for (int in : others)
          s += edge_now_ ? fmt::format("{}fz_load_cols<{}>(in{}, {}, c0, C, x{});\n", ind, vec_, in, Index(in, "r", "c0"), in)
                         : fmt::format("{}fz_load_elems<{}>(in{}, {}, c0 + {} < C, x{});\n", ind, vec_, in, Index(in, "r", "c0"), vec_, in);
        EmitElementLoop(s, ind, targets, kept, inner);
      });
      after(s);
      s += "      }\n    }\n";
      return;
    }
    for (int in : UsedVectorInputs(targets, kept)) {
      if (cached.count(in))
        s += fmt::format("        float x{0}[{1}];\n#pragma unroll\n        for (int j = 0; j < {1}; ++j) x{0}[j] = xr{0}[it].get(j);\n", in, vec_);
      else if (channels.count(in))
        s += fmt::format("        float x{0}[{1}];\n#pragma unroll\n        for (int j = 0; j < {1}; ++j) x{0}[j] = wr{0}[it].get(j);\n", in, vec_);
      else
        s += fmt::format("        float x{}[{}];\n        {}\n", in, vec_, LoadVec(in, "x" + std::to_string(in), "r", "c0"));
    }
    EmitRotHalfLoads(s, targets, "        ", kept);
    pre(s);
    EmitElementLoop(s, "        ", targets, kept, inner);
    after(s);
    s += "      }\n    }\n";
  }

  // One vector's element loop at indentation `ind`: j over the vector, c = c0 + j, the element exprs
  // `targets` need (EmitElementDefs, `kept` read from registers), then `inner`.
  void EmitElementLoop(std::string& s, const std::string& ind, const std::vector<int>& targets, const KeptPacks& kept,
                       const std::function<void(std::string&)>& inner) const {
    s += fmt::format("#pragma unroll\n{0}for (int j = 0; j < {1}; ++j) {{\n{0}  const {2} c = c0 + j;\n{0}  (void)c;\n", ind, vec_, ColType());
    EmitElementDefs(s, targets, ind + "  ", kept);
    inner(s);
    s += ind + "}\n";
  }

  // Window mode's vector body twice (`body(ind)`): for vectors inside the row, then with edge_now_
  // set for the row's first and last (column-guarded loads, stores and reductions).
  void EmitInteriorAndEdges(std::string& s, const std::function<void(const std::string&)>& body) {
    s += fmt::format("        if (c0 >= 0 && c0 + {} <= C) {{\n", vec_);
    body("          ");
    s += "        } else {\n";
    edge_now_ = true;
    body("          ");
    edge_now_ = false;
    s += "        }\n";
  }

  // Declares `<prefix><input>[VPT]` packs for `inputs` and loads this thread's vectors of row `r`
  // into them (`ind`: the indentation of the enclosing block).
  // `evict_first`: loads marked for early eviction (the decode function's row inputs, read once).
  void EmitPackLoads(std::string& s, const std::set<int>& inputs, const char* prefix, const std::string& r,
                     const std::string& ind, bool evict_first = false) const {
    for (int in : inputs) s += fmt::format("{}fz_pack<{}, {}> {}{}[VPT];\n", ind, CType(k_.inputs[in].type.dtype), vec_, prefix, in);
    s += fmt::format("#pragma unroll\n{}for (int it = 0; it < VPT; ++it) {{\n", ind);
    s += fmt::format("{}  const {} c0 = {};\n", ind, ColType(), C0Expr());
    s += fmt::format("{}  if ({}) {{\n", ind, ColGuard());
    // window mode: the vectors inside the row as one aligned access each, the row's first and last
    // column by column (never a byte outside the row: the first row's start and the last row's end
    // are the tensor's)
    if (Windowed()) s += fmt::format("{}   if (c0 >= 0 && c0 + {} <= C) {{\n", ind, vec_);
    for (int in : inputs)
      s += evict_first ? fmt::format("{}    {}{}[it].load_ef(in{}, {}, pol);\n", ind, prefix, in, in, Index(in, r, "c0"))
                       : fmt::format("{}    {}{}[it].load(in{}, {});\n", ind, prefix, in, in, Index(in, r, "c0"));
    if (Windowed()) {
      // The edge vectors as one aligned load (fz_pack::load_edge) where the thread holds at most the
      // register path's budget of row data (target::kRegisterRowWords), else column by column
      // (load_cols): load_edge carries both forms, and past the budget (a row reduction's 32 words)
      // the extra registers cost more rows resident an SM than the edges save (docs/BENCHMARKS.md).
      // VPT is a constant of the function.
      const int words = static_cast<int>(inputs.size()) * std::max(PackWords(vec_), 1);
      s += fmt::format("{}   }} else if (VPT * {} <= {}) {{\n", ind, words, target::kRegisterRowWords);
      for (int in : inputs)
        s += fmt::format("{}    {}{}[it].load_edge(in{}, {}, c0, (int)C, R * C);\n", ind, prefix, in, in, Index(in, r, "c0"));
      s += fmt::format("{}   }} else {{\n", ind);
      for (int in : inputs)
        s += fmt::format("{}    {}{}[it].load_cols(in{}, {}, c0, C);\n", ind, prefix, in, in, Index(in, r, "c0"));
      s += fmt::format("{}   }}\n", ind);
    }
    s += fmt::format("{}  }}\n{}}}\n", ind, ind);
  }

  // The type of a row's column indices: 32-bit where the width is static and far inside that range
  // (64-bit column arithmetic doubled the guards' instructions in the register path), else the
  // function's index type. Rows and flat indices keep ix_.
  std::string ColType() const {
    const Dim& c = k_.cols();
    return c.is_static() && c.value <= (int64_t{1} << 30) ? "int" : ix_;
  }

  // The first column of vector `it` of thread `t` (the register path's layout; in the split function
  // offset by the block's share).
  std::string C0Expr() const {
    const std::string local = fmt::format("(({0})it * TPR + t) * {1}", ColType(), vec_);
    const std::string first = split_now_ ? "W0 + " + local : local;
    if (Windowed()) return first + " - sh";  // window mode: the row's aligned window starts sh columns before it
    return first;
  }

  // The register path's column guard: none when the row group's vectors cover the row exactly (a
  // static width of TPR x VPT x vec: every c0 is inside), so no branch splits the loads and stores.
  // In the split function: inside this block's share too.
  std::string ColGuard() const {
    if (split_now_) return Windowed() ? "c0 + sh - W0 < CHUNK && c0 < C" : "c0 - W0 < CHUNK && c0 < C";
    if (Windowed()) return "c0 < C";
    const Dim& c = k_.cols();
    return c.is_static() && c.value == int64_t{tpr_now_} * vpt_now_ * vec_ ? "true" : "c0 < C";
  }
  std::string Guard(int rpb) const {
    const std::string col = ColGuard();
    if (rpb == 1) return col;
    return col == "true" ? "valid" : "valid && " + col;
  }

  // Each pass's reductions and the element exprs they reduce (index = pass, 1..num_passes).
  void PassReductions(std::vector<std::vector<int>>* reds, std::vector<std::vector<int>>* args) const {
    reds->assign(k_.num_passes + 1, {});
    args->assign(k_.num_passes + 1, {});
    for (size_t e = 0; e < k_.exprs.size(); ++e)
      if (live_[e] && k_.exprs[e].kind == ExprKind::kReduce && k_.exprs[e].depth >= 1 && k_.exprs[e].depth <= k_.num_passes) {
        (*reds)[k_.exprs[e].depth].push_back(static_cast<int>(e));
        (*args)[k_.exprs[e].depth].push_back(k_.exprs[e].args[0]);
      }
  }

  // A pass's reduced value with a MUFU op under it that a later pass or the epilogue reads again
  // (softmax's 2^(z - max), summed in pass 2 and scaled in the epilogue) is kept as f32, ce<e>[VPT][vec],
  // instead of recomputed: one exponential per element instead of two. Returns the exprs each pass
  // keeps; (*kept_after)[p]: what the passes after p (and the epilogue, after the last) read from
  // registers, starting from `kept`.
  std::vector<std::vector<int>> PassCaches(const std::vector<int>& vec_targets, const std::vector<std::vector<int>>& pass_args,
                                           const KeptPacks& kept, std::vector<KeptPacks>* kept_after) const {
    std::vector<std::vector<int>> pass_cache(k_.num_passes + 1);
    kept_after->assign(k_.num_passes + 1, kept);
    for (int p = 1; p <= k_.num_passes; ++p) {
      (*kept_after)[p] = (*kept_after)[p - 1];
      std::vector<int> later = vec_targets;
      for (int q = p + 1; q <= k_.num_passes; ++q) later.insert(later.end(), pass_args[q].begin(), pass_args[q].end());
      const std::vector<bool> reread = Reached(later, (*kept_after)[p - 1]);
      for (int x : std::set<int>(pass_args[p].begin(), pass_args[p].end()))
        if (reread[x] && !(*kept_after)[p].count(x) && HasElementMufu(x)) {
          pass_cache[p].push_back(x);
          (*kept_after)[p][x] = fmt::format("ce{}[it][j]", x);
        }
    }
    return pass_cache;
  }

  // Registers a split function holds per vector: the cached inputs' packs (one word at least) and the
  // passes' kept f32 values (one word per element), as EmitRowRegisters lays them out (no early
  // outputs: those are the decode function's).
  int SplitWordsPerVector() const {
    int words = PackWords(vec_);
    for (const auto& cached : KernelPassCaches()) words += vec_ * static_cast<int>(cached.size());
    return std::max(words, 1);
  }
  // Whether a pass keeps f32 values for a later pass or the epilogue (PassCaches: softmax's exponentials).
  bool KeepsPassValues() const {
    for (const auto& cached : KernelPassCaches())
      if (!cached.empty()) return true;
    return false;
  }
  // PassCaches of the kernel's vector outputs and passes, nothing kept before them (no early outputs).
  std::vector<std::vector<int>> KernelPassCaches() const {
    std::vector<int> vec_targets;
    for (size_t o = 0; o < k_.outputs.size(); ++o)
      if (k_.outputs[o].tensor.access != Access::kRowScalar) vec_targets.push_back(StoredExpr(o));
    std::vector<std::vector<int>> reds, args;
    PassReductions(&reds, &args);
    std::vector<KeptPacks> kept_after;
    return PassCaches(vec_targets, args, {}, &kept_after);
  }
  // 32-bit registers per vector of `vec` elements that the cached inputs' packs take (a pack
  // narrower than a register takes one; 0 without cached inputs).
  int PackWords(int vec) const {
    int words = 0;
    for (int in : CachedInputs()) words += std::max(1, vec * DTypeSize(k_.inputs[in].type.dtype) / 4);
    return words;
  }
  // The split function's vectors per thread at most (its loops are unrolled: code size).
  static constexpr int kSplitMaxVpt = 64;

  // `decode`: the decode function (no row loop, early stores, evict-first row loads; Run() sets its
  // index type and pack width).
  // `rpb`: row groups per block; the launcher's block is exactly tpr x rpb threads, so with one group
  // per block every row the loop reaches is valid, and no guard (a branch around the stores that
  // kept the compiler from moving loads across it, measurably slower for add_rms_norm) is emitted.
  // `split`: the split function (Run(), split_): one row per cluster (its size the launch's), block
  // `rank` holding window elements [rank x CHUNK, (rank + 1) x CHUNK) of it; TPR is the block.
  void EmitRowRegisters(std::string& s, int tpr, int vpt, int rpb, bool decode, bool split = false) {
    tpr_now_ = tpr;
    vpt_now_ = vpt;
    split_now_ = split;
    reg_now_ = !split && !decode;  // window mode: the prefill function only
    const std::set<int> cached = CachedInputs();
    // Per-column inputs before the rows, except in the half-pack decode function: there the weight
    // loaded in the epilogue (the compiler issues it during the reduction) measured faster
    // (add_rms_norm 1 / 32 / 512 x 4096: docs/BENCHMARKS.md).
    // None in window mode: a per-column operand's columns move with each row's shift.
    reg_channels_ = (decode && decode_half_) || Windowed() ? std::set<int>{} : ChannelInputs(vpt);
    if (split) {
      // target::RowSplitChunk's formula: the launcher sized the block (TPR) for this share
      s += fmt::format("  const int TPR = blockDim.x;  // the block: the row's share over VPT vectors (the launcher's)\n"
                       "  constexpr int VPT = {};  // vectors per thread\n"
                       "  const int CL = (int)fz::cluster_blocks();  // blocks per row (the launch's cluster)\n"
                       "  const long long CHUNK = ({}LL + CL - 1) / CL * {};  // row elements a block holds\n",
                       vpt, (k_.cols().value + (Windowed() ? vec_ - 1 : 0) + vec_ - 1) / vec_, vec_);  // window: cols + vec - 1
      s += fmt::format("  const long long W0 = (long long)fz::cluster_rank() * CHUNK;  // this block's first {}\n",
                       Windowed() ? "window element (column W0 - sh)" : "column");
      int nred = 0;
      for (size_t e = 0; e < k_.exprs.size(); ++e) nred += live_[e] && k_.exprs[e].kind == ExprKind::kReduce;
      // each reduction's partials, pushed here by every block of the cluster (fz::cluster_reduce),
      // and the mbarrier each completes on — armed before the cluster barrier after the row's loads
      s += fmt::format("  __shared__ float parts[{0}][{1}];  // reduction i: block k's partial in parts[i][k]\n"
                       "  __shared__ unsigned long long bars[{0}];\n"
                       "  if (threadIdx.x == 0)\n    for (int i = 0; i < {2}; ++i) fz::push_arm(&bars[i], 4u * CL);\n",
                       std::max(nred, 1), target::kRowSplitBlocks, nred);
    }
    if (!split) s += fmt::format("  constexpr int TPR = {}, VPT = {};  // threads per row, vectors per thread\n", tpr, vpt);
    if (rpb == 1) s += "  constexpr int rpb = 1;  // one row group per block (blockDim.x == TPR)\n  const int t = threadIdx.x;\n";
    else s += fmt::format("  constexpr int rpb = {};  // row groups per block (blockDim.x == TPR * rpb)\n  const int g = threadIdx.x / TPR, t = threadIdx.x - g * TPR;\n", rpb);
    if (!reg_channels_.empty()) {
      s += "  // per-column inputs, the same for every row: loaded once, before the rows and their reductions\n";
      EmitPackLoads(s, reg_channels_, "wr", "0", "  ");
    }
    s += "  __shared__ float smem[64];\n  int phase = 0;\n  (void)smem;\n  (void)phase;\n";
    const bool evict_first = decode && !cached.empty();
    if (evict_first) s += "  const unsigned long long pol = fz::evict_first();  // the rows are read once\n";
    // The grid covers the rows (the launcher's rule: a block for every row group). The decode
    // function has no row loop: with it, the compiler kept the early stores and the epilogue's loads
    // apart (add_rms_norm 512 x 4096 read slower). Nor has the prefill function of a kernel without
    // per-column inputs (softmax): a loop kept its state live across iterations, more registers a
    // thread and fewer resident blocks an SM; with per-column inputs (the norms' weights, loaded
    // before the row) the loop measured faster (docs/BENCHMARKS.md, "Register rows"), so it stays —
    // one iteration at the launcher's grid, a grid-stride walk where a caller's grid is capped.
    const bool row_loop = !decode && !split && !reg_channels_.empty();
    if (split)
      s += "  {\n    const long long r0 = (long long)blockIdx.x / CL;  // the launcher's grid is exactly R clusters\n";
    else if (!row_loop)
      s += fmt::format("  {{\n    const {0} r0 = ({0})blockIdx.x * rpb;  // the grid covers the rows\n    if (r0 >= R) return;\n", ix_);
    else
      s += fmt::format("  for ({0} r0 = ({0})blockIdx.x * rpb; r0 < R; r0 += ({0})gridDim.x * rpb) {{\n", ix_);
    // The per-column packs laundered each row where their f32 copies would exceed
    // kMaxHoistedChannelFloats: without it the compiler hoists their conversions out of the row loop,
    // which with two channel inputs (layer_norm) took half the resident blocks of rms_norm's kernel.
    if (!decode && static_cast<int>(reg_channels_.size()) * vpt * vec_ > kMaxHoistedChannelFloats) {
      s += "#pragma unroll\n    for (int it = 0; it < VPT; ++it) {";
      for (int in : reg_channels_) s += fmt::format(" wr{}[it].launder();", in);
      s += " }  // convert the per-column packs where they are used, not once before the loop\n";
    }
    if (rpb == 1) {
      s += "    constexpr bool valid = true;  // one row group per block, and r0 < R\n    (void)valid;\n";
      s += fmt::format("    const {} r = r0;\n", ix_);
    } else {
      // Kept where the rows are a static multiple of rpb too: dropping it there made rms_norm bf16
      // t64x4 x 2 rows faster at 16384 x 2048 but slower at 2048 x 2048 (docs/BENCHMARKS.md).
      s += "    const bool valid = r0 + g < R;\n";
      s += fmt::format("    const {} r = valid ? r0 + g : R - 1;  // an idle group re-reads the last row and stores nothing\n", ix_);
    }
    if (Windowed())
      s += fmt::format("    const int sh = (int)((r * C) & {});  // the row start past the 16-byte boundary (elements)\n", vec_ - 1);
    EmitPackLoads(s, cached, "xr", "r", "    ", evict_first);
    if (split) s += "    fz::cluster_sync();  // every block's mbarriers armed before any push (the loads in flight)\n";
    EmitRowDefs(s, 0, "    ");
    // Outputs that need no reduction (add_rms_norm's sum) are stored now, before the first
    // reduction: their writes overlap the reductions instead of queueing behind the epilogue's
    // (every element was loaded above, so an output aliasing its input is still read first).
    const std::vector<int> early = decode ? EarlyOutputs() : std::vector<int>{};
    auto is_early = [&](size_t o) { return std::find(early.begin(), early.end(), static_cast<int>(o)) != early.end(); };
    // The epilogue's vector outputs, and the early outputs whose stored packs it reads (add_rms_norm's
    // sum: kept as the packed words that were stored, sv<o>[VPT]) rather than rebuilding them from
    // the row's input packs — those then die after the reductions: fewer registers and instructions.
    // add_rms_norm 512 x 4096 read faster with the stored packs kept than re-read from memory or
    // rebuilt (docs/BENCHMARKS.md). Only outputs that hold the value exactly (a rounding to their own
    // 16-bit dtype, or f32) are kept.
    std::vector<int> vec_targets;
    auto late = [&](size_t o) { return k_.outputs[o].tensor.access != Access::kRowScalar && !is_early(o); };
    for (size_t o = 0; o < k_.outputs.size(); ++o)
      if (late(o)) vec_targets.push_back(StoredExpr(o));
    // each pass's reductions and the element exprs they reduce
    std::vector<std::vector<int>> pass_reds, pass_args;
    PassReductions(&pass_reds, &pass_args);
    std::vector<int> all_targets = vec_targets;
    for (const auto& a : pass_args) all_targets.insert(all_targets.end(), a.begin(), a.end());
    KeptPacks kept;
    std::set<int> kept_outputs;
    const std::vector<bool> later_exprs = Reached(all_targets);
    for (int o : early) {
      const int e = k_.outputs[o].expr;
      const DType dt = k_.outputs[o].tensor.type.dtype;
      const bool exact = dt == DType::kF32 || (StoreRounds(o) && DTypeSize(dt) == 2 && (vec_ % 2 == 0 || vec_ == 1));
      if (exact && k_.outputs[o].tensor.access == Access::kFull && later_exprs[e]) {
        kept[e] = fmt::format("sv{}[it].get(j)", o);
        kept_outputs.insert(o);
      }
    }
    auto is_kept = [&](int o) { return kept_outputs.count(o) > 0; };
    // the passes' kept f32 values (PassCaches)
    std::vector<KeptPacks> kept_after;
    const std::vector<std::vector<int>> pass_cache = PassCaches(vec_targets, pass_args, kept, &kept_after);
    if (!early.empty()) {
      std::vector<int> targets;
      for (int o : early) targets.push_back(StoredExpr(o));
      s += "    // outputs that need no reduction, stored before the first one\n";
      for (int o : early)
        if (is_kept(o)) s += fmt::format("    fz_pack<{}, {}> sv{}[VPT];  // the stored packs, read again by the passes\n",
                                      CType(k_.outputs[o].tensor.type.dtype), vec_, o);
      EmitRegLoop(s, targets, Guard(rpb), [&](std::string& b) {
        for (int o : early) b += fmt::format("        float o{}[{}];\n", o, vec_);
      }, [&](std::string& b) {
        for (int o : early) b += fmt::format("          o{}[j] = e{};\n", o, StoredExpr(o));
      }, [&](std::string& b) {
        for (int o : early) {
          if (is_kept(o)) b += fmt::format("        sv{0}[it].set(o{0});\n        sv{0}[it].store(out{0}, r * C + c0);\n", o);
          else EmitStore(b, o, "        ", "r * C + c0");
        }
      });
    }
    // launder() after each pass the packs a later pass or the epilogue still reads
    std::vector<std::set<int>> read_after(k_.num_passes + 1);
    read_after[k_.num_passes] = UsedVectorInputs(vec_targets, kept_after[k_.num_passes]);
    for (int p = k_.num_passes; p >= 2; --p) {
      read_after[p - 1] = read_after[p];
      for (int in : UsedVectorInputs(pass_args[p], kept_after[p - 1])) read_after[p - 1].insert(in);
    }
    for (int p = 1; p <= k_.num_passes; ++p) {
      const std::vector<int>& reds = pass_reds[p];
      for (int rd : reds) {
        const bool mx = k_.exprs[rd].op == OpKind::kMax;
        s += fmt::format("    float acc{} = {};\n", rd, mx ? "-__int_as_float(0x7f800000)" : "0.0f");
      }
      s += fmt::format("    // pass {}: {} reduction{}\n", p, reds.size(), reds.size() == 1 ? "" : "s");
      for (int x : pass_cache[p]) s += fmt::format("    float ce{}[VPT][{}];  // kept for the passes after this one\n", x, vec_);
      const RawMax raw = pass_cache[p].empty() ? RawMaxInput(reds, kept_after[p - 1]) : RawMax{};
      if (raw.input >= 0 && cached.count(raw.input)) EmitRawMaxRegPass(s, reds[0], raw);
      else EmitRegLoop(s, pass_args[p], ColGuard(), [](std::string&) {}, [&](std::string& b) {
        const std::string skip = Windowed() && edge_now_ ? "if (c >= 0 && c < C) " : "";  // window edges: the row's columns only
        for (int rd : reds)
          b += k_.exprs[rd].op == OpKind::kMax ? fmt::format("          {2}acc{0} = fmaxf(acc{0}, e{1});\n", rd, k_.exprs[rd].args[0], skip)
                                               : fmt::format("          {2}acc{0} += e{1};\n", rd, k_.exprs[rd].args[0], skip);
        for (int x : pass_cache[p]) b += fmt::format("          ce{0}[it][j] = e{0};\n", x);
      }, [](std::string&) {}, kept_after[p - 1]);
      for (int rd : reds) {
        const char* op = k_.exprs[rd].op == OpKind::kMax ? "MaxOp" : "SumOp";
        s += split ? fmt::format("    acc{0} = fz::cluster_reduce<fz::{1}>(acc{0}, TPR, smem, phase, parts[{2}], &bars[{2}], CL);\n", rd,
                                 op, split_slot_++)
                   : fmt::format("    acc{0} = fz::row_reduce<fz::{1}>(acc{0}, TPR, smem, phase);\n", rd, op);
      }
      EmitRowDefs(s, p, "    ");
      for (int in : cached)
        if (read_after[p].count(in)) s += fmt::format("#pragma unroll\n    for (int it = 0; it < VPT; ++it) xr{}[it].launder();\n", in);
    }
    s += "    // epilogue\n";
    if (!vec_targets.empty()) {
      EmitRegLoop(s, vec_targets, Guard(rpb), [&](std::string& b) {
        for (size_t o = 0; o < k_.outputs.size(); ++o)
          if (late(o)) b += fmt::format("        float o{}[{}];\n", o, vec_);
      }, [&](std::string& b) {
        for (size_t o = 0; o < k_.outputs.size(); ++o)
          if (late(o)) b += fmt::format("          o{}[j] = e{};\n", o, StoredExpr(o));
      }, [&](std::string& b) {
        for (size_t o = 0; o < k_.outputs.size(); ++o)
          if (late(o)) EmitStore(b, static_cast<int>(o), "        ", "r * C + c0");
      }, kept_after[k_.num_passes]);
    }
    for (size_t o = 0; o < k_.outputs.size(); ++o)
      if (k_.outputs[o].tensor.access == Access::kRowScalar)
        s += fmt::format("    if ({} && t == 0) out{}[r] = fz_cvt<{}>::from(e{});\n", split ? "W0 == 0" : "valid", o,
                         CType(k_.outputs[o].tensor.type.dtype), k_.outputs[o].expr);
    s += "  }\n";
    split_now_ = false;
    reg_now_ = false;
  }

  // ---------------------------------------------------------------- looped path (symbolic or very wide rows)
  // One block per row, each pass streams the row (re-read from L2), block reductions.
  void EmitLoopedLoop(std::string& s, const std::vector<int>& targets, const std::function<void(std::string&)>& pre,
                      const std::function<void(std::string&)>& inner, const std::function<void(std::string&)>& after_vec) {
    // U vectors per thread per step, every load of the step issued before the first use: one row per
    // block leaves few blocks per SM, and one narrow load in flight per thread is far below the bytes
    // in flight an SM needs to cover the memory latency. U: as many as keep kLoopedRowFloats values of
    // the step in registers (half of what a thread has at kLoopedRowThreads), at most kLoopedUnroll.
    auto used = UsedVectorInputs(targets);
    // 16-byte vectors keep one per thread per step: the unroll measured slower for them and faster
    // for narrower vectors (odd widths) (docs/BENCHMARKS.md, the untuned sweep).
    // The stage function reads shared memory: one vector per step.
    // The stream (stream_now_): StreamUnroll() 16-byte vectors a step, the row's inputs held as raw
    // packs until used (4 registers a vector), edge vectors of the window column by column.
    const int U = stream_now_ ? StreamUnroll()
                  : vec_ * max_size_ >= 16 || stage_now_
                      ? 1
                      : std::clamp(kLoopedRowFloats / std::max(1, vec_ * static_cast<int>(used.size())), 1, kLoopedUnroll);
    const std::set<int> packed = stream_now_ ? CachedInputs() : std::set<int>{};
    // Column indices: ix_ (the stage function's rows fit shared memory, so 32-bit ints there), the
    // stream's ColType() (32-bit for static widths; the row offset stays 64-bit).
    const std::string ix = stream_now_ ? ColType() : ix_;
    s += fmt::format("    for ({3} cb = {4}({3})threadIdx.x * {0}{2}; cb < {5}; cb += ({3})blockDim.x * {1}) {{\n", vec_, vec_ * U,
                     Windowed() ? " - " + ShiftName() : "", ix, LoopStart(), LoopEnd());
    for (int in : used)
      s += packed.count(in) ? fmt::format("      fz_pack<{}, {}> xq{}[{}];\n", CType(k_.inputs[in].type.dtype), vec_, in, U)
                            : fmt::format("      float xu{}[{}][{}];\n", in, U, vec_);
    s += fmt::format("#pragma unroll\n      for (int u = 0; u < {}; ++u) {{\n", U);
    s += fmt::format("        const {1} c0 = cb + ({1})u * blockDim.x * {0};\n", vec_, ix);
    s += "        if (c0 < C) {\n";
    for (int in : used) {
      if (!packed.count(in)) {
        s += fmt::format("          {}\n", LoadVec(in, fmt::format("xu{}[u]", in), "r", "c0"));
      } else if (Windowed()) {
        s += fmt::format("          if (c0 >= 0 && c0 + {} <= C) xq{}[u].load_ef(in{}, {}, pol);\n", vec_, in, in, Index(in, "r", "c0"));
        s += fmt::format("          else xq{}[u].load_cols(in{}, {}, c0, C);\n", in, in, Index(in, "r", "c0"));
      } else {
        s += fmt::format("          xq{}[u].load_ef(in{}, {}, pol);\n", in, in, Index(in, "r", "c0"));
      }
    }
    s += "        }\n      }\n";
    s += fmt::format("#pragma unroll\n      for (int u = 0; u < {}; ++u) {{\n", U);
    s += fmt::format("        const {1} c0 = cb + ({1})u * blockDim.x * {0};\n", vec_, ix);
    s += "        if (c0 >= C) break;\n";
    for (int in : used)
      s += packed.count(in) ? fmt::format("        float x{0}[{1}];\n#pragma unroll\n        for (int j = 0; j < {1}; ++j) x{0}[j] = xq{0}[u].get(j);\n", in, vec_)
                            : fmt::format("        const float* x{0} = xu{0}[u];\n", in);
    EmitRotHalfLoads(s, targets, "        ");
    pre(s);
    auto elements = [&](const std::string& ind) { EmitElementLoop(s, ind, targets, {}, inner); };
    if (Windowed()) {
      // window mode: the element loop twice — vectors inside the row without a column guard, the
      // row's first and last vector with it (edge_now_: the reductions skip columns outside the row).
      // nvcc may merge the two back into one predicated body (a compare per element); the interior
      // vectors as a loop of their own, the edge vectors after it on their owner threads, measured
      // slower at odd widths (docs/BENCHMARKS.md).
      EmitInteriorAndEdges(s, elements);
    } else {
      elements("        ");
    }
    after_vec(s);
    s += "      }\n    }\n";
  }

  // Passes p and p + 1 of a softmax or a logsumexp — the max of a per-element value a, then the sum
  // of exp(a - max) or exp2(a - max) — as one read of the row (the library's looped softmax): each
  // thread keeps a running (max, sum), rescaling its sum by exp(old max - new max) when a vector
  // raises the max, then the block's max and the threads' sums rescaled to it are reduced. The stage
  // and looped functions stream the row from shared memory or L2 / DRAM in every pass, so one pass
  // fewer is one read of the row fewer; the register and split paths hold the row and keep two.
  struct OnlineMaxSum {
    int max_rd = -1, sum_rd = -1, arg = -1;  // -1: not this form
    OpKind exp = OpKind::kExp;
  };
  // The stage function keeps the two passes where the max pass compares raw pairs of a staged input
  // (RawMaxInput): that pass over shared memory is cheap enough that merging it into the sum pass
  // (a conversion and a compare an element more there) measured slower (softmax and logsumexp,
  // bf16); with a causal mask or a non-constant scale the merge measured faster (docs/BENCHMARKS.md).
  bool StageRawMax(const OnlineMaxSum& om) const {
    if (!stage_now_) return false;
    const RawMax raw = RawMaxInput({om.max_rd});
    return raw.input >= 0 && stage_inputs_.count(raw.input) > 0;
  }
  // The live reductions of pass p, in expression order.
  std::vector<int> ReductionsAt(int p) const {
    std::vector<int> v;
    for (size_t e = 0; e < k_.exprs.size(); ++e)
      if (live_[e] && k_.exprs[e].kind == ExprKind::kReduce && k_.exprs[e].depth == p) v.push_back(static_cast<int>(e));
    return v;
  }
  OnlineMaxSum FindOnlineMaxSum(int p) const {
    if (p >= k_.num_passes) return {};
    const std::vector<int> a = ReductionsAt(p), b = ReductionsAt(p + 1);
    if (a.size() != 1 || b.size() != 1) return {};
    const Expr& mx = k_.exprs[a[0]];
    const Expr& sm = k_.exprs[b[0]];
    if (mx.op != OpKind::kMax || sm.op != OpKind::kSum || mx.args.size() != 1 || sm.args.size() != 1) return {};
    if (k_.exprs[mx.args[0]].row_level) return {};
    const Expr& ex = k_.exprs[sm.args[0]];
    if (ex.kind != ExprKind::kOp || (ex.op != OpKind::kExp && ex.op != OpKind::kExp2) || ex.args.size() != 1) return {};
    const Expr& d = k_.exprs[ex.args[0]];
    if (d.kind != ExprKind::kOp || d.op != OpKind::kSub || d.args.size() != 2 || d.args[0] != mx.args[0] || d.args[1] != a[0]) return {};
    return {a[0], b[0], mx.args[0], ex.op};
  }
  void EmitOnlineMaxSumPass(std::string& s, int p, const OnlineMaxSum& om) {
    const std::string ninf = "-__int_as_float(0x7f800000)";
    auto ex = [&](const std::string& a, const std::string& b) {
      std::string t = CudaScalarExpr(om.exp);
      t.replace(t.find("$0"), 2, fmt::format("fz::op_sub({}, {})", a, b));
      return t;
    };
    const int M = om.max_rd, S = om.sum_rd, A = om.arg;
    s += fmt::format("    float acc{} = {};\n    float acc{} = 0.0f;\n", M, ninf, S);
    s += fmt::format("    // passes {} and {}: the max and the sum of {} online, one read of the row\n", p, p + 1,
                     om.exp == OpKind::kExp ? "exp(a - max)" : "exp2(a - max)");
    EmitLoopedLoop(s, {A}, [&](std::string& b) {
      b += fmt::format("        float va[{}];\n        float vm = {};\n", vec_, ninf);
    }, [&](std::string& b) {
      b += Windowed() && edge_now_ ? fmt::format("          va[j] = c >= 0 && c < C ? e{} : {};\n", A, ninf)
                                   : fmt::format("          va[j] = e{};\n", A);
      b += "          vm = fmaxf(vm, va[j]);\n";
    }, [&](std::string& b) {
      // acc<M> = -inf: 2^-inf = 0 and the sum was 0; a vector of -inf (masked, or the row's edge)
      // adds nothing while the max is still -inf
      b += fmt::format("        if (vm > acc{0}) {{\n          acc{1} *= {2};\n          acc{0} = vm;\n        }}\n", M, S,
                       ex(fmt::format("acc{}", M), "vm"));
      b += fmt::format("        if (acc{0} != {1}) {{\n#pragma unroll\n          for (int j = 0; j < {2}; ++j) acc{3} += {4};\n        }}\n", M,
                       ninf, vec_, S, ex("va[j]", fmt::format("acc{}", M)));
    });
    s += fmt::format("    {{\n      const float mt = acc{};  // this thread's max\n", M);
    s += fmt::format("      acc{0} = {1};\n", M, ReduceCall("MaxOp", fmt::format("acc{}", M)));
    s += fmt::format("      acc{0} = mt == {1} ? 0.0f : acc{0} * {2};\n", S, ninf, ex("mt", fmt::format("acc{}", M)));
    s += fmt::format("      acc{0} = {1};\n    }}\n", S, ReduceCall("SumOp", fmt::format("acc{}", S)));
  }

  // The stage function (stage_now_): persistent blocks; each row's windows are copied into shared
  // memory (fz::cp_async16, every copy in flight at once; the last vector of a window reads only up
  // to the row's end) and the passes read the staged inputs from there (LoadVec) — one DRAM read per
  // row. Double-buffered when the launch gave two sets of windows (the dynamic shared memory says):
  // the next row's copies are issued before the current row is computed (the library's StagedRows,
  // kernels/fused_common.cuh).
  void EmitRowLooped(std::string& s) {
    if (ssplit_now_) {
      EmitStageSplitRow(s);
    } else {
      EmitRowLoopHead(s);
    }
    EmitRowLoopBody(s);
  }
  // The staged split function's row (ssplit_now_; the library's kernels/staged_row.cuh): row
  // blockIdx.x / CL of a cluster of CL blocks, the block of rank k staging window vectors [V0, V1) =
  // [k x SHV, min((k + 1) x SHV, NV)) of every staged input (SHV: target::RowSplitChunk's share of
  // the widest row's window) at xs<in> + v x N, then the passes over its share — columns [CB - sh,
  // CE) — with every reduction combined over the cluster (fz::cluster_reduce, one pushed exchange
  // each, their mbarriers armed before the cluster barrier that follows the copies).
  void EmitStageSplitRow(std::string& s) {
    int nred = 0;
    for (size_t e = 0; e < k_.exprs.size(); ++e) nred += live_[e] && k_.exprs[e].kind == ExprKind::kReduce;
    const int n = 16 / ssplit_elem_;
    const int64_t wnv = target::RowStageWindowBytes(k_.cols().value, ssplit_elem_) / 16;
    s += "  __shared__ float smem[64];\n  int phase = 0;\n  (void)phase;\n";
    s += "  extern __shared__ __align__(16) unsigned char fz_stage[];\n";
    s += fmt::format("  const int CL = (int)fz::cluster_blocks();  // blocks a row (the launch's cluster)\n"
                     "  const int SHV = ({}LL + CL - 1) / CL;  // window vectors a block stages (target::RowSplitChunk)\n", wnv);
    s += fmt::format("  __shared__ float parts[{0}][{1}];  // reduction i: block k's partial in parts[i][k]\n"
                     "  __shared__ unsigned long long bars[{0}];\n"
                     "  if (threadIdx.x == 0)\n    for (int i = 0; i < {2}; ++i) fz::push_arm(&bars[i], 4u * CL);\n",
                     std::max(nred, 1), target::kRowSplitBlocks, nred);
    s += "  {\n    const long long r = (long long)blockIdx.x / CL;  // the launcher's grid is exactly R clusters\n";
    s += fmt::format("    const int sh = (int)((r * C) % {0});  // the row start past the 16-byte boundary (elements)\n"
                     "    const int NV = (int)((sh + C + {1}) / {0});  // the row's window vectors\n", n, n - 1);
    s += "    const int V0 = min((int)fz::cluster_rank() * SHV, NV), V1 = min(V0 + SHV, NV);  // this block's share\n";
    int k = 0;
    for (const auto& [in, off] : stage_inputs_) {
      const char* ct = CType(k_.inputs[in].type.dtype);
      s += fmt::format("    {0}* const xw{1} = reinterpret_cast<{0}*>(fz_stage + {2} * SHV * 16);\n", ct, in, k++);
      // whole 16-byte copies but for the row's last vector, the only one that may end past the row
      s += fmt::format("    for (int v = V0 + (int)threadIdx.x; v < V1; v += blockDim.x) {{\n"
                       "      const {0}* g = in{1} + r * C - sh + (long long)v * {2};\n"
                       "      if (v < NV - 1) fz::cp_async16(xw{1} + (v - V0) * {2}, g);\n"
                       "      else fz::cp_async16(xw{1} + (v - V0) * {2}, g, (int)(sh + C - (long long)v * {2}) * {3});\n    }}\n",
                       ct, in, n, ssplit_elem_);
      s += fmt::format("    const {0}* const xs{1} = xw{1} - V0 * {2};  // window vector v at xs{1} + v * {2}\n"
                       "    const int sh{1} = sh;\n", ct, in, n);
    }
    s += "    fz::cp_async_commit();\n"
         "    fz::cluster_sync();  // every block's mbarriers armed before any push (the copies in flight)\n"
         "    fz::cp_async_wait<0>();\n    __syncthreads();  // every thread's copies have landed\n";
    s += fmt::format("    const int CB = V0 * {0};  // this block's first window element\n"
                     "    const int CE = (int)min((long long)C, (long long)V1 * {0} - sh);  // past its last column\n", n);
  }
  void EmitRowLoopHead(std::string& s) {
    s += "  __shared__ float smem[32];\n";
    if (stage_now_) {
      s += "  extern __shared__ __align__(16) unsigned char fz_stage[];\n";
      s += fmt::format("  const bool twin = fz::dynamic_smem_bytes() >= 2u * {}u;\n", stage_bytes_);
      s += "  auto issue = [&](long long rr, int bb) {\n";
      for (const auto& [in, off] : stage_inputs_) {
        const char* ct = CType(k_.inputs[in].type.dtype);
        const int n = 16 / DTypeSize(k_.inputs[in].type.dtype);
        s += fmt::format("    {{\n      const int sh = (int)((rr * C) % {});\n", n);
        s += fmt::format("      {0}* xs = reinterpret_cast<{0}*>(fz_stage + bb * {1} + {2});\n", ct, stage_bytes_, off);
        // whole 16-byte copies but for the last vector, the only one that may end past the row
        s += fmt::format("      const int nv = (int)((sh + C + {}) / {});\n", n - 1, n);
        s += "      int v = threadIdx.x;\n";
        s += fmt::format("      const {0}* g = in{1} + rr * C - sh + v * {2};\n", ct, in, n);
        s += fmt::format("      for (; v < nv - 1; v += blockDim.x, g += blockDim.x * {0}) fz::cp_async16(xs + v * {0}, g);\n", n);
        s += fmt::format("      if (v == nv - 1) fz::cp_async16(xs + v * {0}, g, (int)(sh + C - (long long)v * {0}) * {1});\n", n,
                         DTypeSize(k_.inputs[in].type.dtype));
        s += "    }\n";
      }
      s += "  };\n";
      s += "  int buf = 0;\n";
      s += "  if (twin && blockIdx.x < R) issue(blockIdx.x, 0);\n";
      s += "  fz::cp_async_commit();\n";
    }
    // the stream's rows are read once: evict-first loads (as the decode function's row inputs)
    if (stream_now_) s += "  const unsigned long long pol = fz::evict_first();\n";
    s += "  for (long long r = blockIdx.x; r < R; r += gridDim.x) {\n";
    if (stream_now_ && Windowed())
      s += fmt::format("    const int sh = (int)((r * C) & {});  // the row start past the 16-byte boundary (elements)\n", vec_ - 1);
    if (stage_now_) {
      s += "    if (!twin) issue(r, 0);\n    else if (r + gridDim.x < R) issue(r + gridDim.x, buf ^ 1);\n";
      s += "    fz::cp_async_commit();  // (an empty group past the last row keeps the count)\n";
      s += "    if (twin) fz::cp_async_wait<1>();\n    else fz::cp_async_wait<0>();\n";
      s += "    __syncthreads();  // every thread's copies of row r have landed\n";
      for (const auto& [in, off] : stage_inputs_) {
        const char* ct = CType(k_.inputs[in].type.dtype);
        const int n = 16 / DTypeSize(k_.inputs[in].type.dtype);
        s += fmt::format("    const int sh{0} = (int)((r * C) % {1});  // in{0}'s row start past the 16-byte boundary\n", in, n);
        s += fmt::format("    const {0}* xs{1} = reinterpret_cast<const {0}*>(fz_stage + buf * {2} + {3});\n", ct, in, stage_bytes_, off);
      }
    }
  }
  void EmitRowLoopBody(std::string& s) {
    EmitRowDefs(s, 0, "    ");
    for (int p = 1; p <= k_.num_passes; ++p) {
      if (const OnlineMaxSum om = FindOnlineMaxSum(p); om.max_rd >= 0 && !StageRawMax(om)) {
        EmitOnlineMaxSumPass(s, p, om);
        EmitRowDefs(s, p, "    ");
        EmitRowDefs(s, p + 1, "    ");
        ++p;
        continue;
      }
      const std::vector<int> reds = ReductionsAt(p);
      std::vector<int> args;
      for (int rd : reds) {
        bool mx = k_.exprs[rd].op == OpKind::kMax;
        s += fmt::format("    float acc{} = {};\n", rd, mx ? "-__int_as_float(0x7f800000)" : "0.0f");
        args.push_back(k_.exprs[rd].args[0]);
      }
      s += fmt::format("    // pass {}: {} reduction{}\n", p, reds.size(), reds.size() == 1 ? "" : "s");
      const RawMax raw = RawMaxInput(reds);
      // (not in the stream: its max pass is one read of the row with its loads in flight, EmitLoopedLoop)
      if (raw.input >= 0 && !stream_now_ && (stage_now_ ? stage_inputs_.count(raw.input) > 0 : !Windowed()))
        EmitRawMaxLoopedPass(s, reds[0], raw);
      else EmitLoopedLoop(s, args, [](std::string&) {}, [&](std::string& b) {
        const std::string guard = Windowed() && edge_now_ ? "if (c >= 0 && c < C) " : "";
        for (int rd : reds) {
          bool mx = k_.exprs[rd].op == OpKind::kMax;
          b += mx ? fmt::format("          {2}acc{0} = fmaxf(acc{0}, e{1});\n", rd, k_.exprs[rd].args[0], guard)
                  : fmt::format("          {2}acc{0} += e{1};\n", rd, k_.exprs[rd].args[0], guard);
        }
      }, [](std::string&) {});
      for (int rd : reds)
        s += fmt::format("    acc{0} = {1};\n", rd, ReduceCall(k_.exprs[rd].op == OpKind::kMax ? "MaxOp" : "SumOp", fmt::format("acc{}", rd)));
      EmitRowDefs(s, p, "    ");
    }
    // Epilogue: outputs.
    s += "    // epilogue\n";
    std::vector<int> vec_targets;
    for (size_t o = 0; o < k_.outputs.size(); ++o)
      if (k_.outputs[o].tensor.access != Access::kRowScalar) vec_targets.push_back(StoredExpr(o));
    if (!vec_targets.empty()) {
      EmitLoopedLoop(s, vec_targets, [&](std::string& b) {
        for (size_t o = 0; o < k_.outputs.size(); ++o)
          if (k_.outputs[o].tensor.access != Access::kRowScalar) b += fmt::format("        float o{}[{}];\n", o, vec_);
      }, [&](std::string& b) {
        for (size_t o = 0; o < k_.outputs.size(); ++o)
          if (k_.outputs[o].tensor.access != Access::kRowScalar) b += fmt::format("          o{}[j] = e{};\n", o, StoredExpr(o));
      }, [&](std::string& b) {
        for (size_t o = 0; o < k_.outputs.size(); ++o)
          if (k_.outputs[o].tensor.access != Access::kRowScalar) EmitStore(b, static_cast<int>(o), "        ", "r * C + c0");
      });
    }
    for (size_t o = 0; o < k_.outputs.size(); ++o)
      if (k_.outputs[o].tensor.access == Access::kRowScalar)
        s += fmt::format("    if (threadIdx.x == 0{}) out{}[r] = fz_cvt<{}>::from(e{});\n", ssplit_now_ ? " && fz::cluster_rank() == 0" : "", o,
                         CType(k_.outputs[o].tensor.type.dtype), k_.outputs[o].expr);
    if (stage_now_ && !ssplit_now_)
      s += "    __syncthreads();  // every thread is done with buffer `buf` before it is refilled\n    if (twin) buf ^= 1;\n";
    // (the staged split: no closing cluster barrier, nothing reads another block's shared memory)
    s += "  }\n";
  }
  // The looped passes' columns: the staged split's share [CB - sh, CE), else the row.
  std::string LoopStart() const { return ssplit_now_ ? "CB + " : ""; }
  std::string LoopEnd() const { return ssplit_now_ ? "CE" : "C"; }
  // A looped pass's reduction of `acc`: over the block, or (the staged split) over the cluster, the
  // exchanges numbered in emission order.
  std::string ReduceCall(const char* op, const std::string& acc) {
    if (!ssplit_now_) return fmt::format("fz::block_reduce<fz::{}>({}, smem)", op, acc);
    const int i = ssplit_xch_++;
    return fmt::format("fz::cluster_reduce<fz::{}>({}, (int)blockDim.x, smem, phase, parts[{}], &bars[{}], CL)", op, acc, i, i);
  }

  const Kernel& k_;
  EmitOptions o_;
  int vec_ = 1, threads_ = 256;
  bool reg_rows_ = false;                                   // register path
  std::optional<target::RowSplitPlan> split_;               // the split function's plan, when emitted
  bool split_now_ = false;                                  // emitting the split function
  int split_vec_ = 0;                                       // the split function's window vector (0: vec_)
  std::map<int, int64_t> stage_inputs_;                     // the stage function's inputs -> shared-memory offset
  int64_t stage_bytes_ = 0, stage_vectors_ = 0;             // their windows' bytes; the widest window's vectors
  int window_vec_ = 0;                                      // the stage function's window-mode vector (0: vec_)
  bool reg_window_ = false;                                 // the prefill function in window mode (vec_ is the window's)
  bool reg_now_ = false;                                    // emitting a register-path function (not the split one)
  bool edge_now_ = false;                                   // window mode: emitting the edge vectors' element loop
  bool stage_now_ = false;                                  // emitting the stage function (or the staged split)
  bool ssplit_now_ = false;                                 // emitting the staged split function
  int ssplit_xch_ = 0;                                      // the staged split's exchanges emitted so far
  int ssplit_elem_ = 0;                                     // the staged inputs' element size (0: no staged split)
  int stream_vec_ = 0;                                      // the looped function streams, in vectors of this (ChooseStream)
  bool stream_window_ = false;                              // ... of the row's aligned window (window mode)
  bool stream_now_ = false;                                 // emitting the streamed looped function
  int split_slot_ = 0;                                      // the split function's next share[] slot
  int max_size_ = 1;                                         // widest element (bytes) of the full / per-column tensors
  int tpr_now_ = 0, vpt_now_ = 0;                           // the register-path function being emitted
  bool decode_half_ = false;                                 // the decode function takes half-width packs
  int decode_vec_ = 1;                                       // the decode function's pack width (elements)
  std::string ix_ = "long long";                             // index type of the function being emitted
  int tpr_p_ = 0, vpt_p_ = 0, tpr_d_ = 0, vpt_d_ = 0;       // prefill / decode row shapes
  std::set<int> reg_channels_;  // ChannelInputs of the register-path function being emitted
  std::vector<bool> live_;
  std::set<int> emitted_row_;
};

}  // namespace

StatusOr<EmittedKernel> EmitCuda(const Kernel& k, const EmitOptions& opts) { return Emitter(k, opts).Run(); }

}  // namespace opfuse::codegen
