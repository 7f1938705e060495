#include "ledger/ledger_protections.h"

#include <map>
#include <utility>

#include <SQLiteCpp/SQLiteCpp.h>

#include "ledger/migrations.h"

namespace effectfence {
namespace {

struct Built {
  std::string type, table, sql;
  bool operator!=(const Built& o) const { return type != o.type || table != o.table || sql != o.sql; }
};
using Triggers = std::map<std::string, Built>;  // by name, views too

constexpr const char* kTriggersSql =
    "SELECT name, type, tbl_name, sql FROM sqlite_master WHERE type = 'trigger' OR type = 'view'";

// What the migrations up to version build, in an empty in-memory database.
Triggers built_triggers(int64_t version) {
  SQLite::Database db(":memory:", SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
  for (const Migration& m : embedded_migrations()) {
    if (m.version <= version) db.exec(m.sql);
  }
  Triggers out;
  SQLite::Statement q(db, kTriggersSql);
  while (q.executeStep()) {
    out[q.getColumn(0).getString()] = {q.getColumn(1).getString(), q.getColumn(2).getString(),
                                       q.getColumn(3).getString()};
  }
  return out;
}

}  // namespace

std::vector<ProtectionGap> protection_gaps(LedgerReader& ledger) {
  if (!ledger.is_sqlite()) return {};
  Triggers held;
  auto rows = ledger.query(kTriggersSql);
  while (rows->next()) held[rows->text(0)] = {rows->text(1), rows->text(2), rows->text(3)};
  std::vector<ProtectionGap> gaps;
  for (const auto& [name, built] : built_triggers(ledger.integer("PRAGMA user_version"))) {
    const auto found = held.find(name);
    if (found == held.end()) {
      gaps.push_back({built.type, name, built.table, false});
    } else if (found->second != built) {
      gaps.push_back({built.type, name, built.table, true});
    }
  }
  return gaps;
}

}  // namespace effectfence
