// See attention_plan.h.
#include "kernels/attention_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

namespace opfuse::kernels {
namespace attn {
namespace {

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
size_t SplitBytesPerSplit(const Dims& d) { return static_cast<size_t>(d.B * d.T * d.Hq * (d.D + 2)) * sizeof(float); }
}  // namespace

Status CheckDims(const std::vector<TensorRef>& in, const std::vector<TensorRef>* out, Dims* d) {
  if (in.size() < 3) return InvalidArgument(fmt::format("attention: expected 3 inputs (q, k, v), got {}", in.size()));
  const TensorRef &q = in[0], &k = in[1], &v = in[2];
  if (q.shape.size() != 3 || k.shape.size() != 3 || v.shape.size() != 3)
    return InvalidArgument("attention: shape mismatch: q, k, v must be [tokens, heads, head_dim]");
  if (k.dtype != q.dtype || v.dtype != q.dtype)
    return InvalidArgument("attention: dtype mismatch: q, k, v must share a dtype");
  if (k.shape != v.shape) return InvalidArgument("attention: shape mismatch: k and v differ");
  if (k.shape[2] != q.shape[2]) return InvalidArgument("attention: shape mismatch: q and k head_dim differ");
  d->T = q.shape[0];
  d->Hq = q.shape[1];
  d->D = q.shape[2];
  d->S = k.shape[0];
  d->Hkv = k.shape[1];
  d->dtype = q.dtype;
  if (d->Hkv <= 0 || d->Hq % d->Hkv)
    return InvalidArgument(
        fmt::format("attention: shape mismatch: {} query heads not a multiple of {} kv heads", d->Hq, d->Hkv));
  d->group = d->Hq / d->Hkv;
  d->scale = d->D > 0 ? 1.0 / std::sqrt(static_cast<double>(d->D)) : 1.0;
  if (out) {
    if (out->empty()) return InvalidArgument("attention: no output");
    const TensorRef& y = (*out)[0];
    if (y.dtype != q.dtype || y.shape != q.shape)
      return InvalidArgument("attention: output must have q's dtype and shape");
  }
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (d->T * d->group > kIntMax || d->S > kIntMax / 2 || d->Hq * d->D > kIntMax || d->T * d->Hq > kIntMax)
    return Unimplemented(fmt::format("attention: sizes T={} S={} Hq={} D={} exceed the kernels' 32-bit row indexing",
                                     d->T, d->S, d->Hq, d->D));
  return Status::Ok();
}

int MinSplitChunk(int keys_per_iter) { return keys_per_iter; }

// Why the tensor-core kernel does not apply ("" when it does).
double ScaleOf(const Node& n, const Dims& d) { return AttrFloat(n.attrs, "scale", d.scale); }

std::string MmaRefusal(const Dims& d, const Ptrs& ptr) {
  if (d.dtype != DType::kF16 && d.dtype != DType::kBF16) return fmt::format("dtype {} (needs f16/bf16)", DTypeName(d.dtype));
  if (d.D != 64 && d.D != 128) return fmt::format("head_dim {} (needs 64 or 128)", d.D);
  if (!(Aligned16(ptr.q) && Aligned16(ptr.k) && Aligned16(ptr.v) && Aligned16(ptr.o)))
    return "a q/k/v/output pointer is not 16-byte aligned";
  if (!(d.scale > 0)) return fmt::format("scale {} is not positive", d.scale);
  return "";
}

std::string WgmmaRefusal(const Dims& d, const Ptrs& ptr, const target::DeviceInfo& dev) {
  if (std::string why = MmaRefusal(d, ptr); !why.empty()) return why;
  if (dev.major != 9 || dev.minor != 0) return fmt::format("compute capability {}.{} (wgmma needs 9.0)", dev.major, dev.minor);
  if (d.B * std::max(d.T, d.S) > std::numeric_limits<int32_t>::max()) return "more rows than 32-bit tensor-map coordinates";
  return "";
}

int64_t MmaGridX(const Dims& d, int rows, bool fold) {
  const int64_t nq = (d.T + rows - 1) / std::max(rows, 1);
  return fold ? (nq + 1) / 2 : nq;
}

MmaChoice ChooseMma(const Dims& d, bool causal, int sm_count, const std::vector<MmaTile>& tiles) {
  MmaChoice c;
  if (tiles.empty()) return c;
  const int64_t sms = std::max(sm_count, 1), lanes = d.Hq * d.B;
  for (size_t i = 0; i < tiles.size(); ++i) {
    const int64_t gx = MmaGridX(d, tiles[i].rows, causal);
    const int64_t slots = sms * std::max(tiles[i].blocks_per_sm, 1);
    if (gx * lanes * 10 < 9 * slots) continue;
    bool fold = causal;
    if (fold) {  // the folded blocks are equal: the last wave's fill is the loss
      const int64_t blocks = gx * lanes, waves = (blocks + slots - 1) / slots;
      fold = blocks * 4 >= waves * slots * 3;
    }
    return {static_cast<int>(i), fold, MmaGridX(d, tiles[i].rows, fold)};
  }
  c.instance = static_cast<int>(tiles.size()) - 1;
  c.fold = causal && MmaGridX(d, tiles.back().rows, true) * lanes * 10 >= 9 * sms;
  c.grid_x = MmaGridX(d, tiles.back().rows, c.fold);
  return c;
}


GeneralPlan PlanGeneral(const Dims& d, bool vec, const target::DeviceInfo& dev, size_t ws_capacity, int max_splits) {
  GeneralPlan g;
  const int64_t R = d.T * d.group;
  // Decode gets at most 4 rows per block: a block is then latency-bound by its warps' instruction
  // chains (measured: one warp per scheduler issues every ~4.4 cycles), so halving the rows per warp
  // and doubling the blocks beats sharing K/V across 8 rows; prefill keeps 8 (fewer K/V re-reads).
  g.rb = R <= 1 ? 1 : (R <= 4 || d.T <= kAttentionDecodeMaxT) ? 4 : 8;
  g.maxc = d.D <= 64 ? 2 : d.D <= 128 ? 4 : 8;
  const int64_t esize = DTypeSize(d.dtype);
  g.kt = static_cast<int>(std::clamp<int64_t>(8192 / std::max<int64_t>(1, d.D * esize), 1, 32));
  g.vec = vec;
  g.row_tiles = (R + g.rb - 1) / g.rb;
  const size_t vtiles = static_cast<size_t>(kAttentionWarps) * g.kt * d.D * esize;
  const size_t merge = static_cast<size_t>(kAttentionWarps) * g.rb * (d.D + 2) * sizeof(float);
  g.union_bytes = (std::max(vtiles, merge) + 15) / 16 * 16;
  g.smem_bytes = g.union_bytes + static_cast<size_t>(g.rb) * d.D * sizeof(float) +
                 static_cast<size_t>(kAttentionWarps) * g.rb * 32 * sizeof(float);
  // Split the keys when the blocks would not fill the GPU and scratch is available.
  const int64_t keys_per_iter = static_cast<int64_t>(kAttentionWarps) * g.kt;
  const int64_t blocks = std::max<int64_t>(1, g.row_tiles * d.Hkv * d.B);
  int64_t splits = 1;
  const size_t per_split = SplitBytesPerSplit(d);
  if (d.S > 0 && per_split > 0 && ws_capacity / per_split >= 2) {
    const int64_t want = (int64_t{kAttentionTargetBlocksPerSm} * std::max(1, dev.sm_count) + blocks - 1) / blocks;
    const int64_t by_len = (d.S + keys_per_iter - 1) / keys_per_iter;
    splits = std::min({want, by_len, int64_t{kAttentionMaxSplits}, static_cast<int64_t>(ws_capacity / per_split)});
    if (max_splits > 0) splits = std::min<int64_t>(splits, max_splits);
    splits = std::max<int64_t>(splits, 1);
  }
  int64_t chunk = std::max<int64_t>(1, (d.S + splits - 1) / splits);
  chunk = (chunk + keys_per_iter - 1) / keys_per_iter * keys_per_iter;
  if (splits > 1) splits = (d.S + chunk - 1) / chunk;  // rounding the chunk up may leave fewer
  g.splits = static_cast<int>(std::max<int64_t>(splits, 1));
  g.chunk = static_cast<int>(g.splits == 1 ? std::max<int64_t>(d.S, 1) : chunk);
  g.ws_bytes = g.splits > 1 ? per_split * g.splits : 0;
  return g;
}

bool GeneralVec(const Dims& d, const Ptrs& ptr) {
  return (d.D * DTypeSize(d.dtype)) % 16 == 0 && Aligned16(ptr.k) && Aligned16(ptr.v) && Aligned16(ptr.knew) &&
         Aligned16(ptr.vnew);
}

// Whether the default choice (kAuto) takes the tensor-core kernel.
bool AutoUsesMma(const Dims& d, const Ptrs& ptr) {
  return d.T > kAttentionDecodeMaxT && MmaRefusal(d, ptr).empty();
}

Ptrs PtrsOf(const std::vector<TensorRef>& in, const std::vector<TensorRef>* out) {
  Ptrs p;
  p.q = in[0].data;
  p.k = in[1].data;
  p.v = in[2].data;
  p.o = out && !out->empty() ? (*out)[0].data : nullptr;
  return p;
}

// kv_attention inputs: q[B,T,Hq,D], k/v[B,T,Hkv,D], k_cache/v_cache[B,S,Hkv,D], pos[B] i32; `d`
// gets S = the cache capacity.
Status CheckKvDims(const std::vector<TensorRef>& in, const std::vector<TensorRef>* out, Dims* d) {
  if (in.size() < 6)
    return InvalidArgument(fmt::format("kv_attention: expected 6 inputs (q, k, v, k_cache, v_cache, pos), got {}", in.size()));
  const TensorRef &q = in[0], &k = in[1], &v = in[2], &kc = in[3], &vc = in[4], &pos = in[5];
  for (const TensorRef* t : {&q, &k, &v, &kc, &vc})
    if (t->shape.size() != 4 || t->dtype != q.dtype)
      return InvalidArgument("kv_attention: q, k, v, k_cache, v_cache must be 4-d of one dtype");
  if (pos.dtype != DType::kI32 || pos.shape.size() != 1) return InvalidArgument("kv_attention: pos must be i32 [batch]");
  d->B = q.shape[0];
  d->T = q.shape[1];
  d->Hq = q.shape[2];
  d->D = q.shape[3];
  d->S = kc.shape[1];
  d->Hkv = kc.shape[2];
  d->dtype = q.dtype;
  const std::vector<int64_t> kshape{d->B, d->T, d->Hkv, d->D}, cshape{d->B, d->S, d->Hkv, d->D};
  if (k.shape != kshape || v.shape != kshape || vc.shape != cshape || pos.shape[0] != d->B)
    return InvalidArgument("kv_attention: shape mismatch between q, k, v, the caches and pos");
  if (d->Hkv <= 0 || d->Hq % d->Hkv)
    return InvalidArgument(fmt::format("kv_attention: {} query heads not a multiple of {} kv heads", d->Hq, d->Hkv));
  d->group = d->Hq / d->Hkv;
  d->scale = d->D > 0 ? 1.0 / std::sqrt(static_cast<double>(d->D)) : 1.0;
  if (out && (out->empty() || (*out)[0].dtype != q.dtype || (*out)[0].shape != q.shape))
    return InvalidArgument("kv_attention: output must have q's dtype and shape");
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (d->T * d->group > kIntMax || d->S > kIntMax / 2 || d->Hq * d->D > kIntMax || d->B * d->T * d->Hq > kIntMax ||
      d->B * d->T * d->Hkv * d->D > kIntMax)
    return Unimplemented(fmt::format("kv_attention: sizes B={} T={} S={} Hq={} D={} exceed the kernels' 32-bit indexing",
                                     d->B, d->T, d->S, d->Hq, d->D));
  return Status::Ok();
}

Ptrs KvPtrsOf(const std::vector<TensorRef>& in, const std::vector<TensorRef>* out) {
  Ptrs p;
  p.q = in[0].data;
  p.k = in[3].data;  // attention reads the caches (after the write kernel)
  p.v = in[4].data;
  p.o = out && !out->empty() ? (*out)[0].data : nullptr;
  p.pos = static_cast<const int*>(in[5].data);
  return p;
}

}  // namespace attn

using namespace attn;

size_t AttentionWorkspaceBytesFor(const std::vector<TensorRef>& in, const target::DeviceInfo& dev, AttentionPath path,
                                  int max_splits) {
  Dims d;
  if (!CheckDims(in, nullptr, &d).ok() || d.D > 256 || !IsFloat(d.dtype)) return 0;
  if (path == AttentionPath::kTensorCore) return 0;
  if (path == AttentionPath::kAuto && AutoUsesMma(d, PtrsOf(in, nullptr))) return 0;
  return PlanGeneral(d, GeneralVec(d, PtrsOf(in, nullptr)), dev, std::numeric_limits<size_t>::max(), max_splits).ws_bytes;
}

AttentionScratch AttentionScratchFor(const Node& n, const std::vector<TensorRef>& in, const target::DeviceInfo& dev) {
  Dims d;
  const bool kv = n.op == OpKind::kKvAttention;
  if (!(kv ? CheckKvDims(in, nullptr, &d) : CheckDims(in, nullptr, &d)).ok() || d.D > 256 || !IsFloat(d.dtype)) return {};
  d.scale = ScaleOf(n, d);
  const Ptrs ptr = kv ? KvPtrsOf(in, nullptr) : PtrsOf(in, nullptr);
  const GeneralPlan g = PlanGeneral(d, GeneralVec(d, ptr), dev, std::numeric_limits<size_t>::max(), 0);
  // Counters: what the general kernel's split plan can use (also where the default path takes the
  // tensor-core kernel — a caller may force the general one); scratch: none on the tensor-core path.
  const bool mma = AutoUsesMma(d, ptr);
  return {mma ? 0 : g.ws_bytes, g.splits > 1 ? static_cast<size_t>(g.row_tiles * d.Hkv * d.B) : 0};
}

size_t AttentionCounterCount(const Node& n, const std::vector<TensorRef>& in, const target::DeviceInfo& dev) {
  return AttentionScratchFor(n, in, dev).counters;
}

size_t AttentionWorkspaceBytes(const Node& n, const std::vector<TensorRef>& in, const target::DeviceInfo& dev) {
  return AttentionScratchFor(n, in, dev).bytes;
}

}  // namespace opfuse::kernels
