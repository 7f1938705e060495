// effectfence_layout_bench: the rows a prepare+commit pair writes, in the
// ledger's row layout today (schema 15), in schema 14's and 13's (with and
// without their triggers) and in candidate layouts for ledger v2, group-committed as serve
// commits them, on
// the same disk in the same run. It measures the storage alone: no server, no
// JSON-RPC, no hashing (hashes are made up), so what differs between rows is
// the layout. See docs/BENCHMARK_HISTORY.md, "Row layouts measured".
#include <sqlite3.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "intent_names.h"

namespace effectfence::bench {
namespace {

using Clock = std::chrono::steady_clock;

class Database {
 public:
  explicit Database(const std::string& path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
      fail("open " + path);
    }
  }
  ~Database() {
    for (auto& [sql, s] : statements_) sqlite3_finalize(s);
    sqlite3_close(db_);
  }
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  sqlite3* handle() { return db_; }

  void exec(const std::string& sql) {
    char* error = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
      const std::string what = error ? error : "?";
      sqlite3_free(error);
      throw std::runtime_error("sqlite: " + sql.substr(0, 80) + ": " + what);
    }
  }

  // A statement prepared once and kept, reset and unbound for this use.
  sqlite3_stmt* statement(const char* sql) {
    auto it = statements_.find(sql);
    if (it == statements_.end()) {
      sqlite3_stmt* s = nullptr;
      if (sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr) != SQLITE_OK) fail(sql);
      it = statements_.emplace(sql, s).first;
    }
    sqlite3_reset(it->second);
    sqlite3_clear_bindings(it->second);
    return it->second;
  }

  // Steps a statement to its end; returns the first column of its first row.
  int64_t run(sqlite3_stmt* s) {
    int64_t first = 0;
    bool seen = false;
    for (;;) {
      const int rc = sqlite3_step(s);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) fail(sqlite3_sql(s));
      if (!seen) first = sqlite3_column_int64(s, 0);
      seen = true;
    }
    sqlite3_reset(s);
    return first;
  }

  int64_t integer(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr) != SQLITE_OK) fail(sql);
    int64_t value = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    sqlite3_finalize(s);
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error("sqlite: " + what + ": " + sqlite3_errmsg(db_));
  }

  sqlite3* db_ = nullptr;
  std::map<std::string, sqlite3_stmt*> statements_;
};

void text(sqlite3_stmt* s, int i, const std::string& value) {
  sqlite3_bind_text(s, i, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT);
}
void blob(sqlite3_stmt* s, int i, const std::string& value) {
  sqlite3_bind_blob(s, i, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT);
}
void integer(sqlite3_stmt* s, int i, int64_t value) { sqlite3_bind_int64(s, i, value); }

// 64 hex digits that differ per n, like a SHA-256, and the 32 bytes they spell.
std::string fake_hash(int64_t n, int salt) {
  const auto u = static_cast<unsigned long long>(n) * 2 + static_cast<unsigned long long>(salt) + 1;
  char hex[65];
  std::snprintf(hex, sizeof hex, "%016llx%016llx%016llx%016llx", u * 0x9E3779B97F4A7C15ULL,
                u * 0xC2B2AE3D27D4EB4FULL, u * 0x165667B19E3779F9ULL, u * 0x27D4EB2F165667C5ULL);
  return hex;
}
std::string bytes_of(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// What serve's rules write for one pair, with the sizes a bench ledger shows.
struct Pair {
  std::string intent, domain, agent, args, token, hash, parent, body;
  int64_t n = 0, seq = 0, id = 0;
};

Pair pair_for(int64_t n, size_t slot, IntentNames names) {
  Pair p;
  p.n = n;
  p.intent = intent_name("bench-21822-", n, names);
  p.domain = "bench-account-" + std::to_string(slot);
  p.agent = "bench-agent-" + std::to_string(slot);
  p.args = R"({"amount_cents":1299,"order":)" + std::to_string(n) + "}";
  p.token = fake_hash(n, 1).substr(0, 32);
  p.hash = fake_hash(n, 0);
  return p;
}

std::string body_of(const Pair& p) {
  return R"({"agent":")" + p.agent + R"(","args":)" + p.args + R"(,"domain":")" + p.domain +
         R"(","generation":1,"intent":")" + p.intent + R"(","parent":")" + p.parent +
         R"(","read_set":[],"result":{"charged":true,"receipt":"r-)" + std::to_string(p.n) + R"("},"seq":)" +
         std::to_string(p.seq) + R"(,"tool":"charge_card","vector_clock":{")" + p.agent + R"(":)" +
         std::to_string(p.seq) + "}}";
}

std::string admitted_detail(const Pair& p) {
  return R"({"holder":"vm:21833","token_sha256":")" + fake_hash(p.n, 1) + R"("})";
}

// One row layout: how it is created and what a prepare and a commit write.
struct Layout {
  std::string name;
  std::string what;
  std::function<void(Database&, size_t domains)> create;
  std::function<void(Database&, Pair&)> prepare;
  std::function<void(Database&, Pair&)> commit;
  std::string done_state = "2";  // how a done intent's state is spelled
  int64_t events_per_pair = 2;
  bool counters = true;  // the ledger-wide counts, one row per outcome, per transaction
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The migrations schema 13 was built from, by name.
constexpr const char* kMigrationNames[] = {
    "0001_initial.sql",
    "0002_refuse_replace.sql",
    "0003_checks_in_place.sql",
    "0004_fenced_view_order.sql",
    "0005_ledger_result_ttl.sql",
    "0006_clears_whole.sql",
    "0007_intents_guarded.sql",
    "0008_intents_not_replaced.sql",
    "0009_outcomes_holders_domains_kept.sql",
    "0010_in_flight_fenced_with_event.sql",
    "0011_state_moves.sql",
    "0012_signatures.sql",
    "0013_archive_segments.sql",
    "0014_fewer_pages_per_decision.sql",
};

void add_counter(Database& db, const char* name, int64_t by) {
  sqlite3_stmt* s = db.statement("UPDATE counters SET value = value + ?1 WHERE name = ?2");
  integer(s, 1, by);
  text(s, 2, name);
  db.run(s);
}

void drop_triggers(Database& db) {
  std::vector<std::string> names;
  sqlite3_stmt* s = db.statement("SELECT name FROM sqlite_schema WHERE type = 'trigger'");
  while (sqlite3_step(s) == SQLITE_ROW) names.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)));
  sqlite3_reset(s);
  for (const auto& name : names) db.exec("DROP TRIGGER " + name);
}

