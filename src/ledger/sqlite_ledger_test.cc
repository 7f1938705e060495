// Opening ledgers: creation, migration, and refusing every file that is not
// a ledger this binary can safely write.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <sqlite3.h>

#include <catch2/catch.hpp>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "ledger/archive.h"
#include "ledger/audit_reads.h"
#include "ledger/ledger_reader.h"
#include "ledger/migrations.h"
#include "ledger/sqlite_ledger.h"
#include "support/scoped_cwd.h"
#include "support/temp_dir.h"

using namespace effectfence;
using namespace effectfence::testing;

namespace {

void exec_sql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
}

// Every schema object, one line each, in a stable order.
std::string schema_dump(const std::string& path) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  REQUIRE(sqlite3_prepare_v2(db,
                             "SELECT type || ' ' || name || ': ' || coalesce(sql, '') FROM sqlite_master "
                             "WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name",
                             -1, &q, nullptr) == SQLITE_OK);
  std::string dump;
  while (sqlite3_step(q) == SQLITE_ROW) dump += std::string(reinterpret_cast<const char*>(sqlite3_column_text(q, 0))) + "\n";
  sqlite3_finalize(q);
  for (const char* pragma : {"PRAGMA application_id", "PRAGMA user_version"}) {
    REQUIRE(sqlite3_prepare_v2(db, pragma, -1, &q, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(q) == SQLITE_ROW);
    dump += std::string(pragma) + " = " + std::to_string(sqlite3_column_int(q, 0)) + "\n";
    sqlite3_finalize(q);
  }
  sqlite3_close(db);
  return dump;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

OpenError expect_refused(const std::string& path) {
  auto opened = open_sqlite_ledger(path, 1000);
  REQUIRE(std::holds_alternative<OpenError>(opened));
  return std::get<OpenError>(opened);
}

}  // namespace

TEST_CASE("a new file is created in WAL mode, marked as ours, at the latest schema", "[ledger][open]") {
  TempDir dir;
  const std::string path = dir.file("new.sqlite");
  auto opened = open_sqlite_ledger(path, 1000);
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(opened));
  opened = OpenError{};
  const std::string dump = schema_dump(path);
  CHECK_THAT(dump, Catch::Contains("PRAGMA application_id = " + std::to_string(kApplicationId)));
  CHECK_THAT(dump, Catch::Contains("PRAGMA user_version = " + std::to_string(latest_schema_version())));
  // The -wal file exists: WAL survives close (it is a property of the file).
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &q, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(q) == SQLITE_ROW);
  CHECK(std::string(reinterpret_cast<const char*>(sqlite3_column_text(q, 0))) == "wal");
  sqlite3_finalize(q);
  sqlite3_close(db);
}

TEST_CASE("migrating an empty file yields exactly schema/schema.sql", "[ledger][schema]") {
  TempDir dir;
  const std::string migrated = dir.file("migrated.sqlite");
  { std::ofstream touch(migrated); }  // an empty file, as a creator that died would leave
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(migrated, 1000)));
  const std::string documented = dir.file("documented.sqlite");
  exec_sql(documented, read_file(std::string(EFFECTFENCE_SOURCE_DIR) + "/schema/schema.sql"));
  CHECK(schema_dump(migrated) == schema_dump(documented));
}

namespace {

// How SQLite plans a query on the ledger at path: its EXPLAIN QUERY PLAN lines.
std::string query_plan(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, ("EXPLAIN QUERY PLAN " + sql).c_str(), -1, &q, nullptr) == SQLITE_OK);
  std::string plan;
  while (sqlite3_step(q) == SQLITE_ROW) plan += std::string(reinterpret_cast<const char*>(sqlite3_column_text(q, 3))) + "\n";
  sqlite3_finalize(q);
  sqlite3_close(db);
  return plan;
}

// Every SELECT any connection of this process prepares, while a
// SqlCapture lives: SQLite runs capture() on each connection it opens.
class SqlCapture {
 public:
  SqlCapture() {
    MutexLock lock(&mu_);
    texts_.clear();
    on_ = true;
    sqlite3_auto_extension(reinterpret_cast<void (*)()>(&SqlCapture::capture));
  }
  ~SqlCapture() {
    sqlite3_cancel_auto_extension(reinterpret_cast<void (*)()>(&SqlCapture::capture));
    MutexLock lock(&mu_);
    on_ = false;
  }
  std::set<std::string> taken() {
    MutexLock lock(&mu_);
    return texts_;
  }

 private:
  static int capture(sqlite3* db, const char**, const void*) {
    sqlite3_trace_v2(db, SQLITE_TRACE_STMT, &SqlCapture::traced, nullptr);
    return SQLITE_OK;
  }
  static int traced(unsigned, void*, void* stmt, void*) {
    const char* sql = sqlite3_sql(static_cast<sqlite3_stmt*>(stmt));
    MutexLock lock(&mu_);
    if (on_ && sql && std::string(sql).rfind("SELECT", 0) == 0) texts_.insert(sql);
    return 0;
  }
  static inline Mutex mu_;
  static inline bool on_ GUARDED_BY(mu_) = false;
  static inline std::set<std::string> texts_ GUARDED_BY(mu_);
};

}  // namespace

// Schema 15 does not index done intents by state, so a commit does not move
// an entry among every finished intent. SQLite uses that partial index only
// where the query's WHERE implies its condition: each reader by state must.
// The queries are the ones the code runs, caught as it prepares them.
TEST_CASE("the readers of intents by state go through the index of those not done", "[ledger][schema]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  std::set<std::string> taken;
  {
    SqlCapture capture;
    auto opened = open_sqlite_ledger(path, 1000);
    REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(opened));
    auto& ledger = std::get<std::unique_ptr<Ledger>>(opened);
    // The writer's (src/ledger/sqlite_txn.cc).
    REQUIRE_FALSE(ledger->write([](LedgerTxn& txn) {
      txn.count_live_in_flight("d", 0);
      txn.expired_in_flight("d", 0);
      txn.count_fenced("d");
      txn.in_flight_on_host("h");
    }));
    ledger->close();
    // stats, fenced and the runbook's (src/ledger/audit_reads.cc).
    auto reader = open_ledger_reader(path);
    REQUIRE(reader.ok());
    read_counts(**reader);
    read_fenced(**reader);
    read_past_lease(**reader, 0);
    read_holder_gone(**reader);
    reader->reset();
    // The archive's (src/ledger/archive.cc).
    archive::ArchiveOptions options;
    options.ledger_path = path;
    options.directory = dir.file("archive");
    options.before_ms = 1;
    archive::run_archive(options);
    taken = capture.taken();
  }
  std::vector<std::string> by_state{"SELECT * FROM fenced", "SELECT * FROM in_flight", "SELECT * FROM domain_sequences"};
  for (const std::string& sql : taken) {
    const bool not_done = sql.find("'in_flight'") != std::string::npos || sql.find("'failed'") != std::string::npos ||
                          sql.find("'unknown'") != std::string::npos;
    if (not_done && sql.find("FROM intents") != std::string::npos) by_state.push_back(sql);
  }
  // Every reader above was caught (a capture that caught nothing would pass).
  CHECK(by_state.size() >= 3 + 9);
  for (const std::string& sql : by_state) {
    INFO(sql);
    const std::string plan = query_plan(path, sql);
    INFO(plan);
    CHECK(plan.find("intents_not_done") != std::string::npos);
    CHECK(plan.find("SCAN intents") == std::string::npos);
  }
  // The control: IN does not imply the index's OR, and scans every intent.
  CHECK(query_plan(path, "SELECT * FROM intents WHERE state IN ('failed', 'unknown')").find("SCAN intents") !=
        std::string::npos);
}

