// The CPU executor: runs a Graph on HostTensors with each op's CPU reference (OpDef::cpu).
//
// It is the reference every other backend and every fused kernel is tested against, so it favours
// checks over speed: the graph is re-verified (a copy is inferred), inputs are checked against the
// declared types (dtype, rank, static dims, and symbols bound consistently across inputs and with
// explicit bindings), every node output is poisoned before its node runs, and values are freed
// after their last use. Nodes run in topological order.
//
// fuse_groups: a FusionGroup whose decision is "fuse" runs "as a group" — values produced and
// consumed only inside the group (not graph outputs) are kept in f32 instead of being rounded to
// their graph dtype, which is exactly what a fused kernel does with its registers. Comparing a run
// with and without it measures what fusion changes numerically.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "opfuse/graph.h"
#include "ir/host_tensor.h"

namespace opfuse {

struct CpuRunOptions {
  Bindings bindings;         // explicit symbol values; input shapes must agree with them
  bool fuse_groups = false;  // execute fused groups with f32 intermediates (see above)
  // State inputs (graph inputs an op writes in place: StateInputs(g), e.g. kv_attention's k_cache
  // and v_cache) by name. A state input found here is read from and updated in this map's tensor,
  // in place — that is how a caller keeps a KV cache across runs. A state input passed in `inputs`
  // instead is copied first and the copy's update is discarded (`inputs` is never modified). A name
  // here that is not a state input of the graph, or one given in both maps, is InvalidArgument. On
  // an error the state may be partly updated (kv_attention checks pos before writing anything).
  std::map<std::string, HostTensor>* state = nullptr;
};

// Runs `g` on `inputs` (by input/param name; state inputs may come from opts.state instead) and
// returns the graph outputs by name.
// Errors: InvalidArgument for a missing/unknown input, wrong dtype or rank, a dim that contradicts
// a static dim or an earlier binding of its symbol, or an op failing on its data (e.g. an
// embedding id out of range); Unimplemented for an op without a CPU reference.
StatusOr<std::map<std::string, HostTensor>> RunGraphCpu(const Graph& g, const std::map<std::string, HostTensor>& inputs,
                                                        const CpuRunOptions& opts = {});

// The symbol bindings implied by `inputs` (and `explicit_bindings`), with RunGraphCpu's checks.
StatusOr<Bindings> BindInputShapes(const Graph& g, const std::map<std::string, HostTensor>& inputs,
                                   const Bindings& explicit_bindings = {});
// Same, over inputs by pointer (so that inputs and state maps can be merged without copies).
StatusOr<Bindings> BindInputShapes(const Graph& g, const std::map<std::string, const HostTensor*>& inputs,
                                   const Bindings& explicit_bindings = {});
// `inputs` and `state` merged by name (pointers into both), with the state rules of
// CpuRunOptions::state: a name in `state` must be a state input of `g` and not also in `inputs`.
StatusOr<std::map<std::string, const HostTensor*>> MergeStateInputs(const Graph& g,
                                                                    const std::map<std::string, HostTensor>& inputs,
                                                                    std::map<std::string, HostTensor>* state);

// Fresh random inputs for every graph input and param: floats uniform in [-1, 1]; integer inputs
// that feed an embedding as ids are in [0, vocab) of that table, kv_attention positions in
// [0, S - T] (the new tokens fit the cache), other integers in [0, 16); bools
// random. Symbols missing from `b` are bound to kDefaultSymbolValue. Deterministic in `seed`.
inline constexpr int64_t kDefaultSymbolValue = 8;
std::map<std::string, HostTensor> RandomInputs(const Graph& g, const Bindings& b, uint64_t seed);

}  // namespace opfuse
