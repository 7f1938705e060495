#include "ledger/sqlite_txn.h"

#include <stdexcept>

#include "ledger/intent_sql.h"
#include "ledger/signature_sql.h"

namespace effectfence {
namespace {

std::string text_or_empty(const SQLite::Column& c) { return c.isNull() ? std::string() : c.getString(); }

IntentRow intent_from(SQLite::Statement& q) {
  IntentRow r;
  r.intent = q.getColumn(0).getString();
  r.state = state_from_name(q.getColumn(1).getString()).value_or(IntentState::none);
  r.domain = q.getColumn(2).getString();
  r.tool = q.getColumn(3).getString();
  r.args = q.getColumn(4).getString();
  r.payload_hash = q.getColumn(5).getString();
  r.agent = q.getColumn(6).getString();
  r.seq = q.getColumn(7).getInt64();
  r.generation = q.getColumn(8).getInt64();
  r.token = q.getColumn(9).getString();
  r.read_set = read_set_from_json(intent_sql::parse_stored(q.getColumn(10).getString(), "read_set"))
                   .value_or(std::vector<ReadSetEntry>{});
  r.parent = text_or_empty(q.getColumn(11));
  r.known_clock = VectorClock::from_json(intent_sql::parse_stored(q.getColumn(12).getString(), "clock"))
                      .value_or(VectorClock{});
  r.holder.host = q.getColumn(13).getString();
  r.holder.boot = q.getColumn(14).getString();
  r.holder.pid = q.getColumn(15).getInt64();
  r.holder.started = q.getColumn(16).getInt64();
  r.lease_expires_at = q.getColumn(17).getInt64();
  r.admitted_at = q.getColumn(18).getInt64();
  r.updated_at = q.getColumn(19).getInt64();
  r.cert_hash = text_or_empty(q.getColumn(20));
  r.reason = text_or_empty(q.getColumn(21));
  return r;
}

// Text is bound without a copy (SQLITE_STATIC): every caller executes the
// statement while the bound strings live, and statement() clears the
// bindings before the next use. SQLite's copy was a malloc, a memcpy and a
// free per column on the writer's path.
void bind_text(SQLite::Statement& q, int index, const std::string& value) { q.bindNoCopy(index, value); }

void bind_text_or_null(SQLite::Statement& q, int index, const std::string& value) {
  if (value.empty()) {
    q.bind(index);
  } else {
    bind_text(q, index, value);
  }
}

// The JSON columns of a row, as stored: made once per write, bound to
// both of save_intent's statements.
struct StoredJson {
  std::string read_set;
  std::string known_clock;
};

// Parameters ?1..?22 in intent_sql::kColumns order.
void bind_intent(SQLite::Statement& q, const IntentRow& r, const StoredJson& json, int64_t now) {
  bind_text(q, 1, r.intent);
  q.bindNoCopy(2, state_name(r.state));
  bind_text(q, 3, r.domain);
  bind_text(q, 4, r.tool);
  bind_text(q, 5, r.args);
  bind_text(q, 6, r.payload_hash);
  bind_text(q, 7, r.agent);
  q.bind(8, static_cast<int64_t>(r.seq));
  q.bind(9, static_cast<int64_t>(r.generation));
  bind_text(q, 10, r.token);
  bind_text(q, 11, json.read_set);
  bind_text_or_null(q, 12, r.parent);
  bind_text(q, 13, json.known_clock);
  bind_text(q, 14, r.holder.host);
  bind_text(q, 15, r.holder.boot);
  q.bind(16, static_cast<int64_t>(r.holder.pid));
  q.bind(17, static_cast<int64_t>(r.holder.started));
  q.bind(18, static_cast<int64_t>(r.lease_expires_at));
  q.bind(19, static_cast<int64_t>(r.admitted_at));
  q.bind(20, static_cast<int64_t>(now));
  bind_text_or_null(q, 21, r.cert_hash);
  bind_text_or_null(q, 22, r.reason);
}

}  // namespace

SQLite::Statement& SqliteTxn::statement(const char* sql) {
  auto& slot = statements_[sql];
  if (!slot) {
    slot = std::make_unique<SQLite::Statement>(db_, sql);
  } else {
    slot->tryReset();  // an earlier refused statement must not fail this one
    slot->clearBindings();
  }
  return *slot;
}

void SqliteTxn::reset_statements() {
  for (auto& [sql, q] : statements_) q->tryReset();
}

std::optional<IntentRow> SqliteTxn::load_intent(const std::string& intent) {
  static const std::string sql = std::string("SELECT ") + intent_sql::kColumns + " FROM intents WHERE intent = ?";
  auto& q = statement(sql.c_str());
  bind_text(q, 1, intent);
  if (!q.executeStep()) return std::nullopt;
  auto row = intent_from(q);
  q.reset();
  return row;
}

void SqliteTxn::save_intent(const IntentRow& r, int64_t now) {
  static const std::string update_sql = intent_sql::update_row();
  static const std::string insert_sql = intent_sql::insert_row('?');
  const StoredJson json{intent_sql::stored_read_set(r.read_set), intent_sql::stored_clock(r.known_clock)};
  auto& update = statement(update_sql.c_str());
  bind_intent(update, r, json, now);
  if (update.exec() == 1) return;
  auto& insert = statement(insert_sql.c_str());
  bind_intent(insert, r, json, now);
  insert.exec();
}

void SqliteTxn::insert_intent(const IntentRow& r, int64_t now) {
  static const std::string insert_sql = intent_sql::insert_row('?');
  const StoredJson json{intent_sql::stored_read_set(r.read_set), intent_sql::stored_clock(r.known_clock)};
  auto& insert = statement(insert_sql.c_str());
  bind_intent(insert, r, json, now);
  insert.exec();
}

void SqliteTxn::save_outcome(const IntentRow& r, int64_t now) {
  static const std::string sql = intent_sql::outcome_update('?');  // lives on: the cache key
  auto& update = statement(sql.c_str());
  bind_text(update, 1, r.intent);
  update.bindNoCopy(2, state_name(r.state));
  bind_text_or_null(update, 3, r.cert_hash);
  bind_text_or_null(update, 4, r.reason);
  update.bind(5, static_cast<int64_t>(now));
  if (update.exec() != 1) throw std::runtime_error("intent " + r.intent + " vanished before its outcome was written");
}

std::vector<IntentRow> SqliteTxn::in_flight_on_host(const std::string& host) {
  static const std::string sql = std::string("SELECT ") + intent_sql::kColumns +
                                 " FROM intents WHERE state = 'in_flight' AND holder_host = ?";
  auto& q = statement(sql.c_str());
  bind_text(q, 1, host);
  std::vector<IntentRow> rows;
  while (q.executeStep()) rows.push_back(intent_from(q));
  return rows;
}

int64_t SqliteTxn::count_live_in_flight(const std::string& domain, int64_t now) {
  auto& q = statement(
      "SELECT count(*) FROM intents WHERE state = 'in_flight' AND domain = ? AND lease_expires_at > ?");
  bind_text(q, 1, domain);
  q.bind(2, static_cast<int64_t>(now));
  q.executeStep();
  const int64_t n = q.getColumn(0).getInt64();
  q.reset();
  return n;
}

int64_t SqliteTxn::count_fenced(const std::string& domain) {
  auto& q = statement("SELECT count(*) FROM intents WHERE (state = 'failed' OR state = 'unknown') AND domain = ?");
  bind_text(q, 1, domain);
  q.executeStep();
  const int64_t n = q.getColumn(0).getInt64();
  q.reset();
  return n;
}

std::optional<std::string> SqliteTxn::admission_token_hash(const std::string& intent, const std::string& domain,
                                                           int64_t seq, int64_t generation) {
  auto& q = statement(
      "SELECT CASE WHEN json_valid(detail) THEN coalesce(json_extract(detail, '$.token_sha256'), '') ELSE '' END "
      "FROM events WHERE intent_id IN "
      "(SELECT rowid FROM intents WHERE intent = ?1 UNION ALL SELECT intent_id FROM swept_intents WHERE intent = ?1) "
      "AND intent = ?1 AND (kind = 'admitted' OR kind = 'takeover') AND domain = ?2 AND seq = ?3 AND generation = ?4");
  bind_text(q, 1, intent);
  bind_text(q, 2, domain);
  q.bind(3, static_cast<int64_t>(seq));
  q.bind(4, static_cast<int64_t>(generation));
  std::optional<std::string> hash;
  if (q.executeStep()) hash = q.getColumn(0).getString();
  q.reset();
  return hash;
}

std::vector<IntentRow> SqliteTxn::expired_in_flight(const std::string& domain, int64_t now) {
  static const std::string sql = std::string("SELECT ") + intent_sql::kColumns +
                                 " FROM intents WHERE state = 'in_flight' AND domain = ? AND lease_expires_at <= ?";
  auto& q = statement(sql.c_str());
  bind_text(q, 1, domain);
  q.bind(2, static_cast<int64_t>(now));
  std::vector<IntentRow> rows;
  while (q.executeStep()) rows.push_back(intent_from(q));
  return rows;
}

int64_t SqliteTxn::highest_reserved_seq(const std::string& domain) {
  // An evicted domain must not hand out its old numbers again.
  auto& q = statement("SELECT coalesce(max(seq), 0) FROM events WHERE domain = ? AND kind = 'domain_evicted'");
  bind_text(q, 1, domain);
  q.executeStep();
  const int64_t n = q.getColumn(0).getInt64();
  q.reset();
  return n;
}

DomainRow SqliteTxn::load_domain(const std::string& domain) {
  auto& q = statement("SELECT seq, clock, head, head_seq FROM domains WHERE domain = ?");
  bind_text(q, 1, domain);
  DomainRow d;
  d.domain = domain;
  if (q.executeStep()) {
    d.exists = true;
    d.seq = q.getColumn(0).getInt64();
    d.clock = VectorClock::from_json(intent_sql::parse_stored(q.getColumn(1).getString(), "clock"))
                  .value_or(VectorClock{});
    d.head = text_or_empty(q.getColumn(2));
    d.head_seq = q.getColumn(3).getInt64();
    q.reset();
    return d;
  }
  q.reset();
  d.seq = highest_reserved_seq(domain);
  return d;
}

bool SqliteTxn::advance_domain(const std::string& domain, int64_t expected, int64_t now) {
  auto& update = statement("UPDATE domains SET seq = seq + 1, updated_at = ? WHERE domain = ? AND seq = ?");
  update.bind(1, static_cast<int64_t>(now));
  bind_text(update, 2, domain);
  update.bind(3, static_cast<int64_t>(expected));
  if (update.exec() == 1) return true;
  const DomainRow current = load_domain(domain);
  if (current.exists || current.seq != expected) return false;
  auto& insert = statement("INSERT INTO domains (domain, seq, updated_at) VALUES (?, ?, ?)");
  bind_text(insert, 1, domain);
  insert.bind(2, static_cast<int64_t>(expected + 1));
  insert.bind(3, static_cast<int64_t>(now));
  return insert.exec() == 1;
}

std::optional<DomainRow> SqliteTxn::reserve_seq(const std::string& domain, int64_t now) {
  // One statement for a domain that exists (the write lock is held, so
  // nothing moves it between reading and advancing); a new one takes the
  // long way, which never reuses an evicted domain's numbers.
  auto& q = statement("UPDATE domains SET seq = seq + 1, updated_at = ? WHERE domain = ? RETURNING seq - 1, head, head_seq");
  q.bind(1, static_cast<int64_t>(now));
  bind_text(q, 2, domain);
  if (!q.executeStep()) return LedgerTxn::reserve_seq(domain, now);
  DomainRow d;
  d.domain = domain;
  d.exists = true;
  d.seq = q.getColumn(0).getInt64();
  d.head = text_or_empty(q.getColumn(1));
  d.head_seq = q.getColumn(2).getInt64();
  while (q.executeStep()) {
  }
  return d;
}

void SqliteTxn::record_domain_effect(const std::string& domain, const VectorClock& clock,
                                     const std::string& cert_hash, int64_t seq, int64_t now) {
  DomainRow d = load_domain(domain);
  d.clock.merge(clock);
  const bool newest = seq > d.head_seq;
  auto& q = statement(
      "UPDATE domains SET clock = ?, head = ?, head_seq = ?, updated_at = ? WHERE domain = ?");
  const std::string merged_clock = canonicalize(d.clock.to_json());
  bind_text(q, 1, merged_clock);
  bind_text_or_null(q, 2, newest ? cert_hash : d.head);
  q.bind(3, static_cast<int64_t>(newest ? seq : d.head_seq));
  q.bind(4, static_cast<int64_t>(now));
  bind_text(q, 5, domain);
  q.exec();
}

std::optional<Certificate> SqliteTxn::load_certificate(const std::string& hash) {
  auto& q = statement("SELECT body FROM certificates WHERE hash = ?");
  bind_text(q, 1, hash);
  if (!q.executeStep()) return std::nullopt;
  Json j = intent_sql::parse_stored(q.getColumn(0).getString(), "certificate");
  q.reset();
  j["hash"] = hash;
  auto cert = Certificate::from_json(j);
  if (!cert) throw std::runtime_error("ledger holds a malformed certificate " + hash);
  return cert;
}

void SqliteTxn::insert_certificate(const Certificate& c, const std::string& canonical_body, int64_t now) {
  // The other columns are generated from the body (schema 14).
  auto& q = statement("INSERT INTO certificates (hash, body, committed_at) VALUES (?,?,?)");
  bind_text(q, 1, c.hash);
  bind_text(q, 2, canonical_body);
  q.bind(3, static_cast<int64_t>(now));
  q.exec();
  remember_clock(c.hash, c.vector_clock);
}

void SqliteTxn::insert_signature(const std::string& certificate, const std::string& key_id,
                                 const std::string& signature, int64_t unsigned_before, int64_t now) {
  auto& q = statement(
      "INSERT INTO signatures (certificate, key_id, signature, unsigned_before, signed_at) VALUES (?,?,?,?,?)");
  bind_text(q, 1, certificate);
  bind_text(q, 2, key_id);
  bind_text(q, 3, signature);
  q.bind(4, static_cast<int64_t>(unsigned_before));
  q.bind(5, static_cast<int64_t>(now));
  q.exec();
}

int64_t SqliteTxn::unsigned_before_signing() {
  auto& q = statement(kUnsignedBeforeSigning);
  q.executeStep();
  const int64_t n = q.getColumn(0).getInt64();
  q.reset();
  return n;
}

std::optional<VectorClock> SqliteTxn::certificate_clock(const std::string& hash) {
  if (auto known = clocks_.find(hash); known != clocks_.end()) return known->second;
  auto cert = load_certificate(hash);
  if (!cert) return std::nullopt;
  remember_clock(hash, cert->vector_clock);
  return cert->vector_clock;
}

void SqliteTxn::remember_clock(const std::string& hash, const VectorClock& clock) {
  // The hash covers the clock, so an entry is true whether or not the
  // transaction that wrote it commits; the bound only limits memory.
  constexpr size_t kMaxClocks = 4096;
  if (clocks_.size() >= kMaxClocks) clocks_.clear();
  clocks_.emplace(hash, clock);
}

void SqliteTxn::append_event(const EventRecord& e, int64_t now) {
  // intent_id: the intent's row, which every rule writes before its event
  // (minus the next event id for a name with no row: schema 14).
  auto& q = statement(
      "INSERT INTO events (at, kind, intent, domain, seq, generation, actor, detail, intent_id) "
      "VALUES (?1,?2,?3,?4,?5,?6,?7,?8, CASE WHEN ?3 IS NULL THEN NULL ELSE coalesce("
      "(SELECT rowid FROM intents WHERE intent = ?3), "
      "-(SELECT coalesce(max(id), 0) + 1 FROM events)) END)");
  q.bind(1, static_cast<int64_t>(now));
  q.bindNoCopy(2, event_kind_name(e.kind));  // a static string
  bind_text_or_null(q, 3, e.intent);
  bind_text_or_null(q, 4, e.domain);
  q.bind(5, static_cast<int64_t>(e.seq));
  q.bind(6, static_cast<int64_t>(e.generation));
  bind_text(q, 7, e.actor);
  const std::string detail = e.detail.dump(-1, ' ', false, Json::error_handler_t::replace);
  bind_text(q, 8, detail);
  q.exec();
}

void SqliteTxn::add_counters(const Counters& d) { decision_counters_ += d; }

void SqliteTxn::flush_counters() {
  const Counters d = batch_counters_;
  batch_counters_ = Counters{};
  const std::pair<const char*, int64_t> deltas[] = {
      {"admitted", d.admitted},
      {"replayed", d.replayed},
      {"refused_stale_read_set", d.refused_stale_read_set},
      {"refused_domain_race", d.refused_domain_race},
      {"refused_in_flight", d.refused_in_flight},
      {"refused_prior_failure", d.refused_prior_failure},
      {"refused_payload_mismatch", d.refused_payload_mismatch},
      {"committed", d.committed},
      {"aborted", d.aborted},
  };
  for (const auto& [name, delta] : deltas) {
    if (delta == 0) continue;
    auto& q = statement("UPDATE counters SET value = value + ? WHERE name = ?");
    q.bind(1, static_cast<int64_t>(delta));
    q.bindNoCopy(2, name);
    q.exec();
  }
}

Counters SqliteTxn::load_counters() {
  auto& q = statement("SELECT name, value FROM counters");
  Counters c = batch_counters_;
  c += decision_counters_;
  const std::pair<const char*, int64_t*> slots[] = {
      {"admitted", &c.admitted},
      {"replayed", &c.replayed},
      {"refused_stale_read_set", &c.refused_stale_read_set},
      {"refused_domain_race", &c.refused_domain_race},
      {"refused_in_flight", &c.refused_in_flight},
      {"refused_prior_failure", &c.refused_prior_failure},
      {"refused_payload_mismatch", &c.refused_payload_mismatch},
      {"committed", &c.committed},
      {"aborted", &c.aborted},
  };
  while (q.executeStep()) {
    const std::string name = q.getColumn(0).getString();
    for (const auto& [slot_name, slot] : slots) {
      if (name == slot_name) *slot += q.getColumn(1).getInt64();
    }
  }
  return c;
}

Status SqliteTxn::request_clear(const std::string& intent, const std::string& operator_name,
                                const std::string& reason) {
  auto& q = statement("INSERT INTO clears (intent, operator, reason) VALUES (?, ?, ?)");
  q.bind(1, intent);
  q.bind(2, operator_name);
  q.bind(3, reason);
  try {
    q.exec();
    return Status::Ok();
  } catch (const SQLite::Exception& e) {
    // RAISE(ABORT) and CHECK failures undo only this statement.
    if (e.getErrorCode() == SQLITE_CONSTRAINT) return Status::Error(e.what());
    throw;
  }
}

int64_t SqliteTxn::raise_result_ttl(int64_t ttl_ms) {
  auto& q = statement(
      "INSERT INTO retention(name, value) VALUES ('result_ttl_ms', ?) "
      "ON CONFLICT(name) DO UPDATE SET value = max(value, excluded.value) RETURNING value");
  q.bind(1, static_cast<int64_t>(ttl_ms));
  if (!q.executeStep()) throw std::runtime_error("the retention row was not returned");
  const int64_t kept = q.getColumn(0).getInt64();
  while (q.executeStep()) {
  }
  return kept;
}

// The intents a sweep deletes, counted first and deleted under the same words.
constexpr const char* kFinishedBefore = "FROM intents WHERE state IN ('done', 'cleared') AND updated_at < ?";

int64_t SqliteTxn::count_finished(int64_t cutoff) {
  static const std::string sql = std::string("SELECT count(*) ") + kFinishedBefore;  // lives on: the cache key
  auto& q = statement(sql.c_str());
  q.bind(1, static_cast<int64_t>(cutoff));
  q.executeStep();
  const int64_t n = q.getColumn(0).getInt64();
  q.reset();
  return n;
}

int64_t SqliteTxn::sweep_finished(int64_t cutoff) {
  static const std::string sql = std::string("DELETE ") + kFinishedBefore;  // lives on: the cache key
  auto& q = statement(sql.c_str());
  q.bind(1, static_cast<int64_t>(cutoff));
  return q.exec();
}

bool SqliteTxn::evict_domain(const std::string& domain, int64_t now) {
  const DomainRow d = load_domain(domain);
  if (!d.exists) return false;
  auto& in_use = statement("SELECT EXISTS (SELECT 1 FROM intents WHERE domain = ?)");
  in_use.bind(1, domain);
  in_use.executeStep();
  const bool used = in_use.getColumn(0).getInt() != 0;
  in_use.reset();
  if (used) return false;
  // The event first: schema 9 deletes a domain only after it.
  append_event(domain_evicted_event(domain, d.seq), now);
  auto& q = statement("DELETE FROM domains WHERE domain = ?");
  q.bind(1, domain);
  if (q.exec() != 1) throw std::runtime_error("domain " + domain + " was not deleted");
  return true;
}

}  // namespace effectfence
