// Helpers for the pass tests: run the pipeline on .ofg text and look at the resulting groups.
// Every run also checks the invariants that must hold after any pipeline: the graph verifies,
// every node is in exactly one group, and the groups form a DAG (no value leaves a group and
// comes back).
#pragma once
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "fusion/group_info.h"
#include "ir/graph_edit.h"
#include "passes/pipeline.h"

namespace opfuse::testing {

inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::string Example(const std::string& name) {
  return ReadFile(std::string(OPFUSE_SOURCE_DIR) + "/examples/graphs/" + name);
}

// True when the group graph (an edge per value crossing groups) is acyclic.
inline bool GroupsAcyclic(const Graph& g) {
  std::vector<int> owner(g.nodes.size(), -1);
  for (size_t i = 0; i < g.groups.size(); ++i)
    for (int n : g.groups[i].nodes) owner[n] = static_cast<int>(i);
  const size_t ng = g.groups.size();
  std::vector<std::set<int>> succ(ng);
  std::vector<int> indeg(ng, 0);
  for (size_t n = 0; n < g.nodes.size(); ++n)
    for (int v : g.nodes[n].inputs) {
      int p = g.values[v].kind == ValueKind::kNode ? g.values[v].producer : -1;
      if (p < 0 || owner[p] == owner[n]) continue;
      if (succ[owner[p]].insert(owner[n]).second) ++indeg[owner[n]];
    }
  std::vector<int> ready;
  for (size_t i = 0; i < ng; ++i)
    if (!indeg[i]) ready.push_back(static_cast<int>(i));
  size_t seen = 0;
  while (!ready.empty()) {
    int x = ready.back();
    ready.pop_back();
    ++seen;
    for (int s : succ[x])
      if (--indeg[s] == 0) ready.push_back(s);
  }
  return seen == ng;
}

struct PipelineRun {
  Graph g;
  Graph original;
  PassContext ctx;
  std::vector<std::string> passes_seen;

  // Comma-joined op names of a group ("silu,mul"); constants left out.
  std::string Ops(const FusionGroup& grp) const {
    std::string s;
    for (const auto& o : fusion::GroupOpNames(g, grp.nodes)) s += (s.empty() ? "" : ",") + o;
    return s;
  }
  std::vector<const FusionGroup*> Kind(const std::string& kind) const {
    std::vector<const FusionGroup*> out;
    for (const auto& grp : g.groups)
      if (grp.kind == kind) out.push_back(&grp);
    return out;
  }
  // The group holding the node that produces value `name`.
  const FusionGroup* GroupOf(const std::string& name) const {
    auto v = g.FindValue(name);
    if (!v || g.values[*v].producer < 0) return nullptr;
    for (const auto& grp : g.groups)
      for (int n : grp.nodes)
        if (n == g.values[*v].producer) return &grp;
    return nullptr;
  }
  int CountOp(OpKind op) const {
    int c = 0;
    for (const auto& n : g.nodes) c += n.op == op;
    return c;
  }
  bool HasNote(const std::string& needle) const {
    for (const auto& n : ctx.notes)
      if (n.ToString().find(needle) != std::string::npos) return true;
    return false;
  }
  std::string Notes() const {
    std::string s;
    for (const auto& n : ctx.notes) s += n.ToString() + "\n";
    return s;
  }
  std::string Dump() const { return PrintGraph(g) + Notes(); }
};

// `requested`, `jit_single_ops`: PassContext::variant / jit_single_ops (the executor's request).
inline PipelineRun RunText(const std::string& text, FusionConfig config = {}, Bindings bindings = {},
                           Variant requested = Variant::kAuto, bool jit_single_ops = false) {
  PipelineRun r;
  auto parsed = ParseGraph(text);
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  if (!parsed.ok()) return r;
  r.g = *parsed;
  r.original = *parsed;
  r.ctx.config = std::move(config);
  r.ctx.bindings = std::move(bindings);
  r.ctx.variant = requested;
  r.ctx.jit_single_ops = jit_single_ops;
  Status s = RunPipeline(r.g, r.ctx, [&](const std::string& pass, const Graph&) { r.passes_seen.push_back(pass); });
  EXPECT_TRUE(s.ok()) << s.ToString();
  Graph copy = r.g;
  EXPECT_TRUE(VerifyAndInfer(copy).ok()) << PrintGraph(r.g);
  Status part = CheckGroupPartition(r.g);
  EXPECT_TRUE(part.ok()) << part.ToString() << "\n" << PrintGraph(r.g);
  EXPECT_TRUE(GroupsAcyclic(r.g)) << PrintGraph(r.g);
  for (const auto& grp : r.g.groups) {
    EXPECT_FALSE(grp.decision.reason.empty()) << PrintGraph(r.g);
    EXPECT_NE(grp.variant, Variant::kAuto) << PrintGraph(r.g);
    EXPECT_FALSE(grp.name.empty()) << PrintGraph(r.g);
  }
  return r;
}

inline FusionConfig Disabled(std::initializer_list<const char*> names) {
  FusionConfig c;
  for (const char* n : names) c.disabled.insert(n);
  return c;
}

}  // namespace opfuse::testing
