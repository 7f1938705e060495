#include "fence/sealed_ahead.h"

namespace effectfence {

void SealedAhead::admitted(const IntentRow& row) {
  MutexLock lock(&mu_);
  if (admissions_.size() >= kMaxEntries) admissions_.clear();
  admissions_[row.token] = row;
}

void SealedAhead::certified(const Certificate& cert) {
  MutexLock lock(&mu_);
  // The hash covers the clock, so an entry is true for good.
  if (clocks_.size() >= kMaxEntries) clocks_.clear();
  clocks_.emplace(cert.hash, cert.vector_clock);
}

void SealedAhead::forget(const Ticket& ticket) {
  MutexLock lock(&mu_);
  admissions_.erase(ticket.token);
}

std::optional<rules::Sealed> SealedAhead::seal(const Ticket& ticket, const Json& result) {
  IntentRow row;
  VectorClock parent_clock;
  {
    MutexLock lock(&mu_);
    auto found = admissions_.find(ticket.token);
    if (found == admissions_.end()) return std::nullopt;
    row = std::move(found->second);
    admissions_.erase(found);
    if (!row.parent.empty()) {
      auto clock = clocks_.find(row.parent);
      if (clock == clocks_.end()) return std::nullopt;
      parent_clock = clock->second;
    }
  }
  // A ticket that is not this admission's is the writer's to refuse.
  if (row.intent != ticket.intent || row.domain != ticket.domain || row.seq != ticket.seq ||
      row.generation != ticket.generation) {
    return std::nullopt;
  }
  JsonError error;
  auto args = parse_strict(row.args, &error, WideIntegers::as_doubles);
  if (!args) return std::nullopt;
  rules::Sealed sealed;
  sealed.from = std::move(row);
  sealed.cert = rules::certificate_of(sealed.from, std::move(*args), result, parent_clock);
  sealed.body = sealed.cert.seal();
  if (sealed.cert.hash.empty()) return std::nullopt;
  return sealed;
}

}  // namespace effectfence
