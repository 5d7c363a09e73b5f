// Collective ops (all_reduce, all_gather): inference and the CPU reference, which exchanges data
// through the communicator installed on the calling thread (ops/collective.h).
//
// all_reduce: every rank's x converted to f32, summed by Communicator::AllReduceSum (rank order,
// f32), rounded once to x's dtype. all_gather: every rank's bytes gathered in rank order, then laid
// out as the concatenation along `axis` (the outer dims interleave the ranks' chunks).
// Attributes: `world` (required, >= 1: the group the graph was sharded for); all_reduce's `reduce`
// (only "sum"); all_gather's `axis` (default -1, a static dim).
#include "ops/collective.h"

#include <cstring>

#include <fmt/format.h>

#include "ops/cpu_util.h"
#include "ops/op_def.h"

namespace opfuse {

namespace {
thread_local Communicator* tls_comm = nullptr;
}  // namespace

Communicator* CurrentCommunicator() { return tls_comm; }
ScopedCommunicator::ScopedCommunicator(Communicator* c) : prev_(tls_comm) { tls_comm = c; }
ScopedCommunicator::~ScopedCommunicator() { tls_comm = prev_; }

namespace {

StatusOr<int64_t> World(const Node& n) {
  if (!n.attrs.count("world")) return NodeError(n, "needs attribute world=N (the ranks of the group the graph was sharded for)");
  const int64_t w = AttrInt(n.attrs, "world", 0);
  if (w < 1) return NodeError(n, fmt::format("world must be >= 1, got {}", w));
  return w;
}

StatusOr<int64_t> GatherAxis(const Node& n, size_t rank) {
  int64_t axis = AttrInt(n.attrs, "axis", -1);
  if (axis < 0) axis += static_cast<int64_t>(rank);
  if (axis < 0 || axis >= static_cast<int64_t>(rank))
    return NodeError(n, fmt::format("axis {} out of range for a rank-{} tensor", AttrInt(n.attrs, "axis", -1), rank));
  return axis;
}

StatusOr<std::vector<TensorType>> InferCollective(const Node& n, const std::vector<TensorType>& in) {
  OPFUSE_ASSIGN_OR_RETURN(const int64_t world, World(n));
  TensorType out = in[0];
  if (n.op == OpKind::kAllReduce) {
    const std::string reduce = AttrString(n.attrs, "reduce", "sum");
    if (reduce != "sum") return NodeError(n, fmt::format("reduce '{}' is not implemented (only sum)", reduce));
    return std::vector<TensorType>{out};
  }
  if (out.shape.empty()) return NodeError(n, "all_gather needs a tensor of rank >= 1");
  OPFUSE_ASSIGN_OR_RETURN(const int64_t axis, GatherAxis(n, out.shape.size()));
  if (!out.shape[axis].is_static()) return NodeError(n, "gathering along a symbolic dim is not supported");
  out.shape[axis] = Dim(out.shape[axis].value * world);
  return std::vector<TensorType>{out};
}

StatusOr<Communicator*> CommFor(const Node& n, int64_t world) {
  Communicator* c = CurrentCommunicator();
  OPFUSE_RETURN_IF_ERROR(CheckCollectiveGroup(n, world, c ? c->world() : 0));
  return c;
}

Status CpuAllReduce(const Node& n, const std::vector<const HostTensor*>& in, const std::vector<HostTensor*>& out) {
  OPFUSE_ASSIGN_OR_RETURN(const int64_t world, World(n));
  if (world == 1) {
    CopyElements(*in[0], 0, *out[0], 0, in[0]->numel());
    return Status::Ok();
  }
  OPFUSE_ASSIGN_OR_RETURN(Communicator* c, CommFor(n, world));
  std::vector<float> v = ReadF32(*in[0]);
  OPFUSE_RETURN_IF_ERROR(c->AllReduceSum(v));
  WriteF32(*out[0], v.data());
  return Status::Ok();
}

Status CpuAllGather(const Node& n, const std::vector<const HostTensor*>& in, const std::vector<HostTensor*>& out) {
  OPFUSE_ASSIGN_OR_RETURN(const int64_t world, World(n));
  HostTensor& y = *out[0];
  if (world == 1) {
    CopyElements(*in[0], 0, y, 0, in[0]->numel());
    return Status::Ok();
  }
  // The executor may hand f32 storage for a value of another dtype (fused groups' intermediates):
  // the exchange is in the output's dtype.
  HostTensor converted;
  if (in[0]->dtype != y.dtype) {
    converted = HostTensor(y.dtype, in[0]->shape);
    CopyElements(*in[0], 0, converted, 0, in[0]->numel());
  }
  const HostTensor& x = in[0]->dtype != y.dtype ? converted : *in[0];
  OPFUSE_ASSIGN_OR_RETURN(Communicator* c, CommFor(n, world));
  std::vector<uint8_t> all(x.data.size() * static_cast<size_t>(world));
  OPFUSE_RETURN_IF_ERROR(c->AllGather(x.data, all));
  // x is [outer, chunk] bytes with chunk = dims from the axis on; y is [outer, world, chunk].
  const size_t outer = static_cast<size_t>(GatherOuter(n, x.shape));
  const size_t chunk = outer ? x.data.size() / outer : 0;
  for (size_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < world; ++r)
      std::memcpy(y.data.data() + (o * world + r) * chunk, all.data() + r * x.data.size() + o * chunk, chunk);
  return Status::Ok();
}

}  // namespace

Status CheckCollectiveGroup(const Node& n, int64_t world, int group_world) {
  if (world == 1) return Status::Ok();
  if (group_world == 0)
    return NodeError(n, fmt::format("world={} needs a communicator: run the graph as a rank of a {}-rank group "
                                    "(--tensor-parallel {})", world, world, world));
  if (group_world != world)
    return NodeError(n, fmt::format("the graph was sharded for world={} but runs in a group of {} ranks", world, group_world));
  return Status::Ok();
}

int64_t GatherOuter(const Node& n, const std::vector<int64_t>& in_shape) {
  int64_t axis = AttrInt(n.attrs, "axis", -1);
  if (axis < 0) axis += static_cast<int64_t>(in_shape.size());
  int64_t outer = 1;
  for (int64_t d = 0; d < axis && d < static_cast<int64_t>(in_shape.size()); ++d) outer *= in_shape[d];
  return outer;
}

void RegisterCollectiveOps(OpDefTable& t) {
  for (OpKind op : {OpKind::kAllReduce, OpKind::kAllGather}) t[static_cast<int>(op)].infer = InferCollective;
  t[static_cast<int>(OpKind::kAllReduce)].cpu = CpuAllReduce;
  t[static_cast<int>(OpKind::kAllGather)].cpu = CpuAllGather;
  t[static_cast<int>(OpKind::kAllReduce)].attrs = {{"world", AttrRule::kInt}, {"reduce", AttrRule::kString}};
  t[static_cast<int>(OpKind::kAllGather)].attrs = {{"world", AttrRule::kInt}, {"axis", AttrRule::kInt}};
}

}  // namespace opfuse
