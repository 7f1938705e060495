// The triggers that keep an SQLite ledger's audit trail append-only and its
// fence proof against hand edits, compared with the ones effectfence built.
// Someone who drops or rewrites one can then change what it guarded; verify
// says so instead of vouching for a ledger whose protections are gone.
#pragma once

#include <string>
#include <vector>

#include "cli/ledger_reader.h"

namespace effectfence::cli {

struct ProtectionGap {
  std::string trigger;
  std::string table;
  bool changed = false;  // false: missing
};

// The triggers the migrations up to the ledger's schema version create that
// the ledger lacks or holds with other SQL, by name. Triggers added by
// people are not looked at. Empty for a PostgreSQL ledger (not checked).
// Throws on a ledger that cannot be read.
std::vector<ProtectionGap> protection_gaps(LedgerReader& ledger);

}  // namespace effectfence::cli
