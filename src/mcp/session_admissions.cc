#include "mcp/session_admissions.h"

#include <vector>

namespace effectfence::mcp {

uint64_t AdmissionOwners::new_session() {
  MutexLock lock(&mutex_);
  return ++next_session_;
}

void AdmissionOwners::held(uint64_t session, const Ticket& ticket) {
  MutexLock lock(&mutex_);
  by_token_[ticket.token] = Holding{session, ticket};
}

void AdmissionOwners::settled(const Ticket& ticket) {
  MutexLock lock(&mutex_);
  const auto it = by_token_.find(ticket.token);
  // Only the admission itself: a ticket edited around a real token (refused
  // lease_lost, which "settles") must not make its session forget it.
  if (it == by_token_.end() || !it->second.ticket.same_attempt(ticket)) return;
  by_token_.erase(it);
}

size_t AdmissionOwners::count(uint64_t session) const {
  MutexLock lock(&mutex_);
  size_t n = 0;
  for (const auto& [token, holding] : by_token_) n += holding.session == session ? 1 : 0;
  return n;
}

int64_t AdmissionOwners::fence_session(uint64_t session, const std::string& why) {
  std::vector<Ticket> left;
  {
    MutexLock lock(&mutex_);
    for (auto it = by_token_.begin(); it != by_token_.end();) {
      if (it->second.session != session) {
        ++it;
        continue;
      }
      left.push_back(it->second.ticket);
      it = by_token_.erase(it);
    }
  }
  int64_t fenced = 0;
  for (const Ticket& ticket : left) {
    if (fence_.fence_unknown(ticket, why)) ++fenced;
  }
  return fenced;
}

}  // namespace effectfence::mcp
