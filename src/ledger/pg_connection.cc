#include "ledger/pg_connection.h"

#include <libpq-fe.h>

#include <regex>

namespace effectfence::pg {
namespace {

// libpq's messages end in a newline and may hold several lines ("...\n\tIs
// the server running...?"): one line reads better in a log.
std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  std::string out;
  for (char c : s) {
    if (c == '\n' || c == '\t') {
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

// The server's own sentence ("effectfence: cannot clear: ..."), without
// libpq's "ERROR:" prefix and context lines.
std::string message_of(const PGresult* r, PGconn* c) {
  const char* primary = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : nullptr;
  if (primary && *primary) return primary;
  return trimmed(r && *PQresultErrorMessage(r) ? PQresultErrorMessage(r) : PQerrorMessage(c));
}

std::string sqlstate_of(const PGresult* r) {
  const char* code = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
  return code ? code : "";
}

}  // namespace

void Result::Free::operator()(pg_result* r) const { PQclear(r); }
int Result::rows() const { return PQntuples(r_.get()); }
int64_t Result::affected() const {
  const char* n = PQcmdTuples(r_.get());
  return n && *n ? std::stoll(n) : 0;
}
bool Result::is_null(int row, int col) const { return PQgetisnull(r_.get(), row, col) != 0; }
std::string Result::text(int row, int col) const {
  return std::string(PQgetvalue(r_.get(), row, col), static_cast<size_t>(PQgetlength(r_.get(), row, col)));
}
int64_t Result::integer(int row, int col) const {
  if (is_null(row, col)) return 0;
  return std::stoll(text(row, col));
}

std::unique_ptr<Connection> Connection::open(const std::string& url) {
  PGconn* c = PQconnectdb(conninfo_of(url).c_str());
  if (!c) throw Error("out of memory while connecting", "");
  if (PQstatus(c) != CONNECTION_OK) {
    std::string message = trimmed(PQerrorMessage(c));
    PQfinish(c);
    // libpq names the server and the user, never the password; the URL may
    // still appear inside the message, so it is scrubbed anyway.
    const auto at = message.find(url);
    if (!url.empty() && at != std::string::npos) message.replace(at, url.size(), scrub_url(url));
    // 28P01/28000: the server answered and refused us.
    const bool refused = message.find("authentication failed") != std::string::npos ||
                         message.find("no password supplied") != std::string::npos ||
                         message.find("no pg_hba.conf entry") != std::string::npos ||
                         message.find("does not exist") != std::string::npos;
    throw Error(message, refused ? "28000" : "08001");
  }
  // Notices (e.g. "relation already exists, skipping") are not errors.
  PQsetNoticeProcessor(c, [](void*, const char*) {}, nullptr);
  return std::unique_ptr<Connection>(new Connection(c));
}

Connection::~Connection() { PQfinish(c_); }

bool Connection::broken() const { return PQstatus(c_) != CONNECTION_OK; }

Result Connection::exec(const std::string& sql, const std::vector<Param>& params) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const Param& p : params) {
    // libpq reads a value up to its first NUL: the rest would be dropped
    // without a word, and two different names stored as one.
    if (p && p->find('\0') != std::string::npos) {
      throw Error("a text value holds a NUL character (U+0000), which PostgreSQL cannot store; refused rather "
                  "than cut short", "22021");
    }
    values.push_back(p ? p->c_str() : nullptr);
  }
  return checked(PQexecParams(c_, sql.c_str(), static_cast<int>(params.size()), nullptr, values.data(), nullptr,
                              nullptr, 0));
}

void Connection::run(const std::string& sql) { checked(PQexec(c_, sql.c_str())); }

Result Connection::checked(PGresult* r) {
  const ExecStatusType status = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    const std::string message = message_of(r, c_);
    const std::string code = sqlstate_of(r);
    PQclear(r);
    throw Error(message, code);
  }
  return Result(r);
}

std::string scrub_url(const std::string& url) {
  // scheme://user:password@host -> scheme://user:***@host. Like libpq, the
  // password runs to the '@' (it may hold '?' or '#').
  static const std::regex userinfo(R"(^([a-z]+://[^:/@]*):[^@/]*@)");
  // password=... in a query string or a key=value conninfo
  static const std::regex keyword(R"((password=)[^&\s]*)", std::regex::icase);
  std::string out = std::regex_replace(url, userinfo, "$1:***@");
  return std::regex_replace(out, keyword, "$1***");
}

bool is_postgres_url(const std::string& ledger) {
  return ledger == "postgres:" || ledger.rfind("postgres://", 0) == 0 || ledger.rfind("postgresql://", 0) == 0;
}

std::string conninfo_of(const std::string& ledger) { return ledger == "postgres:" ? std::string() : ledger; }

}  // namespace effectfence::pg
