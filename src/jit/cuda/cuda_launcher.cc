// CUDA runtime implementation of jit/cuda_launcher.h (built with OPFUSE_CUDA only).
// Launch geometry. Row kernels in the register path: fewer rows than kDecodeRowsPerSm x SMs run the
// decode function with its block (decode_threads), more the prefill one (threads, ~128 per block);
// ceil(rows / rows per block) blocks. Rows past the register path: the split function (a cluster of
// blocks per row, exactly rows x blocks per cluster) where target::UseRowSplit takes it (few rows,
// or 16-byte vectors), but from a row per SM up the stage function first where target::RowStageFor
// takes it (the row windows in shared memory), else the looped function, one block per row — a
// streamed one (a row reduction) from target::RowStreamMinRows rows before the split. Pointwise kernels: one
// thread per vector, blocks of `threads` (256) for large tensors and 64 for small ones (fewer than
// 1024 vectors per SM: more SMs busy), as the library's glu kernel; tensors of at most
// kPointwiseDecodeBlocksPerSm blocks of 128 per SM run the pointwise decode function (4-byte packs),
// in blocks of 256 where that still gives every SM a block, else of 128. Grids cover the work in one
// step up to the hardware limit; the kernels grid-stride beyond it, except the register row functions
// without per-column inputs (no row loop: more row groups than the limit are refused) and the decode
// functions (no loop, 32-bit indices), which are taken only where their grid covers the work.
#include <algorithm>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "jit/cuda_launcher.h"
#include "target/launch_shape.h"

