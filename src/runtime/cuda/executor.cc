// CudaExecutable (executor.h): program building at Create, plans per (bindings, pointers), runs.
//
// Create() turns the pipelined graph into a flat list of Steps over "exec values" (the graph's
// values, plus scratch values for the primitives of composites run unfused). Steps are ordered by a
// topological sort of the fusion groups (a group is one unit; an unfused group expands into its
// nodes), so a fused kernel runs after everything it reads and before everything that reads it.
// A plan binds shapes, places intermediates in one arena (first-fit offsets over step lifetimes:
// the "plan memory" step of the pipeline) and resolves every launch.
#include "runtime/cuda/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "codegen/kernel_ir.h"
#include "jit/cuda_launcher.h"
#include "jit/jit_compiler.h"
#include "kernels/attention.h"
#include "kernels/gemv.h"
#include "kernels/library.h"
#include "ops/op_def.h"
#include "fusion/group_info.h"
#include "ops/collective.h"
#include "passes/decompose_node.h"
#include "passes/pipeline.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/cublaslt_matmul.h"
#include "runtime/cuda/stream.h"
#include "cuda/cuda_check.h"
#include "jit/background_compiler.h"

namespace opfuse::cuda {

namespace {

enum class StepKind { kLibrary, kJit, kMatmul, kGemvGroup, kAlias, kCopy };

struct ExecValue {
  std::string name;
  TensorType type;
  bool is_constant = false;
};

struct JitVariant {
  std::shared_ptr<const jit::LoadedKernel> loaded;
  Status status;  // why it could not be built (unaligned variant compiled lazily)
  bool tried = false;
};

struct Step {
  StepKind kind = StepKind::kLibrary;
  std::string name;
  Node node;                     // op + attrs; inputs/outputs are exec value ids
  std::vector<int> graph_nodes;  // nodes of graph_ it stands for
  // kJit
  std::shared_ptr<codegen::Kernel> kernel;
  JitVariant aligned, unaligned;
  std::vector<int> jit_inputs, jit_outputs;  // exec value ids in kernel order
  // kCopy: node.inputs[0] -> node.outputs[0] (output_index >= 0: into graph output slot)
  int output_index = -1;
  // kGemvGroup (fuse_matmul's groups): the group's MatmulGroupPlan as nodes (exec value ids). One
  // GEMV launch when it applies, else member by member: norm, matmuls, swiglu, ropes.
  std::optional<Node> norm;
  std::vector<Node> matmuls;               // GEMV segments in order (with swiglu: gate, up)
  std::vector<std::optional<Node>> ropes;  // parallel to matmuls
  std::optional<Node> swiglu;
  int64_t gemv_max_rows = kDecodeGemvMaxRows;  // the plan's: the most rows of the one GEMV launch
  // kLibrary kv_attention: no step of this executable writes pos or the caches, so the kernel may
  // read them before its PDL wait (kernels::LibraryPlanOptions::early_reads).
  bool early_reads = false;
  // Background compile (ExecutorOptions::background_compile): slot >= 0 guards the step by a
  // BackgroundSwaps slot; the JIT step (when_ready) runs once it holds a kernel, the group's
  // fallback steps (!when_ready) until then, and for good if the compile fails.
  int slot = -1;
  bool when_ready = false;
};

bool IsCompositeOp(OpKind op) { return GetOpInfo(op).kind == FusionKind::kComposite; }

// A stream-ordered device-to-device copy (an output slot filled from an alias, a world-1 collective).
KernelLaunch DeviceCopy(std::string name, void* dst, const void* src, size_t bytes) {
  return KernelLaunch::Custom(
      std::move(name),
      [dst, src, bytes](cudaStream_t s) {
        OPFUSE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
        return Status::Ok();
      },
      1);
}

int64_t Numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

StatusOr<MatmulType> MatmulTypeFor(DType t) {
  switch (t) {
    case DType::kF32: return MatmulType::kF32;
    case DType::kF16: return MatmulType::kF16;
    case DType::kBF16: return MatmulType::kBF16;
    default: return Unimplemented(fmt::format("matmul: no cuBLASLt path for {}", DTypeName(t)));
  }
}

}  // namespace

struct CudaExecutable::Impl {
  ExecutorOptions opts;
  DeviceInfo dev;
  jit::KernelCache* cache = nullptr;
  std::unique_ptr<jit::JitCompiler> jit;
  std::vector<ExecValue> values;
  std::vector<Step> steps;
  std::vector<int> input_values, output_values;  // exec ids in graph order
  std::vector<std::string> symbols;               // every symbol of every value, sorted
  std::map<int, DeviceBuffer> constants;          // exec value id -> device scalar
  std::vector<int> alias_root;                    // exec value id -> the value whose memory it uses
  std::vector<int> designated_output;             // exec value id -> graph output slot it is written to (-1)

  struct Arena {
    std::vector<std::vector<int64_t>> shapes;  // bound shape per exec value
    std::vector<int64_t> offsets;               // arena offset per exec value (-1: not in the arena)
    std::map<size_t, std::pair<int64_t, int64_t>> scratch;  // step -> (offset, bytes): attention split-K scratch
    // step -> (offset, count): attention arrival counters (u32), live for the whole run and zeroed
    // once when the arena is made (the kernels leave them at zero).
    std::map<size_t, std::pair<int64_t, int64_t>> counters;
    DeviceBuffer buffer;
  };
  struct Plan {
    std::shared_ptr<Arena> arena;
    std::vector<KernelLaunch> launches;
    int kernels = 0;
    int pdl_launches = 0;  // launches with the PDL attribute
    uint64_t last_used = 0;
    uint64_t generation = 0;  // BackgroundSwaps::generation() when built; stale once it moves on
    // Auto graph (ExecutorOptions::auto_graph), all under graph_mu but `graphable`.
    bool graphable = false;              // set by BuildPlan
    std::mutex graph_mu;
    cudaStream_t last_stream = nullptr;  // the stream of the timed eager Runs
    int eager_runs = 0;                  // on last_stream
    double best_eager_us = 0;            // the fastest timed eager Run's host µs (not the first)
    bool graph_off = false;              // decided against (too cheap) or capture failed: launches for good
    cudaGraphExec_t graph = nullptr;
    cudaStream_t graph_stream = nullptr;  // the stream it was captured on (its cuBLASLt workspace)
    ~Plan() {
      if (graph) cudaGraphExecDestroy(graph);  // an in-flight launch finishes first (CUDA frees it after)
    }
    // The launches in order, on `stream` (a Run without the auto graph).
    Status Launch(cudaStream_t stream) const {
      for (const auto& l : launches) OPFUSE_RETURN_IF_ERROR(l.Launch(stream));
      return Status::Ok();
    }
  };
  std::mutex mu;
  std::map<std::vector<int64_t>, std::shared_ptr<Arena>> arenas;  // key: symbol values
  std::map<std::vector<uintptr_t>, std::shared_ptr<Plan>> plans;  // key: symbol values + pointers
  uint64_t clock = 0;
  std::atomic<int> last_kernels{-1};
  std::atomic<int> last_pdl_launches{-1};
  std::atomic<int64_t> auto_graph_replays{0};
  std::atomic<int> auto_graphs{0};
  cudaStream_t capture_stream = nullptr;

  // Background compiles: one entry per group that runs its fallback while its JIT kernel compiles.
  struct Background {
    int group = -1;
    std::string name, fallback;  // group name; "library" | "unfused"
    int slot = -1;
  };
  std::vector<Background> background;
  std::map<int, std::string> broken_slots;  // slot -> why its compiled kernel could not be loaded (under mu)
  // Declared last: destroyed first, so no job outlives `jit` (its destructor cancels queued jobs
  // and waits for a running one).
  scheduler::BackgroundSwaps swaps;

  int AddValue(std::string name, TensorType type) {
    values.push_back({std::move(name), std::move(type)});
    return static_cast<int>(values.size()) - 1;
  }

  StatusOr<std::shared_ptr<const jit::LoadedKernel>> LoadJit(Step& st, bool aligned) {
    JitVariant& v = aligned ? st.aligned : st.unaligned;
    if (!v.tried) {
      v.tried = true;
      // A background-compiled step takes its aligned kernel from the slot (never compiles here).
      auto k = st.slot >= 0 && aligned ? (swaps.slot(st.slot).Get() ? StatusOr<jit::JitKernel>(*swaps.slot(st.slot).Get())
                                                                     : StatusOr<jit::JitKernel>(Internal("background compile not finished")))
                                       : jit->CompileKernel(*st.kernel, aligned);
      if (!k.ok()) {
        v.status = k.status();
      } else {
        auto l = jit::LoadedKernel::Load(*k);
        if (l.ok()) v.loaded = *l;
        else v.status = l.status();
      }
    }
    if (!v.loaded) return v.status;
    return v.loaded;
  }

