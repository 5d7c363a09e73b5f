// kv_attention: attention over a KV cache (the design: src/kernels/attention.cu). Its planners, and
// the cache-write kernel the tensor-core (prefill) path runs before attending; decode writes the new
// rows inside the general kernel.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/attention.h"
#include "kernels/attention_kernels.h"
#include "kernels/pdl.cuh"

namespace opfuse::kernels {

namespace attn {
namespace {

// k[b, t] -> k_cache[b, pos[b] + t] (and v), one E (16 bytes when aligned) per thread and grid
// stride; pos read from device memory. A row past the cache (pos[b] + t >= S, or pos < 0) is not
// written — the caller's error, which the attention kernels also clamp to S.
template <typename E>
__global__ void __launch_bounds__(256) KvCacheWriteKernel(KvWriteParams p) {
  PdlEnter();  // pdl.cuh: wait for the earlier kernels before any memory access
  const E* k = static_cast<const E*>(p.k);
  const E* v = static_cast<const E*>(p.v);
  E* kc = static_cast<E*>(p.kc);
  E* vc = static_cast<E*>(p.vc);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t bt = i / p.units;
    const int u = static_cast<int>(i - bt * p.units);
    const int b = static_cast<int>(bt / p.T), t = static_cast<int>(bt - static_cast<int64_t>(b) * p.T);
    const int ps = __ldg(p.pos + b);
    if (ps < 0 || ps + t >= p.S) continue;
    const int64_t dst = (static_cast<int64_t>(b) * p.S + ps + t) * p.units + u;
    const E kx = k[i], vx = v[i];
    kc[dst] = kx;
    vc[dst] = vx;
  }
}

}  // namespace

KvWriteFn PickKvWrite(int unit_bytes) {
  return unit_bytes == 16 ? KvCacheWriteKernel<uint4> : unit_bytes == 4 ? KvCacheWriteKernel<uint32_t> : KvCacheWriteKernel<uint16_t>;
}

}  // namespace attn

using namespace attn;  // the host-side plan (attention_plan.h) and the kernels (attention_kernels.h)

namespace {
bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
}  // namespace

size_t KvAttentionWorkspaceBytesFor(const std::vector<TensorRef>& in, const cuda::DeviceInfo& dev, AttentionPath path,
                                    int max_splits) {
  Dims d;
  if (!CheckKvDims(in, nullptr, &d).ok() || d.D > 256 || !IsFloat(d.dtype)) return 0;
  if (path == AttentionPath::kTensorCore) return 0;
  const Ptrs ptr = KvPtrsOf(in, nullptr);
  if (path == AttentionPath::kAuto && AutoUsesMma(d, ptr)) return 0;
  return PlanGeneral(d, GeneralVec(d, ptr), dev, std::numeric_limits<size_t>::max(), max_splits).ws_bytes;
}

StatusOr<std::vector<cuda::KernelLaunch>> PlanKvAttentionWith(const Node& n, const std::vector<TensorRef>& in,
                                                              const std::vector<TensorRef>& out,
                                                              const cuda::DeviceInfo& dev,
                                                              const AttentionPlanOptions& opts) {
  Dims d;
  if (Status s = CheckKvDims(in, &out, &d); !s.ok()) return s;
  // Sliding window (CpuKvAttention's semantics): one at least as long as the cache changes nothing.
  const int64_t window = AttrInt(n.attrs, "window", 0);
  if (window < 0) return InvalidArgument(fmt::format("kv_attention: window must be >= 0, got {}", window));
  d.window = window < d.S ? window : 0;
  std::vector<cuda::KernelLaunch> launches;
  if (d.B == 0 || d.T == 0) return launches;
  d.scale = ScaleOf(n, d);
  Ptrs ptr = KvPtrsOf(in, &out);
  // Decode (the general kernel): the attention kernel writes the new rows itself — one launch.
  const bool mma =
      opts.path == AttentionPath::kTensorCore || (opts.path == AttentionPath::kAuto && AutoUsesMma(d, ptr));
  if (!mma) {
    ptr.knew = in[1].data;
    ptr.vnew = in[2].data;
    OPFUSE_RETURN_IF_ERROR(PlanAttentionCore(d, ptr, true, dev, opts, "kv_attention", launches));
    return launches;
  }
  // 1. The cache write: 16-byte units when every row and pointer allows, else elements.
  const int64_t esize = DTypeSize(d.dtype), row_bytes = d.Hkv * d.D * esize;
  const bool vec = row_bytes % 16 == 0 && Aligned16(in[1].data) && Aligned16(in[2].data) && Aligned16(in[3].data) &&
                   Aligned16(in[4].data);
  KvWriteParams w{in[1].data, in[2].data, in[3].data, in[4].data, static_cast<const int*>(in[5].data), 0,
                  static_cast<int>(d.T), static_cast<int>(d.S), 0};
  w.units = static_cast<int>(vec ? row_bytes / 16 : d.Hkv * d.D);
  w.total = d.B * d.T * w.units;
  if (w.total > 0) {
    const int64_t blocks = std::clamp<int64_t>((w.total + 255) / 256, 1, int64_t{8} * std::max(1, dev.sm_count));
    const KvWriteFn fn = PickKvWrite(vec ? 16 : static_cast<int>(esize));
    launches.push_back(cuda::KernelLaunch::Make(fmt::format("kv_cache_write_{}{}", DTypeName(d.dtype), vec ? "_v16" : ""),
                                                fn, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, w)
                           .Pdl());
  }
  // 2. Attention over the caches, causal at absolute positions: the existing kernels with
  //    S_b = pos[b] + T read on the device (query t sees keys j <= pos[b] + t).
  OPFUSE_RETURN_IF_ERROR(PlanAttentionCore(d, ptr, true, dev, opts, "kv_attention", launches));
  return launches;
}

StatusOr<std::vector<cuda::KernelLaunch>> PlanKvAttention(const Node& n, const std::vector<TensorRef>& in,
                                                          const std::vector<TensorRef>& out,
                                                          const cuda::DeviceInfo& dev, bool early_reads) {
  AttentionPlanOptions opts = ScratchOptions(in, 6);
  opts.early_reads = early_reads;
  return PlanKvAttentionWith(n, in, out, dev, opts);
}

}  // namespace opfuse::kernels
