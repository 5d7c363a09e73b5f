// The collective ops' CPU reference (ops/collective.cc) over the in-process communicator
// (runtime/cpu/inprocess_comm.h): graphs of all_reduce / all_gather run on one thread per rank
// with fresh signed random inputs, against sums and concatenations computed here; world=1 is the
// identity; a missing or mismatched communicator, an unknown reduction and mismatched sizes are
// one-line errors; a rank that aborts releases the ranks waiting for it.
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "numerics_harness.h"
#include "ops/collective.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/cpu/inprocess_comm.h"

namespace opfuse::test {
namespace {

StatusOr<Graph> OneCollective(OpKind op, DType dt, std::vector<Dim> shape, Attrs attrs) {
  GraphBuilder b("collective");
  const int x = b.Input("x", dt, Shape(shape.begin(), shape.end()));
  b.Output(b.Op(op, {x}, std::move(attrs)), "y");
  return b.Build();
}

// Runs `g` on `world` ranks (rank r's input inputs[r]) and returns each rank's output y.
std::vector<StatusOr<HostTensor>> RunRanks(const Graph& g, const std::vector<HostTensor>& inputs) {
  const int world = static_cast<int>(inputs.size());
  InProcessGroup group(world);
  std::vector<StatusOr<HostTensor>> out(world, StatusOr<HostTensor>(Internal("not run")));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      ScopedCommunicator scope(group.comm(r));
      auto res = RunGraphCpu(g, {{"x", inputs[r]}});
      if (!res.ok()) {
        group.Abort();
        out[r] = res.status();
      } else {
        out[r] = std::move(res->at("y"));
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

HostTensor Random(DType dt, std::vector<int64_t> shape, uint64_t seed) {
  HostTensor t(dt, shape);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-2, 2);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, u(rng));
  return t;
}

NUMERICS_TEST(CollectiveNumerics, AllReduceSumsEveryRankInRankOrder, OpKind::kAllReduce) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (int world : {2, 3, 4}) {
      SCOPED_TRACE(fmt::format("{} world {}", DTypeName(dt), world));
      auto g = OneCollective(OpKind::kAllReduce, dt, {Dim(7), Dim(333)}, {{"world", int64_t{world}}});
      ASSERT_TRUE(g.ok()) << g.status().message();
      std::vector<HostTensor> in;
      for (int r = 0; r < world; ++r) in.push_back(Random(dt, {7, 333}, 100 + r));
      auto out = RunRanks(*g, in);
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(out[r].ok()) << out[r].status().message();
        EXPECT_EQ(out[r]->data, out[0]->data) << "rank " << r << " holds other bits than rank 0";
      }
      HostTensor want(dt, {7, 333});
      for (int64_t i = 0; i < want.numel(); ++i) {
        float s = 0;
        for (int r = 0; r < world; ++r) s += static_cast<float>(in[r].get(i));
        want.set(i, s);
      }
      EXPECT_EQ(out[0]->data, want.data);
    }
}

NUMERICS_TEST(CollectiveNumerics, AllGatherConcatenatesAlongTheAxisInRankOrder, OpKind::kAllGather) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kI32})
    for (int64_t axis : {0, 1, 2, -1}) {
      const int world = 3;
      SCOPED_TRACE(fmt::format("{} axis {}", DTypeName(dt), axis));
      auto g = OneCollective(OpKind::kAllGather, dt, {Dim(2), Dim(5), Dim(3)}, {{"world", int64_t{world}}, {"axis", axis}});
      ASSERT_TRUE(g.ok()) << g.status().message();
      std::vector<HostTensor> in;
      for (int r = 0; r < world; ++r) in.push_back(Random(dt, {2, 5, 3}, 7 + r));
      auto out = RunRanks(*g, in);
      const int64_t a = axis < 0 ? axis + 3 : axis;
      std::vector<int64_t> shape = {2, 5, 3};
      shape[a] *= world;
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(out[r].ok()) << out[r].status().message();
        ASSERT_EQ(out[r]->shape, shape);
        for (int64_t i = 0; i < 2; ++i)
          for (int64_t j = 0; j < shape[1]; ++j)
            for (int64_t k = 0; k < shape[2]; ++k) {
              int64_t idx[3] = {i, j, k};
              const int64_t src_rank = idx[a] / (a == 0 ? 2 : a == 1 ? 5 : 3);
              idx[a] %= (a == 0 ? 2 : a == 1 ? 5 : 3);
              const double want = in[src_rank].get((idx[0] * 5 + idx[1]) * 3 + idx[2]);
              ASSERT_EQ(out[r]->get((i * shape[1] + j) * shape[2] + k), want) << i << "," << j << "," << k;
            }
      }
    }
}

