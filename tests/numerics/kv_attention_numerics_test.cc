// Numerics of kv_attention (attention over a KV cache the op appends to) on the CPU reference,
// through the executor's state API (CpuRunOptions::state, Executable::Run(..., state)):
//   - prefill (pos = 0, T > 1) equals causal `attention` on the same k/v, sequence by sequence;
//   - a decode step (T = 1) after that prefill, with the cache carried in the state map, equals
//     `attention` over the concatenated keys/values;
//   - B = 2 with different pos and GQA 8:1 / 1:1 in f32/bf16/f16 against a double reference
//     written here (it reads the expected cache contents, never src/ops code);
//   - cache rows outside [pos[b], pos[b] + T) are untouched and the new rows are exact copies;
//   - a state input passed as a const input is not modified; the Backend path updates state.
#include <cmath>

#include <fmt/format.h>

#include "numerics_harness.h"
#include "ops/op_def.h"
#include "runtime/backend.h"
#include "runtime/cpu/cpu_executor.h"

namespace opfuse::test {
namespace {

struct Shp {
  int64_t B, T, Hq, Hkv, D, S;
};

StatusOr<Graph> KvGraph(DType dt, const Shp& s, double scale = 0) {
  GraphBuilder b("kv");
  int q = b.Input("q", dt, {s.B, s.T, s.Hq, s.D});
  int k = b.Input("k", dt, {s.B, s.T, s.Hkv, s.D});
  int v = b.Input("v", dt, {s.B, s.T, s.Hkv, s.D});
  int kc = b.Input("k_cache", dt, {s.B, s.S, s.Hkv, s.D});
  int vc = b.Input("v_cache", dt, {s.B, s.S, s.Hkv, s.D});
  int pos = b.Input("pos", DType::kI32, {s.B});
  Attrs a;
  if (scale != 0) a["scale"] = scale;
  b.Output(b.KvAttention({q, k, v, kc, vc, pos}, a), "out");
  return b.Build();
}

HostTensor Pos(const std::vector<int64_t>& p) {
  HostTensor t(DType::kI32, {static_cast<int64_t>(p.size())});
  for (size_t i = 0; i < p.size(); ++i) t.set(static_cast<int64_t>(i), static_cast<double>(p[i]));
  return t;
}

// Runs one kv_attention graph; the caches in `state` are updated in place.
StatusOr<HostTensor> RunKv(const Graph& g, const HostTensor& q, const HostTensor& k, const HostTensor& v,
                           const HostTensor& pos, std::map<std::string, HostTensor>& state) {
  CpuRunOptions o;
  o.state = &state;
  OPFUSE_ASSIGN_OR_RETURN(auto out, RunGraphCpu(g, {{"q", q}, {"k", k}, {"v", v}, {"pos", pos}}, o));
  return out.at("out");
}

// Double reference: query t of sequence b sees cache rows [0, pos[b] + t] of `kc`/`vc` (the
// caches as they must be after the write).
std::vector<double> Reference(const HostTensor& q, const HostTensor& kc, const HostTensor& vc,
                              const std::vector<int64_t>& pos, const Shp& s, double scale) {
  std::vector<double> ref(static_cast<size_t>(s.B * s.T * s.Hq * s.D));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t h = 0; h < s.Hq; ++h) {
        const int64_t kvh = h / (s.Hq / s.Hkv), n = pos[b] + t + 1;
        std::vector<double> p(static_cast<size_t>(n));
        double mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < s.D; ++d)
            dot += q.get(((b * s.T + t) * s.Hq + h) * s.D + d) * kc.get(((b * s.S + j) * s.Hkv + kvh) * s.D + d);
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (auto& x : p) sum += (x = std::exp(x - mx));
        for (int64_t d = 0; d < s.D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < n; ++j) acc += p[j] * vc.get(((b * s.S + j) * s.Hkv + kvh) * s.D + d);
          ref[((b * s.T + t) * s.Hq + h) * s.D + d] = acc / sum;
        }
      }
  return ref;
}

// `cache` after the op: rows [pos[b], pos[b]+T) are exactly `nw`'s rows, all others as in `before`.
void ExpectCacheUpdate(const HostTensor& cache, const HostTensor& before, const HostTensor& nw,
                       const std::vector<int64_t>& pos, const Shp& s, const std::string& what) {
  const int64_t row = s.Hkv * s.D;
  int64_t bad = 0;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t j = 0; j < s.S; ++j) {
      const bool fresh = j >= pos[b] && j < pos[b] + s.T;
      for (int64_t e = 0; e < row; ++e) {
        const int64_t at = (b * s.S + j) * row + e;
        const double want = fresh ? nw.get((b * s.T + j - pos[b]) * row + e) : before.get(at);
        const double got = cache.get(at);
        if (!(got == want || (std::isnan(got) && std::isnan(want)))) ++bad;
      }
    }
  EXPECT_EQ(bad, 0) << what << ": cache elements differ from the expected update";
}

