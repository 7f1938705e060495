#include "ledger/sqlite_ledger.h"

#include <pthread.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <SQLiteCpp/SQLiteCpp.h>
#include <sqlite3.h>

#include "core/mutex.h"
#include "ledger/job_threads.h"
#include "ledger/ledger_files.h"
#include "ledger/log_damage.h"
#include "ledger/migrations.h"
#include "ledger/sqlite_txn.h"
#include "ledger/wal_write_batching.h"

namespace effectfence {
namespace {

constexpr size_t kMaxBatch = 512;

OpenError open_error(OpenErrorCode code, const std::string& path, const std::string& what) {
  return OpenError{code, "ledger " + path + ": " + what};
}

// Looks at the bytes before SQLite does, so a file that is not a database
// is refused instead of being treated as one.
std::optional<OpenError> check_existing_file(const std::string& path) {
  if (path == ":memory:") {
    return open_error(OpenErrorCode::invalid_settings, path,
                      "is SQLite's name for a private in-memory database; effectfence's is `memory`, "
                      "which fences only within one process. For a file of that name, write ./:memory:");
  }
  if (const std::string database = database_beside(path); !database.empty()) {
    return open_error(OpenErrorCode::not_a_ledger, path,
                      "is where SQLite keeps the log or lock of the database " + database +
                          "; a ledger there would take the place of that database's transactions. Use " + database +
                          " itself as the ledger, or a new path");
  }
  if (const Status log = orphaned_log(path); !log.ok()) {
    return open_error(OpenErrorCode::corrupt, path, log.message());
  }
  if (const Status log = damaged_log(path); !log.ok()) {
    return open_error(OpenErrorCode::corrupt, path, log.message());
  }
  if (const Status log = foreign_log(path); !log.ok()) {
    return open_error(OpenErrorCode::newer_schema, path, log.message());
  }
  if (const Status taken = companion_not_a_file(path); !taken.ok()) {
    return open_error(OpenErrorCode::io, path, taken.message());
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const std::string directory = directory_of(path);
    if (::stat(directory.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return open_error(OpenErrorCode::unwritable, path,
                        "its directory " + directory + " does not exist; create it (mkdir -p " + directory +
                            ") or use a ledger in a directory that does");
    }
    return std::nullopt;  // created below
  }
  if (S_ISDIR(st.st_mode)) return open_error(OpenErrorCode::io, path, "is a directory, not a ledger file");
  if (!S_ISREG(st.st_mode)) {
    return open_error(OpenErrorCode::not_a_ledger, path,
                      "is not a regular file (a pipe, socket or device); use a ledger file");
  }
  // SQLite keeps the write lock and the log beside the name it was given, so
  // processes opening one file under two names would not fence each other.
  if (st.st_nlink > 1) {
    return open_error(OpenErrorCode::linked, path, hard_links_problem(path, st.st_nlink));
  }
  if (st.st_size == 0) return std::nullopt;  // a creator died before writing: initialise it
  std::ifstream in(path, std::ios::binary);
  char header[16] = {0};
  in.read(header, sizeof header);
  if (!in && st.st_size >= 16) {
    return open_error(OpenErrorCode::unwritable, path, "cannot be read (check its permissions)");
  }
  if (st.st_size < 100 || std::memcmp(header, "SQLite format 3", 16) != 0) {
    return open_error(OpenErrorCode::not_a_ledger, path,
                      "is not an SQLite database; refusing to touch it. Use a new path for the ledger, "
                      "or move the file away if it is garbage");
  }
  return std::nullopt;
}

OpenError classify_open_failure(const std::string& path, const SQLite::Exception& e) {
  const int code = e.getErrorCode();
  // A damaged header (its encoding, its format numbers) reads as an
  // unsupported file format: damage like any other.
  if (code == SQLITE_NOTADB || code == SQLITE_CORRUPT ||
      std::string(e.what()).find("unsupported file format") != std::string::npos) {
    return open_error(OpenErrorCode::corrupt, path,
                      std::string("is corrupt (") + e.what() +
                          "); restore it from a backup or move it away (see docs/OPERATIONS.md)");
  }
  if (code == SQLITE_READONLY || code == SQLITE_CANTOPEN || code == SQLITE_PERM || code == SQLITE_AUTH) {
    if (on_read_only_filesystem(path)) {
      return open_error(OpenErrorCode::unwritable, path,
                        std::string("is on a read-only filesystem (") + e.what() +
                            "); a server writes its ledger: put it in a writable place (the read-only commands "
                            "stats, fenced, export and verify can read it where it is)");
    }
    return open_error(OpenErrorCode::unwritable, path,
                      std::string("cannot be written (") + e.what() +
                          "); the ledger and its directory must be writable (WAL needs -wal/-shm files)");
  }
  if (code == SQLITE_BUSY || code == SQLITE_LOCKED) {
    return open_error(OpenErrorCode::busy, path, std::string("stayed locked: ") + e.what());
  }
  return open_error(OpenErrorCode::io, path, e.what());
}

// Refuses files of other applications and files newer than this binary.
std::optional<OpenError> check_identity(SQLite::Database& db, const std::string& path) {
  const int app_id = db.execAndGet("PRAGMA application_id").getInt();
  const int version = db.execAndGet("PRAGMA user_version").getInt();
  const int tables = db.execAndGet("SELECT count(*) FROM sqlite_master").getInt();
  if (const Status damaged = misidentified_ledger(db, path); !damaged.ok()) {
    return open_error(OpenErrorCode::corrupt, path, damaged.message());
  }
  if (app_id != kApplicationId && !(app_id == 0 && version == 0 && tables == 0)) {
    return open_error(OpenErrorCode::not_a_ledger, path,
                      "is an SQLite database of another application (application_id " +
                          std::to_string(app_id) + "); refusing to add tables to it");
  }
  if (app_id == kApplicationId || version > 0) {
    if (const Status wrong = schema_version_problem(db); !wrong.ok()) {
      return open_error(version > 0 ? OpenErrorCode::newer_schema : OpenErrorCode::corrupt, path, wrong.message());
    }
  }
  return std::nullopt;
}

// A file whose header is intact may still have damaged pages, which SQLite
// reports only when a query reaches them: the server would start, look
// healthy and refuse decisions. And an index that no longer matches its
// table (which quick_check passes) makes a lookup of an intent miss its
// row: a done intent would be admitted again. So integrity_check, which
// reads every index entry back. A ledger up to kFullCheckBytes is checked
// whole (about 0.45 s per 100 MB cached, 2 s from disk, here); a larger one,
// whose append-only events and certificates grow without bound, has the
// tables decisions look up and change in place checked, with their indexes.
constexpr int64_t kFullCheckBytes = 64 << 20;

std::optional<OpenError> check_pages(SQLite::Database& db, const std::string& path) {
  const int64_t bytes = db.execAndGet("PRAGMA page_count").getInt64() * db.execAndGet("PRAGMA page_size").getInt64();
  std::vector<std::string> checks;
  if (bytes <= kFullCheckBytes) {
    checks.push_back("PRAGMA integrity_check");
  } else {
    for (const char* table : {"intents", "domains", "counters", "retention", "clears"}) {
      if (db.tableExists(table)) checks.push_back(std::string("PRAGMA integrity_check(") + table + ")");
    }
  }
  for (const std::string& check : checks) {
    const std::string result = db.execAndGet(check).getString();
    if (result != "ok") {
      return open_error(OpenErrorCode::corrupt, path,
                        "is damaged (" + check + ": " + result +
                            "); restore it from a backup or move it away (see docs/OPERATIONS.md)");
    }
  }
  return std::nullopt;
}

// SQLite opens a file the OS write-protects read-only without a word, and
// an empty BEGIN IMMEDIATE/COMMIT then succeeds on it: the server would
// start, look healthy, and refuse every decision.
std::optional<OpenError> check_writable(SQLite::Database& db, const std::string& path) {
  if (sqlite3_db_readonly(db.getHandle(), "main") != 1) return std::nullopt;
  return open_error(OpenErrorCode::unwritable, path,
                    "is write-protected for this user (uid " + std::to_string(::geteuid()) +
                        "), so SQLite opened it read-only; make the file, its -wal/-shm files and its "
                        "directory writable by the user effectfence runs as");
}

// A full disk fails every write, but only at the first decision: refused
// at open instead, before a client is told the server is up. (One that
// fills later stops the writer: stop_if_disk_failed.)
std::optional<OpenError> check_room(const std::string& path) {
  constexpr uint64_t kMinFreeBytes = 1 << 20;  // a few transactions' log, and room to checkpoint
  struct statvfs fs {};
  if (::statvfs(directory_of(path).c_str(), &fs) != 0 || (fs.f_flag & ST_RDONLY)) return std::nullopt;
  const uint64_t blocks = ::geteuid() == 0 ? fs.f_bfree : fs.f_bavail;  // root may use the reserved blocks
  const uint64_t free_bytes = static_cast<uint64_t>(blocks) * fs.f_frsize;
  if (free_bytes >= kMinFreeBytes) return std::nullopt;
  return open_error(OpenErrorCode::unwritable, path,
                    "the filesystem holding it has " + std::to_string(free_bytes) + " bytes free, too little to "
                    "record decisions (at least " + std::to_string(kMinFreeBytes) + "); free space, then start "
                    "again");
}

class SqliteLedger final : public Ledger {
 public:
  // reader: a second connection for read-only work, so reads never queue
  // behind a write that waits for another process's lock (WAL lets them run
  // side by side). nullptr (in-memory ledgers): reads go through the writer.
  SqliteLedger(std::unique_ptr<SQLite::Database> db, std::unique_ptr<SQLite::Database> reader,
               std::string description, bool locked_at_open)
      : db_(std::move(db)),
        txn_(*db_),
        reader_db_(std::move(reader)),
        description_(std::move(description)),
        locked_at_open_(locked_at_open) {
    if (reader_db_) reader_txn_ = std::make_unique<SqliteTxn>(*reader_db_);
    last_data_version_ = db_->execAndGet("PRAGMA data_version").getInt64();
    // Parsed once: these run several times per decision.
    begin_immediate_ = std::make_unique<SQLite::Statement>(*db_, "BEGIN IMMEDIATE");
    begin_deferred_ = std::make_unique<SQLite::Statement>(*db_, "BEGIN");
    commit_ = std::make_unique<SQLite::Statement>(*db_, "COMMIT");
    savepoint_ = std::make_unique<SQLite::Statement>(*db_, "SAVEPOINT job");
    release_ = std::make_unique<SQLite::Statement>(*db_, "RELEASE job");
    data_version_ = std::make_unique<SQLite::Statement>(*db_, "PRAGMA data_version");
    writer_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "ledger-writer");
      writer_loop();
    });
  }

