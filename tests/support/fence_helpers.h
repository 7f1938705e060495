// Small helpers shared by the fence tests.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <variant>

#include <catch2/catch.hpp>

#include "effectfence/fence.h"
#include "support/test_ledger.h"

namespace effectfence::testing {

inline std::unique_ptr<Fence> open_fence(Settings settings) {
  auto opened = Fence::open(std::move(settings));
  if (auto* error = std::get_if<OpenError>(&opened)) FAIL("open failed: " << error->message);
  return std::move(std::get<std::unique_ptr<Fence>>(opened));
}

inline Settings file_settings(const std::string& path) {
  Settings s;
  s.ledger_path = path;
  return s;
}

inline PrepareRequest charge(const std::string& intent, int amount = 4900, const std::string& agent = "agent-a") {
  PrepareRequest r;
  r.intent = intent;
  r.domain = "order:" + intent;
  r.tool = "charge";
  r.args = {{"order", intent}, {"amount_cents", amount}};
  r.agent = agent;
  return r;
}

inline const char* outcome_name(const PrepareOutcome& o) {
  if (std::holds_alternative<Admitted>(o)) return "admitted";
  if (std::holds_alternative<Replayed>(o)) return "replayed";
  return reason_name(std::get<Refusal>(o).reason);
}

inline Ticket admitted_ticket(const PrepareOutcome& o) {
  if (!std::holds_alternative<Admitted>(o)) FAIL("expected admission, got " << outcome_name(o));
  return std::get<Admitted>(o).ticket;
}

inline Reason refusal_reason(const PrepareOutcome& o) {
  if (!std::holds_alternative<Refusal>(o)) FAIL("expected a refusal, got " << outcome_name(o));
  return std::get<Refusal>(o).reason;
}

// Makes the intent's row say its holder runs on another host. Such a holder
// cannot be checked from here, so only its lease decides (a PostgreSQL ledger
// shared by several hosts); a holder seen running on this host keeps its
// intent however long its lease has run out. (Past the trigger that refuses
// this edit by hand: a test stands in for the other host.)
inline void holder_on_another_host(TestLedger& ledger, const std::string& intent) {
  ledger.exec_past_trigger("intents_holder_kept",
                           "UPDATE intents SET holder_host = 'another-host.example' WHERE intent = '" + intent + "'");
}

// A clock the test moves by hand.
struct ManualClock {
  std::shared_ptr<std::atomic<int64_t>> now = std::make_shared<std::atomic<int64_t>>(1'700'000'000'000);
  std::function<int64_t()> fn() const {
    auto p = now;
    return [p] { return p->load(); };
  }
  void advance(int64_t ms) { now->fetch_add(ms); }
  // Makes this clock both the host's and the ledger's, so a test moves
  // lease time by hand on every ledger (PostgreSQL has a clock of its own).
  void drive(Settings& s) const {
    s.clock_ms = fn();
    s.ledger_clock_ms = fn();
  }
};

}  // namespace effectfence::testing
