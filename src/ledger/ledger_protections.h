// The triggers that keep an SQLite ledger's audit trail append-only and its
// fence proof against hand edits, and the views the runbook and `fenced`
// read, compared with the ones effectfence built. Someone who drops or
// rewrites a trigger can then change what it guarded, and a view rewritten
// hides rows from who reads it; verify says so instead of vouching for them.
#pragma once

#include <string>
#include <vector>

#include "ledger/ledger_reader.h"

namespace effectfence {

struct ProtectionGap {
  std::string type;     // "trigger" or "view"
  std::string trigger;  // its name
  std::string table;    // a trigger's table; a view's own name
  bool changed = false;  // false: missing
};

// The triggers and views the migrations up to the ledger's schema version
// create that the ledger lacks or holds with other SQL, by name. Ones added
// by people are not looked at. Empty for a PostgreSQL ledger (not checked).
// Throws on a ledger that cannot be read.
std::vector<ProtectionGap> protection_gaps(LedgerReader& ledger);

}  // namespace effectfence
