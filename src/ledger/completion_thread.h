// Runs the completions of asynchronous ledger writes, one at a time and in
// the order they were posted, on a thread of its own: the writer hands over
// a whole batch with one wake-up and goes straight back to the next
// transaction instead of answering each caller itself.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace effectfence {

class CompletionThread {
 public:
  CompletionThread();
  // Runs everything posted so far, then joins.
  ~CompletionThread();
  CompletionThread(const CompletionThread&) = delete;
  CompletionThread& operator=(const CompletionThread&) = delete;

  // An exception escaping a completion is dropped: the thread must outlive
  // any one caller's mistake.
  void post(std::vector<std::function<void()>> batch);

 private:
  void run();

  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace effectfence
