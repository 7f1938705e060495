#include "ledger/pg_connection.h"

#include <libpq-fe.h>

#include <cctype>
#include <cstring>
#include <cstdlib>
#include <initializer_list>
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

// Where a URL's parts start, read as libpq reads them: the user and
// password run from "://" to the first '@' or '/'; the host and path, from
// there to the first '?'.
struct UrlParts {
  size_t credentials = std::string::npos;  // after "://"; npos: not a URL
  size_t host = std::string::npos;         // after the credentials' '@' (or = credentials without one)
  size_t query = std::string::npos;        // the first '?' past host, npos if none
};

UrlParts parts_of(const std::string& url) {
  UrlParts parts;
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return parts;
  parts.credentials = scheme_end + 3;
  const size_t credentials_end = url.find_first_of("@/", parts.credentials);
  parts.host = credentials_end != std::string::npos && url[credentials_end] == '@' ? credentials_end + 1
                                                                                   : parts.credentials;
  parts.query = url.find('?', parts.host);
  return parts;
}

// An '@' past the credentials, before the query: a password holding an
// unencoded '@' or '/'. libpq would read a piece of it as the host or the
// database, and quote that piece in its errors.
bool has_stray_at(const std::string& url) {
  const UrlParts parts = parts_of(url);
  if (parts.host == std::string::npos) return false;
  const size_t at = url.find('@', parts.host);
  return at != std::string::npos && at < parts.query;
}

// Where a password is spelled out: scheme://user:PASSWORD@host (like libpq,
// the password runs to the '@'; it may hold '?' or '#'), and password=PASSWORD
// in a query string or a key=value conninfo. Group 1 is what precedes the
// password, group 2 the password.
const std::regex& userinfo_password() {
  static const std::regex pattern(R"(^([a-z]+://[^:/@]*):([^@/]*)@)");
  return pattern;
}
const std::regex& keyword_password() {
  static const std::regex pattern(R"((password\s*=\s*)('[^']*'|[^&\s]*))", std::regex::icase);
  return pattern;
}

// The password a URL or conninfo spells out, as written ("" if none).
std::string password_in(const std::string& url) {
  std::smatch m;
  if (std::regex_search(url, m, userinfo_password()) || std::regex_search(url, m, keyword_password())) return m[2];
  return "";
}

// %XX decoded where XX is hex; anything else kept as it is.
std::string percent_decoded(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

void replace_all(std::string& text, const std::string& what, const std::string& with) {
  if (what.empty()) return;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + with.size())) {
    text.replace(at, what.size(), with);
  }
}

bool contains_any(const std::string& text, std::initializer_list<const char*> parts) {
  for (const char* part : parts) {
    if (text.find(part) != std::string::npos) return true;
  }
  return false;
}

// What a failed connection's message says went wrong, as the SQLSTATE the
// server would have sent, or kMalformedUrl when libpq could not read the URL.
std::string connect_failure_code(const std::string& message) {
  if (contains_any(message, {"invalid percent-encoded token", "invalid URI", "invalid connection option",
                             "unexpected spaces found", "invalid port number", "invalid integer value",
                             "missing \"=\" after", "unterminated quoted string"}) ||
      (message.rfind("invalid ", 0) == 0 && message.find(" value") != std::string::npos)) {  // sslmode=bogus
    return kMalformedUrl;
  }
  if (message.find("database \"") != std::string::npos && message.find("does not exist") != std::string::npos) {
    return "3D000";
  }
  // 28P01/28000: the server answered and refused us.
  if (contains_any(message, {"authentication failed", "no password supplied", "no pg_hba.conf entry",
                             "does not exist"})) {
    return "28000";
  }
  return "08001";
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

// %XX for every byte of value but letters, digits, -._~ and the extras.
std::string percent_encoded(const std::string& value, const char* extras) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || std::strchr("-._~", c) || (c != '\0' && std::strchr(extras, c))) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

const std::string* option_value(const std::vector<ConninfoOption>& options, const char* keyword) {
  for (const ConninfoOption& o : options) {
    if (o.keyword == keyword) return &o.value;
  }
  return nullptr;
}

bool all_of_chars(const std::string& s, const char* allowed_punctuation) {
  for (unsigned char c : s) {
    if (!std::isalnum(c) && (c == '\0' || !std::strchr(allowed_punctuation, c))) return false;
  }
  return !s.empty();
}

