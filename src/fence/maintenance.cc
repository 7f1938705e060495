#include "effectfence/maintenance.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>

#include "fence/fence_internal.h"

namespace effectfence {
namespace {

// How long stop() waits before asking the ledger again for what it refused.
constexpr auto kRetryPause = std::chrono::seconds(1);

std::string default_exit_reason() {
  return "the process (pid " + std::to_string(::getpid()) +
         ") stopped before the admission was committed or aborted";
}

}  // namespace

Maintenance::Maintenance(Fence& fence, Options options)
    : fence_(fence),
      options_(std::move(options)),
      sweep_interval_(options_.sweep_interval.value_or(
          std::chrono::milliseconds(fence.settings().sweep_interval_ms))),
      thread_([this] {
        pthread_setname_np(pthread_self(), "maintenance");
        run();
      }) {}

Maintenance::~Maintenance() { stop(); }

void Maintenance::stop_admitting() { FenceInternal::stop_admitting(fence_); }

Maintenance::Stopped Maintenance::stop() {
  Stopped stopped;
  if (stopped_) return stopped;
  stopped_ = true;
  stop_admitting();
  {
    MutexLock lock(&mutex_);
    stopping_ = true;
  }
  wake_.NotifyAll();
  thread_.join();

  const std::string why = options_.exit_reason.empty() ? default_exit_reason() : options_.exit_reason;
  stopped.fenced = FenceInternal::fence_own_in_flight(fence_, why, &stopped.left_in_flight);
  if (!stopped.left_in_flight.empty()) {
    tell(Level::warn, "could not fence " + std::to_string(stopped.left_in_flight.size()) +
                          " admission(s) as unknown (the ledger refused the write); trying once more");
    std::this_thread::sleep_for(kRetryPause);
    stopped.left_in_flight.clear();
    stopped.fenced += FenceInternal::fence_own_in_flight(fence_, why, &stopped.left_in_flight);
  }
  return stopped;
}

// Each job on its own schedule, both due at start: a sweep interval shorter
// than the reap interval is kept, not rounded up to it.
void Maintenance::run() {
  using Clock = std::chrono::steady_clock;
  Clock::time_point next_reap = Clock::now();
  Clock::time_point next_sweep = next_reap;
  MutexLock lock(&mutex_);
  while (!stopping_) {
    lock.Unlock();
    if (Clock::now() >= next_reap) {
      reap();
      next_reap = Clock::now() + options_.reap_interval;
    }
    if (Clock::now() >= next_sweep) {
      sweep();
      next_sweep = Clock::now() + sweep_interval_;
    }
    lock.Lock();
    const Clock::time_point due = std::min(next_reap, next_sweep);
    while (!stopping_) {
      if (!wake_.WaitUntil(&mutex_, due)) break;
    }
  }
}

void Maintenance::reap() {
  if (const int64_t taken_back = FenceInternal::take_back_unanswered(fence_); taken_back > 0) {
    tell(Level::info, "took back " + std::to_string(taken_back) +
                          " admission(s) whose answer was lost with the ledger connection: their next prepare is "
                          "fresh");
  }
  if (const int64_t reaped = FenceInternal::reap_dead_holders(fence_); reaped > 0) {
    tell(Level::warn, "fenced " + std::to_string(reaped) +
                          " in-flight intent(s) as unknown: their holder process is gone; an operator must reconcile "
                          "them");
  }
}

void Maintenance::sweep() {
  const int64_t swept = FenceInternal::sweep(fence_);
  if (swept < 0) tell(Level::warn, "sweeping finished intents failed; will retry");
  else if (swept > 0) tell(Level::debug, "swept " + std::to_string(swept) + " finished intent(s) past their TTL");
}

void Maintenance::tell(Level level, const std::string& message) const {
  if (options_.log) options_.log(level, message);
}

}  // namespace effectfence
