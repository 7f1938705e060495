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
#include <set>
#include <stdexcept>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/random_token.h"
#include "core/signing.h"
#include "effectfence/state_machine.h"
#include "ledger/archive_db.h"
#include "ledger/open_ledger.h"
#include "ledger/verify_reads.h"

namespace effectfence::archive {
namespace {

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Values as both engines print them: NULL is nullopt.
const std::string& text(const DbValue& v) {
  static const std::string empty;
  return v ? *v : empty;
}
int64_t integer(const DbValue& v) { return v ? std::stoll(*v) : 0; }
Json text_or_null(const DbValue& v) { return v ? Json(*v) : Json(nullptr); }
Json integer_or_null(const DbValue& v) { return v ? Json(std::stoll(*v)) : Json(nullptr); }

std::vector<RecordedSegment> load_recorded(ArchiveDb& db) {
  std::vector<RecordedSegment> all;
  for (const DbRow& q : db.query("SELECT segment, ledger_id, file, root, previous, before_ms, certificates, "
                                 "signatures, events, clears, key_id FROM archives ORDER BY segment")) {
    RecordedSegment r;
    r.segment = integer(q[0]);
    r.ledger_id = text(q[1]);
    r.file = text(q[2]);
    r.root = text(q[3]);
    if (q[4]) r.previous = *q[4];
    r.before_ms = integer(q[5]);
    r.counts = {integer(q[6]), integer(q[7]), integer(q[8]), integer(q[9])};
    if (q[10]) r.key_id = *q[10];
    all.push_back(std::move(r));
  }
  return all;
}

// Which intent's rows: its name, and on SQLite the intent_id its events
// carry (one lifetime of the name, between sweeps).
struct IntentKey {
  std::string name;
  int64_t row = 0;
};

// The SQL that selects an intent's events (table alias e) and its
// certificates (alias c), with ?1 its name and ?2 its row.
struct IntentSql {
  explicit IntentSql(const ArchiveDb& db) : by_id(db.rows_by_intent_id()) {}
  std::string events() const { return by_id ? "e.intent_id = ?2 AND e.intent = ?1" : "e.intent = ?1"; }
  std::string certificates() const {
    // A detail that is not JSON (written by hand) names no certificate:
    // json_extract would fail the whole run on it.
    return by_id ? "c.hash IN (SELECT CASE WHEN json_valid(k.detail) THEN json_extract(k.detail, '$.certificate') "
                   "END FROM events k WHERE k.intent_id = ?2 AND k.intent = ?1 AND k.kind = 'committed')"
                 : "c.intent = ?1";
  }
  // A clear goes with the lifetime whose cleared event it wrote.
  std::string clears() const {
    return by_id ? "k.intent = ?1 AND k.requested_at IN (SELECT e.at FROM events e WHERE e.intent_id = ?2 AND "
                   "e.intent = ?1 AND e.kind = 'cleared')"
                 : "k.intent = ?1";
  }
  std::vector<DbParam> params(const IntentKey& key) const {
    if (by_id) return {key.name, key.row};
    return {key.name};
  }
  bool by_id;
};

// The rows of one intent, as they go into a segment and out of the ledger.
struct IntentRows {
  IntentKey key;
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

// Ends the transaction unless it was committed.
class TxnGuard {
 public:
  explicit TxnGuard(ArchiveDb& db) : db_(db) {}
  ~TxnGuard() { db_.rollback(); }
  TxnGuard(const TxnGuard&) = delete;
  TxnGuard& operator=(const TxnGuard&) = delete;

 private:
  ArchiveDb& db_;
};

// Reads batches of archivable intents. One read transaction per batch, so
// each batch is a consistent snapshot; no write lock is taken.
class Selector {
 public:
  Selector(ArchiveDb& db, int64_t before_ms, int64_t max_rows)
      : db_(db), sql_(db), before_ms_(before_ms), max_rows_(max_rows) {}

