// The log-batching VFS: one write per commit, nothing lost, every commit
// visible to other connections once it returns, and a failed write fails
// the commit.
#include <sqlite3.h>

#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

#include "ledger/wal_write_batching.h"
#include "support/power_loss_vfs.h"
#include "support/temp_dir.h"

using namespace effectfence;
using namespace effectfence::testing;

namespace {

sqlite3* open_db(const std::string& path, const char* vfs) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, vfs) == SQLITE_OK);
  sqlite3_busy_timeout(db, 2000);
  return db;
}

// What a power cut would leave now: every file synced, so a plain copy.
void copy_files(const std::string& path, const TempDir& to) {
  for (const char* suffix : {"", "-wal"}) {
    std::filesystem::copy_file(path + suffix, to.file(std::string("t.sqlite") + suffix));
  }
}

int exec(sqlite3* db, const std::string& sql) { return sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr); }

int64_t query(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* q = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &q, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(q) == SQLITE_ROW);
  const int64_t v = sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  return v;
}

std::string integrity(sqlite3* db) {
  sqlite3_stmt* q = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &q, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(q) == SQLITE_ROW);
  std::string v = reinterpret_cast<const char*>(sqlite3_column_text(q, 0));
  sqlite3_finalize(q);
  return v;
}

// A connection of its own opened on path sees `rows` rows in t, in a sound file.
void expect_file_holds(const std::string& path, int64_t rows) {
  sqlite3* db = open_db(path, nullptr);
  CHECK(query(db, "SELECT count(*) FROM t") == rows);
  CHECK(integrity(db) == "ok");
  sqlite3_close(db);
}