// What schema 13, schema 14 and v2-compat write alike: domains by name,
// their seq handed out and their head moved by name.

void add_named_domains(Database& db, size_t domains) {
  for (size_t d = 0; d < domains; ++d) {
    sqlite3_stmt* s = db.statement("INSERT INTO domains (domain, seq, updated_at) VALUES (?1, 0, ?2)");
    text(s, 1, "bench-account-" + std::to_string(d));
    integer(s, 2, now_ms());
    db.run(s);
  }
}

// The domain's next seq, and its head as the pair's parent.
void take_seq_by_name(Database& db, Pair& p, int64_t now) {
  sqlite3_stmt* s = db.statement(
      "UPDATE domains SET seq = seq + 1, updated_at = ?1 WHERE domain = ?2 RETURNING seq - 1, head, head_seq");
  integer(s, 1, now);
  text(s, 2, p.domain);
  if (sqlite3_step(s) != SQLITE_ROW) throw std::runtime_error("no domain row");
  p.seq = sqlite3_column_int64(s, 0) + 1;
  const unsigned char* head = sqlite3_column_text(s, 1);
  p.parent = head ? reinterpret_cast<const char*>(head) : "";
  db.run(s);
}

void move_head_by_name(Database& db, const Pair& p, int64_t now) {
  sqlite3_stmt* s =
      db.statement("UPDATE domains SET clock = ?1, head = ?2, head_seq = ?3, updated_at = ?4 WHERE domain = ?5");
  text(s, 1, "{\"" + p.agent + "\":" + std::to_string(p.seq) + "}");
  text(s, 2, p.hash);
  integer(s, 3, p.seq);
  integer(s, 4, now);
  text(s, 5, p.domain);
  db.run(s);
}

// Schema 14 and v2-compat: a certificate is its hash and body, and events
// carry their intent's row id.
void certify_by_body(Database& db, const Pair& p, int64_t now) {
  sqlite3_stmt* s = db.statement("INSERT INTO certificates (hash, body, committed_at) VALUES (?1, ?2, ?3)");
  text(s, 1, p.hash);
  text(s, 2, p.body);
  integer(s, 3, now);
  db.run(s);
}

void event_with_intent_id(Database& db, const Pair& p, const char* kind, int64_t now, const std::string& detail) {
  sqlite3_stmt* s = db.statement(
      "INSERT INTO events (at, kind, intent, intent_id, domain, seq, generation, actor, detail) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, ?7, ?8)");
  integer(s, 1, now);
  text(s, 2, kind);
  text(s, 3, p.intent);
  integer(s, 4, p.id);
  text(s, 5, p.domain);
  integer(s, 6, p.seq);
  text(s, 7, p.agent);
  text(s, 8, detail);
  db.run(s);
}

// ---- schema 13, as serve wrote it -----------------------------------------------

// The schema migrations 0001 to `last` of dir build, applied in order.
std::string schema_up_to(const std::string& dir, int last) {
  std::string sql;
  for (int version = 1; version <= last; ++version) {
    char prefix[16];
    std::snprintf(prefix, sizeof prefix, "%04d_", version);
    std::string found;
    for (const char* name : kMigrationNames) {
      if (std::string(name).rfind(prefix, 0) == 0) found = name;
    }
    if (found.empty()) throw std::runtime_error(std::string("no migration ") + prefix + "*.sql");
    sql += read_file(dir + "/" + found) + "\n";
  }
  return "PRAGMA journal_mode = WAL;\n" + sql;
}

// Indexes no decision reads: by time (export --since, archive) and by intent
// (verify, archive). Dropped only to measure what they cost a decision.
const char* kUnreadIndexes =
    "DROP INDEX certificates_by_time; DROP INDEX events_by_time; DROP INDEX certificates_by_intent;";

void v13_create(Database& db, size_t domains, const std::string& schema_sql, bool triggers, bool all_indexes = true) {
  db.exec(schema_sql);
  if (!all_indexes) db.exec(kUnreadIndexes);
  if (!triggers) drop_triggers(db);
  add_named_domains(db, domains);
}

void v13_prepare(Database& db, Pair& p) {
  const int64_t now = now_ms();
  sqlite3_stmt* s =
      db.statement("SELECT state, generation, payload_hash, token, cert_hash FROM intents WHERE intent = ?1");
  text(s, 1, p.intent);
  db.run(s);
  take_seq_by_name(db, p, now);
  s = db.statement(
      "INSERT INTO intents (intent, state, domain, tool, args, payload_hash, agent, seq, generation, token, "
      "read_set, parent, known_clock, holder_host, holder_boot, holder_pid, holder_started, lease_expires_at, "
      "admitted_at, updated_at) VALUES (?1, 'in_flight', ?2, 'charge_card', ?3, ?4, ?5, ?6, 1, ?7, '[]', ?8, '{}', "
      "'vm', 'fea7e3e0-5806-45cf-a890-7fe53af05701', 21833, 125764, ?9, ?10, ?10)");
  text(s, 1, p.intent);
  text(s, 2, p.domain);
  text(s, 3, p.args);
  text(s, 4, fake_hash(p.n, 2));
  text(s, 5, p.agent);
  integer(s, 6, p.seq);
  text(s, 7, p.token);
  if (!p.parent.empty()) text(s, 8, p.parent);
  integer(s, 9, now + 60000);
  integer(s, 10, now);
  db.run(s);
  s = db.statement(
      "INSERT INTO events (at, kind, intent, domain, seq, generation, actor, detail) "
      "VALUES (?1, 'admitted', ?2, ?3, ?4, 1, ?5, ?6)");
  integer(s, 1, now);
  text(s, 2, p.intent);
  text(s, 3, p.domain);
  integer(s, 4, p.seq);
  text(s, 5, p.agent);
  text(s, 6, admitted_detail(p));
  db.run(s);
}

