// Values that cross the fence's API: tickets, refusals, outcomes, status.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "effectfence/certificate.h"
#include "effectfence/json.h"
#include "effectfence/vector_clock.h"

namespace effectfence {

// Every reason an attempt is turned away. All are given BEFORE the effect
// runs (prepare) or instead of recording over someone else (commit/abort).
enum class Reason {
  in_flight,         // another attempt of this intent holds a live lease
  domain_race,       // the domain has an action in flight, or a same-instant decision on it won
  stale_read_set,    // a domain the decision read has moved since
  prior_failure,     // the intent is fenced (failed/unknown) until an operator clears it
  payload_mismatch,  // same intent, different tool or args
  lease_lost,        // commit/abort/heartbeat by a holder that no longer holds the intent
  ticket_invalid,    // the ticket does not match what the ledger issued under its token
  invalid_request,   // arguments that cannot describe an action (bad JSON, empty intent, ...)
  ledger_busy,       // the ledger stayed locked beyond the busy timeout
  ledger_error,      // the ledger could not be read or written
};

const char* reason_name(Reason reason);
std::optional<Reason> reason_from_name(const std::string& name);

// The situation a refusal reports, under its reason. With the facts in
// detail it is all there is to say about it: the words a model or a person
// reads are written once, at the edge that talks to them
// (effectfence/refusal_text.h). Code acts on reason, cause and facts, never
// on text.
enum class Cause {
  none,
  // invalid_request
  bad_argument,       // detail: field, problem
  seq_never_reached,  // detail: domain, expected (the seq given), actual
  unknown_parent,     // detail: parent
  clear_refused,      // detail: intent, state, ledger_said; holder facts for one in flight
  // in_flight
  held,               // detail: intent, holder_agent, lease_expires_at_ms, lease_ends_in_ms
  held_past_lease,    // detail: intent, holder_agent, holder (running on this host), lease_expires_at_ms
  same_instant,       // detail: intent (an identical attempt in this process)
  // domain_race
  domain_in_flight,   // detail: domain, expected, actual
  domain_moved,       // detail: domain
  // stale_read_set
  read_set_moved,     // detail: domain, expected, actual, own_domain; after_effect at commit
  // prior_failure
  fenced,             // detail: intent, state, recorded_reason
  // payload_mismatch
  other_action,       // detail: intent, recorded_tool, requested_tool
  // lease_lost, ticket_invalid
  not_issued,         // detail: intent, domain, seq, generation
  no_attempt,         // detail: intent
  token_reissued,     // detail: intent, current_generation: the generation was issued again with another token
  taken_over,         // detail: intent, current_generation, holder_agent, state
  ticket_edited,      // detail: intent
  ticket_has_nul,
  ticket_unreadable,
  other_result,       // detail: intent, certificate
  outcome_recorded,   // detail: intent, state
  not_in_flight,      // detail: intent, state
  // ledger_busy, ledger_error: what failed underneath, {ledger?, step, error}
  locked,             // detail: engine
  storage_failed,     // the ledger's disk, file or connection failed: detail: step, error, ledger?
  disk_failed,        // a write or sync failed: this process decides nothing more
  undo_failed,        // a failed decision could not be undone: this process decides nothing more
  file_replaced,      // detail: path; the file was deleted or replaced under this process
  rolled_back,        // detail: error?: SQLite rolled back the shared transaction
  closing,            // the ledger is closing: nothing was decided; detail: ledger?
  stopping,           // the server is stopping and admits nothing more
  outcome_unknown,    // the connection was lost while committing: detail: ledger, error
  no_decision,        // a placeholder no answer carries
};

// True iff cause says the ledger underneath failed: an operator's business.
bool is_storage_failure(Cause cause);

struct Refusal {
  Reason reason;
  Cause cause = Cause::none;
  Json detail = Json::object();  // the facts, e.g. {domain, expected, actual} for stale_read_set
};

// What an admitted attempt holds. The token is the capability: commit, abort
// and heartbeat are compare-and-swap on it.
struct Ticket {
  std::string intent;
  std::string domain;
  int64_t seq = 0;         // the domain sequence number reserved for this effect
  int64_t generation = 0;  // goes up on every (re)admission of the intent
  std::string token;       // 128 random bits, hex
  int64_t lease_expires_at_ms = 0;

