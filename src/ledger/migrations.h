// Schema versions: migrations/NNNN_*.sql, compiled in, applied in order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace SQLite { class Database; }

namespace effectfence {

struct Migration {
  int version;       // NNNN of the file name; PRAGMA user_version after it
  const char* name;  // the file name
  const char* sql;
};

// Marks a file as an effectfence ledger ("EFNC"), in PRAGMA application_id.
constexpr int32_t kApplicationId = 0x45464E43;

// When db's application_id is not kApplicationId but it holds a ledger's
// tables (intents, domains, certificates, events, clears): what is wrong
// and how to fix it. A damaged header is not another application's file,
// and restoring is the way out, not another --db. Ok otherwise.
Status misidentified_ledger(SQLite::Database& db, const std::string& path);

// What is wrong with db's schema version for this binary, as a phrase after
// the file's name: a ledger's tables at version 0 or below (set by hand), or
// a version newer than this binary knows. Ok when neither.
Status schema_version_problem(SQLite::Database& db);

// Every migration shipped in this binary, ordered by version (generated).
const std::vector<Migration>& embedded_migrations();
int latest_schema_version();

// Applies every migration newer than the file's user_version, all in one
// BEGIN IMMEDIATE transaction that re-reads user_version first, so
// processes opening one file at once migrate it once.
// REQUIRES: the file is empty or already ours and not newer than this binary.
// Throws SQLite::Exception on failure (the file is left as it was), after
// setting *failed_version (if given) to the version of the migration that failed.
void apply_migrations(SQLite::Database& db, int* failed_version = nullptr);

}  // namespace effectfence