// A writer as the ledger runs it: WAL, synchronous = FULL, through the VFS.
sqlite3* open_writer(const std::string& path) {
  sqlite3* db = nullptr;
  {
    BatchedLogVfs vfs;
    REQUIRE(vfs.name() != nullptr);
    db = open_db(path, vfs.name());
  }
  REQUIRE(exec(db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL") == SQLITE_OK);
  REQUIRE(exec(db, "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, body TEXT NOT NULL)") == SQLITE_OK);
  return db;
}

// n rows of about 3 KiB each: about one page apiece.
std::string insert_rows(int n) {
  return "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < " + std::to_string(n) +
         ") INSERT INTO t (body) SELECT hex(randomblob(1500)) FROM k";
}

}  // namespace

TEST_CASE("a commit's log frames reach the file in one write, and other connections see the commit at once",
          "[ledger][wal_batching]") {
  PowerLossVfs disk;  // the default VFS, so the batching VFS wraps it
  TempDir dir;
  const std::string path = dir.file("t.sqlite");
  sqlite3* writer = open_writer(path);
  sqlite3* other = open_db(path, nullptr);
  REQUIRE(exec(writer, insert_rows(1)) == SQLITE_OK);  // the log and its header exist now
  for (int commit = 0; commit < 20; ++commit) {
    const int before = disk.writes_of("-wal");
    REQUIRE(exec(writer, "BEGIN IMMEDIATE; " + insert_rows(10) + "; COMMIT") == SQLITE_OK);
    // Ten pages and their index pages: more than twenty writes unbatched.
    CHECK(disk.writes_of("-wal") - before == 1);
    CHECK(query(other, "SELECT count(*) FROM t") == 1 + 10 * (commit + 1));
  }
  CHECK(integrity(other) == "ok");
  sqlite3_close(other);
  sqlite3_close(writer);
}

TEST_CASE("commits larger than one write of the wrapped VFS, and transactions that spill frames before they commit, "
          "keep every row",
          "[ledger][wal_batching]") {
  PowerLossVfs disk;  // the default VFS, so the batching VFS wraps it
  TempDir dir;
  const std::string path = dir.file("t.sqlite");
  sqlite3* writer = open_writer(path);
  // About 400 KiB of frames in one commit: the unix VFS takes under 128 KiB per write.
  REQUIRE(exec(writer, "BEGIN IMMEDIATE; " + insert_rows(100) + "; COMMIT") == SQLITE_OK);
  // A page cache of 16 pages: this transaction writes frames to the log
  // before it commits, reads pages back from them, and rewrites some.
  REQUIRE(exec(writer, "PRAGMA cache_size = 16") == SQLITE_OK);
  REQUIRE(exec(writer, "BEGIN IMMEDIATE; " + insert_rows(300)) == SQLITE_OK);
  CHECK(query(writer, "SELECT count(*) FROM t WHERE length(body) = 3000") == 400);
  REQUIRE(exec(writer, "UPDATE t SET body = hex(randomblob(1500)) WHERE id % 7 = 0; COMMIT") == SQLITE_OK);
  sqlite3* other = open_db(path, nullptr);
  CHECK(query(other, "SELECT count(*) FROM t WHERE length(body) = 3000") == 400);
  CHECK(integrity(other) == "ok");
  sqlite3_close(other);
  sqlite3_close(writer);
  // Reopened from the files alone (the log replayed), every row is there.
  expect_file_holds(path, 400);
}

TEST_CASE("a log write that fails fails the commit, records nothing, and ends that connection's writing", "[ledger][wal_batching]") {
  PowerLossVfs disk;  // the default VFS, so the batching VFS wraps it
  TempDir dir;
  const std::string path = dir.file("t.sqlite");
  sqlite3* writer = open_writer(path);
  REQUIRE(exec(writer, insert_rows(5)) == SQLITE_OK);
  disk.fail_writes_of("-wal", SQLITE_IOERR_WRITE);
  REQUIRE(exec(writer, "BEGIN IMMEDIATE") == SQLITE_OK);
  REQUIRE(exec(writer, insert_rows(10)) == SQLITE_OK);  // gathered, not yet written
  const int rc = exec(writer, "COMMIT");
  CHECK((rc & 0xff) == SQLITE_IOERR);
  if (sqlite3_get_autocommit(writer) == 0) exec(writer, "ROLLBACK");
  disk.fail_writes_of("", SQLITE_OK);
  sqlite3* other = open_db(path, nullptr);
  CHECK(query(other, "SELECT count(*) FROM t") == 5);
  sqlite3_close(other);
  // That connection's log no longer holds what SQLite believes it wrote, so
  // it writes nothing more (the ledger stops deciding until restarted); a
  // new connection writes, and what it commits is kept.
  CHECK(exec(writer, insert_rows(2)) != SQLITE_OK);
  sqlite3_close(writer);
  sqlite3* restarted = open_writer(path);
  REQUIRE(exec(restarted, insert_rows(2)) == SQLITE_OK);
  sqlite3_close(restarted);
  expect_file_holds(path, 7);
}

TEST_CASE("frames a rolled-back transaction left gathered are dropped, never written over another writer's commit",
          "[ledger][wal_batching]") {
  TempDir dir;
  const std::string path = dir.file("t.sqlite");
  sqlite3* writer = open_writer(path);
  REQUIRE(exec(writer, insert_rows(100)) == SQLITE_OK);
  sqlite3* other = open_db(path, nullptr);  // another process's writer, say
  REQUIRE(exec(other, "PRAGMA synchronous = FULL") == SQLITE_OK);
  // Fully checkpointed, so the next transaction starts the log over; with a
  // 16-page cache it spills frames before it ends, and it rolls back.
  REQUIRE(exec(writer, "PRAGMA wal_checkpoint") == SQLITE_OK);
  REQUIRE(exec(writer, "PRAGMA cache_size = 16") == SQLITE_OK);
  REQUIRE(exec(writer, "BEGIN IMMEDIATE; " + insert_rows(300)) == SQLITE_OK);
  REQUIRE(exec(writer, "ROLLBACK") == SQLITE_OK);
  // The other writer commits where those frames would have gone.
  REQUIRE(exec(other, "BEGIN IMMEDIATE; " + insert_rows(600) + "; COMMIT") == SQLITE_OK);
  // The first writer touches its log again: a read.
  CHECK(query(writer, "SELECT count(*) FROM t") == 700);
  TempDir crash;
  copy_files(path, crash);
  CHECK(query(other, "SELECT count(*) FROM t") == 700);
  CHECK(integrity(other) == "ok");
  sqlite3_close(other);
  sqlite3_close(writer);
  expect_file_holds(crash.file("t.sqlite"), 700);
}

TEST_CASE("a full disk met while writing gathered frames for a read keeps that transaction from committing",
          "[ledger][wal_batching]") {
  PowerLossVfs disk;  // the default VFS, so the batching VFS wraps it
  TempDir dir;
  const std::string path = dir.file("t.sqlite");
  sqlite3* writer = open_writer(path);
  REQUIRE(exec(writer, insert_rows(100)) == SQLITE_OK);
  REQUIRE(exec(writer, "PRAGMA cache_size = 16") == SQLITE_OK);
  REQUIRE(exec(writer, "BEGIN IMMEDIATE; " + insert_rows(300)) == SQLITE_OK);  // spilled, the last frames gathered
  disk.fail_writes_of("-wal", SQLITE_FULL);
  // Reads pages back from the log: the gathered frames must be written
  // first, and cannot be. SQLite fails only this statement.
  CHECK(exec(writer, "UPDATE t SET body = body || '' WHERE id % 50 = 0") != SQLITE_OK);
  disk.fail_writes_of("", SQLITE_OK);  // space again
  // The frames are lost, so the transaction must not commit.
  const int commit = exec(writer, "COMMIT");
  CHECK(commit != SQLITE_OK);
  if (sqlite3_get_autocommit(writer) == 0) exec(writer, "ROLLBACK");
  expect_file_holds(path, 100);
  sqlite3_close(writer);
  expect_file_holds(path, 100);
}

TEST_CASE("a database SQLite pads commits for (no powersafe overwrite) keeps every commit", "[ledger][wal_batching]") {
  TempDir dir;
  const std::string path = dir.file("t.sqlite");
  // SQLite then pads each commit to a sector boundary and writes the end of
  // the padding after the commit's sync.
  const std::string uri = "file:" + path + "?psow=0";
  sqlite3* writer = nullptr;
  {
    BatchedLogVfs vfs;
    REQUIRE(sqlite3_open_v2(uri.c_str(), &writer, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI,
                            vfs.name()) == SQLITE_OK);
  }
  REQUIRE(exec(writer, "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL") == SQLITE_OK);
  REQUIRE(exec(writer, "CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL)") == SQLITE_OK);
  for (int i = 0; i < 20; ++i) REQUIRE(exec(writer, insert_rows(1)) == SQLITE_OK);
  sqlite3* other = open_db(path, nullptr);
  CHECK(query(other, "SELECT count(*) FROM t") == 20);
  sqlite3_close(other);
  TempDir crash;
  copy_files(path, crash);
  expect_file_holds(crash.file("t.sqlite"), 20);
  sqlite3_close(writer);
}