  ~SqliteLedger() override { close(); }

  void close() override {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    cv_.NotifyAll();
    if (writer_.joinable()) writer_.join();  // every queued job is decided and its answer posted
    completions_.stop();                     // and every answer delivered
  }

  std::optional<Refusal> write(const std::function<void(LedgerTxn&)>& fn) override {
    return submit(fn, /*read_only=*/false);
  }
  void write_async(std::function<void(LedgerTxn&)> fn, WriteDone done) override {
    auto job = std::make_unique<Job>();
    job->owned_fn = std::move(fn);
    job->fn = &job->owned_fn;
    job->done = std::move(done);
    if (!enqueue(job.get())) {
      job->done(closing_refusal());
      return;
    }
    job.release();  // finish() deletes it
  }
  std::optional<Refusal> read(const std::function<void(LedgerTxn&)>& fn) override {
    if (!reader_txn_) return submit(fn, /*read_only=*/true);
    MutexLock lock(&read_mu_);
    try {
      // One snapshot for the whole read, even if it runs several queries.
      reader_db_->exec("BEGIN");
      fn(*reader_txn_);
      reader_db_->exec("COMMIT");
      return std::nullopt;
    } catch (const SQLite::Exception& e) {
      end_read_quietly();
      return storage_refusal(e, "read failed");
    } catch (const std::exception& e) {
      end_read_quietly();
      return failure(Cause::storage_failed, "read failed", e.what());
    }
  }
  uint64_t external_changes() const override { return external_changes_.load(); }
  std::string describe() const override { return description_; }
  bool locked_at_open() const override { return locked_at_open_; }
  LedgerMetrics metrics() const override {
    LedgerMetrics m;
    m.transactions = transactions_.load();
    m.decisions = decisions_.load();
    MutexLock lock(&mu_);
    m.queued = queue_.size();
    return m;
  }

