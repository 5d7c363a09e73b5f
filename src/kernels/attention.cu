// attention(q[T,Hq,D], k[S,Hkv,D], v[S,Hkv,D]) -> [T,Hq,D] and kv_attention (below): the library
// kernels and their planners.
//
// Semantics (CpuAttention in src/ops/library.cc): row i of head h attends to keys j < i + S - T + 1
// when causal (the queries are the last T positions), to all S keys otherwise; kv head h / (Hq/Hkv)
// (GQA); scale defaults to 1/sqrt(D); a row with no visible key is zeros; f32 accumulation, output
// in the input dtype. Scores are kept in the log2 domain (q pre-multiplied by scale*log2(e)) so the
// softmax uses exp2f; -inf marks masked scores and a row max of -inf is replaced by 0 before any
// subtraction, so fully masked rows give p = 0 and never NaN.
//
// Three kernels (attention.h says when each runs):
//  * AttnMmaKernel<T, HD, WR, NW, MINB>: flash-attention-2 forward for f16/bf16, HD = 64/128. NW warps
//    of WR 16-row tiles (64- or 128-row blocks), Q fragments in registers (ldmatrix.x4), 64-key K and
//    V tiles double-buffered in shared memory (rows padded by 16 bytes, so ldmatrix rows fall in
//    distinct banks) loaded with cp.async (zero-filled past S / T) one tile ahead, one block barrier
//    a tile; S = QK^T and O += PV with mma.sync m16n8k16 (f32 accumulators; the S accumulator layout
//    is reused as the A fragment of P, FA2's register trick), V fragments through ldmatrix.trans.
//    Causal blocks stop at their last visible tile; a causal grid is folded (block x takes row tiles
//    nq-1-x and x: equal work a block) or launched heaviest first. Which instance and whether to
//    fold: ChooseMma (attention_plan.cc) from the grid against the device's SMs and the instance's
//    occupancy.
//  * AttnGeneralKernel<T, RB, MAXC>: CUDA cores, any float dtype, D <= 256. A block takes RB query
//    rows (8 for prefill, 4 for decode, 1 for one-row MHA decode) of one kv head (row r -> token
//    r / group, head kvh*group + r % group, so the query heads of a GQA group share K/V reads) and
//    a key range. Each of the 4 warps walks its own key tiles of KT keys: lane j scores key j
//    against all RB rows (its K row read straight from global memory, 8 16-byte loads in flight,
//    q broadcast from shared memory), the warp updates each row's online softmax (row maxima
//    reduced together; sums kept per lane until the end), and the V tile (staged in shared memory
//    by cp.async, overlapping the scoring) is accumulated with lane <-> head-dim element. The
//    warps' states merge through shared memory. With a key split (gridDim.z > 1) the block writes
//    (max, sum, unnormalised acc) to f32 scratch instead of the output and AttnCombineKernel
//    merges the splits (flash-decoding).
//  * kv_attention (attention over a KV cache, issue 6): KvCacheWriteKernel copies the new k/v rows
//    to k_cache/v_cache[b, pos[b] + t] (16-byte units, pos read on the device), then the same two
//    kernels run over the caches with B sequences (grid y = B * Hkv for the general kernel, grid z
//    = B for the mma kernel) and sequence b sees S_b = min(S, pos[b] + T) keys, read from device
//    memory inside the kernel; causal alignment to the end of S_b is exactly "query t sees keys
//    j <= pos[b] + t". Nothing on the host depends on pos, so the decode step is captured once as a
//    CUDA graph and replayed with new positions. The split-K grid is sized for the capacity S;
//    blocks whose key range starts past S_b skip the loop and write an empty partial (max -inf,
//    sum 0) that the combine weighs 0. Why not a separate kernel: the decode (general + split-K)
//    and prefill (mma) kernels are the tuned ones; only where the length comes from changes.
//    A sliding window (attr `window` < S: query at position p sees keys p - window < j <= p, as
//    CpuKvAttention) is a per-row lower bound in both kernels: the general kernel's key range (and
//    its splits) starts at the lowest bound of the block's rows, the mma kernel starts at the tile
//    holding its first row's bound and zero-fills the rows below it; older keys are never read.
//  * Decode in one kernel (general path, the default): the general kernel takes the new k/v rows
//    (GeneralParams::knew) — keys j >= pos[b] are read from them, never from cache rows written in
//    the same launch — and block (0, split 0) of each (sequence, kv head) writes them into the cache,
//    so KvCacheWriteKernel does not run. With arrival counters (GeneralParams::sem, from the executor)
//    the split count follows the device-side length and the last block of a row tile to arrive
//    merges the partials (threadfence + atomicAdd, counter reset by that block): no combine kernel.
//    Without arrival counters from the executor, the splits are merged by a combine kernel.
//  * Early reads (GeneralParams::early, from AttentionPlanOptions::early_reads, which the executor
//    sets when nothing in the run writes pos or the caches): pos is read and the block's cache rows
//    below pos are prefetched into L2 before the PDL wait, overlapping the q/k/v projection.
// Index arithmetic into tensors is 64-bit; per-dimension sizes are checked to fit in int.
//
// Files: this one plans attention (PlanAttentionCore, shared with kv_attention); attention_kv.cu
// plans kv_attention and holds the cache-write kernel; attention_general.cu the general and combine
// kernels, attention_mma.cu the tensor-core kernel (their parameter blocks and instance pickers:
// attention_kernels.h; shared device helpers: attention_device.cuh); attention_plan.{h,cc} the
// host-only rules (which kernel, split count, shared memory), tested in CI.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/attention.h"
#include "kernels/attention_kernels.h"

