// The attention kernels' parameter blocks and the functions that pick a compiled instance
// (src/kernels/attention*.cu); the planners in attention.cu and attention_kv.cu fill and launch
// them. Internal to src/kernels/. Built with OPFUSE_CUDA only.
#pragma once
#include <cuda.h>  // CUtensorMap (a struct; nothing here calls the driver)

#include <cstdint>

#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_plan.h"
#include "opfuse/graph.h"

namespace opfuse::kernels::attn {

struct GeneralParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* ws_acc;  // split > 1: [splits][T*Hq][D] unnormalised accumulators; nullptr: write o
  float* ws_ml;   // split > 1: [splits][T*Hq][2] (row max in log2 units, row sum)
  int T, S, Hq, Hkv, D, group;
  int causal;
  float scale_log2;  // scale * log2(e)
  // kv_attention: B sequences; k/v are the caches ([B, S, Hkv, D], S = capacity) and sequence b
  // sees min(S, pos[b] + T) keys, read from device memory here (so a captured graph replays with
  // new positions). Plain attention: B = 1, pos = nullptr.
  int B;
  const int* pos;
  int kt;            // keys per warp tile (<= 32)
  int chunk;         // keys per split (blockIdx.z)
  // kv_attention decode with the cache write fused (knew != nullptr): the new rows k/v[B, T, Hkv, D]
  // are read from here for keys j >= pos[b] (never from the cache rows this kernel writes), and the
  // blocks with blockIdx.x == 0, split 0 write them into the caches k/v[b, pos[b] + t].
  const void* knew;
  const void* vnew;
  // Arrival counters, one per (blockIdx.y, blockIdx.x), zero between runs (nullptr: the split
  // partials are merged by AttnCombineKernel). With them the split count adapts to the length read
  // on the device and the last block of a row tile to arrive merges the partials and resets its
  // counter — no combine launch.
  unsigned* sem;
  int min_chunk;     // with sem: keys per split at least (a multiple of the 4 warps' tile)
  // kv decode: pos and the cache rows below pos[b] may be read before the PDL wait (nothing in
  // this launch's graph writes them; AttentionPlanOptions::early_reads).
  int early;
  int vec;           // K/V rows 16-byte aligned: vector loads and cp.async
  int union_bytes;   // shared bytes of the V tiles / merge area (multiple of 16)
  // Sliding window (kv_attention attr `window`, 0 = none): a row that sees keys j < lim also needs
  // j >= lim - window. The block's key range starts at its rows' lowest such bound, so keys older
  // than every row's window are never read.
  int window;
};

struct CombineParams {
  const float* ws_acc;
  const float* ws_ml;
  void* o;
  int rows;  // B * T * Hq
  int D;
  int splits;
};

struct MmaParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  int T, S, Hq, Hkv, group;
  int causal;
  float scale_log2;
  const int* pos;  // kv_attention (blockIdx.z = sequence): keys min(S, pos[b] + T); else nullptr
  int window;      // sliding window (causal only): row i sees keys [i + off + 1 - window, i + off]; 0 = none
  int fold;        // causal: block x takes row tiles nq - 1 - x and x (grid.x = ceil(nq / 2)); 0: one tile
};

// Keys per K/V tile of the tensor-core kernel.
inline constexpr int kMmaKeyTile = 64;

struct KvWriteParams {
  const void* k;
  const void* v;
  void* kc;
  void* vc;
  const int* pos;
  int64_t total;  // B * T * units
  int T, S, units;  // units of E per token row (Hkv * D elements)
};

using GeneralFn = void (*)(GeneralParams);
using CombineFn = void (*)(CombineParams);
using MmaFn = void (*)(MmaParams);
// One compiled instance of the tensor-core kernel: its launch shape and resident blocks a SM.
struct MmaInstance {
  MmaFn fn;
  int rows;           // query rows per block
  int threads;
  int smem_bytes;     // dynamic shared memory
  int blocks_per_sm;  // occupancy on the current device (without one: its __launch_bounds__ minimum)
};
using KvWriteFn = void (*)(KvWriteParams);

// The Hopper kernel (sm90a/attention_wgmma.cu): Q, K and V as 2-D TMA tensor maps ([rows, heads * D],
// 64 x 64 boxes, 128-byte swizzle) encoded at plan time for the plan's pointers; the rest as MmaParams.
struct WgmmaParams {
  CUtensorMap mq, mk, mv;  // 64-byte aligned (CUtensorMap's own alignment), read from parameter space
  void* o;
  int T, S, Hq, Hkv, group;
  int causal;
  float scale_log2;
  const int* pos;
  int window;
  int fold;
};
using WgmmaFn = void (*)(WgmmaParams);
struct WgmmaInstance {
  WgmmaFn fn;
  int rows;           // query rows per block (two consumer warpgroups of 64)
  int threads;
  int smem_bytes;
  int blocks_per_sm;  // occupancy on the current device (without one: 1, its __launch_bounds__ minimum)
};
// The Hopper kernel for f16/bf16 and head_dim 64/128 (compiled for sm_90a only: launch it on a cc 9.0
// device only), its shared-memory limit raised and occupancy queried.
StatusOr<WgmmaInstance> WgmmaInstanceFor(DType t, int64_t hd);
// The Hopper kernel's parameters for Dims `d` over ptr's tensors: the tensor maps of q / k / v (d.B * d.T
// and d.B * d.S rows), the output, positions and shape. Null q/k/v (workspace sizing): no maps.
Status MakeWgmmaParams(const Dims& d, const Ptrs& ptr, bool causal, float scale_log2, bool fold, WgmmaParams* p);
// attention_general.cu: the general kernel for (dtype, rows per block 1/4/8, max chunks 2/4/8) and
// the split combine kernel.
GeneralFn PickGeneral(DType t, int rb, int maxc);
CombineFn PickCombine(DType t);
// attention_mma.cu: the tensor-core kernel's instances for f16/bf16 and head_dim 64/128, largest row
// tile first, with their shared-memory limit raised where needed and their occupancy queried.
StatusOr<std::vector<MmaInstance>> MmaInstances(DType t, int64_t hd);
// attention_kv.cu: the cache write of `unit_bytes` (16, 4 or 2) per thread.
KvWriteFn PickKvWrite(int unit_bytes);

// attention.cu: the options holding the executor's optional scratch TensorRefs — split-K workspace at
// in[first], arrival counters at in[first + 1] (attention: first 3, kv_attention: first 6).
AttentionPlanOptions ScratchOptions(const std::vector<TensorRef>& in, size_t first);

// attention.cu: the launches of attention over Dims `d` (B sequences; with ptr.pos, sequence b has
// min(S, pos[b] + T) keys, read on the device), appended to `launches`; kv_attention's planner
// (attention_kv.cu) calls it after its cache write.
Status PlanAttentionCore(const Dims& d, const Ptrs& ptr, bool causal, const cuda::DeviceInfo& dev,
                         const AttentionPlanOptions& opts, const char* op, std::vector<cuda::KernelLaunch>& launches);

}  // namespace opfuse::kernels::attn