  StatusOr<std::vector<int64_t>> SymbolKey(const Bindings& b) const {
    std::vector<int64_t> key;
    key.reserve(symbols.size());
    for (const auto& s : symbols) {
      auto it = b.find(s);
      if (it == b.end()) return InvalidArgument(fmt::format("unbound symbol '{}'", s));
      if (it->second < 0) return InvalidArgument(fmt::format("symbol '{}' bound to negative {}", s, it->second));
      key.push_back(it->second);
    }
    return key;
  }

  StatusOr<std::shared_ptr<Arena>> GetArena(const std::vector<int64_t>& key, const Bindings& b);
  StatusOr<std::shared_ptr<Plan>> GetPlan(const std::vector<const void*>& in, const std::vector<void*>& out,
                                          const Bindings& b);
  StatusOr<bool> RunAutoGraph(Plan& p, const std::string& graph_name, cudaStream_t stream);
  StatusOr<std::shared_ptr<Plan>> BuildPlan(const std::shared_ptr<Arena>& arena, const std::vector<const void*>& in,
                                            const std::vector<void*>& out, const Bindings& b);
};

// ------------------------------------------------------------------ Create

namespace {

// Kahn's algorithm over units (groups), preferring the earliest first node: units in order.
StatusOr<std::vector<int>> OrderGroups(const Graph& g) {
  const int ng = static_cast<int>(g.groups.size());
  std::vector<int> group_of(g.nodes.size(), -1);
  for (int i = 0; i < ng; ++i)
    for (int n : g.groups[i].nodes) group_of[n] = i;
  std::vector<std::set<int>> succ(ng);
  std::vector<int> indeg(ng, 0);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    if (g.nodes[n].dead) continue;
    if (group_of[n] < 0) return Internal(fmt::format("executor: node {} ({}) is in no group", n, OpName(g.nodes[n].op)));
    for (int v : g.nodes[n].inputs) {
      int p = g.values[v].producer;
      if (p < 0 || group_of[p] == group_of[n]) continue;
      if (succ[group_of[p]].insert(group_of[n]).second) indeg[group_of[n]]++;
    }
  }
  std::set<std::pair<int, int>> ready;  // (first node, group)
  for (int i = 0; i < ng; ++i)
    if (indeg[i] == 0) ready.insert({g.groups[i].nodes.front(), i});
  std::vector<int> order;
  while (!ready.empty()) {
    int gi = ready.begin()->second;
    ready.erase(ready.begin());
    order.push_back(gi);
    for (int s : succ[gi])
      if (--indeg[s] == 0) ready.insert({g.groups[s].nodes.front(), s});
  }
  if (static_cast<int>(order.size()) != ng) return Internal("executor: fusion groups form a cycle");
  return order;
}

}  // namespace