// scheme://user:***@host:port/dbname?keyword=value..., from libpq's reading.
std::string printed_uri(const std::string& scheme, const std::vector<ConninfoOption>& options) {
  std::string out = scheme;
  const std::string* user = option_value(options, "user");
  const bool password = option_value(options, "password") != nullptr;
  if (user || password) out += (user ? percent_encoded(*user, "*") : "") + (password ? ":***" : "") + "@";
  const std::string* host = option_value(options, "host");
  const std::string* port = option_value(options, "port");
  const bool host_in_authority = host && all_of_chars(*host, "-._");
  const bool port_in_authority = host_in_authority && port && all_of_chars(*port, "");
  if (host_in_authority) out += *host;
  if (port_in_authority) out += ":" + *port;
  const std::string* dbname = option_value(options, "dbname");
  const bool dbname_in_path = dbname && !dbname->empty();
  out += "/";
  if (dbname_in_path) out += percent_encoded(*dbname, "");
  char separator = '?';
  for (const ConninfoOption& o : options) {
    if (o.keyword == "user" || o.keyword == "password") continue;
    if ((o.keyword == "host" && host_in_authority) || (o.keyword == "port" && port_in_authority) ||
        (o.keyword == "dbname" && dbname_in_path)) {
      continue;
    }
    out += separator + o.keyword + "=" + percent_encoded(o.value, ":@/,");
    separator = '&';
  }
  return out;
}

// keyword=value ..., quoted where libpq needs quotes, password=***.
std::string printed_keywords(const std::vector<ConninfoOption>& options) {
  std::string out;
  for (const ConninfoOption& o : options) {
    if (!out.empty()) out += ' ';
    out += o.keyword + "=";
    if (o.keyword == "password") {
      out += "***";
      continue;
    }
    const bool quote = o.value.empty() || o.value.find_first_of(" \t\n\r\f\v'\\") != std::string::npos;
    if (quote) out += '\'';
    for (char c : o.value) {
      if (c == '\'' || c == '\\') out += '\\';
      out += c;
    }
    if (quote) out += '\'';
  }
  return out;
}

}  // namespace

void Result::Free::operator()(pg_result* r) const { PQclear(r); }
int Result::rows() const { return PQntuples(r_.get()); }
int Result::columns() const { return PQnfields(r_.get()); }
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
  if (has_stray_at(url)) {
    throw Error(std::string("an '@' follows the user and password: ") + kPercentEncodeAdvice, kMalformedUrl);
  }
  PGconn* c = PQconnectdb(conninfo_of(url).c_str());
  if (!c) throw Error("out of memory while connecting", "");
  if (PQstatus(c) != CONNECTION_OK) {
    std::string message = trimmed(PQerrorMessage(c));
    PQfinish(c);
    // libpq means to name the server and the user, never the password; but
    // the URL, or a piece of it it could not read, may appear in the message.
    if (!url.empty()) replace_all(message, url, scrub_url(url));
    const std::string password = password_in(url);
    replace_all(message, password, "***");
    replace_all(message, percent_decoded(password), "***");
    if (const auto options = conninfo_options(url)) {
      if (const std::string* read = option_value(*options, "password")) replace_all(message, *read, "***");
    }
    const std::string code = connect_failure_code(message);
    if (code == kMalformedUrl) message += std::string("; ") + kPercentEncodeAdvice;
    if (code == "3D000") message += "; create it (createdb) or name an existing database";
    throw Error(message, code);
  }
  // Notices (e.g. "relation already exists, skipping") are not errors.
  PQsetNoticeProcessor(c, [](void*, const char*) {}, nullptr);
  return std::unique_ptr<Connection>(new Connection(c));
}

Connection::~Connection() { PQfinish(c_); }

bool Connection::broken() const { return stale_ || PQstatus(c_) != CONNECTION_OK; }

int Connection::backend_pid() const { return PQbackendPID(c_); }

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
  const int n = static_cast<int>(params.size());
  if (const char* name = prepared(sql, n)) return checked(PQexecPrepared(c_, name, n, values.data(), nullptr, nullptr, 0));
  return checked(PQexecParams(c_, sql.c_str(), n, nullptr, values.data(), nullptr, nullptr, 0));
}

