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
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

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

}  // namespace opfuse::scheduler
