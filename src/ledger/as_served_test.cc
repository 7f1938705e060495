// This test binary runs SQLite as the servers do: configured before any
// connection exists (static initialisers run before main, and before
// anything here opens SQLite).
#include "ledger/sqlite_ledger.h"

namespace {
const bool configured = (effectfence::configure_sqlite_for_process(), true);
}  // namespace
