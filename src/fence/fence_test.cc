// The fence's state machine, one rule per test case, on a real ledger:
// SQLite files, or PostgreSQL when EFFECTFENCE_TEST_LEDGER names one.
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "effectfence/refusal_text.h"
#include "fence/fence_internal.h"
#include "ledger/holder.h"
#include "support/fence_helpers.h"
#include "support/temp_dir.h"

using namespace effectfence;
using namespace effectfence::testing;

namespace {

Certificate committed(Fence& fence, const Ticket& t, const Json& result) {
  auto out = fence.commit(t, result);
  if (auto* r = refusal_of(out)) FAIL("commit refused: " << reason_name(r->reason) << ": " << explain(*r, Step::commit));
  return std::get<Certificate>(out);
}

// commit_refused events of intent that keep result, refused for reason.
int64_t refused_commits(TestLedger& ledger, const std::string& intent, const std::string& reason,
                        const Json& result) {
  return ledger.count("SELECT count(*) FROM events WHERE kind = 'commit_refused' AND intent = '" + intent +
                      "' AND detail LIKE '%\"reason\":\"" + reason + "\"%' AND detail LIKE '%\"result\":" +
                      result.dump() + "%'");
}

// Settings with a 1 s lease on a clock the test moves by hand.
Settings one_second_lease(const TestLedger& ledger, const ManualClock& clock) {
  Settings s = ledger.settings();
  s.lease_ttl_ms = 1000;
  clock.drive(s);
  return s;
}

}  // namespace

TEST_CASE("a duplicate after commit replays the identical certificate", "[fence]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  const Ticket t = admitted_ticket(fence->prepare(charge("o-1")));
  CHECK(t.generation == 1);
  CHECK(t.seq == 1);
  CHECK(t.token.size() == 32);
  const Certificate cert = committed(*fence, t, {{"charge_id", "ch_1"}});
  CHECK(cert.verify());
  CHECK(cert.result == Json{{"charge_id", "ch_1"}});

  auto again = fence->prepare(charge("o-1"));
  REQUIRE(std::holds_alternative<Replayed>(again));
  CHECK(std::get<Replayed>(again).cert.hash == cert.hash);

  // A second Fence on the same file (another process's view) replays too.
  auto other = open_fence(ledger.settings());
  auto from_other = other->prepare(charge("o-1"));
  REQUIRE(std::holds_alternative<Replayed>(from_other));
  CHECK(std::get<Replayed>(from_other).cert.hash == cert.hash);
}

TEST_CASE("the same intent with a different payload is payload_mismatch, never a replay", "[fence]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  auto other = open_fence(ledger.settings());
  const Ticket t = admitted_ticket(fence->prepare(charge("o-2", 4900)));
  // In flight: through the fast path and through the ledger.
  CHECK(refusal_reason(fence->prepare(charge("o-2", 9900))) == Reason::payload_mismatch);
  CHECK(refusal_reason(other->prepare(charge("o-2", 9900))) == Reason::payload_mismatch);
  committed(*fence, t, {{"ok", true}});
  // Done: the cached certificate is not handed to a different action.
  CHECK(refusal_reason(fence->prepare(charge("o-2", 9900))) == Reason::payload_mismatch);
  CHECK(refusal_reason(other->prepare(charge("o-2", 9900))) == Reason::payload_mismatch);
  // Key order and number spelling do not make a different payload.
  PrepareRequest same = charge("o-2", 4900);
  same.args = Json::parse(R"({"amount_cents": 4900.0, "order": "o-2"})");
  CHECK(std::holds_alternative<Replayed>(other->prepare(same)));
}

TEST_CASE("a payload mismatch says what differs: the tool, or only its arguments", "[fence]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  committed(*fence, admitted_ticket(fence->prepare(charge("o-4"))), {{"ok", true}});
  auto other = open_fence(ledger.settings());  // nothing cached: the ledger decides
  PrepareRequest refund = charge("o-4");
  refund.tool = "refund";
  auto by_tool = other->prepare(refund);
  REQUIRE(refusal_reason(by_tool) == Reason::payload_mismatch);
  CHECK_THAT(explain(std::get<Refusal>(by_tool), Step::prepare),
             Catch::Contains("tool 'charge', not 'refund'") && !Catch::Contains("other arguments"));
  auto by_args = other->prepare(charge("o-4", 9900));
  REQUIRE(refusal_reason(by_args) == Reason::payload_mismatch);
  CHECK_THAT(explain(std::get<Refusal>(by_args), Step::prepare), Catch::Contains("tool 'charge' with other arguments"));
  // The process that committed it answers from its cached certificate, and
  // says the same.
  auto cached = fence->prepare(refund);
  REQUIRE(refusal_reason(cached) == Reason::payload_mismatch);
  CHECK_THAT(explain(std::get<Refusal>(cached), Step::prepare), Catch::Contains("tool 'charge', not 'refund'"));
  CHECK(std::get<Refusal>(cached).detail.value("recorded_tool", "") == "charge");
}

TEST_CASE("names are 1 to 1024 characters, however many bytes they take", "[fence]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  std::string accented;
  for (size_t i = 0; i < kMaxNameCharacters; ++i) accented += "\u00e9";  // 2 bytes each
  PrepareRequest named = charge("short");
  named.intent = accented;
  CHECK(std::holds_alternative<Admitted>(fence->prepare(named)));
  named.intent += "e";
  auto too_long = fence->prepare(named);
  REQUIRE(refusal_reason(too_long) == Reason::invalid_request);
  CHECK_THAT(explain(std::get<Refusal>(too_long), Step::prepare), Catch::Contains("longer than 1024 characters"));
}

TEST_CASE("a concurrent duplicate is refused in_flight with a clear message", "[fence]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  auto other = open_fence(ledger.settings());
  admitted_ticket(fence->prepare(charge("o-3")));
  auto dup = other->prepare(charge("o-3"));
  CHECK(refusal_reason(dup) == Reason::in_flight);
  CHECK_THAT(explain(std::get<Refusal>(dup), Step::prepare), Catch::Contains("do not run the tool"));
  CHECK(refusal_reason(fence->prepare(charge("o-3"))) == Reason::in_flight);
}

TEST_CASE("a stale read-set is refused at prepare, naming domain, expected and actual", "[fence][read_set]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  PrepareRequest scale = charge("scale-up");
  scale.domain = "cluster:prod";
  scale.read_set = {{"cluster:prod", 0}};
  committed(*fence, admitted_ticket(fence->prepare(scale)), {{"replicas", 6}});

  PrepareRequest rollback = charge("rollback");
  rollback.domain = "cluster:prod";
  rollback.read_set = {{"cluster:prod", 0}};
  auto out = fence->prepare(rollback);
  REQUIRE(refusal_reason(out) == Reason::stale_read_set);
  const Refusal& r = std::get<Refusal>(out);
  CHECK(r.detail["domain"] == "cluster:prod");
  CHECK(r.detail["expected"] == 0);
  CHECK(r.detail["actual"] == 1);

  // Having re-read the domain, the decision is admitted.
  rollback.read_set = {{"cluster:prod", 1}};
  CHECK(admitted_ticket(fence->prepare(rollback)).seq == 2);
}

TEST_CASE("a read-set seq its domain never reached is an invalid request, and nothing is recorded",
          "[fence][read_set]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  PrepareRequest ahead = charge("ahead");
  ahead.read_set = {{"cluster:new", 3}};
  auto out = fence->prepare(ahead);
  REQUIRE(refusal_reason(out) == Reason::invalid_request);
  CHECK_THAT(explain(std::get<Refusal>(out), Step::prepare), Catch::Contains("only at seq 0") && Catch::Contains("fence_status"));
  CHECK(ledger.count("SELECT count(*) FROM intents") == 0);
  ahead.read_set = {{"cluster:new", 0}};
  CHECK(admitted_ticket(fence->prepare(ahead)).seq == 1);
}