StatusOr<std::unique_ptr<CudaExecutable>> CudaExecutable::Create(const Graph& input, ExecutorOptions opts) {
  OPFUSE_ASSIGN_OR_RETURN(DeviceInfo dev, QueryDevice());
  std::unique_ptr<CudaExecutable> ex(new CudaExecutable());
  ex->device_ = dev;
  ex->impl_ = std::make_unique<Impl>();
  Impl& im = *ex->impl_;
  if (opts.variant == Variant::kUnfused) opts.config.enable_fusion = false;  // composites decompose in the pipeline
  // Collectives: a world > 1 needs the communicator of a group of that size (ExecutorOptions::comm).
  for (const Node& n : input.nodes)
    if (!n.dead && (n.op == OpKind::kAllReduce || n.op == OpKind::kAllGather))
      OPFUSE_RETURN_IF_ERROR(CheckCollectiveGroup(n, AttrInt(n.attrs, "world", 1), opts.comm ? opts.comm->world() : 0));
  if (opts.comm) opts.auto_graph = false;
  im.opts = opts;
  im.dev = dev;
  im.cache = opts.cache ? opts.cache : &jit::KernelCache::Global();
  im.jit = std::make_unique<jit::JitCompiler>(*im.cache, jit::JitOptions{opts.arch.empty() ? dev.arch : opts.arch, true,
                                                                         opts.jit_threads});

  ex->graph_ = input;
  Graph& g = ex->graph_;
  PassContext ctx;
  ctx.config = opts.config;
  ctx.bindings = opts.schedule_bindings;
  if (opts.variant == Variant::kAuto) ctx.profile = opts.profile;
  ctx.variant = opts.variant;
  ctx.jit_single_ops = opts.jit_single_ops && opts.variant == Variant::kJit;
  OPFUSE_RETURN_IF_ERROR(RunPipeline(g, ctx));

  for (const auto& v : g.values) im.AddValue(v.name, v.type);
  im.input_values = g.inputs;
  im.output_values = g.outputs;

  // Constants: computed once on the host (their CPU reference), uploaded, never in a plan.
  auto add_constant = [&](const Node& n, int value) -> Status {
    HostTensor h(im.values[value].type.dtype, {});
    OPFUSE_RETURN_IF_ERROR(GetOpDef(OpKind::kConstant).cpu(n, {}, {&h}));
    OPFUSE_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::Make(CachingAllocator::ForDevice(dev.ordinal), h.data.size()));
    OPFUSE_CUDA_CHECK(cudaMemcpy(buf.get(), h.data.data(), h.data.size(), cudaMemcpyHostToDevice));
    im.constants.emplace(value, std::move(buf));
    im.values[value].is_constant = true;
    return Status::Ok();
  };

  auto fallback = [&](const FusionGroup& grp, int gi, const std::string& from, const std::string& to, const Status& why,
                      bool loud) {
    std::string line = fmt::format("group {} {}: {} -> {}: {}", gi, grp.name, from, to, why.message());
    if (loud) std::fprintf(stderr, "opfuse: %s\n", line.c_str());
    ex->fallbacks_.push_back(std::move(line));
  };

  // One library-kernel step per node; composites without a library kernel path are decomposed.
  std::function<Status(const Node&, const std::vector<int>&)> add_node_steps;
  add_node_steps = [&](const Node& n, const std::vector<int>& graph_nodes) -> Status {
    Step st;
    st.node = n;
    st.graph_nodes = graph_nodes;
    switch (n.op) {
      case OpKind::kConstant:
        return add_constant(n, n.outputs[0]);
      case OpKind::kMatmul:
        st.kind = StepKind::kMatmul;
        st.name = "cublaslt:matmul";
        break;
      case OpKind::kReshape:
        st.kind = StepKind::kAlias;
        st.name = "alias:reshape";
        break;
      default:
        st.kind = StepKind::kLibrary;
        st.name = fmt::format("lib:{}", OpName(n.op));
        break;
    }
    im.steps.push_back(std::move(st));
    return Status::Ok();
  };

  // A composite run op by op: its decomposition in a scratch graph (DecomposeNode, host-tested),
  // mapped onto exec values: the scratch graph's inputs/outputs by position, the rest new values.
  auto add_decomposed = [&](const Node& n, const std::vector<int>& graph_nodes) -> Status {
    OPFUSE_ASSIGN_OR_RETURN(NodeDecomposition d, DecomposeNode(n, [&](int v) {
                              return std::pair<std::string, TensorType>(im.values[v].name, im.values[v].type);
                            }));
    const Graph& sub = d.graph;
    std::vector<int> map(sub.values.size(), -1);
    for (size_t i = 0; i < d.inputs.size(); ++i) map[sub.inputs[i]] = d.inputs[i];
    for (size_t i = 0; i < sub.outputs.size(); ++i) map[sub.outputs[i]] = n.outputs[i];
    for (size_t v = 0; v < sub.values.size(); ++v)
      if (map[v] < 0) map[v] = im.AddValue(fmt::format("{}.{}", im.values[n.outputs[0]].name, sub.values[v].name), sub.values[v].type);
    for (const Node& sn : sub.nodes) {
      if (sn.dead) continue;
      Node m = sn;
      for (int& v : m.inputs) v = map[v];
      for (int& v : m.outputs) v = map[v];
      OPFUSE_RETURN_IF_ERROR(add_node_steps(m, graph_nodes));
    }
    return Status::Ok();
  };

  auto add_unfused = [&](const FusionGroup& grp) -> Status {
    for (int n : grp.nodes) {
      const Node& node = g.nodes[n];
      if (IsCompositeOp(node.op) && GetOpDef(node.op).decompose) {
        Status st = add_decomposed(node, {n});
        if (st.ok()) continue;
        if (!kernels::HasLibraryKernel(node.op)) return st;
        // e.g. causal softmax has no primitive form: its library kernel is the op-by-op path.
      }
      OPFUSE_RETURN_IF_ERROR(add_node_steps(node, {n}));
    }
    return Status::Ok();
  };

  auto make_jit_step = [&](const codegen::Kernel& k, const std::vector<int>& nodes, const std::string& name) {
    Step st;
    st.kind = StepKind::kJit;
    st.name = name.empty() ? k.name : name;
    st.graph_nodes = nodes;
    st.kernel = std::make_shared<codegen::Kernel>(k);
    for (const auto& t : k.inputs) st.jit_inputs.push_back(t.graph_value);
    for (const auto& o : k.outputs) st.jit_outputs.push_back(o.tensor.graph_value);
    for (int v : st.jit_inputs) st.node.inputs.push_back(v);
    for (int v : st.jit_outputs) st.node.outputs.push_back(v);
    return st;
  };

  OPFUSE_ASSIGN_OR_RETURN(std::vector<int> order, OrderGroups(g));

  // 1. How each group runs: the schedule pass resolved its variant (FusionGroup::variant, with a
  //    substitution noted where a requested variant does not apply). Groups that run the JIT get
  //    their kernel IR built here; one the JIT cannot lower falls back (loudly for a fused group).
  enum class GroupPlan { kUnfused, kLibraryNodes, kLibraryFused, kJit };
  std::vector<GroupPlan> want(g.groups.size(), GroupPlan::kUnfused);
  // What runs where the JIT does not: the group's library kernel, else op by op.
  auto without_jit = [&](int gi) {
    const FusionGroup& grp = g.groups[gi];
    if (!grp.decision.fuse) return ctx.choices[gi].variant == Variant::kLibrary ? GroupPlan::kLibraryNodes : GroupPlan::kUnfused;
    return fusion::HasFusedLibraryKernel(g, grp) ? GroupPlan::kLibraryFused : GroupPlan::kUnfused;
  };
  auto plan_name = [](GroupPlan p) { return p == GroupPlan::kLibraryFused || p == GroupPlan::kLibraryNodes ? "library" : "unfused"; };
  // The JIT kernel cannot be built or loaded: the group runs without it, and says why.
  auto fall_back_from_jit = [&](int gi, const Status& why, bool loud) {
    FusionGroup& grp = g.groups[gi];
    want[gi] = without_jit(gi);
    fallback(grp, gi, "jit", plan_name(want[gi]), why, loud);
    grp.variant = want[gi] == GroupPlan::kUnfused ? Variant::kUnfused : Variant::kLibrary;
  };
  std::map<int, codegen::Kernel> kernels_ir;
  for (int gi : order) {
    FusionGroup& grp = g.groups[gi];
    if (const std::string& sub = ctx.choices[gi].substitution; !sub.empty()) {
      std::string line = fmt::format("group {} {}: {}", gi, grp.name, sub);
      ex->fallbacks_.push_back(std::move(line));
    }
    switch (grp.variant) {
      case Variant::kJit: {
        auto k = grp.decision.fuse ? codegen::BuildKernel(g, grp) : codegen::BuildKernel(g, grp.nodes);
        if (k.ok()) {
          kernels_ir.emplace(gi, std::move(*k));
          want[gi] = GroupPlan::kJit;
        } else {
          fall_back_from_jit(gi, k.status(), grp.decision.fuse);
        }
        break;
      }
      case Variant::kLibrary:
        want[gi] = grp.decision.fuse ? GroupPlan::kLibraryFused : GroupPlan::kLibraryNodes;
        break;
      case Variant::kUnfused:
      case Variant::kAuto:
        want[gi] = GroupPlan::kUnfused;
        break;
    }
  }

  // 2. JIT: compile in parallel (NVRTC is thread-safe per program; the cache coalesces duplicates),
  //    then load. A kernel that fails falls back like a group the JIT cannot lower — loudly.
  auto t0 = std::chrono::steady_clock::now();
  // background_compile: a kernel not in the cache (the key CompileKernel would use) is not compiled
  // here; the group gets its fallback steps and a JIT step guarded by a slot the worker fills.
  std::map<int, int> bg_slot;  // group -> BackgroundSwaps slot
  if (opts.background_compile) {
    for (const auto& [gi, k] : kernels_ir) {
      auto key = im.jit->KeyForKernel(k, true);
      if (!key.ok() || im.cache->Contains(*key)) continue;  // cached (or not emittable: step 2 reports it)
      const FusionGroup& grp = g.groups[gi];
      want[gi] = without_jit(gi);
      auto kernel = std::make_shared<const codegen::Kernel>(k);
      const jit::JitCompiler* jc = im.jit.get();
      const std::string name = fmt::format("{} ({})", k.name, key->Digest().substr(0, 16));
      const int slot = im.swaps.Add(name, [jc, kernel, name, hook = opts.before_background_compile] {
        if (hook) hook(name);
        return jc->CompileKernel(*kernel, /*aligned=*/true);
      });
      bg_slot[gi] = slot;
      im.background.push_back({gi, grp.name, plan_name(want[gi]), slot});
    }
  }
  std::vector<int> todo;
  for (const auto& [gi, k] : kernels_ir)
    if (!bg_slot.count(gi)) todo.push_back(gi);
  std::map<int, std::shared_ptr<const jit::LoadedKernel>> loaded;
  {
    std::vector<StatusOr<jit::JitKernel>> compiled(todo.size(), Status(StatusCode::kInternal, "not compiled"));
    std::atomic<size_t> next{0};
    auto worker = [&] {
      for (size_t i = next++; i < todo.size(); i = next++) compiled[i] = im.jit->CompileKernel(kernels_ir.at(todo[i]), true);
    };
    int nthreads = opts.jit_threads > 0 ? opts.jit_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    nthreads = std::min<int>(nthreads, static_cast<int>(todo.size()));
    std::vector<std::thread> pool;
    for (int t = 1; t < nthreads; ++t) pool.emplace_back(worker);
    if (!todo.empty()) worker();
    for (auto& t : pool) t.join();
    for (size_t i = 0; i < todo.size(); ++i) {
      const int gi = todo[i];
      Status why = compiled[i].status();
      if (compiled[i].ok()) {
        auto l = jit::LoadedKernel::Load(*compiled[i]);
        if (l.ok()) {
          loaded[gi] = *l;
          continue;
        }
        why = l.status();
      }
      fall_back_from_jit(gi, why, true);
    }
  }
  ex->compile_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  // 3. Steps, group by group in dependency order. A background group: its JIT step first, then its
  //    fallback's steps (so an output the fallback ends in an alias still gets its copy step).
  for (int gi : order) {
    FusionGroup& grp = g.groups[gi];
    const auto bg = bg_slot.find(gi);
    if (bg != bg_slot.end()) {
      Step st = make_jit_step(kernels_ir.at(gi), grp.nodes, grp.name);
      st.slot = bg->second;
      st.when_ready = true;
      im.steps.push_back(std::move(st));
    }
    const size_t fallback_from = im.steps.size();
    switch (want[gi]) {
      case GroupPlan::kJit: {
        Step st = make_jit_step(kernels_ir.at(gi), grp.nodes, grp.name);
        st.aligned.tried = true;
        st.aligned.loaded = loaded.at(gi);
        im.steps.push_back(std::move(st));
        break;
      }
      case GroupPlan::kLibraryFused:
        if (grp.matmul) {
          // fuse_matmul's plan, as the GEMV consumes it; the reshapes before its ropes stay views
          // (alias steps after the group's step).
          const MatmulGroupPlan& mp = *grp.matmul;
          Step st;
          st.kind = StepKind::kGemvGroup;
          st.name = "gemv:" + grp.name;
          st.graph_nodes = grp.nodes;
          if (mp.norm >= 0) st.norm = g.nodes[mp.norm];
          for (size_t i = 0; i < mp.matmuls.size(); ++i) {
            st.matmuls.push_back(g.nodes[mp.matmuls[i]]);
            st.ropes.push_back(i < mp.ropes.size() && mp.ropes[i] >= 0 ? std::optional<Node>(g.nodes[mp.ropes[i]]) : std::nullopt);
          }
          if (mp.swiglu >= 0) st.swiglu = g.nodes[mp.swiglu];
          st.gemv_max_rows = mp.gemv_max_rows;
          std::set<int> seen_in;
          auto add_io = [&](const Node& m) {
            for (int v : m.inputs)
              if (seen_in.insert(v).second && std::find(st.node.outputs.begin(), st.node.outputs.end(), v) == st.node.outputs.end())
                st.node.inputs.push_back(v);
            for (int v : m.outputs) st.node.outputs.push_back(v);
          };
          if (st.norm) add_io(*st.norm);
          for (const Node& m : st.matmuls) add_io(m);
          if (st.swiglu) add_io(*st.swiglu);
          for (const auto& r : st.ropes)
            if (r) add_io(*r);
          st.node.op = OpKind::kMatmul;
          im.steps.push_back(std::move(st));
          for (int n : mp.views) OPFUSE_RETURN_IF_ERROR(add_node_steps(g.nodes[n], {n}));
          break;
        }
        if (fusion::IsCollectiveGroup(grp)) {
          // fuse_collective: the all_reduce and the add_rms_norm it feeds, one step; planned as one
          // launch where the communicator takes it, else the two (plan_collective).
          const Node &ar = g.nodes[grp.nodes[0]], &nm = g.nodes[grp.nodes[1]];
          Step st;
          st.kind = StepKind::kLibrary;
          st.name = "comm:" + grp.name;
          st.graph_nodes = grp.nodes;
          st.node = ar;  // inputs {x, residual, weight}, outputs {all-reduced x, y, sum}
          st.node.inputs = {ar.inputs[0], nm.inputs[0] == ar.outputs[0] ? nm.inputs[1] : nm.inputs[0], nm.inputs[2]};
          st.node.outputs = {ar.outputs[0], nm.outputs[0], nm.outputs[1]};
          st.norm = nm;
          im.steps.push_back(std::move(st));
          break;
        }
        OPFUSE_RETURN_IF_ERROR(add_node_steps(g.nodes[grp.nodes[0]], grp.nodes));
        im.steps.back().name = "lib:" + grp.name;
        break;
      case GroupPlan::kLibraryNodes:
        for (int n : grp.nodes) OPFUSE_RETURN_IF_ERROR(add_node_steps(g.nodes[n], {n}));
        break;
      case GroupPlan::kUnfused:
        OPFUSE_RETURN_IF_ERROR(add_unfused(grp));
        break;
    }
    if (bg != bg_slot.end()) {
      for (size_t i = fallback_from; i < im.steps.size(); ++i) im.steps[i].slot = bg->second;
      // grp.variant stays kJit: what runs once compiled; fallbacks() says while it is pending
    }
  }

  // Value roots (reshape aliases), designated outputs, and final copies into output slots.
  im.alias_root.resize(im.values.size());
  for (size_t v = 0; v < im.values.size(); ++v) im.alias_root[v] = static_cast<int>(v);
  std::vector<char> produced(im.values.size(), 0);
  std::vector<int> producer_step(im.values.size(), -1);
  for (size_t s = 0; s < im.steps.size(); ++s)
    for (int v : im.steps[s].node.outputs) {
      produced[v] = 1;
      producer_step[v] = static_cast<int>(s);
    }
  im.designated_output.assign(im.values.size(), -1);
  for (size_t j = 0; j < im.output_values.size(); ++j) {
    int v = im.output_values[j];
    const bool writes = produced[v] && im.steps[producer_step[v]].kind != StepKind::kAlias;
    if (writes && im.designated_output[v] < 0) {
      im.designated_output[v] = static_cast<int>(j);
      continue;
    }
    Step st;
    st.kind = StepKind::kCopy;
    st.name = "copy:output";
    st.node.op = OpKind::kReshape;
    st.node.inputs = {v};
    st.output_index = static_cast<int>(j);
    im.steps.push_back(std::move(st));
  }
  // Constants a JIT kernel inlined may still be read by other steps or be outputs: materialise those.
  for (const Node& n : g.nodes) {
    if (n.dead || n.op != OpKind::kConstant || im.constants.count(n.outputs[0])) continue;
    bool used = false;
    for (const Step& st : im.steps)
      used |= std::find(st.node.inputs.begin(), st.node.inputs.end(), n.outputs[0]) != st.node.inputs.end();
    if (used) OPFUSE_RETURN_IF_ERROR(add_constant(n, n.outputs[0]));
  }
  for (const Step& st : im.steps)
    if (st.kind == StepKind::kAlias) im.alias_root[st.node.outputs[0]] = im.alias_root[st.node.inputs[0]];
  // kv_attention may read pos and the cache rows below it before its PDL wait when no step of this
  // executable writes them: pos is not computed here and no other step takes either cache.
  for (Step& st : im.steps) {
    if (st.kind != StepKind::kLibrary || st.node.op != OpKind::kKvAttention || st.node.inputs.size() < 6) continue;
    const int kc = im.alias_root[st.node.inputs[3]], vc = im.alias_root[st.node.inputs[4]];
    bool stable = !produced[im.alias_root[st.node.inputs[5]]] && !produced[kc] && !produced[vc];
    for (const Step& o : im.steps) {
      if (&o == &st) continue;
      for (int v : o.node.inputs) stable = stable && im.alias_root[v] != kc && im.alias_root[v] != vc;
      for (int v : o.node.outputs) stable = stable && im.alias_root[v] != kc && im.alias_root[v] != vc;
    }
    st.early_reads = stable;
  }

  std::set<std::string> syms;
  for (const auto& v : im.values)
    for (const auto& d : v.type.shape)
      if (!d.is_static()) syms.insert(d.sym);
  im.symbols.assign(syms.begin(), syms.end());

  for (const Step& st : im.steps) {
    const char* kind = st.kind == StepKind::kJit       ? "jit"
                       : st.kind == StepKind::kMatmul  ? "matmul"
                       : st.kind == StepKind::kGemvGroup ? "gemv"
                       : st.kind == StepKind::kAlias   ? "alias"
                       : st.kind == StepKind::kCopy    ? "copy"
                                                       : "library";
    ex->steps_.push_back({st.name, kind, st.graph_nodes, st.slot < 0 ? "" : st.when_ready ? "background_jit" : "fallback"});
  }
  OPFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&im.capture_stream, cudaStreamNonBlocking));
  return ex;
}

