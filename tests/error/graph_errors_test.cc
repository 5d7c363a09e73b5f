// One test per parser and verifier error: each malformed graph must fail with InvalidArgument and
// a one-line message carrying the exact line ("line N: ") and the problem (a fixed substring).
// Text cannot express a cycle (arguments must be defined earlier), nor a dangling value id or a
// graph without outputs, so those are built with the Graph API.
#include <gtest/gtest.h>

#include "opfuse/graph.h"

namespace opfuse {
namespace {

struct Case {
  const char* name;
  const char* text;
  int line;             // expected "line N: " prefix
  const char* problem;  // expected substring of the message
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ParseError : public ::testing::TestWithParam<Case> {};

TEST_P(ParseError, NamesLineAndProblem) {
  const Case& c = GetParam();
  auto g = ParseGraph(c.text);
  ASSERT_FALSE(g.ok()) << c.name << " parsed:\n" << PrintGraph(*g);
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = g.status().message();
  const std::string prefix = "line " + std::to_string(c.line) + ": ";
  EXPECT_EQ(m.rfind(prefix, 0), 0u) << "message: " << m << "\nwanted prefix: " << prefix;
  EXPECT_NE(m.find(c.problem), std::string::npos) << "message: " << m << "\nwanted: " << c.problem;
  EXPECT_EQ(m.find('\n'), std::string::npos) << "message is not one line: " << m;
}

// clang-format off
const Case kCases[] = {
  // ---- lexical
  {"bad_number", "graph g\ninput x: f32[1.2.3]\ny = neg(x)\noutput y\n", 2, "bad number '1.2.3'"},
  {"bad_number_int_overflow", "graph g\ninput x: f32[99999999999999999999]\noutput x\n", 2,
   "bad number '99999999999999999999'"},
  {"bad_number_float_overflow", "graph g\ninput x: f32[4]\ny = neg(x) {a=1e400}\noutput y\n", 3, "bad number '1e400'"},
  {"unterminated_string", "graph g\ninput x: f32[4]\ny = cast(x) {dtype=\"f16}\noutput y\n", 3, "unterminated string"},
  {"unexpected_character", "graph g\ninput x: f32[4]\ny = neg(x) @\noutput y\n", 3, "unexpected character '@'"},
  {"unexpected_byte", "graph g\ninput x: f32[4]\ny = neg(x)\x01\noutput y\n", 3, "unexpected byte 0x01"},
  // ---- statements and order
  {"empty", "", 1, "empty graph (expected 'graph NAME')"},
  {"only_comments", "# nothing\n\n", 1, "empty graph"},
  {"no_header", "input x: f32[4]\noutput x\n", 1, "expected 'graph NAME' as the first statement, found 'input'"},
  {"header_junk", "graph g h\ninput x: f32[4]\noutput x\n", 1, "unexpected 'h' at end of statement"},
  {"missing_output", "graph g\ninput x: f32[4]\n# comment\ny = neg(x)\n", 4, "missing 'output NAME, ...' statement"},
  {"missing_output_no_newline", "graph g\ninput x: f32[4]\ny = neg(x)", 3, "missing 'output NAME, ...' statement"},
  {"statement_after_output", "graph g\ninput x: f32[4]\ny = neg(x)\noutput y\n\nz = neg(y)\n", 6,
   "statement after 'output' (output must be the last statement)"},
  {"input_after_op", "graph g\ninput x: f32[4]\ny = neg(x)\ninput b: f32[4]\noutput y\n", 4,
   "input 'b' after the first op (declare inputs first)"},
  {"missing_equals", "graph g\ninput x: f32[4]\ny neg(x)\noutput y\n", 3, "expected ',', found 'neg'"},
  {"missing_paren", "graph g\ninput x: f32[4]\ny = neg x\noutput y\n", 3, "expected '(', found 'x'"},
  {"unclosed_args", "graph g\ninput x: f32[4]\ny = add(x, x\noutput y\n", 3, "expected ',', found 'end of line'"},
  {"unclosed_attrs", "graph g\ninput x: f32[4]\ny = neg(x) {a=1\noutput y\n", 3, "expected ',', found 'end of line'"},
  {"bad_attr_value", "graph g\ninput x: f32[4]\ny = neg(x) {a=-nan}\noutput y\n", 3, "expected an attribute value"},
  {"attr_twice", "graph g\ninput x: f32[4]\ny = neg(x) {a=1, a=2}\noutput y\n", 3, "attribute 'a' given twice"},
  // ---- names
  {"unknown_op", "graph g\ninput x: f32[4]\ny = frobnicate(x)\noutput y\n", 3, "unknown op 'frobnicate'"},
  {"dangling_name", "graph g\ninput x: f32[4]\ny = mul(x, z)\noutput y\n", 3, "mul: undefined value 'z'"},
  {"dangling_output", "graph g\ninput x: f32[4]\ny = neg(x)\noutput y, q\n", 4, "output: undefined value 'q'"},
  {"use_before_definition", "graph g\ninput x: f32[4]\na = neg(b)\nb = neg(x)\noutput a\n", 3, "neg: undefined value 'b'"},
  {"duplicate_name", "graph g\ninput x: f32[4]\ny = neg(x)\ny = exp(x)\noutput y\n", 4, "value 'y' defined twice"},
  {"duplicate_input", "graph g\ninput x: f32[4]\nparam x: f32[4]\noutput x\n", 3, "value 'x' defined twice"},
  {"duplicate_result_of_one_op", "graph g\ninput x: f32[4]\ninput r: f32[4]\nparam w: f32[4]\n"
   "y, y = add_rms_norm(x, r, w)\noutput y\n", 5, "value 'y' defined twice"},
  // ---- types
  {"unknown_dtype", "graph g\ninput x: f64[4]\noutput x\n", 2, "unknown dtype 'f64' (f32, f16, bf16, i32, i64, bool)"},
  {"unknown_dtype_declared", "graph g\ninput x: f32[4]\ny: float[4] = neg(x)\noutput y\n", 3, "unknown dtype 'float'"},
  {"negative_dim", "graph g\ninput x: f32[-4]\noutput x\n", 2, "negative dim -4 in type"},
  {"huge_dim", "graph g\ninput x: f32[281474976710657]\noutput x\n", 2, "larger than 2^48"},
  {"huge_type", "graph g\ninput x: f32[T, 16777216, 16777217]\noutput x\n", 2,
   "type f32[T, 16777216, 16777217] has more than 2^48 elements"},
  {"bad_dim", "graph g\ninput x: f32[1.5]\noutput x\n", 2, "expected a dim (integer or symbol), found '1.5'"},
  {"declared_dtype_mismatch", "graph g\ninput x: f32[4]\n\ny: f16[4] = neg(x)\noutput y\n", 4,
   "neg: dtype mismatch: 'y' declared f16[4] but computes f32[4]"},
  {"declared_shape_mismatch", "graph g\ninput x: f32[T, 4]\ny: f32[T, 5] = neg(x)\noutput y\n", 3,
   "neg: shape mismatch: 'y' declared f32[T, 5] but computes f32[T, 4]"},
  {"declared_symbol_mismatch", "graph g\ninput x: f32[T, 4]\ny: f32[S, 4] = neg(x)\noutput y\n", 3,
   "shape mismatch: 'y' declared f32[S, 4] but computes f32[T, 4]"},
  // ---- verifier, through the parser: arity, dtype, shape, symbols
  {"arity_too_few_inputs", "graph g\ninput x: f32[4]\ny = add(x)\noutput y\n", 3, "add: arity: takes 2 inputs, got 1"},
  {"arity_too_many_inputs", "graph g\ninput x: f32[4]\ny = neg(x, x)\noutput y\n", 3, "neg: arity: takes 1 input, got 2"},
  {"arity_range", "graph g\ninput x: f32[4]\ny = rms_norm(x, x, x)\noutput y\n", 3, "rms_norm: arity: takes 1 to 2 inputs, got 3"},
  {"arity_at_least", "graph g\ninput x: f32[4]\ny = concat()\noutput y\n", 3, "concat: arity: takes at least 1 input, got 0"},
  {"arity_outputs", "graph g\ninput x: f32[T, 8]\ninput r: f32[T, 8]\nparam w: f32[8]\n"
   "y = add_rms_norm(x, r, w)\noutput y\n", 5, "arity: add_rms_norm produces 2 outputs, 1 named"},
  {"arity_outputs_too_many", "graph g\ninput x: f32[4]\na, b = neg(x)\noutput a\n", 3, "arity: neg produces 1 output, 2 named"},
  {"dtype_mismatch", "graph g\ninput x: f32[4]\ninput i: i32[4]\ny = add(x, i)\noutput y\n", 4, "add: dtype mismatch: f32 vs i32"},
  {"dtype_float_only", "graph g\ninput i: i32[4]\ny = exp(i)\noutput y\n", 3, "exp: dtype mismatch: needs a float input, got i32[4]"},
  {"dtype_where_condition", "graph g\ninput x: f32[4]\ny = where(x, x, x)\noutput y\n", 3,
   "where: dtype mismatch: condition must be bool, got f32[4]"},
  {"shape_mismatch", "graph g\ninput x: f32[T, 64]\ninput y: f32[T, 32]\n# broadcast fails\nz = add(x, y)\noutput z\n", 5,
   "add: shape mismatch: [T, 64] and [T, 32] do not broadcast"},
  {"shape_mismatch_symbols", "graph g\ninput x: f32[T, 4]\ninput y: f32[S, 4]\nz = mul(x, y)\noutput z\n", 4,
   "mul: shape mismatch: [T, 4] and [S, 4] do not broadcast"},
  {"shape_mismatch_matmul", "graph g\ninput a: f32[T, 64]\nparam b: f32[32, 16]\nc = matmul(a, b)\noutput c\n", 4,
   "matmul: shape mismatch: a [T, 64] and b [32, 16] disagree on K"},
  {"shape_mismatch_reshape", "graph g\ninput x: f32[T, 6]\ny = reshape(x) {shape=[T, 4]}\noutput y\n", 3,
   "reshape: shape mismatch: cannot reshape [T, 6] to [T, 4]"},
  {"unbound_symbol_reshape", "graph g\ninput x: f32[T, 4]\ny = reshape(x) {shape=[S, 4]}\noutput y\n", 3,
   "reshape: unbound symbol 'S' in attribute shape (no input shape uses it)"},
  {"attr_dims_too_large", "graph g\ninput x: f32[8]\ny = reshape(x) {shape=[4611686018427387904, -1]}\noutput y\n", 3,
   "reshape: attribute shape: entry 4611686018427387904 is larger than 2^48"},
  {"result_too_large", "graph g\ninput x: f32[T]\ny = slice(x) {axis=0, start=0, end=9223372036854775807}\noutput y\n", 3,
   "slice: result 'y' f32[9223372036854775807] is too large"},
  {"result_too_large_concat", "graph g\ninput x: f32[281474976710656]\ny = concat(x, x)\noutput y\n", 3,
   "concat: result 'y' f32[562949953421312] is too large"},
};
// clang-format on

INSTANTIATE_TEST_SUITE_P(Text, ParseError, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ParseErrorFile, PathPrefixedToLine) {
  auto g = ParseGraphFile("/definitely/not/here.ofg");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("/definitely/not/here.ofg: no such file"), std::string::npos);
}

// ------------------------------------------------------------------ verifier errors, via the API

// x -> neg -> a -> exp -> b, with the first neg rewired to read b: a cycle of two nodes.
TEST(VerifyError, Cycle) {
  Graph g;
  int x = g.AddValue("x", {DType::kF32, {4}}, ValueKind::kInput);
  int n0 = g.AddNode(OpKind::kNeg, {x}, {}, {}, {"a"});
  int a = g.nodes[n0].outputs[0];
  int n1 = g.AddNode(OpKind::kExp, {a}, {}, {}, {"b"});
  int b = g.nodes[n1].outputs[0];
  g.nodes[n0].inputs = {b};
  g.nodes[n0].line = 7;
  g.nodes[n1].line = 8;
  g.outputs = {b};
  Status s = VerifyAndInfer(g);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cycle: '"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("' depends on itself"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().rfind("line ", 0), 0u) << s.message();  // names the node's source line
  // Compact (used by every pass) refuses a cycle too.
  EXPECT_FALSE(g.Compact().ok());
}

TEST(VerifyError, SelfLoop) {
  Graph g;
  g.AddValue("x", {DType::kF32, {4}}, ValueKind::kInput);
  int n = g.AddNode(OpKind::kNeg, {0}, {}, {}, {"y"});
  g.nodes[n].inputs = {g.nodes[n].outputs[0]};
  g.outputs = {g.nodes[n].outputs[0]};
  Status s = VerifyAndInfer(g);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("neg: cycle: 'y' depends on itself"), std::string::npos) << s.message();
}

TEST(VerifyError, CycleThroughBuilderForwardReference) {
  // The builder takes value ids; one that a later node will produce makes a cycle.
  GraphBuilder b;
  int x = b.Input("x", DType::kF32, {4});
  int first = b.Add({x, x + 2});  // x + 2 is the id the next node's output gets
  int second = b.Neg({first});
  ASSERT_EQ(second, x + 2);
  b.Output(second);
  auto g = b.Build();
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("cycle"), std::string::npos) << g.status().message();
}