void v13_commit(Database& db, Pair& p) {
  const int64_t now = now_ms();
  sqlite3_stmt* s = db.statement("SELECT state, generation, token, args, parent FROM intents WHERE intent = ?1");
  text(s, 1, p.intent);
  db.run(s);
  p.body = body_of(p);
  s = db.statement(
      "INSERT INTO certificates (hash, intent, domain, seq, generation, parent, agent, tool, body, committed_at) "
      "VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, 'charge_card', ?7, ?8)");
  text(s, 1, p.hash);
  text(s, 2, p.intent);
  text(s, 3, p.domain);
  integer(s, 4, p.seq);
  if (!p.parent.empty()) text(s, 5, p.parent);
  text(s, 6, p.agent);
  text(s, 7, p.body);
  integer(s, 8, now);
  db.run(s);
  s = db.statement(
      "UPDATE intents SET state = 'done', cert_hash = ?1, reason = NULL, updated_at = ?2, version = version + 1 "
      "WHERE intent = ?3");
  text(s, 1, p.hash);
  integer(s, 2, now);
  text(s, 3, p.intent);
  db.run(s);
  move_head_by_name(db, p, now);
  s = db.statement(
      "INSERT INTO events (at, kind, intent, domain, seq, generation, actor, detail) "
      "VALUES (?1, 'committed', ?2, ?3, ?4, 1, ?5, ?6)");
  integer(s, 1, now);
  text(s, 2, p.intent);
  text(s, 3, p.domain);
  integer(s, 4, p.seq);
  text(s, 5, p.agent);
  text(s, 6, R"({"certificate":")" + p.hash + R"("})");
  db.run(s);
}

// ---- a candidate for ledger v2 ------------------------------------------------
//
// Every fact once: the certificate is its hash (32 bytes) and its body, which
// holds intent, domain, seq, generation, tool, agent, args, result, parent and
// clock; an intent row keeps what a decision needs (state, generation, payload
// hash, its certificate) and, only while in flight, its attempt (holder,
// token, lease, arguments); an event names its intent, kind and generation,
// and a committed one its certificate by row id. Rows whose key grows with
// time (certificates, events) are rowid tables, so they append; the time and
// (domain, seq) indexes are gone (row order is time order; the domain row
// hands out each seq once). No triggers: what they cost is measured apart.

// The domains (numbered) and counters both candidates share.
const char* kV2Common = R"sql(
PRAGMA journal_mode = WAL;
CREATE TABLE domains (
  id INTEGER PRIMARY KEY, domain TEXT NOT NULL UNIQUE, seq INTEGER NOT NULL DEFAULT 0,
  clock TEXT NOT NULL DEFAULT '{}', head INTEGER, head_seq INTEGER NOT NULL DEFAULT 0, updated_at INTEGER NOT NULL
) STRICT;
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL DEFAULT 0) STRICT, WITHOUT ROWID;
INSERT INTO counters(name) VALUES ('admitted'), ('committed');
)sql";

const char* kV2Schema = R"sql(
CREATE TABLE intents (
  intent TEXT PRIMARY KEY, state INTEGER NOT NULL, domain INTEGER NOT NULL, seq INTEGER NOT NULL,
  generation INTEGER NOT NULL, payload_hash BLOB NOT NULL, certificate INTEGER, updated_at INTEGER NOT NULL,
  attempt TEXT
) STRICT, WITHOUT ROWID;
CREATE INDEX intents_open ON intents(state, domain) WHERE state <> 2;
CREATE TABLE certificates (id INTEGER PRIMARY KEY, hash BLOB NOT NULL UNIQUE, body TEXT NOT NULL) STRICT;
CREATE TABLE events (
  id INTEGER PRIMARY KEY, at INTEGER NOT NULL, kind INTEGER NOT NULL, intent TEXT, generation INTEGER,
  actor TEXT NOT NULL, certificate INTEGER, detail TEXT
) STRICT;
CREATE INDEX events_by_intent ON events(intent);
)sql";

void create_v2(Database& db, const char* schema, size_t domains) {
  db.exec(kV2Common);
  db.exec(schema);
  for (size_t d = 0; d < domains; ++d) {
    sqlite3_stmt* s = db.statement("INSERT INTO domains (id, domain, updated_at) VALUES (?1, ?2, ?3)");
    integer(s, 1, static_cast<int64_t>(d) + 1);
    text(s, 2, "bench-account-" + std::to_string(d));
    integer(s, 3, now_ms());
    db.run(s);
  }
}

void v2_create(Database& db, size_t domains) { create_v2(db, kV2Schema, domains); }

int64_t domain_id(const Pair& p) { return std::stoll(p.domain.substr(p.domain.rfind('-') + 1)) + 1; }

// What both candidates do alike: take the domain's next seq, describe the
// attempt, record the certificate and move the domain's head to it.
void reserve_seq_v2(Database& db, Pair& p, int64_t now) {
  sqlite3_stmt* s =
      db.statement("UPDATE domains SET seq = seq + 1, updated_at = ?1 WHERE id = ?2 RETURNING seq - 1, head");
  integer(s, 1, now);
  integer(s, 2, domain_id(p));
  if (sqlite3_step(s) != SQLITE_ROW) throw std::runtime_error("no domain row");
  p.seq = sqlite3_column_int64(s, 0) + 1;
  db.run(s);
}

