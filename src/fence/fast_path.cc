#include "fence/fast_path.h"

namespace effectfence {
namespace {

Refusal same_instant_duplicate(const std::string& intent) {
  return Refusal{Reason::in_flight,
                 "an identical attempt of intent '" + intent + "' is in flight in this process; do not run "
                 "the tool. Retry fence_prepare in a few seconds to get its recorded result.",
                 {{"intent", intent}}};
}

Refusal mismatch(const std::string& intent) {
  return Refusal{Reason::payload_mismatch,
                 "intent '" + intent + "' was recorded for a different action (other tool or arguments). "
                 "Do not run the tool: one intent id names one action; use a new intent id for a "
                 "different action.",
                 {{"intent", intent}}};
}

}  // namespace

std::optional<PrepareOutcome> FastPath::answer_from_slot(IntentSlot& slot, const rules::Attempt& a,
                                                         int64_t now, uint64_t epoch) {
  if (slot.cert && (slot.cert_expires_at <= now || slot.cert_epoch != epoch)) slot.cert.reset();
  if (slot.cert) {
    if (slot.cert_payload != a.payload_hash) return mismatch(a.request.intent);
    return Replayed{*slot.cert};
  }
  if (slot.held && slot.held->lease_expires_at_ms <= now) slot.held.reset();
  if (slot.held) {
    if (slot.held_payload != a.payload_hash) return mismatch(a.request.intent);
    return same_instant_duplicate(a.request.intent);
  }
  if (slot.deciding && slot.deciding_payload == a.payload_hash) return same_instant_duplicate(a.request.intent);
  return std::nullopt;
}

std::optional<int64_t> FastPath::own_domain_expectation(const rules::Attempt& a) const {
  for (const ReadSetEntry& e : a.request.read_set) {
    if (e.domain == a.request.domain) return e.seq;
  }
  return std::nullopt;
}

bool FastPath::claim_domain(const std::string& domain, int64_t seq) {
  Shard& s = shard_for("domain\n" + domain);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.deciding_domains[domain].insert(seq).second;
}

void FastPath::release_domain(const std::string& domain, int64_t seq) {
  Shard& s = shard_for("domain\n" + domain);
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.deciding_domains.find(domain);
  if (it == s.deciding_domains.end()) return;
  it->second.erase(seq);
  if (it->second.empty()) s.deciding_domains.erase(it);
}

void FastPath::release_intent(const std::string& intent) {
  Shard& s = shard_for(intent);
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.intents.find(intent);
  if (it == s.intents.end()) return;
  it->second.deciding = false;
  if (it->second.empty()) s.intents.erase(it);
}

FastPath::Entry FastPath::enter(const rules::Attempt& a, int64_t now, uint64_t epoch) {
  Entry entry;
  {
    Shard& s = shard_for(a.request.intent);
    std::lock_guard<std::mutex> lock(s.mu);
    IntentSlot& slot = s.intents[a.request.intent];
    entry.decided = answer_from_slot(slot, a, now, epoch);
    if (entry.decided) {
      if (slot.empty()) s.intents.erase(a.request.intent);
      return entry;
    }
    // A same-intent attempt with another payload is left to the ledger,
    // which knows which payload was recorded.
    if (!slot.deciding) {
      slot.deciding = true;
      slot.deciding_payload = a.payload_hash;
      entry.owns_intent = true;
    }
  }
  if (auto expected = own_domain_expectation(a)) {
    if (!claim_domain(a.request.domain, *expected)) {
      if (entry.owns_intent) release_intent(a.request.intent);
      entry.owns_intent = false;
      entry.decided = Refusal{
          Reason::domain_race,
          "another attempt on domain '" + a.request.domain + "' that read it at seq " + std::to_string(*expected) +
              " is being decided at this same instant; at most one of them can act. Do not run the tool: "
              "re-read the domain and decide again.",
          {{"domain", a.request.domain}, {"expected", *expected}}};
      return entry;
    }
    entry.owns_domain_seq = expected;
  }
  return entry;
}

void FastPath::leave(const rules::Attempt& a, const Entry& entry, const PrepareOutcome& outcome, int64_t now,
                     uint64_t epoch) {
  if (entry.owns_domain_seq) release_domain(a.request.domain, *entry.owns_domain_seq);
  Shard& s = shard_for(a.request.intent);
  std::lock_guard<std::mutex> lock(s.mu);
  IntentSlot& slot = s.intents[a.request.intent];
  if (entry.owns_intent) slot.deciding = false;
  if (auto* admitted = std::get_if<Admitted>(&outcome)) {
    slot.held = admitted->ticket;
    slot.held_payload = a.payload_hash;
  } else if (auto* replayed = std::get_if<Replayed>(&outcome)) {
    if (s.intents.size() < kMaxCachedPerShard) {
      slot.cert = replayed->cert;
      slot.cert_payload = a.payload_hash;
      slot.cert_expires_at = now + cache_ttl_ms_;
      slot.cert_epoch = epoch;
    }
  }
  if (slot.empty()) s.intents.erase(a.request.intent);
}

void FastPath::extended(const Ticket& ticket, int64_t lease_expires_at_ms) {
  Shard& s = shard_for(ticket.intent);
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.intents.find(ticket.intent);
  if (it != s.intents.end() && it->second.held && it->second.held->token == ticket.token) {
    it->second.held->lease_expires_at_ms = lease_expires_at_ms;
  }
}

void FastPath::committed(const Ticket& ticket, const Certificate& cert, int64_t now, uint64_t epoch) {
  Shard& s = shard_for(ticket.intent);
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.intents.find(ticket.intent);
  if (it == s.intents.end()) return;
  IntentSlot& slot = it->second;
  if (slot.held && slot.held->token == ticket.token) {
    if (s.intents.size() < kMaxCachedPerShard) {
      slot.cert = cert;
      slot.cert_payload = slot.held_payload;
      slot.cert_expires_at = now + cache_ttl_ms_;
      slot.cert_epoch = epoch;
    }
    slot.held.reset();
  }
  if (slot.empty()) s.intents.erase(it);
}

void FastPath::released(const Ticket& ticket) {
  Shard& s = shard_for(ticket.intent);
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.intents.find(ticket.intent);
  if (it == s.intents.end()) return;
  if (it->second.held && it->second.held->token == ticket.token) it->second.held.reset();
  if (it->second.empty()) s.intents.erase(it);
}

std::vector<Ticket> FastPath::held_tickets() const {
  std::vector<Ticket> tickets;
  for (const Shard& s : shards_) {
    std::lock_guard<std::mutex> lock(s.mu);
    for (const auto& [intent, slot] : s.intents) {
      if (slot.held) tickets.push_back(*slot.held);
    }
  }
  return tickets;
}

}  // namespace effectfence