TEST_CASE("a commit whose own domain moved after its admission says so, not that the agent read another seq",
          "[fence][read_set]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  PrepareRequest decide = charge("scale-to-5");
  decide.domain = "cluster:b";
  decide.read_set = {{"cluster:b", 0}};
  const Ticket t = admitted_ticket(fence->prepare(decide));
  PrepareRequest blind = charge("scale-to-9");
  blind.domain = "cluster:b";
  admitted_ticket(fence->prepare(blind));  // no read-set: admitted beside it, taking seq 2

  auto out = fence->commit(t, {{"replicas", 5}});
  REQUIRE(std::holds_alternative<Refusal>(out));
  const Refusal& r = std::get<Refusal>(out);
  CHECK(r.reason == Reason::stale_read_set);
  CHECK_THAT(explain(r, Step::commit), Catch::Contains("this attempt's admission took seq 1, it is now at 2") &&
                            !Catch::Contains("you decided at seq"));
}

TEST_CASE("a read-set on a domain with an action in flight is a domain_race", "[fence][read_set]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  PrepareRequest first = charge("first");
  first.domain = "cluster:prod";
  const Ticket t = admitted_ticket(fence->prepare(first));
  PrepareRequest second = charge("second");
  second.domain = "cluster:prod";
  second.read_set = {{"cluster:prod", 1}};
  CHECK(refusal_reason(fence->prepare(second)) == Reason::domain_race);
  committed(*fence, t, {{"ok", 1}});
  CHECK(admitted_ticket(fence->prepare(second)).seq == 2);
}

TEST_CASE("a read-set that moved before commit fences the intent and keeps the result", "[fence][read_set]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  PrepareRequest decide = charge("restart");
  decide.domain = "cluster:a";
  decide.read_set = {{"config:a", 0}};
  const Ticket t = admitted_ticket(fence->prepare(decide));

  PrepareRequest change = charge("config-change");
  change.domain = "config:a";
  committed(*fence, admitted_ticket(fence->prepare(change)), {{"ok", true}});

  auto out = fence->commit(t, {{"restarted", true}});
  REQUIRE(std::holds_alternative<Refusal>(out));
  CHECK(std::get<Refusal>(out).reason == Reason::stale_read_set);
  CHECK(std::get<Refusal>(out).detail["domain"] == "config:a");
  CHECK(refusal_reason(fence->prepare(decide)) == Reason::prior_failure);
  CHECK(ledger.count("SELECT count(*) FROM events WHERE kind = 'commit_refused' AND intent = 'restart' "
                     "AND detail LIKE '%\"result\":{\"restarted\":true}%'") == 1);
}

TEST_CASE("a zombie holder cannot commit, abort or heartbeat over its successor", "[fence][lease]") {
  TestLedger ledger;
  ManualClock clock;
  const Settings s = one_second_lease(ledger, clock);
  auto fence = open_fence(s);
  const Ticket zombie = admitted_ticket(fence->prepare(charge("o-4")));
  holder_on_another_host(ledger, "o-4");  // where only the lease can tell a stalled holder
  clock.advance(1500);
  const Ticket successor = admitted_ticket(fence->prepare(charge("o-4", 4900, "agent-b")));
  CHECK(successor.generation == zombie.generation + 1);
  CHECK(successor.token != zombie.token);

  auto late_commit = fence->commit(zombie, {{"charge_id", "zombie"}});
  REQUIRE(std::holds_alternative<Refusal>(late_commit));
  CHECK(std::get<Refusal>(late_commit).reason == Reason::lease_lost);
  auto late_abort = fence->abort(zombie, "gave up");
  REQUIRE(std::holds_alternative<Refusal>(late_abort));
  CHECK(std::get<Refusal>(late_abort).reason == Reason::lease_lost);
  auto late_beat = fence->heartbeat(zombie);
  REQUIRE(std::holds_alternative<Refusal>(late_beat));
  CHECK(std::get<Refusal>(late_beat).reason == Reason::lease_lost);

  const Certificate cert = committed(*fence, successor, {{"charge_id", "successor"}});
  auto replay = fence->prepare(charge("o-4"));
  REQUIRE(std::holds_alternative<Replayed>(replay));
  CHECK(std::get<Replayed>(replay).cert.hash == cert.hash);
  CHECK(std::get<Replayed>(replay).cert.result["charge_id"] == "successor");
  CHECK(ledger.count("SELECT count(*) FROM events WHERE kind = 'takeover'") == 1);
  // The zombie's refused result is not lost: the audit log keeps it.
  CHECK(refused_commits(ledger, "o-4", "lease_lost", {{"charge_id", "zombie"}}) == 1);

  // A token made up for the zombie's generation is not the zombie's: its
  // admission recorded the hash of the token it issued.
  Ticket made_up = zombie;
  made_up.token = std::string(zombie.token.size(), '0');
  auto forged = fence->commit(made_up, {{"charge_id", "forged"}});
  REQUIRE(std::holds_alternative<Refusal>(forged));
  CHECK(std::get<Refusal>(forged).reason == Reason::ticket_invalid);
  CHECK(ledger.count("SELECT count(*) FROM events WHERE kind = 'commit_refused'") == 1);  // the zombie's alone
}