TEST_CASE("reopening a ledger keeps its rows and applies nothing twice", "[ledger][schema]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
  exec_sql(path, "UPDATE counters SET value = 7 WHERE name = 'admitted'");
  auto opened = open_sqlite_ledger(path, 1000);
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(opened));
  Counters c;
  REQUIRE_FALSE(std::get<std::unique_ptr<Ledger>>(opened)->read([&](LedgerTxn& t) { c = t.load_counters(); }));
  CHECK(c.admitted == 7);
}

TEST_CASE("a ledger from a newer effectfence is refused", "[ledger][open]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
  exec_sql(path, "PRAGMA user_version = " + std::to_string(latest_schema_version() + 1));
  const OpenError e = expect_refused(path);
  CHECK(e.code == OpenErrorCode::newer_schema);
  CHECK_THAT(e.message, Catch::Contains("upgrade effectfence"));
}

TEST_CASE("a ledger whose schema version was set back by hand is refused as corrupt, and left as it was",
          "[ledger][open]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
  for (int version : {3, latest_schema_version() - 1}) {
    INFO(version);
    exec_sql(path, "PRAGMA user_version = " + std::to_string(version));
    const std::string before = schema_dump(path);
    const OpenError e = expect_refused(path);
    CHECK(e.code == OpenErrorCode::corrupt);
    CHECK_THAT(e.message, Catch::Contains("says it is at schema version " + std::to_string(version)) &&
                              Catch::Contains("set back by hand. Nothing was changed"));
    // No migration of the ones it ran before the failing one was kept.
    CHECK(schema_dump(path) == before);
  }
}

TEST_CASE("a ledger whose application_id was damaged is refused as corrupt, not as another application's file",
          "[ledger][open]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
  exec_sql(path, "PRAGMA application_id = 1430670915");  // one bit of byte 68 away, say
  const std::string before = schema_dump(path);
  const OpenError e = expect_refused(path);
  CHECK(e.code == OpenErrorCode::corrupt);
  CHECK_THAT(e.message, Catch::Contains("holds an effectfence ledger's tables") &&
                            Catch::Contains("application_id is 1430670915") && Catch::Contains("backup") &&
                            Catch::Contains("PRAGMA application_id = " + std::to_string(kApplicationId)));
  CHECK(schema_dump(path) == before);
  // Set back as the message says, it opens.
  exec_sql(path, "PRAGMA application_id = " + std::to_string(kApplicationId));
  CHECK(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
}

TEST_CASE("files that are not ledgers are refused and left untouched", "[ledger][open]") {
  TempDir dir;
  SECTION("a text file") {
    const std::string path = dir.file("notes.txt");
    std::ofstream(path) << std::string(200, 'x');
    CHECK(expect_refused(path).code == OpenErrorCode::not_a_ledger);
    CHECK(read_file(path) == std::string(200, 'x'));
  }
  SECTION("another application's SQLite database") {
    const std::string path = dir.file("other.sqlite");
    exec_sql(path, "CREATE TABLE invoices(id INTEGER)");
    CHECK(expect_refused(path).code == OpenErrorCode::not_a_ledger);
    CHECK_THAT(schema_dump(path), !Catch::Contains("intents"));
  }
  SECTION("a corrupt ledger") {
    const std::string path = dir.file("corrupt.sqlite");
    REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
    exec_sql(path, "PRAGMA wal_checkpoint(TRUNCATE)");
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    const std::string garbage(4000, '\x5a');
    f.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
    f.close();
    CHECK(expect_refused(path).code == OpenErrorCode::corrupt);
  }
  SECTION("a directory") {
    CHECK(expect_refused(dir.path().string()).code == OpenErrorCode::io);
  }
  SECTION("a directory where its -wal or -shm goes, named as such, not as an unwritable ledger") {
    const std::string path = dir.file("l.sqlite");
    REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
    const std::string suffix = GENERATE(std::string("-wal"), std::string("-shm"));
    std::filesystem::remove(path + suffix);
    std::filesystem::create_directory(path + suffix);
    const OpenError refused = expect_refused(path);
    CHECK(refused.code == OpenErrorCode::io);
    CHECK_THAT(refused.message, Catch::Contains(path + suffix + " beside it, which is a directory") &&
                                    Catch::Contains("Move " + path + suffix + " away"));
    CHECK(std::filesystem::is_directory(path + suffix));
  }
  SECTION("a pipe or a device") {
    const std::string fifo = dir.file("ledger.fifo");
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    const OpenError refused = expect_refused(fifo);
    CHECK(refused.code == OpenErrorCode::not_a_ledger);
    CHECK_THAT(refused.message, Catch::Contains("not a regular file"));
    CHECK(expect_refused("/dev/null").code == OpenErrorCode::not_a_ledger);
  }
  SECTION("the log, lock or journal of another database, empty or not there yet") {
    const std::string other = dir.file("other.sqlite");
    REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(other, 1000)));
    const std::string empty_log = other + "-wal";  // what a TRUNCATE checkpoint leaves
    std::ofstream(empty_log).close();
    const OpenError refused = expect_refused(empty_log);
    CHECK(refused.code == OpenErrorCode::not_a_ledger);
    CHECK_THAT(refused.message, Catch::Contains("the database " + other));
    CHECK(read_file(empty_log).empty());
    for (const char* suffix : {"-shm", "-journal"}) {
      CHECK(expect_refused(other + suffix).code == OpenErrorCode::not_a_ledger);
      CHECK_FALSE(std::filesystem::exists(other + suffix));
    }
  }
  SECTION("a path that cannot be created") {
    CHECK(expect_refused("/proc/effectfence-cannot-exist.sqlite").code == OpenErrorCode::unwritable);
  }
  SECTION("a path in a directory that does not exist: named as that, and not created") {
    const OpenError refused = expect_refused(dir.file("missing/ledger.sqlite"));
    CHECK(refused.code == OpenErrorCode::unwritable);
    CHECK_THAT(refused.message, Catch::Contains("its directory " + dir.file("missing") + " does not exist"));
    CHECK_FALSE(std::filesystem::exists(dir.file("missing")));
  }
  SECTION("SQLite's name for an in-memory database, which is not effectfence's") {
    const OpenError refused = expect_refused(":memory:");
    CHECK(refused.code == OpenErrorCode::invalid_settings);
    CHECK_THAT(refused.message, Catch::Contains("effectfence's is `memory`") && !Catch::Contains("--db"));
  }
  SECTION("a ledger whose header's format numbers are damaged: corrupt, with the way out") {
    const std::string path = dir.file("header.sqlite");
    REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
    exec_sql(path, "PRAGMA wal_checkpoint(TRUNCATE)");
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(44);  // the schema format number: 1 to 4
    f.write("\x00\x00\x00\x09", 4);
    f.close();
    const OpenError refused = expect_refused(path);
    CHECK(refused.code == OpenErrorCode::corrupt);
    CHECK_THAT(refused.message, Catch::Contains("restore it from a backup"));
  }
}

