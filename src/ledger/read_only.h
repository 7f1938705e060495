// Opening a ledger file to audit it: read-only, so auditing can never
// write to it (and never creates a file where none was), after the same
// identity checks a server makes before it trusts the file.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <SQLiteCpp/Database.h>

#include "core/status.h"

namespace effectfence {

// Returns true iff path names an existing regular file.
bool ledger_file_exists(const std::string& path);

// Opens an existing ledger with a read-only connection. Checks that the
// file is an effectfence ledger this binary understands. Returns the error
// ("... is not an effectfence ledger", ...) on failure: NotFound ("no
// ledger at PATH") iff there is no file at path at all.
StatusOr<std::unique_ptr<SQLite::Database>> open_ledger_read_only(const std::string& path);

// A ledger on read-only media is read in place, without the -shm SQLite
// would create; another mount may write it meanwhile. The first such ledger
// that changed since it was opened, if any.
std::optional<std::string> ledger_changed_while_read_in_place();

}  // namespace effectfence
