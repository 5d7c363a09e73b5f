// The communicator interface the collective ops (all_reduce, all_gather; ops.def) run through, and
// the one a CPU run uses. Tensor parallelism (docs/tensor_parallel.md) runs the same graph on every
// rank of a group, each on its shard of the weights; a collective op is where the ranks meet.
//
// Design note: an op's CPU reference (OpDef::cpu) is a plain function of its node and tensors, so
// the communicator reaches it through the thread it runs on: the caller that runs rank r's graph
// installs rank r's communicator with ScopedCommunicator on that thread (one thread per rank; the
// CPU executor calls every node's reference on the calling thread). A collective op whose `world`
// is 1 is the identity and needs none; one whose world is larger fails with one line when no
// communicator, or one of another size, is installed — never a silent single-rank answer.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "opfuse/graph.h"

namespace opfuse {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Every rank's `data` (the same length on every rank) becomes the sum over the ranks, added in f32
  // in rank order 0, 1, ..., world - 1, so that every rank holds the same bits.
  virtual Status AllReduceSum(std::span<float> data) = 0;
  // `out` (world x in.size() bytes) receives every rank's `in` (the same size on every rank), in
  // rank order.
  virtual Status AllGather(std::span<const uint8_t> in, std::span<uint8_t> out) = 0;
};

// The checks and layout every backend shares (one message, one rule):
// Ok when a collective node sharded for `world` ranks (its attribute) may run in a group of
// `group_world` ranks (0: no communicator): world 1 always; else the sizes must agree.
Status CheckCollectiveGroup(const Node& n, int64_t world, int group_world);
// all_gather over `in_shape`: the product of the dims before the gathered axis (1: the ranks'
// tensors are simply concatenated).
int64_t GatherOuter(const Node& n, const std::vector<int64_t>& in_shape);

// The communicator installed on this thread (nullptr: none).
Communicator* CurrentCommunicator();

// Installs `c` on this thread for its lifetime (the previous one comes back after).
class ScopedCommunicator {
 public:
  explicit ScopedCommunicator(Communicator* c);
  ~ScopedCommunicator();
  ScopedCommunicator(const ScopedCommunicator&) = delete;
  ScopedCommunicator& operator=(const ScopedCommunicator&) = delete;

 private:
  Communicator* prev_;
};

}  // namespace opfuse