// Runs open_sqlite_ledger(path) in a child process as an unprivileged user
// (root writes through any file mode) and returns whether it was refused as
// unwritable.
bool refused_as_unwritable_for_nobody(const std::string& path) {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(3);
    auto opened = open_sqlite_ledger(path, 1000);
    const auto* error = std::get_if<OpenError>(&opened);
    ::_exit(error && error->code == OpenErrorCode::unwritable &&
                    error->message.find("write-protected") != std::string::npos
                ? 0
                : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) != 3);
  return WEXITSTATUS(status) == 0;
}

TEST_CASE("a log that holds transactions beside a missing or empty ledger is refused and kept", "[ledger][open]") {
  TempDir dir;
  // A ledger whose last transactions are only in its -wal, as a server
  // stopped hard leaves it: copied while the ledger is open.
  const std::string live = dir.file("live.sqlite");
  auto opened = open_sqlite_ledger(live, 1000);
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(opened));
  exec_sql(live, "UPDATE counters SET value = value + 1 WHERE name = 'admitted'");
  const std::string path = dir.file("ledger.sqlite");
  std::filesystem::copy_file(live + "-wal", path + "-wal");
  const auto log_size = std::filesystem::file_size(path + "-wal");
  REQUIRE(log_size > 32);

  SECTION("the ledger emptied") {
    std::ofstream(path).close();
    const OpenError error = expect_refused(path);
    CHECK(error.code == OpenErrorCode::corrupt);
    CHECK_THAT(error.message, Catch::Contains("the ledger is empty, but its log " + path + "-wal holds"));
    CHECK(std::filesystem::file_size(path) == 0);
  }
  SECTION("the ledger moved away or deleted") {
    const OpenError error = expect_refused(path);
    CHECK(error.code == OpenErrorCode::corrupt);
    CHECK_THAT(error.message, Catch::Contains("the ledger does not exist, but its log"));
    CHECK_FALSE(std::filesystem::exists(path));
  }
  CHECK(std::filesystem::file_size(path + "-wal") == log_size);

  SECTION("a log with no frame beside an empty file is no transaction: the file is initialised") {
    std::filesystem::resize_file(path + "-wal", 0);
    std::ofstream(path).close();
    CHECK(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
  }
}

TEST_CASE("a ledger file this user may not write is refused at open, not opened read-only", "[ledger][open]") {
  TempDir dir;
  const std::string path = dir.file("protected.sqlite");
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
  exec_sql(path, "PRAGMA wal_checkpoint(TRUNCATE)");
  REQUIRE(::chmod(dir.path().c_str(), 0777) == 0);  // the directory stays open to everyone: only the file is protected
  SECTION("write-protected file, no -wal/-shm left") {
    for (const char* suffix : {"-wal", "-shm"}) ::unlink((path + suffix).c_str());
    REQUIRE(::chmod(path.c_str(), 0444) == 0);
    const std::string before = read_file(path);
    CHECK(refused_as_unwritable_for_nobody(path));
    CHECK(read_file(path) == before);
  }
  SECTION("write-protected file whose -wal/-shm are there (another user's server has it open)") {
    sqlite3* holder = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &holder) == SQLITE_OK);
    REQUIRE(sqlite3_exec(holder, "SELECT count(*) FROM intents", nullptr, nullptr, nullptr) == SQLITE_OK);
    struct stat st {};
    REQUIRE(::stat((path + "-shm").c_str(), &st) == 0);
    for (const char* suffix : {"", "-wal", "-shm"}) ::chmod((path + suffix).c_str(), 0644);
    CHECK(refused_as_unwritable_for_nobody(path));
    sqlite3_close(holder);
  }
  SECTION("the same file, writable, opens") {
    for (const char* suffix : {"", "-wal", "-shm"}) ::chmod((path + suffix).c_str(), 0666);
    CHECK_FALSE(refused_as_unwritable_for_nobody(path));
  }
}

TEST_CASE("certificates and events cannot be changed through SQL", "[ledger][audit]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
  exec_sql(path,
           "INSERT INTO events(at, kind, actor) VALUES (1, 'admitted', 'x');"
           "INSERT INTO certificates(hash, body, committed_at) VALUES ('h', '{\"agent\":\"a\",\"domain\":\"d\","
           "\"generation\":1,\"intent\":\"i\",\"seq\":1,\"tool\":\"t\"}', 1);");
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  for (const char* sql : {"UPDATE events SET actor = 'y'", "DELETE FROM events",
                          "UPDATE certificates SET body = '{\"forged\":1}'", "DELETE FROM certificates"}) {
    char* err = nullptr;
    CHECK(sqlite3_exec(db, sql, nullptr, nullptr, &err) == SQLITE_CONSTRAINT);
    REQUIRE(err != nullptr);
    CHECK_THAT(std::string(err), Catch::Contains("effectfence:"));
    sqlite3_free(err);
  }
  sqlite3_close(db);
}

namespace {

// Every row of a query, one line each, columns separated by '|'.
std::string rows(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* q = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &q, nullptr) == SQLITE_OK);
  std::string out;
  while (sqlite3_step(q) == SQLITE_ROW) {
    for (int i = 0; i < sqlite3_column_count(q); ++i) {
      const unsigned char* text = sqlite3_column_text(q, i);
      out += (i ? "|" : "") + (text ? std::string(reinterpret_cast<const char*>(text)) : std::string("NULL"));
    }
    out += "\n";
  }
  sqlite3_finalize(q);
  return out;
}

// The audit trail, and the intent a clear moves: any change shows here.
std::string audit_trail(sqlite3* db) {
  // Named columns: every schema version has them (schema 14 reads a
  // certificate's from its body).
  return rows(db, "SELECT hash, intent, domain, seq, generation, parent, agent, tool, body, committed_at "
                  "FROM certificates ORDER BY hash") +
         rows(db, "SELECT id, at, kind, intent, domain, seq, generation, actor, detail FROM events ORDER BY id") +
         rows(db, "SELECT * FROM clears ORDER BY id") + rows(db, "SELECT intent, state, version FROM intents");
}

// sql fails with a trigger's message containing `message`.
void expect_trigger_refuses(sqlite3* db, const std::string& sql, const std::string& message) {
  INFO(sql);
  char* err = nullptr;
  CHECK(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) == SQLITE_CONSTRAINT);
  CHECK_THAT(std::string(err ? err : "(no error)"), Catch::Contains(message));
  sqlite3_free(err);
}

void expect_ok(sqlite3* db, const std::string& sql) {
  INFO(sql);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  INFO((err ? err : ""));
  sqlite3_free(err);
  CHECK(rc == SQLITE_OK);
}

