#include "ledger/postgres_txn.h"

#include <stdexcept>

#include "ledger/intent_sql.h"
#include "ledger/signature_sql.h"

namespace effectfence {
namespace {

using pg::param;
using pg::text_or_null;

IntentRow intent_from(const pg::Result& q, int i) {
  IntentRow r;
  r.intent = q.text(i, 0);
  r.state = state_from_name(q.text(i, 1)).value_or(IntentState::none);
  r.domain = q.text(i, 2);
  r.tool = q.text(i, 3);
  r.args = q.text(i, 4);
  r.payload_hash = q.text(i, 5);
  r.agent = q.text(i, 6);
  r.seq = q.integer(i, 7);
  r.generation = q.integer(i, 8);
  r.token = q.text(i, 9);
  r.read_set = read_set_from_json(intent_sql::parse_stored(q.text(i, 10), "read_set")).value_or(std::vector<ReadSetEntry>{});
  r.parent = q.text(i, 11);
  r.known_clock = VectorClock::from_json(intent_sql::parse_stored(q.text(i, 12), "clock")).value_or(VectorClock{});
  r.holder.host = q.text(i, 13);
  r.holder.boot = q.text(i, 14);
  r.holder.pid = q.integer(i, 15);
  r.holder.started = q.integer(i, 16);
  r.lease_expires_at = q.integer(i, 17);
  r.admitted_at = q.integer(i, 18);
  r.updated_at = q.integer(i, 19);
  r.cert_hash = q.text(i, 20);
  r.reason = q.text(i, 21);
  return r;
}

constexpr const char* kCounterNames[] = {
    "admitted", "replayed", "refused_stale_read_set", "refused_domain_race", "refused_in_flight",
    "refused_prior_failure", "refused_payload_mismatch", "committed", "aborted"};

int64_t* counter_slot(Counters& c, const std::string& name) {
  if (name == "admitted") return &c.admitted;
  if (name == "replayed") return &c.replayed;
  if (name == "refused_stale_read_set") return &c.refused_stale_read_set;
  if (name == "refused_domain_race") return &c.refused_domain_race;
  if (name == "refused_in_flight") return &c.refused_in_flight;
  if (name == "refused_prior_failure") return &c.refused_prior_failure;
  if (name == "refused_payload_mismatch") return &c.refused_payload_mismatch;
  if (name == "committed") return &c.committed;
  if (name == "aborted") return &c.aborted;
  return nullptr;
}

}  // namespace

std::optional<int64_t> PostgresTxn::clock_ms() {
  if (!now_) now_ = db_.exec("SELECT effectfence_now_ms()").integer(0, 0);
  return now_;
}

std::optional<IntentRow> PostgresTxn::load_intent(const std::string& intent) {
  if (!read_only_) {
    // Held until COMMIT: the next decision on this intent, from any
    // connection, reads only after this one is durable.
    db_.exec("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", {param("intent:" + intent)});
  }
  // A decision also locks the row it read: the dead-holder reaper and the
  // operator's clear trigger change intents without the advisory lock, and
  // the decision writes the whole row back, so it must not read a version
  // they are about to replace (it would undo a fence or a clear).
  static const std::string sql = std::string("SELECT ") + intent_sql::kColumns + " FROM intents WHERE intent = $1";
  static const std::string locking = sql + " FOR UPDATE";
  auto q = db_.exec(read_only_ ? sql : locking, {param(intent)});
  if (q.rows() == 0) return std::nullopt;
  return intent_from(q, 0);
}

namespace {

// A whole intent row as parameters $1..$N, in intent_sql::kColumns order.
std::vector<pg::Param> row_params(const IntentRow& r, int64_t now) {
  return {param(r.intent), param(std::string(state_name(r.state))), param(r.domain), param(r.tool), param(r.args),
          param(r.payload_hash), param(r.agent), param(r.seq), param(r.generation), param(r.token),
          param(intent_sql::stored_read_set(r.read_set)), text_or_null(r.parent),
          param(intent_sql::stored_clock(r.known_clock)), param(r.holder.host), param(r.holder.boot),
          param(r.holder.pid), param(r.holder.started), param(r.lease_expires_at), param(r.admitted_at), param(now),
          text_or_null(r.cert_hash), text_or_null(r.reason)};
}

}  // namespace

void PostgresTxn::save_intent(const IntentRow& r, int64_t now) {
  static const std::string sql = intent_sql::upsert();
  db_.exec(sql, row_params(r, now));
}

void PostgresTxn::insert_intent(const IntentRow& r, int64_t now) {
  static const std::string sql = intent_sql::insert_row('$');
  db_.exec(sql, row_params(r, now));
}

void PostgresTxn::save_outcome(const IntentRow& r, int64_t now) {
  static const std::string sql = intent_sql::outcome_update('$');
  const auto q = db_.exec(sql, {param(r.intent), param(std::string(state_name(r.state))), text_or_null(r.cert_hash),
                                text_or_null(r.reason), param(now)});
  if (q.affected() != 1) throw std::runtime_error("intent " + r.intent + " vanished before its outcome was written");
}

std::vector<IntentRow> PostgresTxn::in_flight_on_host(const std::string& host) {
  static const std::string sql = std::string("SELECT ") + intent_sql::kColumns +
                                 " FROM intents WHERE state = 'in_flight' AND holder_host = $1 FOR UPDATE";
  auto q = db_.exec(sql, {param(host)});
  std::vector<IntentRow> rows;
  for (int i = 0; i < q.rows(); ++i) rows.push_back(intent_from(q, i));
  return rows;
}

int64_t PostgresTxn::count_fenced(const std::string& domain) {
  return db_.exec("SELECT count(*) FROM intents WHERE state IN ('failed', 'unknown') AND domain = $1", {param(domain)})
      .integer(0, 0);
}

std::optional<std::string> PostgresTxn::admission_token_hash(const std::string& intent, const std::string& domain,
                                                             int64_t seq, int64_t generation) {
  auto rows = db_.exec("SELECT coalesce(detail::json ->> 'token_sha256', '') FROM events WHERE intent = $1 AND "
                       "kind IN ('admitted', 'takeover') AND domain = $2 AND seq = $3 AND generation = $4 LIMIT 1",
                       {param(intent), param(domain), param(seq), param(generation)});
  if (rows.rows() == 0) return std::nullopt;
  return rows.text(0, 0);
}

int64_t PostgresTxn::count_live_in_flight(const std::string& domain, int64_t now) {
  return db_
      .exec("SELECT count(*) FROM intents WHERE state = 'in_flight' AND domain = $1 AND lease_expires_at > $2",
            {param(domain), param(now)})
      .integer(0, 0);
}

std::vector<IntentRow> PostgresTxn::expired_in_flight(const std::string& domain, int64_t now) {
  static const std::string sql = std::string("SELECT ") + intent_sql::kColumns +
                                 " FROM intents WHERE state = 'in_flight' AND domain = $1 AND lease_expires_at <= $2";
  auto q = db_.exec(sql, {param(domain), param(now)});
  std::vector<IntentRow> rows;
  for (int i = 0; i < q.rows(); ++i) rows.push_back(intent_from(q, i));
  return rows;
}

DomainRow PostgresTxn::load_domain(const std::string& domain) { return load_domain_row(domain, false); }

DomainRow PostgresTxn::load_domain_row(const std::string& domain, bool for_update) {
  if (!read_only_) {
    // Held until COMMIT: a decision that read this domain (its read-set or
    // its own sequence) cannot be overtaken by another before it commits.
    db_.exec("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", {param("domain:" + domain)});
  }
  auto q = db_.exec(std::string("SELECT seq, clock, head, head_seq FROM domains WHERE domain = $1") +
                        (for_update ? " FOR UPDATE" : ""),
                    {param(domain)});
  DomainRow d;
  d.domain = domain;
  if (q.rows() > 0) {
    d.exists = true;
    d.seq = q.integer(0, 0);
    d.clock = VectorClock::from_json(intent_sql::parse_stored(q.text(0, 1), "clock")).value_or(VectorClock{});
    d.head = q.text(0, 2);
    d.head_seq = q.integer(0, 3);
    return d;
  }
  // An evicted domain must not hand out its old numbers again.
  d.seq = db_.exec("SELECT coalesce(max(seq), 0) FROM events WHERE domain = $1 AND kind = 'domain_evicted'",
                   {param(domain)})
              .integer(0, 0);
  return d;
}

bool PostgresTxn::advance_domain(const std::string& domain, int64_t expected, int64_t now) {
  // READ COMMITTED: a concurrent winner's UPDATE makes ours wait, then
  // re-check seq against the committed row and touch nothing.
  if (db_.exec("UPDATE domains SET seq = seq + 1, updated_at = $1 WHERE domain = $2 AND seq = $3",
               {param(now), param(domain), param(expected)})
          .affected() == 1) {
    return true;
  }
  const DomainRow current = load_domain(domain);
  if (current.exists || current.seq != expected) return false;
  return db_.exec("INSERT INTO domains (domain, seq, updated_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                  {param(domain), param(expected + 1), param(now)})
             .affected() == 1;
}

void PostgresTxn::record_domain_effect(const std::string& domain, const VectorClock& clock,
                                       const std::string& cert_hash, int64_t seq, int64_t now) {
  DomainRow d = load_domain_row(domain, /*for_update=*/true);
  d.clock.merge(clock);
  const bool newest = seq > d.head_seq;
  db_.exec("UPDATE domains SET clock = $1, head = $2, head_seq = $3, updated_at = $4 WHERE domain = $5",
           {param(canonicalize(d.clock.to_json())), text_or_null(newest ? cert_hash : d.head),
            param(newest ? seq : d.head_seq), param(now), param(domain)});
}

std::optional<Certificate> PostgresTxn::load_certificate(const std::string& hash) {
  auto q = db_.exec("SELECT body FROM certificates WHERE hash = $1", {param(hash)});
  if (q.rows() == 0) return std::nullopt;
  Json j = intent_sql::parse_stored(q.text(0, 0), "certificate");
  j["hash"] = hash;
  auto cert = Certificate::from_json(j);
  if (!cert) throw std::runtime_error("ledger holds a malformed certificate " + hash);
  return cert;
}

void PostgresTxn::insert_certificate(const Certificate& c, const std::string& canonical_body, int64_t now) {
  db_.exec(
      "INSERT INTO certificates (hash, intent, domain, seq, generation, parent, agent, tool, body, "
      "committed_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)",
      {param(c.hash), param(c.intent), param(c.domain), param(c.seq), param(c.generation), text_or_null(c.parent),
       param(c.agent), param(c.tool), param(canonical_body), param(now)});
}

void PostgresTxn::insert_signature(const std::string& certificate, const std::string& key_id,
                                   const std::string& signature, int64_t unsigned_before, int64_t now) {
  db_.exec(
      "INSERT INTO signatures (certificate, key_id, signature, unsigned_before, signed_at) VALUES ($1,$2,$3,$4,$5)",
      {param(certificate), param(key_id), param(signature), param(unsigned_before), param(now)});
}

int64_t PostgresTxn::unsigned_before_signing() {
  return db_.exec(kUnsignedBeforeSigning).integer(0, 0);
}

void PostgresTxn::append_event(const EventRecord& e, int64_t now) {
  db_.exec(
      "INSERT INTO events (at, kind, intent, domain, seq, generation, actor, detail) "
      "VALUES ($1,$2,$3,$4,$5,$6,$7,$8)",
      {param(now), param(event_kind_name(e.kind)), text_or_null(e.intent), text_or_null(e.domain), param(e.seq),
       param(e.generation), param(e.actor), param(e.detail.dump(-1, ' ', false, Json::error_handler_t::replace))});
}

// How many rows each counter is spread over: the CHECK on counters.shard
// (migrations/postgres/0013_counters_in_shards.sql).
constexpr int kCounterShards = 64;

void PostgresTxn::flush_counters() {
  Counters d = pending_;
  pending_ = Counters{};
  for (const char* name : kCounterNames) {
    const int64_t delta = *counter_slot(d, name);
    if (delta == 0) continue;
    // A shard per connection (schema 13): one row for every decision would
    // make each wait on the last one's COMMIT.
    db_.exec("INSERT INTO counters (name, shard, value) VALUES ($1, $2, $3) "
             "ON CONFLICT (name, shard) DO UPDATE SET value = counters.value + EXCLUDED.value",
             {param(std::string(name)), param(static_cast<int64_t>(db_.backend_pid() % kCounterShards)),
              param(delta)});
  }
}

Counters PostgresTxn::load_counters() {
  Counters c = pending_;
  auto q = db_.exec("SELECT name, sum(value) FROM counters GROUP BY name");
  for (int i = 0; i < q.rows(); ++i) {
    if (int64_t* slot = counter_slot(c, q.text(i, 0))) *slot += q.integer(i, 1);
  }
  return c;
}

Status PostgresTxn::request_clear(const std::string& intent, const std::string& operator_name,
                                  const std::string& reason) {
  // A refused INSERT must not abort the decision's transaction.
  db_.run("SAVEPOINT clear_request");
  try {
    db_.exec("INSERT INTO clears (intent, operator, reason) VALUES ($1, $2, $3)",
             {param(intent), param(operator_name), param(reason)});
    db_.run("RELEASE SAVEPOINT clear_request");
    return Status::Ok();
  } catch (const pg::Error& e) {
    db_.run("ROLLBACK TO SAVEPOINT clear_request");
    // P0001: the clears_check trigger; 23xxx: a CHECK on operator or reason.
    if (e.sqlstate() == "P0001" || e.sqlstate().rfind("23", 0) == 0) return Status::Error(e.what());
    throw;
  }
}

int64_t PostgresTxn::raise_result_ttl(int64_t ttl_ms) {
  return db_
      .exec("INSERT INTO retention(name, value) VALUES ('result_ttl_ms', $1) "
            "ON CONFLICT (name) DO UPDATE SET value = greatest(retention.value, excluded.value) RETURNING value",
            {param(ttl_ms)})
      .integer(0, 0);
}

// The intents a sweep deletes, counted first and deleted under the same words.
constexpr const char* kFinishedBefore = "FROM intents WHERE state IN ('done', 'cleared') AND updated_at < $1";

int64_t PostgresTxn::count_finished(int64_t cutoff) {
  return db_.exec(std::string("SELECT count(*) ") + kFinishedBefore, {param(cutoff)}).integer(0, 0);
}

int64_t PostgresTxn::sweep_finished(int64_t cutoff) {
  return db_.exec(std::string("DELETE ") + kFinishedBefore, {param(cutoff)}).affected();
}

bool PostgresTxn::evict_domain(const std::string& domain, int64_t now) {
  const DomainRow d = load_domain(domain);
  if (!d.exists) return false;
  if (db_.exec("SELECT 1 FROM intents WHERE domain = $1 LIMIT 1", {param(domain)}).rows() > 0) return false;
  // The event first: schema 7 deletes a domain only after it. An intent
  // admitted on the domain meanwhile undoes both.
  append_event(domain_evicted_event(domain, d.seq), now);
  if (db_.exec("DELETE FROM domains WHERE domain = $1 AND NOT EXISTS (SELECT 1 FROM intents WHERE domain = $1)",
               {param(domain)})
          .affected() != 1) {
    throw std::runtime_error("domain " + domain + " came into use while it was being evicted");
  }
  return true;
}

}  // namespace effectfence