TEST_CASE("a lease that ran out while its holder still runs on this host admits no second attempt",
          "[fence][lease]") {
  // A stalled write to the tool, a ledger the holder could not reach for a
  // while, or the host's clock stepped forward: the holder may be mid-effect.
  TestLedger ledger;
  ManualClock clock;
  const Settings s = one_second_lease(ledger, clock);
  auto holder = open_fence(s);
  auto other = open_fence(s);
  const Ticket t = admitted_ticket(holder->prepare(charge("stalled")));
  clock.advance(120'000);
  auto duplicate = other->prepare(charge("stalled", 4900, "agent-b"));
  REQUIRE(refusal_reason(duplicate) == Reason::in_flight);
  CHECK_THAT(explain(std::get<Refusal>(duplicate), Step::prepare), Catch::Contains("still running on this host"));
  CHECK(std::get<Refusal>(duplicate).detail["holder"] == this_process().describe());

  // The holder finishes: its effect is recorded, and the duplicate then gets it.
  const Certificate cert = committed(*holder, t, {{"charge_id", "ch_stalled"}});
  auto replay = other->prepare(charge("stalled", 4900, "agent-b"));
  REQUIRE(std::holds_alternative<Replayed>(replay));
  CHECK(std::get<Replayed>(replay).cert.hash == cert.hash);
  CHECK(ledger.count("SELECT count(*) FROM events WHERE kind = 'takeover'") == 0);
}

TEST_CASE("an action held past its lease by a holder still running here keeps its domain in a race",
          "[fence][lease][read_set]") {
  TestLedger ledger;
  ManualClock clock;
  const Settings s = one_second_lease(ledger, clock);
  auto holder = open_fence(s);
  auto other = open_fence(s);
  PrepareRequest scale = charge("scale-up");
  scale.domain = "cluster:prod";
  admitted_ticket(holder->prepare(scale));
  clock.advance(120'000);  // the lease ran out; its holder, this process, runs on
  PrepareRequest contrary = charge("scale-down");
  contrary.domain = "cluster:prod";
  contrary.read_set = {{"cluster:prod", 1}};  // decided on the state after scale-up's admission
  CHECK(refusal_reason(other->prepare(contrary)) == Reason::domain_race);
  CHECK(std::get<DomainStatus>(other->domain_status("cluster:prod")).in_flight == 1);
}

TEST_CASE("a fenced action does not hold its domain, and the domain's status counts it", "[fence][read_set]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  PrepareRequest scale = charge("scale-up");
  scale.domain = "cluster:prod";
  admitted_ticket(fence->prepare(scale));
  REQUIRE(FenceInternal::fence_own_in_flight(*fence, "the server stopped mid-effect") == 1);
  const DomainStatus domain = std::get<DomainStatus>(fence->domain_status("cluster:prod"));
  CHECK(domain.in_flight == 0);
  CHECK(domain.fenced == 1);  // what an agent checks before deciding on a state that may have moved
  CHECK(domain.to_json()["fenced"] == 1);

  // A read from before its admission is stale; one from after it decides.
  PrepareRequest contrary = charge("scale-down");
  contrary.domain = "cluster:prod";
  contrary.read_set = {{"cluster:prod", 0}};
  CHECK(refusal_reason(fence->prepare(contrary)) == Reason::stale_read_set);
  contrary.read_set = {{"cluster:prod", 1}};
  CHECK(std::holds_alternative<Admitted>(fence->prepare(contrary)));

  // Cleared, it is no longer counted.
  REQUIRE(std::holds_alternative<Cleared>(fence->clear("scale-up", "alice", "the cluster shows no scale-up")));
  CHECK(std::get<DomainStatus>(fence->domain_status("cluster:prod")).fenced == 0);
}

TEST_CASE("a heartbeat keeps a slow holder's lease from being taken over", "[fence][lease]") {
  TestLedger ledger;
  ManualClock clock;
  const Settings s = one_second_lease(ledger, clock);
  auto fence = open_fence(s);
  auto other = open_fence(s);
  const Ticket t = admitted_ticket(fence->prepare(charge("slow")));
  holder_on_another_host(ledger, "slow");  // so only the lease keeps it: a live holder here would anyway
  for (int i = 0; i < 5; ++i) {
    clock.advance(600);
    auto beat = fence->heartbeat(t);
    REQUIRE(std::holds_alternative<Extended>(beat));
    CHECK(std::get<Extended>(beat).lease_expires_at_ms == clock.now->load() + 1000);
    CHECK(ledger.count("SELECT lease_expires_at FROM intents WHERE intent = 'slow'") == clock.now->load() + 1000);
    CHECK(refusal_reason(other->prepare(charge("slow"))) == Reason::in_flight);
  }
  committed(*fence, t, {{"ok", true}});

  // The same holder without its heartbeats loses the intent to a successor.
  const Ticket silent = admitted_ticket(fence->prepare(charge("silent")));
  holder_on_another_host(ledger, "silent");
  clock.advance(1200);
  CHECK(admitted_ticket(other->prepare(charge("silent"))).generation == silent.generation + 1);
}

TEST_CASE("an admission left by a destroyed Fence stays in flight while its process runs, and a restarted host's "
          "is fenced unknown",
          "[fence][lease]") {
  TestLedger ledger;
  ManualClock clock;
  const Settings s = one_second_lease(ledger, clock);
  Ticket left;
  {
    auto gone = open_fence(s);
    left = admitted_ticket(gone->prepare(charge("left")));
  }
  auto other = open_fence(s);
  clock.advance(5000);  // far past its lease: the process that holds it still runs, so the effect may be under way
  CHECK(refusal_reason(other->prepare(charge("left", 4900, "agent-b"))) == Reason::in_flight);
  CHECK(ledger.count("SELECT count(*) FROM intents WHERE intent = 'left' AND state = 'in_flight' AND generation = " +
                     std::to_string(left.generation)) == 1);

  // The same host under another boot id: it was restarted since, so its holder is gone.
  ledger.exec_past_trigger("intents_holder_kept",
                           "UPDATE intents SET holder_boot = 'an-earlier-boot' WHERE intent = 'left'");
  CHECK(refusal_reason(other->prepare(charge("left", 4900, "agent-b"))) == Reason::prior_failure);
  CHECK(ledger.count("SELECT count(*) FROM intents WHERE intent = 'left' AND state = 'unknown'") == 1);
  CHECK(ledger.count("SELECT count(*) FROM events WHERE intent = 'left' AND kind = 'takeover'") == 0);
}

TEST_CASE("a heartbeat never brings a lease's expiry closer", "[fence][lease]") {
  TestLedger ledger;
  ManualClock clock;
  const Settings s = one_second_lease(ledger, clock);
  auto fence = open_fence(s);
  const Ticket t = admitted_ticket(fence->prepare(charge("steady")));
  const int64_t granted = t.lease_expires_at_ms;
  clock.advance(-500);  // the clock stepped back
  auto beat = fence->heartbeat(t);
  REQUIRE(std::holds_alternative<Extended>(beat));
  CHECK(std::get<Extended>(beat).lease_expires_at_ms == granted);
  Settings short_lease = s;  // another server, with a shorter lease TTL, beats for it
  short_lease.lease_ttl_ms = 100;
  auto beat_elsewhere = open_fence(short_lease)->heartbeat(t);
  REQUIRE(std::holds_alternative<Extended>(beat_elsewhere));
  CHECK(std::get<Extended>(beat_elsewhere).lease_expires_at_ms == granted);
  CHECK(ledger.count("SELECT lease_expires_at FROM intents WHERE intent = 'steady'") == granted);
  clock.advance(1000);
  beat = fence->heartbeat(t);
  REQUIRE(std::holds_alternative<Extended>(beat));
  CHECK(std::get<Extended>(beat).lease_expires_at_ms == clock.now->load() + 1000);
}

TEST_CASE("an edited ticket is refused and changes nothing", "[fence][ticket]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  const Ticket t = admitted_ticket(fence->prepare(charge("o-5")));
  Ticket wrong_seq = t;
  wrong_seq.seq += 1;
  Ticket wrong_token = t;
  wrong_token.token[0] = wrong_token.token[0] == 'a' ? 'b' : 'a';
  Ticket other_intent = t;
  other_intent.intent = "o-other";

  auto r1 = fence->commit(wrong_seq, {{"x", 1}});
  REQUIRE(std::holds_alternative<Refusal>(r1));
  CHECK(std::get<Refusal>(r1).reason == Reason::ticket_invalid);
  // The generation the ledger holds, with another token: edited, not taken over.
  auto r2 = fence->commit(wrong_token, {{"x", 1}});
  REQUIRE(std::holds_alternative<Refusal>(r2));
  CHECK(std::get<Refusal>(r2).reason == Reason::ticket_invalid);
  auto heartbeat = fence->heartbeat(wrong_token);
  REQUIRE(std::holds_alternative<Refusal>(heartbeat));
  CHECK(std::get<Refusal>(heartbeat).reason == Reason::ticket_invalid);
  // A ticket no admission issued (a token its admission did not hand out,
  // another intent, a generation never reached) is made up: refused, and its
  // "result" is not kept as a report. (A holder whose intent was swept and
  // admitted again under its generation has its own admission: kept.)
  Ticket later_generation = t;
  later_generation.generation += 1;
  later_generation.token[0] = later_generation.token[0] == 'a' ? 'b' : 'a';
  for (const Ticket& made_up : {wrong_token, other_intent, later_generation}) {
    auto r3 = fence->commit(made_up, {{"x", 1}});
    REQUIRE(std::holds_alternative<Refusal>(r3));
    CHECK(std::get<Refusal>(r3).reason == Reason::ticket_invalid);
    CHECK_THAT(explain(std::get<Refusal>(r3), Step::commit), Catch::Contains("no admission of intent"));
  }
  CHECK(ledger.count("SELECT count(*) FROM events WHERE kind = 'commit_refused'") == 0);

  auto status = std::get<IntentStatus>(fence->intent_status("o-5"));
  CHECK(status.state == IntentState::in_flight);
  committed(*fence, t, {{"x", 1}});
}

TEST_CASE("an edited ticket's refusal does not make the process forget the admission it holds",
          "[fence][ticket]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  const Ticket t = admitted_ticket(fence->prepare(charge("o-held")));
  Ticket edited = t;
  edited.seq += 1;  // the token still matches: refused as ticket_invalid
  auto beat = fence->heartbeat(edited);
  REQUIRE(std::holds_alternative<Refusal>(beat));
  CHECK(std::get<Refusal>(beat).reason == Reason::ticket_invalid);
  auto commit = fence->commit(edited, {{"x", 1}});
  REQUIRE(std::holds_alternative<Refusal>(commit));
  CHECK(std::get<Refusal>(commit).reason == Reason::ticket_invalid);
  auto abort = fence->abort(edited, "edited");
  REQUIRE(std::holds_alternative<Refusal>(abort));
  CHECK(std::get<Refusal>(abort).reason == Reason::ticket_invalid);
  // Stopping still fences what the real ticket holds: nobody is left to commit it.
  CHECK(FenceInternal::fence_own_in_flight(*fence, "stopping") == 1);
  CHECK(std::get<IntentStatus>(fence->intent_status("o-held")).state == IntentState::unknown);
}

TEST_CASE("a fence that stops admitting refuses new admissions, records nothing, and still replays", "[fence]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  const Certificate cert = committed(*fence, admitted_ticket(fence->prepare(charge("o-was-done"))), {{"ok", true}});
  const Ticket held = admitted_ticket(fence->prepare(charge("o-still-held")));
  FenceInternal::stop_admitting(*fence);
  const PrepareOutcome refused = fence->prepare(charge("o-too-late"));
  REQUIRE(refusal_reason(refused) == Reason::ledger_error);
  CHECK_THAT(explain(std::get<Refusal>(refused), Step::prepare), Catch::Contains("stopping"));
  CHECK(std::get<IntentStatus>(fence->intent_status("o-too-late")).state == IntentState::none);
  CHECK(ledger.count("SELECT count(*) FROM events WHERE intent = 'o-too-late'") == 0);
  CHECK(std::get<Replayed>(fence->prepare(charge("o-was-done"))).cert.hash == cert.hash);
  CHECK(refusal_reason(fence->prepare(charge("o-still-held"))) == Reason::in_flight);
  committed(*fence, held, {{"ok", true}});  // what it admitted before can still finish
}

TEST_CASE("a retried commit gets the same certificate, a different result is refused", "[fence]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  const Ticket t = admitted_ticket(fence->prepare(charge("o-6")));
  const Certificate first = committed(*fence, t, {{"charge_id", "ch_6"}});
  CHECK(committed(*fence, t, {{"charge_id", "ch_6"}}).hash == first.hash);
  auto different = fence->commit(t, {{"charge_id", "ch_other"}});
  REQUIRE(std::holds_alternative<Refusal>(different));
  CHECK(std::get<Refusal>(different).reason == Reason::ticket_invalid);
  // The first result stands; the second is kept in the audit log, not lost.
  CHECK(refused_commits(ledger, "o-6", "already_committed", {{"charge_id", "ch_other"}}) == 1);

  // A retried commit or abort is one outcome, counted once.
  const Ticket a = admitted_ticket(fence->prepare(charge("o-6a")));
  REQUIRE(std::holds_alternative<Aborted>(fence->abort(a, "provider timed out")));
  REQUIRE(std::holds_alternative<Aborted>(fence->abort(a, "provider timed out")));
  auto stats = std::get<Stats>(fence->stats());
  CHECK(stats.process.committed == 1);
  CHECK(stats.process.aborted == 1);
  CHECK(stats.ledger.committed == 1);
  CHECK(stats.ledger.aborted == 1);
}

TEST_CASE("a refused commit keeps its result in the audit log: cleared and admitted again, swept or taken over",
          "[fence][lease]") {
  TestLedger ledger;
  ManualClock clock;
  Settings s = ledger.settings();
  s.lease_ttl_ms = 1000;
  s.result_ttl_ms = 2000;
  clock.drive(s);
  auto fence = open_fence(s);
  auto kept = [&](const std::string& intent, const std::string& charge_id) {
    return refused_commits(ledger, intent, "lease_lost", {{"charge_id", charge_id}});
  };

  // Fenced as unknown (its server stopped), cleared by an operator, and
  // admitted again: the first holder's late result arrives after that.
  const Ticket cleared = admitted_ticket(fence->prepare(charge("o-cleared")));
  REQUIRE(FenceInternal::fence_own_in_flight(*fence, "serve exited") == 1);
  REQUIRE(std::holds_alternative<Cleared>(fence->clear("o-cleared", "alice", "provider shows no charge yet")));
  admitted_ticket(fence->prepare(charge("o-cleared", 4900, "agent-b")));
  auto late = fence->commit(cleared, {{"charge_id", "ch_late"}});
  REQUIRE(std::holds_alternative<Refusal>(late));
  CHECK(std::get<Refusal>(late).reason == Reason::lease_lost);
  CHECK_THAT(explain(std::get<Refusal>(late), Step::commit), Catch::Contains("was not recorded as the outcome"));
  CHECK(kept("o-cleared", "ch_late") == 1);

  // A zombie whose successor committed and whose row was swept since.
  const Ticket zombie = admitted_ticket(fence->prepare(charge("o-swept")));
  holder_on_another_host(ledger, "o-swept");
  clock.advance(1500);
  const Ticket successor = admitted_ticket(fence->prepare(charge("o-swept", 4900, "agent-b")));
  committed(*fence, successor, {{"charge_id", "ch_successor"}});
  clock.advance(5000);
  REQUIRE(FenceInternal::sweep(*fence) >= 1);
  auto swept = fence->commit(zombie, {{"charge_id", "ch_zombie"}});
  REQUIRE(std::holds_alternative<Refusal>(swept));
  CHECK(std::get<Refusal>(swept).reason == Reason::lease_lost);
  CHECK(kept("o-swept", "ch_zombie") == 1);

  // Swept after its result lifetime and admitted afresh: generations start
  // over, so a holder retrying its commit names the new attempt's generation.
  const Ticket first = admitted_ticket(fence->prepare(charge("o-again")));
  committed(*fence, first, {{"charge_id", "ch_first"}});
  clock.advance(5000);
  REQUIRE(FenceInternal::sweep(*fence) >= 1);
  const Ticket again = admitted_ticket(fence->prepare(charge("o-again")));
  REQUIRE(again.generation == first.generation);
  auto old_holder = fence->commit(first, {{"charge_id", "ch_first_retried"}});
  REQUIRE(std::holds_alternative<Refusal>(old_holder));
  CHECK(std::get<Refusal>(old_holder).reason == Reason::ticket_invalid);
  CHECK(refused_commits(ledger, "o-again", "token_mismatch", {{"charge_id", "ch_first_retried"}}) == 1);

  // A refused commit is never counted as one.
  CHECK(std::get<Stats>(fence->stats()).process.committed == 2);
}

TEST_CASE("a process holding an intent sees it resolved through another process at once", "[fence][fast_path]") {
  TestLedger ledger;
  auto holder = open_fence(ledger.settings());
  auto other = open_fence(ledger.settings());

  // The ticket is committed through another process (e.g. after a reconnect).
  const Ticket committed_elsewhere = admitted_ticket(holder->prepare(charge("o-moved")));
  const Certificate cert = committed(*other, committed_elsewhere, {{"charge_id", "ch_moved"}});
  auto replay = holder->prepare(charge("o-moved"));
  REQUIRE(std::holds_alternative<Replayed>(replay));
  CHECK(std::get<Replayed>(replay).cert.hash == cert.hash);

  // Aborted through another process and cleared: the next prepare is fresh.
  const Ticket aborted_elsewhere = admitted_ticket(holder->prepare(charge("o-reset")));
  REQUIRE(std::holds_alternative<Aborted>(other->abort(aborted_elsewhere, "tool failed")));
  REQUIRE(std::holds_alternative<Cleared>(other->clear("o-reset", "alice", "provider shows no charge")));
  CHECK(admitted_ticket(holder->prepare(charge("o-reset"))).generation == aborted_elsewhere.generation + 1);

  // Still held: a duplicate is refused, by the ledger.
  const Ticket held = admitted_ticket(holder->prepare(charge("o-held")));
  CHECK(refusal_reason(holder->prepare(charge("o-held"))) == Reason::in_flight);
  CHECK(refusal_reason(holder->prepare(charge("o-held", 1))) == Reason::payload_mismatch);
  committed(*holder, held, {{"ok", true}});
}

// SQLite only: PostgreSQL has no PRAGMA data_version, and a certificate
// cached there ages out instead (docs/DESIGN.md).
TEST_CASE("a replay answered late is not cached past a change this process noticed meanwhile",
          "[fence][fast_path][sqlite_file]") {
  TestLedger ledger;
  ManualClock host;
  Settings s = ledger.settings();
  host.drive(s);
  auto a = open_fence(s);
  s.result_ttl_ms = 1000;
  auto b = open_fence(s);  // another process, which forgets results after 1 s
  const Certificate c1 = committed(*b, admitted_ticket(b->prepare(charge("late-1"))), {{"n", 1}});

  // a decides late-1 (a replay of c1) while its answer thread is held up.
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  bool replay_answered = false;
  // Releases the answer thread however the test ends: a failed REQUIRE
  // below must not leave a's destructor waiting for it.
  struct ReleaseOnExit {
    std::mutex& mu;
    std::condition_variable& cv;
    bool& release;
    ~ReleaseOnExit() {
      std::lock_guard<std::mutex> lock(mu);
      release = true;
      cv.notify_all();
    }
  };
  const uint64_t decided_before = a->ledger_metrics().decisions;
  a->prepare_async(charge("blocker"), [&](PrepareOutcome) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return release; });
  });
  a->prepare_async(charge("late-1"), [&](PrepareOutcome o) {
    CHECK((std::holds_alternative<Replayed>(o) && std::get<Replayed>(o).cert.hash == c1.hash));
    std::lock_guard<std::mutex> lock(mu);
    replay_answered = true;
    cv.notify_all();
  });
  const ReleaseOnExit release_on_exit{mu, cv, release};
  while (a->ledger_metrics().decisions < decided_before + 2) std::this_thread::sleep_for(std::chrono::milliseconds(2));

  // Meanwhile b sweeps late-1 and runs it again, and a notices the change.
  // (a promised its default TTL as it opened: the operator lowered it.)
  ledger.exec("UPDATE retention SET value = 1000 WHERE name = 'result_ttl_ms'");
  host.advance(5000);
  REQUIRE(FenceInternal::sweep(*b) >= 1);
  const Certificate c2 = committed(*b, admitted_ticket(b->prepare(charge("late-1"))), {{"n", 2}});
  admitted_ticket(a->prepare(charge("unrelated")));
  {
    std::unique_lock<std::mutex> lock(mu);
    release = true;
    cv.notify_all();
    cv.wait(lock, [&] { return replay_answered; });
  }
  auto now = a->prepare(charge("late-1"));
  REQUIRE(std::holds_alternative<Replayed>(now));
  CHECK(std::get<Replayed>(now).cert.hash == c2.hash);
}

