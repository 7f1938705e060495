// Typed reads of a ledger for the operator commands: what stats and fenced
// report, as values, so no command writes SQL of its own for them. Each
// reads through a LedgerReader (one snapshot, either engine).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "effectfence/types.h"
#include "ledger/ledger_reader.h"

namespace effectfence {

// The ledger-wide counters and what the tables hold.
struct LedgerCounts {
  Counters counters;                       // every process, for the life of the ledger
  std::map<std::string, int64_t> intents;  // state -> how many (every state named, 0 included)
  int64_t certificates = 0;
  int64_t events = 0;
};
LedgerCounts read_counts(LedgerReader& db);

// An intent fenced as failed or unknown: it waits for a person.
struct FencedIntent {
  std::string intent, state, tool, args, domain, agent, reason, holder;
  int64_t since_ms = 0;
  int64_t generation = 0;
};
// The rows of the fenced view, oldest first.
std::vector<FencedIntent> read_fenced(LedgerReader& db);

// An intent in flight that is listed with its holder: past its lease while
// its holder runs on this host (kept, not taken over: the others settle at
// the next call), or held by a process on this host that is gone (its
// effect may or may not have happened; the next server to open the ledger,
// or a clear, fences it unknown, and until then, with no server running,
// this is the only place it shows up as needing a person).
struct HeldIntent {
  std::string intent, tool, args, domain, agent, holder;
  int64_t at_ms = 0;  // when its lease ran out, or when it was admitted
};
std::vector<HeldIntent> read_past_lease(LedgerReader& db, int64_t now_ms);
std::vector<HeldIntent> read_holder_gone(LedgerReader& db);

// The clock leases are decided by: the database server's for PostgreSQL,
// this host's for an SQLite file.
int64_t ledger_now_ms(LedgerReader& db);

}  // namespace effectfence
