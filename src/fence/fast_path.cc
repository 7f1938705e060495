#include "fence/fast_path.h"

namespace effectfence {
namespace {

Refusal same_instant_duplicate(const std::string& intent) {
  return Refusal{Reason::in_flight, Cause::same_instant, {{"intent", intent}}};
}

}  // namespace

void FastPath::drop_cert(Shard& s, IntentSlot& slot) {
  if (!slot.cert) return;
  s.cert_order.erase(slot.cert_order);
  slot.cert.reset();
}

void FastPath::cache_cert(Shard& s, const std::string& intent, IntentSlot& slot, const Certificate& cert,
                          const std::string& payload, int64_t now, uint64_t epoch) {
  drop_cert(s, slot);
  while (s.cert_order.size() >= kMaxCachedPerShard) {
    auto oldest = s.intents.find(s.cert_order.front());
    drop_cert(s, oldest->second);
    if (oldest->second.empty()) s.intents.erase(oldest);
  }
  slot.cert = cert;
  slot.cert_payload = payload;
  slot.cert_expires_at = now + cache_ttl_ms_;
  slot.cert_epoch = epoch;
  slot.cert_order = s.cert_order.insert(s.cert_order.end(), intent);
}

std::optional<PrepareOutcome> FastPath::answer_from_slot(Shard& s, IntentSlot& slot, const rules::Attempt& a,
                                                         int64_t now, uint64_t epoch) {
  if (!answers_from_memory_) return std::nullopt;
  if (slot.cert && (slot.cert_expires_at <= now || slot.cert_epoch != epoch)) drop_cert(s, slot);
  if (slot.cert) {
    if (slot.cert_payload != a.payload_hash) {
      return rules::payload_mismatch(a.request.intent, slot.cert->tool, a.request.tool);
    }
    return Replayed{*slot.cert};
  }
  // A held intent is not answered from memory: its ticket may have been
  // committed, aborted (and cleared) through another process since.
  if (slot.deciding && slot.deciding_payload == a.payload_hash) return same_instant_duplicate(a.request.intent);
  return std::nullopt;
}

FastPath::Entry FastPath::enter(const rules::Attempt& a, int64_t now, uint64_t epoch) {
  Entry entry;
  entry.epoch = epoch;
  {
    Shard& s = shard_for(a.request.intent);
    MutexLock lock(&s.mu);
    IntentSlot& slot = s.intents[a.request.intent];
    entry.decided = answer_from_slot(s, slot, a, now, epoch);
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
  return entry;
}

void FastPath::leave(const rules::Attempt& a, const Entry& entry, const PrepareOutcome& outcome, int64_t now) {
  Shard& s = shard_for(a.request.intent);
  MutexLock lock(&s.mu);
  IntentSlot& slot = s.intents[a.request.intent];
  if (entry.owns_intent) slot.deciding = false;
  if (auto* admitted = std::get_if<Admitted>(&outcome)) {
    slot.held = admitted->ticket;
    slot.held_payload = a.payload_hash;
  } else if (auto* replayed = std::get_if<Replayed>(&outcome)) {
    cache_cert(s, a.request.intent, slot, replayed->cert, a.payload_hash, now, entry.epoch);
  }
  if (slot.empty()) s.intents.erase(a.request.intent);
}

void FastPath::committed(const Ticket& ticket, const Certificate& cert, int64_t now, uint64_t epoch_before) {
  Shard& s = shard_for(ticket.intent);
  MutexLock lock(&s.mu);
  auto it = s.intents.find(ticket.intent);
  if (it == s.intents.end()) return;
  IntentSlot& slot = it->second;
  // An edited ticket (right token, other seq) is refused as ticket_invalid
  // and must not be taken for the one this process holds.
  if (slot.held && slot.held->same_attempt(ticket)) {
    cache_cert(s, ticket.intent, slot, cert, slot.held_payload, now, epoch_before);
    slot.held.reset();
  }
  if (slot.empty()) s.intents.erase(it);
}

void FastPath::released(const Ticket& ticket) {
  Shard& s = shard_for(ticket.intent);
  MutexLock lock(&s.mu);
  auto it = s.intents.find(ticket.intent);
  if (it == s.intents.end()) return;
  if (it->second.held && it->second.held->same_attempt(ticket)) it->second.held.reset();
  if (it->second.empty()) s.intents.erase(it);
}

size_t FastPath::cached_certificates() const {
  size_t n = 0;
  for (const Shard& s : shards_) {
    MutexLock lock(&s.mu);
    n += s.cert_order.size();
  }
  return n;
}

size_t FastPath::tracked_intents() const {
  size_t n = 0;
  for (const Shard& s : shards_) {
    MutexLock lock(&s.mu);
    n += s.intents.size();
  }
  return n;
}

std::vector<Ticket> FastPath::held_tickets() const {
  std::vector<Ticket> tickets;
  for (const Shard& s : shards_) {
    MutexLock lock(&s.mu);
    for (const auto& [intent, slot] : s.intents) {
      if (slot.held) tickets.push_back(*slot.held);
    }
  }
  return tickets;
}

}  // namespace effectfence