// Regression (found by tools/simulate --postgres, seed 44): on PostgreSQL
// a process kept replaying a certificate it had cached after another
// process swept the intent and committed it afresh, over the new outcome.
// Runs on both ledgers.
TEST_CASE("stale_replay_after_sweep_elsewhere: a swept and recommitted intent replays its new result everywhere",
          "[fence][fast_path]") {
  TestLedger ledger;
  ManualClock host;
  Settings s = ledger.settings();
  host.drive(s);
  auto a = open_fence(s);
  s.result_ttl_ms = 1000;
  auto b = open_fence(s);  // another process, which forgets results after 1 s
  const Certificate c1 = committed(*b, admitted_ticket(b->prepare(charge("again-1"))), {{"n", 1}});
  auto first = a->prepare(charge("again-1"));  // a learns c1 (and may keep it)
  REQUIRE(std::holds_alternative<Replayed>(first));
  REQUIRE(std::get<Replayed>(first).cert.hash == c1.hash);

  // (a promised its default TTL as it opened: the operator lowered it.)
  ledger.exec("UPDATE retention SET value = 1000 WHERE name = 'result_ttl_ms'");
  host.advance(5000);
  REQUIRE(FenceInternal::sweep(*b) >= 1);
  const Certificate c2 = committed(*b, admitted_ticket(b->prepare(charge("again-1"))), {{"n", 2}});
  REQUIRE(c2.hash != c1.hash);

  auto now = a->prepare(charge("again-1"));
  REQUIRE(std::holds_alternative<Replayed>(now));
  CHECK(std::get<Replayed>(now).cert.hash == c2.hash);
}

