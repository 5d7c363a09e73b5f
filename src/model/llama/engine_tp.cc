// The tensor-parallel Runner (see engine_tp.h), and the CPU's RankGroup: the ranks meet through an
// InProcessGroup. A rank that fails aborts the group so that the others stop waiting; the call then
// returns the failing rank's own error. Every rank computes the whole vocabulary's logits
// (all_gather) and its argmax; the ranks' tokens are compared after each step, and a disagreement
// is an Internal error (the ranks' copies of the answer must be the same bits). Collectives are
// counted from the graphs (every collective node runs once per call).
#include "model/llama/engine_tp.h"

#include <thread>

#include <fmt/format.h>

#include "ops/collective.h"
#include "runtime/cpu/inprocess_comm.h"

namespace opfuse::llama {
namespace {

int64_t CountCollectives(const Graph& g) {
  int64_t n = 0;
  for (const Node& node : g.nodes)
    n += !node.dead && (node.op == OpKind::kAllReduce || node.op == OpKind::kAllGather);
  return n;
}

class TensorParallelRunner final : public Runner {
 public:
  TensorParallelRunner(std::vector<std::unique_ptr<Runner>> ranks, std::unique_ptr<RankGroup> group)
      : group_(std::move(group)), ranks_(std::move(ranks)) {}

  std::string device() const override {
    return fmt::format("{}, tensor parallel {} (one thread per rank)", ranks_[0]->device(), ranks_.size());
  }
  double compile_ms() const override {
    double ms = 0;
    for (const auto& r : ranks_) ms += r->compile_ms();
    return ms;
  }
  const Graph& prefill_graph(int64_t tokens) const override { return ranks_[0]->prefill_graph(tokens); }
  int prefill_plans() const override { return ranks_[0]->prefill_plans(); }
  const Graph& decode_graph() const override { return ranks_[0]->decode_graph(); }
  int kernels_per_decode_step() const override { return ranks_[0]->kernels_per_decode_step(); }
  int kernels_per_prefill() const override { return ranks_[0]->kernels_per_prefill(); }
  int64_t collectives() const override { return collectives_; }
  double collective_ms() const override { return group_->collective_ms(); }
  StatusOr<std::map<std::string, double>> AllReduceUs(int64_t rows, int64_t cols, DType dtype) override {
    return group_->AllReduceUs(rows, cols, dtype);
  }

  Status Prefill(int64_t row, std::span<const int32_t> ids, std::vector<float>* logits) override {
    std::vector<std::vector<float>> rank_logits(ranks_.size());
    OPFUSE_RETURN_IF_ERROR(RunAll([&](size_t r) { return ranks_[r]->Prefill(row, ids, r == 0 ? logits : &rank_logits[r]); }));
    collectives_ += CountCollectives(prefill_graph(static_cast<int64_t>(ids.size())));
    return Status::Ok();
  }

  Status Decode(std::span<const int32_t> tokens, std::span<const int32_t> pos, std::vector<int32_t>* next,
                std::vector<float>* logits) override {
    std::vector<std::vector<int32_t>> rank_next(ranks_.size());
    std::vector<std::vector<float>> rank_logits(ranks_.size());
    OPFUSE_RETURN_IF_ERROR(RunAll([&](size_t r) {
      return ranks_[r]->Decode(tokens, pos, next ? &rank_next[r] : nullptr, logits && r == 0 ? &rank_logits[r] : nullptr);
    }));
    collectives_ += CountCollectives(decode_graph());
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
      st[r] = group_->RunAsRank(static_cast<int>(r), [&] { return f(r); });
      if (!st[r].ok()) group_->Abort();
    };
    std::vector<std::thread> threads;
    for (size_t r = 1; r < n; ++r) threads.emplace_back(run, r);
    run(0);
    for (auto& t : threads) t.join();
    group_->Reset();
    for (const Status& s : st)
      if (!s.ok() && !group_->IsAbortedError(s)) return s;
    for (const Status& s : st)
      if (!s.ok()) return s;
    return Status::Ok();
  }

  std::unique_ptr<RankGroup> group_;  // destroyed after the ranks (their graphs hold its communicators)
  std::vector<std::unique_ptr<Runner>> ranks_;
  int64_t collectives_ = 0;
};

class CpuRankGroup final : public RankGroup {
 public:
  explicit CpuRankGroup(int world) : group_(world) {}
  Status RunAsRank(int rank, const std::function<Status()>& f) override {
    ScopedCommunicator scope(group_.comm(rank));
    return f();
  }
  void Abort() override { group_.Abort(); }
  void Reset() override { group_.Reset(); }
  bool IsAbortedError(const Status& s) const override { return s.message() == kAbortedMessage; }
  double collective_ms() const override { return group_.collective_ms(0); }

 private:
  InProcessGroup group_;
};

}  // namespace

StatusOr<std::unique_ptr<Runner>> MakeTensorParallelRunner(std::vector<std::unique_ptr<Runner>> ranks,
                                                           std::unique_ptr<RankGroup> group) {
  if (ranks.size() < 2) return InvalidArgument("tensor parallel: needs at least 2 ranks");
  return std::unique_ptr<Runner>(new TensorParallelRunner(std::move(ranks), std::move(group)));
}

StatusOr<std::unique_ptr<Runner>> MakeTensorParallelCpuRunner(std::vector<std::unique_ptr<Runner>> ranks) {
  const int world = static_cast<int>(ranks.size());
  return MakeTensorParallelRunner(std::move(ranks), std::make_unique<CpuRankGroup>(world));
}

}  // namespace opfuse::llama
