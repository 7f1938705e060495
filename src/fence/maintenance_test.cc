#include "effectfence/maintenance.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "core/mutex.h"
#include "support/fence_helpers.h"

using namespace effectfence;
using namespace effectfence::testing;
using namespace std::chrono_literals;

namespace {

IntentState state_of(Fence& fence, const std::string& intent) {
  return std::get<IntentStatus>(fence.intent_status(intent)).state;
}

// Waits up to five seconds for holds() to be true; true iff it was.
template <typename Pred>
bool within_5s(Pred holds) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (holds()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

// Waits up to five seconds for the intent to reach state; true iff it did.
bool becomes(Fence& fence, const std::string& intent, IntentState state) {
  return within_5s([&] { return state_of(fence, intent) == state; });
}

// What Maintenance told, kept for the test to read.
struct Told {
  Mutex mu;
  std::vector<std::string> lines GUARDED_BY(mu);
  Maintenance::Log log() {
    return [this](Maintenance::Level, const std::string& message) {
      MutexLock lock(&mu);
      lines.push_back(message);
    };
  }
  // Whether a line starting with prefix is told within 5 s: Maintenance
  // logs what it fenced after the ledger has committed it, so a state seen
  // changed may still be on its way to the log.
  bool has(const std::string& prefix) {
    return within_5s([&] {
      MutexLock lock(&mu);
      for (const std::string& line : lines) {
        if (line.rfind(prefix, 0) == 0) return true;
      }
      return false;
    });
  }
};

void commit_ok(Fence& fence, const Ticket& ticket, const Json& result) {
  REQUIRE(std::holds_alternative<Certificate>(fence.commit(ticket, result)));
}

Holder holder(int64_t pid) { return Holder{"maintenance-test-host", "boot", pid, 1}; }

}  // namespace

TEST_CASE("Maintenance sweeps when it starts and then every sweep interval", "[fence][maintenance]") {
  TestLedger ledger;
  ManualClock clock;
  Settings s = ledger.settings();
  s.result_ttl_ms = 1000;
  clock.drive(s);
  auto fence = open_fence(s);
  commit_ok(*fence, admitted_ticket(fence->prepare(charge("old"))), {{"ok", 1}});
  clock.advance(2000);
  // Nothing sweeps on its own: the control for what follows.
  std::this_thread::sleep_for(50ms);
  REQUIRE(state_of(*fence, "old") == IntentState::done);

  Maintenance::Options options;
  options.sweep_interval = 50ms;
  Maintenance maintenance(*fence, options);
  CHECK(becomes(*fence, "old", IntentState::none));

  commit_ok(*fence, admitted_ticket(fence->prepare(charge("later"))), {{"ok", 2}});
  CHECK(state_of(*fence, "later") == IntentState::done);
  clock.advance(2000);
  CHECK(becomes(*fence, "later", IntentState::none));
  CHECK(ledger.count("SELECT count(*) FROM certificates") == 2);  // sweeps keep certificates
  CHECK(maintenance.stop().fenced == 0);
}

TEST_CASE("Maintenance fences the intents of a holder that died, and says so", "[fence][maintenance]") {
  TestLedger ledger;
  auto dead = std::make_shared<std::atomic<bool>>(false);
  Settings watcher = ledger.settings();
  watcher.holder = holder(202);
  watcher.holder_is_dead = [dead](const Holder& h) { return h.pid == 101 && dead->load(); };
  auto fence = open_fence(watcher);
  Settings gone = ledger.settings();
  gone.holder = holder(101);
  auto other = open_fence(gone);
  admitted_ticket(other->prepare(charge("payout")));

  Told told;
  Maintenance::Options options;
  options.reap_interval = 20ms;
  options.log = told.log();
  Maintenance maintenance(*fence, options);
  std::this_thread::sleep_for(100ms);
  CHECK(state_of(*fence, "payout") == IntentState::in_flight);  // a live holder keeps its intent

  dead->store(true);
  CHECK(becomes(*fence, "payout", IntentState::unknown));
  CHECK(told.has("fenced 1 in-flight intent(s) as unknown: their holder process is gone"));
  CHECK(refusal_reason(fence->prepare(charge("payout"))) == Reason::prior_failure);
}

TEST_CASE("Maintenance stops admitting, then fences what this process still holds", "[fence][maintenance]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  const Ticket held = admitted_ticket(fence->prepare(charge("held")));
  const Ticket finished = admitted_ticket(fence->prepare(charge("finished")));
  commit_ok(*fence, finished, {{"ok", 1}});

  Maintenance::Options options;
  options.exit_reason = "the test server stopped mid-call";
  Maintenance maintenance(*fence, options);
  CHECK(outcome_name(fence->prepare(charge("before-stop"))) == std::string("admitted"));  // control
  maintenance.stop_admitting();
  CHECK(refusal_reason(fence->prepare(charge("too-late"))) == Reason::ledger_error);
  CHECK(state_of(*fence, "too-late") == IntentState::none);  // nothing recorded
  CHECK(std::holds_alternative<Replayed>(fence->prepare(charge("finished"))));  // replays go on

  const Maintenance::Stopped stopped = maintenance.stop();
  CHECK(stopped.fenced == 2);  // held and before-stop
  CHECK(stopped.left_in_flight.empty());
  CHECK(state_of(*fence, "held") == IntentState::unknown);
  CHECK(state_of(*fence, "before-stop") == IntentState::unknown);
  CHECK(state_of(*fence, "finished") == IntentState::done);
  CHECK(std::get<IntentStatus>(fence->intent_status("held")).reason == "the test server stopped mid-call");
  CHECK(maintenance.stop().fenced == 0);  // once
  // Its holder may still resolve it.
  CHECK(std::holds_alternative<Certificate>(fence->commit(held, {{"late", true}})));
}

TEST_CASE("Maintenance going out of scope stops as stop() does", "[fence][maintenance]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  admitted_ticket(fence->prepare(charge("held")));
  { Maintenance maintenance(*fence, Maintenance::Options{}); }
  CHECK(state_of(*fence, "held") == IntentState::unknown);
  const std::string reason = std::get<IntentStatus>(fence->intent_status("held")).reason;
  CHECK(reason.find("stopped before the admission was committed or aborted") != std::string::npos);
  CHECK(refusal_reason(fence->prepare(charge("after"))) == Reason::ledger_error);
}
