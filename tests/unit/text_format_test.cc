// Text format (.ofg) round trips: print(parse(print(g))) == print(g) for the example graphs, the
// fuzz seeds, and a builder graph covering every op in ops.def; plus the lexical corners the
// grammar in docs/graph_format.md promises (comments, numbers, inf/nan, bare-word strings,
// keywords as names, declared types, CRLF line ends).
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "all_ops_graph.h"
#include "opfuse/graph.h"

namespace opfuse {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Parses `text`, prints it, parses the print and prints again: both prints must agree.
void ExpectRoundTrip(const std::string& text, const std::string& what) {
  auto g = ParseGraph(text);
  ASSERT_TRUE(g.ok()) << what << ": " << g.status().message();
  const std::string p1 = PrintGraph(*g);
  auto g2 = ParseGraph(p1);
  ASSERT_TRUE(g2.ok()) << what << ": printed form does not parse: " << g2.status().message() << "\n" << p1;
  EXPECT_EQ(PrintGraph(*g2), p1) << what;
  EXPECT_EQ(g2->nodes.size(), g->nodes.size());
  EXPECT_EQ(g2->inputs.size(), g->inputs.size());
  EXPECT_EQ(g2->outputs.size(), g->outputs.size());
}

std::vector<fs::path> OfgFiles(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".ofg") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(TextFormat, ExampleGraphsRoundTrip) {
  auto files = OfgFiles(fs::path(OPFUSE_SOURCE_DIR) / "examples" / "graphs");
  ASSERT_GE(files.size(), 3u);
  for (const auto& f : files) ExpectRoundTrip(ReadFile(f), f.string());
}

TEST(TextFormat, FuzzSeedsRoundTripOrFailCleanly) {
  for (const auto& f : OfgFiles(fs::path(OPFUSE_SOURCE_DIR) / "tests" / "fuzz" / "corpus")) {
    const std::string text = ReadFile(f);
    auto g = ParseGraph(text);
    if (!g.ok()) {
      EXPECT_EQ(g.status().message().rfind("line ", 0), 0u) << f << ": " << g.status().message();
      continue;
    }
    ExpectRoundTrip(text, f.string());
  }
}

TEST(TextFormat, ExampleLlamaLayerShapes) {
  auto g = ParseGraphFile(std::string(OPFUSE_SOURCE_DIR) + "/examples/graphs/llama_decoder_layer.ofg");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->name, "tinyllama_decoder_layer");
  EXPECT_EQ(g->Symbols(), std::vector<std::string>{"T"});
  ASSERT_EQ(g->outputs.size(), 1u);
  EXPECT_EQ(g->values[g->outputs[0]].type.ToString(), "bf16[T, 2048]");
}

TEST(TextFormat, EveryOpRoundTripsFromBuilder) {
  auto g = testing::BuildAllOpsGraph();
  ASSERT_TRUE(g.ok()) << g.status().message();
  // The builder graph must exercise every row of ops.def.
  auto used = testing::OpsUsed(*g);
  for (int i = 0; i < kNumOps; ++i)
    EXPECT_TRUE(used.count(static_cast<OpKind>(i))) << "ops.def row '" << OpName(static_cast<OpKind>(i))
                                                     << "' is missing from tests/unit/all_ops_graph.h";
  const std::string printed = PrintGraph(*g);
  ExpectRoundTrip(printed, "all_ops");
  // The parsed graph has the same ops, attributes and types, node by node.
  auto g2 = ParseGraph(printed);
  ASSERT_TRUE(g2.ok());
  ASSERT_EQ(g2->nodes.size(), g->nodes.size());
  for (size_t i = 0; i < g->nodes.size(); ++i) {
    const Node &a = g->nodes[i], &b = g2->nodes[i];
    EXPECT_EQ(a.op, b.op);
    ASSERT_EQ(a.attrs.size(), b.attrs.size()) << OpName(a.op);
    for (const auto& [key, val] : a.attrs) {
      ASSERT_TRUE(b.attrs.count(key)) << key;
      EXPECT_EQ(val.index(), b.attrs.at(key).index()) << OpName(a.op) << " " << key;
      EXPECT_EQ(AttrToString(val), AttrToString(b.attrs.at(key))) << OpName(a.op) << " " << key;
    }
    for (size_t k = 0; k < a.outputs.size(); ++k)
      EXPECT_EQ(g->values[a.outputs[k]].type, g2->values[b.outputs[k]].type);
  }
}

