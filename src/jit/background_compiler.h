// BackgroundCompiler: compiles JIT kernels on one worker thread while the fallback runs.
//
// Design note: should_fuse says "compile in background" when the chosen JIT kernel is not in the
// cache. The caller then runs the fallback variant and Submit()s the compile; the result lands in
// a KernelSlot, which the executor reads before each launch (Get() == null: run the fallback). The
// swap is a shared_ptr exchange under a mutex, so a launch sees either the fallback or the whole
// kernel. One thread and a FIFO queue keep it simple: compiles are rare (once per kernel, ever,
// thanks to the cache) and NVRTC already takes a core. Jobs for a name already queued or done are
// not queued twice. A failed compile is kept in the slot (the fallback keeps running; the error is
// logged by the done callback's owner). The destructor finishes queued jobs before returning.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "jit/jit_compiler.h"
#include "opfuse/status.h"

namespace opfuse::scheduler {

class KernelSlot {
 public:
  std::shared_ptr<const jit::JitKernel> Get() const;   // null until compiled (run the fallback)
  bool ready() const { return Get() != nullptr; }
  Status error() const;                                // the compile failure, if any
  void Set(std::shared_ptr<const jit::JitKernel> k);
  void Fail(Status s);

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const jit::JitKernel> kernel_;
  Status error_;
};

class BackgroundCompiler {
 public:
  using Job = std::function<StatusOr<jit::JitKernel>()>;
  using DoneFn = std::function<void(const std::string& name, const Status& status)>;  // on the worker thread

  BackgroundCompiler();
  ~BackgroundCompiler();   // runs the queued jobs, then joins
  BackgroundCompiler(const BackgroundCompiler&) = delete;
  BackgroundCompiler& operator=(const BackgroundCompiler&) = delete;

  // Queues `job`; its result is swapped into `slot`, then `done` is called. Returns false (and
  // queues nothing) when a job of this name was already submitted.
  bool Submit(const std::string& name, Job job, std::shared_ptr<KernelSlot> slot, DoneFn done = {});
  // Compiles group `group` of a copy of `g` with `jit` (whose cache then holds the kernel); `jit`
  // must outlive the job (WaitIdle or destroy this compiler first).
  bool SubmitGroup(const jit::JitCompiler& jit, const Graph& g, int group, std::shared_ptr<KernelSlot> slot,
                   DoneFn done = {});
  void WaitIdle();          // blocks until the queue is empty and no job runs
  int completed() const;    // jobs finished (ok or failed)
  // Drops the queued jobs that have not started: their slots Fail(Unavailable "... cancelled ...") and their done
  // callbacks run with that status (on the calling thread). A running job finishes. Returns how many.
  int CancelPending();

 private:
  struct Task {
    std::string name;
    Job job;
    std::shared_ptr<KernelSlot> slot;
    DoneFn done;
  };
  void Loop();

  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<Task> queue_;
  std::set<std::string> seen_;
  bool running_ = false, stop_ = false;
  int completed_ = 0;
  std::thread worker_;
};

// The background compiles of one executable (the CUDA executor's ExecutorOptions::background_compile):
// one slot per distinct kernel (Add with a name already added returns that slot: identical kernels
// of several groups compile once), and a generation counter that every finished compile — ok or
// failed — bumps after its slot is set, so an owner that built something from the slots' state
// (the executor's plans) knows to rebuild it. A failure is printed to stderr (the owner keeps
// running its fallback) and kept in the slot. The destructor cancels what has not started and
// waits for a running compile; declare this after whatever the jobs use.
class BackgroundSwaps {
 public:
  BackgroundSwaps() = default;
  ~BackgroundSwaps();
  BackgroundSwaps(const BackgroundSwaps&) = delete;
  BackgroundSwaps& operator=(const BackgroundSwaps&) = delete;

  // The slot index of `name` (it names the kernel in messages), submitting `job` the first time
  // that name is seen.
  int Add(const std::string& name, BackgroundCompiler::Job job);
  int size() const { return static_cast<int>(slots_.size()); }
  const KernelSlot& slot(int i) const { return *slots_.at(i); }
  const std::string& name(int i) const { return names_.at(i); }
  bool ready(int i) const { return slots_.at(i)->ready(); }
  // Neither compiled nor failed yet.
  bool pending(int i) const;
  int pending_count() const;
  uint64_t generation() const { return generation_.load(); }
  void WaitIdle();

 private:
  std::vector<std::string> names_;
  std::vector<std::shared_ptr<KernelSlot>> slots_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> shutting_down_{false};
  std::unique_ptr<BackgroundCompiler> compiler_;  // created on the first Add; joined first
};

}  // namespace opfuse::scheduler
