// Runs jobs on a fixed set of threads of its own. The SQLite ledger answers
// its asynchronous writes on one (in the order they were committed: the
// writer hands over a whole batch with one wake-up and goes straight back
// to the next transaction); a ledger whose write() blocks on a server round
// trip runs its asynchronous writes on several.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "core/mutex.h"

namespace effectfence {

class JobThreads {
 public:
  // With one thread, jobs run one at a time in the order posted. name (at
  // most 15 characters) is what `top -H` and debuggers show for the threads.
  JobThreads(size_t threads, const char* name);
  // stop().
  ~JobThreads();
  JobThreads(const JobThreads&) = delete;
  JobThreads& operator=(const JobThreads&) = delete;

  // An exception escaping a job is dropped: the threads must outlive any
  // one caller's mistake. Returns false, and runs nothing, once stop() has
  // begun: the caller answers the job's owner itself.
  bool post(std::function<void()> job);
  bool post(std::vector<std::function<void()>> jobs);

  // Takes no more jobs, runs everything posted before, then joins. Idempotent;
  // not to be called from one of these threads.
  void stop();

 private:
  void run();

  Mutex mu_;
  CondVar ready_;
  std::deque<std::function<void()>> queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // last: started once the members above exist
};

}  // namespace effectfence
