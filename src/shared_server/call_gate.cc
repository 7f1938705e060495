#include "shared_server/call_gate.h"

#include <algorithm>

namespace effectfence::shared {

CallGate::CallGate(size_t max_running, size_t max_waiting)
    : max_running_(std::max<size_t>(1, max_running)), max_waiting_(max_waiting) {}

CallGate::Entry CallGate::enter() {
  MutexLock lock(&mutex_);
  if (closed_) return Entry::closed;
  if (running_ < max_running_ && waiting_ == 0) {
    ++running_;
    return Entry::run;
  }
  if (waiting_ >= max_waiting_) return Entry::busy;
  ++waiting_;
  while (!closed_ && running_ >= max_running_) turn_.Wait(&mutex_);
  --waiting_;
  if (closed_) return Entry::closed;
  ++running_;
  return Entry::run;
}

void CallGate::leave() {
  {
    MutexLock lock(&mutex_);
    --running_;
  }
  turn_.NotifyOne();
}

void CallGate::close() {
  {
    MutexLock lock(&mutex_);
    closed_ = true;
  }
  turn_.NotifyAll();
}

size_t CallGate::running() const {
  MutexLock lock(&mutex_);
  return running_;
}

size_t CallGate::waiting() const {
  MutexLock lock(&mutex_);
  return waiting_;
}

}  // namespace effectfence::shared