CudaExecutable::~CudaExecutable() {
  if (impl_) (void)DestroyStream(impl_->capture_stream);
}

// ------------------------------------------------------------------ plans

StatusOr<std::shared_ptr<CudaExecutable::Impl::Arena>> CudaExecutable::Impl::GetArena(const std::vector<int64_t>& key,
                                                                                      const Bindings& b) {
  auto it = arenas.find(key);
  if (it != arenas.end()) return it->second;
  auto arena = std::make_shared<Arena>();
  const size_t nv = values.size();
  arena->shapes.resize(nv);
  for (size_t v = 0; v < nv; ++v) {
    auto s = BindShape(values[v].type.shape, b);
    if (!s.ok()) return s.status();
    arena->shapes[v] = *s;
  }
  // Lifetimes of arena values, in step indices (aliases extend their root's).
  std::vector<int> def(nv, -1), last(nv, -1);
  std::vector<char> external(nv, 0);
  for (int v : input_values) external[v] = 1;
  for (const auto& [v, buf] : constants) external[v] = 1;
  for (size_t v = 0; v < nv; ++v)
    if (designated_output[v] >= 0) external[v] = 1;
  for (size_t s = 0; s < steps.size(); ++s) {
    for (int v : steps[s].node.inputs) last[alias_root[v]] = static_cast<int>(s);
    for (int v : steps[s].node.outputs) {
      int r = alias_root[v];
      if (def[r] < 0) def[r] = static_cast<int>(s);
      last[r] = std::max(last[r], static_cast<int>(s));
    }
  }
  arena->offsets.assign(nv, -1);
  struct Live {
    int64_t off, size;
    int def, last;
  };
  std::vector<Live> placed;
  int64_t total = 0;
  // First fit: the lowest offset whose bytes no overlapping lifetime uses.
  auto place = [&](int64_t bytes, int from, int to) {
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (const auto& l : placed)
      if (!(l.last < from || l.def > to)) busy.push_back({l.off, l.size});
    std::sort(busy.begin(), busy.end());
    int64_t off = 0;
    for (const auto& [bo, bs] : busy) {
      if (off + bytes <= bo) break;
      off = std::max(off, bo + bs);
    }
    placed.push_back({off, bytes, from, to});
    total = std::max(total, off + bytes);
    return off;
  };
  for (size_t s = 0; s < steps.size(); ++s) {
    const Step& st = steps[s];
    // all_gather along an axis with dims before it: NCCL gathers rank-major, the step then
    // interleaves the ranks' chunks from this scratch into the output.
    if (st.kind == StepKind::kLibrary && st.node.op == OpKind::kAllGather && AttrInt(st.node.attrs, "world", 1) > 1 &&
        GatherOuter(st.node, arena->shapes[st.node.inputs[0]]) > 1) {
      const int v = st.node.outputs[0];
      const int64_t bytes = Numel(arena->shapes[v]) * DTypeSize(values[v].type.dtype);
      arena->scratch[s] = {place((bytes + 255) / 256 * 256, static_cast<int>(s), static_cast<int>(s)), bytes};
    }
    if (st.kind == StepKind::kLibrary && (st.node.op == OpKind::kAttention || st.node.op == OpKind::kKvAttention)) {
      std::vector<kernels::TensorRef> ins;
      for (int v : st.node.inputs) ins.push_back({nullptr, values[v].type.dtype, arena->shapes[v]});
      const kernels::AttentionScratch need = kernels::AttentionScratchFor(st.node, ins, dev);
      const size_t bytes = need.bytes;
      if (bytes > 0) {
        const int64_t rounded = static_cast<int64_t>((bytes + 255) / 256 * 256);
        arena->scratch[s] = {place(rounded, static_cast<int>(s), static_cast<int>(s)), static_cast<int64_t>(bytes)};
        const size_t count = need.counters;
        if (count > 0) {
          const int64_t cbytes = static_cast<int64_t>((count * sizeof(unsigned) + 255) / 256 * 256);
          arena->counters[s] = {place(cbytes, 0, static_cast<int>(steps.size())), static_cast<int64_t>(count)};
        }
      }
    }
    for (int v : steps[s].node.outputs) {
      if (alias_root[v] != v || external[v] || arena->offsets[v] >= 0 || def[v] != static_cast<int>(s)) continue;
      const int64_t bytes = (Numel(arena->shapes[v]) * DTypeSize(values[v].type.dtype) + 255) / 256 * 256;
      arena->offsets[v] = place(bytes, def[v], last[v]);
    }
  }
  if (total > 0) {
    OPFUSE_ASSIGN_OR_RETURN(arena->buffer, DeviceBuffer::Make(CachingAllocator::ForDevice(dev.ordinal), static_cast<size_t>(total)));
    for (const auto& [s, c] : arena->counters)
      OPFUSE_CUDA_CHECK(cudaMemset(static_cast<char*>(arena->buffer.get()) + c.first, 0, static_cast<size_t>(c.second) * sizeof(unsigned)));
    // The memsets ran on the legacy stream; the runs may use any stream: done before the first run.
    if (!arena->counters.empty()) OPFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  arenas.emplace(key, arena);
  return arena;
}

StatusOr<std::shared_ptr<CudaExecutable::Impl::Plan>> CudaExecutable::Impl::BuildPlan(
    const std::shared_ptr<Arena>& arena, const std::vector<const void*>& in, const std::vector<void*>& out,
    const Bindings& b) {
  const size_t nv = values.size();
  std::vector<void*> ptr(nv, nullptr);
  for (size_t i = 0; i < input_values.size(); ++i) ptr[input_values[i]] = const_cast<void*>(in[i]);
  for (const auto& [v, buf] : constants) ptr[v] = buf.get();
  for (size_t v = 0; v < nv; ++v) {
    if (designated_output[v] >= 0) ptr[v] = out[designated_output[v]];
    else if (arena->offsets[v] >= 0) ptr[v] = static_cast<char*>(arena->buffer.get()) + arena->offsets[v];
  }
  auto resolve = [&](int v) { return ptr[alias_root[v]]; };
  auto ref = [&](int v) {
    return kernels::TensorRef{resolve(v), values[v].type.dtype, arena->shapes[v]};
  };

  auto plan = std::make_shared<Plan>();
  plan->arena = arena;
  const bool use_gemv = opts.gemv && !opts.config.IsDisabled("gemv");
  // A matmul node: the GEMV at decode sizes (bf16/f16, rows <= kDecodeGemvMaxRows, transpose_b), else
  // cuBLASLt; `gemv_ok` false: cuBLASLt (a fuse_matmul group above its GEMV rows: MatmulGroupPlan).
  auto plan_matmul = [&](const Node& n, bool gemv_ok = true) -> Status {
    const auto& as = arena->shapes[n.inputs[0]];
    const auto& bs = arena->shapes[n.inputs[1]];
    MatmulArgs a;
    OPFUSE_ASSIGN_OR_RETURN(a.type, MatmulTypeFor(values[n.inputs[0]].type.dtype));
    a.transpose_b = AttrInt(n.attrs, "transpose_b", 0) != 0;
    a.k = as.back();
    a.m = a.k ? Numel(as) / a.k : 0;
    a.n = a.transpose_b ? bs[0] : bs[1];
    a.a = resolve(n.inputs[0]);
    a.b = resolve(n.inputs[1]);
    a.bias = n.inputs.size() > 2 ? resolve(n.inputs[2]) : nullptr;
    a.c = resolve(n.outputs[0]);
    if (a.m == 0 || a.n == 0) return Status::Ok();
    if (use_gemv && gemv_ok && a.transpose_b && a.m <= kDecodeGemvMaxRows) {
      kernels::GemvArgs ga;
      ga.tuning = opts.gemv_tuning;
      ga.dtype = values[n.inputs[0]].type.dtype;
      ga.m = a.m;
      ga.k = a.k;
      ga.a = a.a;
      ga.segments.push_back({a.b, a.bias, a.c, a.n});
      if (kernels::GemvSupported(ga).ok()) {
        OPFUSE_ASSIGN_OR_RETURN(KernelLaunch l, kernels::PlanGemv(ga, dev));
        plan->launches.push_back(std::move(l));
        return Status::Ok();
      }
    }
    OPFUSE_ASSIGN_OR_RETURN(MatmulEngine * eng, MatmulEngine::ForCurrentDevice());
    plan->launches.push_back(KernelLaunch::Custom(fmt::format("cublaslt:matmul_{}x{}x{}", a.m, a.n, a.k),
                                                  [eng, a](cudaStream_t s) { return eng->Matmul(a, s); }, 1));
    return Status::Ok();
  };
  // A collective: through the communicator (world > 1), a copy at world 1. all_gather with dims
  // before its axis gathers rank-major into the step's scratch, then one 2-d copy per rank puts
  // each rank's chunks in place ([outer, world, chunk]).
  // One node of a group on its library kernel (a GEMV group's members above the GEMV's rows,
  // a collective group's add_rms_norm after the all-reduce).
  auto plan_member = [&](const Step& st, const Node& m) -> Status {
    std::vector<kernels::TensorRef> ins, outs;
    for (int v : m.inputs) ins.push_back(ref(v));
    for (int v : m.outputs) outs.push_back(ref(v));
    auto l = kernels::PlanLibraryNode(m, ins, outs, dev);
    if (!l.ok()) return Status(l.status().code(), fmt::format("{}: {}", st.name, l.status().message()));
    for (auto& x : *l) plan->launches.push_back(std::move(x));
    return Status::Ok();
  };
  auto plan_collective = [&](const Step& st, size_t si) -> Status {
    const Node& n = st.node;
    const int in = n.inputs[0], o = n.outputs[0];
    const void* src = resolve(in);
    void* dst = resolve(o);
    const DType dt = values[in].type.dtype;
    const int64_t count = Numel(arena->shapes[in]);
    const int64_t world = AttrInt(n.attrs, "world", 1);
    if (count == 0) return Status::Ok();
    // The add_rms_norm of fuse_collective's group on its library kernel, after the all-reduce.
    auto plan_norm = [&]() { return st.norm ? plan_member(st, *st.norm) : Status::Ok(); };
    if (world == 1) {
      plan->launches.push_back(DeviceCopy(st.name, dst, src, static_cast<size_t>(count * DTypeSize(dt))));
      return plan_norm();
    }
    DeviceCommunicator* comm = opts.comm;
    if (n.op == OpKind::kAllReduce && st.norm) {  // fuse_collective's group (the step built above)
      const int64_t cols = arena->shapes[o].empty() ? 1 : arena->shapes[o].back();
      const int64_t rows = cols > 0 ? count / cols : 0;
      const void* residual = resolve(n.inputs[1]);
      const void* weight = resolve(n.inputs[2]);
      void* y = resolve(n.outputs[1]);
      void* sum = resolve(n.outputs[2]);
      const double eps = AttrFloat(st.norm->attrs, "eps", 1e-6);
      if (comm->FusedAddRmsNormSupported(rows, cols, dt)) {
        plan->launches.push_back(KernelLaunch::Custom(
            fmt::format("comm:all_reduce_add_rms_norm_{}x{}", rows, cols),
            [comm, src, residual, weight, sum, y, rows, cols, eps, dt](cudaStream_t s) {
              return comm->AllReduceAddRmsNorm(src, residual, weight, sum, y, rows, cols, eps, dt, s);
            }));
        return Status::Ok();
      }
    }
    if (n.op == OpKind::kAllReduce) {
      plan->launches.push_back(KernelLaunch::Custom(fmt::format("comm:all_reduce_{}", count), [comm, src, dst, count, dt](cudaStream_t s) {
        return comm->AllReduceSum(src, dst, count, dt, s);
      }));
      return plan_norm();
    }
    const int64_t outer = GatherOuter(n, arena->shapes[in]);
    auto sc = arena->scratch.find(si);
    void* gathered = outer > 1 && sc != arena->scratch.end() ? static_cast<char*>(arena->buffer.get()) + sc->second.first : dst;
    plan->launches.push_back(KernelLaunch::Custom(fmt::format("comm:all_gather_{}", count), [comm, src, gathered, count, dt](cudaStream_t s) {
      return comm->AllGather(src, gathered, count, dt, s);
    }));
    if (gathered != dst) {
      const size_t chunk = static_cast<size_t>(count / outer * DTypeSize(dt));
      const size_t rank_bytes = static_cast<size_t>(count * DTypeSize(dt));
      plan->launches.push_back(KernelLaunch::Custom(
          "copy:all_gather_interleave",
          [dst, gathered, chunk, rank_bytes, outer, world](cudaStream_t s) {
            for (int64_t r = 0; r < world; ++r)
              OPFUSE_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(dst) + r * chunk, chunk * world,
                                                  static_cast<const char*>(gathered) + r * rank_bytes, chunk, chunk,
                                                  static_cast<size_t>(outer), cudaMemcpyDeviceToDevice, s));
            return Status::Ok();
          },
          static_cast<int>(world)));
    }
    return Status::Ok();
  };
  // Background compiles: which guarded steps run is decided here, once per plan (the generation is
  // read first, so a compile finishing meanwhile makes this plan stale rather than wrong).
  plan->generation = swaps.generation();
  std::vector<char> use_jit(static_cast<size_t>(swaps.size()), 0);
  for (int i = 0; i < swaps.size(); ++i) use_jit[i] = swaps.ready(i) && !broken_slots.count(i);
  for (Step& st : steps) {
    if (st.slot < 0 || !st.when_ready || !use_jit[st.slot]) continue;
    auto l = LoadJit(st, /*aligned=*/true);
    if (l.ok()) continue;
    use_jit[st.slot] = 0;  // keep the fallback, loudly
    broken_slots.emplace(st.slot, l.status().message());
    std::fprintf(stderr, "opfuse: %s: the background-compiled kernel could not be loaded (the fallback keeps running): %s\n",
                 st.name.c_str(), l.status().ToString().c_str());
  }
  for (Step& st : steps) {
    if (st.slot >= 0 && st.when_ready != static_cast<bool>(use_jit[st.slot])) continue;
    switch (st.kind) {
      case StepKind::kAlias:
        break;
      case StepKind::kCopy: {
        int src = st.node.inputs[0];
        void* dst = out[st.output_index];
        const void* from = resolve(src);
        const size_t bytes = static_cast<size_t>(Numel(arena->shapes[src]) * DTypeSize(values[src].type.dtype));
        if (bytes == 0) break;
        plan->launches.push_back(DeviceCopy(st.name, dst, from, bytes));
        break;
      }
      case StepKind::kMatmul:
        OPFUSE_RETURN_IF_ERROR(plan_matmul(st.node));
        break;
      case StepKind::kGemvGroup: {
        // One GEMV launch over the plan's matmuls (+ the norm prologue, + the swiglu or rope epilogues) when it applies.
        const Node* norm = st.norm ? &*st.norm : nullptr;
        const Node& first = st.matmuls.front();
        const auto& as = arena->shapes[first.inputs[0]];
        kernels::GemvArgs ga;
        ga.tuning = opts.gemv_tuning;
        ga.dtype = values[first.inputs[0]].type.dtype;
        ga.k = as.back();
        ga.m = ga.k ? Numel(as) / ga.k : 0;
        ga.a = resolve(first.inputs[0]);
        ga.epilogue = st.swiglu ? kernels::GemvEpilogue::kSwiglu : kernels::GemvEpilogue::kNone;
        if (norm) {
          const bool add = norm->op == OpKind::kAddRmsNorm;
          ga.norm.kind = add ? kernels::GemvNormKind::kAddRms : kernels::GemvNormKind::kRms;
          ga.norm.x = resolve(norm->inputs[0]);
          ga.norm.eps = AttrFloat(norm->attrs, "eps", 1e-6);
          if (add) {
            ga.norm.res = resolve(norm->inputs[1]);
            ga.norm.weight = resolve(norm->inputs[2]);
            ga.norm.sum_out = resolve(norm->outputs[1]);
          } else if (norm->inputs.size() > 1) {
            ga.norm.weight = resolve(norm->inputs[1]);
          }
        }
        Status ok = Status::Ok();
        for (size_t i = 0; i < st.matmuls.size(); ++i) {
          const Node& m = st.matmuls[i];
          kernels::GemvSegment seg{resolve(m.inputs[1]), m.inputs.size() > 2 ? resolve(m.inputs[2]) : nullptr,
                                   resolve(m.outputs[0]), arena->shapes[m.inputs[1]][0]};
          if (const auto& r = st.ropes[i]) {  // its rope epilogue: the rope reads a view of this output
            const auto& xs = arena->shapes[r->inputs[0]];
            const int64_t hd = xs.empty() ? 0 : xs.back();
            for (int t : {r->inputs[1], r->inputs[2]}) {  // cos/sin rows must be the GEMV rows: [m, head_dim] elements
              if (Numel(arena->shapes[t]) != ga.m * hd || values[t].type.dtype != ga.dtype)
                ok = Unimplemented("gemv: rope tables are not one [head_dim] row per GEMV row");
            }
            seg.out = resolve(r->outputs[0]);
            seg.rope_half = hd / 2;
            seg.cos = resolve(r->inputs[1]);
            seg.sin = resolve(r->inputs[2]);
          }
          ga.segments.push_back(seg);
        }
        if (st.swiglu) ga.segments[0].out = resolve(st.swiglu->outputs[0]);
        const int64_t group_rows = opts.gemv_group_max_rows > 0 ? opts.gemv_group_max_rows : st.gemv_max_rows;
        if (ok.ok() && ga.m > group_rows)
          ok = Unimplemented(fmt::format("gemv: {} rows, above the group's {}", ga.m, group_rows));
        if (ok.ok()) ok = use_gemv ? kernels::GemvSupported(ga) : Unimplemented("gemv disabled");
        if (ok.ok() && ga.m > 0) {
          OPFUSE_ASSIGN_OR_RETURN(KernelLaunch l, kernels::PlanGemv(ga, dev));
          plan->launches.push_back(std::move(l));
          break;
        }
        if (ga.m == 0) break;
        // Above the group's GEMV rows (prefill, or a plan whose matmuls run on cuBLASLt at every row
        // count: gemv_max_rows 0) or a case the GEMV does not take: member by member, the matmuls on
        // cuBLASLt above the group's rows.
        auto plan_node = [&](const Node& m) { return plan_member(st, m); };
        const bool member_gemv = ga.m <= group_rows;
        if (norm) OPFUSE_RETURN_IF_ERROR(plan_node(*norm));
        for (const Node& m : st.matmuls) OPFUSE_RETURN_IF_ERROR(plan_matmul(m, member_gemv));
        if (st.swiglu) OPFUSE_RETURN_IF_ERROR(plan_node(*st.swiglu));
        for (const auto& r : st.ropes)
          if (r) OPFUSE_RETURN_IF_ERROR(plan_node(*r));
        break;
      }
      case StepKind::kLibrary: {
        const size_t si = static_cast<size_t>(&st - steps.data());
        if (st.node.op == OpKind::kAllReduce || st.node.op == OpKind::kAllGather) {
          OPFUSE_RETURN_IF_ERROR(plan_collective(st, si));
          break;
        }
        std::vector<kernels::TensorRef> ins, outs;
        for (int v : st.node.inputs) ins.push_back(ref(v));
        for (int v : st.node.outputs) outs.push_back(ref(v));
        if (auto sc = arena->scratch.find(si); sc != arena->scratch.end()) {  // attention split-K scratch
          ins.push_back({static_cast<char*>(arena->buffer.get()) + sc->second.first, DType::kF32, {sc->second.second / 4}});
          if (auto c = arena->counters.find(si); c != arena->counters.end())  // and its arrival counters
            ins.push_back({static_cast<char*>(arena->buffer.get()) + c->second.first, DType::kI32, {c->second.second}});
        }
        auto l = kernels::PlanLibraryNode(st.node, ins, outs, dev, {.early_reads = st.early_reads});
        if (!l.ok()) return Status(l.status().code(), fmt::format("{}: {}", st.name, l.status().message()));
        for (auto& x : *l) plan->launches.push_back(std::move(x));
        break;
      }
      case StepKind::kJit: {
        bool aligned = true;
        for (int v : st.jit_inputs) aligned &= reinterpret_cast<uintptr_t>(resolve(v)) % 16 == 0;
        for (int v : st.jit_outputs) aligned &= reinterpret_cast<uintptr_t>(resolve(v)) % 16 == 0;
        OPFUSE_ASSIGN_OR_RETURN(std::shared_ptr<const jit::LoadedKernel> lk, LoadJit(st, aligned));
        std::vector<int64_t> symv;
        for (const auto& s : st.kernel->symbols) symv.push_back(b.at(s));
        OPFUSE_ASSIGN_OR_RETURN(jit::LoadedKernel::Geometry geo, lk->LaunchGeometry(symv));
        if (geo.blocks == 0) break;
        std::vector<std::vector<std::byte>> args;
        for (int v : st.jit_inputs) args.push_back(ArgBytes(static_cast<const void*>(resolve(v))));
        for (int v : st.jit_outputs) args.push_back(ArgBytes(resolve(v)));
        for (int64_t s : symv) args.push_back(ArgBytes(static_cast<long long>(s)));
        // PDL where the function taken starts with its wait (codegen::EmittedKernel::PdlIn): the
        // decode-size launches, as the library kernels'
        plan->launches.push_back(KernelLaunch::Raw(*geo.function, geo.kernel,
                                                   dim3(static_cast<unsigned>(geo.blocks)), dim3(geo.threads),
                                                   static_cast<size_t>(geo.smem), args)
                                     .Pdl(lk->jit().emitted.PdlIn(*geo.function))
                                     .Cluster(geo.cluster));
        break;
      }
    }
  }
  if (opts.config.IsDisabled("pdl"))
    for (auto& l : plan->launches) l.Pdl(false);
  for (const auto& l : plan->launches) {
    plan->kernels += l.kernels();
    plan->pdl_launches += l.pdl() ? 1 : 0;
  }
  plan->graphable = opts.auto_graph && !opts.config.IsDisabled("auto_graph") && !plan->launches.empty();
  return plan;
}

