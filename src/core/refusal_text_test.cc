#include "effectfence/refusal_text.h"

#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

using namespace effectfence;

namespace {

// Every situation a refusal can report, with the facts its rule records.
const std::vector<Refusal>& every_situation() {
  static const std::vector<Refusal> all = {
      {Reason::invalid_request, Cause::bad_argument, {{"field", "intent"}, {"problem", "empty"}}},
      {Reason::invalid_request, Cause::seq_never_reached, {{"domain", "d"}, {"expected", 9}, {"actual", 2}}},
      {Reason::invalid_request, Cause::unknown_parent, {{"parent", "ab12"}}},
      {Reason::invalid_request, Cause::clear_refused, {{"intent", "i"}, {"state", "done"}, {"ledger_said", "no"}}},
      {Reason::in_flight, Cause::held, {{"intent", "i"}, {"holder_agent", "a"}, {"lease_ends_in_ms", 1500}}},
      {Reason::in_flight, Cause::held_past_lease, {{"intent", "i"}, {"holder_agent", "a"}, {"holder", "pid 7"}}},
      {Reason::in_flight, Cause::same_instant, {{"intent", "i"}}},
      {Reason::domain_race, Cause::domain_in_flight, {{"domain", "d"}, {"expected", 1}, {"actual", 1}}},
      {Reason::domain_race, Cause::domain_moved, {{"domain", "d"}}},
      {Reason::stale_read_set, Cause::read_set_moved, {{"domain", "d"}, {"expected", 1}, {"actual", 2}}},
      {Reason::prior_failure, Cause::fenced, {{"intent", "i"}, {"state", "unknown"}, {"recorded_reason", "r"}}},
      {Reason::payload_mismatch, Cause::other_action, {{"intent", "i"}, {"recorded_tool", "t"}, {"requested_tool", "u"}}},
      {Reason::ticket_invalid, Cause::not_issued, {{"intent", "i"}, {"domain", "d"}, {"seq", 1}, {"generation", 1}}},
      {Reason::lease_lost, Cause::no_attempt, {{"intent", "i"}}},
      {Reason::ticket_invalid, Cause::token_reissued, {{"intent", "i"}, {"current_generation", 2}}},
      {Reason::lease_lost, Cause::taken_over, {{"intent", "i"}, {"current_generation", 2}, {"holder_agent", "b"}}},
      {Reason::ticket_invalid, Cause::ticket_edited, {{"intent", "i"}}},
      {Reason::ticket_invalid, Cause::ticket_has_nul, Json::object()},
      {Reason::ticket_invalid, Cause::ticket_unreadable, Json::object()},
      {Reason::ticket_invalid, Cause::other_result, {{"intent", "i"}, {"certificate", "ab"}}},
      {Reason::lease_lost, Cause::outcome_recorded, {{"intent", "i"}, {"state", "failed"}}},
      {Reason::lease_lost, Cause::not_in_flight, {{"intent", "i"}, {"state", "done"}}},
      {Reason::ledger_busy, Cause::locked, {{"engine", "sqlite"}}},
      {Reason::ledger_error, Cause::storage_failed, {{"step", "decision failed"}, {"error", "disk I/O error"}}},
      {Reason::ledger_error, Cause::disk_failed, {{"step", "commit"}, {"error", "disk I/O error"}}},
      {Reason::ledger_error, Cause::undo_failed, Json::object()},
      {Reason::ledger_error, Cause::file_replaced, {{"path", "/l.sqlite"}}},
      {Reason::ledger_error, Cause::rolled_back, Json::object()},
      {Reason::ledger_error, Cause::closing, Json::object()},
      {Reason::ledger_error, Cause::stopping, {{"intent", "i"}}},
      {Reason::ledger_error, Cause::outcome_unknown, {{"ledger", "postgresql://h/db"}, {"error", "EOF"}}},
  };
  return all;
}

}  // namespace

