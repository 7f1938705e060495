// A PostgreSQL server that stops answering without going down (a hung host,
// a paused VM): its processes are frozen with SIGSTOP while decisions are
// under way, then thawed. Runs against a cluster of its own (suite.cmake):
// freezing a server freezes every test connected to it.
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "effectfence/refusal_text.h"
#include "integration/serve_process.h"
#include "postgres/frozen_server.h"
#include "support/fence_helpers.h"
#include "support/scoped_env.h"
#include "support/test_ledger.h"

using namespace effectfence;
using namespace effectfence::testing;

namespace {

// Long enough to see a decision asleep in its COMMIT and freeze it there.
constexpr int kCommitSleepSeconds = 3;
// How long a frozen call is watched for an answer; the windows of one test
// add up to well under the 10 s a new connection may wait for the server,
// so every call of it is held, none refused for want of a connection.
constexpr auto kQuietWindow = std::chrono::milliseconds(2500);
constexpr auto kAnswerAfterThaw = std::chrono::seconds(20);

// Makes the COMMIT of every decision that records an event sleep: a decision
// caught there is in the middle, its rows written and its locks held.
void hold_commits(TestLedger& ledger) {
  ledger.exec("CREATE FUNCTION hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(" +
              std::to_string(kCommitSleepSeconds) + "); RETURN NULL; END $$");
  ledger.exec("CREATE CONSTRAINT TRIGGER hold_commit AFTER INSERT ON events DEFERRABLE INITIALLY DEFERRED "
              "FOR EACH ROW EXECUTE FUNCTION hold_commit()");
}

// The ledger's URL, its connections named so pg_stat_activity tells them apart.
std::string named(const TestLedger& ledger, const std::string& application) {
  return ledger.where() + "&application_name=" + application;
}

void wait_for_commit_asleep(TestLedger& ledger, const std::string& application) {
  const std::string asleep = "SELECT count(*) FROM pg_stat_activity WHERE application_name = '" + application +
                             "' AND wait_event = 'PgSleep'";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ledger.count(asleep) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(ledger.count(asleep) == 1);
}

Json prepare_call(const Json& id, const std::string& intent) {
  return Json{{"jsonrpc", "2.0"},
              {"id", id},
              {"method", "tools/call"},
              {"params",
               {{"name", "fence_prepare"},
                {"arguments",
                 {{"intent", intent}, {"domain", "order:" + intent}, {"tool", "charge"},
                  {"args", {{"order", intent}}}, {"agent", "agent-a"}}}}}};
}

int64_t admissions(TestLedger& ledger, const std::string& intent) {
  return ledger.count("SELECT count(*) FROM events WHERE intent = '" + intent + "' AND kind = 'admitted'");
}

}  // namespace

TEST_CASE("a PostgreSQL server frozen in the middle of a decision holds the call until it answers, and admits "
          "nothing meanwhile",
          "[postgres][frozen]") {
  TestLedger ledger;
  REQUIRE(ledger.is_postgres());
  ServeProcess first({"serve", "--db", named(ledger, "frozen-first")});
  ServeProcess second({"serve", "--db", named(ledger, "frozen-second")});
  first.initialize();  // answered once serve has opened the ledger, so its tables exist
  second.initialize();
  hold_commits(ledger);

  first.send(prepare_call("first", "pay-1"));
  wait_for_commit_asleep(ledger, "frozen-first");
  {
    FrozenServer frozen(ledger.where());
    CHECK(frozen.processes() > 1);  // its backends, not the postmaster alone
    // Held: no answer at all, neither an admission nor an error.
    CHECK_FALSE(first.next_line(kQuietWindow));
    // The same intent through another replica, on a connection of its own: held too.
    second.send(prepare_call("second", "pay-1"));
    CHECK_FALSE(second.next_line(kQuietWindow));
    CHECK_FALSE(first.next_line(std::chrono::milliseconds(0)));
    REQUIRE(frozen.all_stopped());  // the windows above were frozen throughout
  }
  const Json held = first.response_to("first", kAnswerAfterThaw)["result"]["structuredContent"];
  const Json duplicate = second.response_to("second", kAnswerAfterThaw)["result"]["structuredContent"];
  CHECK(held["status"] == "fresh");
  CHECK(duplicate["status"] == "refused");
  CHECK(duplicate["reason"] == "in_flight");
  CHECK(admissions(ledger, "pay-1") == 1);
}

TEST_CASE("while a PostgreSQL server is frozen, a decision that needs a new connection is refused when the "
          "connection attempt gives up, and nothing of it is recorded",
          "[postgres][frozen]") {
  ScopedEnv short_bound(Env{{"PGCONNECT_TIMEOUT", "2"}});  // the default's 10 s, shortened for the test
  TestLedger ledger;
  REQUIRE(ledger.is_postgres());
  Settings settings = ledger.settings();
  settings.ledger_path = named(ledger, "frozen-pool");
  auto fence = open_fence(settings);  // its pool holds the one connection it opened with
  hold_commits(ledger);

  // The pooled connection is taken by a decision caught in its COMMIT.
  std::future<PrepareOutcome> held = std::async(std::launch::async, [&] { return fence->prepare(charge("pay-held")); });
  std::future<PrepareOutcome> needs_connection;
  wait_for_commit_asleep(ledger, "frozen-pool");
  {
    FrozenServer frozen(ledger.where());
    needs_connection = std::async(std::launch::async, [&] { return fence->prepare(charge("pay-new")); });
    REQUIRE(needs_connection.wait_for(std::chrono::seconds(15)) == std::future_status::ready);
    CHECK(frozen.all_stopped());  // refused while the server was still frozen
    const PrepareOutcome refused = needs_connection.get();
    REQUIRE(refusal_reason(refused) == Reason::ledger_error);
    CHECK_THAT(explain(std::get<Refusal>(refused), Step::prepare), Catch::Contains("nothing was decided"));
    CHECK(held.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);  // still held
  }
  REQUIRE(held.wait_for(kAnswerAfterThaw) == std::future_status::ready);
  CHECK(std::string(outcome_name(held.get())) == "admitted");
  CHECK(admissions(ledger, "pay-held") == 1);
  CHECK(ledger.count("SELECT count(*) FROM intents WHERE intent = 'pay-new'") == 0);
  CHECK(ledger.count("SELECT count(*) FROM events WHERE intent = 'pay-new'") == 0);
  // Nothing was decided, so the same call now is a first attempt.
  CHECK(std::string(outcome_name(fence->prepare(charge("pay-new")))) == "admitted");
}
