// The history checker: what the simulated world saw happen, and the
// promises every history must keep. The world reports facts as they happen
// (an admission answered, an effect run, a commit answered, a clear, a
// sweep, a power loss) and the rows it reads from the ledger file with a
// connection of its own; the checker says which promise a fact breaks.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "effectfence/json.h"
#include "effectfence/types.h"

namespace effectfence::sim {

// An intent's row as an operator's sqlite3 would read it.
struct RowView {
  bool exists = false;
  std::string state, token, cert_hash, reason, holder_host;
  int64_t generation = 0, lease_expires_at = 0, updated_at = 0;
  bool operator==(const RowView& o) const {
    return exists == o.exists && state == o.state && token == o.token && cert_hash == o.cert_hash &&
           reason == o.reason && holder_host == o.holder_host && generation == o.generation &&
           lease_expires_at == o.lease_expires_at && updated_at == o.updated_at;
  }
  std::string describe() const;
};

// One admission an agent was answered with (or, for an agent that ignores
// a refusal, the run it made without one: admitted = false).
struct AttemptRecord {
  int id = 0;
  std::string intent, host, token;
  int64_t generation = 0;
  bool admitted = false;
  int64_t admitted_at = 0;      // the ledger's clock when it was admitted
  int64_t lease_expires_at = 0; // as last answered (admission, heartbeats)
  bool executed = false;
  bool commit_answered = false; // a certificate was answered for it
  bool abort_answered = false;  // an abort was answered for it
  // Taken over, unresolved, after its lease ran out, by an admission on a
  // host that cannot see its process: the lease's promise ended there.
  bool forfeited = false;
  int epoch = 0;                // the intent's epoch it was admitted in
};

class Checker {
 public:
  explicit Checker(int64_t result_ttl_ms) : result_ttl_ms_(result_ttl_ms) {}

  // Facts, in the order they happened.
  AttemptRecord& admitted(const std::string& intent, const Ticket& ticket, const std::string& host, int64_t now);
  AttemptRecord& unadmitted_run(const std::string& intent, const std::string& host, int64_t now);
  void extended(int attempt, int64_t lease_expires_at);
  // The agent holding attempt ran the effect.
  void executed(int attempt, int64_t now);
  // A commit with result was asked for (whether or not its answer arrives).
  void commit_asked(int attempt, const std::string& result_text);
  void commit_answered(int attempt, const Certificate& cert, int64_t now);
  void abort_answered(int attempt) { attempts_.at(static_cast<size_t>(attempt)).abort_answered = true; }
  void replayed(const PrepareRequest& request, const Certificate& cert);
  void cleared(const std::string& intent);
  // row: the intent's row just before a sweep; after: just after.
  void swept(const std::string& intent, const RowView& before, const RowView& after, int64_t now);

  // Checks around one operation on intent (before and after are its row).
  // A done row stays done with its certificate through anything but a sweep.
  void done_kept(const std::string& intent, const RowView& before, const RowView& after, const std::string& op);
  // A commit, abort or heartbeat whose token is not the row's changes nothing.
  void zombie_changed_nothing(const std::string& intent, const std::string& token, bool answered_success,
                              const RowView& before, const RowView& after, const std::string& op);
  // An admission whose read-set names a seq its domain has left.
  void admitted_on_moved_read_set(const std::string& intent, const std::string& detail);
  // After a power loss: every answered commit and admission is still there.
  void survived_power_loss(const std::string& intent, const RowView& row, bool certificate_exists);
  // Hashes of every certificate answered, which no sweep may delete.
  const std::set<std::string>& answered_certificates() const { return answered_certificates_; }

  void violation(const std::string& what) { violations_.push_back(what); }
  const std::vector<std::string>& violations() const { return violations_; }
  const AttemptRecord& attempt(int id) const { return attempts_.at(static_cast<size_t>(id)); }
  std::vector<std::string> intents() const;

 private:
  // What is true of one intent since its last clear (or sweep): its epoch.
  struct Truth {
    int epoch = 0;
    std::vector<int> ran;                    // attempts that ran the effect
    std::optional<std::string> outcome_hash; // the certificate answered or replayed
    std::optional<std::string> outcome_result;
    std::set<std::string> asked_results;     // commits asked for, answered or not
    std::optional<std::string> earlier_outcome_hash;  // the last epoch's, if a sweep ended it
    int64_t answered_generation = 0;         // highest admission answered
  };
  void new_epoch(Truth& t, bool by_sweep);
  // Whether b running after a is the lease doing what it promises: a, held
  // on a host b's process cannot see into, let its lease run out unresolved.
  bool excused(const AttemptRecord& a, const AttemptRecord& b) const;

  int64_t result_ttl_ms_;
  std::vector<AttemptRecord> attempts_;
  std::map<std::string, Truth> truth_;
  std::set<std::string> answered_certificates_;
  std::vector<std::string> violations_;
};

}  // namespace effectfence::sim