  // The next batch after event id cursor; empty when nothing is left.
  Batch next(int64_t cursor) {
    TxnGuard guard(db_);
    db_.begin_read();
    load_protected();
    load_sweeps();
    Batch batch;
    batch.next_cursor = cursor;
    const int64_t last_id =
        integer(db_.query("SELECT coalesce(max(id), 0) FROM events WHERE at < ?1", {before_ms_}).at(0).at(0));
    while (batch.rows < max_rows_ && batch.next_cursor < last_id) {
      const std::vector<DbRow> scan = db_.query(
          std::string("SELECT id, intent, ") + (sql_.by_id ? "intent_id" : "0") +
              " FROM events WHERE id > ?1 AND id <= ?2 AND intent IS NOT NULL AND at < ?3 ORDER BY id LIMIT 1000",
          {batch.next_cursor, last_id, before_ms_});
      for (const DbRow& event : scan) {
        if (batch.rows >= max_rows_) break;
        const int64_t id = integer(event[0]);
        const IntentKey key{text(event[1]), event[2] ? integer(event[2]) : 0};
        batch.next_cursor = id;
        // Each intent once: at its first event.
        if (!first_event_of(key, id)) continue;
        if (auto rows = archivable(key)) {
          batch.rows += static_cast<int64_t>(rows->rows.size());
          for (const Json& r : rows->rows) note_row_time(r, batch);
          batch.intents.push_back(std::move(*rows));
        }
      }
      if (scan.empty()) batch.next_cursor = last_id;
    }
    db_.commit();
    return batch;
  }

  void load_protected() {
    protected_.clear();
    for (const DbRow& r : db_.query("SELECT head FROM domains WHERE head IS NOT NULL UNION SELECT parent FROM intents "
                                    "WHERE (state = 'in_flight' OR state = 'unknown') AND parent IS NOT NULL")) {
      protected_.insert(text(r[0]));
    }
  }

  // The intents left in the ledger because their events break the state
  // machine (archivable() says why).
  int64_t kept_for_history() const { return static_cast<int64_t>(kept_.size()); }

 private:
  void load_sweeps() {
    sweeps_.clear();
    for (const DbRow& r : db_.query("SELECT id FROM events WHERE kind = 'swept' ORDER BY id")) {
      sweeps_.push_back(integer(r[0]));
    }
  }

  // Whether events (one intent's, in id order) are a history the fence
  // writes, judged as verify judges it (impossible_history).
  bool possible_history(const std::vector<DbRow>& events) const {
    HistoryCheck history(sweeps_);
    for (const DbRow& e : events) {
      const auto kind = event_kind_from_name(text(e[2]));
      if (!kind) continue;  // the CHECK on events.kind keeps others out
      const std::string reason = *kind == EventKind::commit_refused ? refusal_reason(text(e[8])) : "";
      history.event(integer(e[0]), *kind, text(e[3]), integer(e[6]), reason);
    }
    return history.findings().empty();
  }

  bool first_event_of(const IntentKey& key, int64_t id) {
    std::vector<DbParam> params = sql_.params(key);
    params.emplace_back(id);
    const std::string before = "?" + std::to_string(params.size());
    return db_.query("SELECT 1 FROM events e WHERE " + sql_.events() + " AND e.id < " + before + " LIMIT 1", params)
        .empty();
  }

  static void note_row_time(const Json& r, Batch& batch) {
    for (const char* column : {"committed_at", "at", "requested_at", "signed_at"}) {
      const auto it = r.find(column);
      if (it != r.end() && it->is_number_integer()) batch.note_time(it->get<int64_t>());
    }
  }

