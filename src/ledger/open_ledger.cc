#include "ledger/open_ledger.h"

#include "ledger/pg_connection.h"
#include "ledger/postgres_ledger.h"
#include "ledger/sqlite_ledger.h"

namespace effectfence {

bool is_postgres_ledger(const std::string& where) { return pg::is_postgres_url(where); }

std::string printable_ledger(const std::string& where) {
  return is_postgres_ledger(where) ? pg::scrub_url(where) : where;
}

std::variant<std::unique_ptr<Ledger>, OpenError> open_ledger(const std::string& where, int64_t busy_timeout_ms) {
  if (is_postgres_ledger(where)) return open_postgres_ledger(where, busy_timeout_ms);
  return open_sqlite_ledger(where, busy_timeout_ms);
}

}  // namespace effectfence
