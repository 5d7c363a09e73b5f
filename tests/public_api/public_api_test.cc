// The public API seen from outside: this binary links only the `opfuse` target, whose include path
// is include/ alone (CMakeLists.txt), so an include/opfuse header that reached into src/ would fail
// to compile here. It builds a graph with GraphBuilder, round-trips it through the text format and
// checks the inferred types.
#include <gtest/gtest.h>

#include "opfuse/config.h"
#include "opfuse/graph.h"
#include "opfuse/status.h"

namespace opfuse {
namespace {

TEST(PublicApi, BuildPrintParse) {
  GraphBuilder b("swiglu");
  int gate = b.Input("gate", DType::kBF16, {Dim::Sym("T"), 5632});
  int up = b.Input("up", DType::kBF16, {Dim::Sym("T"), 5632});
  b.Output(b.Mul({b.Silu({gate}), up}), "out");
  StatusOr<Graph> g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ(g->outputs.size(), 1u);
  EXPECT_EQ(g->values[g->outputs[0]].type.dtype, DType::kBF16);
  StatusOr<Graph> back = ParseGraph(PrintGraph(*g));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->nodes.size(), g->nodes.size());
  EXPECT_EQ(back->Symbols(), std::vector<std::string>{"T"});
}

TEST(PublicApi, BadTextIsAnError) {
  StatusOr<Graph> g = ParseGraph("graph g\ninput x: bf16[4]\ny = no_such_op(x)\noutput y\n");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("no_such_op"), std::string::npos) << g.status().ToString();
}

}  // namespace
}  // namespace opfuse
