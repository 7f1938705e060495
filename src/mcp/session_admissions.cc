#include "mcp/session_admissions.h"

#include <vector>

namespace effectfence::mcp {

void SessionAdmissions::held(const Ticket& ticket) {
  std::lock_guard<std::mutex> lock(mutex_);
  tickets_[ticket.token] = ticket;
}

void SessionAdmissions::resolved(const Ticket& ticket) {
  std::lock_guard<std::mutex> lock(mutex_);
  tickets_.erase(ticket.token);
}

size_t SessionAdmissions::count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tickets_.size();
}

int64_t SessionAdmissions::fence_all(const std::string& why) {
  std::vector<Ticket> left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [token, ticket] : tickets_) left.push_back(ticket);
    tickets_.clear();
  }
  int64_t fenced = 0;
  for (const Ticket& ticket : left) {
    if (fence_.fence_unknown(ticket, why)) ++fenced;
  }
  return fenced;
}

}  // namespace effectfence::mcp
