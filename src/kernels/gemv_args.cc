// See gemv_args.h: what the GEMV covers, host-only.
#include "kernels/gemv_args.h"

#include <cstdint>

#include <fmt/format.h>

namespace opfuse::kernels {
namespace {

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool GemvUsesTensorCores(const GemvArgs& a) {
  if (a.tuning.tensor_cores >= 0) return a.tuning.tensor_cores == 1;
  return a.m >= kGemvTensorCoreMinRows;
}

Status GemvSupported(const GemvArgs& a) {
  if (a.dtype != DType::kBF16 && a.dtype != DType::kF16)
    return Unimplemented(fmt::format("gemv: dtype {} (bf16 and f16 only; f32 goes to cuBLASLt)", DTypeName(a.dtype)));
  if (a.m < 1 || a.m > kGemvMaxRows)
    return Unimplemented(fmt::format("gemv: {} rows (the GEMV covers 1..{}; more rows use cuBLASLt)", a.m, kGemvMaxRows));
  const bool tc = GemvUsesTensorCores(a);
  if (!tc && a.m > kGemvCudaCoreMaxRows)
    return Unimplemented(fmt::format("gemv: {} rows on CUDA cores (that form covers 1..{})", a.m, kGemvCudaCoreMaxRows));
  if (a.k < 8 || a.k % 8 != 0) return Unimplemented(fmt::format("gemv: k = {} is not a positive multiple of 8", a.k));
  if (a.k / 8 > (int64_t{1} << 30)) return Unimplemented(fmt::format("gemv: k = {} too large", a.k));
  if (a.segments.empty() || a.segments.size() > static_cast<size_t>(kGemvMaxSegments))
    return Unimplemented(fmt::format("gemv: {} weights in one launch (1..{})", a.segments.size(), kGemvMaxSegments));
  if (a.epilogue == GemvEpilogue::kSwiglu &&
      (a.segments.size() != 2 || a.segments[0].n != a.segments[1].n))
    return Unimplemented("gemv: the swiglu epilogue takes two weights (gate, up) of the same n");
  if (!Aligned16(a.a)) return Unimplemented("gemv: activations not 16-byte aligned");
  int64_t cols = 0;
  for (const auto& s : a.segments) {
    if (s.n < 1) return Unimplemented(fmt::format("gemv: a weight with n = {}", s.n));
    if (!Aligned16(s.w)) return Unimplemented("gemv: a weight not 16-byte aligned");
    if (s.rope_half > 0) {
      if (a.epilogue == GemvEpilogue::kSwiglu) return Unimplemented("gemv: rope and swiglu epilogues in one launch");
      if (s.n % (2 * s.rope_half) != 0)
        return Unimplemented(fmt::format("gemv: rope head_dim {} does not divide n = {}", 2 * s.rope_half, s.n));
      if (!s.cos || !s.sin) return Unimplemented("gemv: rope without cos/sin");
    }
    cols += s.n;
  }
  if (cols > (int64_t{1} << 26)) return Unimplemented(fmt::format("gemv: {} output columns", cols));
  const GemvNorm& nm = a.norm;
  if (nm.kind != GemvNormKind::kNone) {
    if (!tc && NormSmemBytes(a.m, a.k) > kGemvNormMaxSmem)
      return Unimplemented(fmt::format("gemv: a norm prologue of {} rows x {} needs {} bytes of shared memory (max {})", a.m,
                                       a.k, NormSmemBytes(a.m, a.k), kGemvNormMaxSmem));
    if (!Aligned16(nm.x) || (nm.weight && !Aligned16(nm.weight)))
      return Unimplemented("gemv: norm input or weight not 16-byte aligned");
    if (nm.kind == GemvNormKind::kAddRms && (!nm.res || !nm.sum_out || !Aligned16(nm.res) || !Aligned16(nm.sum_out)))
      return Unimplemented("gemv: add_rms_norm prologue without 16-byte aligned residual and sum output");
    if (nm.kind == GemvNormKind::kAddRms && (nm.sum_out == nm.x || nm.sum_out == nm.res))
      return Unimplemented("gemv: add_rms_norm prologue writing its sum in place (every block reads the inputs)");
  }
  return Status::Ok();
}

}  // namespace opfuse::kernels