  // The intent's rows iff all of them may go (archive.h says which).
  std::optional<IntentRows> archivable(const IntentKey& key) {
    const std::string& intent = key.name;
    if (!db_.query("SELECT 1 FROM intents WHERE intent = ?1", {intent}).empty()) return std::nullopt;
    IntentRows out;
    out.key = key;
    out.intent = intent;
    // committed_at, then hash: one order on both engines.
    for (const DbRow& c : db_.query("SELECT c.hash, c.intent, c.domain, c.seq, c.generation, c.parent, c.agent, "
                                    "c.tool, c.body, c.committed_at, s.key_id, s.signature, s.unsigned_before, "
                                    "s.signed_at FROM certificates c LEFT JOIN signatures s ON s.certificate = c.hash "
                                    "WHERE " + sql_.certificates() + " ORDER BY c.committed_at, c.hash",
                                    sql_.params(key))) {
      const std::string hash = text(c[0]);
      if (integer(c[9]) >= before_ms_ || protected_.count(hash)) return std::nullopt;
      out.rows.push_back({{"type", "certificate"},
                          {"hash", hash},
                          {"intent", text(c[1])},
                          {"domain", text(c[2])},
                          {"seq", integer(c[3])},
                          {"generation", integer(c[4])},
                          {"parent", text_or_null(c[5])},
                          {"agent", text(c[6])},
                          {"tool", text(c[7])},
                          {"body", text(c[8])},
                          {"committed_at", integer(c[9])}});
      out.certificates.push_back(hash);
      if (c[10]) {
        out.rows.push_back({{"type", "signature"},
                            {"certificate", hash},
                            {"key_id", text(c[10])},
                            {"signature", text(c[11])},
                            {"unsigned_before", integer(c[12])},
                            {"signed_at", integer(c[13])}});
        out.signatures.push_back(hash);
      }
    }
    const std::vector<DbRow> events = db_.query(
        "SELECT id, at, kind, intent, domain, seq, generation, actor, detail FROM events e WHERE " + sql_.events() +
            " ORDER BY id",
        sql_.params(key));
    // A history verify reports as impossible (events edited or written by
    // hand) stays where verify keeps reporting it: in a segment only the
    // hashes would be checked.
    if (!possible_history(events)) {
      kept_.insert(intent + "\n" + std::to_string(key.row));
      return std::nullopt;
    }
    for (const DbRow& e : events) {
      if (integer(e[1]) >= before_ms_) return std::nullopt;
      out.rows.push_back({{"type", "event"},
                          {"id", integer(e[0])},
                          {"at", integer(e[1])},
                          {"kind", text(e[2])},
                          {"intent", text_or_null(e[3])},
                          {"domain", text_or_null(e[4])},
                          {"seq", integer_or_null(e[5])},
                          {"generation", integer_or_null(e[6])},
                          {"actor", text(e[7])},
                          {"detail", text(e[8])}});
      out.events.push_back(integer(e[0]));
    }
    for (const DbRow& k : db_.query("SELECT id, intent, operator, reason, requested_at, previous_state FROM clears k "
                                    "WHERE " + sql_.clears() + " ORDER BY id",
                                    sql_.params(key))) {
      if (integer(k[4]) >= before_ms_) return std::nullopt;
      out.rows.push_back({{"type", "clear"},
                          {"id", integer(k[0])},
                          {"intent", text(k[1])},
                          {"operator", text(k[2])},
                          {"reason", text(k[3])},
                          {"requested_at", integer(k[4])},
                          {"previous_state", text_or_null(k[5])}});
      out.clears.push_back(integer(k[0]));
    }
    return out;
  }

