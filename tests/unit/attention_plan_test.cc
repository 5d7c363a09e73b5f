// Attention planning (kernels/attention_plan.h) on a fake device: the kernel choice, the general
// kernel's shape and split-K, the scratch it asks for, and the shape errors — no GPU needed. The GPU
// tests (tests/gpu/library_attention_test.cc) check that the launches bind these plans and compute
// the right answer.
#include "kernels/attention_plan.h"

#include "fake_device.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>

namespace opfuse {
namespace {

using kernels::TensorRef;
namespace attn = kernels::attn;

using testing_device::FakeDevice;
using testing_device::FakeH200;

std::vector<TensorRef> Refs(DType t, int64_t T, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, uintptr_t base = 0x100000) {
  void* b = reinterpret_cast<void*>(base);
  return {TensorRef{b, t, {T, Hq, D}}, TensorRef{b, t, {S, Hkv, D}}, TensorRef{b, t, {S, Hkv, D}}};
}

Node AttentionNode() {
  Node n;
  n.op = OpKind::kAttention;
  return n;
}

TEST(AttentionPlan, PicksKernelsAndSplits) {
  const auto dev = FakeH200();
  // Prefill bf16 D=64: the tensor-core kernel, no scratch.
  auto in = Refs(DType::kBF16, 2048, 2048, 32, 4, 64);
  attn::Dims d;
  ASSERT_TRUE(attn::CheckDims(in, nullptr, &d).ok());
  EXPECT_EQ(d.group, 8);
  EXPECT_TRUE(attn::AutoUsesMma(d, attn::PtrsOf(in, nullptr)));
  EXPECT_EQ(kernels::AttentionWorkspaceBytes(AttentionNode(), in, dev), 0u);

  // Decode T=1, S=4096, GQA 32/4: the general kernel, 4 rows per block (the group's 8 query heads in
  // two blocks), split-K over the keys with whole splits of T*Hq rows x (D + 2) floats of scratch.
  in = Refs(DType::kBF16, 1, 4096, 32, 4, 64);
  ASSERT_TRUE(attn::CheckDims(in, nullptr, &d).ok());
  EXPECT_FALSE(attn::AutoUsesMma(d, attn::PtrsOf(in, nullptr)));
  auto g = attn::PlanGeneral(d, true, dev, std::numeric_limits<size_t>::max(), 0);
  EXPECT_EQ(g.rb, 4);
  EXPECT_EQ(g.row_tiles, 2);
  EXPECT_EQ(g.maxc, 2);
  EXPECT_GT(g.splits, 1);
  EXPECT_LE(g.splits, kernels::kAttentionMaxSplits);
  const size_t ws = kernels::AttentionWorkspaceBytes(AttentionNode(), in, dev);
  EXPECT_EQ(ws, g.ws_bytes);
  EXPECT_EQ(ws % (32 * (64 + 2) * sizeof(float)), 0u);
  EXPECT_EQ(kernels::AttentionCounterCount(AttentionNode(), in, dev), 2u * 4u);  // row tiles x kv heads
  // Less scratch: fewer splits; none: one pass.
  g = attn::PlanGeneral(d, true, dev, 3 * 32 * 66 * sizeof(float), 0);
  EXPECT_EQ(g.splits, 3);
  g = attn::PlanGeneral(d, true, dev, 0, 0);
  EXPECT_EQ(g.splits, 1);
  EXPECT_EQ(g.ws_bytes, 0u);
  g = attn::PlanGeneral(d, true, dev, std::numeric_limits<size_t>::max(), 5);
  EXPECT_LE(g.splits, 5);

  // f32, head dims other than 64/128, and unaligned pointers: the general kernel, with the reason.
  ASSERT_TRUE(attn::CheckDims(Refs(DType::kF32, 300, 300, 8, 8, 64), nullptr, &d).ok());
  EXPECT_NE(attn::MmaRefusal(d, {}).find("f32"), std::string::npos);
  ASSERT_TRUE(attn::CheckDims(Refs(DType::kBF16, 300, 300, 8, 8, 80), nullptr, &d).ok());
  EXPECT_NE(attn::MmaRefusal(d, {}).find("head_dim 80"), std::string::npos);
  in = Refs(DType::kF16, 300, 300, 8, 8, 128, 0x1002);
  ASSERT_TRUE(attn::CheckDims(in, nullptr, &d).ok());
  EXPECT_NE(attn::MmaRefusal(d, attn::PtrsOf(in, nullptr)).find("aligned"), std::string::npos);
  EXPECT_FALSE(attn::AutoUsesMma(d, attn::PtrsOf(in, nullptr)));
}

TEST(AttentionPlan, TensorCoreNeedsPositiveScale) {
  // The kernel takes the softmax maximum over raw scores: a non-positive scale is refused with the
  // reason, and the default path (and its scratch) is then the general kernel's.
  auto in = Refs(DType::kBF16, 2048, 2048, 32, 4, 64);
  attn::Dims d;
  ASSERT_TRUE(attn::CheckDims(in, nullptr, &d).ok());
  EXPECT_DOUBLE_EQ(d.scale, 0.125);
  EXPECT_TRUE(attn::AutoUsesMma(d, attn::PtrsOf(in, nullptr)));
  Node n = AttentionNode();
  n.attrs["scale"] = -0.5;
  d.scale = attn::ScaleOf(n, d);
  EXPECT_DOUBLE_EQ(d.scale, -0.5);
  EXPECT_NE(attn::MmaRefusal(d, attn::PtrsOf(in, nullptr)).find("scale -0.5 is not positive"), std::string::npos);
  EXPECT_FALSE(attn::AutoUsesMma(d, attn::PtrsOf(in, nullptr)));
  n.attrs["scale"] = 0.0;
  d.scale = attn::ScaleOf(n, d);
  EXPECT_FALSE(attn::AutoUsesMma(d, attn::PtrsOf(in, nullptr)));
  // 17 queries over 4096 keys: tensor cores (no scratch) with the default scale; with a negative one
  // the general kernel, which splits the keys and asks for scratch.
  in = Refs(DType::kBF16, 17, 4096, 32, 4, 64);
  EXPECT_EQ(kernels::AttentionWorkspaceBytes(AttentionNode(), in, FakeH200()), 0u);
  n.attrs["scale"] = -0.5;
  EXPECT_GT(kernels::AttentionWorkspaceBytes(n, in, FakeH200()), 0u);
}

TEST(AttentionPlan, WgmmaNeedsComputeCapability90) {
  // The Hopper kernel is an sm_90a build: cc 9.0 only, with every condition of the mma.sync kernel.
  auto in = Refs(DType::kBF16, 2048, 2048, 32, 4, 64);
  attn::Dims d;
  ASSERT_TRUE(attn::CheckDims(in, nullptr, &d).ok());
  const attn::Ptrs p = attn::PtrsOf(in, nullptr);
  EXPECT_EQ(attn::WgmmaRefusal(d, p, FakeH200()), "");
  EXPECT_NE(attn::WgmmaRefusal(d, p, FakeDevice(132, 10)).find("compute capability 10.0"), std::string::npos);
  target::DeviceInfo h90_1 = FakeH200();
  h90_1.minor = 1;
  EXPECT_NE(attn::WgmmaRefusal(d, p, h90_1).find("compute capability 9.1"), std::string::npos);
  attn::Dims neg = d;
  neg.scale = -1;
  EXPECT_NE(attn::WgmmaRefusal(neg, p, FakeH200()).find("not positive"), std::string::npos);
  attn::Dims f32 = d;
  f32.dtype = DType::kF32;
  EXPECT_NE(attn::WgmmaRefusal(f32, p, FakeH200()).find("dtype f32"), std::string::npos);
  attn::Dims d96 = d;
  d96.D = 96;
  EXPECT_NE(attn::WgmmaRefusal(d96, p, FakeH200()).find("head_dim 96"), std::string::npos);
  attn::Dims many = d;  // kv_attention over 40000 sequences of 65536 cache rows: past int coordinates
  many.B = 40000;
  many.S = 65536;
  EXPECT_NE(attn::WgmmaRefusal(many, p, FakeH200()).find("32-bit"), std::string::npos);
}

TEST(AttentionPlan, TensorCoreTileAndFold) {
  // Two instances as on an H200 (128-row blocks 2 a SM, 64-row blocks 3 a SM), 132 SMs: the larger
  // tile once its grid fills 90 % of a wave, causal grids folded; else the smaller tile, folded only
  // while the folded grid still fills 90 % of the SMs.
  const std::vector<attn::MmaTile> tiles = {{128, 2}, {64, 3}};
  attn::Dims d;
  auto choose = [&](int64_t T, int64_t Hq, bool causal, int64_t B = 1) {
    d.T = d.S = T;
    d.Hq = Hq;
    d.B = B;
    return attn::ChooseMma(d, causal, 132, tiles);
  };
  attn::MmaChoice c = choose(2048, 32, true);  // 8 folded blocks x 32 heads = 256 >= 0.9 * 264
  EXPECT_EQ(c.instance, 0);
  EXPECT_TRUE(c.fold);
  EXPECT_EQ(c.grid_x, 8);
  c = choose(1024, 32, true);  // 128-row: 128 blocks < 238; 64-row: 256 < 356 -> last, folded (256 >= 119)
  EXPECT_EQ(c.instance, 1);
  EXPECT_TRUE(c.fold);
  EXPECT_EQ(c.grid_x, 8);
  c = choose(256, 32, true);  // 64-row folded: 2 x 32 = 64 < 119 -> not folded, 4 row tiles
  EXPECT_EQ(c.instance, 1);
  EXPECT_FALSE(c.fold);
  EXPECT_EQ(c.grid_x, 4);
  // Four sequences: 128-row folded 1 x 128 lanes = 128 < 238; 64-row folded 2 x 128 = 256 < 356 ->
  // the last, folded (256 >= 119).
  c = choose(256, 32, true, 4);
  EXPECT_EQ(c.instance, 1);
  EXPECT_TRUE(c.fold);
  EXPECT_EQ(c.grid_x, 2);
  c = choose(3000, 12, true);  // odd length: 24 row tiles of 128 -> 12 folded x 12 = 144 < 238; 47 of 64 -> 24
  EXPECT_EQ(c.instance, 1);
  EXPECT_TRUE(c.fold);
  EXPECT_EQ(c.grid_x, 24);
  c = choose(2048, 32, false);  // not causal: never folded; 16 x 32 = 512 >= 238
  EXPECT_EQ(c.instance, 0);
  EXPECT_FALSE(c.fold);
  EXPECT_EQ(c.grid_x, 16);
  c = choose(512, 32, false);  // 4 x 32 = 128 < 238 -> the 64-row tile, 8 blocks a head
  EXPECT_EQ(c.instance, 1);
  EXPECT_FALSE(c.fold);
  EXPECT_EQ(c.grid_x, 8);
  c = choose(1, 1, true);  // one row: one block
  EXPECT_EQ(c.grid_x, 1);
  EXPECT_FALSE(c.fold);
  // One-block-a-SM tiles (the Hopper kernel's 128 rows): folded where the folded grid's last wave is
  // at least three quarters full, else unfolded.
  const std::vector<attn::MmaTile> one = {{128, 1}, {64, 3}};
  auto choose1 = [&](int64_t T, int64_t Hq) {
    d.T = d.S = T;
    d.Hq = Hq;
    d.B = 1;
    return attn::ChooseMma(d, true, 132, one);
  };
  c = choose1(2048, 32);  // 8 folded x 32 = 256 blocks: 2 waves of 132, 97 % full
  EXPECT_EQ(c.instance, 0);
  EXPECT_TRUE(c.fold);
  EXPECT_EQ(c.grid_x, 8);
  c = choose1(1024, 32);  // 4 x 32 = 128 blocks: one wave, 97 % full
  EXPECT_EQ(c.instance, 0);
  EXPECT_TRUE(c.fold);
  c = choose1(3000, 12);  // 12 x 12 = 144 blocks: 2 waves, 55 % full -> 24 unfolded row tiles
  EXPECT_EQ(c.instance, 0);
  EXPECT_FALSE(c.fold);
  EXPECT_EQ(c.grid_x, 24);
  c = choose1(4096, 20);  // 16 x 20 = 320 blocks: 3 waves, 81 % full
  EXPECT_TRUE(c.fold);
  // A device with fewer SMs fills sooner: 1024 causal on 40 SMs takes the 128-row tile.
  d.T = d.S = 1024;
  d.Hq = 32;
  d.B = 1;
  c = attn::ChooseMma(d, true, 40, tiles);
  EXPECT_EQ(c.instance, 0);
  EXPECT_TRUE(c.fold);
}

TEST(AttentionPlan, ShapeErrors) {
  attn::Dims d;
  auto out_of = [](DType t, int64_t T, int64_t Hq, int64_t D) { return std::vector<TensorRef>{TensorRef{nullptr, t, {T, Hq, D}}}; };
  std::vector<TensorRef> out = out_of(DType::kBF16, 4, 6, 64);
  Status s = attn::CheckDims(Refs(DType::kBF16, 4, 4, 6, 4, 64), &out, &d);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not a multiple"), std::string::npos) << s.message();
  out = out_of(DType::kF16, 4, 2, 64);
  EXPECT_EQ(attn::CheckDims(Refs(DType::kBF16, 4, 4, 2, 2, 64), &out, &d).code(), StatusCode::kInvalidArgument);
  auto in = Refs(DType::kBF16, 4, 4, 2, 2, 64);
  in[2].shape = {5, 2, 64};
  EXPECT_EQ(attn::CheckDims(in, nullptr, &d).code(), StatusCode::kInvalidArgument);
  in.resize(2);
  EXPECT_EQ(attn::CheckDims(in, nullptr, &d).code(), StatusCode::kInvalidArgument);
  // Sizes beyond 32-bit row indexing are refused, not wrapped.
  s = attn::CheckDims(Refs(DType::kBF16, int64_t{1} << 31, 16, 1, 1, 64), nullptr, &d);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s.ToString();
}

// Random shapes (fixed seed): every general plan covers the keys with whole splits within the
// limits, its tile fits the default shared memory, and the scratch it asks for is what it uses.
TEST(AttentionPlan, RandomShapesGivePlansThatCoverTheKeys) {
  const auto dev = FakeH200();
  std::mt19937_64 rng(20261126);
  for (int i = 0; i < 4000; ++i) {
    const int64_t hkv = 1 + static_cast<int64_t>(rng() % 8), group = 1 + static_cast<int64_t>(rng() % 8);
    const int64_t D = 1 + static_cast<int64_t>(rng() % 256);
    const int64_t T = 1 + static_cast<int64_t>(rng() % (rng() % 2 ? 16 : 3000));
    const int64_t S = T + static_cast<int64_t>(rng() % 9000);
    const DType dt = rng() % 3 == 0 ? DType::kF32 : rng() % 2 ? DType::kBF16 : DType::kF16;
    attn::Dims d;
    ASSERT_TRUE(attn::CheckDims(Refs(dt, T, S, hkv * group, hkv, D), nullptr, &d).ok());
    const size_t cap = rng() % 2 ? std::numeric_limits<size_t>::max() : static_cast<size_t>(rng() % (64 << 20));
    const auto g = attn::PlanGeneral(d, rng() % 2, dev, cap, 0);
    ASSERT_TRUE(g.rb == 1 || g.rb == 4 || g.rb == 8) << g.rb;
    ASSERT_GE(g.maxc * 32, D);
    ASSERT_GE(g.splits, 1);
    ASSERT_LE(g.splits, kernels::kAttentionMaxSplits);
    ASSERT_GE(int64_t{g.chunk} * g.splits, S) << "T=" << T << " S=" << S;
    if (g.splits > 1) {
      ASSERT_EQ(g.chunk % (kernels::kAttentionWarps * g.kt), 0);
      ASSERT_LT(int64_t{g.chunk} * (g.splits - 1), S) << "an empty split";
      ASSERT_LE(g.ws_bytes, cap);
    } else {
      ASSERT_EQ(g.ws_bytes, 0u);
    }
    ASSERT_LE(g.smem_bytes, 48u * 1024) << "D=" << D << " " << DTypeName(dt);
    ASSERT_EQ(g.row_tiles, (T * group + g.rb - 1) / g.rb);
  }
}

}  // namespace
}  // namespace opfuse
