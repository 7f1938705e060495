// Writes and drives real ledgers for the operations tests, through the Fence
// API (the same code serve and wrap use), so the runbook's SQL is checked
// against what the fence really writes.
//
//   ops_ledger_fixture populate LEDGER      a realistic ledger (see populate())
//   ops_ledger_fixture session LEDGER       a live fence reading commands on stdin:
//                                       "prepare INTENT" | "commit INTENT" | "quit",
//                                       one answer line per command
//   ops_ledger_fixture commit-after-clear LEDGER INTENT
//                                       INTENT admitted, fenced unknown as its server
//                                       stops, cleared by an operator, and then
//                                       committed by its holder after all
//   ops_ledger_fixture bulk LEDGER N        N sealed, chained certificates and N events
//   ops_ledger_fixture maxrss OUT CMD...    runs CMD, writes its peak RSS (KiB) to OUT,
//                                       exits with CMD's status
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include <SQLiteCpp/SQLiteCpp.h>

#include "effectfence/refusal_text.h"
#include "effectfence/fence.h"
#include "fence/fence_internal.h"

namespace ef = effectfence;

namespace {

constexpr int64_t kDayMs = 86'400'000;

int64_t wall_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::unique_ptr<ef::Fence> open_fence(const std::string& path, std::function<int64_t()> clock = {}) {
  ef::Settings settings;
  settings.ledger_path = path;
  settings.clock_ms = clock;
  settings.ledger_clock_ms = std::move(clock);
  auto opened = ef::Fence::open(settings);
  if (auto* error = std::get_if<ef::OpenError>(&opened)) {
    std::fprintf(stderr, "ops_ledger_fixture: opening %s: %s\n", path.c_str(), error->message.c_str());
    std::exit(2);
  }
  return std::move(std::get<std::unique_ptr<ef::Fence>>(opened));
}

std::string after_prefix(const std::string& s, const std::string& prefix) { return s.substr(prefix.size()); }

// The one action each intent name stands for, so populate and session agree
// on payloads (a different payload would be payload_mismatch).
ef::PrepareRequest request_for(const std::string& intent) {
  ef::PrepareRequest r;
  r.intent = intent;
  if (intent.rfind("charge:order-", 0) == 0) {
    const std::string order = after_prefix(intent, "charge:order-");
    r.domain = "order:" + order;
    r.tool = "charge";
    r.args = {{"order", order}, {"amount_cents", 4900}, {"currency", "EUR"}};
    r.agent = "billing-agent";
  } else if (intent.rfind("receipt:order-", 0) == 0) {
    const std::string order = after_prefix(intent, "receipt:order-");
    r.domain = "order:" + order;
    r.tool = "send_receipt";
    r.args = {{"order", order}, {"to", "customer-" + order + "@example.com"}};
    r.agent = "mail-agent";
  } else if (intent.rfind("payout:batch-", 0) == 0) {
    r.domain = "payouts";
    r.tool = "payout";
    r.args = {{"batch", after_prefix(intent, "payout:batch-")}, {"amount_cents", 125000}};
    r.agent = "treasury-agent";
  } else {
    // Names and arguments with commas, quotes and a newline: CSV must quote them.
    r.domain = "tickets";
    r.tool = "open_ticket";
    r.args = {{"title", "db down, \"primary\" unreachable\nsince 09:00"}, {"severity", 1}};
    r.agent = "sre-agent, night shift";
  }
  return r;
}

const char* outcome_name(const ef::PrepareOutcome& o) {
  if (std::holds_alternative<ef::Admitted>(o)) return "admitted";
  if (std::holds_alternative<ef::Replayed>(o)) return "replayed";
  return ef::reason_name(std::get<ef::Refusal>(o).reason);
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "ops_ledger_fixture: %s\n", what.c_str());
  std::exit(2);
}

ef::Ticket admit(ef::Fence& fence, const ef::PrepareRequest& request) {
  auto outcome = fence.prepare(request);
  if (!std::holds_alternative<ef::Admitted>(outcome)) {
    die("expected " + request.intent + " to be admitted, got " + outcome_name(outcome));
  }
  return std::get<ef::Admitted>(outcome).ticket;
}