TEST_CASE("abort fences the intent until an audited clear, then it is fresh", "[fence][clear]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  const Ticket t = admitted_ticket(fence->prepare(charge("o-7")));
  REQUIRE(std::holds_alternative<Aborted>(fence->abort(t, "provider timed out")));
  auto fenced = fence->prepare(charge("o-7"));
  REQUIRE(refusal_reason(fenced) == Reason::prior_failure);
  CHECK_THAT(explain(std::get<Refusal>(fenced), Step::prepare), Catch::Contains("provider timed out"));

  auto cleared = fence->clear("o-7", "alice", "provider shows no charge");
  REQUIRE(std::holds_alternative<Cleared>(cleared));
  CHECK(std::get<Cleared>(cleared).previous_state == "failed");
  const Ticket again = admitted_ticket(fence->prepare(charge("o-7")));
  CHECK(again.generation == t.generation + 1);
  CHECK(ledger.count("SELECT count(*) FROM events WHERE kind = 'cleared' AND actor = 'alice' AND " +
                     ledger.json_member("detail", "reason") + " = 'provider shows no charge'") == 1);
}

TEST_CASE("clear refuses done, in-flight, cleared and nonexistent intents, and says what to do instead",
          "[fence][clear]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  const Ticket running = admitted_ticket(fence->prepare(charge("running")));
  committed(*fence, admitted_ticket(fence->prepare(charge("finished"))), {{"ok", true}});
  fence->abort(admitted_ticket(fence->prepare(charge("settled"))), "provider said no");
  REQUIRE(std::holds_alternative<Cleared>(fence->clear("settled", "alice", "checked")));
  const std::map<std::string, std::string> said = {
      {"running", "It is in flight: its holder ("},
      {"finished", "It is done: its effect ran"},
      {"settled", "It is cleared already: its next prepare is fresh"},
      {"never-seen", "no such intent"}};
  for (const auto& [intent, explanation] : said) {
    auto out = fence->clear(intent, "alice", "why not");
    REQUIRE(std::holds_alternative<Refusal>(out));
    CHECK_THAT(explain(std::get<Refusal>(out), Step::clear), Catch::Contains("cannot clear") && Catch::Contains(explanation));
    CHECK_THAT(explain(std::get<Refusal>(out), Step::clear), !Catch::Contains(") It is"));  // the ledger's sentence ends first
  }
  CHECK_THAT(explain(std::get<Refusal>(fence->clear("running", "alice", "why not")), Step::clear),
             Catch::Contains("Wait for its outcome"));
  CHECK(std::get<IntentStatus>(fence->intent_status("running")).state == IntentState::in_flight);
  CHECK(std::holds_alternative<Replayed>(fence->prepare(charge("finished"))));
  CHECK(std::get<IntentStatus>(fence->intent_status("never-seen")).state == IntentState::none);
  fence->abort(running, "test over");
}

