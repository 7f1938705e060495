// A read-only view of a ledger for auditing (stats, fenced, clear, export,
// verify), whichever engine holds it, so each reader is written once. Everything one reader returns comes from one snapshot.
// SQL is shared by both engines: parameters are ?1, ?2, ...
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/status.h"

namespace effectfence {

using SqlValue = std::variant<int64_t, std::string>;

// Rows of one query, streamed: memory stays flat on any number of rows.
class ReaderRows {
 public:
  virtual ~ReaderRows() = default;
  // Moves to the next row; false when there is none.
  virtual bool next() = 0;
  virtual bool is_null(int col) const = 0;
  virtual std::string text(int col) const = 0;  // NULL reads as ""
  virtual int64_t integer(int col) const = 0;   // NULL reads as 0
};

class LedgerReader {
 public:
  virtual ~LedgerReader() = default;
  virtual std::unique_ptr<ReaderRows> query(const std::string& sql, const std::vector<SqlValue>& params = {}) = 0;
  // The first column of the first row of sql (0 if there is none).
  int64_t integer(const std::string& sql, const std::vector<SqlValue>& params = {});
  // The ledger as it may be printed (a PostgreSQL password is scrubbed).
  virtual const std::string& name() const = 0;
  // A column that orders certificates committed in the same millisecond
  // the same way every time ("rowid" in SQLite, "hash" in PostgreSQL).
  virtual const char* certificate_tiebreak() const = 0;
  // Whether the ledger is an SQLite file (its schema is then in sqlite_master).
  virtual bool is_sqlite() const = 0;
};

// Whether the ledger has the signatures table (schema 12 on SQLite, 10 on
// PostgreSQL): a ledger read in place without being migrated may not.
bool has_signatures_table(LedgerReader& db);

// Opens the ledger --db / EFFECTFENCE_LEDGER names, read-only: an SQLite
// file that must exist and be ours, or a PostgreSQL database that must
// already hold a ledger. Returns the error (naming the ledger, never its
// password) otherwise: NotFound iff there is no file at where at all.
StatusOr<std::unique_ptr<LedgerReader>> open_ledger_reader(const std::string& where);

}  // namespace effectfence