std::string attempt_of(const Pair& p, int64_t now) {
  return R"({"agent":")" + p.agent + R"(","args":)" + p.args +
         R"(,"holder":["vm","fea7e3e0-5806-45cf-a890-7fe53af05701",21833,125764],"lease":)" +
         std::to_string(now + 60000) + R"(,"token":")" + p.token + R"(","tool":"charge_card"})";
}

// Returns the certificate's row id.
int64_t certify_v2(Database& db, Pair& p, int64_t now) {
  p.body = body_of(p);
  sqlite3_stmt* s = db.statement("INSERT INTO certificates (hash, body) VALUES (?1, ?2) RETURNING id");
  blob(s, 1, bytes_of(p.hash));
  text(s, 2, p.body);
  const int64_t certificate = db.run(s);
  s = db.statement("UPDATE domains SET clock = ?1, head = ?2, head_seq = ?3, updated_at = ?4 WHERE id = ?5");
  text(s, 1, "{\"" + p.agent + "\":" + std::to_string(p.seq) + "}");
  integer(s, 2, certificate);
  integer(s, 3, p.seq);
  integer(s, 4, now);
  integer(s, 5, domain_id(p));
  db.run(s);
  return certificate;
}

void v2_prepare(Database& db, Pair& p) {
  const int64_t now = now_ms();
  sqlite3_stmt* s = db.statement("SELECT state, generation, payload_hash, certificate FROM intents WHERE intent = ?1");
  text(s, 1, p.intent);
  db.run(s);
  reserve_seq_v2(db, p, now);
  s = db.statement(
      "INSERT INTO intents (intent, state, domain, seq, generation, payload_hash, updated_at, attempt) "
      "VALUES (?1, 0, ?2, ?3, 1, ?4, ?5, ?6)");
  text(s, 1, p.intent);
  integer(s, 2, domain_id(p));
  integer(s, 3, p.seq);
  blob(s, 4, bytes_of(fake_hash(p.n, 2)));
  integer(s, 5, now);
  text(s, 6, attempt_of(p, now));
  db.run(s);
  s = db.statement(
      "INSERT INTO events (at, kind, intent, generation, actor, detail) VALUES (?1, 0, ?2, 1, ?3, ?4)");
  integer(s, 1, now);
  text(s, 2, p.intent);
  text(s, 3, p.agent);
  text(s, 4, admitted_detail(p));
  db.run(s);
}

void v2_commit(Database& db, Pair& p) {
  const int64_t now = now_ms();
  sqlite3_stmt* s = db.statement("SELECT state, generation, attempt FROM intents WHERE intent = ?1");
  text(s, 1, p.intent);
  db.run(s);
  const int64_t certificate = certify_v2(db, p, now);
  s = db.statement(
      "UPDATE intents SET state = 2, certificate = ?1, updated_at = ?2, attempt = NULL WHERE intent = ?3");
  integer(s, 1, certificate);
  integer(s, 2, now);
  text(s, 3, p.intent);
  db.run(s);
  s = db.statement(
      "INSERT INTO events (at, kind, intent, generation, actor, certificate) VALUES (?1, 2, ?2, 1, ?3, ?4)");
  integer(s, 1, now);
  text(s, 2, p.intent);
  text(s, 3, p.agent);
  integer(s, 4, certificate);
  db.run(s);
}

// The same, with intents numbered: an intent's row is found by name through
// one index, and events point at it by number, so their index grows at one
// end whatever the names. What only an attempt in flight needs lives in a
// table of its own, deleted at the outcome, so the intent rows never shrink
// and leave half-empty pages behind. The admitted event keeps 16 hex digits
// of the token's SHA-256 (enough to tell one holder's attempts apart).

const char* kV2bSchema = R"sql(
CREATE TABLE intents (
  id INTEGER PRIMARY KEY, intent TEXT NOT NULL UNIQUE, state INTEGER NOT NULL, domain INTEGER NOT NULL,
  seq INTEGER NOT NULL, generation INTEGER NOT NULL, payload_hash BLOB NOT NULL, certificate INTEGER,
  updated_at INTEGER NOT NULL
) STRICT;
CREATE TABLE attempts (intent INTEGER PRIMARY KEY, attempt TEXT NOT NULL) STRICT;
CREATE INDEX intents_open ON intents(state, domain) WHERE state <> 2;
CREATE TABLE certificates (id INTEGER PRIMARY KEY, hash BLOB NOT NULL UNIQUE, body TEXT NOT NULL) STRICT;
CREATE TABLE events (
  id INTEGER PRIMARY KEY, at INTEGER NOT NULL, kind INTEGER NOT NULL, intent INTEGER, generation INTEGER,
  actor TEXT NOT NULL, certificate INTEGER, detail TEXT
) STRICT;
CREATE INDEX events_by_intent ON events(intent);
)sql";

void v2b_create(Database& db, size_t domains) { create_v2(db, kV2bSchema, domains); }

void v2b_prepare(Database& db, Pair& p) {
  const int64_t now = now_ms();
  sqlite3_stmt* s =
      db.statement("SELECT id, state, generation, payload_hash, certificate FROM intents WHERE intent = ?1");
  text(s, 1, p.intent);
  db.run(s);
  reserve_seq_v2(db, p, now);
  s = db.statement(
      "INSERT INTO intents (intent, state, domain, seq, generation, payload_hash, updated_at) "
      "VALUES (?1, 0, ?2, ?3, 1, ?4, ?5) RETURNING id");
  text(s, 1, p.intent);
  integer(s, 2, domain_id(p));
  integer(s, 3, p.seq);
  blob(s, 4, bytes_of(fake_hash(p.n, 2)));
  integer(s, 5, now);
  p.id = db.run(s);
  s = db.statement("INSERT INTO attempts (intent, attempt) VALUES (?1, ?2)");
  integer(s, 1, p.id);
  text(s, 2, attempt_of(p, now));
  db.run(s);
  s = db.statement(
      "INSERT INTO events (at, kind, intent, generation, actor, detail) VALUES (?1, 0, ?2, 1, ?3, ?4)");
  integer(s, 1, now);
  integer(s, 2, p.id);
  text(s, 3, p.agent);
  text(s, 4, R"({"holder":"vm:21833","token_sha256":")" + fake_hash(p.n, 1).substr(0, 16) + R"("})");
  db.run(s);
}