// A failed intent with two clears already recorded, failed again, so a new
// clear of it passes clears_check: only the REPLACE triggers stand in the way.
const char* const kAuditRows =
    "INSERT INTO events(at, kind, intent, actor) VALUES (1, 'committed', 'i', 'agent');"
    "INSERT INTO certificates(hash, body, committed_at) VALUES ('h', '{\"agent\":\"agent\",\"args\":"
    "{\"amount_cents\":4900},\"domain\":\"d\",\"generation\":1,\"intent\":\"i\",\"seq\":1,\"tool\":\"charge\"}', 1);"
    "INSERT INTO intents(intent, state, domain, tool, args, payload_hash, agent, seq, generation, token, holder_host, "
    "holder_boot, holder_pid, holder_started, lease_expires_at, admitted_at, updated_at) "
    "VALUES ('f', 'failed', 'd', 'charge', '{}', 'p', 'agent', 2, 1, 't', 'host', 'boot', 1, 1, 1, 1, 1);"
    "INSERT INTO clears(intent, operator, reason) VALUES ('f', 'alice', 'provider shows no charge');"
    // Failed again, as the state machine allows: in flight, then aborted.
    "UPDATE intents SET state = 'in_flight' WHERE intent = 'f';"
    "INSERT INTO events(at, kind, intent, intent_id, generation, actor) "
    "SELECT updated_at, 'aborted', 'f', rowid, generation, 'agent' FROM intents WHERE intent = 'f';"
    "UPDATE intents SET state = 'failed' WHERE intent = 'f';"
    "INSERT INTO clears(intent, operator, reason) VALUES ('f', 'bob', 'provider shows no charge again');"
    "UPDATE intents SET state = 'in_flight' WHERE intent = 'f';"
    "INSERT INTO events(at, kind, intent, intent_id, generation, actor) "
    "SELECT updated_at, 'aborted', 'f', rowid, generation, 'agent' FROM intents WHERE intent = 'f';"
    "UPDATE intents SET state = 'failed' WHERE intent = 'f';";

// The same rows as an effectfence before schema 14 wrote them (a
// certificate's columns beside its body, events without intent_id), for
// the migration tests.
const char* const kAuditRowsBeforeV14 =
    "INSERT INTO events(at, kind, intent, actor) VALUES (1, 'committed', 'i', 'agent');"
    "INSERT INTO certificates(hash, intent, domain, seq, generation, agent, tool, body, committed_at) "
    "VALUES ('h', 'i', 'd', 1, 1, 'agent', 'charge', '{\"agent\":\"agent\",\"args\":{\"amount_cents\":4900},"
    "\"domain\":\"d\",\"generation\":1,\"intent\":\"i\",\"seq\":1,\"tool\":\"charge\"}', 1);"
    "INSERT INTO intents(intent, state, domain, tool, args, payload_hash, agent, seq, generation, token, holder_host, "
    "holder_boot, holder_pid, holder_started, lease_expires_at, admitted_at, updated_at) "
    "VALUES ('f', 'failed', 'd', 'charge', '{}', 'p', 'agent', 2, 1, 't', 'host', 'boot', 1, 1, 1, 1, 1);"
    "INSERT INTO clears(intent, operator, reason) VALUES ('f', 'alice', 'provider shows no charge');"
    "UPDATE intents SET state = 'in_flight' WHERE intent = 'f';"
    "INSERT INTO events(at, kind, intent, generation, actor) "
    "SELECT updated_at, 'aborted', 'f', generation, 'agent' FROM intents WHERE intent = 'f';"
    "UPDATE intents SET state = 'failed' WHERE intent = 'f';"
    "INSERT INTO clears(intent, operator, reason) VALUES ('f', 'bob', 'provider shows no charge again');"
    "UPDATE intents SET state = 'in_flight' WHERE intent = 'f';"
    "INSERT INTO events(at, kind, intent, generation, actor) "
    "SELECT updated_at, 'aborted', 'f', generation, 'agent' FROM intents WHERE intent = 'f';"
    "UPDATE intents SET state = 'failed' WHERE intent = 'f';";

const char* const kReplaceTriggers =
    "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name IN ('certificates_immutable_replace', "
    "'events_append_only_replace', 'clears_append_only_replace', 'clears_append_only_renumber') ORDER BY name";

}  // namespace

TEST_CASE("REPLACE and upserts cannot rewrite or remove a certificate, an event or a clear", "[ledger][audit]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
  exec_sql(path, kAuditRows);
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  const std::string before = audit_trail(db);
  REQUIRE_THAT(before, Catch::Contains("4900"));
  // REPLACE deletes the row in its way without firing DELETE triggers: each of
  // these succeeded on schema version 1.
  const std::string certificates = "effectfence: certificates are immutable";
  const std::string events = "effectfence: the event log is append-only";
  expect_trigger_refuses(db,
                         "INSERT OR REPLACE INTO certificates(hash, body, committed_at) SELECT hash, "
                         "replace(body, '4900', '490'), committed_at FROM certificates",
                         certificates);
  expect_trigger_refuses(db,  // a new hash that takes the old one's id
                         "INSERT OR REPLACE INTO certificates(id, hash, body, committed_at) SELECT id, 'forged', "
                         "replace(body, '4900', '490'), committed_at FROM certificates",
                         certificates);
  expect_trigger_refuses(db,  // the same, by rowid
                         "INSERT OR REPLACE INTO certificates(rowid, hash, body, committed_at) SELECT rowid, "
                         "'forged', body, committed_at FROM certificates",
                         certificates);
  expect_trigger_refuses(db,
                         "INSERT OR REPLACE INTO events(id, at, kind, intent, domain, seq, generation, actor, detail) "
                         "SELECT id, at, kind, intent, domain, seq, generation, 'mallory', '{}' FROM events "
                         "WHERE kind = 'committed'",
                         events);
  expect_trigger_refuses(db,
                         "REPLACE INTO clears(id, intent, operator, reason, requested_at, previous_state) "
                         "SELECT id, intent, 'mallory', 'x', requested_at, previous_state FROM clears",
                         "effectfence: clears are an audit record and cannot be replaced");
  expect_trigger_refuses(db,  // the latest clear alone: its intent is failed again, clears_check lets it by
                         "REPLACE INTO clears(id, intent, operator, reason, requested_at, previous_state) "
                         "SELECT id, intent, 'mallory', 'x', requested_at, previous_state FROM clears WHERE id = 2",
                         "effectfence: clears are an audit record and cannot be replaced");
  expect_trigger_refuses(db, "UPDATE OR REPLACE clears SET id = 1 WHERE id = 2",
                         "effectfence: clears are an audit record and cannot be changed");
  expect_trigger_refuses(db, "UPDATE clears SET rowid = rowid + 100", "effectfence: clears are an audit record");
  // Upserts: the UPDATE triggers of version 1 already refused these.
  expect_trigger_refuses(db,
                         "INSERT INTO certificates(hash, body, committed_at) SELECT hash, body, committed_at "
                         "FROM certificates WHERE true ON CONFLICT(hash) DO UPDATE SET body = '{\"forged\":1}'",
                         certificates);
  expect_trigger_refuses(db,
                         "INSERT INTO events SELECT * FROM events WHERE true "
                         "ON CONFLICT(id) DO UPDATE SET actor = 'mallory'",
                         events);
  expect_trigger_refuses(db,
                         "INSERT INTO clears SELECT * FROM clears WHERE true "
                         "ON CONFLICT(id) DO UPDATE SET operator = 'mallory'",
                         "effectfence: clears are an audit record");
  CHECK(audit_trail(db) == before);

  // New rows are still welcome, by hand as by effectfence.
  expect_ok(db, "INSERT INTO events(at, kind, intent, actor) VALUES (2, 'admitted', 'j', 'agent')");
  expect_ok(db, "INSERT INTO events(id, at, kind, intent, actor) VALUES (NULL, 3, 'admitted', 'k', 'agent')");
  expect_ok(db,
            "INSERT INTO certificates(hash, body, committed_at) VALUES ('h2', '{\"intent\":\"j\",\"seq\":2}', 2)");
  expect_ok(db, "INSERT INTO clears(intent, operator, reason) VALUES ('f', 'carol', 'checked with the provider')");
  CHECK(rows(db, "SELECT count(*) FROM events") == "8\n");  // 5 before, the two above and the clear's
  CHECK(rows(db, "SELECT count(*) FROM certificates") == "2\n");
  CHECK(rows(db, "SELECT id, operator FROM clears ORDER BY id") == "1|alice\n2|bob\n3|carol\n");
  CHECK(rows(db, "SELECT state FROM intents WHERE intent = 'f'") == "cleared\n");
  sqlite3_close(db);
}