TEST_CASE("a refused clear of an attempt past its lease says whether its holder runs here or cannot be seen",
          "[fence][clear]") {
  TestLedger ledger;
  ManualClock clock;
  auto fence = open_fence(one_second_lease(ledger, clock));
  admitted_ticket(fence->prepare(charge("here")));
  admitted_ticket(fence->prepare(charge("elsewhere")));
  holder_on_another_host(ledger, "elsewhere");
  clock.advance(1500);
  CHECK_THAT(explain(std::get<Refusal>(fence->clear("here", "alice", "stuck?")), Step::clear),
             Catch::Contains("still runs on this host") && Catch::Contains("kill -TERM"));
  CHECK_THAT(explain(std::get<Refusal>(fence->clear("elsewhere", "alice", "stuck?")), Step::clear),
             Catch::Contains("cannot be seen from here") && Catch::Contains("stop it there first"));
}

TEST_CASE("a clear made with plain SQL is seen at once by an open fence", "[fence][clear]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  fence->abort(admitted_ticket(fence->prepare(charge("o-8"))), "ambiguous");
  CHECK(refusal_reason(fence->prepare(charge("o-8"))) == Reason::prior_failure);
  ledger.exec("INSERT INTO clears(intent, operator, reason) VALUES ('o-8', 'bob', 'checked: not charged')");
  CHECK(admitted_ticket(fence->prepare(charge("o-8"))).generation == 2);
}

TEST_CASE("the holder's late commit resolves an unknown outcome", "[fence][unknown]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  const Ticket t = admitted_ticket(fence->prepare(charge("o-9")));
  CHECK(FenceInternal::fence_own_in_flight(*fence, "shutting down") == 1);
  auto status = std::get<IntentStatus>(fence->intent_status("o-9"));
  CHECK(status.state == IntentState::unknown);
  CHECK(refusal_reason(fence->prepare(charge("o-9"))) == Reason::prior_failure);
  const Certificate cert = committed(*fence, t, {{"charge_id", "ch_9"}});
  auto replay = fence->prepare(charge("o-9"));
  REQUIRE(std::holds_alternative<Replayed>(replay));
  CHECK(std::get<Replayed>(replay).cert.hash == cert.hash);
}

TEST_CASE("a holder's commit after its intent was cleared records the effect, so it is replayed, not run again",
          "[fence][unknown]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  // Fenced unknown when its server stopped; an operator who found no charge
  // yet cleared it while the agent's call was still under way.
  const Ticket t = admitted_ticket(fence->prepare(charge("o-slow")));
  REQUIRE(FenceInternal::fence_own_in_flight(*fence, "serve exited") == 1);
  REQUIRE(std::holds_alternative<Cleared>(fence->clear("o-slow", "alice", "provider shows no charge yet")));
  const Certificate cert = committed(*fence, t, {{"charge_id", "ch_slow"}});
  CHECK(cert.generation == t.generation);

  auto retry = fence->prepare(charge("o-slow"));
  REQUIRE(std::holds_alternative<Replayed>(retry));
  CHECK(std::get<Replayed>(retry).cert.hash == cert.hash);
  auto status = std::get<IntentStatus>(fence->intent_status("o-slow"));
  CHECK(status.state == IntentState::done);
  CHECK_THAT(status.reason, Catch::Contains("committed after it was cleared"));
  CHECK(ledger.count("SELECT count(*) FROM events WHERE intent = 'o-slow' AND kind = 'committed' AND "
                     "detail LIKE '%\"after_clear\":true%'") == 1);
  CHECK(ledger.count("SELECT count(*) FROM events WHERE intent = 'o-slow' AND kind = 'commit_refused'") == 0);

  // The same for an intent an operator cleared after its holder aborted it.
  const Ticket aborted = admitted_ticket(fence->prepare(charge("o-aborted")));
  REQUIRE(std::holds_alternative<Aborted>(fence->abort(aborted, "provider timed out")));
  REQUIRE(std::holds_alternative<Cleared>(fence->clear("o-aborted", "alice", "no charge found")));
  committed(*fence, aborted, {{"charge_id", "ch_after_all"}});
  CHECK(std::holds_alternative<Replayed>(fence->prepare(charge("o-aborted"))));
}

TEST_CASE("status reads never create rows", "[fence][status]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  auto intent = std::get<IntentStatus>(fence->intent_status("nobody"));
  auto domain = std::get<DomainStatus>(fence->domain_status("nowhere"));
  CHECK(intent.state == IntentState::none);
  CHECK_FALSE(domain.exists);
  CHECK(domain.seq == 0);
  CHECK(ledger.count("SELECT count(*) FROM intents") == 0);
  CHECK(ledger.count("SELECT count(*) FROM domains") == 0);
}

TEST_CASE("certificates chain to their parent and their clocks dominate it", "[fence][certificate]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  PrepareRequest a = charge("step-1", 1, "agent-a");
  a.domain = "pipeline";
  const Certificate first = committed(*fence, admitted_ticket(fence->prepare(a)), {{"n", 1}});
  CHECK(first.parent.empty());

  PrepareRequest b = charge("step-2", 2, "agent-b");
  b.domain = "pipeline";
  VectorClock known;
  known.tick("agent-b");
  known.tick("agent-b");
  b.known_clock = known;
  const Certificate second = committed(*fence, admitted_ticket(fence->prepare(b)), {{"n", 2}});
  CHECK(second.parent == first.hash);  // default parent: the domain's latest effect
  CHECK(first.vector_clock.le(second.vector_clock));
  CHECK_FALSE(second.vector_clock.le(first.vector_clock));
  CHECK(second.vector_clock.get("agent-b") == 3);
  CHECK(second.verify());

  auto domain = std::get<DomainStatus>(fence->domain_status("pipeline"));
  CHECK(domain.seq == 2);
  CHECK(domain.head == second.hash);
  CHECK(second.vector_clock.le(domain.clock));

  PrepareRequest c = charge("step-3", 3);
  c.parent = std::string(64, 'f');
  CHECK(refusal_reason(fence->prepare(c)) == Reason::invalid_request);
  // Nothing was decided: no intent, no seq handed out, no admission.
  CHECK(ledger.count("SELECT count(*) FROM intents WHERE intent = 'step-3'") == 0);
  CHECK(ledger.count("SELECT count(*) FROM events WHERE intent = 'step-3'") == 0);
  CHECK(std::get<DomainStatus>(fence->domain_status(c.domain)).seq == 0);
  c.parent = second.hash;
  const Certificate third = std::get<Certificate>(fence->commit(admitted_ticket(fence->prepare(c)), {{"n", 3}}));
  CHECK(third.seq == 1);
  CHECK(third.parent == second.hash);
}

