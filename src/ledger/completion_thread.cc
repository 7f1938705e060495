#include "ledger/completion_thread.h"

namespace effectfence {

CompletionThread::CompletionThread() : thread_([this] { run(); }) {}

CompletionThread::~CompletionThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  ready_.notify_one();
  thread_.join();
}

void CompletionThread::post(std::vector<std::function<void()>> batch) {
  if (batch.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& completion : batch) queue_.push_back(std::move(completion));
  }
  ready_.notify_one();
}

void CompletionThread::run() {
  std::deque<std::function<void()>> taken;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything posted has run
      taken.swap(queue_);
    }
    for (auto& completion : taken) {
      try {
        completion();
      } catch (...) {
      }
    }
    taken.clear();
  }
}

}  // namespace effectfence