 private:
  // A synchronous job lives on its caller's stack and is answered through
  // waiter; an asynchronous one owns its fn, lives on the heap and is
  // answered through done on the completion thread.
  struct Job {
    const std::function<void(LedgerTxn&)>* fn = nullptr;
    bool read_only = false;
    std::promise<std::optional<Refusal>> waiter;
    std::function<void(LedgerTxn&)> owned_fn;
    WriteDone done;
  };

  std::optional<Refusal> submit(const std::function<void(LedgerTxn&)>& fn, bool read_only) {
    Job job;
    job.fn = &fn;
    job.read_only = read_only;
    auto result = job.waiter.get_future();
    if (!enqueue(&job)) return closing_refusal();
    return result.get();
  }

  // False once the ledger is closing: nobody would run the job.
  bool enqueue(Job* job) {
    {
      MutexLock lock(&mu_);
      if (stopping_) return false;
      queue_.push_back(job);
    }
    cv_.NotifyOne();
    return true;
  }

  static Refusal closing_refusal() {
    return Refusal{Reason::ledger_error, Cause::closing};
  }

  // Answers a job. Asynchronous answers are collected and posted as one batch.
  static void finish(Job* job, std::optional<Refusal> result, std::vector<std::function<void()>>& completions) {
    if (!job->done) {
      job->waiter.set_value(std::move(result));
      return;
    }
    completions.push_back([done = std::move(job->done), result = std::move(result)] { done(result); });
    delete job;
  }