void v2b_commit(Database& db, Pair& p) {
  const int64_t now = now_ms();
  sqlite3_stmt* s = db.statement(
      "SELECT i.id, i.state, i.generation, a.attempt FROM intents i JOIN attempts a ON a.intent = i.id "
      "WHERE i.intent = ?1");
  text(s, 1, p.intent);
  db.run(s);
  const int64_t certificate = certify_v2(db, p, now);
  s = db.statement("UPDATE intents SET state = 2, certificate = ?1, updated_at = ?2 WHERE id = ?3");
  integer(s, 1, certificate);
  integer(s, 2, now);
  integer(s, 3, p.id);
  db.run(s);
  s = db.statement("DELETE FROM attempts WHERE intent = ?1");
  integer(s, 1, p.id);
  db.run(s);
  // The checks' negative control: one committed event lost.
  static const bool plant_lost_event = std::getenv("EFFECTFENCE_LAYOUT_PLANT_LOST_EVENT") != nullptr;
  if (plant_lost_event && p.n == 0) return;
  s = db.statement(
      "INSERT INTO events (at, kind, intent, generation, actor, certificate) VALUES (?1, 2, ?2, 1, ?3, ?4)");
  integer(s, 1, now);
  integer(s, 2, p.id);
  text(s, 3, p.agent);
  integer(s, 4, certificate);
  db.run(s);
}

// The same structure as v2-id, spelled so today's read queries keep
// working: hashes as hex text, states and kinds as words, a certificate's
// intent, domain, seq, generation, parent, agent and tool as columns
// generated from its body (stored once), events naming their intent by
// name beside its number. An attempt's columns stay columns, in attempts.
// No index by time: row order is commit order.

const char* kV2cSchema = R"sql(
PRAGMA journal_mode = WAL;
CREATE TABLE domains (
  domain TEXT PRIMARY KEY, seq INTEGER NOT NULL DEFAULT 0, clock TEXT NOT NULL DEFAULT '{}', head TEXT,
  head_seq INTEGER NOT NULL DEFAULT 0, updated_at INTEGER NOT NULL
) STRICT;
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL DEFAULT 0) STRICT, WITHOUT ROWID;
INSERT INTO counters(name) VALUES ('admitted'), ('committed');
CREATE TABLE intents (
  id INTEGER PRIMARY KEY AUTOINCREMENT, intent TEXT NOT NULL UNIQUE, state TEXT NOT NULL, domain TEXT NOT NULL,
  seq INTEGER NOT NULL, generation INTEGER NOT NULL, payload_hash TEXT NOT NULL, cert_hash TEXT, reason TEXT,
  updated_at INTEGER NOT NULL, version INTEGER NOT NULL DEFAULT 1
) STRICT;
CREATE INDEX intents_open ON intents(state, domain) WHERE state <> 'done';
CREATE TABLE attempts (
  intent INTEGER PRIMARY KEY, tool TEXT NOT NULL, args TEXT NOT NULL, agent TEXT NOT NULL, token TEXT NOT NULL,
  read_set TEXT NOT NULL DEFAULT '[]', parent TEXT, known_clock TEXT NOT NULL DEFAULT '{}', holder_host TEXT NOT NULL,
  holder_boot TEXT NOT NULL, holder_pid INTEGER NOT NULL, holder_started INTEGER NOT NULL,
  lease_expires_at INTEGER NOT NULL, admitted_at INTEGER NOT NULL
) STRICT;
CREATE TABLE certificates (
  id INTEGER PRIMARY KEY, hash TEXT NOT NULL UNIQUE, body TEXT NOT NULL, committed_at INTEGER NOT NULL,
  intent TEXT GENERATED ALWAYS AS (json_extract(body, '$.intent')) VIRTUAL,
  domain TEXT GENERATED ALWAYS AS (json_extract(body, '$.domain')) VIRTUAL,
  seq INTEGER GENERATED ALWAYS AS (json_extract(body, '$.seq')) VIRTUAL,
  generation INTEGER GENERATED ALWAYS AS (json_extract(body, '$.generation')) VIRTUAL,
  parent TEXT GENERATED ALWAYS AS (nullif(json_extract(body, '$.parent'), '')) VIRTUAL,
  agent TEXT GENERATED ALWAYS AS (json_extract(body, '$.agent')) VIRTUAL,
  tool TEXT GENERATED ALWAYS AS (json_extract(body, '$.tool')) VIRTUAL
) STRICT;
CREATE TABLE events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, kind TEXT NOT NULL, intent TEXT, intent_id INTEGER,
  domain TEXT, seq INTEGER, generation INTEGER, actor TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '{}'
) STRICT;
CREATE INDEX events_by_intent ON events(intent_id);
)sql";

void v2c_create(Database& db, size_t domains) {
  db.exec(kV2cSchema);
  add_named_domains(db, domains);
}