StatusOr<std::shared_ptr<CudaExecutable::Impl::Plan>> CudaExecutable::Impl::GetPlan(const std::vector<const void*>& in,
                                                                                    const std::vector<void*>& out,
                                                                                    const Bindings& b) {
  if (in.size() != input_values.size() || out.size() != output_values.size())
    return InvalidArgument(fmt::format("run: expected {} inputs and {} outputs, got {} and {}", input_values.size(),
                                       output_values.size(), in.size(), out.size()));
  OPFUSE_ASSIGN_OR_RETURN(std::vector<int64_t> skey, SymbolKey(b));
  std::vector<uintptr_t> key(skey.begin(), skey.end());
  for (const void* p : in) key.push_back(reinterpret_cast<uintptr_t>(p));
  for (void* p : out) key.push_back(reinterpret_cast<uintptr_t>(p));
  std::lock_guard<std::mutex> lock(mu);
  auto it = plans.find(key);
  if (it != plans.end()) {
    if (it->second->generation == swaps.generation()) {
      it->second->last_used = ++clock;
      return it->second;
    }
    plans.erase(it);  // a background compile finished since: rebuilt below (a CudaGraph keeps its own)
  }
  for (size_t i = 0; i < in.size(); ++i)
    if (!in[i]) return InvalidArgument(fmt::format("run: input '{}' is a null pointer", values[input_values[i]].name));
  for (size_t i = 0; i < out.size(); ++i)
    if (!out[i]) return InvalidArgument(fmt::format("run: output '{}' is a null pointer", values[output_values[i]].name));
  OPFUSE_ASSIGN_OR_RETURN(std::shared_ptr<Arena> arena, GetArena(skey, b));
  OPFUSE_ASSIGN_OR_RETURN(std::shared_ptr<Plan> plan, BuildPlan(arena, in, out, b));
  if (plans.size() >= kMaxPlans) {
    auto lru = std::min_element(plans.begin(), plans.end(),
                                [](const auto& x, const auto& y) { return x.second->last_used < y.second->last_used; });
    plans.erase(lru);  // a CudaGraph that captured it keeps its own reference
  }
  plan->last_used = ++clock;
  plans.emplace(std::move(key), plan);
  return plan;
}