TEST(TextFormat, PrintedFormIsCanonical) {
  auto g = ParseGraph(
      "graph  g   # comment after the header\n"
      "\n"
      "   # an indented comment line\n"
      "input x:f32[T,4]\n"
      "y=softmax(x){scale=1.5,causal=0}\n"
      "output y\n");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(PrintGraph(*g),
            "graph g\n"
            "input x: f32[T, 4]\n"
            "y: f32[T, 4] = softmax(x) {causal=0, scale=1.5}\n"
            "output y\n");
}

TEST(TextFormat, AttributeValueForms) {
  // The parser alone: neg takes none of these attributes (the verifier refuses them; see below).
  auto g = ParseGraphUnverified(
      "graph g\n"
      "input x: f32[T]\n"  // binds T, which the dim list 'l' uses
      "y = neg(x) {i=-7, p=+5, f=.5, e=1e-05, d=2., ninf=-inf, pinf=inf, n=nan, s=\"a b#c\", w=bare, "
      "l=[T, -1, 3], empty=[], tiny=1e-310, zero=1e-400}\n"
      "output y\n");
  ASSERT_TRUE(g.ok()) << g.status().message();
  const Attrs& a = g->nodes[0].attrs;
  EXPECT_EQ(std::get<int64_t>(a.at("i")), -7);
  EXPECT_EQ(std::get<int64_t>(a.at("p")), 5);
  EXPECT_EQ(std::get<double>(a.at("f")), 0.5);
  EXPECT_EQ(std::get<double>(a.at("e")), 1e-5);
  EXPECT_EQ(std::get<double>(a.at("d")), 2.0);
  EXPECT_EQ(std::get<double>(a.at("ninf")), -HUGE_VAL);
  EXPECT_EQ(std::get<double>(a.at("pinf")), HUGE_VAL);
  EXPECT_TRUE(std::isnan(std::get<double>(a.at("n"))));
  EXPECT_EQ(std::get<std::string>(a.at("s")), "a b#c");
  EXPECT_EQ(std::get<std::string>(a.at("w")), "bare");
  EXPECT_EQ(AttrToString(a.at("l")), "[T, -1, 3]");
  EXPECT_TRUE(std::get<DimList>(a.at("empty")).empty());
  EXPECT_EQ(std::get<double>(a.at("tiny")), 1e-310);
  EXPECT_EQ(std::get<double>(a.at("zero")), 0.0);
  EXPECT_EQ(AttrToString(a.at("d")), "2.0");
  EXPECT_EQ(AttrToString(a.at("e")), "1e-05");
}

// The verifier takes only the attributes an op reads (OpDef::attrs), each within its rule; a name
// beginning with '_' is the passes' own and never comes from a file.
TEST(TextFormat, AttributesAreCheckedByName) {
  struct C {
    const char* node;
    const char* problem;
  };
  const C cases[] = {
      {"y = neg(x) {i=1}", "neg: unknown attribute 'i' (this op takes no attributes)"},
      {"y = rms_norm(x, w) {epsilon=1e-5}", "unknown attribute 'epsilon' (it takes: eps)"},
      {"y = rms_norm(x, w) {eps=-1}", "attribute eps must be a finite number > 0, got -1"},
      {"y = rms_norm(x, w) {eps=0}", "attribute eps must be a finite number > 0, got 0"},
      {"y = rms_norm(x, w) {eps=\"1e-5\"}", "attribute eps must be a finite number > 0, got '1e-5'"},
      {"y = rms_norm(x, w) {eps=inf}", "attribute eps must be a finite number > 0, got inf"},
      {"y = softmax(x) {scale=nan}", "attribute scale must be a finite number, got nan"},
      {"y = softmax(x) {causal=2}", "attribute causal must be 0 or 1, got 2"},
      {"y = softmax(x) {causal=1.0}", "attribute causal must be 0 or 1, got 1"},
      {"y = cast(x) {dtype=f64}", "attribute dtype must be a dtype name"},
      {"y = neg(x) {_early_reads=1}", "names beginning with '_' are reserved"},
  };
  for (const C& c : cases) {
    const std::string text = std::string("graph g\ninput x: f32[T, 8]\nparam w: f32[8]\n") + c.node + "\noutput y\n";
    auto g = ParseGraph(text);
    ASSERT_FALSE(g.ok()) << c.node;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(c.problem), std::string::npos) << c.node << ": " << g.status().message();
    EXPECT_EQ(g.status().message().rfind("line 4: ", 0), 0u) << g.status().message();
  }
  // Within the rules: accepted.
  for (const char* ok : {"y = rms_norm(x, w) {eps=1e-6}", "y = rms_norm(x, w) {eps=1}", "y = softmax(x) {scale=-2, causal=1}",
                         "y = cast(x) {dtype=bf16}"}) {
    auto g = ParseGraph(std::string("graph g\ninput x: f32[T, 8]\nparam w: f32[8]\n") + ok + "\noutput y\n");
    EXPECT_TRUE(g.ok()) << ok << ": " << g.status().message();
  }
}