void v2c_prepare(Database& db, Pair& p) {
  const int64_t now = now_ms();
  sqlite3_stmt* s =
      db.statement("SELECT id, state, generation, payload_hash, cert_hash FROM intents WHERE intent = ?1");
  text(s, 1, p.intent);
  db.run(s);
  take_seq_by_name(db, p, now);
  s = db.statement(
      "INSERT INTO intents (intent, state, domain, seq, generation, payload_hash, updated_at) "
      "VALUES (?1, 'in_flight', ?2, ?3, 1, ?4, ?5) RETURNING id");
  text(s, 1, p.intent);
  text(s, 2, p.domain);
  integer(s, 3, p.seq);
  text(s, 4, fake_hash(p.n, 2));
  integer(s, 5, now);
  p.id = db.run(s);
  s = db.statement(
      "INSERT INTO attempts (intent, tool, args, agent, token, parent, holder_host, holder_boot, holder_pid, "
      "holder_started, lease_expires_at, admitted_at) VALUES (?1, 'charge_card', ?2, ?3, ?4, ?5, 'vm', "
      "'fea7e3e0-5806-45cf-a890-7fe53af05701', 21833, 125764, ?6, ?7)");
  integer(s, 1, p.id);
  text(s, 2, p.args);
  text(s, 3, p.agent);
  text(s, 4, p.token);
  if (!p.parent.empty()) text(s, 5, p.parent);
  integer(s, 6, now + 60000);
  integer(s, 7, now);
  db.run(s);
  event_with_intent_id(db, p, "admitted", now, admitted_detail(p));
}

void v2c_commit(Database& db, Pair& p) {
  const int64_t now = now_ms();
  sqlite3_stmt* s = db.statement(
      "SELECT i.id, i.state, i.generation, a.token, a.args, a.parent FROM intents i "
      "JOIN attempts a ON a.intent = i.id WHERE i.intent = ?1");
  text(s, 1, p.intent);
  db.run(s);
  p.body = body_of(p);
  certify_by_body(db, p, now);
  s = db.statement(
      "UPDATE intents SET state = 'done', cert_hash = ?1, reason = NULL, updated_at = ?2, version = version + 1 "
      "WHERE id = ?3");
  text(s, 1, p.hash);
  integer(s, 2, now);
  integer(s, 3, p.id);
  db.run(s);
  s = db.statement("DELETE FROM attempts WHERE intent = ?1");
  integer(s, 1, p.id);
  db.run(s);
  move_head_by_name(db, p, now);
  event_with_intent_id(db, p, "committed", now, R"({"certificate":")" + p.hash + R"("})");
}

// ---- schemas 14 and 15, as serve writes them ------------------------------------
//
// Schema 13's intents as they are (attempt and outcome in one row); a
// certificate's columns generated from its body; events indexed by their
// intent's rowid. Schema 15 leaves done intents out of the index by
// state; the rows and statements are the same.
void v14_create(Database& db, size_t domains, const std::string& schema_sql, bool triggers = true) {
  db.exec(schema_sql);
  if (!triggers) drop_triggers(db);
  add_named_domains(db, domains);
}

void v14_prepare(Database& db, Pair& p) {
  const int64_t now = now_ms();
  sqlite3_stmt* s =
      db.statement("SELECT rowid, state, generation, payload_hash, token, cert_hash FROM intents WHERE intent = ?1");
  text(s, 1, p.intent);
  db.run(s);
  take_seq_by_name(db, p, now);
  s = db.statement(
      "INSERT INTO intents (intent, state, domain, tool, args, payload_hash, agent, seq, generation, token, "
      "read_set, parent, known_clock, holder_host, holder_boot, holder_pid, holder_started, lease_expires_at, "
      "admitted_at, updated_at) VALUES (?1, 'in_flight', ?2, 'charge_card', ?3, ?4, ?5, ?6, 1, ?7, '[]', ?8, '{}', "
      "'vm', 'fea7e3e0-5806-45cf-a890-7fe53af05701', 21833, 125764, ?9, ?10, ?10) RETURNING rowid");
  text(s, 1, p.intent);
  text(s, 2, p.domain);
  text(s, 3, p.args);
  text(s, 4, fake_hash(p.n, 2));
  text(s, 5, p.agent);
  integer(s, 6, p.seq);
  text(s, 7, p.token);
  if (!p.parent.empty()) text(s, 8, p.parent);
  integer(s, 9, now + 60000);
  integer(s, 10, now);
  p.id = db.run(s);
  event_with_intent_id(db, p, "admitted", now, admitted_detail(p));
}

void v14_commit(Database& db, Pair& p) {
  const int64_t now = now_ms();
  sqlite3_stmt* s = db.statement("SELECT state, generation, token, args, parent FROM intents WHERE rowid = ?1");
  integer(s, 1, p.id);
  db.run(s);
  p.body = body_of(p);
  certify_by_body(db, p, now);
  s = db.statement(
      "UPDATE intents SET state = 'done', cert_hash = ?1, reason = NULL, updated_at = ?2, version = version + 1 "
      "WHERE rowid = ?3");
  text(s, 1, p.hash);
  integer(s, 2, now);
  integer(s, 3, p.id);
  db.run(s);
  move_head_by_name(db, p, now);
  event_with_intent_id(db, p, "committed", now, R"({"certificate":")" + p.hash + R"("})");
}

// ---- bare rows ------------------------------------------------------------------
//
// The rows of effectfence_bench's "bare rows" (bench/baselines.cc), the
// least any ledger writes for a pair and what the throughput target is a
// ratio of: the domain's seq, the intent, its certificate; no events, no
// counters, no clock, keys as text.

void bare_create(Database& db, size_t domains) {
  db.exec(
      "PRAGMA journal_mode = WAL;"
      "CREATE TABLE intents (intent TEXT PRIMARY KEY, state TEXT NOT NULL, domain TEXT NOT NULL, "
      "seq INTEGER NOT NULL, token TEXT NOT NULL, payload TEXT NOT NULL, certificate TEXT) WITHOUT ROWID;"
      "CREATE TABLE domains (domain TEXT PRIMARY KEY, seq INTEGER NOT NULL) WITHOUT ROWID;"
      "CREATE TABLE certificates (hash TEXT PRIMARY KEY, intent TEXT NOT NULL, body TEXT NOT NULL) WITHOUT ROWID;");
  for (size_t d = 0; d < domains; ++d) {
    sqlite3_stmt* s = db.statement("INSERT INTO domains (domain, seq) VALUES (?1, 0)");
    text(s, 1, "bench-account-" + std::to_string(d));
    db.run(s);
  }
}