TEST(VerifyError, ArityFromApi) {
  Graph g;
  int x = g.AddValue("x", {DType::kF32, {4}}, ValueKind::kInput);
  int n = g.AddNode(OpKind::kAdd, {x, x, x}, {});
  g.nodes[n].line = 12;
  g.outputs = {g.nodes[n].outputs[0]};
  Status s = VerifyAndInfer(g);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "line 12: add: arity: takes 2 inputs, got 3");
}

TEST(VerifyError, ArityOutputsFromApi) {
  Graph g;
  int x = g.AddValue("x", {DType::kF32, {4}}, ValueKind::kInput);
  int n = g.AddNode(OpKind::kNeg, {x}, {});
  g.nodes[n].outputs.push_back(x);  // a second "output" the op does not have
  g.outputs = {g.nodes[n].outputs[0]};
  Status s = VerifyAndInfer(g);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("neg: arity: produces 1 output, 2 bound"), std::string::npos) << s.message();
}

TEST(VerifyError, DanglingValueId) {
  Graph g;
  g.AddValue("x", {DType::kF32, {4}}, ValueKind::kInput);
  int n = g.AddNode(OpKind::kNeg, {99}, {});
  g.outputs = {g.nodes[n].outputs[0]};
  Status s = VerifyAndInfer(g);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("neg: dangling input (value id 99)"), std::string::npos) << s.message();
}

