#include "ledger/migrations.h"

#include <SQLiteCpp/SQLiteCpp.h>

namespace effectfence {

Status misidentified_ledger(SQLite::Database& db, const std::string& path) {
  const int app_id = db.execAndGet("PRAGMA application_id").getInt();
  if (app_id == kApplicationId) return Status::Ok();
  const int ledger_tables = db.execAndGet(
                                  "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                                  "('intents', 'domains', 'certificates', 'events', 'clears')")
                                .getInt();
  if (ledger_tables < 5) return Status::Ok();
  const std::string id = std::to_string(kApplicationId);
  return Status::Error(
      "holds an effectfence ledger's tables, but its header's application_id is " + std::to_string(app_id) +
      ", not " + id + ": the header is damaged or was changed by hand. Nothing was changed. Restore the ledger "
      "from a backup; or, if nothing else is wrong with it, set it back with sqlite3 " + path +
      " \"PRAGMA application_id = " + id + "\" and verify it before it is used again");
}

Status schema_version_problem(SQLite::Database& db) {
  const int version = db.execAndGet("PRAGMA user_version").getInt();
  if (version <= 0 && db.execAndGet("SELECT count(*) FROM sqlite_master").getInt() > 0) {
    return Status::Error("holds a ledger's tables but its schema version was set to " + std::to_string(version) +
                         " (PRAGMA user_version); set it back to the version its tables are at (see migrations/) "
                         "or restore it from a backup");
  }
  if (version > latest_schema_version()) {
    return Status::Error("has schema version " + std::to_string(version) + " but this effectfence knows " +
                         std::to_string(latest_schema_version()) + "; upgrade effectfence");
  }
  return Status::Ok();
}

int latest_schema_version() {
  const auto& all = embedded_migrations();
  return all.empty() ? 0 : all.back().version;
}

namespace {

// Returns whether it applied any. All in one transaction: a migration that
// fails leaves the file as it was, not at some version in between.
bool apply_each_migration(SQLite::Database& db, int* failed_version) {
  SQLite::Transaction tx(db, SQLite::TransactionBehavior::IMMEDIATE);
  // Another process may have applied them between our check and our lock.
  const int current = db.execAndGet("PRAGMA user_version").getInt();
  bool applied = false;
  for (const Migration& m : embedded_migrations()) {
    if (current >= m.version) continue;
    if (failed_version) *failed_version = m.version;  // until it succeeds
    db.exec(m.sql);
    db.exec("PRAGMA application_id = " + std::to_string(kApplicationId));
    db.exec("PRAGMA user_version = " + std::to_string(m.version));
    applied = true;
  }
  tx.commit();
  return applied;
}

// Runs fn with the connection's temporary sorts on disk, and the pragmas a
// migration may set back to what they were, whether fn succeeds or throws.
// A migration that rebuilds a table of millions of rows builds its indexes
// by sorting: in memory (the ledger's setting) that takes hundreds of MB.
template <typename Fn>
void with_migration_settings(SQLite::Database& db, Fn fn) {
  const int temp_store = db.execAndGet("PRAGMA temp_store").getInt();
  db.exec("PRAGMA temp_store = FILE");
  const auto restore = [&] {
    db.exec("PRAGMA legacy_alter_table = OFF");
    db.exec("PRAGMA temp_store = " + std::to_string(temp_store));
  };
  try {
    fn();
  } catch (...) {
    try {
      restore();
    } catch (const SQLite::Exception&) {
      // The migration's own failure is the one to report.
    }
    throw;
  }
  restore();
}

}  // namespace

void apply_migrations(SQLite::Database& db, int* failed_version) {
  // A ledger already at the latest version needs no write lock: one held by
  // another connection (an operator's open transaction) must not keep a
  // server from starting.
  if (db.execAndGet("PRAGMA user_version").getInt() >= latest_schema_version()) return;
  bool applied = false;
  with_migration_settings(db, [&] { applied = apply_each_migration(db, failed_version); });
  // A migration that rebuilt tables left a log as large as them: copy it
  // into the database and cut it back now, rather than keep it on disk for
  // as long as any process has the ledger open. Best effort: a reader's
  // snapshot may keep part of it until the next checkpoint.
  if (applied) db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
}

}  // namespace effectfence
