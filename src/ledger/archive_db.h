// The few things an archive asks of a ledger's database, so one archive
// (ledger/archive.cc) runs on SQLite and on PostgreSQL alike. SQL is shared
// by both engines, with parameters written ?1, ?2, ...; values come back as
// text (NULL as nullopt), as both engines print them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace effectfence::archive {

using DbValue = std::optional<std::string>;
using DbRow = std::vector<DbValue>;
using DbParam = std::variant<std::monostate, int64_t, std::string>;  // monostate: NULL

class ArchiveDb {
 public:
  virtual ~ArchiveDb() = default;
  // Every row of sql (the archive reads small batches).
  virtual std::vector<DbRow> query(const std::string& sql, const std::vector<DbParam>& params = {}) = 0;
  // Runs a statement; returns the rows it changed.
  virtual int64_t exec(const std::string& sql, const std::vector<DbParam>& params = {}) = 0;
  // A consistent snapshot that blocks no writer.
  virtual void begin_read() = 0;
  // A write transaction in which intents cannot change: SQLite's write
  // lock; on PostgreSQL the advisory locks every decision about one of
  // them takes first (ledger/postgres_txn.h), in a fixed order.
  virtual void begin_write(std::vector<std::string> intents) = 0;
  virtual void commit() = 0;
  // Never throws; a no-op outside a transaction.
  virtual void rollback() noexcept = 0;
  // Whether the ledger's triggers let a signature go only before its
  // certificate (PostgreSQL: the foreign key from signatures) or only
  // after it (SQLite).
  virtual bool signatures_first() const = 0;
  // Whether an intent's events are found by the intent_id they carry and
  // its certificates through its committed events (SQLite, schema 14: no
  // index by intent name), or by name (PostgreSQL).
  virtual bool rows_by_intent_id() const = 0;
  // Whether a failed transaction lost a race (deadlock, serialisation) and
  // may simply be tried again.
  virtual bool is_retryable(const std::exception& e) const = 0;
};

// REQUIRES: path is an existing SQLite ledger file.
std::unique_ptr<ArchiveDb> open_sqlite_archive_db(const std::string& path, int64_t busy_timeout_ms);
// REQUIRES: url names a PostgreSQL ledger (ledger/open_ledger.h).
std::unique_ptr<ArchiveDb> open_postgres_archive_db(const std::string& url);

// "?1" as "$1", for PostgreSQL. Outside quoted text only.
std::string postgres_parameters(const std::string& sql);

}  // namespace effectfence::archive