// Causal `attention` on one sequence's q[T,Hq,D], k/v[S',Hkv,D] (the CPU reference of that op).
HostTensor AttentionOf(const HostTensor& q, const HostTensor& k, const HostTensor& v) {
  auto out = RunOp(OpKind::kAttention, {q, k, v}, {{"causal", int64_t{1}}});
  return out.empty() ? HostTensor() : out[0];
}

// Rows [r0, r1) of the first axis of `t` restricted to batch b (t is [B, R, ...]) as [r1-r0, ...].
HostTensor Rows(const HostTensor& t, int64_t b, int64_t r0, int64_t r1) {
  std::vector<int64_t> shape(t.shape.begin() + 1, t.shape.end());
  const int64_t per = Numel(std::vector<int64_t>(t.shape.begin() + 2, t.shape.end()));
  shape[0] = r1 - r0;
  HostTensor out(t.dtype, shape);
  const int sz = DTypeSize(t.dtype);
  std::memcpy(out.data.data(), t.data.data() + ((b * t.shape[1] + r0) * per) * sz, static_cast<size_t>((r1 - r0) * per * sz));
  return out;
}

NUMERICS_TEST(KvAttentionNumerics, PrefillThenDecodeEqualsAttention, OpKind::kKvAttention) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  for (DType dt : FloatDTypes())
    for (const Shp& s : {Shp{2, 6, 4, 2, 8, 10}, Shp{1, 5, 8, 1, 64, 7}, Shp{3, 3, 2, 2, 16, 4}}) {
      const std::string what = fmt::format("{} B={} T={} Hq={} Hkv={} D={} S={}", DTypeName(dt), s.B, s.T, s.Hq, s.Hkv, s.D, s.S);
      auto g = KvGraph(dt, s);
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      HostTensor q = Rand(dt, {s.B, s.T, s.Hq, s.D}, rng, -2, 2), k = Rand(dt, {s.B, s.T, s.Hkv, s.D}, rng, -2, 2),
                 v = Rand(dt, {s.B, s.T, s.Hkv, s.D}, rng);
      std::map<std::string, HostTensor> state = {{"k_cache", Rand(dt, {s.B, s.S, s.Hkv, s.D}, rng)},
                                                 {"v_cache", Rand(dt, {s.B, s.S, s.Hkv, s.D}, rng)}};
      const auto before = state;
      auto out = RunKv(*g, q, k, v, Pos(std::vector<int64_t>(s.B, 0)), state);
      ASSERT_TRUE(out.ok()) << what << ": " << out.status().ToString();
      ExpectCacheUpdate(state["k_cache"], before.at("k_cache"), k, std::vector<int64_t>(s.B, 0), s, what + " prefill k");
      ExpectCacheUpdate(state["v_cache"], before.at("v_cache"), v, std::vector<int64_t>(s.B, 0), s, what + " prefill v");
      // Prefill == attention(q[b], k[b], v[b]) per sequence.
      std::vector<double> ref;
      for (int64_t b = 0; b < s.B; ++b) {
        HostTensor a = AttentionOf(Rows(q, b, 0, s.T), Rows(k, b, 0, s.T), Rows(v, b, 0, s.T));
        for (double x : Values(a)) ref.push_back(x);
      }
      ExpectClose(*out, {s.B, s.T, s.Hq, s.D}, ref, 1e-6, what + " prefill vs attention");

      // Decode one token at pos = T with the cache carried over.
      if (s.T + 1 > s.S) continue;
      const Shp d{s.B, 1, s.Hq, s.Hkv, s.D, s.S};
      auto gd = KvGraph(dt, d);
      ASSERT_TRUE(gd.ok()) << gd.status().ToString();
      HostTensor q1 = Rand(dt, {s.B, 1, s.Hq, s.D}, rng, -2, 2), k1 = Rand(dt, {s.B, 1, s.Hkv, s.D}, rng, -2, 2),
                 v1 = Rand(dt, {s.B, 1, s.Hkv, s.D}, rng);
      const auto mid = state;
      auto out1 = RunKv(*gd, q1, k1, v1, Pos(std::vector<int64_t>(s.B, s.T)), state);
      ASSERT_TRUE(out1.ok()) << what << ": " << out1.status().ToString();
      ExpectCacheUpdate(state["k_cache"], mid.at("k_cache"), k1, std::vector<int64_t>(s.B, s.T), d, what + " decode k");
      std::vector<double> ref1;
      for (int64_t b = 0; b < s.B; ++b) {  // attention over concat(prefill k/v, new k/v)
        HostTensor kk = Rows(state["k_cache"], b, 0, s.T + 1), vv = Rows(state["v_cache"], b, 0, s.T + 1);
        HostTensor a = AttentionOf(Rows(q1, b, 0, 1), kk, vv);
        for (double x : Values(a)) ref1.push_back(x);
      }
      ExpectClose(*out1, {s.B, 1, s.Hq, s.D}, ref1, 1e-6, what + " decode vs attention");
    }
}