// ------------------------------------------------------------------ runs

namespace {
// Records `launches` on `stream` (a thread-local capture) and instantiates the graph into *exec; the
// graph itself goes to *graph when given, else is destroyed. On failure the stream is no longer
// capturing, nothing is left allocated, and the launch's or CUDA's error is returned.
Status CaptureLaunches(const std::vector<KernelLaunch>& launches, cudaStream_t stream, cudaGraphExec_t* exec,
                       cudaGraph_t* graph = nullptr) {
  OPFUSE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  Status st = Status::Ok();
  for (const auto& l : launches) {
    st = l.Launch(stream);
    if (!st.ok()) break;
  }
  cudaGraph_t g = nullptr;
  cudaGraphExec_t x = nullptr;
  cudaError_t e = cudaStreamEndCapture(stream, &g);
  if (st.ok() && e == cudaSuccess) e = cudaGraphInstantiate(&x, g, 0);
  const bool ok = st.ok() && e == cudaSuccess && x != nullptr;
  if (g && (!ok || graph == nullptr)) cudaGraphDestroy(g);
  OPFUSE_RETURN_IF_ERROR(st);
  OPFUSE_CUDA_CHECK(e);
  if (!ok) return Internal("cudaGraphInstantiate gave no executable graph");
  *exec = x;
  if (graph) *graph = g;
  return Status::Ok();
}
}  // namespace

