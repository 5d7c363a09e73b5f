// BackgroundCompiler and KernelSlot (see background_compiler.h).
#include "jit/background_compiler.h"

#include <cstdio>

#include <fmt/format.h>

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

int BackgroundCompiler::CancelPending() {
  std::deque<Task> dropped;
  {
    std::lock_guard<std::mutex> lk(mu_);
    dropped.swap(queue_);
    completed_ += static_cast<int>(dropped.size());
  }
  idle_cv_.notify_all();
  for (Task& t : dropped) {
    Status st = Unavailable(fmt::format("background compile of {} cancelled before it started", t.name));
    if (t.slot) t.slot->Fail(st);
    if (t.done) t.done(t.name, st);
  }
  return static_cast<int>(dropped.size());
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

BackgroundSwaps::~BackgroundSwaps() {
  shutting_down_ = true;  // cancelled jobs are not failures worth a line on stderr
  if (compiler_) compiler_->CancelPending();
  compiler_.reset();  // waits for a running job
}

int BackgroundSwaps::Add(const std::string& name, BackgroundCompiler::Job job) {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return static_cast<int>(i);
  if (!compiler_) compiler_ = std::make_unique<BackgroundCompiler>();
  names_.push_back(name);
  slots_.push_back(std::make_shared<KernelSlot>());
  compiler_->Submit(name, std::move(job), slots_.back(), [this](const std::string& n, const Status& st) {
    if (!st.ok() && !shutting_down_)
      std::fprintf(stderr, "opfuse: background compile of %s failed (the fallback keeps running): %s\n", n.c_str(),
                   st.ToString().c_str());
    generation_.fetch_add(1);
  });
  return static_cast<int>(slots_.size()) - 1;
}

bool BackgroundSwaps::pending(int i) const {
  const KernelSlot& s = *slots_.at(i);
  return !s.ready() && s.error().ok();
}

int BackgroundSwaps::pending_count() const {
  int n = 0;
  for (int i = 0; i < size(); ++i) n += pending(i);
  return n;
}

void BackgroundSwaps::WaitIdle() {
  if (compiler_) compiler_->WaitIdle();
}

}  // namespace opfuse::scheduler
