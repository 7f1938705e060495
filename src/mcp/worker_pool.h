// Runs jobs on a bounded set of threads that grows on demand: every prepare
// blocks until its decision is durable, so many must be able to wait at once
// for the ledger to batch them.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace effectfence::mcp {

class WorkerPool {
 public:
  // At most max_threads jobs run at once; at most max_queued wait beyond
  // those, after which submit() blocks and try_submit() refuses.
  WorkerPool(size_t max_threads, size_t max_queued);
  // Runs every job already submitted, then joins the threads.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // REQUIRES: job does not throw.
  void submit(std::function<void()> job);
  // As submit, but returns false instead of waiting when max_queued jobs
  // are already waiting (the job is then not run).
  bool try_submit(std::function<void()> job);
  // Blocks until no job is waiting or running.
  void wait_idle();
  size_t thread_count() const;

 private:
  void work();
  void enqueue(std::function<void()> job);  // REQUIRES: mutex_ held, room in the queue

  const size_t max_threads_;
  const size_t max_queued_;
  mutable std::mutex mutex_;
  std::condition_variable job_ready_;
  std::condition_variable room_or_idle_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  size_t running_ = 0;
  bool stopping_ = false;
};

}  // namespace effectfence::mcp
