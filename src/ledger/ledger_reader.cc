#include "ledger/ledger_reader.h"

#include <SQLiteCpp/SQLiteCpp.h>

#include "ledger/read_only.h"
#include "ledger/open_ledger.h"
#include "ledger/pg_connection.h"
#include "ledger/postgres_ledger.h"

namespace effectfence {
namespace {

class SqliteRows final : public ReaderRows {
 public:
  explicit SqliteRows(std::unique_ptr<SQLite::Statement> q) : q_(std::move(q)) {}
  bool next() override { return q_->executeStep(); }
  bool is_null(int col) const override { return q_->getColumn(col).isNull(); }
  std::string text(int col) const override {
    const SQLite::Column c = q_->getColumn(col);
    return c.isNull() ? std::string() : c.getString();
  }
  int64_t integer(int col) const override { return q_->getColumn(col).getInt64(); }

 private:
  std::unique_ptr<SQLite::Statement> q_;
};

class SqliteReader final : public LedgerReader {
 public:
  SqliteReader(std::unique_ptr<SQLite::Database> db, std::string name)
      : db_(std::move(db)), snapshot_(*db_), name_(std::move(name)) {}
  std::unique_ptr<ReaderRows> query(const std::string& sql, const std::vector<SqlValue>& params) override {
    auto q = std::make_unique<SQLite::Statement>(*db_, sql);
    for (size_t i = 0; i < params.size(); ++i) {
      const int index = static_cast<int>(i + 1);
      if (const auto* n = std::get_if<int64_t>(&params[i])) {
        q->bind(index, *n);
      } else {
        q->bind(index, std::get<std::string>(params[i]));
      }
    }
    return std::make_unique<SqliteRows>(std::move(q));
  }
  const std::string& name() const override { return name_; }
  const char* certificate_tiebreak() const override { return "rowid"; }
  bool is_sqlite() const override { return true; }

 private:
  std::unique_ptr<SQLite::Database> db_;
  SQLite::Transaction snapshot_;  // one snapshot for every query; rolled back on close
  std::string name_;
};

// Streams a query through a cursor, a batch of rows at a time.
class PostgresRows final : public ReaderRows {
 public:
  PostgresRows(pg::Connection& db, std::string cursor) : db_(db), cursor_(std::move(cursor)) {}
  ~PostgresRows() override {
    try {
      db_.run("CLOSE " + cursor_);
    } catch (const pg::Error&) {
    }
  }
  bool next() override {
    if (batch_ && ++row_ < batch_->rows()) return true;
    if (batch_ && batch_->rows() < kBatch) return false;
    batch_ = std::make_unique<pg::Result>(db_.exec("FETCH " + std::to_string(kBatch) + " FROM " + cursor_));
    row_ = 0;
    return batch_->rows() > 0;
  }
  bool is_null(int col) const override { return batch_->is_null(row_, col); }
  std::string text(int col) const override { return batch_->text(row_, col); }
  int64_t integer(int col) const override { return batch_->integer(row_, col); }

 private:
  static constexpr int kBatch = 1000;
  pg::Connection& db_;
  std::string cursor_;
  std::unique_ptr<pg::Result> batch_;
  int row_ = 0;
};

// "?1" -> "$1": the one difference between the two engines' parameters.
std::string postgres_parameters(const std::string& sql) {
  std::string out;
  bool quoted = false;
  for (char c : sql) {
    if (c == '\'') quoted = !quoted;
    out += (c == '?' && !quoted) ? '$' : c;
  }
  return out;
}

class PostgresReader final : public LedgerReader {
 public:
  PostgresReader(std::unique_ptr<pg::Connection> db, std::string name) : db_(std::move(db)), name_(std::move(name)) {}
  ~PostgresReader() override {
    try {
      db_->run("ROLLBACK");
    } catch (const pg::Error&) {
    }
  }
  std::unique_ptr<ReaderRows> query(const std::string& sql, const std::vector<SqlValue>& params) override {
    std::vector<pg::Param> values;
    for (const SqlValue& p : params) {
      values.push_back(std::holds_alternative<int64_t>(p) ? pg::param(std::get<int64_t>(p))
                                                          : pg::param(std::get<std::string>(p)));
    }
    const std::string cursor = "effectfence_rows_" + std::to_string(++cursors_);
    db_->exec("DECLARE " + cursor + " NO SCROLL CURSOR FOR " + postgres_parameters(sql), values);
    return std::make_unique<PostgresRows>(*db_, cursor);
  }
  const std::string& name() const override { return name_; }
  const char* certificate_tiebreak() const override { return "hash"; }
  bool is_sqlite() const override { return false; }

 private:
  std::unique_ptr<pg::Connection> db_;
  std::string name_;
  int cursors_ = 0;
};

StatusOr<std::unique_ptr<LedgerReader>> open_postgres_reader(const std::string& url) {
  const std::string name = printable_ledger(url);
  try {
    auto db = pg::Connection::open(url);
    db->run("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
    if (db->exec("SELECT to_regclass('effectfence_schema')").is_null(0, 0)) {
      return Status::Error("no effectfence ledger in " + name +
                           " (no effectfence_schema table; serve or wrap creates it)");
    }
    const int64_t version = db->exec("SELECT coalesce(max(version), 0) FROM effectfence_schema").integer(0, 0);
    const auto& all = postgres_migrations();
    const int latest = all.empty() ? 0 : all.back().version;
    if (version > latest) {
      return Status::Error(name + " has schema version " + std::to_string(version) + " but this effectfence knows " +
               std::to_string(latest) + "; upgrade effectfence");
    }
    return std::unique_ptr<LedgerReader>(std::make_unique<PostgresReader>(std::move(db), name));
  } catch (const pg::Error& e) {
    return Status::Error(name + ": " + pg::scrub_message(e.what()));
  }
}

}  // namespace

int64_t LedgerReader::integer(const std::string& sql, const std::vector<SqlValue>& params) {
  auto rows = query(sql, params);
  return rows->next() ? rows->integer(0) : 0;
}

bool has_signatures_table(LedgerReader& db) {
  return db.integer(db.is_sqlite() ? "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'signatures'"
                                   : "SELECT count(*) FROM information_schema.tables WHERE table_name = 'signatures' "
                                     "AND table_schema = current_schema()") > 0;
}

StatusOr<std::unique_ptr<LedgerReader>> open_ledger_reader(const std::string& where) {
  if (Status refused = conninfo_refused(where); !refused.ok()) return refused;
  if (is_postgres_ledger(where)) return open_postgres_reader(where);
  auto db = open_ledger_read_only(where);
  if (!db.ok()) return db.status();
  return std::unique_ptr<LedgerReader>(std::make_unique<SqliteReader>(std::move(*db), where));
}

}  // namespace effectfence
