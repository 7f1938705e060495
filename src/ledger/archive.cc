#include "ledger/archive.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <map>
#include <stdexcept>
#include <unordered_set>
#include <utility>
#include <vector>

#include <SQLiteCpp/SQLiteCpp.h>

#include "core/random_token.h"
#include "core/signing.h"

namespace effectfence::archive {
namespace {

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Json text_or_null(const SQLite::Column& c) { return c.isNull() ? Json(nullptr) : Json(c.getString()); }
Json integer_or_null(const SQLite::Column& c) { return c.isNull() ? Json(nullptr) : Json(c.getInt64()); }

std::vector<RecordedSegment> load_recorded(SQLite::Database& db) {
  std::vector<RecordedSegment> all;
  SQLite::Statement q(db,
                      "SELECT segment, ledger_id, file, root, previous, before_ms, certificates, signatures, events, "
                      "clears, key_id FROM archives ORDER BY segment");
  while (q.executeStep()) {
    RecordedSegment r;
    r.segment = q.getColumn(0).getInt64();
    r.ledger_id = q.getColumn(1).getString();
    r.file = q.getColumn(2).getString();
    r.root = q.getColumn(3).getString();
    if (!q.getColumn(4).isNull()) r.previous = q.getColumn(4).getString();
    r.before_ms = q.getColumn(5).getInt64();
    r.counts = {q.getColumn(6).getInt64(), q.getColumn(7).getInt64(), q.getColumn(8).getInt64(),
                q.getColumn(9).getInt64()};
    if (!q.getColumn(10).isNull()) r.key_id = q.getColumn(10).getString();
    all.push_back(std::move(r));
  }
  return all;
}

// The rows of one intent, as they go into a segment and out of the ledger.
struct IntentRows {
  std::string intent;
  std::vector<Json> rows;
  std::vector<std::string> certificates;  // hashes
  std::vector<std::string> signatures;    // certificate hashes
  std::vector<int64_t> events;
  std::vector<int64_t> clears;
};

struct Batch {
  std::vector<IntentRows> intents;
  int64_t rows = 0;
  int64_t first_at = std::numeric_limits<int64_t>::max();
  int64_t last_at = std::numeric_limits<int64_t>::min();
  int64_t next_cursor = 0;  // the last event id examined
  void note_time(int64_t at) {
    first_at = std::min(first_at, at);
    last_at = std::max(last_at, at);
  }
};

// Reads batches of archivable intents. One read transaction per batch, so
// each batch is a consistent snapshot; no write lock is taken.
class Selector {
 public:
  Selector(SQLite::Database& db, int64_t before_ms, int64_t max_rows)
      : db_(db), before_ms_(before_ms), max_rows_(max_rows) {}

  // The next batch after event id cursor; empty when nothing is left.
  Batch next(int64_t cursor) {
    SQLite::Transaction read(db_);  // deferred: a snapshot, no lock
    load_protected();
    Batch batch;
    batch.next_cursor = cursor;
    const int64_t last_id = db_.execAndGet("SELECT coalesce(max(id), 0) FROM events WHERE at < " +
                                           std::to_string(before_ms_))
                                .getInt64();
    SQLite::Statement scan(db_,
                           "SELECT id, intent FROM events WHERE id > ?1 AND id <= ?2 AND intent IS NOT NULL "
                           "AND at < ?3 ORDER BY id LIMIT 1000");
    while (batch.rows < max_rows_ && batch.next_cursor < last_id) {
      scan.reset();
      scan.bind(1, batch.next_cursor);
      scan.bind(2, last_id);
      scan.bind(3, before_ms_);
      bool any = false;
      while (batch.rows < max_rows_ && scan.executeStep()) {
        any = true;
        const int64_t id = scan.getColumn(0).getInt64();
        const std::string intent = scan.getColumn(1).getString();
        batch.next_cursor = id;
        // Each intent once: at its first event.
        if (!first_event_of(intent, id)) continue;
        if (auto rows = archivable(intent)) {
          batch.rows += static_cast<int64_t>(rows->rows.size());
          for (const Json& r : rows->rows) note_row_time(r, batch);
          batch.intents.push_back(std::move(*rows));
        }
      }
      if (!any) batch.next_cursor = last_id;
    }
    read.commit();
    return batch;
  }

 private:
  void load_protected() {
    protected_.clear();
    SQLite::Statement q(db_,
                        "SELECT head FROM domains WHERE head IS NOT NULL UNION SELECT parent FROM intents "
                        "WHERE (state = 'in_flight' OR state = 'unknown') AND parent IS NOT NULL");
    while (q.executeStep()) protected_.insert(q.getColumn(0).getString());
  }

