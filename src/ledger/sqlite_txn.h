// LedgerTxn over one SQLite connection inside an open transaction.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include <SQLiteCpp/SQLiteCpp.h>
#include <sqlite3.h>

#include "effectfence/ledger.h"

namespace effectfence {

class SqliteTxn final : public LedgerTxn {
 public:
  explicit SqliteTxn(SQLite::Database& db) : db_(db) {}

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
  std::optional<DomainRow> reserve_seq(const std::string& domain, int64_t now) override;
  void record_domain_effect(const std::string& domain, const VectorClock& clock,
                            const std::string& cert_hash, int64_t seq, int64_t now) override;
  std::optional<Certificate> load_certificate(const std::string& hash) override;
  std::optional<VectorClock> certificate_clock(const std::string& hash) override;
  void insert_certificate(const Certificate& cert, const std::string& canonical_body, int64_t now) override;
  void insert_signature(const std::string& certificate, const std::string& key_id, const std::string& signature,
                        int64_t unsigned_before, int64_t now) override;
  int64_t unsigned_before_signing() override;
  void append_event(const EventRecord& event, int64_t now) override;
  void add_counters(const Counters& delta) override;
  Counters load_counters() override;
  // Counters are summed in memory and written once per transaction: every
  // decision touches them, and one UPDATE per name per batch is enough.
  // Called by the ledger around each decision and before COMMIT.
  void begin_decision() { decision_counters_ = Counters{}; }
  void keep_decision() { batch_counters_ += decision_counters_; decision_counters_ = Counters{}; }
  void discard_decision() { decision_counters_ = Counters{}; }
  void flush_counters();
  void discard_batch() { batch_counters_ = Counters{}; decision_counters_ = Counters{}; }

  Status request_clear(const std::string& intent, const std::string& operator_name,
                       const std::string& reason) override;
  int64_t raise_result_ttl(int64_t ttl_ms) override;
  int64_t count_finished(int64_t cutoff) override;
  int64_t sweep_finished(int64_t cutoff) override;
  bool evict_domain(const std::string& domain, int64_t now) override;

  // Resets every cached statement. A query left stepped (its caller threw
  // between reading a row and resetting it) keeps the connection's read
  // transaction, and with it a snapshot, open past COMMIT: once another
  // process writes, every BEGIN IMMEDIATE on that snapshot fails at once.
  void reset_statements();

 private:
  // A cached prepared statement, reset and unbound, ready to bind.
  SQLite::Statement& statement(const char* sql);
  int64_t highest_reserved_seq(const std::string& domain);

  SQLite::Database& db_;
  std::map<const char*, std::unique_ptr<SQLite::Statement>> statements_;
  // Clocks of certificates seen, by hash: every commit needs its parent's,
  // and parsing the parent's whole body for it cost more than the insert.
  std::unordered_map<std::string, VectorClock> clocks_;
  void remember_clock(const std::string& hash, const VectorClock& clock);
  Counters decision_counters_;
  Counters batch_counters_;
};

}  // namespace effectfence