  // Puts a rolled-back batch's jobs, but the one at `skip`, back at the head
  // of the queue in their order. Each round answers at least that one job,
  // so a batch that keeps being rolled back still ends.
  void decide_again_first(const std::vector<Job*>& batch, size_t skip) {
    {
      MutexLock lock(&mu_);
      for (size_t j = batch.size(); j-- > 0;) {
        if (j != skip) queue_.push_front(batch[j]);
      }
    }
    cv_.NotifyOne();
  }

  // Group commit: every decision queued while the previous batch was being
  // fsync'd goes into the next transaction together.
  void writer_loop() {
    std::vector<Job*> batch;
    for (;;) {
      {
        MutexLock lock(&mu_);
        while (!stopping_ && queue_.empty()) cv_.Wait(&mu_);
        if (queue_.empty()) return;  // stopping, nothing left
        while (!queue_.empty() && batch.size() < kMaxBatch) {
          batch.push_back(queue_.front());
          queue_.pop_front();
        }
      }
      run_batch(batch);
      batch.clear();
    }
  }

  void run_batch(std::vector<Job*>& batch) {
    if (!failed_) stop_if_file_moved();
    if (failed_) {
      answer_all(batch, *failed_);
      return;
    }
    // However the batch ends (committed, rolled back, lost), no query stays
    // stepped past it: one a job left mid-row would keep the connection's
    // snapshot open past COMMIT, and once another process wrote, every
    // BEGIN IMMEDIATE on it would fail at once.
    struct StatementsReset {
      SqliteTxn& txn;
      ~StatementsReset() { txn.reset_statements(); }
    } statements_reset{txn_};
    bool read_only = true;
    for (Job* j : batch) read_only = read_only && j->read_only;
    std::vector<std::optional<Refusal>> results(batch.size());
    try {
      run(read_only ? *begin_deferred_ : *begin_immediate_);
    } catch (const SQLite::Exception& e) {
      answer_all(batch, stop_if_disk_failed(e, "could not start a transaction"));
      return;
    }
    note_external_changes();
    for (size_t i = 0; i < batch.size(); ++i) {
      results[i] = run_job(*batch[i]);
      if (failed_) {
        txn_.discard_batch();
        if (!transaction_lost()) rollback_quietly();
        answer_all(batch, *failed_);
        return;
      }
      if (transaction_lost()) {
        // SQLite rolled back the whole transaction (a trigger's
        // RAISE(ROLLBACK), an interrupt): the decisions before this one are
        // gone, and each one after it would commit on its own. This one is
        // refused; the others are decided again, first in the next
        // transaction, so one decision SQLite will not take does not refuse
        // every call batched with it. A job writes only through its
        // transaction and into its own outcome, so running it again after a
        // rollback runs it once.
        txn_.discard_batch();
        std::vector<std::function<void()>> completions;
        finish(batch[i], rolled_back(results[i]), completions);
        completions_.post(std::move(completions));
        decide_again_first(batch, i);
        return;
      }
    }
    try {
      txn_.flush_counters();
      run(*commit_);
    } catch (const SQLite::Exception& e) {
      txn_.discard_batch();
      rollback_quietly();
      answer_all(batch, stop_if_disk_failed(e, "could not commit"));
      return;
    }
    transactions_.fetch_add(1);
    decisions_.fetch_add(batch.size());
    std::vector<std::function<void()>> completions;
    for (size_t i = 0; i < batch.size(); ++i) finish(batch[i], std::move(results[i]), completions);
    completions_.post(std::move(completions));
  }

