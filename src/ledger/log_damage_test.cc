// A damaged -wal is found before SQLite reads it and drops what follows the
// damage; a log a crash left half written at its end is not.
#include "ledger/log_damage.h"

#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>

#include "ledger/open_ledger.h"
#include "support/temp_dir.h"

using namespace effectfence;
using namespace effectfence::testing;

namespace {

constexpr int kTransactions = 12;
constexpr size_t kHeader = 32;
constexpr size_t kFrame = 24 + 4096;

void exec(sqlite3* db, const std::string& sql) {
  REQUIRE(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
}

int64_t count(const std::string& path, const char* sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql, -1, &q, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(q) == SQLITE_ROW);
  const int64_t rows = sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  sqlite3_close(db);
  return rows;
}

int64_t count_rows(const std::string& path) { return count(path, "SELECT count(*) FROM t"); }

// A database whose last kTransactions inserts (one row each, a transaction
// each) are only in its -wal, copied as a stopped process leaves them.
// `then` runs on the live connection before the copy.
// uri_parameters ("psow=0") go on the live connection's file: URI.
std::string ledger_with_log(const TempDir& dir, const std::string& then = "", const std::string& uri_parameters = "") {
  const std::string live = dir.file("live.sqlite");
  sqlite3* db = nullptr;
  const std::string uri = "file:" + live + (uri_parameters.empty() ? "" : "?" + uri_parameters);
  REQUIRE(sqlite3_open_v2(uri.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI, nullptr) ==
          SQLITE_OK);
  exec(db, "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; PRAGMA page_size=4096; CREATE TABLE t(x)");
  for (int i = 0; i < kTransactions; ++i) exec(db, "INSERT INTO t VALUES (" + std::to_string(i) + ")");
  if (!then.empty()) exec(db, then);
  const std::string copy = dir.file("ledger.sqlite");
  std::filesystem::copy_file(live, copy);
  std::filesystem::copy_file(live + "-wal", copy + "-wal");
  sqlite3_close(db);
  return copy;
}

void flip_byte(const std::string& path, size_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char byte = 0;
  f.read(&byte, 1);
  f.seekp(static_cast<std::streamoff>(offset));
  byte = static_cast<char>(byte ^ 0x01);
  f.write(&byte, 1);
}

LogScan scan(const std::string& log) {
  std::ifstream in(log, std::ios::binary);
  return scan_log(in);
}

size_t frames_in(const std::string& log) { return (std::filesystem::file_size(log) - kHeader) / kFrame; }

}  // namespace

TEST_CASE("an undamaged log reads whole and reports nothing", "[ledger][log_damage]") {
  TempDir dir;
  const std::string ledger = ledger_with_log(dir);
  const LogScan clean = scan(ledger + "-wal");
  CHECK(clean.commits_read == kTransactions + 1);  // the CREATE TABLE, then each insert
  CHECK(clean.frames_read == frames_in(ledger + "-wal"));
  CHECK(clean.commits_lost == 0);
  CHECK(damaged_log(ledger).ok());
  CHECK(count_rows(ledger) == kTransactions);
}

TEST_CASE("a damaged frame early in the log: SQLite drops what follows, and it is reported", "[ledger][log_damage]") {
  TempDir dir;
  const std::string ledger = ledger_with_log(dir);
  const size_t third_frame_page = kHeader + 2 * kFrame + 24;
  flip_byte(ledger + "-wal", third_frame_page + 100);

  const LogScan damaged = scan(ledger + "-wal");
  CHECK(damaged.break_offset == kHeader + 2 * kFrame);
  CHECK(damaged.commits_lost >= kTransactions - 2);
  const std::string message = damaged_log(ledger).message();
  CHECK_THAT(message, Catch::Contains(ledger + "-wal is damaged at byte " + std::to_string(kHeader + 2 * kFrame)));
  CHECK_THAT(message, Catch::Contains("backup"));

  SECTION("the ledger's server refuses to open it, as corrupt, and leaves the log as it was") {
    const auto size_before = std::filesystem::file_size(ledger + "-wal");
    auto opened = open_ledger(ledger, 1000);
    REQUIRE(std::holds_alternative<OpenError>(opened));
    CHECK(std::get<OpenError>(opened).code == OpenErrorCode::corrupt);
    CHECK_THAT(std::get<OpenError>(opened).message, Catch::Contains("is damaged at byte"));
    CHECK(std::filesystem::file_size(ledger + "-wal") == size_before);
    CHECK(scan(ledger + "-wal").commits_lost == damaged.commits_lost);
  }
  SECTION("what SQLite alone would have done: the rows after the damage are gone, without an error") {
    CHECK(count_rows(ledger) < kTransactions - 2);
  }
}