  Json to_json() const;
  // Returns nullopt iff j lacks a field or has one of the wrong type.
  static std::optional<Ticket> from_json(const Json& j);
  // True iff other is this very attempt: the same token and everything the
  // ledger checks a ticket by (its lease is informational). An edited ticket
  // around a real token is not.
  bool same_attempt(const Ticket& other) const;
};

// intent, domain, tool, agent and read_set domains: 1 to this many Unicode
// characters (code points), as in the fence tools' inputSchema (maxLength).
constexpr size_t kMaxNameCharacters = 1024;

struct PrepareRequest {
  std::string intent;  // stable id of the logical action, e.g. "charge:order-123"
  std::string domain;  // contention scope, e.g. "order:123"
  std::string tool;
  Json args = Json::object();
  std::string agent;
  std::vector<ReadSetEntry> read_set;
  std::optional<std::string> parent;  // certificate hash; default: the domain's latest
  std::optional<VectorClock> known_clock;
};

struct Admitted { Ticket ticket; };
struct Replayed { Certificate cert; };
struct Aborted { std::string intent; };
struct Extended { int64_t lease_expires_at_ms = 0; };
struct Cleared { std::string intent; std::string previous_state; };

using PrepareOutcome = std::variant<Admitted, Replayed, Refusal>;
using CommitOutcome = std::variant<Certificate, Refusal>;
using AbortOutcome = std::variant<Aborted, Refusal>;
using HeartbeatOutcome = std::variant<Extended, Refusal>;
using ClearOutcome = std::variant<Cleared, Refusal>;

// The refusal in an outcome, or nullptr. Takes a named outcome only: a
// pointer into a temporary would dangle (`if (auto o = f(); auto* r = refusal_of(o))`).
template <typename Outcome>
const Refusal* refusal_of(const Outcome& o) { return std::get_if<Refusal>(&o); }
template <typename Outcome>
const Refusal* refusal_of(const Outcome&& o) = delete;

// True iff the outcome is a refusal because the ledger stayed locked or
// failed (ledger_busy, ledger_error): the same call, with the same ticket,
// may be retried. A retried commit that was recorded after all gets the
// same certificate.
template <typename Outcome>
bool is_ledger_trouble(const Outcome& o) {
  const Refusal* r = std::get_if<Refusal>(&o);
  return r && (r->reason == Reason::ledger_busy || r->reason == Reason::ledger_error);
}

enum class IntentState { none, in_flight, done, failed, unknown, cleared };
const char* state_name(IntentState s);
std::optional<IntentState> state_from_name(const std::string& name);

struct IntentStatus {
  IntentState state = IntentState::none;
  std::string intent, domain, tool, agent;
  Json args;
  int64_t seq = 0, generation = 0;
  int64_t lease_expires_at_ms = 0;  // in_flight only
  int64_t updated_at_ms = 0;
  std::string reason;               // failed/unknown/cleared: why
  std::optional<Certificate> cert;  // done only
  Json to_json() const;
};

struct DomainStatus {
  std::string domain;
  bool exists = false;
  int64_t seq = 0;          // read-set entries compare against this
  VectorClock clock;        // merge of every committed effect's clock
  std::string head;         // latest certificate hash on the domain
  int64_t in_flight = 0;    // admitted actions whose outcome is not yet known
  int64_t fenced = 0;       // actions fenced failed or unknown, not yet cleared: they may have happened
  Json to_json() const;
};

struct Counters {
  int64_t admitted = 0;
  int64_t replayed = 0;
  int64_t refused_stale_read_set = 0;
  int64_t refused_domain_race = 0;
  int64_t refused_in_flight = 0;
  int64_t refused_prior_failure = 0;
  int64_t refused_payload_mismatch = 0;
  int64_t committed = 0;
  int64_t aborted = 0;
  // Sums saturate at the int64 limits: the ledger's counters table is
  // plain SQL, and a value edited near a limit must not wrap around.
  int64_t refusals() const;
  int64_t total_attempts() const;
  // Every attempt that did not run the effect.
  int64_t prevented() const;
  Counters& operator+=(const Counters& o);
  // {admitted, replayed, refused:{...}, total_attempts, prevented, committed, aborted}
  Json to_json() const;
};

struct Stats {
  Counters process;  // this process since it opened the ledger
  Counters ledger;   // every process, for the life of the ledger file
  Json to_json() const;
};

}  // namespace effectfence