std::string bare_payload(const Pair& p) {
  return R"({"tool":"charge_card","args":{"order":)" + std::to_string(p.n) +
         R"(,"amount_cents":1299},"agent":"bench","state":"in_flight"})";
}

void bare_prepare(Database& db, Pair& p) {
  sqlite3_stmt* s = db.statement("UPDATE domains SET seq = seq + 1 WHERE domain = ?1 RETURNING seq");
  text(s, 1, p.domain);
  p.seq = db.run(s);
  s = db.statement(
      "INSERT INTO intents (intent, state, domain, seq, token, payload) VALUES (?1, 'in_flight', ?2, ?3, ?4, ?5)");
  text(s, 1, p.intent);
  text(s, 2, p.domain);
  integer(s, 3, p.seq);
  text(s, 4, p.token);
  text(s, 5, bare_payload(p));
  db.run(s);
}

void bare_commit(Database& db, Pair& p) {
  sqlite3_stmt* s = db.statement("INSERT INTO certificates (hash, intent, body) VALUES (?1, ?2, ?3)");
  text(s, 1, p.hash);
  text(s, 2, p.intent);
  text(s, 3, bare_payload(p));
  db.run(s);
  s = db.statement("UPDATE intents SET state = 'done', certificate = ?1 WHERE intent = ?2");
  text(s, 1, p.hash);
  text(s, 2, p.intent);
  db.run(s);
}

// ---- the run -----------------------------------------------------------------

// Counts the log frames each commit appends, and checkpoints as SQLite's
// default (1,000 pages) would: installing a hook replaces that default.
struct LogFrames {
  int64_t appended = 0;
  int last = 0;
  static int hook(void* self, sqlite3* db, const char*, int pages) {
    auto* f = static_cast<LogFrames*>(self);
    f->appended += pages >= f->last ? pages - f->last : pages;
    f->last = pages;
    if (pages >= 1000) sqlite3_wal_checkpoint_v2(db, nullptr, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
    return SQLITE_OK;
  }
};

int64_t bytes_written_by_this_process() {
  std::ifstream io("/proc/self/io");
  std::string key;
  int64_t value = 0;
  while (io >> key >> value) {
    if (key == "write_bytes:") return value;
  }
  return 0;
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct Result {
  double pairs_per_second = 0, frames_per_decision = 0, written_per_pair = 0, ledger_per_pair = 0, cpu_us_per_pair = 0;
  std::vector<std::pair<std::string, double>> tables;  // name, bytes per pair
};

Result run(const Layout& layout, const std::string& dir, int64_t pairs, size_t in_flight, IntentNames names) {
  const std::string path = dir + "/layout-" + layout.name + ".sqlite";
  for (const char* suffix : {"", "-wal", "-shm"}) ::unlink((path + suffix).c_str());
  Result r;
  {
    Database db(path);
    layout.create(db, in_flight);
    db.exec("PRAGMA synchronous = FULL");
    LogFrames frames;
    sqlite3_wal_hook(db.handle(), &LogFrames::hook, &frames);
    std::vector<Pair> batch(in_flight);
    const int64_t written_before = bytes_written_by_this_process();
    const double cpu_before = cpu_seconds();
    const auto start = Clock::now();
    for (int64_t next = 0; next < pairs;) {
      db.exec("BEGIN IMMEDIATE");
      for (size_t slot = 0; slot < in_flight; ++slot) {
        batch[slot] = pair_for(next + static_cast<int64_t>(slot), slot, names);
        layout.prepare(db, batch[slot]);
      }
      if (layout.counters) add_counter(db, "admitted", static_cast<int64_t>(in_flight));
      db.exec("COMMIT");
      db.exec("BEGIN IMMEDIATE");
      for (Pair& p : batch) layout.commit(db, p);
      if (layout.counters) add_counter(db, "committed", static_cast<int64_t>(in_flight));
      db.exec("COMMIT");
      next += static_cast<int64_t>(in_flight);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const double n = static_cast<double>(pairs);
    r.pairs_per_second = n / seconds;
    r.cpu_us_per_pair = (cpu_seconds() - cpu_before) * 1e6 / n;
    r.written_per_pair = static_cast<double>(bytes_written_by_this_process() - written_before) / n;
    r.frames_per_decision = static_cast<double>(frames.appended) / (2 * n);
    sqlite3_wal_hook(db.handle(), nullptr, nullptr);
    // Every layout holds the same facts: a done intent, a certificate and
    // two events per pair (bare rows keep no events).
    std::vector<std::pair<std::string, int64_t>> checks = {
        {"SELECT count(*) FROM intents WHERE state = " + layout.done_state, pairs},
        {"SELECT count(*) FROM certificates", pairs}};
    if (layout.events_per_pair > 0) checks.emplace_back("SELECT count(*) FROM events", layout.events_per_pair * pairs);
    for (const auto& [sql, want] : checks) {
      const int64_t got = db.integer(sql);
      if (got != want) {
        throw std::runtime_error(layout.name + ": " + sql + " gave " + std::to_string(got) + ", not " +
                                 std::to_string(want));
      }
    }
    db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
    r.ledger_per_pair =
        static_cast<double>(db.integer("SELECT page_count * page_size FROM pragma_page_count, pragma_page_size")) / n;
    sqlite3_stmt* s = db.statement(
        "SELECT name, sum(pgsize) FROM dbstat GROUP BY name HAVING sum(pgsize) > 4 * 4096 ORDER BY 2 DESC");
    while (sqlite3_step(s) == SQLITE_ROW) {
      r.tables.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)),
                            static_cast<double>(sqlite3_column_int64(s, 1)) / n);
    }
    sqlite3_reset(s);
  }
  for (const char* suffix : {"", "-wal", "-shm"}) ::unlink((path + suffix).c_str());
  return r;
}