namespace {

// Each transaction's commit frames in a log: its commit frame, then the
// padding copies SQLite writes without powersafe overwrite.
std::vector<std::vector<size_t>> commit_runs(const std::string& log) {
  std::ifstream in(log, std::ios::binary);
  std::vector<std::vector<size_t>> runs;
  std::string previous;
  for (size_t i = 0; i < frames_in(log); ++i) {
    std::string frame(kFrame, '\0');
    in.seekg(static_cast<std::streamoff>(kHeader + i * kFrame));
    REQUIRE(in.read(&frame[0], static_cast<std::streamsize>(kFrame)));
    const bool commit = frame[4] || frame[5] || frame[6] || frame[7];
    const bool copy = commit && !runs.empty() && runs.back().back() + 1 == i &&
                      frame.compare(0, 8, previous, 0, 8) == 0 && frame.compare(24, kFrame - 24, previous, 24, kFrame - 24) == 0;
    if (copy) runs.back().push_back(i);
    else if (commit) runs.push_back({i});
    previous = frame;
  }
  return runs;
}

}  // namespace

TEST_CASE("damage in the frame that commits the next-to-last transaction: two commits dropped, and it is reported",
          "[ledger][log_damage]") {
  TempDir dir;
  // Two transactions of several frames each at the end, as the ledger's
  // decisions are: the damaged commit frame is followed by a whole
  // transaction, so both were durable.
  const std::string ledger = ledger_with_log(
      dir, "INSERT INTO t VALUES (randomblob(20000)); INSERT INTO t VALUES (randomblob(20000))");
  const std::string log = ledger + "-wal";
  const auto runs = commit_runs(log);  // one commit frame each: no padding here
  REQUIRE(runs.size() == kTransactions + 3);
  for (const auto& run : runs) REQUIRE(run.size() == 1);
  const size_t next_to_last = runs[runs.size() - 2].front();
  REQUIRE(runs.back().front() > next_to_last + 1);  // the last transaction has frames of its own
  const size_t at = kHeader + next_to_last * kFrame;
  const size_t offset = GENERATE_COPY(at + 24 + 100, at + 16, at + 20);  // its page, its checksum's two words
  flip_byte(log, offset);

  const LogScan damaged = scan(log);
  CHECK(damaged.break_offset == at);
  CHECK(damaged.commits_lost == 2);
  CHECK_THAT(damaged_log(ledger).message(), Catch::Contains("is damaged at byte " + std::to_string(at)));
  // What SQLite alone would do: both large rows gone, without an error.
  CHECK(count_rows(ledger) == kTransactions);
}

TEST_CASE("a damaged log header: SQLite drops the whole log, and it is reported", "[ledger][log_damage]") {
  TempDir dir;
  const std::string ledger = ledger_with_log(dir);
  flip_byte(ledger + "-wal", 12);  // the checkpoint sequence number, under the header's checksum
  const LogScan damaged = scan(ledger + "-wal");
  CHECK(damaged.commits_read == 0);
  CHECK(damaged.commits_lost >= kTransactions);
  CHECK_FALSE(damaged_log(ledger).ok());
}

TEST_CASE("a damaged log header's salts or page size: found through the frames and the database",
          "[ledger][log_damage]") {
  TempDir dir;
  const std::string ledger = ledger_with_log(dir);
  const size_t byte = GENERATE(size_t{9}, size_t{17}, size_t{21});  // page size, salt 1, salt 2
  flip_byte(ledger + "-wal", byte);
  CHECK_THAT(damaged_log(ledger).message(), Catch::Contains("is damaged at byte 0"));
  // What SQLite alone makes of it: not even the table the log created.
  CHECK(count(ledger, "SELECT count(*) FROM sqlite_master WHERE name = 't'") == 0);
}