  // Each job is all-or-nothing inside the shared transaction.
  std::optional<Refusal> run_job(Job& job) {
    try {
      run(*savepoint_);
    } catch (const SQLite::Exception& e) {
      return storage_refusal(e, "could not start a savepoint");
    }
    txn_.begin_decision();
    try {
      (*job.fn)(txn_);
      run(*release_);
      txn_.keep_decision();
      return std::nullopt;
    } catch (const SQLite::Exception& e) {
      if (disk_failed(e)) return stop_if_disk_failed(e, "decision failed");  // the caller ends the batch
      return undone(storage_refusal(e, "decision failed"));
    } catch (const std::exception& e) {
      return undone(failure(Cause::storage_failed, "decision failed", e.what()));
    }
  }

  bool transaction_lost() const { return sqlite3_get_autocommit(db_->getHandle()) != 0; }

  static Refusal rolled_back(const std::optional<Refusal>& cause) {
    Refusal refusal{Reason::ledger_error, Cause::rolled_back};
    if (cause && cause->detail.contains("error")) {
      refusal.detail["step"] = cause->detail.value("step", "");
      refusal.detail["error"] = cause->detail["error"];
    }
    return refusal;
  }

  // Undoes a failed decision's writes and returns why it failed. Writes that
  // cannot be undone must not be committed with the batch: an I/O error
  // stops the ledger (failed_); anything else rolls back the whole
  // transaction, which the caller then answers as a whole; a transaction
  // that cannot even be rolled back stops the ledger too.
  Refusal undone(Refusal why) {
    txn_.discard_decision();
    try {
      db_->exec("ROLLBACK TO job");
      db_->exec("RELEASE job");
      return why;
    } catch (const SQLite::Exception& e) {
      if (disk_failed(e)) return stop_if_disk_failed(e, "could not undo a failed decision");
      why.detail["undo_error"] = e.what();
    }
    rollback_quietly();
    if (!transaction_lost()) {
      failed_ = Refusal{Reason::ledger_error, Cause::undo_failed};
      return *failed_;
    }
    return why;
  }

