#include "mcp/worker_pool.h"

#include <algorithm>

namespace effectfence::mcp {

WorkerPool::WorkerPool(size_t max_threads, size_t max_queued, ThreadStarter start_thread)
    : max_threads_(std::max<size_t>(1, max_threads)),
      max_queued_(std::max<size_t>(1, max_queued)),
      start_thread_(std::move(start_thread)) {}

WorkerPool::~WorkerPool() {
  {
    MutexLock lock(&mutex_);
    stopping_ = true;
  }
  job_ready_.NotifyAll();
  for (auto& t : threads_) t.join();
}

void WorkerPool::submit(std::function<void()> job) {
  MutexLock lock(&mutex_);
  while (queue_.size() >= max_queued_) room_or_idle_.Wait(&mutex_);
  if (enqueue(job)) return;
  lock.Unlock();
  job();
}

bool WorkerPool::try_submit(std::function<void()> job) {
  MutexLock lock(&mutex_);
  if (queue_.size() >= max_queued_) return false;
  return enqueue(job);
}

bool WorkerPool::enqueue(std::function<void()>& job) {
  // One waiting job per idle thread; beyond that, grow while allowed.
  if (queue_.size() + 1 > idle_ && threads_.size() < max_threads_) {
    try {
      threads_.push_back(start_thread_([this] { work(); }));
    } catch (const std::system_error&) {
      // The threads there take it in their turn; with none, nobody would.
      if (threads_.empty()) return false;
    }
  }
  queue_.push_back(std::move(job));
  job_ready_.NotifyOne();
  return true;
}

void WorkerPool::wait_idle() {
  MutexLock lock(&mutex_);
  while (!queue_.empty() || running_ != 0) room_or_idle_.Wait(&mutex_);
}

size_t WorkerPool::thread_count() const {
  MutexLock lock(&mutex_);
  return threads_.size();
}

void WorkerPool::work() {
  MutexLock lock(&mutex_);
  for (;;) {
    ++idle_;
    while (!stopping_ && queue_.empty()) job_ready_.Wait(&mutex_);
    --idle_;
    if (queue_.empty()) return;  // stopping, and nothing left to run
    std::function<void()> job = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    lock.Unlock();
    room_or_idle_.NotifyAll();
    job();
    lock.Lock();
    --running_;
    if (queue_.empty() && running_ == 0) room_or_idle_.NotifyAll();
  }
}

}  // namespace effectfence::mcp
