// Group commit: concurrent decisions share one durable transaction, each
// still all-or-nothing, and none is answered before the shared commit.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <sqlite3.h>

#include <catch2/catch.hpp>

#include "effectfence/refusal_text.h"
#include "ledger/sqlite_ledger.h"
#include "support/sqlite_query.h"
#include "support/temp_dir.h"

using namespace effectfence;
using namespace effectfence::testing;

namespace {

std::unique_ptr<Ledger> open_ledger(const std::string& path) {
  auto opened = open_sqlite_ledger(path, 5000);
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(opened));
  return std::move(std::get<std::unique_ptr<Ledger>>(opened));
}

EventRecord marker(int i) {
  EventRecord e;
  e.kind = EventKind::admitted;
  e.intent = "job-" + std::to_string(i);
  e.actor = "test";
  return e;
}

// Makes SQLite roll back the whole transaction of any decision that appends
// an event matching `when`: RAISE(ROLLBACK) ends it, as an interrupt or a
// damaged page can, a real SQLite rollback in the middle of a batch.
void roll_back_events_where(const std::string& path, const std::string& when) {
  sqlite3* admin = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &admin) == SQLITE_OK);
  const std::string sql = "CREATE TRIGGER test_rollback BEFORE INSERT ON events WHEN " + when +
                          " BEGIN SELECT RAISE(ROLLBACK, 'simulated rollback'); END";
  const int rc = sqlite3_exec(admin, sql.c_str(), nullptr, nullptr, nullptr);
  sqlite3_close(admin);
  REQUIRE(rc == SQLITE_OK);
}

// Blocks the writer inside one decision until `n` more calls are queued
// behind it, so the next transaction is guaranteed to carry all of them.
void hold_writer_until_queued(Ledger& ledger, uint64_t n) {
  while (ledger.metrics().queued < n) std::this_thread::yield();
}

}  // namespace

TEST_CASE("decisions queued during a transaction share the next one", "[ledger][group_commit]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  auto ledger = open_ledger(path);
  constexpr int kFollowers = 63;
  std::atomic<bool> writer_held{false};
  std::atomic<int> failures{0};  // Catch assertions are for the main thread only
  std::thread leader([&] {
    failures += ledger->write([&](LedgerTxn& txn) {
      writer_held = true;
      hold_writer_until_queued(*ledger, kFollowers);
      txn.append_event(marker(-1), 1);
    }).has_value();
  });
  while (!writer_held) std::this_thread::yield();
  std::vector<std::thread> followers;
  for (int i = 0; i < kFollowers; ++i) {
    followers.emplace_back([&, i] {
      failures += ledger->write([&](LedgerTxn& txn) { txn.append_event(marker(i), 1); }).has_value();
    });
  }
  leader.join();
  for (auto& t : followers) t.join();
  CHECK(failures == 0);
  const LedgerMetrics m = ledger->metrics();
  CHECK(m.decisions == kFollowers + 1);
  CHECK(m.transactions == 2);  // the leader's, then all 63 followers together
  CHECK(query_int64(path, "SELECT count(*) FROM events") == kFollowers + 1);
}

TEST_CASE("a decision that fails rolls back alone inside a shared transaction", "[ledger][group_commit]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  auto ledger = open_ledger(path);
  std::atomic<int> refused{0};
  std::atomic<bool> writer_held{false};
  std::vector<Refusal> failures(3, Refusal{Reason::in_flight, Cause::none, {}});
  std::thread leader([&] {
    ledger->write([&](LedgerTxn&) {
      writer_held = true;
      hold_writer_until_queued(*ledger, 3);
    });
  });
  while (!writer_held) std::this_thread::yield();
  std::vector<std::thread> jobs;
  for (int i = 0; i < 3; ++i) {
    jobs.emplace_back([&, i] {
      auto failure = ledger->write([&](LedgerTxn& txn) {
        txn.append_event(marker(i), 1);
        if (i == 1) throw std::runtime_error("boom after writing");
      });
      if (failure) {
        failures[i] = *failure;
        ++refused;
      }
    });
  }
  leader.join();
  for (auto& t : jobs) t.join();
  CHECK(refused == 1);
  CHECK(failures[1].reason == Reason::ledger_error);
  CHECK_THAT(explain(failures[1], Step::prepare), Catch::Contains("boom after writing"));
  CHECK(query_int64(path, "SELECT count(*) FROM events WHERE intent = 'job-1'") == 0);
  CHECK(query_int64(path, "SELECT count(*) FROM events WHERE intent IN ('job-0', 'job-2')") == 2);
}

TEST_CASE("an answer is given only after its transaction is committed", "[ledger][group_commit]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  auto ledger = open_ledger(path);
  for (int i = 0; i < 20; ++i) {
    REQUIRE_FALSE(ledger->write([&](LedgerTxn& txn) { txn.append_event(marker(i), 1); }));
    // Another connection sees the row the moment write() returns.
    CHECK(query_int64(path, "SELECT count(*) FROM events WHERE intent = 'job-" + std::to_string(i) + "'") == 1);
  }
}

