#include "ledger/postgres_ledger.h"

#include <atomic>
#include <vector>

#include "core/mutex.h"
#include "ledger/job_threads.h"
#include "ledger/pg_connection.h"
#include "ledger/postgres_txn.h"

namespace effectfence {
namespace {

// Connections one process keeps open at most; more callers wait their turn.
constexpr size_t kPoolSize = 8;
// Deadlocks and serialisation failures are retried: the decision re-runs
// from scratch on the committed state, so retrying never decides twice.
constexpr int kRetries = 5;
// PostgreSQL's own codes for a connection lost before COMMIT was sent, and
// while it was (transaction_resolution_unknown).
constexpr const char* kLostBeforeCommit = "08006";
constexpr const char* kResolutionUnknown = "08007";
// Key of the transaction-scoped lock migrations run under ("EFNC").
constexpr int64_t kMigrationLock = 0x45464E43;

OpenError open_error(OpenErrorCode code, const std::string& url, const std::string& what) {
  return OpenError{code, "ledger " + pg::scrub_url(url) + ": " + what};
}

OpenError classify_connect_failure(const std::string& url, const pg::Error& e) {
  if (e.sqlstate() == pg::kMalformedUrl) {
    return open_error(OpenErrorCode::invalid_settings, url,
                      std::string("is not a connection URL libpq can read: ") + e.what());
  }
  if (e.sqlstate() == "3D000") {
    return open_error(OpenErrorCode::invalid_settings, url,
                      std::string("the PostgreSQL server has no such database: ") + e.what());
  }
  if (e.sqlstate() == "28000") {
    return open_error(OpenErrorCode::auth, url,
                      std::string("the PostgreSQL server refused the connection (") + e.what() +
                          "); check the user, the password (PGPASSWORD or ~/.pgpass) and pg_hba.conf");
  }
  return open_error(OpenErrorCode::unreachable, url,
                    std::string("cannot reach the PostgreSQL server (") + e.what() +
                        "); check that it is running and that host, port or socket directory are right");
}

// Runs the migrations this database lacks, all in one transaction that
// holds the migration lock, so concurrent replicas apply each exactly once.
std::optional<OpenError> migrate(pg::Connection& db, const std::string& url) {
  db.run("BEGIN");
  try {
    db.exec("SELECT pg_advisory_xact_lock($1)", {pg::param(kMigrationLock)});
    const bool tracked = !db.exec("SELECT to_regclass('effectfence_schema')").is_null(0, 0);
    if (!tracked && !db.exec("SELECT to_regclass('intents')").is_null(0, 0)) {
      db.run("ROLLBACK");
      return open_error(OpenErrorCode::not_a_ledger, url,
                        "already holds an 'intents' table that effectfence did not create; refusing to add "
                        "tables to it. Use another database or schema");
    }
    db.run(
        "CREATE TABLE IF NOT EXISTS effectfence_schema ("
        " version integer PRIMARY KEY, name text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())");
    const int64_t current = db.exec("SELECT coalesce(max(version), 0) FROM effectfence_schema").integer(0, 0);
    const auto& all = postgres_migrations();
    const int latest = all.empty() ? 0 : all.back().version;
    if (current > latest) {
      db.run("ROLLBACK");
      return open_error(OpenErrorCode::newer_schema, url,
                        "has schema version " + std::to_string(current) + " but this effectfence knows " +
                            std::to_string(latest) + "; upgrade effectfence");
    }
    for (const Migration& m : all) {
      if (m.version <= current) continue;
      try {
        db.run(m.sql);
      } catch (const pg::Error& e) {
        // 42P01, 42703, 42704, 42883: a table, column, trigger or function
        // this migration changes is missing: the schema was edited by hand.
        const std::string& state = e.sqlstate();
        if (current == 0 || (state != "42P01" && state != "42703" && state != "42704" && state != "42883")) throw;
        db.run("ROLLBACK");
        return open_error(OpenErrorCode::corrupt, url,
                          "is at schema version " + std::to_string(current) +
                              " (effectfence_schema), but lacks what migration " + m.name + " changes (" +
                              e.what() + "): its schema was edited by hand. Nothing was changed. Recreate it as "
                              "migrations/postgres/ built it at version " + std::to_string(current) +
                              ", or restore the ledger from a backup");
      }
      db.exec("INSERT INTO effectfence_schema (version, name) VALUES ($1, $2)",
              {pg::param(int64_t{m.version}), pg::param(std::string(m.name))});
    }
    db.run("COMMIT");
    return std::nullopt;
  } catch (...) {
    try {
      db.run("ROLLBACK");
    } catch (const pg::Error&) {
    }
    throw;
  }
}

class PostgresLedger final : public Ledger {
 public:
  PostgresLedger(std::string url, int64_t busy_timeout_ms, std::unique_ptr<pg::Connection> first)
      : url_(std::move(url)), busy_timeout_ms_(busy_timeout_ms) {
    const auto& all = postgres_migrations();
    description_ = "postgres:" + pg::scrub_url(url_) + " (schema " +
                   std::to_string(all.empty() ? 0 : all.back().version) + ")";
    configure(*first);
    idle_.push_back(std::move(first));
    open_ = 1;
  }

