// The library example from README.md, kept compiling and working.
#include <string>

#include <catch2/catch.hpp>

#include "effectfence/fence.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"

using namespace effectfence;

TEST_CASE("the README's library example runs the effect once", "[fence][readme]") {
  effectfence::testing::TempDir dir;
  // The README opens the ledger the environment names.
  const std::string ledger = dir.file("ledger.sqlite");
  effectfence::testing::ScopedEnv env(effectfence::testing::Env{{"EFFECTFENCE_LEDGER", ledger}});
  int charges = 0;
  auto run_the_charge = [&] { return Json{{"charge_id", "ch_" + std::to_string(++charges)}}; };
  Json used;
  auto use = [&](const Json& result) { used = result; };
  std::string logged;
  auto log = [&](const std::string& message) { logged = message; };

  auto opened = Fence::open(Settings::from_environment());
  if (auto* error = std::get_if<OpenError>(&opened)) FAIL(error->message);
  Fence& fence = *std::get<std::unique_ptr<Fence>>(opened);
  CHECK_THAT(fence.describe_ledger(), Catch::Contains(ledger));
  for (int attempt = 0; attempt < 3; ++attempt) {
    PrepareRequest charge;
    charge.intent = "charge:order-123";  // the logical action: stable across retries
    charge.domain = "order:123";         // its contention scope
    charge.tool = "charge";
    charge.args = {{"order", "123"}, {"amount_cents", 4900}};
    charge.agent = "billing-agent";
    PrepareOutcome p = fence.prepare(charge);
    if (auto* admitted = std::get_if<Admitted>(&p)) {
      Json receipt = run_the_charge();
      CommitOutcome c = fence.commit(admitted->ticket, receipt);
      for (int i = 0; i < 10 && is_ledger_trouble(c); ++i) c = fence.commit(admitted->ticket, receipt);
      CHECK(std::holds_alternative<Certificate>(c));
    } else if (auto* replayed = std::get_if<Replayed>(&p)) {
      use(replayed->cert.result);
    } else {
      log(std::get<Refusal>(p).message);
    }
  }
  CHECK(charges == 1);
  // What the retry loop keys on.
  CHECK(is_ledger_trouble(CommitOutcome{Refusal{Reason::ledger_busy, "locked", {}}}));
  CHECK(is_ledger_trouble(PrepareOutcome{Refusal{Reason::ledger_error, "failed", {}}}));
  CHECK_FALSE(is_ledger_trouble(PrepareOutcome{Refusal{Reason::in_flight, "held", {}}}));
  CHECK(used == Json{{"charge_id", "ch_1"}});
  CHECK(logged.empty());
}
