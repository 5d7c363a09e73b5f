// GemvSupported (kernels/gemv_args.h): what the decode GEMV covers, and the reason it gives for
// everything else — host-only, no GPU needed.
#include "kernels/gemv_args.h"

#include <gtest/gtest.h>

namespace opfuse {
namespace {

TEST(GemvRules, SupportedRules) {
  kernels::GemvArgs a;
  alignas(16) static char buf[64];
  a.dtype = DType::kBF16;
  a.m = 1;
  a.k = 16;
  a.a = buf;
  a.segments.push_back({buf, nullptr, buf, 4});
  EXPECT_TRUE(kernels::GemvSupported(a).ok());
  auto bad = [&](kernels::GemvArgs x, const char* needle) {
    Status s = kernels::GemvSupported(x);
    EXPECT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  kernels::GemvArgs x = a;
  x.dtype = DType::kF32;
  bad(x, "dtype");
  x = a;
  x.m = kernels::kGemvMaxRows + 1;
  bad(x, "rows");
  x = a;
  x.k = 12;
  bad(x, "multiple of 8");
  x = a;
  x.a = buf + 2;
  bad(x, "aligned");
  x = a;
  x.epilogue = kernels::GemvEpilogue::kSwiglu;
  bad(x, "two weights");
  x.segments.push_back({buf, nullptr, buf, 5});
  bad(x, "same n");
  x = a;
  x.segments.assign(5, a.segments[0]);
  bad(x, "weights in one launch");
  // Norm prologue: shared-memory bound, aligned inputs, an add_rms_norm sum that is not in place.
  x = a;
  x.norm.kind = kernels::GemvNormKind::kRms;
  x.norm.x = buf;
  EXPECT_TRUE(kernels::GemvSupported(x).ok());
  x.k = 8192;
  x.m = 2;
  bad(x, "shared memory");  // the CUDA-core form stages the normalised rows as f32
  x.m = kernels::kGemvTensorCoreMinRows;  // the tensor-core form reads them in place
  EXPECT_TRUE(kernels::GemvSupported(x).ok());
  x = a;
  x.norm.kind = kernels::GemvNormKind::kRms;
  x.norm.x = buf + 2;
  bad(x, "norm input or weight not 16-byte aligned");
  x.norm.kind = kernels::GemvNormKind::kAddRms;
  x.norm.x = buf;
  bad(x, "residual and sum output");
  x.norm.res = buf + 16;
  x.norm.sum_out = buf + 16;
  bad(x, "in place");
  x.norm.sum_out = buf + 32;
  EXPECT_TRUE(kernels::GemvSupported(x).ok());
  // RoPE epilogue: head_dim dividing n, tables present, not with swiglu.
  x = a;
  x.segments[0].rope_half = 2;
  bad(x, "without cos/sin");
  x.segments[0].cos = x.segments[0].sin = buf;
  EXPECT_TRUE(kernels::GemvSupported(x).ok());
  x.segments[0].rope_half = 3;
  bad(x, "does not divide");
}

// Which form takes a call: tensor cores from kGemvTensorCoreMinRows rows (or as GemvTuning says),
// and the CUDA-core form refuses rows past its instances instead of running the wrong kernel.
TEST(GemvRules, FormByRows) {
  kernels::GemvArgs a;
  alignas(16) static char buf[64];
  a.k = 16;
  a.a = buf;
  a.segments.push_back({buf, nullptr, buf, 4});
  for (int64_t m = 1; m <= kernels::kGemvMaxRows; ++m) {
    a.m = m;
    a.tuning.tensor_cores = -1;
    EXPECT_EQ(kernels::GemvUsesTensorCores(a), m >= kernels::kGemvTensorCoreMinRows) << m;
    EXPECT_TRUE(kernels::GemvSupported(a).ok()) << m;
    a.tuning.tensor_cores = 1;
    EXPECT_TRUE(kernels::GemvUsesTensorCores(a));
    EXPECT_TRUE(kernels::GemvSupported(a).ok()) << m;
    a.tuning.tensor_cores = 0;
    EXPECT_FALSE(kernels::GemvUsesTensorCores(a));
    const Status s = kernels::GemvSupported(a);
    EXPECT_EQ(s.ok(), m <= kernels::kGemvCudaCoreMaxRows) << m;
    if (!s.ok()) {
      EXPECT_NE(s.message().find("CUDA cores"), std::string::npos) << s.message();
    }
  }
  a.m = kernels::kGemvMaxRows + 1;
  a.tuning.tensor_cores = 1;
  EXPECT_FALSE(kernels::GemvSupported(a).ok());
}

}  // namespace
}  // namespace opfuse
