// CallGate: how many tool calls the shared server runs at once, and how
// many more may wait for a turn. A call waits here, not for an HTTP thread,
// so the threads stay free for what decides nothing (a scrape of /metrics,
// a ping, a new session) however many calls wait for the ledger.
#pragma once

#include <cstddef>

#include "core/mutex.h"

namespace effectfence::shared {

class CallGate {
 public:
  enum class Entry { run, busy, closed };

  CallGate(size_t max_running, size_t max_waiting);
  CallGate(const CallGate&) = delete;
  CallGate& operator=(const CallGate&) = delete;

  // run: the caller holds a turn and must leave(). busy: max_running run and
  // max_waiting wait already, so the call is not started. closed: close()
  // was called, before or while the call waited.
  Entry enter();
  void leave();
  // Wakes every waiting call (they get `closed`) and turns new ones away.
  void close();

  size_t running() const;
  size_t waiting() const;

 private:
  const size_t max_running_;
  const size_t max_waiting_;
  mutable Mutex mutex_;
  CondVar turn_;
  size_t running_ GUARDED_BY(mutex_) = 0;
  size_t waiting_ GUARDED_BY(mutex_) = 0;
  bool closed_ GUARDED_BY(mutex_) = false;
};

// Holds a turn from enter() to destruction, if enter() gave one.
class CallTurn {
 public:
  explicit CallTurn(CallGate* gate) : gate_(gate), entry_(gate->enter()) {}
  ~CallTurn() {
    if (entry_ == CallGate::Entry::run) gate_->leave();
  }
  CallTurn(const CallTurn&) = delete;
  CallTurn& operator=(const CallTurn&) = delete;

  CallGate::Entry entry() const { return entry_; }

 private:
  CallGate* const gate_;
  const CallGate::Entry entry_;
};

}  // namespace effectfence::shared
