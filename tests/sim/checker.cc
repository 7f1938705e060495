#include "sim/checker.h"

#include <algorithm>

namespace effectfence::sim {

std::string RowView::describe() const {
  if (!exists) return "(no row)";
  return state + " gen " + std::to_string(generation) + " lease " + std::to_string(lease_expires_at) + " holder " +
         holder_host + (cert_hash.empty() ? "" : " cert " + cert_hash.substr(0, 12));
}

AttemptRecord& Checker::admitted(const std::string& intent, const Ticket& ticket, const std::string& host,
                                 int64_t now) {
  Truth& t = truth_[intent];
  AttemptRecord a;
  a.id = static_cast<int>(attempts_.size());
  a.intent = intent;
  a.host = host;
  a.token = ticket.token;
  a.generation = ticket.generation;
  a.admitted = true;
  a.admitted_at = now;
  a.lease_expires_at = ticket.lease_expires_at_ms;
  a.epoch = t.epoch;
  if (t.outcome_hash) {
    violation("intent " + intent + " admitted attempt #" + std::to_string(a.id) + " (generation " +
              std::to_string(ticket.generation) + ") after its outcome " + t.outcome_hash->substr(0, 12) +
              " was answered in the same epoch: a duplicate must be replayed");
  }
  t.answered_generation = std::max(t.answered_generation, ticket.generation);
  for (AttemptRecord& earlier : attempts_) {
    if (earlier.intent == intent && earlier.epoch == t.epoch && earlier.admitted && earlier.host != host &&
        !earlier.commit_answered && !earlier.abort_answered && now >= earlier.lease_expires_at) {
      earlier.forfeited = true;
    }
  }
  attempts_.push_back(a);
  return attempts_.back();
}

AttemptRecord& Checker::unadmitted_run(const std::string& intent, const std::string& host, int64_t now) {
  AttemptRecord a;
  a.id = static_cast<int>(attempts_.size());
  a.intent = intent;
  a.host = host;
  a.admitted_at = now;
  a.epoch = truth_[intent].epoch;
  attempts_.push_back(a);
  return attempts_.back();
}

void Checker::extended(int attempt, int64_t lease_expires_at) {
  AttemptRecord& a = attempts_.at(static_cast<size_t>(attempt));
  a.lease_expires_at = std::max(a.lease_expires_at, lease_expires_at);
}

bool Checker::excused(const AttemptRecord& a, const AttemptRecord& b) const {
  return b.admitted && a.forfeited;
}

void Checker::executed(int attempt, int64_t now) {
  AttemptRecord& b = attempts_.at(static_cast<size_t>(attempt));
  Truth& t = truth_[b.intent];
  b.executed = true;
  if (b.admitted && now >= b.lease_expires_at) {
    violation("intent " + b.intent + ": attempt #" + std::to_string(b.id) + " ran at " + std::to_string(now) +
              " after its lease ran out at " + std::to_string(b.lease_expires_at) + " (the agent broke the lease)");
  }
  if (b.epoch != t.epoch) {
    // Admitted before a clear or a sweep ended its epoch: possible only if
    // the fence let an admission be cleared or swept while in flight.
    violation("intent " + b.intent + ": attempt #" + std::to_string(b.id) + " ran its effect at " +
              std::to_string(now) + " although its admission was cleared or swept since");
  }
  for (int other : t.ran) {
    const AttemptRecord& a = attempts_.at(static_cast<size_t>(other));
    if (excused(a, b)) continue;
    violation("double execution of intent " + b.intent + " between two clears: attempt #" + std::to_string(a.id) +
              " (generation " + std::to_string(a.generation) + ", host " + a.host + ", lease to " +
              std::to_string(a.lease_expires_at) + ") ran it, then attempt #" + std::to_string(b.id) +
              " (generation " + std::to_string(b.generation) + ", host " + b.host +
              (b.admitted ? ", admitted at " + std::to_string(b.admitted_at) : ", never admitted") + ") at " +
              std::to_string(now));
  }
  t.ran.push_back(attempt);
}

void Checker::commit_asked(int attempt, const std::string& result_text) {
  truth_[attempts_.at(static_cast<size_t>(attempt)).intent].asked_results.insert(result_text);
}

void Checker::commit_answered(int attempt, const Certificate& cert, int64_t) {
  AttemptRecord& a = attempts_.at(static_cast<size_t>(attempt));
  Truth& t = truth_[a.intent];
  a.commit_answered = true;
  answered_certificates_.insert(cert.hash);
  if (!a.executed) violation("intent " + a.intent + ": attempt #" + std::to_string(a.id) + " was certified without running");
  if (t.outcome_hash && *t.outcome_hash != cert.hash) {
    violation("intent " + a.intent + ": commit of attempt #" + std::to_string(a.id) + " answered certificate " +
              cert.hash.substr(0, 12) + " over the outcome already answered, " + t.outcome_hash->substr(0, 12));
  }
  t.outcome_hash = cert.hash;
  t.outcome_result = cert.result.dump();
}

void Checker::replayed(const PrepareRequest& request, const Certificate& cert) {
  Truth& t = truth_[request.intent];
  const std::string result = cert.result.dump();
  if (cert.intent != request.intent || cert.tool != request.tool || canonicalize(cert.args) != canonicalize(request.args)) {
    violation("intent " + request.intent + ": replayed a certificate of another action (" + cert.intent + ", " +
              cert.tool + " " + cert.args.dump() + ") for " + request.tool + " " + request.args.dump());
  }
  if (t.outcome_hash) {
    if (*t.outcome_hash != cert.hash) {
      violation("intent " + request.intent + ": replayed " + cert.hash.substr(0, 12) + " but its outcome is " +
                t.outcome_hash->substr(0, 12));
    }
    return;
  }
  if (t.asked_results.count(result)) {
    // The commit was recorded though its answer was lost: from now on the outcome.
    t.outcome_hash = cert.hash;
    t.outcome_result = result;
    answered_certificates_.insert(cert.hash);
    return;
  }
  if (t.earlier_outcome_hash && *t.earlier_outcome_hash == cert.hash) return;  // swept, still true
  violation("intent " + request.intent + ": replayed " + cert.hash.substr(0, 12) + " with result " + result +
            ", which no attempt of this epoch committed");
}

void Checker::new_epoch(Truth& t, bool by_sweep) {
  t.earlier_outcome_hash = by_sweep ? t.outcome_hash : std::nullopt;
  t.epoch += 1;
  t.ran.clear();
  t.outcome_hash.reset();
  t.outcome_result.reset();
  t.asked_results.clear();
}

void Checker::cleared(const std::string& intent) {
  Truth& t = truth_[intent];
  if (t.outcome_hash) violation("intent " + intent + ": an operator clear was accepted over its answered outcome");
  new_epoch(t, false);
}

void Checker::swept(const std::string& intent, const RowView& before, const RowView& after, int64_t now) {
  if (!before.exists || after.exists) return;
  if (before.state != "done" && before.state != "cleared") {
    violation("intent " + intent + ": a sweep deleted it while " + before.state);
  }
  if (before.state == "done" && before.updated_at > now - result_ttl_ms_) {
    violation("intent " + intent + ": a sweep at " + std::to_string(now) + " deleted its result, recorded at " +
              std::to_string(before.updated_at) + ", before the result TTL of " + std::to_string(result_ttl_ms_) +
              " ms");
  }
  Truth& t = truth_[intent];
  if (before.state == "done") new_epoch(t, true);
  t.answered_generation = 0;  // the row is gone: generations start over
}

void Checker::done_kept(const std::string& intent, const RowView& before, const RowView& after,
                        const std::string& op) {
  if (before.exists && before.state == "done" &&
      (!after.exists || after.state != "done" || after.cert_hash != before.cert_hash)) {
    violation("intent " + intent + ": " + op + " changed its done row (" + before.describe() + ") to " +
              after.describe());
  }
  const Truth& t = truth_[intent];
  if (t.outcome_hash && after.exists && (after.state != "done" || after.cert_hash != *t.outcome_hash)) {
    violation("intent " + intent + ": after " + op + " its row is " + after.describe() + ", not its answered outcome " +
              t.outcome_hash->substr(0, 12));
  }
}

void Checker::zombie_changed_nothing(const std::string& intent, const std::string& token, bool answered_success,
                                     const RowView& before, const RowView& after, const std::string& op) {
  if (!before.exists || before.token == token) return;
  if (answered_success) {
    violation("intent " + intent + ": " + op + " with a token that no longer holds it (row " + before.describe() +
              ") was answered as a success");
  }
  if (!(before == after)) {
    violation("intent " + intent + ": " + op + " with a token that no longer holds it changed the row from " +
              before.describe() + " to " + after.describe());
  }
}

void Checker::admitted_on_moved_read_set(const std::string& intent, const std::string& detail) {
  violation("intent " + intent + " admitted although its read-set moved: " + detail);
}

void Checker::survived_power_loss(const std::string& intent, const RowView& row, bool certificate_exists) {
  const Truth& t = truth_[intent];
  if (t.outcome_hash) {
    if (!row.exists || row.state != "done" || row.cert_hash != *t.outcome_hash) {
      violation("intent " + intent + ": its answered outcome " + t.outcome_hash->substr(0, 12) +
                " did not survive the power loss (row now " + row.describe() + ")");
    }
    if (!certificate_exists) violation("intent " + intent + ": its answered certificate is gone after the power loss");
  }
  if (t.answered_generation > 0 && (!row.exists || row.generation < t.answered_generation) &&
      !(row.exists && row.state == "cleared")) {
    violation("intent " + intent + ": its answered admission (generation " + std::to_string(t.answered_generation) +
              ") did not survive the power loss (row now " + row.describe() + ")");
  }
}

std::vector<std::string> Checker::intents() const {
  std::vector<std::string> out;
  for (const auto& [intent, truth] : truth_) out.push_back(intent);
  return out;
}

}  // namespace effectfence::sim
