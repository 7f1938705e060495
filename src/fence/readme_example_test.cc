// The library example from README.md, kept compiling and working.
#include <catch2/catch.hpp>

#include "effectfence/fence.h"
#include "support/temp_dir.h"

using namespace effectfence;

TEST_CASE("the README's library example runs the effect once", "[fence][readme]") {
  effectfence::testing::TempDir dir;
  Settings settings;
  settings.ledger_path = dir.file("ledger.sqlite");
  int charges = 0;
  auto run_the_charge = [&] { return Json{{"charge_id", "ch_" + std::to_string(++charges)}}; };
  Json used;
  auto use = [&](const Json& result) { used = result; };
  std::string logged;
  auto log = [&](const std::string& message) { logged = message; };

  auto opened = Fence::open(settings);
  REQUIRE(std::holds_alternative<std::unique_ptr<Fence>>(opened));
  Fence& fence = *std::get<std::unique_ptr<Fence>>(opened);
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
      fence.commit(admitted->ticket, receipt);
    } else if (auto* replayed = std::get_if<Replayed>(&p)) {
      use(replayed->cert.result);
    } else {
      log(std::get<Refusal>(p).message);
    }
  }
  CHECK(charges == 1);
  CHECK(used == Json{{"charge_id", "ch_1"}});
  CHECK(logged.empty());
}