void expect(ef::Fence& fence, const ef::PrepareRequest& request, const std::string& expected) {
  const std::string got = outcome_name(fence.prepare(request));
  if (got != expected) die("expected " + request.intent + " to be " + expected + ", got " + got);
}

std::string run_effect(ef::Fence& fence, const std::string& intent, const ef::Json& result) {
  const ef::Ticket ticket = admit(fence, request_for(intent));
  auto committed = fence.commit(ticket, result);
  if (auto* refusal = std::get_if<ef::Refusal>(&committed)) die("commit of " + intent + ": " + ef::explain(*refusal, ef::Step::commit));
  return std::get<ef::Certificate>(committed).hash;
}

ef::Json charge_result(const std::string& intent) {
  return {{"charge_id", "ch_" + after_prefix(intent, "charge:order-")}, {"status", "succeeded"}};
}

// Two days ago: five charges and a receipt chained to one of them, all past
// the default result TTL (sweepable) and outside "the last hour".
// Now: order 123 charged and receipted (and retried: replayed), a ticket with
// awkward characters, payout batch 8 (with an in_flight and a domain_race
// refusal on the way), order 124 aborted (failed), order 125 fenced on exit
// (unknown), order 126 aborted, plus payload_mismatch, prior_failure and
// stale_read_set refusals.
int populate(const std::string& path) {
  auto offset = std::make_shared<std::atomic<int64_t>>(2 * kDayMs);
  auto fence = open_fence(path, [offset] { return wall_ms() - offset->load(); });

  for (int order = 100; order <= 104; ++order) {
    const std::string intent = "charge:order-" + std::to_string(order);
    run_effect(*fence, intent, charge_result(intent));
  }
  run_effect(*fence, "receipt:order-101", {{"sent", true}});

  offset->store(0);
  run_effect(*fence, "charge:order-123", charge_result("charge:order-123"));
  expect(*fence, request_for("charge:order-123"), "replayed");
  const ef::Ticket receipt123 = admit(*fence, request_for("receipt:order-123"));
  if (!std::holds_alternative<ef::Certificate>(fence->commit(receipt123, {{"sent", true}}))) {
    die("commit of receipt:order-123 failed");
  }
  // A retried commit with another result: refused, its result kept.
  if (!std::holds_alternative<ef::Refusal>(fence->commit(receipt123, {{"sent", true}, {"retry", 2}}))) {
    die("a second result for receipt:order-123 was not refused");
  }
  run_effect(*fence, "ticket:\"db down\", sev1", {{"ticket", "OPS-7"}});

  const ef::Ticket batch8 = admit(*fence, request_for("payout:batch-8"));
  expect(*fence, request_for("payout:batch-8"), "in_flight");
  ef::PrepareRequest race = request_for("payout:batch-7");
  race.read_set = {{"payouts", batch8.seq}};  // decided on the domain batch 8 is about to change
  expect(*fence, race, "domain_race");
  if (!std::holds_alternative<ef::Certificate>(fence->commit(batch8, {{"payout_id", "po_8"}}))) {
    die("commit of payout:batch-8 failed");
  }

  const ef::Ticket order124 = admit(*fence, request_for("charge:order-124"));
  fence->abort(order124, "provider timed out after 30s; the charge may or may not exist");
  expect(*fence, request_for("charge:order-124"), "prior_failure");

  admit(*fence, request_for("charge:order-125"));
  if (ef::FenceInternal::fence_own_in_flight(*fence, "server shut down while the charge was running") != 1) {
    die("expected charge:order-125 to be fenced on exit");
  }

  const ef::Ticket order126 = admit(*fence, request_for("charge:order-126"));
  fence->abort(order126, "provider answered 502");

  ef::PrepareRequest mismatch = request_for("charge:order-123");
  mismatch.args["amount_cents"] = 9900;
  expect(*fence, mismatch, "payload_mismatch");

  ef::PrepareRequest stale = request_for("charge:order-127");
  stale.read_set = {{"order:123", 0}};
  expect(*fence, stale, "stale_read_set");
  return 0;
}