TEST_CASE("every situation a refusal reports has its own words", "[refusal_text]") {
  std::set<std::string> seen;
  for (const Refusal& refusal : every_situation()) {
    for (Step step : {Step::prepare, Step::commit, Step::abort, Step::heartbeat, Step::clear}) {
      const std::string text = explain(refusal, step);
      INFO(text);
      CHECK_THAT(text, !Catch::StartsWith("refused: "));
      CHECK_FALSE(advise(refusal.reason, step).empty());
    }
    seen.insert(explain(refusal, Step::prepare));
  }
  CHECK(seen.size() == every_situation().size());  // no two situations read alike
  // Negative control: a refusal that names no situation gets only its reason.
  CHECK(explain(Refusal{Reason::in_flight, Cause::none}, Step::prepare) == "refused: in_flight");
}

TEST_CASE("the words carry the facts, and the step that was refused", "[refusal_text]") {
  const Refusal stale{Reason::stale_read_set, Cause::read_set_moved, {{"domain", "cluster:a"}, {"expected", 3}, {"actual", 5}}};
  CHECK(explain(stale, Step::prepare) ==
        "domain 'cluster:a' has moved since you read it (you decided at seq 3, it is now at 5). Do not run the "
        "tool: re-read the domain (fence_status) and decide again.");
  Refusal after = stale;
  after.detail["after_effect"] = true;
  after.detail["own_domain"] = true;
  CHECK_THAT(explain(after, Step::commit), Catch::StartsWith("the effect was run but not certified: ") &&
                                               Catch::Contains("this attempt's admission took seq 3") &&
                                               Catch::EndsWith("fenced as failed for an operator to reconcile."));

  const Refusal lost{Reason::lease_lost, Cause::taken_over,
                     {{"intent", "charge:1"}, {"current_generation", 4}, {"holder_agent", "b"}, {"state", "in_flight"}}};
  CHECK(explain(lost, Step::commit) ==
        "fence_commit refused: your lease on intent 'charge:1' was lost; generation 4 (agent b) now holds it, state "
        "in_flight. Your fence_commit was not recorded as the outcome.");
  CHECK_THAT(explain(lost, Step::heartbeat), Catch::StartsWith("fence_heartbeat refused:"));

  const Refusal unknown{Reason::lease_lost, Cause::not_in_flight, {{"intent", "i"}, {"state", "unknown"}}};
  CHECK_THAT(explain(unknown, Step::heartbeat), Catch::Contains("fence_commit with this ticket still records it"));
  CHECK_THAT(explain(unknown, Step::abort), !Catch::Contains("still records it"));

  CHECK(explain(Refusal{Reason::ledger_error, Cause::storage_failed,
                        {{"ledger", "postgresql://h/db"}, {"step", "read failed"}, {"error", "timeout"}}},
                Step::read) == "ledger postgresql://h/db: read failed: timeout; nothing was decided");
  CHECK(explain(Refusal{Reason::in_flight, Cause::held, {{"intent", "i"}, {"holder_agent", "a"}, {"lease_ends_in_ms", 1001}}},
                Step::prepare) ==
        "another attempt of intent 'i' (agent a) is in flight; do not run the tool. Retry fence_prepare in a few "
        "seconds: you will get its recorded result, or the lease expires in 2 s.");
}

TEST_CASE("advice depends on whether the effect may have run", "[refusal_text]") {
  CHECK_THAT(advise(Reason::stale_read_set, Step::prepare), Catch::Contains("decide again"));
  CHECK_THAT(advise(Reason::stale_read_set, Step::commit), Catch::Contains("tell an operator"));
  CHECK_THAT(advise(Reason::ledger_busy, Step::commit), Catch::Contains("retry fence_commit with the same ticket"));
  CHECK_THAT(advise(Reason::ledger_busy, Step::prepare), Catch::Contains("do not run the tool yet"));
}

TEST_CASE("storage failures are the ones an operator must see", "[refusal_text]") {
  for (Cause c : {Cause::storage_failed, Cause::disk_failed, Cause::undo_failed, Cause::file_replaced,
                  Cause::rolled_back, Cause::outcome_unknown}) {
    CHECK(is_storage_failure(c));
  }
  for (Cause c : {Cause::none, Cause::closing, Cause::stopping, Cause::locked, Cause::held}) {
    CHECK_FALSE(is_storage_failure(c));
  }
}