  ArchiveDb& db_;
  const IntentSql sql_;
  const int64_t before_ms_;
  const int64_t max_rows_;
  std::unordered_set<std::string> protected_;  // domain heads, parents of unfinished attempts
  std::vector<int64_t> sweeps_;                // ids of the swept events, in order
  std::set<std::string> kept_;                 // name and row of each intent kept for its history
};

// Whether intent's rows in the ledger are still exactly those read: no
// intent row came back (a fresh prepare after its sweep), no row was added.
bool unchanged(ArchiveDb& db, const IntentRows& rows) {
  const IntentSql sql(db);
  const DbRow q = db.query("SELECT (SELECT count(*) FROM intents WHERE intent = ?1), "
                           "(SELECT count(*) FROM certificates c WHERE " + sql.certificates() + "), "
                           "(SELECT count(*) FROM events e WHERE " + sql.events() + "), "
                           "(SELECT count(*) FROM clears k WHERE " + sql.clears() + ")",
                           sql.params(rows.key))
                       .at(0);
  return integer(q[0]) == 0 && integer(q[1]) == static_cast<int64_t>(rows.certificates.size()) &&
         integer(q[2]) == static_cast<int64_t>(rows.events.size()) &&
         integer(q[3]) == static_cast<int64_t>(rows.clears.size());
}

void delete_one(ArchiveDb& db, const char* sql, const DbParam& key, const std::string& what) {
  if (db.exec(sql, {key}) != 1) throw std::runtime_error("the ledger no longer holds " + what + " (changed meanwhile)");
}

// Deletes the batch's rows and records the segment, in one transaction.
// Returns false (nothing changed) iff one of its intents changed meanwhile,
// or (PostgreSQL) the transaction lost a deadlock to a server's decision.
bool delete_and_record(ArchiveDb& db, const Batch& batch, const RecordedSegment& segment, int64_t first_at,
                       int64_t last_at) {
  TxnGuard guard(db);
  try {
    std::vector<std::string> intents;
    for (const IntentRows& rows : batch.intents) intents.push_back(rows.intent);
    db.begin_write(std::move(intents));
    for (const IntentRows& rows : batch.intents) {
      if (!unchanged(db, rows)) return false;  // rolled back by guard
    }
    db.exec("INSERT INTO archive_in_progress (one, root, before_ms) VALUES (1, ?1, ?2)",
            {segment.root, segment.before_ms});
    for (const IntentRows& rows : batch.intents) {
      auto signatures = [&] {
        for (const std::string& hash : rows.signatures) {
          delete_one(db, "DELETE FROM signatures WHERE certificate = ?1", hash, "the signature of " + hash);
        }
      };
      if (db.signatures_first()) signatures();
      for (const std::string& hash : rows.certificates) {
        delete_one(db, "DELETE FROM certificates WHERE hash = ?1", hash, "certificate " + hash);
      }
      if (!db.signatures_first()) signatures();
      for (int64_t id : rows.events) {
        delete_one(db, "DELETE FROM events WHERE id = ?1", id, "event " + std::to_string(id));
      }
      for (int64_t id : rows.clears) {
        delete_one(db, "DELETE FROM clears WHERE id = ?1", id, "clear " + std::to_string(id));
      }
      // What the sweep kept of it to find its admissions: its events are gone.
      if (db.rows_by_intent_id()) {
        db.exec("DELETE FROM swept_intents WHERE intent = ?1 AND intent_id = ?2", {rows.key.name, rows.key.row});
      }
    }
    auto or_null = [](const std::optional<std::string>& v) { return v ? DbParam(*v) : DbParam(); };
    db.exec("INSERT INTO archives (segment, ledger_id, file, root, previous, before_ms, first_at, last_at, "
            "certificates, signatures, events, clears, key_id, archived_at) "
            "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
            {segment.segment, segment.ledger_id, segment.file, segment.root, or_null(segment.previous),
             segment.before_ms, first_at, last_at, segment.counts.certificates, segment.counts.signatures,
             segment.counts.events, segment.counts.clears, or_null(segment.key_id), wall_ms()});
    db.exec("DELETE FROM archive_in_progress");
    db.commit();
    return true;
  } catch (const std::exception& e) {
    if (db.is_retryable(e)) return false;
    throw;
  }
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
  if (Status listed = list_directory(dir, &names); !listed.ok()) throw std::runtime_error(listed.message());
  const int64_t last = recorded.empty() ? 0 : recorded.back().segment;
  bool last_found = last == 0;
  for (const std::string& name : names) {
    if (is_temporary_name(name)) {
      if (Status removed = remove_durably(dir, name); !removed.ok()) throw std::runtime_error(removed.message());
      ++result->removed_temporary;
      continue;
    }
    const auto n = segment_number(name);
    if (!n) continue;
    if (*n == last) last_found = true;
    if (*n <= last) continue;
    if (Status removed = remove_durably(dir, name); !removed.ok()) throw std::runtime_error(removed.message());
    ++result->removed_unrecorded;
  }
  if (!last_found) {
    throw std::runtime_error(dir + " does not hold " + recorded.back().file +
                             ", the last segment this ledger recorded: give --out the directory its earlier "
                             "archives were written to");
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
  std::unique_ptr<ArchiveDb> opened = is_postgres_ledger(options.ledger_path)
                                         ? open_postgres_archive_db(options.ledger_path)
                                         : open_sqlite_archive_db(options.ledger_path, options.busy_timeout_ms);
  ArchiveDb& db = *opened;
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
    if (Status written = write_durably(options.directory, segment.file, builder.text()); !written.ok()) {
      throw std::runtime_error(written.message());
    }
    bool committed = false;
    try {
      committed = delete_and_record(db, batch, segment, batch.first_at, batch.last_at);
    } catch (...) {
      // Not recorded: the file must not stand as a segment of this ledger.
      (void)remove_durably(options.directory, segment.file);  // the exception is what is told
      throw;
    }
    if (!committed) {
      // An intent came back (prepared again after its sweep): choose again.
      if (Status removed = remove_durably(options.directory, segment.file); !removed.ok()) {
        throw std::runtime_error(removed.message());
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
  result.kept_for_history = selector.kept_for_history();
  return result;
}

}  // namespace effectfence::archive