int commit_after_clear(const std::string& path, const std::string& intent) {
  auto fence = open_fence(path);
  const ef::Ticket ticket = admit(*fence, request_for(intent));
  if (ef::FenceInternal::fence_own_in_flight(*fence, "server shut down while the charge was running") != 1) {
    die("expected " + intent + " to be fenced on exit");
  }
  if (!std::holds_alternative<ef::Cleared>(fence->clear(intent, "alice", "provider shows no charge yet"))) {
    die("could not clear " + intent);
  }
  auto committed = fence->commit(ticket, charge_result(intent));
  if (auto* refusal = std::get_if<ef::Refusal>(&committed)) die("commit of " + intent + ": " + ef::explain(*refusal, ef::Step::commit));
  std::cout << std::get<ef::Certificate>(committed).hash << std::endl;
  return 0;
}

// An intent committed, then swept after the result lifetime (the clock is
// moved two days on), then admitted again: a fresh attempt, which starts
// over at generation 1. With "rerun" that attempt is aborted, cleared, and
// run again at generation 2; with "admitted" it is left in flight. All of
// it is what the fence does of itself: verify must find nothing wrong.
int swept_and_run_again(const std::string& path, const std::string& intent, const std::string& until) {
  auto ahead = std::make_shared<std::atomic<int64_t>>(0);
  auto fence = open_fence(path, [ahead] { return wall_ms() + ahead->load(); });
  auto first = fence->commit(admit(*fence, request_for(intent)), charge_result(intent));
  if (auto* refusal = std::get_if<ef::Refusal>(&first)) die("commit of " + intent + ": " + ef::explain(*refusal, ef::Step::commit));
  ahead->store(2 * 86'400'000);
  if (ef::FenceInternal::sweep(*fence) < 1) die("the sweep did not drop " + intent);
  const ef::Ticket again = admit(*fence, request_for(intent));
  if (again.generation != 1) die("expected the attempt after the sweep at generation 1");
  if (until == "admitted") return 0;
  if (!std::holds_alternative<ef::Aborted>(fence->abort(again, "provider down"))) die("could not abort " + intent);
  if (!std::holds_alternative<ef::Cleared>(fence->clear(intent, "alice", "provider shows no charge"))) {
    die("could not clear " + intent);
  }
  auto rerun = fence->commit(admit(*fence, request_for(intent)), charge_result(intent));
  if (auto* refusal = std::get_if<ef::Refusal>(&rerun)) die("second commit of " + intent + ": " + ef::explain(*refusal, ef::Step::commit));
  return 0;
}

// A live fence, as a serve process would hold one, driven line by line so
// the test decides exactly when each step happens.
int session(const std::string& path) {
  auto fence = open_fence(path);
  std::map<std::string, ef::Ticket> held;
  std::cout << "ready" << std::endl;
  std::string command, intent;
  while (std::cin >> command) {
    if (command == "quit") break;
    std::getline(std::cin >> std::ws, intent);
    if (command == "prepare") {
      auto outcome = fence->prepare(request_for(intent));
      if (auto* admitted = std::get_if<ef::Admitted>(&outcome)) held[intent] = admitted->ticket;
      std::cout << outcome_name(outcome) << std::endl;
    } else if (command == "commit") {
      auto found = held.find(intent);
      if (found == held.end()) {
        std::cout << "not_held" << std::endl;
        continue;
      }
      auto committed = fence->commit(found->second, {{"ok", true}});
      if (auto* refusal = std::get_if<ef::Refusal>(&committed)) {
        std::cout << ef::reason_name(refusal->reason) << std::endl;
      } else {
        std::cout << "committed " << std::get<ef::Certificate>(committed).hash << std::endl;
      }
    } else {
      std::cout << "unknown_command" << std::endl;
    }
  }
  return 0;
}

