#include "baselines.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
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

void create_bare_ledger(Database& db, size_t domains) {
  db.exec(
      "CREATE TABLE intents (intent TEXT PRIMARY KEY, state TEXT NOT NULL, domain TEXT NOT NULL, "
      "seq INTEGER NOT NULL, token TEXT NOT NULL, payload TEXT NOT NULL, certificate TEXT) WITHOUT ROWID");
  db.exec("CREATE TABLE domains (domain TEXT PRIMARY KEY, seq INTEGER NOT NULL) WITHOUT ROWID");
  db.exec("CREATE TABLE certificates (hash TEXT PRIMARY KEY, intent TEXT NOT NULL, body TEXT NOT NULL) WITHOUT ROWID");
  sqlite3_stmt* insert = db.prepare("INSERT INTO domains (domain, seq) VALUES (?1, 0)");
  for (size_t d = 0; d < domains; ++d) {
    const std::string name = "bench-account-" + std::to_string(d);
    sqlite3_bind_text(insert, 1, name.c_str(), static_cast<int>(name.size()), SQLITE_TRANSIENT);
    db.run(insert);
  }
}

void bind(sqlite3_stmt* s, int index, const std::string& text) {
  sqlite3_bind_text(s, index, text.c_str(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
}

// 64 hex digits that differ per n, like a SHA-256 (no hashing: its cost is not the storage's).
std::string fake_hash(long n) {
  const auto u = static_cast<unsigned long>(n);
  char hex[65];
  std::snprintf(hex, sizeof hex, "%016lx%016lx%016lx%016lx", u * 0x9E3779B97F4A7C15UL, u * 0xC2B2AE3D27D4EB4FUL,
                u * 0x165667B19E3779F9UL, u * 0x27D4EB2F165667C5UL);
  return hex;
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

double sqlite_files_bytes(const std::string& path) {
  double total = 0;
  for (const char* suffix : {"", "-wal"}) {
    struct stat st {};
    if (::stat((path + suffix).c_str(), &st) == 0) total += static_cast<double>(st.st_size);
  }
  return total;
}

// The bare rows' database and statements, kept open between runs.
struct BarePairs::State {
  explicit State(const std::string& path) : db(path) {}
  Database db;
  sqlite3_stmt* begin = nullptr;
  sqlite3_stmt* commit = nullptr;
  sqlite3_stmt* reserve = nullptr;
  sqlite3_stmt* admit = nullptr;
  sqlite3_stmt* certify = nullptr;
  sqlite3_stmt* finish = nullptr;
};

BarePairs::BarePairs(std::string path, size_t in_flight, IntentNames intent_names)
    : path_(std::move(path)), in_flight_(in_flight), intent_names_(intent_names) {
  remove_database(path_);
  state_ = std::make_unique<State>(path_);
  Database& db = state_->db;
  if (db.text_of("PRAGMA journal_mode = WAL") != "wal") throw std::runtime_error("sqlite: WAL mode refused");
  db.exec("PRAGMA synchronous = FULL");
  create_bare_ledger(db, in_flight_);
  state_->begin = db.prepare("BEGIN IMMEDIATE");
  state_->commit = db.prepare("COMMIT");
  state_->reserve = db.prepare("UPDATE domains SET seq = seq + 1 WHERE domain = ?1 RETURNING seq");
  state_->admit = db.prepare(
      "INSERT INTO intents (intent, state, domain, seq, token, payload) VALUES (?1, 'in_flight', ?2, ?3, ?4, ?5)");
  state_->certify = db.prepare("INSERT INTO certificates (hash, intent, body) VALUES (?1, ?2, ?3)");
  state_->finish = db.prepare("UPDATE intents SET state = 'done', certificate = ?1 WHERE intent = ?2");
}

BarePairs::~BarePairs() = default;

Timings BarePairs::run(double seconds, int64_t max_pairs) {
  State& s = *state_;
  Database& db = s.db;
  std::vector<double> samples;
  std::vector<std::string> intents(in_flight_);
  const auto start = Clock::now();
  auto now = start;
  int64_t pairs = 0;
  while (seconds_between(start, now) < seconds && (max_pairs < 0 || pairs < max_pairs)) {
    // The last transactions of a limited run carry only the pairs left.
    const size_t batch =
        max_pairs < 0 ? in_flight_ : std::min(in_flight_, static_cast<size_t>(max_pairs - pairs));
    db.run(s.begin);
    for (size_t slot = 0; slot < batch; ++slot, ++next_) {
      const std::string domain = "bench-account-" + std::to_string(slot);
      intents[slot] = intent_name("bare-", next_, intent_names_);
      bind(s.reserve, 1, domain);
      if (sqlite3_step(s.reserve) != SQLITE_ROW) throw std::runtime_error("sqlite: the domain row is missing");
      const sqlite3_int64 seq = sqlite3_column_int64(s.reserve, 0);
      db.run(s.reserve);
      bind(s.admit, 1, intents[slot]);
      bind(s.admit, 2, domain);
      sqlite3_bind_int64(s.admit, 3, seq);
      bind(s.admit, 4, fake_hash(next_).substr(0, 32));
      bind(s.admit, 5, payload_for(next_));
      db.run(s.admit);
    }
    db.run(s.commit);
    db.run(s.begin);
    const long first = next_ - static_cast<long>(batch);  // the number of this batch's first pair
    for (size_t slot = 0; slot < batch; ++slot) {
      const std::string hash = fake_hash(first + static_cast<long>(slot));
      bind(s.certify, 1, hash);
      bind(s.certify, 2, intents[slot]);
      bind(s.certify, 3, payload_for(first + static_cast<long>(slot)));
      db.run(s.certify);
      bind(s.finish, 1, hash);
      bind(s.finish, 2, intents[slot]);
      db.run(s.finish);
    }
    db.run(s.commit);
    const auto done = Clock::now();
    samples.insert(samples.end(), batch, seconds_between(now, done));
    pairs += static_cast<int64_t>(batch);
    now = done;
  }
  return Timings{std::move(samples), seconds_between(start, now)};
}

double BarePairs::ledger_bytes() {
  // The rows as they rest in the database file, not the log's transient frames.
  state_->db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  return sqlite_files_bytes(path_);
}

void BarePairs::remove() {
  state_.reset();
  remove_database(path_);
}

Timings measure_sqlite_bare_pairs(const std::string& path, size_t in_flight, double seconds, IntentNames intent_names,
                                  double* ledger_bytes) {
  BarePairs bare(path, in_flight, intent_names);
  Timings timings = bare.run(seconds);
  if (ledger_bytes != nullptr) *ledger_bytes = bare.ledger_bytes();
  bare.remove();
  return timings;
}

}  // namespace effectfence::bench
