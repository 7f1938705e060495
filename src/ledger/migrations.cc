#include "ledger/migrations.h"

#include <SQLiteCpp/SQLiteCpp.h>

namespace effectfence {

int latest_schema_version() {
  const auto& all = embedded_migrations();
  return all.empty() ? 0 : all.back().version;
}

void apply_migrations(SQLite::Database& db) {
  for (const Migration& m : embedded_migrations()) {
    SQLite::Transaction tx(db, SQLite::TransactionBehavior::IMMEDIATE);
    // Another process may have applied it between our check and our lock.
    const int current = db.execAndGet("PRAGMA user_version").getInt();
    if (current >= m.version) continue;
    db.exec(m.sql);
    db.exec("PRAGMA application_id = " + std::to_string(kApplicationId));
    db.exec("PRAGMA user_version = " + std::to_string(m.version));
    tx.commit();
  }
}

}  // namespace effectfence
