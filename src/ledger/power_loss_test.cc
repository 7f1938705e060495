// Durability under power loss: no answer is ever given for a decision that
// a power cut could undo. The ledger runs on PowerLossVfs, which keeps every
// file as of its last sync; a "crash copy" taken at any instant must still
// hold every admission and every certificate answered before that instant.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <sqlite3.h>

#include <catch2/catch.hpp>

#include "effectfence/refusal_text.h"
#include "effectfence/fence.h"
#include "ledger/sqlite_ledger.h"
#include "support/fence_helpers.h"
#include "support/power_loss_vfs.h"
#include "support/sqlite_query.h"
#include "support/temp_dir.h"

using namespace effectfence;
using namespace effectfence::testing;

namespace {

void exec(sqlite3* db, const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    const std::string message = error ? error : "?";
    sqlite3_free(error);
    FAIL(sql << ": " << message);
  }
}

// What the fence had answered when the power went: intents admitted, and
// the certificate hash of every intent committed.
struct Answered {
  std::set<std::string> admitted;
  std::map<std::string, std::string> committed;
};

// Keeps `width` prepare -> commit chains running on fresh intents until
// stopped, recording each answer as it is given.
class Workload {
 public:
  Workload(Fence& fence, int width) : fence_(fence) {
    for (int i = 0; i < width; ++i) start_next();
  }

  Answered answered() {
    std::lock_guard<std::mutex> lock(mutex_);
    return answered_;
  }

  void stop_and_wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    stopping_ = true;
    idle_.wait(lock, [this] { return running_ == 0; });
  }

  std::vector<std::string> failures() {
    std::lock_guard<std::mutex> lock(mutex_);
    return failures_;
  }

 private:
  void start_next() {
    std::string intent;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
      ++running_;
      intent = "power:" + std::to_string(next_++);
    }
    fence_.prepare_async(charge(intent), [this, intent](PrepareOutcome outcome) {
      if (!std::holds_alternative<Admitted>(outcome)) return chain_ended("prepare " + intent + ": " + outcome_name(outcome));
      {
        std::lock_guard<std::mutex> lock(mutex_);
        answered_.admitted.insert(intent);
      }
      fence_.commit_async(std::get<Admitted>(outcome).ticket, Json{{"charged", intent}},
                          [this, intent](CommitOutcome committed) {
                            if (!std::holds_alternative<Certificate>(committed)) {
                              return chain_ended("commit " + intent + " refused");
                            }
                            {
                              std::lock_guard<std::mutex> lock(mutex_);
                              answered_.committed[intent] = std::get<Certificate>(committed).hash;
                            }
                            chain_ended("");
                            start_next();
                          });
    });
  }

  void chain_ended(const std::string& failure) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure.empty()) failures_.push_back(failure);
    --running_;
    idle_.notify_all();
  }

  Fence& fence_;
  std::mutex mutex_;
  std::condition_variable idle_;
  bool stopping_ = false;
  int running_ = 0;
  int next_ = 0;
  Answered answered_;
  std::vector<std::string> failures_;
};

}  // namespace

TEST_CASE("the power-loss simulator keeps what was synced and drops what was not", "[ledger][power_loss]") {
  PowerLossVfs vfs;
  TempDir dir, after;
  const std::string path = dir.file("t.sqlite");
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  exec(db, "PRAGMA journal_mode = WAL");
  exec(db, "PRAGMA synchronous = FULL");
  exec(db, "CREATE TABLE t (n INTEGER)");
  for (int i = 0; i < 10; ++i) exec(db, "INSERT INTO t VALUES (" + std::to_string(i) + ")");
  exec(db, "PRAGMA synchronous = OFF");  // committed, never synced
  for (int i = 10; i < 20; ++i) exec(db, "INSERT INTO t VALUES (" + std::to_string(i) + ")");
  REQUIRE(vfs.crash_copy(dir.path().string(), after.path().string()) >= 1);
  sqlite3_close(db);

  CHECK(query_int64(path, "SELECT count(*) FROM t") == 20);                    // the machine that kept running
  CHECK(query_int64(after.file("t.sqlite"), "SELECT count(*) FROM t") == 10);  // the one that lost power
}