namespace opfuse::kernels {

using namespace attn;  // the host-side plan (attention_plan.h) and the kernels (attention_kernels.h)

StatusOr<std::vector<cuda::KernelLaunch>> PlanAttentionWith(const Node& n, const std::vector<TensorRef>& in,
                                                            const std::vector<TensorRef>& out,
                                                            const cuda::DeviceInfo& dev,
                                                            const AttentionPlanOptions& opts) {
  Dims d;
  if (Status s = CheckDims(in, &out, &d); !s.ok()) return s;
  const bool causal = AttrInt(n.attrs, "causal", 1) != 0;
  d.scale = ScaleOf(n, d);
  std::vector<cuda::KernelLaunch> launches;
  OPFUSE_RETURN_IF_ERROR(PlanAttentionCore(d, PtrsOf(in, &out), causal, dev, opts, "attention", launches));
  return launches;
}

namespace {

// The GeneralParams fields every general-kernel launch fills: pointers, sizes, causal and
// scale, the new k/v rows, early reads, and with splits > 1 the scratch: [splits][B*T*Hq][D] f32
// accumulators, then [splits][B*T*Hq][2] (max, sum).
GeneralParams BaseParams(const Dims& d, const Ptrs& ptr, bool causal, float scale_log2, const AttentionPlanOptions& opts,
                         int splits) {
  GeneralParams p{};
  p.q = ptr.q;
  p.k = ptr.k;
  p.v = ptr.v;
  p.o = ptr.o;
  p.B = static_cast<int>(d.B);
  p.pos = ptr.pos;
  p.T = static_cast<int>(d.T);
  p.S = static_cast<int>(d.S);
  p.Hq = static_cast<int>(d.Hq);
  p.Hkv = static_cast<int>(d.Hkv);
  p.D = static_cast<int>(d.D);
  p.group = static_cast<int>(d.group);
  p.causal = causal ? 1 : 0;
  p.scale_log2 = scale_log2;
  p.knew = ptr.knew;
  p.vnew = ptr.vnew;
  p.window = static_cast<int>(d.window);
  p.early = opts.early_reads && ptr.pos != nullptr && ptr.knew != nullptr ? 1 : 0;
  if (splits > 1) {
    p.ws_acc = static_cast<float*>(opts.workspace);
    p.ws_ml = reinterpret_cast<float*>(static_cast<char*>(opts.workspace) +
                                       static_cast<size_t>(splits) * d.B * d.T * d.Hq * d.D * sizeof(float));
  }
  return p;
}

// The launches of attention over Dims `d` (B sequences; with ptr.pos, sequence b has
// min(S, pos[b] + T) keys, read on the device), appended to `launches`.
}  // namespace

Status attn::PlanAttentionCore(const Dims& d, const Ptrs& ptr, bool causal, const cuda::DeviceInfo& dev,
                               const AttentionPlanOptions& opts, const char* op,
                               std::vector<cuda::KernelLaunch>& launches) {
  if (!IsFloat(d.dtype)) return Unimplemented(fmt::format("{}: dtype {} (needs f32/f16/bf16)", op, DTypeName(d.dtype)));
  if (d.D > 256) return Unimplemented(fmt::format("{}: head_dim {} > 256", op, d.D));
  const float scale_log2 = static_cast<float>(d.scale * 1.4426950408889634);
  if (d.B == 0 || d.T == 0 || d.Hq == 0 || d.D == 0) return Status::Ok();  // empty output: nothing to compute

  bool mma = false;
  if (opts.path == AttentionPath::kTensorCore) {
    const std::string why = MmaRefusal(d, ptr);
    if (!why.empty()) return Unimplemented(fmt::format("{}: tensor-core kernel does not apply: {}", op, why));
    mma = true;
  } else if (opts.path == AttentionPath::kAuto) {
    mma = AutoUsesMma(d, ptr);
  }
  const std::string prefix = op;

  if (mma) {
    if (d.Hq > 65535 || d.B > 65535) return Unimplemented(fmt::format("{}: {} query heads or {} sequences > 65535", op, d.Hq, d.B));
    OPFUSE_ASSIGN_OR_RETURN(const std::vector<MmaInstance> inst, MmaInstances(d.dtype, d.D));
    // Candidates for ChooseMma, largest row tile first: on a cc 9.0 device the Hopper kernel (128 rows,
    // one block a SM), then the mma.sync instances.
    const std::string wg_why = WgmmaRefusal(d, ptr, dev);
    if (opts.wgmma == 1 && !wg_why.empty())
      return Unimplemented(fmt::format("{}: Hopper tensor-core kernel does not apply: {}", op, wg_why));
    const bool wg_candidate = wg_why.empty() && (opts.wgmma == 1 || (opts.wgmma < 0 && opts.mma_instance < 0));
    if (opts.wgmma == 1 && opts.mma_instance >= 0)
      return InvalidArgument(fmt::format("{}: an mma.sync instance and the Hopper kernel both forced", op));
    WgmmaInstance wk{};
    std::vector<MmaTile> tiles;
    if (wg_candidate) {
      OPFUSE_ASSIGN_OR_RETURN(wk, WgmmaInstanceFor(d.dtype, d.D));
      tiles.push_back({wk.rows, wk.blocks_per_sm});
    }
    const int first_sync = static_cast<int>(tiles.size());  // tiles[first_sync + i] is mma.sync instance i
    if (opts.wgmma != 1)
      for (const MmaInstance& k : inst) tiles.push_back({k.rows, k.blocks_per_sm});
    MmaChoice c = ChooseMma(d, causal, dev.sm_count, tiles);
    if (opts.mma_instance >= 0 || opts.mma_fold >= 0) {  // forced (tests, comparisons)
      if (opts.mma_instance >= static_cast<int>(inst.size()))
        return InvalidArgument(fmt::format("{}: tensor-core instance {} of {}", op, opts.mma_instance, inst.size()));
      if (opts.mma_instance >= 0) c.instance = opts.mma_instance + first_sync;
      if (opts.mma_fold >= 0) c.fold = causal && opts.mma_fold > 0;
      c.grid_x = MmaGridX(d, tiles[static_cast<size_t>(c.instance)].rows, c.fold);
    }
    const dim3 grid(static_cast<unsigned>(c.grid_x), static_cast<unsigned>(d.Hq), static_cast<unsigned>(d.B));
    if (c.instance < first_sync) {  // the Hopper kernel
      WgmmaParams p;
      OPFUSE_RETURN_IF_ERROR(MakeWgmmaParams(d, ptr, causal, scale_log2, c.fold, &p));
      launches.push_back(cuda::KernelLaunch::Make(
          fmt::format("{}_wgmma_{}_d{}_m{}{}", prefix, DTypeName(d.dtype), d.D, wk.rows, c.fold ? "_fold" : ""), wk.fn,
          grid, dim3(static_cast<unsigned>(wk.threads)), static_cast<size_t>(wk.smem_bytes), p));
      return Status::Ok();
    }
    const MmaInstance& k = inst[static_cast<size_t>(c.instance - first_sync)];
    MmaParams p{ptr.q, ptr.k, ptr.v, ptr.o, static_cast<int>(d.T), static_cast<int>(d.S),
                static_cast<int>(d.Hq), static_cast<int>(d.Hkv), static_cast<int>(d.group), causal ? 1 : 0,
                scale_log2, ptr.pos, static_cast<int>(d.window), c.fold ? 1 : 0};
    launches.push_back(cuda::KernelLaunch::Make(
        fmt::format("{}_mma_{}_d{}_m{}{}", prefix, DTypeName(d.dtype), d.D, k.rows, c.fold ? "_fold" : ""), k.fn, grid,
        dim3(static_cast<unsigned>(k.threads)), static_cast<size_t>(k.smem_bytes), p));
    return Status::Ok();
  }

  if (d.Hkv * d.B > 65535) return Unimplemented(fmt::format("{}: {} kv heads x {} sequences > 65535", op, d.Hkv, d.B));
  const GeneralPlan g = PlanGeneral(d, GeneralVec(d, ptr), dev, opts.workspace ? opts.workspace_bytes : 0,
                                    opts.max_splits);
  if (g.smem_bytes > static_cast<size_t>(std::max<int64_t>(dev.max_shared_mem_per_block, 48 * 1024)))
    return Internal(fmt::format("attention: general kernel needs {} bytes of shared memory", g.smem_bytes));
  if (g.splits > 1 && (opts.workspace == nullptr || opts.workspace_bytes < g.ws_bytes ||
                        reinterpret_cast<uintptr_t>(opts.workspace) % alignof(float) != 0))
    return Internal("attention: split plan without enough aligned workspace");
  GeneralParams p = BaseParams(d, ptr, causal, scale_log2, opts, g.splits);
  p.kt = g.kt;
  p.chunk = g.chunk;
  p.vec = g.vec ? 1 : 0;
  p.union_bytes = static_cast<int>(g.union_bytes);
  const int64_t tiles = g.row_tiles * d.Hkv * d.B;
  if (g.splits > 1 && opts.counters != nullptr && opts.counter_count >= static_cast<size_t>(tiles))
    p.sem = opts.counters;
  p.min_chunk = MinSplitChunk(kAttentionWarps * g.kt);
  const dim3 grid(static_cast<unsigned>(g.row_tiles), static_cast<unsigned>(d.Hkv * d.B), static_cast<unsigned>(g.splits));
  std::string name = fmt::format("{}_general_{}_rb{}_c{}", prefix, DTypeName(d.dtype), g.rb, g.maxc);
  if (g.splits > 1) name += fmt::format("_split{}", g.splits);
  if (p.sem) name += "_lastblock";
  if (p.knew) name += "_cachewrite";
  launches.push_back(cuda::KernelLaunch::Make(std::move(name), PickGeneral(d.dtype, g.rb, g.maxc), grid,
                                              dim3(kAttentionThreads), g.smem_bytes, p)
                         .Pdl());
  if (g.splits > 1 && p.sem == nullptr) {
    CombineParams c{p.ws_acc, p.ws_ml, ptr.o, static_cast<int>(d.B * d.T * d.Hq), static_cast<int>(d.D), g.splits};
    launches.push_back(cuda::KernelLaunch::Make(fmt::format("{}_combine_{}", prefix, DTypeName(d.dtype)),
                                                PickCombine(d.dtype), dim3(static_cast<unsigned>(d.B * d.T * d.Hq)),
                                                dim3(kAttentionThreads), 0, c)
                           .Pdl());
  }
  return Status::Ok();
}

StatusOr<std::vector<cuda::KernelLaunch>> PlanAttention(const Node& n, const std::vector<TensorRef>& in,
                                                        const std::vector<TensorRef>& out,
                                                        const cuda::DeviceInfo& dev) {
  return PlanAttentionWith(n, in, out, dev, attn::ScratchOptions(in, 3));
}

AttentionPlanOptions attn::ScratchOptions(const std::vector<TensorRef>& in, size_t first) {
  AttentionPlanOptions opts;
  if (in.size() > first) {  // optional split-K scratch from the executor (AttentionWorkspaceBytes)
    opts.workspace = in[first].data;
    opts.workspace_bytes = static_cast<size_t>(in[first].numel()) * DTypeSize(in[first].dtype);
  }
  if (in.size() > first + 1) {  // optional arrival counters (AttentionCounterCount), zero between runs
    opts.counters = static_cast<unsigned*>(in[first + 1].data);
    opts.counter_count = static_cast<size_t>(in[first + 1].numel());
  }
  return opts;
}

}  // namespace opfuse::kernels
