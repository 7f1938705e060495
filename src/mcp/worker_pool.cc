#include "mcp/worker_pool.h"

#include <algorithm>

namespace effectfence::mcp {

WorkerPool::WorkerPool(size_t max_threads, size_t max_queued, ThreadStarter start_thread)
    : max_threads_(std::max<size_t>(1, max_threads)),
      max_queued_(std::max<size_t>(1, max_queued)),
      start_thread_(std::move(start_thread)) {}

WorkerPool::~WorkerPool() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  job_ready_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::submit(std::function<void()> job) {
  std::unique_lock<std::mutex> lock(mutex_);
  room_or_idle_.wait(lock, [&] { return queue_.size() < max_queued_; });
  if (enqueue(job)) return;
  lock.unlock();
  job();
}

bool WorkerPool::try_submit(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(mutex_);
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
  job_ready_.notify_one();
  return true;
}

void WorkerPool::wait_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  room_or_idle_.wait(lock, [&] { return queue_.empty() && running_ == 0; });
}

size_t WorkerPool::thread_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return threads_.size();
}

void WorkerPool::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    ++idle_;
    job_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    --idle_;
    if (queue_.empty()) return;  // stopping, and nothing left to run
    std::function<void()> job = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    lock.unlock();
    room_or_idle_.notify_all();
    job();
    lock.lock();
    --running_;
    if (queue_.empty() && running_ == 0) room_or_idle_.notify_all();
  }
}

}  // namespace effectfence::mcp
