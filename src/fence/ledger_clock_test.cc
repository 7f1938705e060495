// Leases are decided by the ledger's clock, never by a replica's own: a
// replica whose clock runs far ahead cannot take over a live lease, and one
// whose clock runs behind still sees an expired lease as expired.
#include <chrono>
#include <thread>

#include <catch2/catch.hpp>

#include "support/fence_helpers.h"

using namespace effectfence;
using namespace effectfence::testing;

namespace {

constexpr int64_t kYearMs = 365LL * 86'400'000;

Settings with_skewed_clock(Settings s, int64_t skew_ms) {
  s.clock_ms = [skew_ms] {
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count() + skew_ms;
  };
  return s;
}

}  // namespace

TEST_CASE("a replica whose clock is set far ahead cannot steal a live lease", "[fence][lease][clock]") {
  TestLedger ledger;
  Settings s = ledger.settings();
  s.lease_ttl_ms = 60'000;
  auto holder = open_fence(s);
  auto ahead = open_fence(with_skewed_clock(s, kYearMs));
  const Ticket t = admitted_ticket(holder->prepare(charge("skew")));
  holder_on_another_host(ledger, "skew");  // so only the lease keeps it: a live holder here would anyway

  auto stolen = ahead->prepare(charge("skew", 4900, "agent-ahead"));
  CHECK(refusal_reason(stolen) == Reason::in_flight);
  CHECK(std::get<Refusal>(stolen).detail["lease_expires_at_ms"] == t.lease_expires_at_ms);

  const Certificate cert = std::get<Certificate>(holder->commit(t, {{"charge_id", "ch_skew"}}));
  auto replay = ahead->prepare(charge("skew", 4900, "agent-ahead"));
  REQUIRE(std::holds_alternative<Replayed>(replay));
  CHECK(std::get<Replayed>(replay).cert.hash == cert.hash);
  CHECK(ledger.count("SELECT count(*) FROM events WHERE kind = 'takeover'") == 0);
}

TEST_CASE("a replica whose clock runs behind still takes over an expired lease", "[fence][lease][clock]") {
  TestLedger ledger;
  Settings s = ledger.settings();
  s.lease_ttl_ms = 300;
  auto holder = open_fence(s);
  auto behind = open_fence(with_skewed_clock(s, -kYearMs));
  const Ticket t = admitted_ticket(holder->prepare(charge("late")));
  holder_on_another_host(ledger, "late");  // a live holder here would keep it
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const Ticket taken = admitted_ticket(behind->prepare(charge("late", 4900, "agent-behind")));
  CHECK(taken.generation == t.generation + 1);
  auto zombie = holder->commit(t, {{"charge_id", "zombie"}});
  REQUIRE(std::holds_alternative<Refusal>(zombie));
  CHECK(std::get<Refusal>(zombie).reason == Reason::lease_lost);
}