TEST_CASE("a clear's record is whole: its previous state cannot be changed, and only the ledger dates it",
          "[ledger][audit]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
  exec_sql(path, kAuditRows);  // two clears of 'f', which is failed again
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  const std::string before = audit_trail(db);
  const std::string changed = "effectfence: clears are an audit record and cannot be changed";
  expect_trigger_refuses(db, "UPDATE clears SET previous_state = 'done'", changed);
  expect_trigger_refuses(db, "UPDATE clears SET previous_state = NULL", changed);
  // Dated by hand, a clear would slip past `export --since` and queries by time.
  const std::string dated = "effectfence: cannot clear: requested_at is the time the ledger records the clear";
  expect_trigger_refuses(db, "INSERT INTO clears(intent, operator, reason, requested_at) VALUES ('f', 'mallory', 'ok', 0)",
                         dated);
  expect_trigger_refuses(db,
                         "INSERT INTO clears(intent, operator, reason, requested_at) VALUES ('f', 'mallory', 'ok', "
                         "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) + 3600000)",
                         dated);
  expect_trigger_refuses(db,
                         "INSERT INTO clears(intent, operator, reason, previous_state) VALUES ('f', 'mallory', 'ok', "
                         "'unknown')",
                         "effectfence: cannot clear: previous_state is filled in by the ledger; leave it out");
  CHECK(audit_trail(db) == before);
  expect_ok(db, "INSERT INTO clears(intent, operator, reason) VALUES ('f', 'carol', 'checked the provider')");
  CHECK(rows(db, "SELECT previous_state FROM clears WHERE operator = 'carol'") == "failed\n");
  CHECK(rows(db,
             "SELECT count(*) FROM events e JOIN clears c ON e.kind = 'cleared' AND e.actor = 'carol' "
             "AND e.at = c.requested_at AND abs(e.at - CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)) "
             "< 60000") == "1\n");
  sqlite3_close(db);
}

