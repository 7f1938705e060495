// The admissions that each client session of one server still holds. A
// plain serve process serves one client, and fences every admission it has
// not seen resolved when that client goes (Maintenance::stop on its
// exit). A shared server outlives its clients, so it keeps this per session
// and fences a session's admissions when the session ends: an agent that
// went away after being admitted may have run the effect, and must not have
// it taken over and run again once the lease runs out.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "core/mutex.h"
#include "effectfence/fence.h"

namespace effectfence::mcp {

// Which session holds each ticket, for all the sessions of one server.
class AdmissionOwners {
 public:
  explicit AdmissionOwners(Fence& fence) : fence_(fence) {}

  uint64_t new_session();
  // The ticket is held by session: issued through it (fence_prepare
  // answered fresh) or kept alive through it (fence_heartbeat extended it,
  // e.g. from a client that reconnected). A ticket has one holder: the
  // session that last did either.
  void held(uint64_t session, const Ticket& ticket);
  // The ticket's outcome is settled (committed, aborted, or it no longer
  // holds its intent), through whichever session.
  void settled(const Ticket& ticket);
  size_t count(uint64_t session) const;
  // Moves every intent still held by one of session's tickets to unknown
  // (tickets that no longer hold their intent are left alone) and forgets
  // them. Returns how many were fenced. Call once the session's calls finished.
  int64_t fence_session(uint64_t session, const std::string& why);

 private:
  struct Holding {
    uint64_t session = 0;
    Ticket ticket;
  };
  Fence& fence_;
  mutable Mutex mutex_;
  uint64_t next_session_ GUARDED_BY(mutex_) = 0;
  std::map<std::string, Holding> by_token_ GUARDED_BY(mutex_);
};

// One session's view, handed to its fence tools.
class SessionAdmissions {
 public:
  explicit SessionAdmissions(std::shared_ptr<AdmissionOwners> owners)
      : owners_(std::move(owners)), session_(owners_->new_session()) {}

  void held(const Ticket& ticket) { owners_->held(session_, ticket); }
  void settled(const Ticket& ticket) { owners_->settled(ticket); }
  size_t count() const { return owners_->count(session_); }
  int64_t fence_all(const std::string& why) { return owners_->fence_session(session_, why); }

 private:
  std::shared_ptr<AdmissionOwners> owners_;
  uint64_t session_;
};

}  // namespace effectfence::mcp