TEST_CASE("a certificate sealed before its commit reaches the ledger is the one the ledger would seal",
          "[fence][certificate]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  auto chain = [&](Fence& f, const std::string& intent, const std::string& agent, int n) {
    PrepareRequest r = charge(intent, n, agent);
    r.domain = "pipeline";
    return committed(f, admitted_ticket(f.prepare(r)), {{"n", n}});
  };
  const Certificate first = chain(*fence, "step-1", "agent-a", 1);
  // This process admitted step-2 and committed its parent: sealed ahead.
  const Certificate second = chain(*fence, "step-2", "agent-b", 2);
  // Another process knows neither: its writer seals step-3.
  auto other = open_fence(ledger.settings());
  const Certificate third = chain(*other, "step-3", "agent-a", 3);

  VectorClock expected = first.vector_clock;
  expected.tick("agent-b");
  CHECK(second.parent == first.hash);
  CHECK(second.vector_clock == expected);
  expected.tick("agent-a");
  CHECK(third.parent == second.hash);
  CHECK(third.vector_clock == expected);
  for (const Certificate* cert : {&first, &second, &third}) {
    INFO(cert->intent);
    CHECK(cert->verify());
    const auto status = std::get<IntentStatus>(fence->intent_status(cert->intent));
    REQUIRE(status.cert);
    CHECK(status.cert->hash == cert->hash);
  }
}

TEST_CASE("a commit is certified with the admission the ledger holds, not the one its process remembers",
          "[fence][certificate]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  const Ticket t = admitted_ticket(fence->prepare(charge("o-9", 4900)));
  // Changed by hand while its tool runs: the ledger's row is the record.
  ledger.exec("UPDATE intents SET args = '{\"amount_cents\":1,\"order\":\"o-9\"}' WHERE intent = 'o-9'");
  const Certificate cert = committed(*fence, t, {{"charge_id", "ch_9"}});
  CHECK(cert.args == Json{{"amount_cents", 1}, {"order", "o-9"}});
  CHECK(cert.verify());
  const auto status = std::get<IntentStatus>(fence->intent_status("o-9"));
  REQUIRE(status.cert);
  CHECK(status.cert->hash == cert.hash);
}

TEST_CASE("sweep drops finished intents after the result TTL but keeps certificates", "[fence][sweep]") {
  TestLedger ledger;
  ManualClock clock;
  Settings s = ledger.settings();
  s.result_ttl_ms = 1000;
  clock.drive(s);
  auto fence = open_fence(s);
  committed(*fence, admitted_ticket(fence->prepare(charge("old"))), {{"ok", 1}});
  fence->abort(admitted_ticket(fence->prepare(charge("fenced"))), "unclear");
  CHECK(FenceInternal::sweep(*fence) == 0);
  clock.advance(2000);
  CHECK(FenceInternal::sweep(*fence) == 1);
  CHECK(ledger.count("SELECT count(*) FROM certificates WHERE intent = 'old'") == 1);
  // SQLite keeps its name with its row's id, where a late commit finds its
  // admission (PostgreSQL looks events up by name).
  if (!ledger.is_postgres()) CHECK(ledger.count("SELECT count(*) FROM swept_intents WHERE intent = 'old'") == 1);
  CHECK(std::get<IntentStatus>(fence->intent_status("fenced")).state == IntentState::failed);
  auto again = open_fence(s);  // a fresh process has no cache
  CHECK(admitted_ticket(again->prepare(charge("old"))).generation == 1);
}

TEST_CASE("a process with a shorter result TTL does not sweep results a longer-lived process keeps",
          "[fence][sweep]") {
  TestLedger ledger;
  ManualClock clock;
  Settings week = ledger.settings();
  week.result_ttl_ms = 7 * 86'400'000LL;
  clock.drive(week);
  auto server = open_fence(week);
  CHECK(FenceInternal::sweep(*server) == 0);  // a server sweeps when it starts: that records its TTL
  const Certificate charged = committed(*server, admitted_ticket(server->prepare(charge("o-1"))), {{"ok", 1}});
  clock.advance(2 * 86'400'000LL);

  Settings day = week;
  day.result_ttl_ms = 86'400'000;
  auto one_off = open_fence(day);  // e.g. a `serve` started from a shell with the default TTL
  CHECK(FenceInternal::sweep(*one_off) == 0);
  CHECK(std::get<Replayed>(one_off->prepare(charge("o-1"))).cert.hash == charged.hash);
  CHECK(ledger.count("SELECT value FROM retention WHERE name = 'result_ttl_ms'") == week.result_ttl_ms);

  // Lowering it is the operator's decision, made in the ledger.
  ledger.exec("UPDATE retention SET value = 86400000 WHERE name = 'result_ttl_ms'");
  CHECK(FenceInternal::sweep(*one_off) == 1);
  CHECK(ledger.count("SELECT count(*) FROM events WHERE kind = 'swept' AND CAST(" +
                     ledger.json_member("detail", "result_ttl_ms") + " AS BIGINT) = 86400000") == 1);
}

TEST_CASE("opening a fence records its result TTL in the ledger at once, before any sweep of its own",
          "[fence][sweep]") {
  TestLedger ledger;
  Settings s = ledger.settings();
  s.result_ttl_ms = 5 * 86'400'000LL;
  auto fence = open_fence(s);
  // What a sweep by hand (docs/OPERATIONS.md) reads for its cutoff: with
  // nothing recorded, it would forget every result at once.
  CHECK(ledger.count("SELECT value FROM retention WHERE name = 'result_ttl_ms'") == s.result_ttl_ms);
  Settings shorter = s;
  shorter.result_ttl_ms = 1000;
  auto other = open_fence(shorter);  // never lowers it
  CHECK(ledger.count("SELECT value FROM retention WHERE name = 'result_ttl_ms'") == s.result_ttl_ms);
  // A process that promises no replays (an operator's clear) does not raise it.
  Settings longer = s;
  longer.result_ttl_ms = 9 * 86'400'000LL;
  longer.promises_result_ttl = false;
  auto operator_command = open_fence(longer);
  CHECK(ledger.count("SELECT value FROM retention WHERE name = 'result_ttl_ms'") == s.result_ttl_ms);
}

TEST_CASE("withdrawing an admission no one received makes the next prepare fresh, and touches nothing else",
          "[fence][withdraw]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  auto withdraw = [&](const Ticket& ticket) {
    std::promise<bool> done;
    fence->withdraw_async(ticket, "never sent", [&done](bool withdrawn) { done.set_value(withdrawn); });
    return done.get_future().get();
  };
  const Ticket unsent = admitted_ticket(fence->prepare(charge("o-unsent")));
  CHECK(withdraw(unsent));
  CHECK(std::get<IntentStatus>(fence->intent_status("o-unsent")).state == IntentState::cleared);
  CHECK(admitted_ticket(fence->prepare(charge("o-unsent"))).generation == 2);
  CHECK(ledger.count("SELECT count(*) FROM events WHERE intent = 'o-unsent' AND kind = 'cleared'") == 1);

  // Not in flight under that ticket any more: left as it is.
  const Ticket done = admitted_ticket(fence->prepare(charge("o-done")));
  const Certificate cert = committed(*fence, done, {{"ok", 1}});
  CHECK_FALSE(withdraw(done));
  CHECK(std::get<Replayed>(fence->prepare(charge("o-done"))).cert.hash == cert.hash);
  const Ticket aborted = admitted_ticket(fence->prepare(charge("o-aborted")));
  REQUIRE(std::holds_alternative<Aborted>(fence->abort(aborted, "it failed")));
  CHECK_FALSE(withdraw(aborted));
  CHECK(std::get<IntentStatus>(fence->intent_status("o-aborted")).state == IntentState::failed);
  Ticket forged = admitted_ticket(fence->prepare(charge("o-held")));
  forged.token = std::string(32, '0');
  CHECK_FALSE(withdraw(forged));
  CHECK(std::get<IntentStatus>(fence->intent_status("o-held")).state == IntentState::in_flight);
}

