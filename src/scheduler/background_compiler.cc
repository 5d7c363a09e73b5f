// BackgroundCompiler and KernelSlot (see background_compiler.h).
#include "scheduler/background_compiler.h"

namespace opfuse::scheduler {

std::shared_ptr<const jit::JitKernel> KernelSlot::Get() const {
  std::lock_guard<std::mutex> lk(mu_);
  return kernel_;
}
Status KernelSlot::error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return error_;
}
void KernelSlot::Set(std::shared_ptr<const jit::JitKernel> k) {
  std::lock_guard<std::mutex> lk(mu_);
  kernel_ = std::move(k);
  error_ = Status::Ok();
}
void KernelSlot::Fail(Status s) {
  std::lock_guard<std::mutex> lk(mu_);
  error_ = std::move(s);
}

BackgroundCompiler::BackgroundCompiler() : worker_([this] { Loop(); }) {}

BackgroundCompiler::~BackgroundCompiler() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

bool BackgroundCompiler::Submit(const std::string& name, Job job, std::shared_ptr<KernelSlot> slot, DoneFn done) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!seen_.insert(name).second) return false;
    queue_.push_back({name, std::move(job), std::move(slot), std::move(done)});
  }
  cv_.notify_all();
  return true;
}

bool BackgroundCompiler::SubmitGroup(const jit::JitCompiler& jit, const Graph& g, int group,
                                     std::shared_ptr<KernelSlot> slot, DoneFn done) {
  auto copy = std::make_shared<Graph>(g);
  const std::string name = g.groups[group].name.empty() ? "group " + std::to_string(group) : g.groups[group].name;
  return Submit(
      name, [&jit, copy, group]() { return jit.CompileGroup(*copy, copy->groups[group], /*aligned=*/true); },
      std::move(slot), std::move(done));
}

void BackgroundCompiler::WaitIdle() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_cv_.wait(lk, [&] { return queue_.empty() && !running_; });
}

int BackgroundCompiler::completed() const {
  std::lock_guard<std::mutex> lk(mu_);
  return completed_;
}

void BackgroundCompiler::Loop() {
  for (;;) {
    Task t;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      t = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
    }
    auto result = t.job();
    Status st = result.status();
    if (t.slot) {
      if (result.ok()) t.slot->Set(std::make_shared<const jit::JitKernel>(std::move(result).value()));
      else t.slot->Fail(st);
    }
    if (t.done) t.done(t.name, st);
    {
      std::lock_guard<std::mutex> lk(mu_);
      running_ = false;
      ++completed_;
    }
    idle_cv_.notify_all();
  }
}

}  // namespace opfuse::scheduler