// Auto graph (ExecutorOptions::auto_graph). Returns true when it ran the plan: a replay of its graph,
// one of the timed eager Runs that decide, or the Run that captures (and then replays); false leaves
// the run to the caller's launch loop. The graph is captured on the caller's stream, so its cuBLASLt
// calls use that stream's workspace (made by the eager Runs), and is replayed only there.
StatusOr<bool> CudaExecutable::Impl::RunAutoGraph(Plan& p, const std::string& graph_name, cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy) return false;  // the legacy default stream cannot be captured
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  OPFUSE_CUDA_CHECK(cudaStreamIsCapturing(stream, &cs));
  if (cs != cudaStreamCaptureStatusNone) return false;  // the caller's capture records the launches
  cudaGraphExec_t exec = nullptr;
  {
    std::lock_guard<std::mutex> lock(p.graph_mu);
    if (p.graph) {
      if (p.graph_stream != stream) return false;  // captured for another stream: launches here
      exec = p.graph;
    } else if (p.graph_off) {
      return false;
    } else if (p.last_stream != stream || p.eager_runs < CudaExecutable::kAutoGraphEagerRuns) {
      if (p.last_stream != stream) {
        p.last_stream = stream;
        p.eager_runs = 0;
      }
      const auto t0 = std::chrono::steady_clock::now();
      OPFUSE_RETURN_IF_ERROR(p.Launch(stream));
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (p.eager_runs == 1 || (p.eager_runs > 1 && us < p.best_eager_us)) p.best_eager_us = us;  // the first is not timed
      ++p.eager_runs;
      return true;
    } else if (p.best_eager_us < opts.auto_graph_min_host_us) {
      p.graph_off = true;  // launching costs less than the threshold: a graph would not pay
      return false;
    } else {
      const Status st = CaptureLaunches(p.launches, stream, &p.graph);
      if (!st.ok()) {
        (void)cudaGetLastError();  // a capture error is not sticky: clear it, the launches follow
        p.graph = nullptr;
        p.graph_off = true;
        fmt::print(stderr, "opfuse: graph {}: auto graph off for one plan (its Runs launch each kernel): {}\n", graph_name,
                   st.message());
        return false;
      }
      p.graph_stream = stream;
      exec = p.graph;
      ++auto_graphs;
    }
  }
  OPFUSE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  ++auto_graph_replays;
  return true;
}

Status CudaExecutable::Run(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                           const Bindings& bindings, cudaStream_t stream) {
  OPFUSE_ASSIGN_OR_RETURN(std::shared_ptr<Impl::Plan> plan, impl_->GetPlan(inputs, outputs, bindings));
  impl_->last_kernels = plan->kernels;
  impl_->last_pdl_launches = plan->pdl_launches;
  if (plan->graphable) {
    OPFUSE_ASSIGN_OR_RETURN(bool replayed, impl_->RunAutoGraph(*plan, graph_.name, stream));
    if (replayed) return Status::Ok();
  }
  return plan->Launch(stream);
}

namespace {
Status BindDims(const std::string& what, const TensorType& want, const DeviceTensor& got, Bindings& b) {
  if (got.dtype != want.dtype)
    return InvalidArgument(fmt::format("{}: dtype {} but the graph says {}", what, DTypeName(got.dtype), DTypeName(want.dtype)));
  if (got.shape.size() != want.shape.size())
    return InvalidArgument(fmt::format("{}: rank {} but the graph says {}", what, got.shape.size(), ShapeToString(want.shape)));
  for (size_t i = 0; i < got.shape.size(); ++i) {
    const Dim& d = want.shape[i];
    if (d.is_static()) {
      if (d.value != got.shape[i])
        return InvalidArgument(fmt::format("{}: dim {} is {} but the graph says {}", what, i, got.shape[i], d.value));
      continue;
    }
    auto [it, fresh] = b.emplace(d.sym, got.shape[i]);
    if (!fresh && it->second != got.shape[i])
      return InvalidArgument(fmt::format("{}: dim {} is {} but {} = {}", what, i, got.shape[i], d.sym, it->second));
  }
  return Status::Ok();
}
}  // namespace