TEST_CASE("commits padded to a sector (no powersafe overwrite), the last one torn: not reported",
          "[ledger][log_damage]") {
  TempDir dir;
  // SQLite writes a padded commit's last frame again until a sector ends: one
  // transaction, several frames marked as commits.
  const std::string ledger =
      ledger_with_log(dir, "PRAGMA synchronous=FULL; INSERT INTO t VALUES (randomblob(20000))", "psow=0");
  const std::string log = ledger + "-wal";
  const LogScan padded = scan(log);
  CHECK(padded.commits_read == kTransactions + 2);
  const size_t frames = frames_in(log);
  REQUIRE(frames > padded.commits_read + 4);
  // A frame of the last insert, before its commit frame and the padding.
  flip_byte(log, kHeader + (frames - 6) * kFrame + 24 + 10);
  CHECK(scan(log).commits_lost == 0);
  CHECK(damaged_log(ledger).ok());
}

TEST_CASE("padded commits torn at a commit frame or a padding copy of one: not reported", "[ledger][log_damage]") {
  TempDir dir;
  const std::string ledger = ledger_with_log(
      dir, "PRAGMA synchronous=FULL; INSERT INTO t VALUES (randomblob(20000)); INSERT INTO t VALUES (randomblob(20000))",
      "psow=0");
  const std::string log = ledger + "-wal";
  const auto runs = commit_runs(log);
  REQUIRE(runs.size() >= 2);
  const auto& last = runs.back();
  const auto& next_to_last = runs[runs.size() - 2];
  REQUIRE(last.size() >= 2);  // padded
  REQUIRE(next_to_last.size() >= 2);
  SECTION("the last commit frame torn, its padding copies whole: one unsynced transaction lost") {
    flip_byte(log, kHeader + last.front() * kFrame + 24 + 100);
    CHECK(scan(log).commits_lost == 0);
    CHECK(damaged_log(ledger).ok());
  }
  SECTION("the last padding copy of the next-to-last commit torn") {
    flip_byte(log, kHeader + next_to_last.back() * kFrame + 24 + 100);
    CHECK(scan(log).commits_lost == 0);
    CHECK(damaged_log(ledger).ok());
  }
}

TEST_CASE("a log whose last transaction a crash left half written is not reported", "[ledger][log_damage]") {
  TempDir dir;
  // A last transaction of several frames (a row spilling onto overflow pages),
  // so the frame that ends it can outlive one before it.
  const std::string ledger = ledger_with_log(dir, "INSERT INTO t VALUES (randomblob(20000))");
  const std::string log = ledger + "-wal";
  const size_t frames = frames_in(log);
  REQUIRE(frames > kTransactions + 4);

  SECTION("a bad frame inside the last transaction, the frame that commits it intact") {
    flip_byte(log, kHeader + (frames - 3) * kFrame + 24 + 10);
    const LogScan torn = scan(log);
    CHECK(torn.commits_lost == 0);
    CHECK(torn.commits_read == kTransactions + 1);
    CHECK(damaged_log(ledger).ok());
    CHECK(count_rows(ledger) == kTransactions);
  }
  SECTION("the file cut short in its last frame") {
    std::filesystem::resize_file(log, kHeader + (frames - 1) * kFrame + 1000);
    CHECK(scan(log).commits_lost == 0);
    CHECK(damaged_log(ledger).ok());
  }
}

TEST_CASE("a log restarted after a checkpoint, older frames still behind the new ones, is not reported",
          "[ledger][log_damage]") {
  TempDir dir;
  // The checkpoint copies every frame into the database; the next write starts
  // the log over with new salts, leaving the old frames past it.
  const std::string ledger = ledger_with_log(dir, "PRAGMA wal_checkpoint(PASSIVE); INSERT INTO t VALUES (-1)");
  const std::string log = ledger + "-wal";
  REQUIRE(frames_in(log) > 2);
  const LogScan restarted = scan(log);
  CHECK(restarted.commits_read == 1);
  CHECK(restarted.commits_lost == 0);
  CHECK(damaged_log(ledger).ok());
  CHECK(count_rows(ledger) == kTransactions + 1);
}