TEST_CASE("an intent is cleared only through clears, keeps its name, row and holder, and is deleted only once finished and swept",
          "[ledger][audit]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
  const std::string columns =
      "INSERT INTO intents(intent, state, domain, tool, args, payload_hash, agent, seq, generation, token, "
      "holder_host, holder_boot, holder_pid, holder_started, lease_expires_at, admitted_at, updated_at) VALUES ";
  exec_sql(path, columns +
                     "('failed', 'failed', 'd', 'charge', '{}', 'p', 'a', 1, 1, 't', 'h', 'b', 1, 1, 1, 1, 1),"
                     "('unknown', 'unknown', 'd', 'charge', '{}', 'p', 'a', 2, 1, 't', 'h', 'b', 1, 1, 1, 1, 1),"
                     "('in-flight', 'in_flight', 'd', 'charge', '{}', 'p', 'a', 3, 1, 't', 'h', 'b', 1, 1, 1, 1, 1),"
                     "('done', 'done', 'd', 'charge', '{}', 'p', 'a', 4, 1, 't', 'h', 'b', 1, 1, 1, 1, 1)");
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  const std::string before = audit_trail(db);

  const std::string by_hand = "effectfence: clear an intent with INSERT INTO clears(intent, operator, reason)";
  expect_trigger_refuses(db, "UPDATE intents SET state = 'cleared' WHERE intent = 'failed'", by_hand);
  expect_trigger_refuses(db, "UPDATE intents SET state = 'cleared', updated_at = 2, reason = 'x' WHERE intent = 'unknown'",
                         by_hand);
  expect_trigger_refuses(db, "UPDATE intents SET state = 'cleared' WHERE intent = 'in-flight'", by_hand);
  const std::string unfinished = "effectfence: an in-flight, failed or unknown intent cannot be deleted";
  for (const char* intent : {"failed", "unknown", "in-flight"}) {
    expect_trigger_refuses(db, std::string("DELETE FROM intents WHERE intent = '") + intent + "'", unfinished);
  }
  expect_trigger_refuses(db, "DELETE FROM intents", unfinished);  // no truncation shortcut past the trigger
  const std::string renamed = "effectfence: an intent cannot be renamed";
  expect_trigger_refuses(db, "UPDATE intents SET intent = 'failed-old' WHERE intent = 'failed'", renamed);
  expect_trigger_refuses(db, "UPDATE OR REPLACE intents SET intent = 'unknown' WHERE intent = 'in-flight'", renamed);
  // REPLACE deletes the row in its way without firing DELETE triggers.
  const std::string replaced = "effectfence: an intent cannot be replaced";
  const std::string fresh_unknown = "('unknown', 'cleared', 'd', 'charge', '{}', 'p', 'a', 2, 1, 't', 'h', 'b', 1, 1, 1, 1, 1)";
  expect_trigger_refuses(db, "REPLACE" + columns.substr(6) + fresh_unknown, replaced);
  expect_trigger_refuses(db, "INSERT OR REPLACE" + columns.substr(6) + fresh_unknown, replaced);
  expect_trigger_refuses(db, "REPLACE INTO intents SELECT * FROM intents WHERE intent = 'in-flight'", replaced);
  expect_trigger_refuses(db, columns + fresh_unknown + " ON CONFLICT (intent) DO UPDATE SET generation = 9", replaced);
  // ... or by rowid, with a new name.
  expect_trigger_refuses(db, "REPLACE INTO intents SELECT * FROM intents WHERE intent = 'failed'", replaced);
  expect_trigger_refuses(db,
                         "REPLACE INTO intents(rowid, intent, state, domain, tool, args, payload_hash, agent, seq, "
                         "generation, token, holder_host, holder_boot, holder_pid, holder_started, lease_expires_at, "
                         "admitted_at, updated_at) SELECT rowid, 'junk', 'done', domain, tool, args, payload_hash, "
                         "agent, seq, generation, token, holder_host, holder_boot, holder_pid, holder_started, "
                         "lease_expires_at, admitted_at, updated_at FROM intents WHERE intent = 'failed'",
                         replaced);
  expect_trigger_refuses(db,
                         "UPDATE OR REPLACE intents SET rowid = (SELECT rowid FROM intents WHERE intent = 'failed') "
                         "WHERE intent = 'in-flight'",
                         "effectfence: an intent's rowid cannot be changed");
  // A fenced intent cannot be put back in flight (to be taken over) or made
  // done (to be deleted) by hand; nor any intent done without its certificate.
  const std::string fenced = "effectfence: a failed or unknown intent stays fenced until it is cleared";
  expect_trigger_refuses(db, "UPDATE intents SET state = 'in_flight' WHERE intent = 'failed'", fenced);
  expect_trigger_refuses(db,  // shaped like an admission, which a fenced intent gets only after a clear
                         "UPDATE intents SET state = 'in_flight', generation = 2, token = 'fresh', "
                         "updated_at = admitted_at WHERE intent = 'unknown'",
                         fenced);
  const std::string no_certificate = "effectfence: an intent is done only with the certificate of its effect";
  expect_trigger_refuses(db, "UPDATE intents SET state = 'done' WHERE intent = 'in-flight'", no_certificate);
  // An attempt in flight may be running its tool: fenced by hand, a clear
  // would then let it run a second time.
  const std::string running = "effectfence: an attempt in flight may be running its tool";
  for (const char* state : {"failed", "unknown"}) {
    expect_trigger_refuses(db, std::string("UPDATE intents SET state = '") + state + "' WHERE intent = 'in-flight'",
                           running);
    expect_trigger_refuses(
        db, std::string("UPDATE intents SET state = '") + state + "', updated_at = 9 WHERE intent = 'in-flight'",
        running);
  }
  expect_trigger_refuses(db, "UPDATE intents SET state = 'done' WHERE intent = 'unknown'", no_certificate);
  // An attempt's holder, token and lease change only with a new admission
  // (a new generation); a lease is only ever lengthened.
  const std::string holder =
      "effectfence: an attempt's holder, token, generation and lease change only when it is admitted again";
  expect_trigger_refuses(db, "UPDATE intents SET lease_expires_at = 0 WHERE intent = 'in-flight'", holder);
  expect_trigger_refuses(db, "UPDATE intents SET holder_host = 'elsewhere' WHERE intent = 'in-flight'", holder);
  expect_trigger_refuses(db, "UPDATE intents SET holder_boot = 'b2' WHERE intent = 'in-flight'", holder);
  expect_trigger_refuses(db, "UPDATE intents SET holder_pid = 2 WHERE intent = 'in-flight'", holder);
  expect_trigger_refuses(db, "UPDATE intents SET holder_started = 2 WHERE intent = 'in-flight'", holder);
  expect_trigger_refuses(db, "UPDATE intents SET token = 'forged' WHERE intent = 'in-flight'", holder);
  expect_trigger_refuses(db, "UPDATE intents SET generation = 0 WHERE intent = 'in-flight'", holder);
  // A new generation alone would leave its holder's ticket unable to commit.
  expect_trigger_refuses(db, "UPDATE intents SET generation = 2 WHERE intent = 'in-flight'", holder);
  expect_trigger_refuses(db, "UPDATE intents SET generation = 2, token = 't2', admitted_at = 5 WHERE intent = 'in-flight'",
                         holder);
  // A done intent is not changed: moved to failed or unknown it could be
  // cleared and run again; dated back, swept while its result is promised.
  const std::string done_kept = "effectfence: a done intent cannot be changed";
  for (const char* state : {"failed", "unknown", "in_flight", "cleared"}) {
    expect_trigger_refuses(db, std::string("UPDATE intents SET state = '") + state + "' WHERE intent = 'done'",
                           done_kept);
  }
  expect_trigger_refuses(db, "UPDATE intents SET updated_at = 0 WHERE intent = 'done'", done_kept);
  CHECK(audit_trail(db) == before);
  CHECK(rows(db, "SELECT rowid, intent, state, generation FROM intents ORDER BY rowid") ==
        "1|failed|failed|1\n2|unknown|unknown|1\n3|in-flight|in_flight|1\n4|done|done|1\n");

  // The audited way still works, for several intents in one statement too.
  expect_ok(db, "INSERT INTO clears(intent, operator, reason) SELECT intent, 'carol', 'checked' FROM fenced");
  CHECK(rows(db, "SELECT intent, state FROM intents WHERE state = 'cleared' ORDER BY intent") ==
        "failed|cleared\nunknown|cleared\n");
  CHECK(rows(db, "SELECT count(*) FROM events WHERE kind = 'cleared' AND actor = 'carol'") == "2\n");
  // Fenced again later (a new attempt failed), a hand UPDATE is refused again:
  // the earlier clear does not stand for this one.
  expect_ok(db,  // admitted again, as effectfence does it, then aborted
            "UPDATE intents SET state = 'in_flight', generation = 2, token = 't2', admitted_at = updated_at + 5, "
            "updated_at = updated_at + 5 WHERE intent = 'failed'");
  // Fenced by hand it is refused; with the event an abort writes first, it passes.
  expect_trigger_refuses(db, "UPDATE intents SET state = 'failed' WHERE intent = 'failed'", running);
  expect_ok(db,
            "INSERT INTO events(at, kind, intent, intent_id, domain, seq, generation, actor, detail) SELECT "
            "updated_at, 'aborted', intent, rowid, domain, seq, generation, agent, '{}' FROM intents "
            "WHERE intent = 'failed'");
  expect_ok(db, "UPDATE intents SET state = 'failed' WHERE intent = 'failed'");
  expect_trigger_refuses(db, "UPDATE intents SET state = 'cleared' WHERE intent = 'failed'", by_hand);
  // Not even dated like that clear, from the same state: it cleared generation 1.
  expect_trigger_refuses(db,
                         "UPDATE intents SET state = 'cleared', updated_at = (SELECT requested_at FROM clears "
                         "WHERE intent = 'failed') WHERE intent = 'failed'",
                         by_hand);
  // A heartbeat lengthens the lease; a new admission takes a new holder.
  expect_ok(db, "UPDATE intents SET lease_expires_at = 5 WHERE intent = 'in-flight'");
  expect_ok(db,
            "UPDATE intents SET generation = 2, token = 't2', holder_host = 'h2', holder_pid = 2, "
            "lease_expires_at = 3 WHERE intent = 'in-flight'");
  // A done intent replays its result for the ledger's TTL: it goes only under
  // the cutoff of the latest swept event, at least the TTL before that sweep.
  expect_ok(db, "UPDATE retention SET value = 1000 WHERE name = 'result_ttl_ms'");
  const std::string results = "effectfence: a done intent replays its result to late duplicates";
  expect_trigger_refuses(db, "DELETE FROM intents WHERE intent = 'done'", results);
  auto swept = [&](int at, int older_than_ms) {
    expect_ok(db, "INSERT INTO events(at, kind, actor, detail) VALUES (" + std::to_string(at) +
                      ", 'swept', 'dave', json_object('older_than_ms', " + std::to_string(older_than_ms) + "))");
  };
  swept(500, 2);  // a cutoff less than the TTL before the sweep
  expect_trigger_refuses(db, "DELETE FROM intents WHERE state IN ('done', 'cleared')", results);
  swept(2000, 1);  // the intent was finished at 1, not before it
  expect_trigger_refuses(db, "DELETE FROM intents WHERE intent = 'done'", results);
  swept(3000, 2);
  expect_ok(db, "DELETE FROM intents WHERE state IN ('done', 'cleared')");
  CHECK(rows(db, "SELECT intent FROM intents ORDER BY intent") == "failed\nin-flight\n");
  sqlite3_close(db);
}

