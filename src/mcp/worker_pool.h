// Runs jobs on a bounded set of threads that grows on demand: every prepare
// blocks until its decision is durable, so many must be able to wait at once
// for the ledger to batch them.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <system_error>
#include <thread>
#include <vector>

#include "core/mutex.h"

namespace effectfence::mcp {

class WorkerPool {
 public:
  // Starts a thread running its argument; throws std::system_error when the
  // system has no thread to give (as std::thread's constructor does).
  using ThreadStarter = std::function<std::thread(std::function<void()>)>;

  // At most max_threads jobs run at once; at most max_queued wait beyond
  // those, after which submit() blocks and try_submit() refuses.
  WorkerPool(size_t max_threads, size_t max_queued, ThreadStarter start_thread = start_std_thread);
  // Runs every job already submitted, then joins the threads.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // REQUIRES: job does not throw. With no thread at all to run it (none
  // could be started), job runs on the caller's thread before this returns.
  void submit(std::function<void()> job);
  // As submit, but returns false instead of waiting when max_queued jobs
  // are already waiting, or when no thread could be started to run it (the
  // job is then not run).
  bool try_submit(std::function<void()> job);
  // Blocks until no job is waiting or running.
  void wait_idle();
  size_t thread_count() const;

 private:
  static std::thread start_std_thread(std::function<void()> body) { return std::thread(std::move(body)); }
  void work();
  // Queues job and returns true, or returns false (job left with the caller)
  // iff no thread runs or can be started to run it.
  // REQUIRES: room in the queue.
  bool enqueue(std::function<void()>& job) REQUIRES(mutex_);

  const size_t max_threads_;
  const size_t max_queued_;
  const ThreadStarter start_thread_;
  mutable Mutex mutex_;
  CondVar job_ready_;
  CondVar room_or_idle_;
  std::deque<std::function<void()>> queue_ GUARDED_BY(mutex_);
  std::vector<std::thread> threads_ GUARDED_BY(mutex_);
  size_t idle_ GUARDED_BY(mutex_) = 0;
  size_t running_ GUARDED_BY(mutex_) = 0;
  bool stopping_ GUARDED_BY(mutex_) = false;
};

}  // namespace effectfence::mcp
