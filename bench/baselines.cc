#include "baselines.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

namespace effectfence::bench {
namespace {

constexpr size_t kProbeFileBytes = 1 << 20;
constexpr size_t kProbeWriteBytes = 512;

[[noreturn]] void fail_errno(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

void write_all(int fd, const char* data, size_t size, off_t offset) {
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, data, size, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_errno("pwrite");
    }
    data += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
}

// The file is fully allocated and synced first, so the loop measures a data
// flush, not block allocation.
int open_probe_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) fail_errno("open " + path);
  const std::vector<char> zeros(kProbeFileBytes, 0);
  write_all(fd, zeros.data(), zeros.size(), 0);
  if (::fsync(fd) != 0) fail_errno("fsync " + path);
  return fd;
}

// ---- SQLite ----------------------------------------------------------------

class Database {
 public:
  explicit Database(const std::string& path) {
    const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    if (sqlite3_open_v2(path.c_str(), &db_, flags, nullptr) != SQLITE_OK) fail("open " + path);
  }
  ~Database() {
    for (sqlite3_stmt* s : statements_) sqlite3_finalize(s);
    sqlite3_close(db_);
  }
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  void exec(const char* sql) {
    if (sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) != SQLITE_OK) fail(sql);
  }

  std::string text_of(const char* sql) {
    sqlite3_stmt* s = prepare(sql);
    std::string value;
    if (sqlite3_step(s) == SQLITE_ROW) value = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    sqlite3_reset(s);
    return value;
  }

  sqlite3_stmt* prepare(const char* sql) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db_, sql, -1, &s, nullptr) != SQLITE_OK) fail(sql);
    statements_.push_back(s);
    return s;
  }

  // Runs a statement that returns no rows and readies it for the next run.
  void run(sqlite3_stmt* s) {
    const int rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) fail(sqlite3_sql(s));
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error("sqlite: " + what + ": " + sqlite3_errmsg(db_));
  }

  sqlite3* db_ = nullptr;
  std::vector<sqlite3_stmt*> statements_;
};

// The same durability settings the ledger uses.
void configure_like_the_ledger(Database& db) {
  if (db.text_of("PRAGMA journal_mode = WAL") != "wal") throw std::runtime_error("sqlite: WAL mode refused");
  db.exec("PRAGMA synchronous = FULL");
  db.exec(
      "CREATE TABLE decisions (id INTEGER PRIMARY KEY, intent TEXT NOT NULL UNIQUE, payload TEXT NOT NULL)");
}

// A row about the size of an admission: a unique key and a small JSON payload.
std::string payload_for(long n) {
  return R"({"tool":"charge_card","args":{"order":)" + std::to_string(n) +
         R"(,"amount_cents":1299},"agent":"bench","state":"in_flight"})";
}

void remove_database(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm"}) ::unlink((path + suffix).c_str());
}

}  // namespace

Timings measure_fdatasync(const std::string& path, double seconds) {
  const int fd = open_probe_file(path);
  const std::string block(kProbeWriteBytes, 'x');
  std::vector<double> samples;
  const auto start = Clock::now();
  auto now = start;
  for (size_t i = 0; seconds_between(start, now) < seconds; ++i) {
    const auto offset = static_cast<off_t>((i * kProbeWriteBytes) % kProbeFileBytes);
    write_all(fd, block.data(), block.size(), offset);
    if (::fdatasync(fd) != 0) fail_errno("fdatasync " + path);
    const auto done = Clock::now();
    samples.push_back(seconds_between(now, done));
    now = done;
  }
  ::close(fd);
  ::unlink(path.c_str());
  return Timings{std::move(samples), seconds_between(start, now)};
}

Timings measure_sqlite_serial(const std::string& path, double seconds) {
  remove_database(path);
  std::vector<double> samples;
  Clock::time_point start;
  Clock::time_point now;
  {
    Database db(path);
    configure_like_the_ledger(db);
    sqlite3_stmt* begin = db.prepare("BEGIN IMMEDIATE");
    sqlite3_stmt* insert = db.prepare("INSERT INTO decisions (intent, payload) VALUES (?1, ?2)");
    sqlite3_stmt* commit = db.prepare("COMMIT");
    start = now = Clock::now();
    for (long n = 0; seconds_between(start, now) < seconds; ++n) {
      const std::string intent = "baseline-" + std::to_string(n);
      const std::string payload = payload_for(n);
      db.run(begin);
      sqlite3_bind_text(insert, 1, intent.c_str(), static_cast<int>(intent.size()), SQLITE_TRANSIENT);
      sqlite3_bind_text(insert, 2, payload.c_str(), static_cast<int>(payload.size()), SQLITE_TRANSIENT);
      db.run(insert);
      db.run(commit);
      const auto done = Clock::now();
      samples.push_back(seconds_between(now, done));
      now = done;
    }
  }
  remove_database(path);
  return Timings{std::move(samples), seconds_between(start, now)};
}

}  // namespace effectfence::bench
