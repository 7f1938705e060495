// What the SQLite and PostgreSQL ledgers say the same way about the intents
// table: its columns, the statements that write a whole row, and how stored
// JSON columns are read back.
#pragma once

#include <string>
#include <vector>

#include "effectfence/certificate.h"
#include "effectfence/json.h"
#include "effectfence/vector_clock.h"

namespace effectfence::intent_sql {

// Every column IntentRow maps, in the order rows are read and bound.
extern const char* const kColumns;

// PostgreSQL: an INSERT of a whole row that, on an existing intent,
// overwrites every column and bumps version (the compare-and-swap counter).
// Parameters $1..$N are kColumns in order, with updated_at the decision's
// time. (A hand upsert there is an UPDATE to the ledger's triggers.)
std::string upsert();

// SQLite: the same whole-row write as two statements, because its ledger
// refuses an INSERT that meets an existing intent (a REPLACE would delete
// the row past the checks on deletes): an UPDATE of every column but the
// key that bumps version, then, if it changed no row, insert_row('?'). Both
// number their parameters ?1..?N in kColumns order, so one binding serves.
std::string update_row();

// Both ledgers: the INSERT of a new intent's row, parameters numbered
// <sigil>1..N in kColumns order ('?' for SQLite, '$' for PostgreSQL).
// It fails on an intent that already has a row, which the decision's
// read of it said had none.
std::string insert_row(char sigil);

// Both ledgers: an outcome written over an attempt, only its own columns:
// (intent, state, cert_hash, reason, updated_at) as <sigil>1..5. The
// triggers that guard an attempt's holder, token and lease do not fire for
// a write that leaves them alone, and no unchanged value is sent again.
std::string outcome_update(char sigil);

// The read_set and known_clock columns as written: canonical JSON.
std::string stored_read_set(const std::vector<ReadSetEntry>& read_set);
std::string stored_clock(const VectorClock& clock);

// A JSON column as stored by the ledger. Throws std::runtime_error naming
// the column if it does not parse (the file was edited by hand).
Json parse_stored(const std::string& text, const char* column);

}  // namespace effectfence::intent_sql