Status CudaExecutable::Run(const std::map<std::string, DeviceTensor>& inputs,
                           const std::map<std::string, DeviceTensor>& outputs, cudaStream_t stream) {
  Bindings b;
  std::vector<const void*> in;
  std::vector<void*> out;
  for (int v : graph_.inputs) {
    const auto& val = graph_.values[v];
    auto it = inputs.find(val.name);
    if (it == inputs.end()) return InvalidArgument(fmt::format("run: missing input '{}'", val.name));
    OPFUSE_RETURN_IF_ERROR(BindDims("input '" + val.name + "'", val.type, it->second, b));
    in.push_back(it->second.data);
  }
  for (const auto& [name, t] : inputs)
    if (!graph_.FindValue(name) || graph_.values[*graph_.FindValue(name)].kind == ValueKind::kNode)
      return InvalidArgument(fmt::format("run: '{}' is not an input of graph {}", name, graph_.name));
  for (int v : graph_.outputs) {
    const auto& val = graph_.values[v];
    auto it = outputs.find(val.name);
    if (it == outputs.end()) return InvalidArgument(fmt::format("run: missing output '{}'", val.name));
    out.push_back(it->second.data);
  }
  OPFUSE_ASSIGN_OR_RETURN(auto shapes, OutputShapes(b));
  for (size_t j = 0; j < graph_.outputs.size(); ++j) {
    const auto& val = graph_.values[graph_.outputs[j]];
    const DeviceTensor& t = outputs.at(val.name);
    if (t.dtype != val.type.dtype || t.shape != shapes[j])
      return InvalidArgument(fmt::format("run: output '{}' must be {}{}, got {}{}", val.name, DTypeName(val.type.dtype),
                                         fmt::format("[{}]", fmt::join(shapes[j], ", ")), DTypeName(t.dtype),
                                         fmt::format("[{}]", fmt::join(t.shape, ", "))));
  }
  return Run(in, out, b, stream);
}

StatusOr<std::vector<std::vector<int64_t>>> CudaExecutable::OutputShapes(const Bindings& bindings) const {
  std::vector<std::vector<int64_t>> out;
  for (int v : graph_.outputs) {
    OPFUSE_ASSIGN_OR_RETURN(std::vector<int64_t> s, BindShape(graph_.values[v].type.shape, bindings));
    out.push_back(std::move(s));
  }
  return out;
}

StatusOr<std::map<std::string, HostTensor>> CudaExecutable::RunHost(const std::map<std::string, HostTensor>& inputs,
                                                                    const Bindings& explicit_bindings,
                                                                    std::map<std::string, HostTensor>* state) {
  OPFUSE_ASSIGN_OR_RETURN(auto all_inputs, MergeStateInputs(graph_, inputs, state));
  OPFUSE_ASSIGN_OR_RETURN(Bindings b, BindInputShapes(graph_, all_inputs, explicit_bindings));
  CachingAllocator& alloc = CachingAllocator::ForDevice(device_.ordinal);
  std::vector<DeviceBuffer> bufs;
  std::vector<const void*> in;
  std::vector<void*> out;
  for (int v : graph_.inputs) {
    const HostTensor& h = *all_inputs.at(graph_.values[v].name);
    OPFUSE_ASSIGN_OR_RETURN(DeviceBuffer d, DeviceBuffer::Make(alloc, std::max<size_t>(h.data.size(), 1)));
    OPFUSE_CUDA_CHECK(cudaMemcpy(d.get(), h.data.data(), h.data.size(), cudaMemcpyHostToDevice));
    in.push_back(d.get());
    bufs.push_back(std::move(d));
  }
  OPFUSE_ASSIGN_OR_RETURN(auto shapes, OutputShapes(b));
  std::vector<HostTensor> host_out;
  for (size_t j = 0; j < graph_.outputs.size(); ++j) {
    host_out.emplace_back(graph_.values[graph_.outputs[j]].type.dtype, shapes[j]);
    OPFUSE_ASSIGN_OR_RETURN(DeviceBuffer d, DeviceBuffer::Make(alloc, std::max<size_t>(host_out.back().data.size(), 1)));
    OPFUSE_CUDA_CHECK(cudaMemset(d.get(), 0xFF, host_out.back().data.size()));  // poisoned: NaN for floats
    out.push_back(d.get());
    bufs.push_back(std::move(d));
  }
  OPFUSE_RETURN_IF_ERROR(Run(in, out, b, nullptr));
  OPFUSE_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  std::map<std::string, HostTensor> result;
  for (size_t j = 0; j < graph_.outputs.size(); ++j) {
    OPFUSE_CUDA_CHECK(cudaMemcpy(host_out[j].data.data(), out[j], host_out[j].data.size(), cudaMemcpyDeviceToHost));
    result[graph_.values[graph_.outputs[j]].name] = std::move(host_out[j]);
  }
  if (state)  // the kernels wrote the state inputs' device copies: bring them back
    for (size_t i = 0; i < graph_.inputs.size(); ++i) {
      auto it = state->find(graph_.values[graph_.inputs[i]].name);
      if (it == state->end()) continue;
      OPFUSE_CUDA_CHECK(cudaMemcpy(it->second.data.data(), in[i], it->second.data.size(), cudaMemcpyDeviceToHost));
    }
  // Plans are keyed by pointer: drop the ones made for these temporary buffers.
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (auto it = impl_->plans.begin(); it != impl_->plans.end();) {
      const auto& k = it->first;
      bool mine = false;
      for (const void* p : in) mine |= std::find(k.begin(), k.end(), reinterpret_cast<uintptr_t>(p)) != k.end();
      it = mine ? impl_->plans.erase(it) : std::next(it);
    }
  }
  return result;
}

int64_t CudaExecutable::auto_graph_replays() const { return impl_ ? impl_->auto_graph_replays.load() : 0; }
int CudaExecutable::auto_graphs() const { return impl_ ? impl_->auto_graphs.load() : 0; }
int CudaExecutable::kernels_per_run() const { return impl_ ? impl_->last_kernels.load() : -1; }
int CudaExecutable::pdl_launches_per_run() const { return impl_ ? impl_->last_pdl_launches.load() : -1; }

std::vector<std::string> CudaExecutable::fallbacks() const {
  std::vector<std::string> out = fallbacks_;
  if (!impl_) return out;
  std::map<int, std::string> broken;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    broken = impl_->broken_slots;
  }
  for (const auto& b : impl_->background) {
    const scheduler::KernelSlot& slot = impl_->swaps.slot(b.slot);
    if (auto it = broken.find(b.slot); it != broken.end()) {
      out.push_back(fmt::format("group {} {}: jit -> {}: the background-compiled kernel could not be loaded: {}", b.group,
                                b.name, b.fallback, it->second));
    } else if (slot.ready()) {
      continue;  // swapped in
    } else if (!slot.error().ok()) {
      out.push_back(fmt::format("group {} {}: jit -> {}: background compile failed: {}", b.group, b.name, b.fallback,
                                slot.error().message()));
    } else {
      out.push_back(fmt::format("group {} {}: jit -> {} (pending): {} is not in the kernel cache; compiling in the "
                                "background, swapped in when ready",
                                b.group, b.name, b.fallback, impl_->swaps.name(b.slot)));
    }
  }
  return out;
}

uint64_t CudaExecutable::generation() const { return impl_ ? impl_->swaps.generation() : 0; }

int CudaExecutable::pending_compiles() const { return impl_ ? impl_->swaps.pending_count() : 0; }

void CudaExecutable::WaitForBackgroundCompiles() {
  if (impl_) impl_->swaps.WaitIdle();
}

// ------------------------------------------------------------------ CUDA graphs

StatusOr<std::unique_ptr<CudaGraph>> CudaExecutable::Capture(const std::vector<const void*>& inputs,
                                                             const std::vector<void*>& outputs,
                                                             const Bindings& bindings) {
  OPFUSE_ASSIGN_OR_RETURN(std::shared_ptr<Impl::Plan> plan, impl_->GetPlan(inputs, outputs, bindings));
  cudaStream_t s = impl_->capture_stream;
  // One eager run first: cuBLASLt allocates its per-stream workspace on first use, which cannot
  // happen inside a capture.
  OPFUSE_RETURN_IF_ERROR(plan->Launch(s));
  OPFUSE_CUDA_CHECK(cudaStreamSynchronize(s));
  std::unique_ptr<CudaGraph> cg(new CudaGraph());
  OPFUSE_RETURN_IF_ERROR(CaptureLaunches(plan->launches, s, &cg->exec_, &cg->graph_));
  cg->pin_ = plan;
  cg->kernels_ = plan->kernels;
  cg->generation_ = plan->generation;
  impl_->last_kernels = plan->kernels;
  impl_->last_pdl_launches = plan->pdl_launches;
  return cg;
}

CudaGraph::~CudaGraph() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
}

Status CudaGraph::Launch(cudaStream_t stream) const {
  OPFUSE_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
  return Status::Ok();
}

}  // namespace opfuse::cuda