  void end_read_quietly() REQUIRES(read_mu_) {
    reader_txn_->reset_statements();
    try {
      reader_db_->exec("ROLLBACK");
    } catch (const SQLite::Exception&) {
    }
  }

  void rollback_quietly() {
    try {
      db_->exec("ROLLBACK");
    } catch (const SQLite::Exception&) {
    }
  }

  void note_external_changes() {
    // PRAGMA data_version moves iff another connection committed.
    try {
      data_version_->reset();
      data_version_->executeStep();
      const int64_t v = data_version_->getColumn(0).getInt64();
      data_version_->reset();
      if (v != last_data_version_) {
        last_data_version_ = v;
        external_changes_.fetch_add(1);
      }
    } catch (const SQLite::Exception&) {
      external_changes_.fetch_add(1);
    }
  }

  static void run(SQLite::Statement& statement) {
    statement.tryReset();  // a previous failure is not this run's failure
    statement.exec();
  }

  // What failed underneath: a decision or read refused, with the step and
  // SQLite's own words.
  static Refusal failure(Cause cause, const std::string& step, const std::string& error) {
    return Refusal{Reason::ledger_error, cause, {{"step", step}, {"error", error}}};
  }

  static Refusal storage_refusal(const SQLite::Exception& e, const std::string& step) {
    const int code = e.getErrorCode();
    if (code == SQLITE_BUSY || code == SQLITE_LOCKED) {
      return Refusal{Reason::ledger_busy, Cause::locked, {{"engine", "sqlite"}}};
    }
    return failure(Cause::storage_failed, step, e.what());
  }

  // A full disk is one of these too: the log's writes go through
  // wal_write_batching, which reports every failed write as SQLITE_IOERR_WRITE.
  static bool disk_failed(const SQLite::Exception& e) { return (e.getErrorCode() & 0xff) == SQLITE_IOERR; }

  // After a failed write or fsync the kernel may have dropped pages it could
  // not write, and a later sync that succeeds does not bring them back (the
  // log would have a hole, and recovery drops everything after it). SQLite's
  // connection does not recover from a failed write either: every later
  // transaction fails the same way. So one I/O error (a full disk included) stops this
  // process deciding until it is restarted, with a message that says so.
  Refusal stop_if_disk_failed(const SQLite::Exception& e, const std::string& step) {
    if (!disk_failed(e)) return storage_refusal(e, step);
    failed_ = failure(Cause::disk_failed, step, e.what());
    return *failed_;
  }

  // A ledger deleted, or renamed and replaced, while this process has it
  // open: what it writes goes to a file no other process opens, so it
  // fences nothing against them (and a server started now makes a new
  // ledger). SQLite compares the open file with the one at its path.
  void stop_if_file_moved() {
    int moved = 0;
    if (sqlite3_file_control(db_->getHandle(), "main", SQLITE_FCNTL_HAS_MOVED, &moved) != SQLITE_OK || !moved) return;
    failed_ = Refusal{Reason::ledger_error, Cause::file_replaced,
                      {{"path", std::string(sqlite3_db_filename(db_->getHandle(), "main"))}}};
  }

  void answer_all(std::vector<Job*>& batch, const Refusal& refusal) {
    std::vector<std::function<void()>> completions;
    for (Job* j : batch) finish(j, refusal, completions);
    completions_.post(std::move(completions));
  }

