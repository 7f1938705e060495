// What a process that serves decisions from a Fence owes the ledger besides
// the decisions, so its callers owe nothing on a schedule:
//
//   Maintenance::Options options;
//   options.exit_reason = "my server stopped before the call's outcome was recorded";
//   Maintenance maintenance(fence, options);
//   ... serve prepares and commits ...
//   maintenance.stop_admitting();   // on the way out, before finishing the calls in flight
//   ... finish them ...
//   Maintenance::Stopped stopped = maintenance.stop();
//
// Its one thread, at start and then on their own cadences: takes back
// admissions whose answer was lost with a PostgreSQL connection (nobody got
// their ticket), fences intents whose holder process on this host is gone
// (unknown), and sweeps finished intents past the ledger's result TTL.
// stop() refuses new admissions, ends the thread, and fences as unknown what
// this process admitted and nobody can commit through it any more.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "effectfence/fence.h"

namespace effectfence {

class Maintenance {
 public:
  enum class Level { error, warn, info, debug };
  using Log = std::function<void(Level level, const std::string& message)>;

  struct Options {
    // How often to sweep after the sweep at start; unset: the fence's
    // Settings::sweep_interval_ms.
    std::optional<std::chrono::milliseconds> sweep_interval;
    // How often to take back unanswered admissions and reap dead holders.
    std::chrono::milliseconds reap_interval{2000};
    // The reason recorded for each admission stop() fences (it says who
    // stopped); empty: "the process (pid N) stopped before ...".
    std::string exit_reason;
    // Told what maintenance did and what failed, from its thread or stop();
    // unset: nothing is told.
    Log log;
  };

  // What stop() fenced, and what the ledger would not let it fence even
  // when tried again (still in flight: a later process fences it).
  struct Stopped {
    int64_t fenced = 0;
    std::vector<std::string> left_in_flight;
  };

  // Starts the thread; its first round runs at once.
  // REQUIRES: fence outlives this Maintenance.
  Maintenance(Fence& fence, Options options);
  // stop(), unless it was called.
  ~Maintenance();
  Maintenance(const Maintenance&) = delete;
  Maintenance& operator=(const Maintenance&) = delete;

  // From now on a prepare that would admit is refused (ledger_error,
  // nothing recorded); replays and other refusals go on. For a process on
  // its way out, before it finishes its calls in flight: whatever it
  // admitted now nobody could commit, and it would be fenced at once.
  // Thread-safe.
  void stop_admitting();
  // Stops admitting, ends the thread, then fences as unknown every intent
  // this fence admitted and has not seen resolved (taking back first the
  // admissions nobody received), trying once more after a second if the
  // ledger refused some. Only the first call does anything.
  // REQUIRES: no call through the fence is still running: its admission
  // would be fenced under it.
  Stopped stop();

 private:
  void run();
  void reap();
  void sweep();
  void tell(Level level, const std::string& message) const;

  Fence& fence_;
  const Options options_;
  const std::chrono::milliseconds sweep_interval_;
  bool stopped_ = false;  // stop() was called; the owner's thread only
  Mutex mutex_;
  CondVar wake_;
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace effectfence