const char* Connection::prepared(const std::string& sql, int params) {
  if (const auto found = prepared_.find(sql); found != prepared_.end()) return found->second.c_str();
  if (prepared_.size() >= kMaxPrepared) return nullptr;
  std::string name = "effectfence_" + std::to_string(prepared_.size() + 1);
  checked(PQprepare(c_, name.c_str(), sql.c_str(), params, nullptr));
  return prepared_.emplace(sql, std::move(name)).first->second.c_str();
}

void Connection::run(const std::string& sql) { checked(PQexec(c_, sql.c_str())); }

Result Connection::checked(PGresult* r) {
  const ExecStatusType status = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    const std::string message = message_of(r, c_);
    const std::string code = sqlstate_of(r);
    PQclear(r);
    // A statement prepared before a migration changed its tables' columns.
    if (code == "0A000" && message.find("cached plan must not change result type") != std::string::npos) stale_ = true;
    throw Error(message, code);
  }
  return Result(r);
}

std::optional<std::vector<ConninfoOption>> conninfo_options(const std::string& text) {
  char* error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(text.c_str(), &error);
  if (error) PQfreemem(error);
  if (!parsed) return std::nullopt;
  std::vector<ConninfoOption> options;
  for (const PQconninfoOption* o = parsed; o->keyword; ++o) {
    if (o->val) options.push_back(ConninfoOption{o->keyword, o->val});
  }
  PQconninfoFree(parsed);
  return options;
}

std::string scrub_url(const std::string& url) {
  if (url == "postgres:") return url;  // the PG* variables say where
  if (has_stray_at(url)) {
    // Which '@' ends the password is anyone's guess: hide up to the last.
    const UrlParts parts = parts_of(url);
    const size_t last_at = url.rfind('@', parts.query);  // npos: the whole URL
    return scrub_url(url.substr(0, parts.credentials) + "***" + url.substr(last_at));
  }
  // Printed from what libpq reads, never edited from the text: spaces
  // around '=', quotes, '&' in a keyword value, a percent-encoded keyword
  // all mean to libpq what they mean here.
  const std::optional<std::vector<ConninfoOption>> options = conninfo_options(url);
  if (!options) return kUnparseableConninfo;
  const size_t scheme_end = url.find("://");
  const bool uri = scheme_end != std::string::npos &&
                   (url.compare(0, scheme_end, "postgresql") == 0 || url.compare(0, scheme_end, "postgres") == 0);
  return uri ? printed_uri(url.substr(0, scheme_end + 3), *options) : printed_keywords(*options);
}

std::string scrub_message(const std::string& message) {
  return std::regex_replace(std::regex_replace(message, userinfo_password(), "$1:***@"), keyword_password(), "$1***");
}

bool looks_like_conninfo(const std::string& ledger) {
  // A keyword first is enough, readable or not (then nothing of it is
  // printed); else whatever libpq reads as a key=value string with a value.
  static const std::regex keyword_first(
      R"(^\s*(host|hostaddr|port|dbname|user|password|passfile|service|sslmode)\s*=)", std::regex::icase);
  if (std::regex_search(ledger, keyword_first)) return true;
  if (ledger.find('=') == std::string::npos || ledger.find("://") != std::string::npos) return false;
  const auto options = conninfo_options(ledger);
  return options && !options->empty();
}

bool is_postgres_url(const std::string& ledger) {
  return ledger == "postgres:" || ledger.rfind("postgres://", 0) == 0 || ledger.rfind("postgresql://", 0) == 0;
}

std::string conninfo_of(const std::string& ledger) {
  const std::string conninfo = ledger == "postgres:" ? std::string() : ledger;
  // Without a bound, a server that accepts and never answers holds a
  // connection attempt (and the process starting on it) for ever.
  // A service file may set one, and a URL parameter would override it.
  if (std::getenv("PGCONNECT_TIMEOUT") || std::getenv("PGSERVICE") ||
      conninfo.find("connect_timeout=") != std::string::npos || conninfo.find("service=") != std::string::npos) {
    return conninfo;
  }
  const std::string bound = "connect_timeout=" + std::to_string(kDefaultConnectTimeoutSeconds);
  if (conninfo.empty()) return bound;
  // The query starts past the user and password (a password may hold a '?').
  return conninfo + (parts_of(conninfo).query == std::string::npos ? "?" : "&") + bound;
}

}  // namespace effectfence::pg
