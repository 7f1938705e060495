// LedgerTxn over one PostgreSQL connection inside an open transaction.
//
// Decisions run at READ COMMITTED, made serial where it matters by
// transaction-scoped advisory locks: load_intent locks the intent and
// load_domain the domain before reading, so every decision about one intent
// or one domain (from any host) reads only after the previous one committed,
// exactly as under SQLite's single writer. Domain sequences still move by
// compare-and-swap (UPDATE ... WHERE seq = $n, INSERT ... ON CONFLICT DO
// NOTHING) and merged rows are read FOR UPDATE, so a missed lock could
// cost a refusal, never a second admission. Read-only transactions take no
// locks (one REPEATABLE READ snapshot).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "effectfence/ledger.h"
#include "ledger/pg_connection.h"

namespace effectfence {

class PostgresTxn final : public LedgerTxn {
 public:
  PostgresTxn(pg::Connection& db, bool read_only) : db_(db), read_only_(read_only) {}

  // The transaction's time on the database server: now(), fixed for the
  // whole transaction, so every replica's leases share one clock.
  std::optional<int64_t> clock_ms() override;

  std::optional<IntentRow> load_intent(const std::string& intent) override;
  void save_intent(const IntentRow& row, int64_t now) override;
  void insert_intent(const IntentRow& row, int64_t now) override;
  void save_outcome(const IntentRow& row, int64_t now) override;
  std::vector<IntentRow> in_flight_on_host(const std::string& host) override;
  int64_t count_live_in_flight(const std::string& domain, int64_t now) override;
  std::vector<IntentRow> expired_in_flight(const std::string& domain, int64_t now) override;
  int64_t count_fenced(const std::string& domain) override;
  std::optional<std::string> admission_token_hash(const std::string& intent, const std::string& domain, int64_t seq,
                                                  int64_t generation) override;
  DomainRow load_domain(const std::string& domain) override;
  bool advance_domain(const std::string& domain, int64_t expected, int64_t now) override;
  void record_domain_effect(const std::string& domain, const VectorClock& clock,
                            const std::string& cert_hash, int64_t seq, int64_t now) override;
  std::optional<Certificate> load_certificate(const std::string& hash) override;
  void insert_certificate(const Certificate& cert, const std::string& canonical_body, int64_t now) override;
  void insert_signature(const std::string& certificate, const std::string& key_id, const std::string& signature,
                        int64_t unsigned_before, int64_t now) override;
  int64_t unsigned_before_signing() override;
  void append_event(const EventRecord& event, int64_t now) override;
  void add_counters(const Counters& delta) override { pending_ += delta; }
  Counters load_counters() override;
  Status request_clear(const std::string& intent, const std::string& operator_name,
                       const std::string& reason) override;
  int64_t raise_result_ttl(int64_t ttl_ms) override;
  int64_t count_finished(int64_t cutoff) override;
  int64_t sweep_finished(int64_t cutoff) override;
  bool evict_domain(const std::string& domain, int64_t now) override;

  // Writes the counters summed during the transaction (called before COMMIT).
  void flush_counters();

 private:
  DomainRow load_domain_row(const std::string& domain, bool for_update);

  pg::Connection& db_;
  bool read_only_;
  std::optional<int64_t> now_;
  Counters pending_;
};

}  // namespace effectfence
