#include "ledger/job_threads.h"

#include <pthread.h>

namespace effectfence {

JobThreads::JobThreads(size_t threads, const char* name) {
  for (size_t i = 0; i < (threads == 0 ? 1 : threads); ++i) {
    threads_.emplace_back([this, name] {
      pthread_setname_np(pthread_self(), name);
      run();
    });
  }
}

JobThreads::~JobThreads() { stop(); }

void JobThreads::stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  ready_.NotifyAll();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

bool JobThreads::post(std::function<void()> job) {
  {
    MutexLock lock(&mu_);
    if (stopping_) return false;
    queue_.push_back(std::move(job));
  }
  ready_.NotifyOne();
  return true;
}

bool JobThreads::post(std::vector<std::function<void()>> jobs) {
  {
    MutexLock lock(&mu_);
    if (stopping_) return false;
    if (jobs.empty()) return true;
    for (auto& job : jobs) queue_.push_back(std::move(job));
  }
  if (threads_.size() == 1) ready_.NotifyOne();
  else ready_.NotifyAll();
  return true;
}

void JobThreads::run() {
  for (;;) {
    std::function<void()> job;
    {
      MutexLock lock(&mu_);
      while (!stopping_ && queue_.empty()) ready_.Wait(&mu_);
      if (queue_.empty()) return;  // stopping, and everything posted has run
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      job();
    } catch (...) {
    }
  }
}

}  // namespace effectfence
