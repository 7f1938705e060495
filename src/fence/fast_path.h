// The in-process fast path: same-instant duplicates inside one process are
// answered without touching the ledger file.
//
// It only ever refuses or replays; it never admits. An admission always
// comes from a ledger transaction, which is what fences other processes.
// What it remembers:
//   - intents this process is deciding right now (a duplicate arriving at the
//     same instant is refused as in_flight);
//   - intents this process holds (admitted, not yet resolved here), to fence
//     them when it stops. Duplicates of those go to the ledger: a ticket can
//     be committed or aborted through another process, and an operator may
//     clear the intent, without this process seeing it;
//   - certificates of intents that are done. They are immutable, and the
//     cache is dropped whenever the ledger reports that another connection
//     (process or operator) changed the file (PRAGMA data_version). At most
//     kMaxCachedPerShard per shard: the oldest is evicted for a new one, so
//     memory stays bounded and the cache keeps the recent certificates, the
//     ones late duplicates ask for.
// Every answer checks the payload first, so a different action under the
// same intent is never replayed or refused as a mere duplicate.
// Read-set conflicts are left to the ledger: its decisions are serialised,
// so of several attempts that read a domain at the same sequence the first
// is admitted and the rest learn exactly how far the domain moved.
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/mutex.h"
#include "effectfence/types.h"
#include "fence/rules.h"

namespace effectfence {

class FastPath {
 public:
  struct Entry {
    std::optional<PrepareOutcome> decided;  // set iff answered without the ledger
    bool owns_intent = false;               // this attempt marked the intent as deciding
    uint64_t epoch = 0;                     // the ledger epoch before the decision was asked for
  };

  // Before the ledger. If the result has no decision, the caller asks the
  // ledger and then MUST call leave() with the same entry. A certificate
  // learnt in leave() or committed() is cached under the epoch read BEFORE
  // the ledger decided: an answer delivered late, after this process noticed
  // another connection's change, must not be cached as if it came after it.
  Entry enter(const rules::Attempt& attempt, int64_t now, uint64_t ledger_epoch);
  void leave(const rules::Attempt& attempt, const Entry& entry, const PrepareOutcome& outcome, int64_t now);

  void committed(const Ticket& ticket, const Certificate& cert, int64_t now, uint64_t epoch_before);
  // The ticket no longer holds its intent here (aborted, lost, fenced).
  void released(const Ticket& ticket);
  // Tickets admitted through this process and not yet resolved.
  std::vector<Ticket> held_tickets() const;

  void set_cache_ttl(int64_t ms) { cache_ttl_ms_ = ms; }
  // false: nothing is answered from memory (no certificate replayed, no
  // same-instant duplicate refused), every attempt goes to the ledger. For
  // a ledger that cannot say another connection changed it, where a cached
  // certificate could outlive its row (swept, the intent committed afresh
  // elsewhere) and a duplicate of a done intent must still be replayed.
  void set_answers_from_memory(bool on) { answers_from_memory_ = on; }

  // Certificates kept per shard (16 shards): 2,048 in all, about a MiB, so a
  // long run's memory levels off instead of growing with its intents.
  static constexpr size_t kMaxCachedPerShard = 128;
  // How many certificates are cached now, and how many intents are tracked.
  size_t cached_certificates() const;
  size_t tracked_intents() const;

 private:
  struct IntentSlot {
    bool deciding = false;
    std::string deciding_payload;
    std::optional<Ticket> held;
    std::string held_payload;
    std::optional<Certificate> cert;
    std::string cert_payload;
    int64_t cert_expires_at = 0;
    uint64_t cert_epoch = 0;
    std::list<std::string>::iterator cert_order;  // valid iff cert
    bool empty() const { return !deciding && !held && !cert; }
  };
  struct Shard {
    mutable Mutex mu;
    std::unordered_map<std::string, IntentSlot> intents GUARDED_BY(mu);
    std::list<std::string> cert_order GUARDED_BY(mu);  // cached intents, oldest first
  };
  static constexpr size_t kShards = 16;

  Shard& shard_for(const std::string& key) { return shards_[std::hash<std::string>{}(key) % kShards]; }
  // All three with s.mu held. cache_cert may evict the shard's oldest certificate.
  std::optional<PrepareOutcome> answer_from_slot(Shard& s, IntentSlot& slot, const rules::Attempt& attempt,
                                                 int64_t now, uint64_t epoch) REQUIRES(s.mu);
  void cache_cert(Shard& s, const std::string& intent, IntentSlot& slot, const Certificate& cert,
                  const std::string& payload, int64_t now, uint64_t epoch) REQUIRES(s.mu);
  static void drop_cert(Shard& s, IntentSlot& slot) REQUIRES(s.mu);

  std::array<Shard, kShards> shards_;
  // Set while the Fence is built, before any thread calls in: unguarded.
  bool answers_from_memory_ = true;
  int64_t cache_ttl_ms_ = 600'000;
};

}  // namespace effectfence