TEST_CASE("a domain's sequence and head only move forward, and it is deleted only after its eviction event",
          "[ledger][audit]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
  exec_sql(path, "INSERT INTO domains(domain, seq, head, head_seq, updated_at) VALUES ('acct', 5, 'h5', 5, 1)");
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  const std::string back = "effectfence: a domain's sequence number and head only move forward";
  expect_trigger_refuses(db, "UPDATE domains SET seq = 4", back);
  expect_trigger_refuses(db, "UPDATE domains SET head = 'h3', head_seq = 3", back);
  expect_trigger_refuses(db, "UPDATE domains SET head = NULL", back);
  expect_trigger_refuses(db, "UPDATE domains SET domain = 'acct-2'", back);
  const std::string evicted = "effectfence: a domain is deleted only as effectfence evicts an idle one";
  expect_trigger_refuses(db, "DELETE FROM domains", evicted);
  expect_ok(db, "INSERT INTO events(at, kind, domain, seq, actor) VALUES (2, 'domain_evicted', 'acct', 4, 'op')");
  expect_trigger_refuses(db, "DELETE FROM domains", evicted);  // an event of another sequence number
  // Nor replaced, which deletes without firing DELETE triggers.
  const std::string replaced = "effectfence: a domain cannot be replaced";
  expect_trigger_refuses(db, "INSERT OR REPLACE INTO domains(domain, seq, updated_at) VALUES ('acct', 0, 2)", replaced);
  expect_trigger_refuses(db, "REPLACE INTO domains(rowid, domain, seq, updated_at) SELECT rowid, 'new', 0, 2 FROM domains",
                         replaced);
  expect_ok(db, "INSERT INTO domains(domain, seq, updated_at) VALUES ('other', 2, 1)");
  expect_trigger_refuses(db,
                         "UPDATE OR REPLACE domains SET rowid = (SELECT rowid FROM domains WHERE domain = 'acct') "
                         "WHERE domain = 'other'",
                         "effectfence: a domain's rowid cannot be changed");
  expect_ok(db, "INSERT INTO events(at, kind, domain, seq, actor) VALUES (2, 'domain_evicted', 'other', 2, 'op')");
  expect_ok(db, "DELETE FROM domains WHERE domain = 'other'");
  CHECK(rows(db, "SELECT domain, seq, head, head_seq FROM domains") == "acct|5|h5|5\n");
  // Forward, as commits move it, and deleted after its event, as eviction does.
  expect_ok(db, "UPDATE domains SET seq = 6, clock = '{\"a\":1}'");
  expect_ok(db, "UPDATE domains SET head = 'h6', head_seq = 6");
  expect_ok(db, "INSERT INTO events(at, kind, domain, seq, actor) VALUES (3, 'domain_evicted', 'acct', 6, 'op')");
  expect_ok(db, "DELETE FROM domains");
  CHECK(rows(db, "SELECT count(*) FROM domains") == "0\n");
  sqlite3_close(db);
}

TEST_CASE("a ledger at schema version 1 is migrated on open: its rows kept, REPLACE refused", "[ledger][schema]") {
  TempDir dir;
  const std::string path = dir.file("v1.sqlite");
  // The file a version 1 effectfence left: its migration, its marks, its rows.
  const Migration& v1 = embedded_migrations().front();
  REQUIRE(v1.version == 1);
  exec_sql(path, std::string("BEGIN;") + v1.sql + "PRAGMA application_id = " + std::to_string(kApplicationId) +
                     "; PRAGMA user_version = 1; COMMIT; PRAGMA journal_mode = WAL;");
  exec_sql(path, kAuditRowsBeforeV14);
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  CHECK(rows(db, kReplaceTriggers).empty());
  const std::string before = audit_trail(db);
  sqlite3_close(db);

  REQUIRE(latest_schema_version() >= 2);
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
  CHECK_THAT(schema_dump(path), Catch::Contains("PRAGMA user_version = " + std::to_string(latest_schema_version())));
  const std::string documented = dir.file("documented.sqlite");
  exec_sql(documented, read_file(std::string(EFFECTFENCE_SOURCE_DIR) + "/schema/schema.sql"));
  CHECK(schema_dump(path) == schema_dump(documented));

  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  CHECK(rows(db, kReplaceTriggers) ==
        "certificates_immutable_replace\nclears_append_only_renumber\nclears_append_only_replace\n"
        "events_append_only_replace\n");
  CHECK(audit_trail(db) == before);
  expect_trigger_refuses(db,
                         "INSERT OR REPLACE INTO certificates(hash, body, committed_at) SELECT hash, "
                         "replace(body, '4900', '490'), committed_at FROM certificates",
                         "effectfence: certificates are immutable");
  expect_trigger_refuses(db, "REPLACE INTO events(id, at, kind, actor) SELECT id, at, kind, 'mallory' FROM events",
                         "effectfence: the event log is append-only");
  expect_trigger_refuses(db,
                         "REPLACE INTO clears(id, intent, operator, reason) SELECT id, intent, 'mallory', 'x' "
                         "FROM clears",
                         "effectfence: clears are an audit record");
  CHECK(audit_trail(db) == before);
  sqlite3_close(db);
}

TEST_CASE("schema 14 refuses a ledger whose certificate's columns disagree with its body, and changes nothing",
          "[ledger][schema]") {
  TempDir dir;
  const std::string path = dir.file("v13.sqlite");
  std::string v13_sql = "BEGIN;";
  for (const Migration& m : embedded_migrations()) {
    if (m.version <= 13) v13_sql += m.sql;
  }
  exec_sql(path, v13_sql + "PRAGMA application_id = " + std::to_string(kApplicationId) +
                     "; PRAGMA user_version = 13; COMMIT; PRAGMA journal_mode = WAL;");
  exec_sql(path, kAuditRowsBeforeV14);
  // The column says 'j', the hashed body says 'i'.
  exec_sql(path,
           "INSERT INTO certificates(hash, intent, domain, seq, generation, agent, tool, body, committed_at) "
           "SELECT 'h2', 'j', domain, seq + 1, generation, agent, tool, body, committed_at FROM certificates");
  const std::string before = schema_dump(path);
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  const std::string rows_before = audit_trail(db);
  sqlite3_close(db);

  auto opened = open_sqlite_ledger(path, 1000);
  REQUIRE(std::holds_alternative<OpenError>(opened));
  CHECK_THAT(std::get<OpenError>(opened).message,
             Catch::Contains("disagrees with its body: nothing was changed") && Catch::Contains("effectfence verify"));
  CHECK(schema_dump(path) == before);
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  CHECK(audit_trail(db) == rows_before);
  sqlite3_close(db);

  // The control: the same ledger without that row moves to schema 14, its rows as they were.
  exec_sql(path, "DROP TRIGGER certificates_immutable_delete; DELETE FROM certificates WHERE hash = 'h2'");
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  const std::string kept = audit_trail(db);
  sqlite3_close(db);
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  CHECK(audit_trail(db) == kept);
  CHECK(rows(db, "SELECT intent, intent_id IS NULL, intent_id < 0 FROM events ORDER BY id") ==
        "i|0|1\nf|0|0\nf|0|0\nf|0|0\nf|0|0\n");
  // A name with no row is remembered as swept, with the number its events carry.
  CHECK(rows(db, "SELECT s.intent, s.intent_id = e.intent_id FROM swept_intents s JOIN events e ON e.intent = s.intent") ==
        "i|1\n");
  sqlite3_close(db);
}