  // The writing connection and its statements: once the constructor has
  // returned, the writer thread alone uses them, so they take no lock.
  std::unique_ptr<SQLite::Database> db_;
  SqliteTxn txn_;
  std::unique_ptr<SQLite::Statement> begin_immediate_, begin_deferred_, commit_, savepoint_, release_,
      data_version_;
  // The reading connection: one read at a time on it.
  std::unique_ptr<SQLite::Database> reader_db_ PT_GUARDED_BY(read_mu_);
  std::unique_ptr<SqliteTxn> reader_txn_ PT_GUARDED_BY(read_mu_);  // declared after reader_db_: destroyed first
  Mutex read_mu_;
  std::string description_;
  const bool locked_at_open_;
  int64_t last_data_version_ = 0;  // writer thread only
  std::atomic<uint64_t> external_changes_{0};
  std::atomic<uint64_t> transactions_{0};
  std::atomic<uint64_t> decisions_{0};
  std::optional<Refusal> failed_;  // writer thread only: set by an I/O error (a full disk included), kept

  mutable Mutex mu_;
  CondVar cv_;
  std::deque<Job*> queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  // One thread, so answers go out in commit order. It is destroyed after
  // the writer has stopped (joined in ~SqliteLedger) and answers what the
  // writer's last batches handed it; declared after the queue and its mutex,
  // because an answer may ask for more work, which the closing queue refuses.
  JobThreads completions_{1, "ledger-answers"};
  std::thread writer_;
};

// writer: the connection that decides. Its log frames go to the kernel in
// one write per commit (ledger/wal_write_batching.h), which is safe because
// it runs with synchronous = FULL and never leaves the normal locking mode.
std::unique_ptr<SQLite::Database> connect(const std::string& path, bool memory, int64_t busy_timeout_ms,
                                          bool writer) {
  const int flags = SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  std::optional<BatchedLogVfs> vfs;  // registered only while the connection is opened
  if (writer && !memory) vfs.emplace();
  const std::string file = memory ? ":memory:" : sqlite_file_name(path);
  auto db = std::make_unique<SQLite::Database>(file.c_str(), flags, static_cast<int>(busy_timeout_ms),
                                               vfs ? vfs->name() : nullptr);
  vfs.reset();
  // An answer is given only after its decision is on disk.
  db->exec("PRAGMA synchronous = FULL");
  // Savepoint and statement journals (and sorts) stay in memory, however
  // large: a decision needs no temporary file, so a full or unwritable
  // /var/tmp never refuses one, nor reads as the ledger's disk failing.
  // (SQLite's larger journal chunks come only with spilling to such a file.)
  db->exec("PRAGMA temp_store = MEMORY");
  return db;
}

// WAL mode is a property of the file, written into it: switched on only once
// the file is known to be ours (or new), so a refused file is left as it was.
void use_wal(SQLite::Database& db) {
  const std::string mode = db.execAndGet("PRAGMA journal_mode = WAL").getString();
  if (mode != "wal") throw SQLite::Exception("could not switch to WAL mode (got " + mode + ")", SQLITE_CANTOPEN);
}

// Brings the ledger to the latest schema. A migration that meets what it
// would create is a ledger whose version was set back by hand; one that
// misses what it changes (SQLITE_ERROR: no such trigger, table or column)
// is one whose schema was edited by hand. Both are named, and (the
// migrations being one transaction) left as they were.
std::optional<OpenError> migrate(SQLite::Database& db, const std::string& path) {
  const int version = db.execAndGet("PRAGMA user_version").getInt();
  int failed_version = latest_schema_version();
  try {
    apply_migrations(db, &failed_version);
  } catch (const SQLite::Exception& e) {
    if (std::string(e.what()).find("already exists") == std::string::npos) {
      if (e.getErrorCode() != SQLITE_ERROR || version == 0) throw;
      return open_error(OpenErrorCode::corrupt, path,
                        "is at schema version " + std::to_string(version) +
                            " (PRAGMA user_version), but lacks what the migration to version " +
                            std::to_string(failed_version) + " changes (" + e.what() +
                            "): its schema was edited by hand. Nothing was changed. A verify of it names what "
                            "is missing or changed; recreate it as migrations/ built it at version " +
                            std::to_string(version) + ", or restore the ledger from a backup");
    }
    return open_error(OpenErrorCode::corrupt, path,
                      "says it is at schema version " + std::to_string(version) +
                          " (PRAGMA user_version), but it already holds what a later migration makes (" + e.what() +
                          "): its version was set back by hand. Nothing was changed. Set it back to the version its "
                          "tables are at (see migrations/), or restore the ledger from a backup");
  }
  return std::nullopt;
}

