// Attention planning, host-only: the shape checks, the kernel choice (tensor cores or the general
// kernel), the general kernel's rows per block, key tile and split-K, and the scratch each plan needs.
// attention.cu binds a plan to its kernels; the kernels' design is in attention.h. Compiled in every
// build, so tests/unit/attention_plan_test.cc checks the choices without a GPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor_ref.h"
#include "opfuse/graph.h"
#include "opfuse/status.h"
#include "target/device_info.h"

namespace opfuse::kernels {

// T at or below this is "decode": the general kernel with split-K, never the tensor-core kernel.
inline constexpr int64_t kAttentionDecodeMaxT = 16;
// Upper bound on the number of key splits (the combine kernel keeps one weight per split).
inline constexpr int kAttentionMaxSplits = 256;

enum class AttentionPath {
  kAuto,        // tensor cores where they apply, else general
  kGeneral,     // the CUDA-core kernel for every shape
  kTensorCore,  // the mma kernel; Unimplemented where it does not apply
};

// The general and combine kernels' warps per block, and the split-K target occupancy.
inline constexpr int kAttentionWarps = 4;
inline constexpr int kAttentionThreads = kAttentionWarps * 32;
inline constexpr int kAttentionTargetBlocksPerSm = 4;

// Scratch bytes the plan for `path` would use (0 when it would not split). Only the shapes and
// dtypes of in[0..2] are read, with the default scale 1/sqrt(D) (a node's non-positive `scale` sends
// prefill to the general kernel: AttentionWorkspaceBytes(n, ...) sizes that); data pointers may be null.
size_t AttentionWorkspaceBytesFor(const std::vector<TensorRef>& in, const target::DeviceInfo& dev,
                                  AttentionPath path, int max_splits = 0);

// Scratch of the split-K plan: AttentionWorkspaceBytes (library.h's PlanAttention takes it as a 4th
// TensorRef, kv_attention as a 7th), AttentionCounterCount (the next TensorRef after the scratch).
size_t AttentionWorkspaceBytes(const Node& n, const std::vector<TensorRef>& in, const target::DeviceInfo& dev);
// How many u32 arrival counters the split-K plan of attention/kv_attention can use (0: none). Given
// as the next TensorRef after the scratch, zeroed once and kept for the plan's lifetime (the kernels
// leave them at zero), they replace the combine kernel by a merge in the last block to finish.
size_t AttentionCounterCount(const Node& n, const std::vector<TensorRef>& in, const target::DeviceInfo& dev);
// Both at once (one shape check and one plan): what the executor reserves for an attention step.
struct AttentionScratch {
  size_t bytes = 0;     // AttentionWorkspaceBytes
  size_t counters = 0;  // AttentionCounterCount
};
AttentionScratch AttentionScratchFor(const Node& n, const std::vector<TensorRef>& in, const target::DeviceInfo& dev);

namespace attn {

struct Dims {
  int64_t T = 0, S = 0, Hq = 0, Hkv = 0, D = 0, group = 1;
  int64_t B = 1;  // sequences (kv_attention); S is then the cache capacity
  DType dtype = DType::kF32;
  int64_t window = 0;  // kv_attention's sliding window, < S (0: none)
  double scale = 0;    // softmax scale: 1/sqrt(D) from CheckDims/CheckKvDims, the node's attr via ScaleOf
};

// The device pointers of one plan: q/k/v/o ([B,] rows, heads, D) and kv_attention's positions.
struct Ptrs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;        // nullptr: not known (workspace sizing)
  const int* pos = nullptr;  // kv_attention only
  // kv_attention on the general kernel: the new k/v rows, written into the caches by the attention
  // kernel itself (GeneralParams::knew); nullptr: a KvCacheWriteKernel runs first.
  const void* knew = nullptr;
  const void* vnew = nullptr;
};

// Launch shape of the general kernel.
struct GeneralPlan {
  int rb = 8;        // query rows per block
  int maxc = 4;      // head-dim elements per lane (ceil(D / 32) rounded up to 2, 4, 8)
  int kt = 32;       // keys per warp tile
  int64_t row_tiles = 0;
  int splits = 1;
  int chunk = 0;
  bool vec = false;
  size_t union_bytes = 0, smem_bytes = 0;
  size_t ws_bytes = 0;  // scratch for splits > 1
};

// attention inputs q[T,Hq,D], k/v[S,Hkv,D] (and the output, when given) into `d`.
Status CheckDims(const std::vector<TensorRef>& in, const std::vector<TensorRef>* out, Dims* d);
// kv_attention inputs: q[B,T,Hq,D], k/v[B,T,Hkv,D], k_cache/v_cache[B,S,Hkv,D], pos[B] i32; `d`
// gets S = the cache capacity.
Status CheckKvDims(const std::vector<TensorRef>& in, const std::vector<TensorRef>* out, Dims* d);
Ptrs PtrsOf(const std::vector<TensorRef>& in, const std::vector<TensorRef>* out);
Ptrs KvPtrsOf(const std::vector<TensorRef>& in, const std::vector<TensorRef>* out);
// The node's `scale` attribute, else d.scale (1/sqrt(D)).
double ScaleOf(const Node& n, const Dims& d);
// Why the tensor-core kernel does not apply ("" when it does): dtype, head_dim, alignment, and a
// positive scale (the kernel takes the softmax maximum over raw scores).
std::string MmaRefusal(const Dims& d, const Ptrs& ptr);
// Why the Hopper (wgmma) form of the tensor-core kernel does not apply ("" when it does): MmaRefusal's
// reasons, a device other than cc 9.0 (wgmma is an sm_90a instruction), or rows past the tensor map's
// 32-bit coordinates.
std::string WgmmaRefusal(const Dims& d, const Ptrs& ptr, const target::DeviceInfo& dev);
// Whether the default choice (kAuto) takes the tensor-core kernel.
bool AutoUsesMma(const Dims& d, const Ptrs& ptr);
// The tensor-core kernel's launch: which compiled instance and whether causal blocks fold.
struct MmaTile {
  int rows = 0;           // query rows per block
  int blocks_per_sm = 0;  // resident blocks a SM
};
struct MmaChoice {
  int instance = 0;        // index into the instances (largest row tile first)
  bool fold = false;       // causal: block x takes row tiles nq - 1 - x and x
  int64_t grid_x = 0;      // blocks along the rows
};
// Blocks along the rows of the tensor-core grid: ceil(T / rows) row tiles, half of them (rounded up)
// when a causal grid folds.
int64_t MmaGridX(const Dims& d, int rows, bool fold);
// The first instance (largest row tile first) whose grid fills at least 90 % of one wave of the
// device (sm_count x blocks_per_sm blocks); causal grids are folded (half the blocks, equal work
// each) unless the folded grid's last wave would leave more than a quarter of the device's slots
// idle (e.g. 144 equal blocks on 132 one-block SMs: two waves, the second 9 % full), where the
// unfolded blocks, heaviest first, fill the tail instead. When none fills a wave, the last instance,
// folded only if that still gives 90 % of sm_count blocks (fewer, longer blocks lose when the device
// is not full).
MmaChoice ChooseMma(const Dims& d, bool causal, int sm_count, const std::vector<MmaTile>& tiles);
// Whether the general kernel reads K/V in 16-byte vectors.
bool GeneralVec(const Dims& d, const Ptrs& ptr);
// Keys per split at least, with arrival counters: one iteration's keys.
int MinSplitChunk(int keys_per_iter);
// The general kernel's shape: split-K only within `ws_capacity` bytes of scratch, at most `max_splits`
// splits (0: no cap).
GeneralPlan PlanGeneral(const Dims& d, bool vec, const target::DeviceInfo& dev, size_t ws_capacity, int max_splits);

}  // namespace attn
}  // namespace opfuse::kernels