TEST_CASE("a ledger at schema version 2 is migrated on open: every row, event id and id high-water mark kept",
          "[ledger][schema]") {
  TempDir dir;
  const std::string path = dir.file("v2.sqlite");
  std::string v2_sql = "BEGIN;";
  for (const Migration& m : embedded_migrations()) {
    if (m.version <= 2) v2_sql += m.sql;
  }
  exec_sql(path, v2_sql + "PRAGMA application_id = " + std::to_string(kApplicationId) +
                     "; PRAGMA user_version = 2; COMMIT; PRAGMA journal_mode = WAL;");
  exec_sql(path, kAuditRowsBeforeV14);
  // An event id above every row's (SQLite keeps it in sqlite_sequence):
  // AUTOINCREMENT never hands it out again, even after the rebuild.
  exec_sql(path, "UPDATE sqlite_sequence SET seq = 41 WHERE name = 'events'");
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  const std::string before = audit_trail(db) + rows(db, "SELECT * FROM intents ORDER BY intent");
  sqlite3_close(db);

  REQUIRE(latest_schema_version() >= 3);
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
  const std::string documented = dir.file("documented.sqlite");
  exec_sql(documented, read_file(std::string(EFFECTFENCE_SOURCE_DIR) + "/schema/schema.sql"));
  CHECK(schema_dump(path) == schema_dump(documented));

  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  CHECK(audit_trail(db) + rows(db, "SELECT * FROM intents ORDER BY intent") == before);
  CHECK(rows(db, "SELECT name, seq FROM sqlite_sequence WHERE name LIKE 'events%' ORDER BY name") == "events|41\n");
  exec_sql(path, "INSERT INTO events(at, kind, actor) VALUES (2, 'swept', 'operator')");
  CHECK(rows(db, "SELECT max(id) FROM events") == "42\n");
  // What the rebuild was for: the CHECKs no longer build a temporary index.
  for (const char* sql :
       {"EXPLAIN INSERT INTO events(at, kind, actor) VALUES (3, 'swept', 'x')",
        "EXPLAIN UPDATE intents SET state = 'cleared' WHERE intent = 'f'"}) {
    INFO(sql);
    CHECK_THAT(rows(db, sql), !Catch::Contains("OpenEphemeral"));
  }
  expect_trigger_refuses(db, "DELETE FROM events", "effectfence: the event log is append-only");
  expect_trigger_refuses(db, "UPDATE events SET actor = 'mallory'", "effectfence: the event log is append-only");
  expect_trigger_refuses(db, "REPLACE INTO events(id, at, kind, actor) VALUES (1, 1, 'swept', 'mallory')",
                         "effectfence: the event log is append-only");
  // The views and the clears triggers name the rebuilt tables: an operator's clear still works end to end.
  CHECK(rows(db, "SELECT intent FROM fenced") == "f\n");
  exec_sql(path, "INSERT INTO clears(intent, operator, reason) VALUES ('f', 'carol', 'checked again')");
  CHECK(rows(db, "SELECT count(*) FROM fenced") == "0\n");
  CHECK(rows(db, "SELECT kind, intent, actor FROM recent_events LIMIT 1") == "cleared|f|carol\n");
  CHECK(rows(db, "SELECT state, version FROM intents WHERE intent = 'f'") == "cleared|4\n");
  sqlite3_close(db);
}

TEST_CASE("the fenced view lists intents fenced in the same millisecond by intent, as effectfence fenced does",
          "[ledger][schema]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
  for (const char* intent : {"charge:c", "charge:a", "charge:b"}) {
    exec_sql(path, std::string("INSERT INTO intents(intent, state, domain, tool, args, payload_hash, agent, seq, "
                               "generation, token, holder_host, holder_boot, holder_pid, holder_started, "
                               "lease_expires_at, admitted_at, updated_at) VALUES ('") +
                       intent + "', 'unknown', 'd', 'charge', '{}', 'p', 'agent', 1, 1, 't', 'h', 'b', 1, 1, 1, 1, 7)");
  }
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  CHECK(rows(db, "SELECT intent FROM fenced") == "charge:a\ncharge:b\ncharge:c\n");
  sqlite3_close(db);
}

TEST_CASE("a ledger at schema version 4 keeps its results at least as long as it already has", "[ledger][schema]") {
  TempDir dir;
  const std::string path = dir.file("v4.sqlite");
  std::string v4_sql = "BEGIN;";
  for (const Migration& m : embedded_migrations()) {
    if (m.version <= 4) v4_sql += m.sql;
  }
  exec_sql(path, v4_sql + "PRAGMA application_id = " + std::to_string(kApplicationId) +
                     "; PRAGMA user_version = 4; COMMIT; PRAGMA journal_mode = WAL;");
  // A done intent three days old: its servers were keeping results that long.
  const std::string three_days_ago = "CAST((julianday('now') - 2440587.5 - 3) * 86400000 AS INTEGER)";
  exec_sql(path, "INSERT INTO intents(intent, state, domain, tool, args, payload_hash, agent, seq, generation, token, "
                 "holder_host, holder_boot, holder_pid, holder_started, lease_expires_at, admitted_at, updated_at) "
                 "VALUES ('o-1', 'done', 'd', 'charge', '{}', 'p', 'agent', 1, 1, 't', 'h', 'b', 1, 1, 1, 1, " +
                     three_days_ago + ")");
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  const int64_t kept_ms = std::stoll(rows(db, "SELECT value FROM retention WHERE name = 'result_ttl_ms'"));
  sqlite3_close(db);
  CHECK(kept_ms >= 3 * 86'400'000LL);
  CHECK(kept_ms < 3 * 86'400'000LL + 60'000);

  SECTION("while a new ledger starts at 0: its first sweeper's TTL is what it keeps") {
    const std::string fresh = dir.file("new.sqlite");
    REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(fresh, 1000)));
    REQUIRE(sqlite3_open(fresh.c_str(), &db) == SQLITE_OK);
    CHECK(rows(db, "SELECT name, value FROM retention") == "result_ttl_ms|0\n");
    sqlite3_close(db);
  }
}

TEST_CASE("a ledger path that reads like an SQLite URI names that file, not a URI", "[ledger][open]") {
  TempDir dir;
  ScopedCwd in_dir(dir.path().string());
  // Read as a URI, this would open ledger.sqlite with file locking off.
  const std::string path = "file:ledger.sqlite?nolock=1";
  {
    auto opened = open_sqlite_ledger(path, 1000);
    REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(opened));
  }
  struct stat st {};
  CHECK(::stat(path.c_str(), &st) == 0);
  CHECK(::stat("ledger.sqlite", &st) != 0);
}

TEST_CASE("a ledger file with a second name (a hard link) is refused under either name until one is left",
          "[ledger][open]") {
  // Each name gets its own -wal and -shm, which hold the write lock: two
  // servers opening the file under two names would both admit every intent.
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  const std::string alias = dir.file("alias.sqlite");
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
  REQUIRE(::link(path.c_str(), alias.c_str()) == 0);
  for (const std::string& name : {path, alias}) {
    const OpenError refused = expect_refused(name);
    CHECK(refused.code == OpenErrorCode::linked);
    CHECK(std::string(open_error_name(refused.code)) == "linked");
    CHECK_THAT(refused.message, Catch::Contains("2 names (hard links)"));
    CHECK_FALSE(std::filesystem::exists(name + "-wal"));
  }
  REQUIRE(::unlink(alias.c_str()) == 0);
  CHECK(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
}
