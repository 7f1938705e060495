// Opening ledgers: creation, migration, and refusing every file that is not
// a ledger this binary can safely write.
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include <sqlite3.h>

#include <catch2/catch.hpp>

#include "ledger/migrations.h"
#include "ledger/sqlite_ledger.h"
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
  SECTION("a path that cannot be created") {
    CHECK(expect_refused("/proc/effectfence-cannot-exist.sqlite").code == OpenErrorCode::unwritable);
  }
}

TEST_CASE("certificates and events cannot be changed through SQL", "[ledger][audit]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
  exec_sql(path,
           "INSERT INTO events(at, kind, actor) VALUES (1, 'admitted', 'x');"
           "INSERT INTO certificates(hash, intent, domain, seq, generation, agent, tool, body, committed_at) "
           "VALUES ('h', 'i', 'd', 1, 1, 'a', 't', '{}', 1);");
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
