// The tensor-parallel CPU Runner (engine_runner.h, docs/tensor_parallel.md): one CPU Runner per
// rank, each call run on one thread per rank (rank 0 on the caller's), the ranks meeting in the
// collective ops through an InProcessGroup. A rank that fails aborts the group so that the others
// stop waiting; the call then returns the failing rank's own error. Every rank computes the whole
// vocabulary's logits (all_gather) and its argmax; the ranks' tokens are compared after each step,
// and a disagreement is an Internal error (the ranks' copies of the answer must be the same bits).
#include <thread>

#include <fmt/format.h>

#include "model/llama/engine_runner.h"
#include "ops/collective.h"
#include "runtime/cpu/inprocess_comm.h"

namespace opfuse::llama {
namespace {

class TensorParallelRunner final : public Runner {
 public:
  explicit TensorParallelRunner(std::vector<std::unique_ptr<Runner>> ranks)
      : ranks_(std::move(ranks)), group_(static_cast<int>(ranks_.size())) {}

  std::string device() const override {
    return fmt::format("{}, tensor parallel {} (one thread per rank, in-process communicator)", ranks_[0]->device(),
                       ranks_.size());
  }
  double compile_ms() const override {
    double ms = 0;
    for (const auto& r : ranks_) ms += r->compile_ms();
    return ms;
  }
  const Graph& prefill_graph() const override { return ranks_[0]->prefill_graph(); }
  const Graph& decode_graph() const override { return ranks_[0]->decode_graph(); }
  int kernels_per_decode_step() const override { return ranks_[0]->kernels_per_decode_step(); }
  int kernels_per_prefill() const override { return ranks_[0]->kernels_per_prefill(); }
  int64_t collectives() const override { return group_.collectives(0); }
  double collective_ms() const override { return group_.collective_ms(0); }

  Status Prefill(int64_t row, std::span<const int32_t> ids, std::vector<float>* logits) override {
    std::vector<std::vector<float>> rank_logits(ranks_.size());
    return RunAll([&](size_t r) { return ranks_[r]->Prefill(row, ids, r == 0 ? logits : &rank_logits[r]); });
  }

  Status Decode(std::span<const int32_t> tokens, std::span<const int32_t> pos, std::vector<int32_t>* next,
                std::vector<float>* logits) override {
    std::vector<std::vector<int32_t>> rank_next(ranks_.size());
    std::vector<std::vector<float>> rank_logits(ranks_.size());
    OPFUSE_RETURN_IF_ERROR(RunAll([&](size_t r) {
      return ranks_[r]->Decode(tokens, pos, next ? &rank_next[r] : nullptr, logits ? &rank_logits[r] : nullptr);
    }));
    for (size_t r = 1; r < ranks_.size(); ++r)
      if (rank_next[r] != rank_next[0])
        return Internal(fmt::format("tensor parallel: rank {} chose other tokens than rank 0", r));
    if (next) *next = std::move(rank_next[0]);
    if (logits) *logits = std::move(rank_logits[0]);
    return Status::Ok();
  }

 private:
  template <typename F>
  Status RunAll(F&& f) {
    const size_t n = ranks_.size();
    std::vector<Status> st(n, Status::Ok());
    auto run = [&](size_t r) {
      ScopedCommunicator scope(group_.comm(static_cast<int>(r)));
      st[r] = f(r);
      if (!st[r].ok()) group_.Abort();
    };
    std::vector<std::thread> threads;
    for (size_t r = 1; r < n; ++r) threads.emplace_back(run, r);
    run(0);
    for (auto& t : threads) t.join();
    group_.Reset();
    // The failing rank's own error, not the "another rank failed" of the ranks it stopped.
    for (const Status& s : st)
      if (!s.ok() && s.message() != kAbortedMessage) return s;
    for (const Status& s : st)
      if (!s.ok()) return s;
    return Status::Ok();
  }

  std::vector<std::unique_ptr<Runner>> ranks_;
  InProcessGroup group_;
};

}  // namespace

StatusOr<std::unique_ptr<Runner>> MakeTensorParallelCpuRunner(std::vector<std::unique_ptr<Runner>> ranks) {
  if (ranks.size() < 2) return InvalidArgument("tensor parallel: needs at least 2 ranks");
  return std::unique_ptr<Runner>(new TensorParallelRunner(std::move(ranks)));
}

}  // namespace opfuse::llama