NUMERICS_TEST(KvAttentionNumerics, BatchesWithDifferentPositionsAndGqa, OpKind::kKvAttention) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  struct Case { Shp s; std::vector<int64_t> pos; double scale; };
  const std::vector<Case> cases = {
      {{2, 1, 8, 1, 64, 12}, {5, 11}, 0},       // GQA 8:1 decode, one sequence at the cache end
      {{2, 3, 4, 4, 16, 9}, {0, 6}, 0},         // 1:1, T=3, second sequence fills the cache
      {{3, 4, 6, 2, 8, 16}, {2, 9, 0}, 0.3},    // custom scale
      {{1, 17, 4, 1, 32, 40}, {23}, 0},         // T > 16 (the GPU's prefill path) after a prefix
      {{2, 2, 2, 1, 5, 6}, {1, 4}, 0}};         // odd head_dim
  for (DType dt : FloatDTypes())
    for (const auto& c : cases) {
      const Shp& s = c.s;
      const std::string what = fmt::format("{} B={} T={} Hq={} Hkv={} D={} S={} pos={}", DTypeName(dt), s.B, s.T, s.Hq,
                                           s.Hkv, s.D, s.S, ShapeStr(c.pos));
      auto g = KvGraph(dt, s, c.scale);
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      HostTensor q = Rand(dt, {s.B, s.T, s.Hq, s.D}, rng, -2, 2), k = Rand(dt, {s.B, s.T, s.Hkv, s.D}, rng, -2, 2),
                 v = Rand(dt, {s.B, s.T, s.Hkv, s.D}, rng);
      std::map<std::string, HostTensor> state = {{"k_cache", Rand(dt, {s.B, s.S, s.Hkv, s.D}, rng, -2, 2)},
                                                 {"v_cache", Rand(dt, {s.B, s.S, s.Hkv, s.D}, rng)}};
      const auto before = state;
      auto out = RunKv(*g, q, k, v, Pos(c.pos), state);
      ASSERT_TRUE(out.ok()) << what << ": " << out.status().ToString();
      ExpectCacheUpdate(state["k_cache"], before.at("k_cache"), k, c.pos, s, what + " k_cache");
      ExpectCacheUpdate(state["v_cache"], before.at("v_cache"), v, c.pos, s, what + " v_cache");
      const double scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(s.D));
      ExpectClose(*out, {s.B, s.T, s.Hq, s.D}, Reference(q, state["k_cache"], state["v_cache"], c.pos, s, scale), what);
    }
}

NUMERICS_TEST(KvAttentionNumerics, StateApi, OpKind::kKvAttention) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  const Shp s{1, 2, 2, 1, 4, 5};
  auto g = KvGraph(DType::kF32, s);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ(StateInputs(*g).size(), 2u);
  HostTensor q = Rand(DType::kF32, {1, 2, 2, 4}, rng), k = Rand(DType::kF32, {1, 2, 1, 4}, rng),
             v = Rand(DType::kF32, {1, 2, 1, 4}, rng), kc = Rand(DType::kF32, {1, 5, 1, 4}, rng),
             vc = Rand(DType::kF32, {1, 5, 1, 4}, rng);
  const std::map<std::string, HostTensor> all = {{"q", q}, {"k", k}, {"v", v}, {"k_cache", kc}, {"v_cache", vc}, {"pos", Pos({2})}};
  // Const inputs: the caches are used by copy and stay as they were.
  auto r = RunGraphCpu(*g, all);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(all.at("k_cache").data, kc.data);
  EXPECT_EQ(all.at("v_cache").data, vc.data);
  // Through the Backend interface with a state map: same output, caches updated in place.
  auto be = MakeBackend("cpu");
  ASSERT_TRUE(be.ok());
  auto ex = (*be)->Compile(*g, {});
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  std::map<std::string, HostTensor> state = {{"k_cache", kc}, {"v_cache", vc}};
  auto r2 = (*ex)->Run({{"q", q}, {"k", k}, {"v", v}, {"pos", Pos({2})}}, {}, &state);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ(r2->at("out").data, r->at("out").data);
  ExpectCacheUpdate(state["k_cache"], kc, k, {2}, s, "backend k_cache");
  ExpectCacheUpdate(state["v_cache"], vc, v, {2}, s, "backend v_cache");
  // Errors: a name that is not state, and a state input given twice.
  std::map<std::string, HostTensor> bad = {{"q", q}};
  auto e1 = RunGraphCpu(*g, {{"k", k}, {"v", v}, {"k_cache", kc}, {"v_cache", vc}, {"pos", Pos({2})}}, {{}, false, &bad});
  ASSERT_FALSE(e1.ok());
  EXPECT_NE(e1.status().message().find("state 'q' is not a state input"), std::string::npos) << e1.status().ToString();
  std::map<std::string, HostTensor> twice = {{"k_cache", kc}};
  auto e2 = RunGraphCpu(*g, all, {{}, false, &twice});
  ASSERT_FALSE(e2.ok());
  EXPECT_NE(e2.status().message().find("'k_cache' is given both"), std::string::npos) << e2.status().ToString();
}

