// The fast path's certificate cache stays bounded and keeps the newest
// certificates: a long run's memory levels off, and a late duplicate of a
// recent intent is still answered without the ledger.
#include "effectfence/refusal_text.h"
#include "fence/fast_path.h"

#include <catch2/catch.hpp>

using namespace effectfence;

namespace {

rules::Attempt attempt(const std::string& intent) {
  rules::Attempt a;
  a.request.intent = intent;
  a.request.domain = "d";
  a.request.tool = "t";
  a.payload_hash = "payload-of-" + intent;
  return a;
}

// Runs intent through the fast path as serve does: enter, the ledger
// admits, leave, the effect commits.
void admit_and_commit(FastPath& fast, const std::string& intent, int64_t now) {
  const rules::Attempt a = attempt(intent);
  const FastPath::Entry entry = fast.enter(a, now, 1);
  REQUIRE_FALSE(entry.decided);
  Ticket ticket;
  ticket.intent = intent;
  ticket.domain = "d";
  ticket.token = "token-" + intent;
  fast.leave(a, entry, Admitted{ticket}, now);
  Certificate cert;
  cert.intent = intent;
  cert.tool = "t";
  cert.hash = "hash-" + intent;
  fast.committed(ticket, cert, now, 1);
}

bool replayed_from_memory(FastPath& fast, const std::string& intent, int64_t now) {
  const FastPath::Entry entry = fast.enter(attempt(intent), now, 1);
  if (entry.decided) return std::holds_alternative<Replayed>(*entry.decided);
  fast.leave(attempt(intent), entry, Refusal{Reason::in_flight, Cause::none, {}}, now);
  return false;
}

}  // namespace

TEST_CASE("fast path: the certificate cache is bounded and keeps the newest", "[fast_path]") {
  FastPath fast;
  const size_t bound = FastPath::kMaxCachedPerShard * 16;
  const size_t intents = bound * 3;
  for (size_t i = 0; i < intents; ++i) admit_and_commit(fast, "intent-" + std::to_string(i), 1000);

  CHECK(fast.cached_certificates() <= bound);
  CHECK(fast.cached_certificates() >= bound / 2);  // a hash skew leaves some shards below their bound
  CHECK(fast.tracked_intents() == fast.cached_certificates());  // nothing but the cache is left behind
  CHECK(fast.held_tickets().empty());

  // The newest are answered from memory; the oldest were evicted for them.
  CHECK(replayed_from_memory(fast, "intent-" + std::to_string(intents - 1), 1000));
  CHECK(replayed_from_memory(fast, "intent-" + std::to_string(intents - 2), 1000));
  CHECK_FALSE(replayed_from_memory(fast, "intent-0", 1000));
  CHECK(fast.tracked_intents() == fast.cached_certificates());
}

TEST_CASE("fast path: an expired certificate leaves the cache when asked for", "[fast_path]") {
  FastPath fast;
  fast.set_cache_ttl(10);
  admit_and_commit(fast, "late", 1000);
  REQUIRE(fast.cached_certificates() == 1);
  CHECK(replayed_from_memory(fast, "late", 1005));
  CHECK_FALSE(replayed_from_memory(fast, "late", 1011));
  CHECK(fast.cached_certificates() == 0);
  CHECK(fast.tracked_intents() == 0);
}
