// InProcessGroup: `world` communicators (ops/collective.h) for ranks that are threads of one
// process — the CPU backend's tensor parallelism (docs/tensor_parallel.md), and the reference the
// GPU transport is checked against. A collective publishes each rank's buffer, meets the others at
// a barrier, reads every rank's buffer in rank order, and meets them again before anyone may
// reuse its buffer; so every rank computes the same sum, in the same order, from the same bytes.
//
// A rank that fails between collectives (a bad token id, an op error) calls Abort(): the ranks
// waiting for it, and every later collective, fail with one line instead of waiting forever.
// Reset() re-arms the group once every rank has returned (the caller joins its threads first).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "ops/collective.h"

namespace opfuse {

// The message of a collective that failed because another rank aborted the group.
extern const char* const kAbortedMessage;

class InProcessGroup {
 public:
  explicit InProcessGroup(int world);
  ~InProcessGroup();
  int world() const { return world_; }
  Communicator* comm(int rank);
  void Abort();
  void Reset();  // no rank may be inside a collective
  // Wall-clock milliseconds rank `rank` spent inside collectives since the group was made (waiting
  // for the other ranks included).
  double collective_ms(int rank) const;

 private:
  class Rank;
  friend class Rank;
  Status Barrier();
  struct Slot {
    const void* data = nullptr;
    size_t bytes = 0;
  };
  const int world_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<Slot> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
};

}  // namespace opfuse
