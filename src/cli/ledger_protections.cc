#include "cli/ledger_protections.h"

#include <map>
#include <utility>

#include <SQLiteCpp/SQLiteCpp.h>

#include "ledger/migrations.h"

namespace effectfence::cli {
namespace {

using Triggers = std::map<std::string, std::pair<std::string, std::string>>;  // name -> (table, sql)

constexpr const char* kTriggersSql = "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'trigger'";

// What the migrations up to version build, in an empty in-memory database.
Triggers built_triggers(int64_t version) {
  SQLite::Database db(":memory:", SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
  for (const Migration& m : embedded_migrations()) {
    if (m.version <= version) db.exec(m.sql);
  }
  Triggers out;
  SQLite::Statement q(db, kTriggersSql);
  while (q.executeStep()) out[q.getColumn(0).getString()] = {q.getColumn(1).getString(), q.getColumn(2).getString()};
  return out;
}

}  // namespace

std::vector<ProtectionGap> protection_gaps(LedgerReader& ledger) {
  if (!ledger.is_sqlite()) return {};
  Triggers held;
  auto rows = ledger.query(kTriggersSql);
  while (rows->next()) held[rows->text(0)] = {rows->text(1), rows->text(2)};
  std::vector<ProtectionGap> gaps;
  for (const auto& [name, built] : built_triggers(ledger.integer("PRAGMA user_version"))) {
    const auto found = held.find(name);
    if (found == held.end()) {
      gaps.push_back({name, built.first, false});
    } else if (found->second != built) {
      gaps.push_back({name, built.first, true});
    }
  }
  return gaps;
}

}  // namespace effectfence::cli