// The pass pipeline leaves kv_attention alone: its own "single" group (never fused with the
// elementwise ops around it, never removed), saying why, and the compiled graph still runs it.
NUMERICS_TEST(KvAttentionNumerics, PipelineKeepsTheNodeSingle, OpKind::kKvAttention) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  GraphBuilder b("kv_pipeline");
  int q = b.Input("q", DType::kF32, {1, 1, 4, 8});
  int k = b.Input("k", DType::kF32, {1, 1, 2, 8});
  int v = b.Input("v", DType::kF32, {1, 1, 2, 8});
  int kc = b.Input("k_cache", DType::kF32, {1, 6, 2, 8});
  int vc = b.Input("v_cache", DType::kF32, {1, 6, 2, 8});
  int pos = b.Input("pos", DType::kI32, {1});
  int qs = b.Mul({b.Neg({q}), q});
  b.Output(b.Exp({b.Neg({b.KvAttention({qs, k, v, kc, vc, pos})})}), "out");
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto be = MakeBackend("cpu");
  ASSERT_TRUE(be.ok());
  auto ex = (*be)->Compile(*g, {});
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  const Graph& cg = (*ex)->graph();
  int kv_groups = 0;
  for (const auto& grp : cg.groups)
    for (int n : grp.nodes)
      if (cg.nodes[n].op == OpKind::kKvAttention) {
        ++kv_groups;
        EXPECT_EQ(grp.nodes.size(), 1u) << grp.kind;
        EXPECT_EQ(grp.kind, "single");
        EXPECT_NE(grp.decision.reason.find("writes its k_cache/v_cache inputs in place"), std::string::npos)
            << grp.decision.ToString();
      }
  EXPECT_EQ(kv_groups, 1);
  std::map<std::string, HostTensor> state = {{"k_cache", Rand(DType::kF32, {1, 6, 2, 8}, rng)},
                                             {"v_cache", Rand(DType::kF32, {1, 6, 2, 8}, rng)}};
  const auto before = state;
  HostTensor kk = Rand(DType::kF32, {1, 1, 2, 8}, rng);
  auto r = (*ex)->Run({{"q", Rand(DType::kF32, {1, 1, 4, 8}, rng)}, {"k", kk}, {"v", Rand(DType::kF32, {1, 1, 2, 8}, rng)},
                       {"pos", Pos({3})}}, {}, &state);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectCacheUpdate(state["k_cache"], before.at("k_cache"), kk, {3}, Shp{1, 1, 4, 2, 8, 6}, "pipeline k_cache");
}

// The .ofg text form parses, prints and re-parses to the same graph; the scale attribute survives.
NUMERICS_TEST(KvAttentionNumerics, TextFormat, OpKind::kKvAttention) {
  const char* text = R"(graph decode
input q: bf16[B, 1, 32, 64]
input k: bf16[B, 1, 4, 64]
input v: bf16[B, 1, 4, 64]
input k_cache: bf16[B, S, 4, 64]
input v_cache: bf16[B, S, 4, 64]
input pos: i32[B]
o = kv_attention(q, k, v, k_cache, v_cache, pos) {scale=0.125}
output o
)";
  auto g = ParseGraph(text);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const std::string printed = PrintGraph(*g);
  EXPECT_NE(printed.find("kv_attention(q, k, v, k_cache, v_cache, pos) {scale=0.125}"), std::string::npos) << printed;
  auto g2 = ParseGraph(printed);
  ASSERT_TRUE(g2.ok()) << g2.status().ToString();
  EXPECT_EQ(PrintGraph(*g2), printed);
  EXPECT_EQ(g2->values[g2->outputs[0]].type.ToString(), "bf16[B, 1, 32, 64]");
}

}  // namespace
}  // namespace opfuse::test