TEST_CASE("a power loss at any instant keeps every admission and certificate answered before it",
          "[ledger][power_loss]") {
  PowerLossVfs vfs;
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  open_fence(file_settings(path)).reset();  // created and checkpointed: the database file itself is synced

  struct Crash {
    std::unique_ptr<TempDir> copy = std::make_unique<TempDir>();
    Answered answered;
  };
  std::vector<Crash> crashes(4);
  {
    auto fence = open_fence(file_settings(path));
    Workload work(*fence, 24);
    size_t progress = 0;
    for (Crash& crash : crashes) {
      // The power goes once some more commits were answered (however slow
      // the machine), while two dozen chains are still mid-flight.
      progress += 10;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (work.answered().committed.size() < progress && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      // What was answered is read first: all of it must be in the copy.
      crash.answered = work.answered();
      REQUIRE(vfs.crash_copy(dir.path().string(), crash.copy->path().string()) >= 2);
    }
    work.stop_and_wait();
    CHECK(work.failures().empty());
  }

  for (Crash& crash : crashes) {
    INFO(crash.answered.admitted.size() << " admitted and " << crash.answered.committed.size()
                                        << " committed before the power went");
    REQUIRE_FALSE(crash.answered.committed.empty());  // the test saw real work, not an idle ledger
    auto recovered = open_fence(file_settings(crash.copy->file("l.sqlite")));
    for (const std::string& intent : crash.answered.admitted) {
      auto status = recovered->intent_status(intent);
      REQUIRE(std::holds_alternative<IntentStatus>(status));
      INFO(intent);
      CHECK(std::get<IntentStatus>(status).state != IntentState::none);
    }
    for (const auto& [intent, hash] : crash.answered.committed) {
      auto status = recovered->intent_status(intent);
      REQUIRE(std::holds_alternative<IntentStatus>(status));
      const IntentStatus& s = std::get<IntentStatus>(status);
      INFO(intent);
      REQUIRE(s.state == IntentState::done);
      REQUIRE(s.cert);
      CHECK(s.cert->hash == hash);
      CHECK(s.cert->verify());
    }
  }
}

namespace {

std::unique_ptr<Ledger> open_file_ledger(const std::string& path) {
  auto opened = open_sqlite_ledger(path, 5000);
  if (auto* error = std::get_if<OpenError>(&opened)) FAIL("open failed: " << error->message);
  return std::move(std::get<std::unique_ptr<Ledger>>(opened));
}

std::optional<Refusal> record_event(Ledger& ledger, const std::string& intent) {
  return ledger.write([&](LedgerTxn& txn) {
    EventRecord e;
    e.kind = EventKind::admitted;
    e.intent = intent;
    e.actor = "test";
    txn.append_event(e, 0);
  });
}

}  // namespace

TEST_CASE("a log that cannot be synced: nothing is answered as decided, and the ledger refuses until reopened",
          "[ledger][power_loss]") {
  PowerLossVfs vfs;
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  {
    auto ledger = open_file_ledger(path);
    REQUIRE_FALSE(record_event(*ledger, "before"));

    vfs.fail_syncs_of("-wal");
    const auto failed = record_event(*ledger, "unsynced");
    REQUIRE(failed);
    CHECK(failed->reason == Reason::ledger_error);
    CHECK(explain(*failed, Step::prepare).find("the disk failed") != std::string::npos);
    CHECK(explain(*failed, Step::prepare).find("recorded is unknown") != std::string::npos);

    // The disk recovers; this process still trusts nothing it would write.
    vfs.fail_syncs_of("");
    const auto later = record_event(*ledger, "later");
    REQUIRE(later);
    CHECK(explain(*later, Step::prepare).find("refuses every decision") != std::string::npos);
  }
  auto reopened = open_file_ledger(path);  // a restart, once the disk is healthy
  CHECK_FALSE(record_event(*reopened, "after restart"));
  CHECK(query_int64(path, "SELECT count(*) FROM events WHERE intent = 'later'") == 0);
}

TEST_CASE("a decision that fails for its own reason as the log's disk fails: restart, never retry",
          "[ledger][power_loss]") {
  PowerLossVfs vfs;
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  {
    auto ledger = open_file_ledger(path);
    REQUIRE_FALSE(record_event(*ledger, "before"));
    const auto failed = ledger->write([&](LedgerTxn& txn) {
      // Past the page cache: pages go to the log before any commit.
      for (int i = 0; i < 5000; ++i) {
        EventRecord e;
        e.kind = EventKind::admitted;
        e.intent = "spill-" + std::to_string(i) + std::string(500, 'x');
        e.actor = "test";
        txn.append_event(e, 0);
      }
      // The decision fails for its own reason, and the disk fails meanwhile.
      vfs.fail_writes_of("-wal", SQLITE_IOERR_WRITE);
      throw std::runtime_error("the decision's own failure");
    });
    REQUIRE(failed);
    CHECK(failed->reason == Reason::ledger_error);
    CHECK_THAT(explain(*failed, Step::prepare), Catch::Contains("restart") && !Catch::Contains("retry"));
    vfs.fail_writes_of("", 0);
    const auto later = record_event(*ledger, "later");
    REQUIRE(later);
    CHECK_THAT(explain(*later, Step::prepare), Catch::Contains("refuses every decision") && !Catch::Contains("retry"));
  }
  auto reopened = open_file_ledger(path);
  CHECK(query_int64(path, "SELECT count(*) FROM events WHERE intent LIKE 'spill-%' OR intent = 'later'") == 0);
}

TEST_CASE("a log write that fails inside a batch, or a full disk: the ledger says to restart, never to retry",
          "[ledger][power_loss]") {
  // What the file system's layer reports: an I/O error, or a full disk (ENOSPC).
  const int error = GENERATE(SQLITE_IOERR_WRITE, SQLITE_FULL);
  CAPTURE(error);
  PowerLossVfs vfs;
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  {
    auto ledger = open_file_ledger(path);
    REQUIRE_FALSE(record_event(*ledger, "before"));

    // A decision larger than SQLite's page cache writes pages to the log
    // before its commit: the write fails in the middle of the batch.
    vfs.fail_writes_of("-wal", error);
    const auto failed = ledger->write([&](LedgerTxn& txn) {
      for (int i = 0; i < 5000; ++i) {
        EventRecord e;
        e.kind = EventKind::admitted;
        e.intent = "spill-" + std::to_string(i) + std::string(500, 'x');
        e.actor = "test";
        txn.append_event(e, 0);
      }
    });
    REQUIRE(failed);
    CHECK(failed->reason == Reason::ledger_error);
    CHECK_THAT(explain(*failed, Step::prepare), Catch::Contains("the disk failed") && Catch::Contains("recorded is unknown") &&
                                    Catch::Contains("restart") && !Catch::Contains("retry"));

    // The disk recovers; this process still refuses, and says why.
    vfs.fail_writes_of("", 0);
    const auto later = record_event(*ledger, "later");
    REQUIRE(later);
    CHECK_THAT(explain(*later, Step::prepare), Catch::Contains("refuses every decision") && !Catch::Contains("retry"));
  }
  auto reopened = open_file_ledger(path);  // a restart, once the disk is healthy
  CHECK_FALSE(record_event(*reopened, "after restart"));
  CHECK(query_int64(path, "SELECT count(*) FROM events WHERE intent LIKE 'spill-%' OR intent = 'later'") == 0);
  CHECK(query_int64(path, "SELECT count(*) FROM events WHERE intent IN ('before', 'after restart')") == 2);
}
