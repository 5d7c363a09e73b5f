// kv_attention errors: every shape/dtype mismatch is a one-line InvalidArgument naming the op's
// line and the problem; the verifier's state rules (a written cache must be a graph input that only
// this op reads and that is not an output); and at run time a pos that does not leave room for the
// new tokens names the sequence, the pos and S — with nothing written to the caches.
#include <gtest/gtest.h>

#include <random>

#include "runtime/cpu/cpu_executor.h"

namespace opfuse {
namespace {

// A decode graph with the given declarations substituted (defaults: B=2, T=1, Hq=8, Hkv=2, D=16, S=8).
std::string Text(const std::string& q = "f32[2, 1, 8, 16]", const std::string& k = "f32[2, 1, 2, 16]",
                 const std::string& kc = "f32[2, 8, 2, 16]", const std::string& pos = "i32[2]",
                 const std::string& op = "o = kv_attention(q, k, v, k_cache, v_cache, pos)", const std::string& out = "o",
                 const std::string& vc = "") {
  return "graph g\ninput q: " + q + "\ninput k: " + k + "\ninput v: " + k + "\ninput k_cache: " + kc +
         "\ninput v_cache: " + (vc.empty() ? kc : vc) + "\ninput pos: " + pos + "\n" + op + "\noutput " + out + "\n";
}

struct Case {
  const char* name;
  std::string text;
  int line;
  const char* problem;
};

TEST(KvAttentionErrors, VerifierNamesTheProblem) {
  const std::vector<Case> cases = {
      {"heads_not_multiple", Text("f32[2, 1, 7, 16]"), 8, "7 query heads not a multiple of 2 kv heads"},
      {"pos_dtype", Text("f32[2, 1, 8, 16]", "f32[2, 1, 2, 16]", "f32[2, 8, 2, 16]", "i64[2]"), 8,
       "pos must be i32, got i64"},
      {"pos_shape", Text("f32[2, 1, 8, 16]", "f32[2, 1, 2, 16]", "f32[2, 8, 2, 16]", "i32[2, 1]"), 8,
       "pos must be [batch], got [2, 1]"},
      {"pos_batch", Text("f32[2, 1, 8, 16]", "f32[2, 1, 2, 16]", "f32[2, 8, 2, 16]", "i32[3]"), 8,
       "batch of pos [3] differs from q [2, 1, 8, 16]"},
      {"dtype", Text("bf16[2, 1, 8, 16]"), 8, "dtype mismatch: k is f32 but q is bf16"},
      {"int_q", Text("i32[2, 1, 8, 16]"), 8, "q must be float, got i32"},
      {"rank", Text("f32[1, 8, 16]"), 8, "q must be 4-d ([batch, tokens, heads, head_dim]), got [1, 8, 16]"},
      {"cache_batch", Text("f32[2, 1, 8, 16]", "f32[2, 1, 2, 16]", "f32[3, 8, 2, 16]"), 8,
       "batch of k_cache [3, 8, 2, 16] differs from q"},
      {"tokens", Text("f32[2, 2, 8, 16]"), 8, "tokens of k [2, 1, 2, 16] differ from q [2, 2, 8, 16]"},
      {"head_dim", Text("f32[2, 1, 8, 32]"), 8, "head_dim of k [2, 1, 2, 16] differs from q"},
      {"cache_heads", Text("f32[2, 1, 8, 16]", "f32[2, 1, 2, 16]", "f32[2, 8, 4, 16]"), 8,
       "kv heads of k_cache [2, 8, 4, 16] differ from k"},
      {"cache_lengths", Text("f32[2, 1, 8, 16]", "f32[2, 1, 2, 16]", "f32[2, 8, 2, 16]", "i32[2]",
                             "o = kv_attention(q, k, v, k_cache, v_cache, pos)", "o", "f32[2, 9, 2, 16]"),
       8, "v_cache [2, 9, 2, 16] and k_cache [2, 8, 2, 16] differ in length"},
      {"tokens_exceed_cache", Text("f32[2, 9, 8, 16]", "f32[2, 9, 2, 16]"), 8, "9 new tokens do not fit a cache of length 8"},
      {"arity", Text("f32[2, 1, 8, 16]", "f32[2, 1, 2, 16]", "f32[2, 8, 2, 16]", "i32[2]",
                     "o = kv_attention(q, k, v, k_cache, v_cache)"), 8, "arity: takes 6 inputs, got 5"},
      // state rules
      {"cache_read_elsewhere", Text("f32[2, 1, 8, 16]", "f32[2, 1, 2, 16]", "f32[2, 8, 2, 16]", "i32[2]",
                                    "o = kv_attention(q, k, v, k_cache, v_cache, pos)\nx = neg(k_cache)", "o, x"),
       8, "state input 3 ('k_cache') is written in place, so no other op (or other input of this one) may read it"},
      {"same_cache_twice", Text("f32[2, 1, 8, 16]", "f32[2, 1, 2, 16]", "f32[2, 8, 2, 16]", "i32[2]",
                                "o = kv_attention(q, k, v, k_cache, k_cache, pos)"),
       8, "state input 3 ('k_cache') is written in place, so no other op"},
      {"cache_is_output", Text("f32[2, 1, 8, 16]", "f32[2, 1, 2, 16]", "f32[2, 8, 2, 16]", "i32[2]",
                               "o = kv_attention(q, k, v, k_cache, v_cache, pos)", "o, v_cache"),
       8, "state input 4 ('v_cache') is written in place and cannot also be a graph output"},
      {"cache_is_computed", Text("f32[2, 1, 8, 16]", "f32[2, 1, 2, 16]", "f32[2, 8, 2, 16]", "i32[2]",
                                 "c = neg(k_cache)\no = kv_attention(q, k, v, c, v_cache, pos)"),
       9, "state input 3 ('c') is written in place, so it must be a graph input or param, not the result of another op"},
  };
  for (const auto& c : cases) {
    auto g = ParseGraph(c.text);
    ASSERT_FALSE(g.ok()) << c.name << " parsed:\n" << c.text;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument) << c.name;
    const std::string& m = g.status().message();
    EXPECT_EQ(m.rfind("line " + std::to_string(c.line) + ": ", 0), 0u) << c.name << ": " << m;
    EXPECT_NE(m.find(c.problem), std::string::npos) << c.name << ": " << m << "\nwanted: " << c.problem;
    EXPECT_EQ(m.find('\n'), std::string::npos) << c.name << ": " << m;
  }
}

HostTensor Filled(DType dt, std::vector<int64_t> shape, std::mt19937_64& rng) {
  HostTensor t(dt, std::move(shape));
  FillRandom(t, rng);
  return t;
}

TEST(KvAttentionErrors, PositionOutOfRangeNamesSequenceAndWritesNothing) {
  auto g = ParseGraph(Text("f32[2, 2, 8, 16]", "f32[2, 2, 2, 16]"));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  std::mt19937_64 rng(std::random_device{}());
  for (const auto& [p0, p1, bad_b, bad_pos] : {std::tuple{0, 7, 1, 7}, std::tuple{-1, 0, 0, -1}, std::tuple{6, 9, 1, 9}}) {
    HostTensor pos(DType::kI32, {2});
    pos.set(0, p0);
    pos.set(1, p1);
    std::map<std::string, HostTensor> state = {{"k_cache", Filled(DType::kF32, {2, 8, 2, 16}, rng)},
                                               {"v_cache", Filled(DType::kF32, {2, 8, 2, 16}, rng)}};
    const auto before = state;
    CpuRunOptions o;
    o.state = &state;
    auto r = RunGraphCpu(*g, {{"q", Filled(DType::kF32, {2, 2, 8, 16}, rng)}, {"k", Filled(DType::kF32, {2, 2, 2, 16}, rng)},
                              {"v", Filled(DType::kF32, {2, 2, 2, 16}, rng)}, {"pos", pos}}, o);
    ASSERT_FALSE(r.ok()) << "pos " << p0 << ", " << p1;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    const std::string want = "sequence " + std::to_string(bad_b) + ": pos " + std::to_string(bad_pos) +
                             " + 2 new tokens does not fit the cache (S = 8)";
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message() << "\nwanted: " << want;
    EXPECT_EQ(state.at("k_cache").data, before.at("k_cache").data) << "cache written despite the error";
    EXPECT_EQ(state.at("v_cache").data, before.at("v_cache").data) << "cache written despite the error";
  }
}

}  // namespace
}  // namespace opfuse
