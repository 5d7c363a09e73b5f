// Every pass is near-linear in graph size (issue 28): a 100k-op elementwise chain (grouping used to
// be quadratic there: 40k ops took 10 s; so was naming each new value) and a wide graph (100k
// parallel ops joined by an add tree) are built and run through the whole pipeline under a time
// bound that a quadratic step misses by far, and 4x the ops take less than 10x the time.
#include <chrono>
#include <functional>

#include <gtest/gtest.h>

#include "passes/pipeline.h"

namespace opfuse {
namespace {

// x -> neg -> neg -> ... (n ops) -> output.
Graph Chain(int n) {
  GraphBuilder b("chain");
  int v = b.Input("x", DType::kF32, {Dim::Sym("T"), Dim(8)});
  for (int i = 0; i < n; ++i) v = b.Neg({v});
  b.Output(v, "y");
  auto g = b.Build();
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? *g : Graph();
}

// n independent ops on one input, joined by a balanced tree of adds into one output (2n ops).
Graph Wide(int n) {
  GraphBuilder b("wide");
  const int x = b.Input("x", DType::kF32, {Dim::Sym("T"), Dim(8)});
  std::vector<int> level;
  for (int i = 0; i < n; ++i) level.push_back(b.Neg({x}));
  while (level.size() > 1) {
    std::vector<int> next;
    for (size_t i = 0; i + 1 < level.size(); i += 2) next.push_back(b.Add({level[i], level[i + 1]}));
    if (level.size() % 2) next.push_back(level.back());
    level = std::move(next);
  }
  b.Output(level[0], "y");
  auto g = b.Build();
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? *g : Graph();
}

// n ops on one input, each its own graph output, and n constants each added to one of them: the
// output checks (IsGraphOutput) and the constant passes run once per node.
Graph WideOutputs(int n) {
  GraphBuilder b("wide_outputs");
  const int x = b.Input("x", DType::kF32, {Dim::Sym("T"), Dim(8)});
  for (int i = 0; i < n; ++i) b.Output(b.Add({b.Neg({x}), b.Constant(i % 7)}));
  auto g = b.Build();
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? *g : Graph();
}

// Building the graph (GraphBuilder + verification) and the pipeline, together.
double PipelineSeconds(const std::function<Graph()>& build) {
  const auto t0 = std::chrono::steady_clock::now();
  Graph g = build();
  PassContext ctx;
  Status s = RunPipeline(g, ctx);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_FALSE(g.groups.empty());
  return sec;
}

// The pipeline on a graph and on one 4x its size: the large one under 20 s and under 10x the small
// one's time (quadratic would be ~16x).
void ExpectNearLinear(const char* what, const std::function<Graph()>& small_graph, const std::function<Graph()>& large_graph) {
  const double small = PipelineSeconds(small_graph);
  const double large = PipelineSeconds(large_graph);
  std::printf("[ scaling ] %s: %.2f s, 4x the size %.2f s\n", what, small, large);
  EXPECT_LT(large, 20.0);
  EXPECT_LT(large, 10 * small + 0.5);
}

TEST(PipelineScaling, LongChainIsNearLinear) {
  ExpectNearLinear("chain of 25k ops", [] { return Chain(25000); }, [] { return Chain(100000); });
}

TEST(PipelineScaling, WideGraphIsNearLinear) {
  ExpectNearLinear("wide graph of 25k ops", [] { return Wide(25000); }, [] { return Wide(100000); });
}

TEST(PipelineScaling, ManyOutputsAndConstantsAreNearLinear) {
  ExpectNearLinear("12.5k outputs and constants", [] { return WideOutputs(12500); }, [] { return WideOutputs(50000); });
}

}  // namespace
}  // namespace opfuse
