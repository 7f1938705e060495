// Which ledger a --db / EFFECTFENCE_LEDGER value names, and opening it.
#pragma once

#include <memory>
#include <string>
#include <variant>

#include "core/status.h"
#include "effectfence/ledger.h"

namespace effectfence {

// postgres://..., postgresql://... or "postgres:" (PG* environment
// variables) open the PostgreSQL ledger; anything else is an SQLite file
// path, or "memory".
std::variant<std::unique_ptr<Ledger>, OpenError> open_ledger(const std::string& where, int64_t busy_timeout_ms);

// True iff where names a PostgreSQL ledger (no file to create or check).
bool is_postgres_ledger(const std::string& where);

// where with any password replaced by ***: safe to print.
std::string printable_ledger(const std::string& where);

// The refusal (naming where, password hidden) when where reads as a
// key=value connection string, which would otherwise be a file name; ok if not.
Status conninfo_refused(const std::string& where);

}  // namespace effectfence