  std::optional<Refusal> write(const std::function<void(LedgerTxn&)>& fn) override {
    return transact(fn, /*read_only=*/false);
  }
  // Each decision is its own transaction on a pooled connection: one thread
  // per connection keeps the pool busy while the caller (serve's reader)
  // goes on reading.
  void write_async(std::function<void(LedgerTxn&)> fn, WriteDone done) override {
    // Shared, so a post refused while closing still has done to answer.
    auto job = std::make_shared<std::pair<std::function<void(LedgerTxn&)>, WriteDone>>(std::move(fn),
                                                                                       std::move(done));
    if (!writers_.post([this, job] { job->second(write(job->first)); })) {
      job->second(Refusal{Reason::ledger_error, Cause::closing, {{"ledger", description_}}});
    }
  }
  void close() override { writers_.stop(); }
  std::optional<Refusal> read(const std::function<void(LedgerTxn&)>& fn) override {
    return transact(fn, /*read_only=*/true);
  }
  // Nothing here tells this process that another one changed the ledger:
  // the fast path answers nothing from memory over it (sees_external_changes).
  uint64_t external_changes() const override { return 0; }
  bool sees_external_changes() const override { return false; }
  std::string describe() const override { return description_; }
  LedgerMetrics metrics() const override {
    LedgerMetrics m;
    m.transactions = transactions_.load();
    m.decisions = decisions_.load();
    MutexLock lock(&mu_);
    m.queued = waiting_;
    return m;
  }

 private:
  // A pooled connection, handed back (or dropped if broken) on scope exit.
  class Lease {
   public:
    Lease(PostgresLedger& owner, std::unique_ptr<pg::Connection> c) : owner_(owner), c_(std::move(c)) {}
    ~Lease() { owner_.give_back(std::move(c_)); }
    pg::Connection& operator*() { return *c_; }

   private:
    PostgresLedger& owner_;
    std::unique_ptr<pg::Connection> c_;
  };

  void configure(pg::Connection& c) {
    // A decision waiting longer than this for another's row lock gives up:
    // ledger_busy, never an admission.
    c.run("SET lock_timeout = " + std::to_string(busy_timeout_ms_));
    c.run("SET synchronous_commit = on");
  }

  std::unique_ptr<pg::Connection> take() {
    {
      MutexLock lock(&mu_);
      ++waiting_;
      while (idle_.empty() && open_ >= kPoolSize) cv_.Wait(&mu_);
      --waiting_;
      if (!idle_.empty()) {
        auto c = std::move(idle_.back());
        idle_.pop_back();
        return c;
      }
      ++open_;
    }
    try {
      auto c = pg::Connection::open(url_);
      configure(*c);
      return c;
    } catch (...) {
      give_back(nullptr);
      throw;
    }
  }

  // Closes the idle connections: after one was found cut, the rest were
  // most likely cut with it, and each would cost a retry to find out.
  void drop_idle() {
    {
      MutexLock lock(&mu_);
      open_ -= idle_.size();
      idle_.clear();
    }
    cv_.NotifyAll();
  }

  void give_back(std::unique_ptr<pg::Connection> c) {
    {
      MutexLock lock(&mu_);
      if (c && !c->broken()) {
        idle_.push_back(std::move(c));
      } else {
        --open_;
      }
    }
    cv_.NotifyOne();
  }