TEST(TextFormat, KeywordsAreNotReserved) {
  const char* text =
      "graph graph\n"
      "input input: f32[2]\n"
      "param param: f32[2]\n"
      "output: f32[2] = add(input, param)\n"
      "graph2 = neg(output)\n"
      "output output, graph2\n";
  auto g = ParseGraph(text);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->name, "graph");
  EXPECT_EQ(g->values[g->inputs[0]].kind, ValueKind::kInput);
  EXPECT_EQ(g->values[g->inputs[1]].kind, ValueKind::kParam);
  ExpectRoundTrip(text, "keywords");
}

TEST(TextFormat, CrlfAndNoTrailingNewline) {
  auto g = ParseGraph("graph g\r\ninput x: f32[2]\r\ny = neg(x)\r\noutput y");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(PrintGraph(*g), "graph g\ninput x: f32[2]\ny: f32[2] = neg(x)\noutput y\n");
}

TEST(TextFormat, DeclaredTypesAreKept) {
  auto g = ParseGraph("graph g\ninput x: f16[T, 8]\ny: f16[T, 8] = exp(x)\nz = sum(y)\noutput z\n");
  ASSERT_TRUE(g.ok()) << g.status().message();
  const Value& y = g->values[*g->FindValue("y")];
  const Value& z = g->values[*g->FindValue("z")];
  EXPECT_TRUE(y.declared);
  EXPECT_FALSE(z.declared);
  EXPECT_EQ(z.type.ToString(), "f16[T, 1]");
}

TEST(TextFormat, MultiOutputOp) {
  auto g = ParseGraph(
      "graph g\ninput x: bf16[T, 8]\ninput r: bf16[T, 8]\nparam w: bf16[8]\n"
      "y, s = add_rms_norm(x, r, w) {eps=1e-06}\noutput y, s\n");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->nodes.size(), 1u);
  EXPECT_EQ(g->nodes[0].outputs.size(), 2u);
  EXPECT_EQ(PrintGraph(*g),
            "graph g\ninput x: bf16[T, 8]\ninput r: bf16[T, 8]\nparam w: bf16[8]\n"
            "y: bf16[T, 8], s: bf16[T, 8] = add_rms_norm(x, r, w) {eps=1e-06}\noutput y, s\n");
}

TEST(TextFormat, GroupsPrintAsComments) {
  auto g = ParseGraph("graph g\ninput x: f32[4]\na = neg(x)\nb = exp(a)\noutput b\n");
  ASSERT_TRUE(g.ok());
  FusionGroup grp;
  grp.nodes = {0, 1};
  grp.kind = "generic";
  grp.decision = FusionDecision::Yes("elementwise chain");
  grp.variant = Variant::kJit;
  g->groups.push_back(grp);
  const std::string with = PrintGraph(*g, true);
  EXPECT_NE(with.find("# group 0 [generic] fuse: elementwise chain variant=jit\na: f32[4] = neg(x)\n"),
            std::string::npos)
      << with;
  EXPECT_EQ(PrintGraph(*g, false).find("# group"), std::string::npos);
  auto g2 = ParseGraph(with);  // comments are ignored
  ASSERT_TRUE(g2.ok());
  EXPECT_EQ(PrintGraph(*g2), PrintGraph(*g, false));
}

TEST(TextFormat, ParseGraphFilePrefixesPath) {
  auto g = ParseGraphFile("/nonexistent/dir/x.ofg");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("/nonexistent/dir/x.ofg: no such file"), std::string::npos);
}

}  // namespace
}  // namespace opfuse
