// Small RAII wrappers over libpq: one connection, one result, and the
// errors they raise. Nothing here knows about the fence's tables.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

struct pg_conn;
struct pg_result;

namespace effectfence::pg {

// A failed statement or connection. sqlstate is PostgreSQL's five-character
// code ("" when the server never answered).
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, std::string sqlstate)
      : std::runtime_error(message), sqlstate_(std::move(sqlstate)) {}
  const std::string& sqlstate() const { return sqlstate_; }
  // Another transaction won a lock or serialisation race: retrying is safe.
  bool is_retryable() const { return sqlstate_ == "40001" || sqlstate_ == "40P01"; }

 private:
  std::string sqlstate_;
};

// A query's rows. Values are text; NULL reads as "" (is_null tells apart).
class Result {
 public:
  explicit Result(pg_result* r) : r_(r) {}
  int rows() const;
  int columns() const;
  int64_t affected() const;  // rows an INSERT/UPDATE/DELETE touched
  bool is_null(int row, int col) const;
  std::string text(int row, int col) const;
  int64_t integer(int row, int col) const;

 private:
  struct Free { void operator()(pg_result* r) const; };
  std::unique_ptr<pg_result, Free> r_;
};

// One connection. Parameters are passed as text; std::nullopt is NULL.
using Param = std::optional<std::string>;

class Connection {
 public:
  // Throws Error naming the server (password scrubbed) and what to do.
  static std::unique_ptr<Connection> open(const std::string& url);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Prepared on this connection the first time its text is run, then run
  // by name: a decision sends a dozen small statements, and PostgreSQL
  // would parse and plan each of them every time.
  Result exec(const std::string& sql, const std::vector<Param>& params = {});
  // Several statements, no parameters (migrations, BEGIN/COMMIT).
  void run(const std::string& sql);
  // Lost, or holding statements prepared against tables since changed
  // (by a newer effectfence's migration): use a fresh connection.
  bool broken() const;
  // The server process serving this connection: no two open connections
  // to one server share it.
  int backend_pid() const;

 private:
  explicit Connection(pg_conn* c) : c_(c) {}
  // Takes r; throws Error (freeing r) unless it reports success.
  Result checked(pg_result* r);
  // The name sql is prepared under, preparing it first; nullptr once
  // kMaxPrepared texts are (then it runs unprepared).
  const char* prepared(const std::string& sql, int params);
  static constexpr size_t kMaxPrepared = 512;
  pg_conn* c_;
  std::unordered_map<std::string, std::string> prepared_;  // text -> name
  bool stale_ = false;
};

// The code of a connection refused before any server was asked: libpq could
// not read the URL or conninfo.
constexpr const char* kMalformedUrl = "malformed_url";
constexpr const char* kPercentEncodeAdvice =
    "percent-encode reserved characters in the user and password (% as %25, @ as %40, / as %2F, : as %3A), or "
    "give the password in PGPASSWORD or ~/.pgpass";

// One option libpq read from a URL or key=value string.
struct ConninfoOption {
  std::string keyword;
  std::string value;
};
// The options libpq's own parser (PQconninfoParse) reads from text, in
// libpq's order, only those given; nullopt when libpq cannot read it.
std::optional<std::vector<ConninfoOption>> conninfo_options(const std::string& text);

// What scrub_url prints for a string libpq cannot read: none of it.
constexpr const char* kUnparseableConninfo = "<unparseable connection string>";
// A URL or key=value string printed back from what libpq reads in it, the
// password (whatever libpq calls one) as "***"; kUnparseableConninfo when
// libpq cannot read it. Safe for logs, errors and lease files.
std::string scrub_url(const std::string& url);
// Free text (an error message) with password=... and user:...@ hidden, on
// a best-effort reading: for messages, never for a connection string.
std::string scrub_message(const std::string& message);
// True iff ledger reads as a libpq key=value connection string ("host=...
// password=..."), which effectfence does not take: it would be a file name.
bool looks_like_conninfo(const std::string& ledger);
// True iff ledger names a PostgreSQL ledger: postgres://, postgresql://, or
// "postgres:" alone (the PG* environment variables say where).
bool is_postgres_url(const std::string& ledger);
// How long a connection attempt waits for the server, unless the URL
// (connect_timeout=) or PGCONNECT_TIMEOUT says otherwise.
constexpr int kDefaultConnectTimeoutSeconds = 10;
// What libpq should be given for ledger: the URL, or the environment alone
// for "postgres:", with connect_timeout added when nothing sets one.
std::string conninfo_of(const std::string& ledger);

inline Param param(int64_t v) { return std::to_string(v); }
inline Param param(const std::string& v) { return v; }
inline Param text_or_null(const std::string& v) { return v.empty() ? Param() : Param(v); }

}  // namespace effectfence::pg