// Sealed certificates chained per domain, written straight into the tables
// (far faster than a million fence decisions), plus as many events.
int bulk(const std::string& path, int64_t count) {
  open_fence(path).reset();  // creates the schema
  SQLite::Database db(path, SQLite::OPEN_READWRITE, 10'000);
  db.exec("PRAGMA synchronous = OFF");
  SQLite::Transaction tx(db);
  SQLite::Statement insert_cert(db, "INSERT INTO certificates (hash, body, committed_at) VALUES (?, ?, ?)");
  // Each certificate's admission, then its commit, as the fence writes them
  // for an intent whose row is gone (swept): minus its first event's id.
  SQLite::Statement insert_event(db,
                                 "INSERT INTO events (at, kind, intent, intent_id, domain, seq, generation, actor, "
                                 "detail) VALUES (?1, 'admitted', ?2, ?7, ?3, ?4, 1, ?5, '{}'), "
                                 "(?1, 'committed', ?2, ?7, ?3, ?4, 1, ?5, ?6)");
  constexpr int64_t kDomains = 1000;
  std::vector<std::string> head(kDomains);
  const int64_t start = wall_ms() - count;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t d = i % kDomains;
    ef::Certificate c;
    c.intent = "bulk:" + std::to_string(i);
    c.domain = "bulk-domain:" + std::to_string(d);
    c.seq = i / kDomains + 1;
    c.generation = 1;
    c.parent = head[d];
    c.tool = "charge";
    c.args = {{"n", i}};
    c.result = {{"ok", true}};
    c.agent = "bulk-agent";
    c.vector_clock = *ef::VectorClock::from_json({{c.agent, c.seq}});
    c.seal();
    head[d] = c.hash;
    const int64_t at = start + i;
    insert_cert.reset();
    insert_cert.bind(1, c.hash);
    insert_cert.bind(2, c.canonical_body());
    insert_cert.bind(3, static_cast<int64_t>(at));
    insert_cert.exec();
    insert_event.reset();
    insert_event.bind(1, static_cast<int64_t>(at));
    insert_event.bind(2, c.intent);
    insert_event.bind(3, c.domain);
    insert_event.bind(4, static_cast<int64_t>(c.seq));
    insert_event.bind(5, c.agent);
    insert_event.bind(6, ef::Json{{"certificate", c.hash}}.dump());
    insert_event.bind(7, static_cast<int64_t>(-(2 * i + 1)));
    insert_event.exec();
  }
  // The names as a sweep leaves them, with the numbers their events carry.
  db.exec("INSERT INTO swept_intents (intent, intent_id) SELECT DISTINCT intent, intent_id FROM events "
          "WHERE intent_id < 0");
  // Each domain's row, at its newest certificate, as commits leave it.
  SQLite::Statement insert_domain(db,
                                  "INSERT INTO domains (domain, seq, head, head_seq, updated_at) "
                                  "SELECT domain, max(seq), hash, max(seq), committed_at FROM certificates "
                                  "GROUP BY domain");  // SQLite: hash and committed_at of the max's row
  insert_domain.exec();
  tx.commit();
  return 0;
}

int maxrss(const std::string& out_path, char** argv) {
  const pid_t child = ::fork();
  if (child < 0) die("fork failed");
  if (child == 0) {
    ::execvp(argv[0], argv);
    std::perror("ops_ledger_fixture: exec");
    ::_exit(127);
  }
  int status = 0;
  struct rusage usage {};
  if (::wait4(child, &status, 0, &usage) != child) die("wait4 failed");
  std::ofstream(out_path) << usage.ru_maxrss << "\n";
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "populate" && argc == 3) return populate(argv[2]);
  if (mode == "session" && argc == 3) return session(argv[2]);
  if (mode == "commit-after-clear" && argc == 4) return commit_after_clear(argv[2], argv[3]);
  if (mode == "swept-and-run-again" && argc == 5) return swept_and_run_again(argv[2], argv[3], argv[4]);
  if (mode == "bulk" && argc == 4) return bulk(argv[2], std::stoll(argv[3]));
  if (mode == "maxrss" && argc >= 4) return maxrss(argv[2], argv + 3);
  std::fprintf(stderr,
               "usage: ops_ledger_fixture populate LEDGER | session LEDGER | commit-after-clear LEDGER INTENT | "
               "swept-and-run-again LEDGER INTENT admitted|rerun | bulk LEDGER N | maxrss OUT CMD...\n");
  return 2;
}