  std::optional<Refusal> transact(const std::function<void(LedgerTxn&)>& fn, bool read_only) {
    for (int attempt = 1;; ++attempt) {
      try {
        Lease conn(*this, take());
        auto outcome = run_once(*conn, fn, read_only);
        if (!outcome) return std::nullopt;
        const bool cut = outcome->sqlstate() == kLostBeforeCommit;
        if (cut) drop_idle();  // a restart ended them all
        if (attempt < kRetries && (outcome->is_retryable() || cut)) continue;
        return refusal_for(*outcome, read_only);
      } catch (const pg::Error& e) {
        return refusal_for(e, read_only);  // could not connect
      }
    }
  }

  // Returns the error that undid the transaction, or nullopt once committed.
  // A connection lost before COMMIT was sent undid it for sure (the server
  // rolls back what a vanished client left open: a restart, an idle cut), so
  // it is retried on a fresh connection; one lost while committing may or
  // may not have committed, and is reported as such, never retried.
  std::optional<pg::Error> run_once(pg::Connection& db, const std::function<void(LedgerTxn&)>& fn,
                                    bool read_only) {
    bool open = false;
    bool committing = false;
    try {
      // Pinned, not left to the server's default: the advisory and row locks
      // make decisions serial only if each statement sees what committed
      // before it (READ COMMITTED).
      db.run(read_only ? "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" : "BEGIN ISOLATION LEVEL READ COMMITTED");
      open = true;
      PostgresTxn txn(db, read_only);
      fn(txn);
      if (!read_only) txn.flush_counters();
      committing = true;
      db.run("COMMIT");
      transactions_.fetch_add(1);
      decisions_.fetch_add(1);
      return std::nullopt;
    } catch (const pg::Error& e) {
      if (db.broken()) return pg::Error(e.what(), committing ? kResolutionUnknown : kLostBeforeCommit);
      if (open) rollback_quietly(db);
      return e;
    } catch (const std::exception& e) {
      if (open) rollback_quietly(db);
      return pg::Error(std::string("decision failed: ") + e.what(), "XX000");
    }
  }

  static void rollback_quietly(pg::Connection& db) {
    try {
      db.run("ROLLBACK");
    } catch (const pg::Error&) {
    }
  }

  Refusal refusal_for(const pg::Error& e, bool read_only) const {
    const std::string step = read_only ? "read failed" : "decision failed";
    // 55P03: lock_timeout; 40001/40P01: still losing races after retries.
    if (e.sqlstate() == "55P03" || e.is_retryable()) {
      return Refusal{Reason::ledger_busy, Cause::locked, {{"engine", "postgresql"}}};
    }
    if (e.sqlstate() == kResolutionUnknown) {
      return Refusal{Reason::ledger_error, Cause::outcome_unknown,
                     {{"ledger", description_}, {"error", pg::scrub_message(e.what())}}};
    }
    return Refusal{Reason::ledger_error, Cause::storage_failed,
                   {{"ledger", description_}, {"step", step}, {"error", pg::scrub_message(e.what())}}};
  }

  std::string url_;
  int64_t busy_timeout_ms_;
  std::string description_;
  std::atomic<uint64_t> transactions_{0};
  std::atomic<uint64_t> decisions_{0};

  mutable Mutex mu_;
  CondVar cv_;
  std::vector<std::unique_ptr<pg::Connection>> idle_ GUARDED_BY(mu_);
  size_t open_ GUARDED_BY(mu_) = 0;
  size_t waiting_ GUARDED_BY(mu_) = 0;
  JobThreads writers_{kPoolSize, "ledger-pg-write"};  // last: joined first, while the pool still exists
};

}  // namespace

std::variant<std::unique_ptr<Ledger>, OpenError> open_postgres_ledger(const std::string& url,
                                                                      int64_t busy_timeout_ms) {
  std::unique_ptr<pg::Connection> first;
  try {
    first = pg::Connection::open(url);
  } catch (const pg::Error& e) {
    return classify_connect_failure(url, e);
  }
  try {
    if (auto error = migrate(*first, url)) return *error;
    return std::unique_ptr<Ledger>(std::make_unique<PostgresLedger>(url, busy_timeout_ms, std::move(first)));
  } catch (const pg::Error& e) {
    const OpenErrorCode code = e.sqlstate() == "42501" ? OpenErrorCode::unwritable : OpenErrorCode::io;
    return open_error(code, url, std::string("could not prepare the ledger schema: ") + e.what());
  }
}

}  // namespace effectfence