int usage(FILE* to) {
  std::fprintf(to,
               "usage: effectfence_layout_bench [--pairs N] [--in-flight K] [--intent-names ordered|scattered|both]\n"
               "                                [--rounds R] [--dir DIR] [--schema FILE] [--migrations DIR]\n"
               "                                [--tables]\n"
               "Writes N prepare+commit pairs (default 20000), K per transaction (default 16), in each row\n"
               "layout: schema 15 as serve writes it (v15, from --schema), without its triggers (v15-bare),\n"
               "schema 14 (v14, from --migrations 0001-0014), schema 13 as serve wrote it (v13,\n"
               "from --migrations 0001-0013), without its triggers (v13-bare), also without three indexes\n"
               "(v13-lean), three ledger v2 candidates (v2-name, v2-id, v2-compat), and effectfence_bench's\n"
               "bare rows (bare), the least a pair writes; alternating R rounds\n"
               "(default 2). Prints pairs/s, log pages per decision, bytes written and ledger bytes per pair,\n"
               "and CPU per pair; --tables adds bytes per pair by table and index.\n");
  return to == stdout ? 0 : 2;
}

}  // namespace
}  // namespace effectfence::bench

int main(int argc, char** argv) {
  using namespace effectfence::bench;
  int64_t pairs = 20000;
  size_t in_flight = 16;
  int rounds = 2;
  bool tables = false;
  std::string dir = "/tmp";
  std::string schema = EFFECTFENCE_SCHEMA_SQL;
  std::string migrations = EFFECTFENCE_MIGRATIONS_DIR;
  std::vector<IntentNames> orders = {IntentNames::ordered, IntentNames::scattered};
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
        return argv[++i];
      };
      if (arg == "--help" || arg == "-h") return usage(stdout);
      if (arg == "--pairs") pairs = std::stoll(value());
      else if (arg == "--in-flight") in_flight = static_cast<size_t>(std::stoul(value()));
      else if (arg == "--rounds") rounds = std::stoi(value());
      else if (arg == "--dir") dir = value();
      else if (arg == "--schema") schema = value();
      else if (arg == "--migrations") migrations = value();
      else if (arg == "--tables") tables = true;
      else if (arg == "--intent-names") {
        const std::string v = value();
        if (v == "ordered") orders = {IntentNames::ordered};
        else if (v == "scattered") orders = {IntentNames::scattered};
        else if (v != "both") throw std::invalid_argument("--intent-names must be ordered, scattered or both");
      } else {
        throw std::invalid_argument("unknown option " + arg);
      }
    }
    if (pairs < 1 || in_flight < 1 || rounds < 1) {
      throw std::invalid_argument("--pairs, --in-flight and --rounds must be >= 1");
    }
    const auto batch = static_cast<int64_t>(in_flight);
    pairs = (pairs + batch - 1) / batch * batch;  // whole transactions
  } catch (const std::exception& e) {
    std::fprintf(stderr, "effectfence_layout_bench: %s\n", e.what());
    return usage(stderr);
  }

  try {
    const std::string schema_sql = read_file(schema);
    const std::string v13_sql = schema_up_to(migrations, 13);
    const std::string v14_sql = schema_up_to(migrations, 14);
    const std::vector<Layout> layouts = {
        {"v15", "schema 15 as serve writes it",
         [&](Database& db, size_t d) { v14_create(db, d, schema_sql); }, v14_prepare, v14_commit, "'done'"},
        {"v15-bare", "schema 15 without its triggers",
         [&](Database& db, size_t d) { v14_create(db, d, schema_sql, false); }, v14_prepare, v14_commit, "'done'"},
        {"v14", "schema 14 as serve wrote it (every state indexed)",
         [&](Database& db, size_t d) { v14_create(db, d, v14_sql); }, v14_prepare, v14_commit, "'done'"},
        {"v13", "schema 13 as serve wrote it",
         [&](Database& db, size_t d) { v13_create(db, d, v13_sql, true); }, v13_prepare, v13_commit, "'done'"},
        {"v13-bare", "schema 13 without its triggers",
         [&](Database& db, size_t d) { v13_create(db, d, v13_sql, false); }, v13_prepare, v13_commit, "'done'"},
        {"v13-lean", "schema 13 without its triggers and three indexes no decision reads",
         [&](Database& db, size_t d) { v13_create(db, d, v13_sql, false, false); }, v13_prepare, v13_commit,
         "'done'"},
        {"v2-name", "a v2 candidate keyed by name", v2_create, v2_prepare, v2_commit},
        {"v2-id", "a v2 candidate with numbered intents", v2b_create, v2b_prepare, v2b_commit},
        {"v2-compat", "v2-id spelled for today's read queries", v2c_create, v2c_prepare, v2c_commit, "'done'"},
        {"bare", "effectfence_bench's bare rows", bare_create, bare_prepare, bare_commit, "'done'", 0, false},
    };
    std::printf("%lld pairs, %zu in flight, %d round(s), in %s\n", static_cast<long long>(pairs), in_flight, rounds,
                dir.c_str());
    for (const Layout& layout : layouts) std::printf("  %-10s %s\n", layout.name.c_str(), layout.what.c_str());
    std::printf("%-10s %-9s %5s %10s %14s %16s %14s %12s\n", "layout", "names", "round", "pairs/s",
                "pages/decision", "written B/pair", "ledger B/pair", "CPU us/pair");
    for (IntentNames names : orders) {
      for (int round = 1; round <= rounds; ++round) {
        for (const Layout& layout : layouts) {
          const Result r = run(layout, dir, pairs, in_flight, names);
          std::printf("%-10s %-9s %5d %10.0f %14.2f %16.0f %14.0f %12.1f\n", layout.name.c_str(),
                      names == IntentNames::ordered ? "ordered" : "scattered", round, r.pairs_per_second,
                      r.frames_per_decision, r.written_per_pair, r.ledger_per_pair, r.cpu_us_per_pair);
          if (tables) {
            for (const auto& [table, bytes] : r.tables) std::printf("    %-34s %8.0f B/pair\n", table.c_str(), bytes);
          }
          std::fflush(stdout);
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "effectfence_layout_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
