// The PostgreSQL ledger: one database shared by replicas on any number of
// hosts. Every decision is one transaction on a pooled connection; lease
// times come from the database server's clock (see postgres_txn.h for how
// decisions on one intent or domain are kept serial).
#pragma once

#include <memory>
#include <string>
#include <variant>

#include "effectfence/ledger.h"
#include "ledger/migrations.h"

namespace effectfence {

// url: postgres://..., postgresql://..., or "postgres:" (the PG* environment
// variables say where). Connects, applies migrations/postgres/ under an
// advisory lock (replicas starting at once migrate once), and refuses a
// database whose schema is newer than this binary or that holds tables of
// another application. Errors name the server with the password scrubbed.
std::variant<std::unique_ptr<Ledger>, OpenError> open_postgres_ledger(const std::string& url,
                                                                      int64_t busy_timeout_ms);

// Every migrations/postgres/NNNN_*.sql shipped in this binary (generated).
const std::vector<Migration>& postgres_migrations();

}  // namespace effectfence
