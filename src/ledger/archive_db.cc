#include "ledger/archive_db.h"

#include <algorithm>
#include <stdexcept>

#include <SQLiteCpp/SQLiteCpp.h>

#include "effectfence/json.h"
#include "ledger/pg_connection.h"

namespace effectfence::archive {
namespace {

class SqliteArchiveDb final : public ArchiveDb {
 public:
  SqliteArchiveDb(const std::string& path, int64_t busy_timeout_ms)
      : db_(path, SQLite::OPEN_READWRITE, static_cast<int>(busy_timeout_ms)) {}

  std::vector<DbRow> query(const std::string& sql, const std::vector<DbParam>& params) override {
    SQLite::Statement q(db_, sql);
    bind(q, params);
    std::vector<DbRow> rows;
    while (q.executeStep()) {
      DbRow row;
      for (int i = 0; i < q.getColumnCount(); ++i) {
        const SQLite::Column c = q.getColumn(i);
        row.push_back(c.isNull() ? DbValue() : DbValue(c.getString()));
      }
      rows.push_back(std::move(row));
    }
    return rows;
  }

  int64_t exec(const std::string& sql, const std::vector<DbParam>& params) override {
    SQLite::Statement q(db_, sql);
    bind(q, params);
    return q.exec();
  }

  void begin_read() override { begin("BEGIN"); }  // deferred: a snapshot, no lock
  void begin_write(std::vector<std::string>) override { begin("BEGIN IMMEDIATE"); }
  void commit() override {
    db_.exec("COMMIT");
    open_ = false;
  }
  void rollback() noexcept override {
    if (!open_) return;
    open_ = false;
    try {
      db_.exec("ROLLBACK");
    } catch (...) {
    }
  }
  bool signatures_first() const override { return false; }
  bool rows_by_intent_id() const override { return true; }
  bool is_retryable(const std::exception&) const override { return false; }  // the busy timeout waited already

 private:
  void begin(const char* sql) {
    db_.exec(sql);
    open_ = true;
  }
  static void bind(SQLite::Statement& q, const std::vector<DbParam>& params) {
    for (size_t i = 0; i < params.size(); ++i) {
      const int index = static_cast<int>(i) + 1;
      if (const auto* n = std::get_if<int64_t>(&params[i])) {
        q.bind(index, *n);
      } else if (const auto* t = std::get_if<std::string>(&params[i])) {
        q.bind(index, *t);
      } else {
        q.bind(index);  // NULL
      }
    }
  }

  SQLite::Database db_;
  bool open_ = false;
};

class PostgresArchiveDb final : public ArchiveDb {
 public:
  explicit PostgresArchiveDb(const std::string& url) : db_(pg::Connection::open(url)) {}

  std::vector<DbRow> query(const std::string& sql, const std::vector<DbParam>& params) override {
    const pg::Result r = db_->exec(postgres_parameters(sql), text_params(params));
    std::vector<DbRow> rows;
    for (int row = 0; row < r.rows(); ++row) {
      DbRow values;
      for (int col = 0; col < r.columns(); ++col) {
        values.push_back(r.is_null(row, col) ? DbValue() : DbValue(r.text(row, col)));
      }
      rows.push_back(std::move(values));
    }
    return rows;
  }

  int64_t exec(const std::string& sql, const std::vector<DbParam>& params) override {
    return db_->exec(postgres_parameters(sql), text_params(params)).affected();
  }

  void begin_read() override {
    db_->run("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
    open_ = true;
  }

  void begin_write(std::vector<std::string> intents) override {
    db_->run("BEGIN ISOLATION LEVEL READ COMMITTED");
    open_ = true;
    // One archive of a ledger records at a time (the next segment number).
    db_->exec("SELECT pg_advisory_xact_lock(hashtextextended('effectfence archive', 0))");
    // The intents' own locks, the ones load_intent takes, in one round
    // trip. Their order cannot deadlock: a decision holds one intent's
    // lock, and archives take theirs one archive at a time (above).
    std::sort(intents.begin(), intents.end());
    intents.erase(std::unique(intents.begin(), intents.end()), intents.end());
    db_->exec("SELECT count(pg_advisory_xact_lock(hashtextextended('intent:' || i, 0))) "
              "FROM json_array_elements_text($1::json) AS i",
              {pg::param(Json(intents).dump())});
  }

  void commit() override {
    open_ = false;
    db_->run("COMMIT");
  }
  void rollback() noexcept override {
    if (!open_) return;
    open_ = false;
    try {
      db_->run("ROLLBACK");
    } catch (...) {
    }
  }
  bool signatures_first() const override { return true; }
  bool rows_by_intent_id() const override { return false; }
  bool is_retryable(const std::exception& e) const override {
    const auto* error = dynamic_cast<const pg::Error*>(&e);
    return error && error->is_retryable();
  }

 private:
  static std::vector<pg::Param> text_params(const std::vector<DbParam>& params) {
    std::vector<pg::Param> out;
    for (const DbParam& p : params) {
      if (const auto* n = std::get_if<int64_t>(&p)) {
        out.push_back(pg::param(*n));
      } else if (const auto* t = std::get_if<std::string>(&p)) {
        out.push_back(pg::param(*t));
      } else {
        out.push_back(std::nullopt);
      }
    }
    return out;
  }

  std::unique_ptr<pg::Connection> db_;
  bool open_ = false;
};

}  // namespace

std::string postgres_parameters(const std::string& sql) {
  std::string out;
  out.reserve(sql.size());
  char quote = 0;
  for (size_t i = 0; i < sql.size(); ++i) {
    const char c = sql[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '?' && i + 1 < sql.size() && sql[i + 1] >= '0' && sql[i + 1] <= '9') {
      out += '$';
      continue;
    }
    out += c;
  }
  return out;
}

std::unique_ptr<ArchiveDb> open_sqlite_archive_db(const std::string& path, int64_t busy_timeout_ms) {
  return std::make_unique<SqliteArchiveDb>(path, busy_timeout_ms);
}

std::unique_ptr<ArchiveDb> open_postgres_archive_db(const std::string& url) {
  return std::make_unique<PostgresArchiveDb>(url);
}

}  // namespace effectfence::archive