TEST(VerifyError, DanglingGraphOutput) {
  GraphBuilder b;
  int x = b.Input("x", DType::kF32, {4});
  b.Output(b.Neg({x}));
  auto built = b.Build();
  ASSERT_TRUE(built.ok());
  Graph g = *built;
  g.outputs.push_back(42);
  Status s = VerifyAndInfer(g);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("dangling graph output (value id 42)"), std::string::npos) << s.message();
}

TEST(VerifyError, MissingOutputs) {
  GraphBuilder b;
  int x = b.Input("x", DType::kF32, {4});
  b.Neg({x});
  auto g = b.Build();
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(), "graph has no outputs");
}

TEST(VerifyError, DuplicateName) {
  GraphBuilder b;
  int x = b.Input("x", DType::kF32, {4});
  b.Input("x", DType::kF32, {4});
  b.Output(b.Neg({x}));
  auto g = b.Build();
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(), "duplicate value name 'x'");
}

TEST(VerifyError, UnknownOpName) {
  // Ops enter the API only as OpKind; names are resolved through the ops.def table.
  EXPECT_FALSE(OpFromName("frobnicate").has_value());
  EXPECT_FALSE(OpFromName("").has_value());
  EXPECT_FALSE(OpFromName("Add").has_value());  // names are case-sensitive
}

