// What the SQLite and PostgreSQL ledgers say the same way about the intents
// table: its columns, the upsert that writes a whole row, and how stored
// JSON columns are read back. The two dialects differ only in how a
// statement's parameters are written.
#pragma once

#include <string>
#include <vector>

#include "effectfence/certificate.h"
#include "effectfence/json.h"
#include "effectfence/vector_clock.h"

namespace effectfence::intent_sql {

// Every column IntentRow maps, in the order rows are read and bound.
extern const char* const kColumns;

enum class Placeholders {
  question_marks,  // SQLite: ?, ?, ...
  numbered,        // PostgreSQL: $1, $2, ...
};

// INSERT of a whole row that, on an existing intent, overwrites every
// column and bumps version (the compare-and-swap counter). Parameters are
// kColumns in order, with updated_at the decision's time.
std::string upsert(Placeholders style);

// The read_set and known_clock columns as written: canonical JSON.
std::string stored_read_set(const std::vector<ReadSetEntry>& read_set);
std::string stored_clock(const VectorClock& clock);

// A JSON column as stored by the ledger. Throws std::runtime_error naming
// the column if it does not parse (the file was edited by hand).
Json parse_stored(const std::string& text, const char* column);

}  // namespace effectfence::intent_sql
