// InProcessGroup (see inprocess_comm.h).
#include "runtime/cpu/inprocess_comm.h"

#include <chrono>
#include <cstring>

#include <fmt/format.h>

namespace opfuse {

const char* const kAbortedMessage = "tensor parallel: another rank failed; this collective did not run";

class InProcessGroup::Rank final : public Communicator {
 public:
  Rank(InProcessGroup* g, int rank) : g_(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int world() const override { return g_->world_; }

  Status AllReduceSum(std::span<float> data) override {
    Timer t(this);
    OPFUSE_RETURN_IF_ERROR(Publish(data.data(), data.size_bytes()));
    OPFUSE_RETURN_IF_ERROR(CheckSizes("all_reduce"));
    std::vector<float> sum(data.size(), 0.0f);
    for (int r = 0; r < g_->world_; ++r) {
      const float* p = static_cast<const float*>(g_->slots_[r].data);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += p[i];
    }
    OPFUSE_RETURN_IF_ERROR(g_->Barrier());  // every rank has read every buffer
    std::memcpy(data.data(), sum.data(), data.size_bytes());
    return Status::Ok();
  }

  Status AllGather(std::span<const uint8_t> in, std::span<uint8_t> out) override {
    Timer t(this);
    if (out.size() != in.size() * static_cast<size_t>(g_->world_))
      return InvalidArgument(fmt::format("all_gather: {} output bytes for {} ranks of {} bytes", out.size(), g_->world_, in.size()));
    OPFUSE_RETURN_IF_ERROR(Publish(in.data(), in.size()));
    OPFUSE_RETURN_IF_ERROR(CheckSizes("all_gather"));
    for (int r = 0; r < g_->world_; ++r)
      if (in.size()) std::memcpy(out.data() + r * in.size(), g_->slots_[r].data, in.size());
    return g_->Barrier();
  }

  double ms = 0;

 private:
  struct Timer {
    explicit Timer(Rank* r) : r_(r), t0_(std::chrono::steady_clock::now()) {}
    ~Timer() {
      r_->ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
    }
    Rank* r_;
    std::chrono::steady_clock::time_point t0_;
  };

  Status Publish(const void* p, size_t bytes) {
    {
      std::lock_guard<std::mutex> lk(g_->mu_);
      g_->slots_[rank_] = {p, bytes};
    }
    return g_->Barrier();
  }
  // Every rank sees the same sizes, so a mismatch fails every rank alike.
  Status CheckSizes(const char* what) const {
    for (int r = 1; r < g_->world_; ++r)
      if (g_->slots_[r].bytes != g_->slots_[0].bytes) {
        g_->Abort();
        return InvalidArgument(fmt::format("{}: rank {} has {} bytes, rank 0 {}", what, r, g_->slots_[r].bytes, g_->slots_[0].bytes));
      }
    return Status::Ok();
  }

  InProcessGroup* g_;
  int rank_;
};

InProcessGroup::InProcessGroup(int world) : world_(world), slots_(world) {
  for (int r = 0; r < world; ++r) ranks_.push_back(std::make_unique<Rank>(this, r));
}
InProcessGroup::~InProcessGroup() = default;

Communicator* InProcessGroup::comm(int rank) { return ranks_.at(rank).get(); }

Status InProcessGroup::Barrier() {
  std::unique_lock<std::mutex> lk(mu_);
  if (aborted_) return Internal(kAbortedMessage);
  const uint64_t gen = generation_;
  if (++arrived_ == world_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return Status::Ok();
  }
  cv_.wait(lk, [&] { return generation_ != gen || aborted_; });
  if (generation_ == gen) return Internal(kAbortedMessage);
  return Status::Ok();
}

void InProcessGroup::Abort() {
  std::lock_guard<std::mutex> lk(mu_);
  aborted_ = true;
  cv_.notify_all();
}

void InProcessGroup::Reset() {
  std::lock_guard<std::mutex> lk(mu_);
  aborted_ = false;
  arrived_ = 0;
}

double InProcessGroup::collective_ms(int rank) const { return ranks_.at(rank)->ms; }

}  // namespace opfuse
