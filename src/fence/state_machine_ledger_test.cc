// The ledger's own checks against the state machine's table
// (include/effectfence/state_machine.h): the CHECK lists of states and
// event kinds, and every hand edit of an intent's state. Runs on SQLite, and
// on PostgreSQL in the PostgreSQL suite (EFFECTFENCE_TEST_LEDGER).
#include <regex>
#include <set>
#include <string>

#include <catch2/catch.hpp>

#include "effectfence/state_machine.h"
#include "support/fence_helpers.h"
#include "support/test_ledger.h"

using namespace effectfence;
using namespace effectfence::testing;

namespace {

// The quoted words of `column = 'word'` in text.
std::set<std::string> quoted_after(const std::string& text, const std::string& column) {
  std::set<std::string> out;
  const std::regex pattern(column + R"(\s*(?:=|IN\s*\()\s*'([a-z_]+)')");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), pattern); it != std::sregex_iterator(); ++it) {
    out.insert((*it)[1]);
  }
  // `IN ('a', 'b', ...)` lists (PostgreSQL's constraint definitions).
  const std::regex list(column + R"(\)?\s*=\s*ANY\s*\(+ARRAY\[([^\]]*)\])");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), list); it != std::sregex_iterator(); ++it) {
    const std::string items = (*it)[1];
    const std::regex word(R"('([a-z_]+)')");
    for (auto w = std::sregex_iterator(items.begin(), items.end(), word); w != std::sregex_iterator(); ++w) {
      out.insert((*w)[1]);
    }
  }
  return out;
}

std::string check_of(TestLedger& ledger, const std::string& table, const std::string& column) {
  if (ledger.is_postgres()) {
    return ledger.text("SELECT string_agg(pg_get_constraintdef(c.oid), ' ') FROM pg_constraint c "
                       "JOIN pg_class t ON t.oid = c.conrelid WHERE t.relname = '" + table +
                       "' AND t.relnamespace = current_schema()::regnamespace AND c.contype = 'c' AND "
                       "pg_get_constraintdef(c.oid) LIKE '%" + column + "%'");
  }
  return ledger.text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = '" + table + "'");
}

// Brings a new intent to `state` the way the fence does.
void make(Fence& fence, const std::string& intent, IntentState state) {
  const Ticket t = admitted_ticket(fence.prepare(charge(intent)));
  switch (state) {
    case IntentState::done:
      REQUIRE(std::holds_alternative<Certificate>(fence.commit(t, {{"ok", true}})));
      break;
    case IntentState::failed:
      REQUIRE(std::holds_alternative<Aborted>(fence.abort(t, "made failed")));
      break;
    case IntentState::cleared:
      REQUIRE(std::holds_alternative<Aborted>(fence.abort(t, "made failed")));
      REQUIRE(std::holds_alternative<Cleared>(fence.clear(intent, "alice", "made cleared")));
      break;
    case IntentState::unknown:
      REQUIRE(fence.fence_unknown(t, "made unknown"));
      break;
    default:
      break;
  }
  REQUIRE(std::get<IntentStatus>(fence.intent_status(intent)).state == state);
}

}  // namespace

TEST_CASE("the ledger's CHECK lists hold exactly the table's states and event kinds", "[state_machine][schema]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  std::set<std::string> kinds, states;
  for (EventKind k : kEventKinds) kinds.insert(event_kind_name(k));
  for (IntentState s : kStoredStates) states.insert(state_name(s));
  CHECK(quoted_after(check_of(ledger, "events", "kind"), "kind") == kinds);
  CHECK(quoted_after(check_of(ledger, "intents", "state"), "state") == states);
}

TEST_CASE("a hand edit of an intent's state passes only where the table moves it with no evidence",
          "[state_machine][schema]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  int checked = 0;
  for (IntentState from : kStoredStates) {
    for (IntentState to : kStoredStates) {
      if (from == to) continue;
      const std::string intent = std::string("hand-") + state_name(from) + "-" + state_name(to);
      make(*fence, intent, from);
      const auto move = move_between(from, to);
      const bool may = move && move->evidence == Evidence::none;
      const std::string refused =
          ledger.try_exec(std::string("UPDATE intents SET state = '") + state_name(to) + "' WHERE intent = '" + intent + "'");
      INFO(intent << ": " << refused);
      CHECK(refused.empty() == may);
      if (!may) CHECK(refused.find("effectfence:") != std::string::npos);
      const std::string now = ledger.text("SELECT state FROM intents WHERE intent = '" + intent + "'");
      CHECK(now == state_name(may ? to : from));
      ++checked;
    }
  }
  CHECK(checked == 20);
}