TEST_CASE("asynchronous writes are batched and each is answered once, after its commit", "[ledger][group_commit]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  auto ledger = open_ledger(path);
  constexpr int kJobs = 200;
  std::mutex mu;
  std::condition_variable all_done;
  std::vector<int> answers(kJobs, 0);
  std::vector<int64_t> visible(kJobs, -1);
  std::atomic<int> failed{0};
  int answered = 0;
  for (int i = 0; i < kJobs; ++i) {
    ledger->write_async(
        [i](LedgerTxn& txn) {
          txn.append_event(marker(i), 1);
          if (i % 50 == 7) throw std::runtime_error("job " + std::to_string(i) + " fails");
        },
        [&, i](std::optional<Refusal> failure) {
          // Runs on the ledger's completion thread; a second connection
          // must already see the committed row.
          const int64_t n = query_int64(path, "SELECT count(*) FROM events WHERE intent = 'job-" + std::to_string(i) + "'");
          std::lock_guard<std::mutex> lock(mu);
          answers[i] += 1;
          visible[i] = n;
          if (failure) failed += 1;
          if (++answered == kJobs) all_done.notify_all();
        });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(all_done.wait_for(lock, std::chrono::seconds(30), [&] { return answered == kJobs; }));
  }
  for (int i = 0; i < kJobs; ++i) {
    INFO("job " << i);
    CHECK(answers[i] == 1);
    CHECK(visible[i] == (i % 50 == 7 ? 0 : 1));  // a failed job left nothing behind
  }
  CHECK(failed == kJobs / 50);
  const LedgerMetrics m = ledger->metrics();
  CHECK(m.decisions == kJobs);
  CHECK(m.transactions < kJobs);  // queued while the writer was busy: batched
}

TEST_CASE("closing the ledger answers every asynchronous write still queued", "[ledger][group_commit]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  std::atomic<int> answered{0};
  std::atomic<int> committed{0};
  {
    auto ledger = open_ledger(path);
    for (int i = 0; i < 100; ++i) {
      ledger->write_async([i](LedgerTxn& txn) { txn.append_event(marker(i), 1); },
                          [&](std::optional<Refusal> failure) {
                            answered += 1;
                            if (!failure) committed += 1;
                          });
    }
  }  // destroyed with work still queued
  CHECK(answered == 100);
  CHECK(query_int64(path, "SELECT count(*) FROM events WHERE intent LIKE 'job-%'") == committed.load());
}

TEST_CASE("when SQLite rolls back the shared transaction, the decision it rolled back for is refused and the others "
          "are decided again",
          "[ledger][group_commit]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  auto ledger = open_ledger(path);
  roll_back_events_where(path, "NEW.intent = 'job-1'");

  std::atomic<bool> writer_held{false};
  std::thread leader([&] {
    ledger->write([&](LedgerTxn&) {
      writer_held = true;
      hold_writer_until_queued(*ledger, 3);
    });
  });
  while (!writer_held) std::this_thread::yield();
  // Queued in order: job-0, then job-1 (rolls everything back), then job-2,
  // so all three share the transaction job-1 ends.
  std::vector<std::optional<Refusal>> answers(3);
  std::vector<int> runs(3, 0);
  std::vector<std::thread> jobs;
  for (int i = 0; i < 3; ++i) {
    const uint64_t queued = ledger->metrics().queued;
    jobs.emplace_back([&, i] {
      answers[i] = ledger->write([&, i](LedgerTxn& txn) {
        runs[i] += 1;
        txn.append_event(marker(i), 1);
      });
    });
    while (ledger->metrics().queued == queued) std::this_thread::yield();
  }
  leader.join();
  for (auto& t : jobs) t.join();
  REQUIRE(answers[1]);
  CHECK(answers[1]->reason == Reason::ledger_error);
  CHECK_THAT(explain(*answers[1], Step::prepare), Catch::Contains("rolled back"));
  CHECK_FALSE(answers[0]);
  CHECK_FALSE(answers[2]);
  CHECK(runs == std::vector<int>{2, 1, 1});  // job-0 ran in the rolled-back transaction and again; job-2 once
  CHECK(query_int64(path, "SELECT count(*) FROM events WHERE intent = 'job-1'") == 0);
  CHECK(query_int64(path, "SELECT count(*) FROM events WHERE intent = 'job-0'") == 1);
  CHECK(query_int64(path, "SELECT count(*) FROM events WHERE intent = 'job-2'") == 1);
  // The ledger goes on deciding.
  CHECK_FALSE(ledger->write([&](LedgerTxn& txn) { txn.append_event(marker(3), 1); }));
  CHECK(query_int64(path, "SELECT count(*) FROM events WHERE intent = 'job-3'") == 1);
}

TEST_CASE("a batch SQLite rolls back at every decision still ends, each decision answered once",
          "[ledger][group_commit]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  auto ledger = open_ledger(path);
  roll_back_events_where(path, "NEW.intent LIKE 'job-%'");
  constexpr int kJobs = 20;
  std::mutex mu;
  std::condition_variable all_done;
  std::vector<int> answers(kJobs, 0);
  int refused = 0;
  int answered = 0;
  for (int i = 0; i < kJobs; ++i) {
    ledger->write_async([i](LedgerTxn& txn) { txn.append_event(marker(i), 1); },
                        [&, i](std::optional<Refusal> failure) {
                          std::lock_guard<std::mutex> lock(mu);
                          answers[i] += 1;
                          if (failure) refused += 1;
                          if (++answered == kJobs) all_done.notify_all();
                        });
  }
  std::unique_lock<std::mutex> lock(mu);
  REQUIRE(all_done.wait_for(lock, std::chrono::seconds(30), [&] { return answered == kJobs; }));
  CHECK(answers == std::vector<int>(kJobs, 1));
  CHECK(refused == kJobs);
  CHECK(query_int64(path, "SELECT count(*) FROM events WHERE intent LIKE 'job-%'") == 0);
}