namespace opfuse::jit {

#define OPFUSE_CUDA_RETURN(call)                                                                 \
  do {                                                                                           \
    cudaError_t _e = (call);                                                                     \
    if (_e != cudaSuccess) return Internal(fmt::format("{}: {}", #call, cudaGetErrorString(_e))); \
  } while (0)

int CudaDeviceCount(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = fmt::format("no CUDA device ({})", cudaGetErrorString(e));
    cudaGetLastError();
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device";
  return n;
}

StatusOr<std::string> CudaDeviceArch() {
  int dev = 0, major = 0, minor = 0;
  OPFUSE_CUDA_RETURN(cudaGetDevice(&dev));
  OPFUSE_CUDA_RETURN(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  OPFUSE_CUDA_RETURN(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return fmt::format("sm_{}{}", major, minor);
}

namespace {

// Function `name` of `lib` into *kernel, allowed `smem_bytes` of dynamic shared memory and a
// shared-memory carveout preferred; *regs its registers per thread (0 where the runtime does not say):
// they bound its threads (target::RowStageFor, ChooseRowStageSplit).
Status LoadSharedMemoryFunction(cudaLibrary_t lib, const std::string& name, int64_t smem_bytes, void** kernel, int* regs) {
  cudaKernel_t f = nullptr;
  const cudaError_t e = cudaLibraryGetKernel(&f, lib, name.c_str());
  if (e != cudaSuccess) return Internal(fmt::format("cudaLibraryGetKernel({}): {}", name, cudaGetErrorString(e)));
  OPFUSE_CUDA_RETURN(cudaFuncSetAttribute(reinterpret_cast<const void*>(f), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_bytes)));
  OPFUSE_CUDA_RETURN(cudaFuncSetAttribute(reinterpret_cast<const void*>(f), cudaFuncAttributePreferredSharedMemoryCarveout,
                                          cudaSharedmemCarveoutMaxShared));
  *kernel = f;
  cudaFuncAttributes fa{};
  if (cudaFuncGetAttributes(&fa, reinterpret_cast<const void*>(f)) == cudaSuccess) *regs = fa.numRegs;
  else cudaGetLastError();
  return Status::Ok();
}

}  // namespace

StatusOr<std::shared_ptr<LoadedKernel>> LoadedKernel::Load(const JitKernel& k) {
  std::shared_ptr<LoadedKernel> lk(new LoadedKernel());
  lk->jit_ = k;
  cudaLibrary_t lib = nullptr;
  OPFUSE_CUDA_RETURN(cudaLibraryLoadData(&lib, k.binary->binary.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  lk->library_ = lib;
  cudaKernel_t kern = nullptr;
  cudaError_t e = cudaLibraryGetKernel(&kern, lib, k.emitted.function.c_str());
  if (e != cudaSuccess) return Internal(fmt::format("cudaLibraryGetKernel({}): {}", k.emitted.function, cudaGetErrorString(e)));
  lk->kernel_ = kern;
  lk->decode_kernel_ = kern;
  if (!k.emitted.decode_function.empty() && k.emitted.decode_function != k.emitted.function) {
    cudaKernel_t dk = nullptr;
    e = cudaLibraryGetKernel(&dk, lib, k.emitted.decode_function.c_str());
    if (e != cudaSuccess)
      return Internal(fmt::format("cudaLibraryGetKernel({}): {}", k.emitted.decode_function, cudaGetErrorString(e)));
    lk->decode_kernel_ = dk;
  }
  if (!k.emitted.split_function.empty()) {
    cudaKernel_t sk = nullptr;
    e = cudaLibraryGetKernel(&sk, lib, k.emitted.split_function.c_str());
    if (e != cudaSuccess)
      return Internal(fmt::format("cudaLibraryGetKernel({}): {}", k.emitted.split_function, cudaGetErrorString(e)));
    lk->split_kernel_ = sk;
  }
  int dev = 0, optin = 0, per_sm = 0;
  OPFUSE_CUDA_RETURN(cudaGetDevice(&dev));
  OPFUSE_CUDA_RETURN(cudaDeviceGetAttribute(&lk->sm_count_, cudaDevAttrMultiProcessorCount, dev));
  OPFUSE_CUDA_RETURN(cudaDeviceGetAttribute(&lk->cc_major_, cudaDevAttrComputeCapabilityMajor, dev));
  OPFUSE_CUDA_RETURN(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  OPFUSE_CUDA_RETURN(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  OPFUSE_CUDA_RETURN(cudaDeviceGetAttribute(&lk->sm_threads_, cudaDevAttrMaxThreadsPerMultiProcessor, dev));
  OPFUSE_CUDA_RETURN(cudaDeviceGetAttribute(&lk->sm_regs_, cudaDevAttrMaxRegistersPerMultiprocessor, dev));
  lk->smem_optin_ = optin;
  lk->smem_per_sm_ = per_sm;
  // The stage function where its windows fit this device's shared memory (target::RowStageFor), up to
  // two sets of windows (double-buffered where they fit); the staged split function on clusters
  // (sm_90+; target::ChooseRowStageSplit), up to a block's opt-in shared memory (its share's bytes are
  // the launch's).
  if (!k.emitted.stage_function.empty() && k.emitted.stage_bytes + target::kRowStageStaticBytes <= optin) {
    OPFUSE_RETURN_IF_ERROR(LoadSharedMemoryFunction(lib, k.emitted.stage_function,
                                                    std::min<int64_t>(2 * k.emitted.stage_bytes, optin - target::kRowStageStaticBytes),
                                                    &lk->stage_kernel_, &lk->stage_regs_));
  }
  if (!k.emitted.stage_split_function.empty() && lk->cc_major_ >= 9) {
    OPFUSE_RETURN_IF_ERROR(LoadSharedMemoryFunction(lib, k.emitted.stage_split_function, optin - target::kRowStageStaticBytes,
                                                    &lk->stage_split_kernel_, &lk->stage_split_regs_));
  }
  return lk;
}

LoadedKernel::~LoadedKernel() {
  if (library_) cudaLibraryUnload(static_cast<cudaLibrary_t>(library_));
}

StatusOr<LoadedKernel::Geometry> LoadedKernel::LaunchGeometry(const std::vector<int64_t>& symbol_values) const {
  const auto& k = jit_.kernel;
  if (symbol_values.size() != k.symbols.size())
    return InvalidArgument(fmt::format("{}: expected {} symbol values, got {}", jit_.emitted.function, k.symbols.size(),
                                       symbol_values.size()));
  Bindings b;
  for (size_t i = 0; i < k.symbols.size(); ++i) b[k.symbols[i]] = symbol_values[i];
  OPFUSE_ASSIGN_OR_RETURN(std::vector<int64_t> space, BindShape(k.space, b));
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < space.size(); ++i) rows *= space[i];
  const int64_t cols = space.back();
  const auto& em = jit_.emitted;
  Geometry geo;
  geo.threads = em.threads;
  geo.kernel = kernel_;
  geo.function = &em.function;
  if (rows * cols == 0) return geo;
  constexpr int64_t kMaxGrid = int64_t{1} << 30;
  if (em.row) {
    // Rows past the register path: from a row per SM up the stage function, else the split function
    // where the row-split rule takes it (one cluster per row, the grid exactly rows x blocks per
    // cluster: the function has no row loop), else the looped one.
    target::DeviceInfo dev;
    dev.sm_count = sm_count_;
    dev.major = cc_major_;
    dev.max_shared_mem_per_block_optin = smem_optin_;
    dev.shared_mem_per_sm = smem_per_sm_;
    dev.max_threads_per_sm = sm_threads_;
    dev.regs_per_sm = sm_regs_;
    // a streamed looped function (EmittedKernel::stream) from target::RowStreamMinRows rows on
    const bool split_ok = split_kernel_ && em.split_vpt > 0 && target::UseRowSplit(rows, dev, em.split_many_rows) &&
                          rows <= kMaxGrid / target::kRowSplitBlocks && !(em.stream && rows >= target::RowStreamMinRows(dev));
    // where its windows fit (target::RowStageFor): persistent blocks, double-buffered where two fit
    const auto st = stage_kernel_ ? target::RowStageFor(rows, em.stage_bytes, em.stage_vectors, dev, stage_regs_)
                                  : std::optional<target::RowStage>{};
    // The staged split where the whole staged row does not fit or gives way (target::StageGivesWayToSplit,
    // as the library norms: also where the stage has no overlap on its SM) and the rule takes it
    // (target::ChooseRowStageSplit: a row per SM or more), the grid exactly rows x blocks a row.
    if (stage_split_kernel_ && (!st || target::StageGivesWayToSplit(*st, true)) && rows <= kMaxGrid / target::kRowSplitBlocks) {
      if (auto ss = target::ChooseRowStageSplit(rows, cols, em.stage_split_elem_bytes, em.stage_split_inputs, dev, stage_split_regs_)) {
        geo.threads = ss->threads;
        geo.blocks = rows * ss->blocks;
        geo.cluster = ss->blocks;
        geo.smem = ss->smem_bytes;
        geo.kernel = stage_split_kernel_;
        geo.function = &em.stage_split_function;
        return geo;
      }
    }
    if (stage_kernel_) {
      // the split where it is taken and the rule says (target::StageGivesWayToSplit, the kernel's
      // stage_gives_way)
      if (st && !(split_ok && em.stage_gives_way && target::StageGivesWayToSplit(*st, false))) {
        geo.threads = st->threads;
        geo.blocks = st->grid;
        geo.smem = st->smem_bytes;
        geo.kernel = stage_kernel_;
        geo.function = &em.stage_function;
        return geo;
      }
    }
    if (split_ok) {
      target::RowSplitPlan plan;
      plan.vpt = em.split_vpt;
      plan.vec = em.split_window_vec > 0 ? em.split_window_vec : em.vec;
      plan.min_blocks = em.split_min_blocks;
      plan.window_cols = em.split_window_vec > 0 ? cols + em.split_window_vec - 1 : cols;
      const target::RowSplit rs = target::RowSplitFor(plan, rows, sm_count_);
      geo.threads = rs.threads;
      geo.blocks = rows * rs.blocks;
      geo.cluster = rs.blocks;
      geo.kernel = split_kernel_;
      geo.function = &em.split_function;
      return geo;
    }
    int64_t rpb = std::max(1, em.rows_per_block);
    // the decode function indexes with 32-bit ints (only below kDecodeMaxElements) and has no row
    // loop: its grid must cover the rows (rows < kDecodeRowsPerSm x SMs is far below kMaxGrid)
    const int64_t decode_rpb = std::max(1, em.decode_rows_per_block);
    if (em.row_in_registers && rows < int64_t{codegen::kDecodeRowsPerSm} * sm_count_ &&
        rows * cols <= codegen::kDecodeMaxElements && (rows + decode_rpb - 1) / decode_rpb <= kMaxGrid) {
      geo.threads = em.decode_threads;
      rpb = decode_rpb;
      geo.kernel = decode_kernel_;
      geo.function = &em.decode_function;
    }
    // a register function may have no row loop (codegen/cuda_emitter.cc): a block for every row group
    if (em.row_in_registers && (rows + rpb - 1) / rpb > kMaxGrid)
      return Unimplemented(fmt::format("{}: {} rows in groups of {} exceed a grid of 2^30 blocks", em.function, rows, rpb));
    geo.blocks = std::min<int64_t>((rows + rpb - 1) / rpb, kMaxGrid);
  } else {
    // a tiny tensor (at most kPointwiseDecodeBlocksPerSm blocks of the decode function per SM): that function
    if (em.decode_vec > 0 && decode_kernel_ != kernel_ && rows * cols <= codegen::kDecodeMaxElements) {
      const int64_t vecs = (rows * cols + em.decode_vec - 1) / em.decode_vec;  // a partial last vector too
      const int small = std::min(em.decode_threads, codegen::kPointwiseDecodeThreads);
      if ((vecs + small - 1) / small <= int64_t{kPointwiseDecodeBlocksPerSm} * sm_count_) {
        // blocks as wide as the function allows while every SM still gets one, else of `small`
        const int wide = em.decode_threads;
        geo.threads = (vecs + wide - 1) / wide >= sm_count_ ? wide : small;
        geo.blocks = (vecs + geo.threads - 1) / geo.threads;
        geo.kernel = decode_kernel_;
        geo.function = &em.decode_function;
        return geo;
      }
    }
    const int64_t vecs = (rows * cols + em.vec - 1) / em.vec;
    if (vecs < int64_t{1024} * sm_count_) geo.threads = std::min(em.threads, 64);
    geo.blocks = std::clamp<int64_t>((vecs + geo.threads - 1) / geo.threads, 1, kMaxGrid);
  }
  return geo;
}

Status LoadedKernel::Launch(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                            const std::vector<int64_t>& symbol_values, void* stream) const {
  const auto& k = jit_.kernel;
  if (inputs.size() != k.inputs.size() || outputs.size() != k.outputs.size() || symbol_values.size() != k.symbols.size())
    return InvalidArgument(fmt::format("{}: expected {} inputs, {} outputs, {} symbols", jit_.emitted.function,
                                       k.inputs.size(), k.outputs.size(), k.symbols.size()));
  OPFUSE_ASSIGN_OR_RETURN(Geometry geo, LaunchGeometry(symbol_values));
  if (geo.blocks == 0) return Status::Ok();
  std::vector<void*> args;
  std::vector<const void*> in_copy = inputs;
  std::vector<void*> out_copy = outputs;
  std::vector<long long> syms(symbol_values.begin(), symbol_values.end());
  for (auto& p : in_copy) args.push_back(&p);
  for (auto& p : out_copy) args.push_back(&p);
  for (auto& s : syms) args.push_back(&s);
  if (geo.cluster > 0) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = static_cast<unsigned>(geo.cluster);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(geo.blocks));
    cfg.blockDim = dim3(geo.threads);
    cfg.dynamicSmemBytes = static_cast<size_t>(geo.smem);
    cfg.stream = static_cast<cudaStream_t>(stream);
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    OPFUSE_CUDA_RETURN(cudaLaunchKernelExC(&cfg, geo.kernel, args.data()));
    return Status::Ok();
  }
  OPFUSE_CUDA_RETURN(cudaLaunchKernel(geo.kernel, dim3(static_cast<unsigned>(geo.blocks)),
                                      dim3(geo.threads), args.data(), static_cast<size_t>(geo.smem),
                                      static_cast<cudaStream_t>(stream)));
  return Status::Ok();
}

}  // namespace opfuse::jit