namespace {

// Rewrites a log's format version and the header checksum over it, as a
// SQLite writing another format would leave the header: sound, not damaged.
void set_log_format(const std::string& log, uint32_t version) {
  std::fstream f(log, std::ios::in | std::ios::out | std::ios::binary);
  unsigned char header[kHeader] = {0};
  REQUIRE(f.read(reinterpret_cast<char*>(header), kHeader));
  auto put = [&](size_t at, uint32_t value) {
    for (int i = 0; i < 4; ++i) header[at + i] = static_cast<unsigned char>(value >> (24 - 8 * i));
  };
  auto get = [&](size_t at) {
    return uint32_t{header[at]} << 24 | uint32_t{header[at + 1]} << 16 | uint32_t{header[at + 2]} << 8 | header[at + 3];
  };
  const bool big_endian_words = (get(0) & 1) != 0;
  auto word = [&](size_t at) {
    return big_endian_words ? get(at)
                            : uint32_t{header[at + 3]} << 24 | uint32_t{header[at + 2]} << 16 |
                                  uint32_t{header[at + 1]} << 8 | header[at];
  };
  put(4, version);
  uint32_t s0 = 0, s1 = 0;
  for (size_t i = 0; i < 24; i += 8) {
    s0 += word(i) + s1;
    s1 += word(i + 4) + s0;
  }
  put(24, s0);
  put(28, s1);
  f.seekp(0);
  REQUIRE(f.write(reinterpret_cast<const char*>(header), kHeader));
}

}  // namespace

TEST_CASE("a sound log of another format version: refused by name, not as unwritable, and kept",
          "[ledger][log_damage]") {
  TempDir dir;
  const std::string ledger = ledger_with_log(dir);
  const std::string log = ledger + "-wal";
  CHECK(foreign_log(ledger).ok());
  set_log_format(log, 3007001);

  // Not damage: SQLite does not drop such a log in silence, it refuses it.
  CHECK(scan(log).commits_lost == 0);
  CHECK(damaged_log(ledger).ok());
  const std::string message = foreign_log(ledger).message();
  CHECK_THAT(message, Catch::Contains(log + " is in write-ahead-log format 3007001"));
  CHECK_THAT(message, Catch::Contains("wal_checkpoint(TRUNCATE)"));

  const auto size_before = std::filesystem::file_size(log);
  auto opened = open_ledger(ledger, 1000);
  REQUIRE(std::holds_alternative<OpenError>(opened));
  CHECK(std::get<OpenError>(opened).code == OpenErrorCode::newer_schema);
  CHECK_THAT(std::get<OpenError>(opened).message, Catch::Contains("write-ahead-log format 3007001"));
  CHECK(std::filesystem::file_size(log) == size_before);

  // What SQLite alone says: a refusal that reads as a permissions problem.
  sqlite3* db = nullptr;
  sqlite3_open_v2(ledger.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  CHECK(sqlite3_exec(db, "SELECT count(*) FROM t", nullptr, nullptr, nullptr) == SQLITE_CANTOPEN);
  sqlite3_close(db);

  // The log's commits were kept: back in this SQLite's format, every row reads.
  set_log_format(log, 3007000);
  CHECK(foreign_log(ledger).ok());
  CHECK(count_rows(ledger) == kTransactions);
}

TEST_CASE("no log, an empty log, a log of a header alone: nothing to report", "[ledger][log_damage]") {
  TempDir dir;
  const std::string ledger = dir.file("none.sqlite");
  CHECK(damaged_log(ledger).ok());
  std::ofstream(ledger + "-wal").close();
  CHECK(damaged_log(ledger).ok());
  std::istringstream header_only(std::string(kHeader, '\x01'));
  CHECK(scan_log(header_only).commits_lost == 0);
}

TEST_CASE("a log written while it is read is not reported", "[ledger][log_damage]") {
  TempDir dir;
  const std::string ledger = dir.file("busy.sqlite");
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(ledger.c_str(), &db) == SQLITE_OK);
  // No sync and small checkpoints: many writes, and a log restarted often
  // with older frames behind the write point, which a scan can catch half new.
  exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF; PRAGMA wal_autocheckpoint=50; CREATE TABLE t(x)");
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop; ++i) {
      sqlite3_exec(db, ("INSERT INTO t VALUES (randomblob(" + std::to_string(100 + i % 3000) + "))").c_str(),
                   nullptr, nullptr, nullptr);
    }
  });
  int reported = 0;
  int scans = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  for (; std::chrono::steady_clock::now() < until; ++scans) reported += damaged_log(ledger).ok() ? 0 : 1;
  stop = true;
  writer.join();
  sqlite3_close(db);
  CHECK(reported == 0);
  CHECK(scans > 100);
  CHECK(count_rows(ledger) > 0);
}
