// The fence's decisions, written against the ledger seam only.
//
// Each function runs inside one ledger transaction: it reads the rows it
// decides on, writes the outcome, the audit event and the counters, and
// returns what the caller is told. Nothing here knows which storage engine
// holds the rows, and nothing here touches a clock or a process table: time
// and liveness come in as arguments, so every rule is testable alone.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "core/signing.h"
#include "effectfence/ledger.h"
#include "effectfence/types.h"

namespace effectfence::rules {

using IsDead = std::function<bool(const Holder&)>;
using IsAlive = std::function<bool(const Holder&)>;

struct Context {
  int64_t now = 0;
  int64_t lease_ttl_ms = 0;
  Holder me;         // recorded as the holder of what this process admits
  IsDead is_dead;    // known gone: its in-flight intents are fenced unknown
  IsAlive is_alive;  // known running on this host: its lease running out ends nothing
  bool admitting = true;  // false: the process is stopping, and admits nothing more
  // Signs every certificate commit records, in the same transaction; null:
  // certificates are recorded unsigned.
  const Signer* signer = nullptr;
};

// A prepare whose args are already validated and canonical.
struct Attempt {
  PrepareRequest request;
  std::string canonical_args;
  std::string payload_hash;  // SHA-256 of canonical {"args":..,"tool":..}
  // The ticket's token if this attempt is admitted, and its SHA-256 (for the
  // admission's event), drawn before it is queued: the writer thread's time
  // is what every decision waits for. An empty hash is computed by prepare.
  std::string token;
  std::string token_sha256;
};

// The refusal of a prepare whose intent was recorded for another tool or
// other arguments, naming the recorded tool (rules and the fast path alike).
Refusal payload_mismatch(const std::string& intent, const std::string& recorded_tool,
                         const std::string& requested_tool);

// Admitted actions on domain whose outcome is not known yet: their lease is
// live, or it ran out while their holder is still seen running on this host.
int64_t unsettled_actions(LedgerTxn& txn, const std::string& domain, const Context& ctx);

// *admitted, if given, receives the intent row an admission recorded.
PrepareOutcome prepare(LedgerTxn& txn, const Attempt& attempt, const Context& ctx, IntentRow* admitted = nullptr);

// The certificate of the effect admitted as row, with result, building on
// the parent whose clock is parent_clock (empty for none). Not sealed.
Certificate certificate_of(const IntentRow& row, Json args, const Json& result, const VectorClock& parent_clock);

// A certificate sealed outside the ledger's transaction (fence/sealed_ahead.h)
// from the row `from`: commit uses it iff the row it holds carries the same
// admission (intent, domain, seq, generation, tool, args, parent, read-set,
// clock, agent), and seals its own otherwise. REQUIRES: cert was sealed
// with the result commit is given.
struct Sealed {
  IntentRow from;
  Certificate cert;
  std::string body;  // what cert.seal() returned
};

// commit and abort set *recorded iff they recorded the outcome now (false
// for a retry answered with what is already recorded, and for refusals).
CommitOutcome commit(LedgerTxn& txn, const Ticket& ticket, const Json& result, const Context& ctx,
                     bool* recorded = nullptr, const Sealed* sealed = nullptr);
// unrecorded_result (if any): a result the effect gave that could not be
// recorded, kept in the aborted event as JSON text.
AbortOutcome abort(LedgerTxn& txn, const Ticket& ticket, const std::string& reason, const Context& ctx,
                   bool* recorded = nullptr, const Json* unrecorded_result = nullptr);
HeartbeatOutcome heartbeat(LedgerTxn& txn, const Ticket& ticket, const Context& ctx);
// A refusal says what the intent's state lets the operator do instead.
ClearOutcome clear(LedgerTxn& txn, const std::string& intent, const std::string& operator_name,
                   const std::string& reason, const Context& ctx);
// Takes back the admission of intent that holds token, if it is still in
// flight: aborted, then cleared by this process, both audited, so the next
// prepare is fresh. For an admission whose ticket reached nobody. Returns
// whether it did; throws if the clear is refused (undoing the abort).
bool withdraw(LedgerTxn& txn, const std::string& intent, const std::string& token, const std::string& why,
              const Context& ctx);
// In-flight intents held by dead processes on this host -> unknown.
int64_t reap_dead_holders(LedgerTxn& txn, const Context& ctx);
// Fences one intent iff ticket still holds it (in flight). Returns true iff it did.
bool fence_held(LedgerTxn& txn, const Ticket& ticket, const std::string& why, const Context& ctx);

}  // namespace effectfence::rules