TEST(VerifyError, NegativeInputDimFromApi) {
  GraphBuilder b;
  int x = b.Input("x", DType::kF32, {-3});
  b.Output(b.Neg({x}));
  auto g = b.Build();
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(), "input 'x': negative dim -3");
}

TEST(VerifyError, HugeInputFromApi) {
  GraphBuilder b;
  int x = b.Input("x", DType::kF32, {int64_t{1} << 40, int64_t{1} << 40});
  b.Output(b.Neg({x}));
  auto g = b.Build();
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("input 'x': f32[1099511627776, 1099511627776] is too large"), std::string::npos)
      << g.status().message();
}

TEST(VerifyError, UnboundSymbolFromApi) {
  GraphBuilder b;
  int x = b.Input("x", DType::kF32, {Dim::Sym("T"), 4});
  b.Output(b.Reshape({x}, {{"shape", DimList{Dim::Sym("B"), Dim::Sym("T"), 4}}}));
  auto g = b.Build();
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(), "reshape: unbound symbol 'B' in attribute shape (no input shape uses it)");
}

TEST(VerifyError, UsesRemovedNode) {
  GraphBuilder b;
  int x = b.Input("x", DType::kF32, {4});
  b.Output(b.Exp({b.Neg({x})}));
  auto built = b.Build();
  ASSERT_TRUE(built.ok());
  Graph g = *built;
  g.nodes[0].dead = true;  // exp still reads neg's output
  Status s = VerifyAndInfer(g);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("exp: uses 'neg' of a removed node"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace opfuse
