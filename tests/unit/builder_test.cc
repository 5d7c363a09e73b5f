// GraphBuilder and Graph API: type inference at Build(), naming (fresh names, renamed outputs),
// multi-output ops, the op table accessors generated from ops.def, and the Graph helpers passes use
// (Users, ReplaceAllUses, Compact).
#include <gtest/gtest.h>

#include "all_ops_graph.h"
#include "opfuse/graph.h"

namespace opfuse {
namespace {

TEST(Builder, SwigluFromHeaderComment) {
  GraphBuilder b("swiglu");
  auto gate = b.Input("gate", DType::kBF16, {Dim::Sym("T"), 5632});
  auto up = b.Input("up", DType::kBF16, {Dim::Sym("T"), 5632});
  b.Output(b.Mul({b.Silu({gate}), up}), "out");
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->name, "swiglu");
  ASSERT_EQ(g->nodes.size(), 2u);
  EXPECT_EQ(g->nodes[0].op, OpKind::kSilu);
  EXPECT_EQ(g->nodes[1].op, OpKind::kMul);
  ASSERT_EQ(g->outputs.size(), 1u);
  const Value& out = g->values[g->outputs[0]];
  EXPECT_EQ(out.name, "out");
  EXPECT_EQ(out.type.ToString(), "bf16[T, 5632]");
  EXPECT_EQ(PrintGraph(*g),
            "graph swiglu\ninput gate: bf16[T, 5632]\ninput up: bf16[T, 5632]\n"
            "silu: bf16[T, 5632] = silu(gate)\nout: bf16[T, 5632] = mul(silu, up)\noutput out\n");
}

TEST(Builder, FreshNamesDoNotCollide) {
  GraphBuilder b;
  int x = b.Input("x", DType::kF32, {4});
  int a1 = b.Add({x, x});
  int a2 = b.Add({a1, x});
  int a3 = b.Add({a2, x});
  b.Output(a3);
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->values[a1].name, "add");
  EXPECT_EQ(g->values[a2].name, "add_1");
  EXPECT_EQ(g->values[a3].name, "add_2");
  EXPECT_EQ(g->FreshName("add"), "add_3");
  EXPECT_EQ(g->FreshName("fresh"), "fresh");
  EXPECT_EQ(g->FreshName(""), "t");
}

TEST(Builder, MultiOutputOp) {
  GraphBuilder b;
  int x = b.Input("x", DType::kF16, {Dim::Sym("T"), 32});
  int r = b.Input("r", DType::kF16, {Dim::Sym("T"), 32});
  int w = b.Param("w", DType::kF16, {32});
  auto outs = b.OpN(OpKind::kAddRmsNorm, {x, r, w}, {{"eps", 1e-5}});
  ASSERT_EQ(outs.size(), 2u);
  b.Output(outs[0], "y");
  b.Output(outs[1], "sum");
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->values[outs[0]].slot, 0);
  EXPECT_EQ(g->values[outs[1]].slot, 1);
  EXPECT_EQ(g->values[outs[1]].producer, 0);
  EXPECT_EQ(g->values[outs[1]].type.ToString(), "f16[T, 32]");
  EXPECT_EQ(g->values[w].kind, ValueKind::kParam);
}

TEST(Builder, ConstantIsWeakScalar) {
  GraphBuilder b;
  int x = b.Input("x", DType::kBF16, {8});
  int c = b.Constant(2.0);
  b.Output(b.Mul({x, c}));
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->values[c].type.ToString(), "f32[]");
  EXPECT_EQ(AttrString(g->nodes[0].attrs, "dtype", ""), "f32");
  EXPECT_EQ(AttrFloat(g->nodes[0].attrs, "value", 0), 2.0);
  EXPECT_EQ(g->values[g->outputs[0]].type.ToString(), "bf16[8]");
}

TEST(Builder, BuildIsRepeatableAndVerifies) {
  GraphBuilder b;
  int x = b.Input("x", DType::kF32, {4});
  int y = b.Input("y", DType::kF32, {5});
  b.Output(b.Add({x, y}));
  auto g1 = b.Build();
  auto g2 = b.Build();
  ASSERT_FALSE(g1.ok());
  ASSERT_FALSE(g2.ok());
  EXPECT_EQ(g1.status().message(), g2.status().message());
  EXPECT_NE(g1.status().message().find("shape mismatch"), std::string::npos) << g1.status().message();
}

TEST(Builder, RenameToExistingNameFails) {
  GraphBuilder b;
  int x = b.Input("x", DType::kF32, {4});
  b.Output(b.Neg({x}), "x");
  auto g = b.Build();
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("duplicate value name 'x'"), std::string::npos) << g.status().message();
}

TEST(Builder, AllOpsGraphBuilds) {
  auto g = testing::BuildAllOpsGraph();
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(static_cast<int>(testing::OpsUsed(*g).size()), kNumOps);
  auto type_of = [&](const std::string& name) { return g->values[*g->FindValue(name)].type.ToString(); };
  EXPECT_EQ(type_of("less_than"), "bool[T, 64]");
  EXPECT_EQ(type_of("argmax"), "i64[T, 1]");
  EXPECT_EQ(type_of("cast"), "bf16[T, 64]");
  EXPECT_EQ(type_of("reshape"), "f32[T, 8, 8]");
  EXPECT_EQ(type_of("transpose"), "f32[64, T]");
  EXPECT_EQ(type_of("slice"), "f32[T, 32]");
  EXPECT_EQ(type_of("concat"), "f32[T, 192]");
  EXPECT_EQ(type_of("matmul"), "f32[T, 32]");
  EXPECT_EQ(type_of("matmul_1"), "f32[T, 32]");
  EXPECT_EQ(type_of("attention"), "bf16[T, 4, 16]");
  EXPECT_EQ(type_of("embedding"), "f16[T, 64]");
}