  bool first_event_of(const std::string& intent, int64_t id) {
    SQLite::Statement q(db_, "SELECT 1 FROM events WHERE intent = ?1 AND id < ?2 LIMIT 1");
    q.bind(1, intent);
    q.bind(2, id);
    return !q.executeStep();
  }

  static void note_row_time(const Json& r, Batch& batch) {
    for (const char* column : {"committed_at", "at", "requested_at", "signed_at"}) {
      const auto it = r.find(column);
      if (it != r.end() && it->is_number_integer()) batch.note_time(it->get<int64_t>());
    }
  }

  // The intent's rows iff all of them may go (archive.h says which).
  std::optional<IntentRows> archivable(const std::string& intent) {
    {
      SQLite::Statement live(db_, "SELECT 1 FROM intents WHERE intent = ?1");
      live.bind(1, intent);
      if (live.executeStep()) return std::nullopt;
    }
    IntentRows out;
    out.intent = intent;
    SQLite::Statement certs(db_,
                            "SELECT c.hash, c.intent, c.domain, c.seq, c.generation, c.parent, c.agent, c.tool, "
                            "c.body, c.committed_at, s.key_id, s.signature, s.unsigned_before, s.signed_at "
                            "FROM certificates c LEFT JOIN signatures s ON s.certificate = c.hash "
                            "WHERE c.intent = ?1 ORDER BY c.committed_at, c.hash");
    certs.bind(1, intent);
    while (certs.executeStep()) {
      const std::string hash = certs.getColumn(0).getString();
      if (certs.getColumn(9).getInt64() >= before_ms_ || protected_.count(hash)) return std::nullopt;
      out.rows.push_back({{"type", "certificate"},
                          {"hash", hash},
                          {"intent", certs.getColumn(1).getString()},
                          {"domain", certs.getColumn(2).getString()},
                          {"seq", certs.getColumn(3).getInt64()},
                          {"generation", certs.getColumn(4).getInt64()},
                          {"parent", text_or_null(certs.getColumn(5))},
                          {"agent", certs.getColumn(6).getString()},
                          {"tool", certs.getColumn(7).getString()},
                          {"body", certs.getColumn(8).getString()},
                          {"committed_at", certs.getColumn(9).getInt64()}});
      out.certificates.push_back(hash);
      if (!certs.getColumn(10).isNull()) {
        out.rows.push_back({{"type", "signature"},
                            {"certificate", hash},
                            {"key_id", certs.getColumn(10).getString()},
                            {"signature", certs.getColumn(11).getString()},
                            {"unsigned_before", certs.getColumn(12).getInt64()},
                            {"signed_at", certs.getColumn(13).getInt64()}});
        out.signatures.push_back(hash);
      }
    }
    SQLite::Statement events(db_,
                             "SELECT id, at, kind, intent, domain, seq, generation, actor, detail FROM events "
                             "WHERE intent = ?1 ORDER BY id");
    events.bind(1, intent);
    while (events.executeStep()) {
      if (events.getColumn(1).getInt64() >= before_ms_) return std::nullopt;
      out.rows.push_back({{"type", "event"},
                          {"id", events.getColumn(0).getInt64()},
                          {"at", events.getColumn(1).getInt64()},
                          {"kind", events.getColumn(2).getString()},
                          {"intent", text_or_null(events.getColumn(3))},
                          {"domain", text_or_null(events.getColumn(4))},
                          {"seq", integer_or_null(events.getColumn(5))},
                          {"generation", integer_or_null(events.getColumn(6))},
                          {"actor", events.getColumn(7).getString()},
                          {"detail", events.getColumn(8).getString()}});
      out.events.push_back(events.getColumn(0).getInt64());
    }
    SQLite::Statement clears(db_,
                             "SELECT id, intent, operator, reason, requested_at, previous_state FROM clears "
                             "WHERE intent = ?1 ORDER BY id");
    clears.bind(1, intent);
    while (clears.executeStep()) {
      if (clears.getColumn(4).getInt64() >= before_ms_) return std::nullopt;
      out.rows.push_back({{"type", "clear"},
                          {"id", clears.getColumn(0).getInt64()},
                          {"intent", clears.getColumn(1).getString()},
                          {"operator", clears.getColumn(2).getString()},
                          {"reason", clears.getColumn(3).getString()},
                          {"requested_at", clears.getColumn(4).getInt64()},
                          {"previous_state", text_or_null(clears.getColumn(5))}});
      out.clears.push_back(clears.getColumn(0).getInt64());
    }
    return out;
  }