TEST_CASE("an evicted domain never hands out an old sequence number again", "[fence][domain]") {
  TestLedger ledger;
  Settings s = ledger.settings();
  s.result_ttl_ms = 0;  // every process on this ledger keeps no result: a sweep forgets them at once
  auto fence = open_fence(s);
  PrepareRequest r = charge("e-1");
  r.domain = "scratch";
  committed(*fence, admitted_ticket(fence->prepare(r)), {{"ok", 1}});
  CHECK_FALSE(FenceInternal::evict_domain(*fence, "scratch"));  // an intent still refers to it
  auto sweeper = open_fence(s);
  CHECK(FenceInternal::sweep(*sweeper) == 1);
  CHECK(FenceInternal::evict_domain(*sweeper, "scratch"));
  CHECK_FALSE(std::get<DomainStatus>(sweeper->domain_status("scratch")).exists);
  PrepareRequest next = charge("e-2");
  next.domain = "scratch";
  CHECK(admitted_ticket(sweeper->prepare(next)).seq == 2);
}

TEST_CASE("stats count every outcome for the process and the ledger", "[fence][stats]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  auto other = open_fence(ledger.settings());
  const Ticket t = admitted_ticket(fence->prepare(charge("s-1")));
  refusal_reason(fence->prepare(charge("s-1")));          // in_flight (its holder's process)
  refusal_reason(other->prepare(charge("s-1")));          // in_flight (ledger)
  refusal_reason(other->prepare(charge("s-1", 1)));       // payload_mismatch
  committed(*fence, t, {{"ok", true}});
  CHECK(std::holds_alternative<Replayed>(other->prepare(charge("s-1"))));

  auto mine = std::get<Stats>(fence->stats());
  CHECK(mine.process.admitted == 1);
  CHECK(mine.process.refused_in_flight == 1);
  CHECK(mine.process.total_attempts() == 2);
  auto theirs = std::get<Stats>(other->stats());
  CHECK(theirs.process.refused_in_flight == 1);
  CHECK(theirs.process.refused_payload_mismatch == 1);
  CHECK(theirs.process.replayed == 1);
  CHECK(theirs.ledger.admitted == 1);
  CHECK(theirs.ledger.total_attempts() == 5);
  CHECK(theirs.ledger.prevented() == 4);
  const Json j = theirs.to_json();
  CHECK(j["ledger"]["prevented"] == 4);
  CHECK(j["ledger"]["refused"]["in_flight"] == 2);
}

TEST_CASE("invalid requests are refused before anything is recorded", "[fence][input]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  PrepareRequest empty_intent = charge("");
  CHECK(refusal_reason(fence->prepare(empty_intent)) == Reason::invalid_request);
  PrepareRequest huge = charge("big");
  huge.args = {{"amount", int64_t{9007199254740993}}};
  CHECK(refusal_reason(fence->prepare(huge)) == Reason::invalid_request);
  PrepareRequest bad_utf8 = charge("bad");
  bad_utf8.args = {{"note", std::string("\xff\xfe")}};
  CHECK(refusal_reason(fence->prepare(bad_utf8)) == Reason::invalid_request);
  CHECK(ledger.count("SELECT count(*) FROM intents") == 0);
}

TEST_CASE("a name with a NUL character is refused on every ledger, and free text keeps one, escaped",
          "[fence][input]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  const std::string nul_name = std::string("charge:o-1") + '\0' + "second";
  for (std::string PrepareRequest::*field :
       {&PrepareRequest::intent, &PrepareRequest::domain, &PrepareRequest::tool, &PrepareRequest::agent}) {
    PrepareRequest request = charge("o-1");
    request.*field = nul_name;
    auto refused = fence->prepare(request);
    REQUIRE(refusal_reason(refused) == Reason::invalid_request);
    CHECK_THAT(explain(std::get<Refusal>(refused), Step::prepare), Catch::Contains("NUL character"));
  }
  PrepareRequest read_nul = charge("o-1");
  read_nul.read_set = {{nul_name, 0}};
  CHECK(refusal_reason(fence->prepare(read_nul)) == Reason::invalid_request);
  CHECK(ledger.count("SELECT count(*) FROM intents") == 0);
  // Nor does a ticket or a lookup carry one to the ledger.
  const Ticket held = admitted_ticket(fence->prepare(charge("o-held")));
  Ticket edited = held;
  edited.intent = nul_name;
  CHECK(std::get<Refusal>(fence->commit(edited, {{"ok", true}})).reason == Reason::ticket_invalid);
  CHECK(std::get<Refusal>(fence->abort(edited, "no")).reason == Reason::ticket_invalid);
  CHECK(std::get<Refusal>(fence->heartbeat(edited)).reason == Reason::ticket_invalid);
  CHECK(std::get<Refusal>(fence->intent_status(nul_name)).reason == Reason::invalid_request);
  CHECK(std::get<Refusal>(fence->domain_status(nul_name)).reason == Reason::invalid_request);
  committed(*fence, held, {{"ok", true}});

  // A tool's error in an abort reason may hold one: kept, written as \u0000.
  const Ticket t = admitted_ticket(fence->prepare(charge("o-1")));
  REQUIRE(std::holds_alternative<Aborted>(fence->abort(t, std::string("declined") + '\0' + "by the provider")));
  CHECK(std::get<IntentStatus>(fence->intent_status("o-1")).reason == "aborted: declined\\u0000by the provider");
  REQUIRE(std::holds_alternative<Cleared>(fence->clear("o-1", "alice", std::string("no charge") + '\0' + "found")));
  CHECK(std::get<IntentStatus>(fence->intent_status("o-1")).reason == "no charge\\u0000found");
}

TEST_CASE("fence_unknown fences one held ticket, its holder can still resolve it", "[fence][unknown]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  const Ticket cancelled = admitted_ticket(fence->prepare(charge("cancelled")));
  const Ticket other = admitted_ticket(fence->prepare(charge("untouched")));
  Ticket forged = cancelled;
  forged.token = std::string(32, '0');
  CHECK_FALSE(fence->fence_unknown(forged, "not the holder"));
  CHECK(std::get<IntentStatus>(fence->intent_status("cancelled")).state == IntentState::in_flight);

  CHECK(fence->fence_unknown(cancelled, "the agent cancelled mid-call"));
  auto status = std::get<IntentStatus>(fence->intent_status("cancelled"));
  CHECK(status.state == IntentState::unknown);
  CHECK(status.reason == "the agent cancelled mid-call");
  CHECK(std::get<IntentStatus>(fence->intent_status("untouched")).state == IntentState::in_flight);
  CHECK(refusal_reason(fence->prepare(charge("cancelled"))) == Reason::prior_failure);
  CHECK_FALSE(fence->fence_unknown(cancelled, "twice"));
  REQUIRE(std::holds_alternative<Aborted>(fence->abort(cancelled, "provider shows it failed")));
  CHECK(std::get<IntentStatus>(fence->intent_status("cancelled")).state == IntentState::failed);
  committed(*fence, other, {{"ok", true}});
}