// Writability is proven at open rather than at the first decision. Returns
// false iff another connection holds the write lock beyond a short wait
// (an operator's open transaction, a VACUUM): that proves nothing either
// way, and being busy is no reason to refuse a server its start; its
// decisions wait for the lock like any other write.
bool prove_writable(SQLite::Database& db, int64_t busy_timeout_ms) {
  constexpr int64_t kOpenLockWaitMs = 1000;
  sqlite3_busy_timeout(db.getHandle(), static_cast<int>(std::min(busy_timeout_ms, kOpenLockWaitMs)));
  bool proven = true;
  try {
    db.exec("BEGIN IMMEDIATE");
    db.exec("COMMIT");
  } catch (const SQLite::Exception& e) {
    if (e.getErrorCode() != SQLITE_BUSY) {
      sqlite3_busy_timeout(db.getHandle(), static_cast<int>(busy_timeout_ms));
      throw;
    }
    proven = false;
  }
  sqlite3_busy_timeout(db.getHandle(), static_cast<int>(busy_timeout_ms));
  return proven;
}

}  // namespace

const char* open_error_name(OpenErrorCode code) {
  switch (code) {
    case OpenErrorCode::not_a_ledger: return "not_a_ledger";
    case OpenErrorCode::corrupt: return "corrupt";
    case OpenErrorCode::newer_schema: return "newer_schema";
    case OpenErrorCode::unwritable: return "unwritable";
    case OpenErrorCode::busy: return "busy";
    case OpenErrorCode::io: return "io";
    case OpenErrorCode::unreachable: return "unreachable";
    case OpenErrorCode::auth: return "auth";
    case OpenErrorCode::invalid_settings: return "invalid_settings";
    case OpenErrorCode::linked: return "linked";
  }
  return "io";
}

void configure_sqlite_for_process() {
  sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

std::variant<std::unique_ptr<Ledger>, OpenError> open_sqlite_ledger(const std::string& path,
                                                                    int64_t busy_timeout_ms) {
  const bool memory = path == "memory";
  if (!memory) {
    if (auto error = check_existing_file(path)) return *error;
    if (auto error = check_room(path)) return *error;
  }
  try {
    auto db = connect(path, memory, busy_timeout_ms, /*writer=*/true);
    if (auto error = check_identity(*db, path)) return *error;
    if (auto error = check_pages(*db, path)) return *error;
    if (auto error = check_writable(*db, path)) return *error;
    if (!memory) use_wal(*db);
    if (auto error = migrate(*db, path)) return *error;
    const bool locked = !prove_writable(*db, busy_timeout_ms);
    const std::string description = (memory ? std::string("memory") : "sqlite:" + path) +
                                    " (schema " + std::to_string(latest_schema_version()) + ")";
    auto reader = memory ? nullptr : connect(path, false, busy_timeout_ms, /*writer=*/false);
    return std::unique_ptr<Ledger>(
        std::make_unique<SqliteLedger>(std::move(db), std::move(reader), description, locked));
  } catch (const SQLite::Exception& e) {
    return classify_open_failure(path, e);
  } catch (const std::exception& e) {
    return open_error(OpenErrorCode::io, path, e.what());
  }
}

}  // namespace effectfence