  SQLite::Database& db_;
  const int64_t before_ms_;
  const int64_t max_rows_;
  std::unordered_set<std::string> protected_;  // domain heads, parents of unfinished attempts
};

// Whether intent's rows in the ledger are still exactly those read: no
// intent row came back (a fresh prepare after its sweep), no row was added.
bool unchanged(SQLite::Database& db, const IntentRows& rows) {
  SQLite::Statement q(db,
                      "SELECT (SELECT count(*) FROM intents WHERE intent = ?1), "
                      "(SELECT count(*) FROM certificates WHERE intent = ?1), "
                      "(SELECT count(*) FROM events WHERE intent = ?1), "
                      "(SELECT count(*) FROM clears WHERE intent = ?1)");
  q.bind(1, rows.intent);
  q.executeStep();
  return q.getColumn(0).getInt64() == 0 &&
         q.getColumn(1).getInt64() == static_cast<int64_t>(rows.certificates.size()) &&
         q.getColumn(2).getInt64() == static_cast<int64_t>(rows.events.size()) &&
         q.getColumn(3).getInt64() == static_cast<int64_t>(rows.clears.size());
}

void delete_one(SQLite::Statement& q, const std::string& what) {
  q.exec();
  if (q.getChanges() != 1) throw std::runtime_error("the ledger no longer holds " + what + " (changed meanwhile)");
  q.reset();
}

// Deletes the batch's rows and records the segment, in one transaction.
// Returns false (nothing changed) iff one of its intents changed meanwhile.
bool delete_and_record(SQLite::Database& db, const Batch& batch, const RecordedSegment& segment,
                       int64_t first_at, int64_t last_at) {
  SQLite::Transaction tx(db, SQLite::TransactionBehavior::IMMEDIATE);
  for (const IntentRows& rows : batch.intents) {
    if (!unchanged(db, rows)) return false;  // rolled back by tx's destructor
  }
  SQLite::Statement open_window(db, "INSERT INTO archive_in_progress (one, root, before_ms) VALUES (1, ?1, ?2)");
  open_window.bind(1, segment.root);
  open_window.bind(2, segment.before_ms);
  open_window.exec();
  SQLite::Statement certificate(db, "DELETE FROM certificates WHERE hash = ?1");
  SQLite::Statement signature(db, "DELETE FROM signatures WHERE certificate = ?1");
  SQLite::Statement event(db, "DELETE FROM events WHERE id = ?1");
  SQLite::Statement clear(db, "DELETE FROM clears WHERE id = ?1");
  for (const IntentRows& rows : batch.intents) {
    for (const std::string& hash : rows.certificates) {
      certificate.bind(1, hash);
      delete_one(certificate, "certificate " + hash);
    }
    for (const std::string& hash : rows.signatures) {
      signature.bind(1, hash);
      delete_one(signature, "the signature of certificate " + hash);
    }
    for (int64_t id : rows.events) {
      event.bind(1, id);
      delete_one(event, "event " + std::to_string(id));
    }
    for (int64_t id : rows.clears) {
      clear.bind(1, id);
      delete_one(clear, "clear " + std::to_string(id));
    }
  }
  SQLite::Statement record(
      db,
      "INSERT INTO archives (segment, ledger_id, file, root, previous, before_ms, first_at, last_at, certificates, "
      "signatures, events, clears, key_id, archived_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, "
      "?13, ?14)");
  record.bind(1, segment.segment);
  record.bind(2, segment.ledger_id);
  record.bind(3, segment.file);
  record.bind(4, segment.root);
  if (segment.previous) record.bind(5, *segment.previous);
  record.bind(6, segment.before_ms);
  record.bind(7, first_at);
  record.bind(8, last_at);
  record.bind(9, segment.counts.certificates);
  record.bind(10, segment.counts.signatures);
  record.bind(11, segment.counts.events);
  record.bind(12, segment.counts.clears);
  if (segment.key_id) record.bind(13, *segment.key_id);
  record.bind(14, wall_ms());
  record.exec();
  db.exec("DELETE FROM archive_in_progress");
  tx.commit();
  return true;
}

// Only one archive at a time writes into a directory: two would both take
// the next segment's name, and the second rename would replace a file the
// first had already recorded.
class DirectoryLock {
 public:
  explicit DirectoryLock(const std::string& dir) {
    const std::string path = dir + "/archive.lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd_ < 0) throw std::runtime_error("cannot create " + path + ": " + std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd_);
      throw std::runtime_error("another effectfence archive is writing into " + dir +
                               " (it holds archive.lock); wait for it to finish");
    }
  }
  ~DirectoryLock() { ::close(fd_); }
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

// Removes what an interrupted run left: temporary files, and segment files
// after the last one the ledger records (written, never committed: their
// rows are all still in the ledger). Refuses a directory that lacks the
// last recorded segment: it is not this ledger's archive.
void tidy_directory(const std::string& dir, const std::vector<RecordedSegment>& recorded, ArchiveResult* result) {
  std::vector<std::string> names;
  if (std::string error = list_directory(dir, &names); !error.empty()) throw std::runtime_error(error);
  const int64_t last = recorded.empty() ? 0 : recorded.back().segment;
  bool last_found = last == 0;
  for (const std::string& name : names) {
    if (is_temporary_name(name)) {
      if (std::string error = remove_durably(dir, name); !error.empty()) throw std::runtime_error(error);
      ++result->removed_temporary;
      continue;
    }
    const auto n = segment_number(name);
    if (!n) continue;
    if (*n == last) last_found = true;
    if (*n <= last) continue;
    if (std::string error = remove_durably(dir, name); !error.empty()) throw std::runtime_error(error);
    ++result->removed_unrecorded;
  }
  if (!last_found) {
    throw std::runtime_error(dir + " does not hold " + recorded.back().file +
                             ", the last segment this ledger recorded: give --out the directory its earlier "
                             "archives were written to (effectfence verify --archive DIR checks one)");
  }
}

}  // namespace

ArchiveResult run_archive(const ArchiveOptions& options,
                          const std::function<void(const RecordedSegment&)>& progress) {
  ArchiveResult result;
  if (::mkdir(options.directory.c_str(), 0755) != 0 && errno != EEXIST) {
    throw std::runtime_error("cannot create " + options.directory + ": " + std::strerror(errno));
  }
  DirectoryLock lock(options.directory);
  SQLite::Database db(options.ledger_path, SQLite::OPEN_READWRITE, static_cast<int>(options.busy_timeout_ms));
  std::vector<RecordedSegment> recorded = load_recorded(db);
  tidy_directory(options.directory, recorded, &result);
  const std::string ledger_id = recorded.empty() ? random_token_hex(16) : recorded.front().ledger_id;
  if (ledger_id.size() != 32) throw std::runtime_error("the system's random number generator is unavailable");

  Selector selector(db, options.before_ms, options.max_rows);
  int64_t cursor = 0;
  while (options.max_segments == 0 || result.segments < options.max_segments) {
    Batch batch = selector.next(cursor);
    if (batch.intents.empty()) break;
    // Another archive of this ledger (into another directory) may have
    // recorded segments since.
    recorded = load_recorded(db);
    RecordedSegment segment;
    segment.segment = recorded.empty() ? 1 : recorded.back().segment + 1;
    segment.ledger_id = ledger_id;
    segment.file = segment_file_name(segment.segment);
    if (!recorded.empty()) segment.previous = recorded.back().root;
    segment.before_ms = options.before_ms;
    if (options.signer) segment.key_id = options.signer->key_id();

    SegmentBuilder builder({ledger_id, segment.segment, segment.previous, options.before_ms, batch.first_at,
                            batch.last_at});
    for (const IntentRows& rows : batch.intents) {
      for (const Json& row : rows.rows) {
        try {
          builder.add(row);
        } catch (const std::exception& e) {
          throw std::runtime_error("intent '" + rows.intent + "' holds text that is not UTF-8 (" + e.what() +
                                   "); it is left in the ledger");
        }
      }
    }
    segment.root = builder.finish(options.signer.get());
    segment.counts = builder.counts();
    if (std::string error = write_durably(options.directory, segment.file, builder.text()); !error.empty()) {
      throw std::runtime_error(error);
    }
    bool committed = false;
    try {
      committed = delete_and_record(db, batch, segment, batch.first_at, batch.last_at);
    } catch (...) {
      // Not recorded: the file must not stand as a segment of this ledger.
      remove_durably(options.directory, segment.file);
      throw;
    }
    if (!committed) {
      // An intent came back (prepared again after its sweep): choose again.
      if (std::string error = remove_durably(options.directory, segment.file); !error.empty()) {
        throw std::runtime_error(error);
      }
      ++result.retried_batches;
      continue;  // from the same cursor: that intent is no longer archivable
    }
    cursor = batch.next_cursor;
    ++result.segments;
    result.rows.certificates += segment.counts.certificates;
    result.rows.signatures += segment.counts.signatures;
    result.rows.events += segment.counts.events;
    result.rows.clears += segment.counts.clears;
    result.last_root = segment.root;
    if (progress) progress(segment);
  }
  return result;
}

}  // namespace effectfence::archive
