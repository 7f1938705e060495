#include "ledger/open_ledger.h"

#include "ledger/pg_connection.h"
#include "ledger/postgres_ledger.h"
#include "ledger/sqlite_ledger.h"

namespace effectfence {

bool is_postgres_ledger(const std::string& where) { return pg::is_postgres_url(where); }

std::string printable_ledger(const std::string& where) {
  return is_postgres_ledger(where) || pg::looks_like_conninfo(where) ? pg::scrub_url(where) : where;
}

Status conninfo_refused(const std::string& where) {
  if (!pg::looks_like_conninfo(where)) return Status::Ok();
  return Status::Error(
      "ledger " + printable_ledger(where) +
      ": reads as a PostgreSQL key=value connection string, which would be taken as a file name; give a URL "
      "(postgresql://user@host:5432/dbname, the password in PGPASSWORD or ~/.pgpass) or postgres: with the PG* "
      "variables");
}

std::variant<std::unique_ptr<Ledger>, OpenError> open_ledger(const std::string& where, int64_t busy_timeout_ms) {
  if (Status refused = conninfo_refused(where); !refused.ok()) {
    return OpenError{OpenErrorCode::invalid_settings, refused.message()};
  }
  if (is_postgres_ledger(where)) return open_postgres_ledger(where, busy_timeout_ms);
  return open_sqlite_ledger(where, busy_timeout_ms);
}

}  // namespace effectfence