TEST(OpTable, GeneratedFromOpsDef) {
  EXPECT_GE(kNumOps, 50);
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = GetOpInfo(static_cast<OpKind>(i));
    EXPECT_EQ(static_cast<int>(info.op), i);
    auto back = OpFromName(info.name);
    ASSERT_TRUE(back.has_value()) << info.name;
    EXPECT_EQ(*back, info.op);
    EXPECT_GE(info.num_outputs, 1) << info.name;
    EXPECT_TRUE(info.max_inputs < 0 || info.max_inputs >= info.min_inputs) << info.name;
  }
  EXPECT_FALSE(OpFromName("frobnicate").has_value());
  EXPECT_STREQ(OpName(OpKind::kGeluTanh), "gelu_tanh");
  EXPECT_TRUE(IsElementwise(OpKind::kAdd));
  EXPECT_TRUE(IsElementwise(OpKind::kSilu));
  EXPECT_FALSE(IsElementwise(OpKind::kMatmul));
  EXPECT_STREQ(FusionKindName(GetOpInfo(OpKind::kSum).kind), "reduction");
}

TEST(DTypes, NamesAndSizes) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kBool}) {
    auto back = DTypeFromName(DTypeName(t));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, t);
  }
  EXPECT_EQ(DTypeSize(DType::kBF16), 2);
  EXPECT_EQ(DTypeSize(DType::kI64), 8);
  EXPECT_EQ(DTypeSize(DType::kBool), 1);
  EXPECT_FALSE(DTypeFromName("f64").has_value());
  EXPECT_TRUE(IsFloat(DType::kBF16));
  EXPECT_FALSE(IsFloat(DType::kI32));
}

TEST(Shapes, BindAndCount) {
  Shape s{Dim::Sym("T"), 4, 8};
  EXPECT_EQ(ShapeToString(s), "[T, 4, 8]");
  EXPECT_FALSE(NumElements(s).has_value());
  EXPECT_EQ(NumElements(s, {{"T", 3}}).value(), 96);
  auto bound = BindShape(s, {{"T", 3}});
  ASSERT_TRUE(bound.ok());
  EXPECT_EQ(*bound, (std::vector<int64_t>{3, 4, 8}));
  auto unbound = BindShape(s, {});
  ASSERT_FALSE(unbound.ok());
  EXPECT_NE(unbound.status().message().find("unbound symbol 'T'"), std::string::npos);
  EXPECT_EQ(NumElements({}).value(), 1);
}

TEST(Attrs, Accessors) {
  Attrs a{{"i", int64_t{3}}, {"f", 0.5}, {"s", std::string("x")}, {"big", 1e300}, {"nan", std::nan("")}};
  EXPECT_EQ(AttrInt(a, "i", 0), 3);
  EXPECT_EQ(AttrInt(a, "f", 9), 0);
  EXPECT_EQ(AttrInt(a, "s", 9), 9);
  EXPECT_EQ(AttrInt(a, "missing", 7), 7);
  EXPECT_EQ(AttrInt(a, "big", 0), INT64_MAX);  // saturates instead of undefined behaviour
  EXPECT_EQ(AttrInt(a, "nan", 5), 5);
  EXPECT_EQ(AttrFloat(a, "i", 0), 3.0);
  EXPECT_EQ(AttrString(a, "s", ""), "x");
  EXPECT_EQ(AttrString(a, "i", "d"), "d");
  EXPECT_EQ(AttrToString(AttrValue(3.0)), "3.0");
  EXPECT_EQ(AttrToString(AttrValue(-std::nan(""))), "nan");
}

TEST(GraphApi, UsersReplaceAndCompact) {
  GraphBuilder b;
  int x = b.Input("x", DType::kF32, {4});
  int n = b.Neg({x});
  int e = b.Exp({n});
  b.Output(e);
  auto built = b.Build();
  ASSERT_TRUE(built.ok());
  Graph g = *built;
  auto users = g.Users();
  EXPECT_EQ(users[x], std::vector<int>{0});
  EXPECT_EQ(users[n], std::vector<int>{1});
  EXPECT_TRUE(g.IsGraphOutput(e));
  // Bypass neg: exp reads x directly; neg is dead and Compact drops it.
  g.ReplaceAllUses(n, x);
  g.nodes[0].dead = true;
  ASSERT_TRUE(g.Compact().ok());
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op, OpKind::kExp);
  EXPECT_EQ(g.values[g.nodes[0].inputs[0]].name, "x");
  EXPECT_EQ(PrintGraph(g), "graph main\ninput x: f32[4]\nexp: f32[4] = exp(x)\noutput exp\n");
  ASSERT_TRUE(VerifyAndInfer(g).ok());
}

}  // namespace
}  // namespace opfuse
