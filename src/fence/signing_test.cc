// Settings::signer: every certificate the fence records is signed in the
// commit's transaction (SQLite and, with EFFECTFENCE_TEST_LEDGER, PostgreSQL).
#include <string>

#include <catch2/catch.hpp>

#include "core/signing.h"
#include "support/fence_helpers.h"

namespace effectfence {
namespace {

using namespace testing;

Certificate committed_cert(Fence& fence, const Ticket& t, const Json& result) {
  auto out = fence.commit(t, result);
  REQUIRE(std::holds_alternative<Certificate>(out));
  return std::get<Certificate>(out);
}

TEST_CASE("a fence with a signer signs every certificate it records, counting the unsigned history", "[fence][signing]") {
  TestLedger ledger;
  // History first: a fence without a key records an unsigned certificate.
  {
    auto plain = open_fence(ledger.settings());
    committed_cert(*plain, admitted_ticket(plain->prepare(charge("o-1"))), {{"charge_id", "ch_1"}});
  }
  CHECK(ledger.count("SELECT count(*) FROM signatures") == 0);

  const auto key = Signer::generate();
  Settings settings = ledger.settings();
  settings.signer = key;
  auto fence = open_fence(settings);
  const Certificate a = committed_cert(*fence, admitted_ticket(fence->prepare(charge("o-2"))), {{"charge_id", "ch_2"}});
  const Certificate b = committed_cert(*fence, admitted_ticket(fence->prepare(charge("o-3"))), {{"charge_id", "ch_3"}});

  CHECK(ledger.count("SELECT count(*) FROM signatures") == 2);
  CHECK(ledger.count("SELECT count(*) FROM signatures WHERE unsigned_before = 1") == 2);
  const auto pub = *PublicKey::from_pem(key->public_key_pem());
  for (const Certificate& c : {a, b}) {
    INFO(c.intent);
    CHECK(ledger.text("SELECT key_id FROM signatures WHERE certificate = '" + c.hash + "'") == key->key_id());
    const std::string sig = ledger.text("SELECT signature FROM signatures WHERE certificate = '" + c.hash + "'");
    CHECK(pub.verifies(c.hash, 1, sig));
    CHECK_FALSE(pub.verifies(c.hash == a.hash ? b.hash : a.hash, 1, sig));  // negative control
  }
  // A replay records nothing, and signs nothing.
  REQUIRE(std::holds_alternative<Replayed>(fence->prepare(charge("o-2"))));
  CHECK(ledger.count("SELECT count(*) FROM signatures") == 2);
}

}  // namespace
}  // namespace effectfence