TEST(CollectiveNumerics, WorldOneIsTheIdentityWithoutACommunicator) {
  for (OpKind op : {OpKind::kAllReduce, OpKind::kAllGather}) {
    auto g = OneCollective(op, DType::kBF16, {Dim(3), Dim(17)}, {{"world", int64_t{1}}});
    ASSERT_TRUE(g.ok()) << g.status().message();
    const HostTensor x = Random(DType::kBF16, {3, 17}, 1);
    auto out = RunGraphCpu(*g, {{"x", x}});
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(out->at("y").data, x.data);
  }
}

TEST(CollectiveNumerics, RefusesWhatItCannotDo) {
  // world > 1 without a communicator: never a silent single-rank answer
  auto g = OneCollective(OpKind::kAllReduce, DType::kF32, {Dim(4)}, {{"world", int64_t{2}}});
  ASSERT_TRUE(g.ok());
  auto out = RunGraphCpu(*g, {{"x", Random(DType::kF32, {4}, 1)}});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("world=2 needs a communicator"), std::string::npos) << out.status().message();
  // a group of another size
  InProcessGroup three(3);
  {
    ScopedCommunicator scope(three.comm(0));
    out = RunGraphCpu(*g, {{"x", Random(DType::kF32, {4}, 1)}});
  }
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("sharded for world=2 but runs in a group of 3 ranks"), std::string::npos)
      << out.status().message();
  // attributes: an unknown reduction, a missing world, a bad axis
  auto bad = OneCollective(OpKind::kAllReduce, DType::kF32, {Dim(4)}, {{"world", int64_t{2}}, {"reduce", std::string("max")}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("reduce 'max' is not implemented"), std::string::npos) << bad.status().message();
  bad = OneCollective(OpKind::kAllGather, DType::kF32, {Dim(4)}, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("needs attribute world"), std::string::npos) << bad.status().message();
  bad = OneCollective(OpKind::kAllGather, DType::kF32, {Dim(4)}, {{"world", int64_t{2}}, {"axis", int64_t{1}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("axis 1 out of range"), std::string::npos) << bad.status().message();
  bad = OneCollective(OpKind::kAllGather, DType::kF32, {Dim::Sym("T")}, {{"world", int64_t{2}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("symbolic"), std::string::npos) << bad.status().message();
}

TEST(CollectiveNumerics, MismatchedSizesFailEveryRank) {
  InProcessGroup group(2);
  std::vector<float> a(5, 1.0f), b(6, 1.0f);
  Status sa, sb;
  std::thread t([&] { sb = group.comm(1)->AllReduceSum(b); });
  sa = group.comm(0)->AllReduceSum(a);
  t.join();
  EXPECT_FALSE(sa.ok());
  EXPECT_FALSE(sb.ok());
  EXPECT_NE(sa.message().find("rank 1 has 24 bytes, rank 0 20"), std::string::npos) << sa.message();
}

TEST(CollectiveNumerics, AnAbortingRankReleasesTheRanksWaitingForIt) {
  InProcessGroup group(3);
  std::vector<Status> st(3, Status::Ok());
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      std::vector<float> v(8, 1.0f);
      st[r] = group.comm(r)->AllReduceSum(v);
    });
  group.Abort();  // rank 2 failed before its collective
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(st[r].ok());
    EXPECT_EQ(st[r].message(), kAbortedMessage);
  }
  // Reset re-arms the group: a collective of all three runs again.
  group.Reset();
  threads.clear();
  std::vector<std::vector<float>> v(3, std::vector<float>(4));
  for (int r = 0; r < 3; ++r) {
    std::fill(v[r].begin(), v[r].end(), static_cast<float>(r + 1));
    threads.emplace_back([&, r] { st[r] = group.comm(r)->AllReduceSum(v[r]); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].message();
    EXPECT_EQ(v[r], std::vector<float>(4, 6.0f));
  }
}

}  // namespace
}  // namespace opfuse::test
