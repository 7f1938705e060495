// The admissions that one client connection still holds. A plain serve
// process serves one client, and fences every admission it has not seen
// resolved when that client goes (Fence::fence_own_in_flight on exit). A
// shared server outlives its clients, so it keeps this per session and
// fences a session's admissions when the session ends: an agent that went
// away after being admitted may have run the effect, and must not have it
// taken over and run again once the lease runs out.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "effectfence/fence.h"

namespace effectfence::mcp {

class SessionAdmissions {
 public:
  explicit SessionAdmissions(Fence& fence) : fence_(fence) {}

  // A ticket issued through this session (fence_prepare answered fresh),
  // or one kept alive through it (fence_heartbeat extended it: a client
  // that reconnected holds it here now).
  void held(const Ticket& ticket);
  // The ticket's outcome is recorded (committed or aborted).
  void resolved(const Ticket& ticket);
  size_t count() const;

  // Moves every intent still held by one of this session's tickets to
  // unknown (tickets that no longer hold their intent are left alone).
  // Returns how many were fenced. Call once the session's calls finished.
  int64_t fence_all(const std::string& why);

 private:
  Fence& fence_;
  mutable std::mutex mutex_;
  std::map<std::string, Ticket> tickets_;  // by token: one per admission
};

}  // namespace effectfence::mcp
