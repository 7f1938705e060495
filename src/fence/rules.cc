#include "fence/rules.h"

#include <stdexcept>

#include "core/sha256.h"
#include "effectfence/refusal_text.h"

namespace effectfence::rules {
namespace {

// Counts a refused attempt in the ledger-wide counters.
void count_refusal(LedgerTxn& txn, Reason reason) {
  Counters delta;
  switch (reason) {
    case Reason::in_flight: delta.refused_in_flight = 1; break;
    case Reason::domain_race: delta.refused_domain_race = 1; break;
    case Reason::stale_read_set: delta.refused_stale_read_set = 1; break;
    case Reason::prior_failure: delta.refused_prior_failure = 1; break;
    case Reason::payload_mismatch: delta.refused_payload_mismatch = 1; break;
    default: break;
  }
  txn.add_counters(delta);
}

Refusal refuse(LedgerTxn& txn, Reason reason, Cause cause, Json detail) {
  count_refusal(txn, reason);
  return Refusal{reason, cause, std::move(detail)};
}

EventRecord event_for(EventKind kind, const IntentRow& row, const std::string& actor) {
  EventRecord e;
  e.kind = kind;
  e.intent = row.intent;
  e.domain = row.domain;
  e.seq = row.seq;
  e.generation = row.generation;
  e.actor = actor;
  return e;
}

Refusal prior_failure(LedgerTxn& txn, const IntentRow& row) {
  return refuse(txn, Reason::prior_failure, Cause::fenced,
                {{"intent", row.intent}, {"state", state_name(row.state)}, {"recorded_reason", row.reason}});
}

void mark_unknown(LedgerTxn& txn, IntentRow& row, const std::string& why, EventKind event_kind,
                  const Context& ctx) {
  row.state = apply(row.state, event_kind);
  row.reason = why;
  // The event first: the ledger fences an attempt in flight only with the
  // event that says why (schema 10 on).
  EventRecord e = event_for(event_kind, row, ctx.me.describe());
  e.detail = {{"reason", why}, {"holder", row.holder.describe()}};
  txn.append_event(e, ctx.now);
  txn.save_outcome(row, ctx.now);
}

std::string dead_holder_reason(const IntentRow& row) {
  return "holder process " + row.holder.describe() + " (agent " + row.agent +
         ") is gone (it exited, or its host restarted) before recording an outcome";
}

// The read-set check shared by prepare and commit (it counts nothing). expected_own is the seq
// the attempt's own domain must be at (commit: the seq it reserved).
std::optional<Refusal> check_read_set(LedgerTxn& txn, const std::vector<ReadSetEntry>& read_set,
                                      const Context& ctx, bool check_in_flight,
                                      const std::string& own_domain = "", int64_t own_seq = 0) {
  for (const ReadSetEntry& entry : read_set) {
    const int64_t expected = entry.domain == own_domain ? own_seq : entry.seq;
    const int64_t actual = txn.load_domain(entry.domain).seq;
    const Json detail = {{"domain", entry.domain}, {"expected", expected}, {"actual", actual}};
    if (entry.domain != own_domain && entry.seq > actual) {
      // A seq the domain never reached was not read anywhere: a wrong argument, not a stale read.
      return Refusal{Reason::invalid_request, Cause::seq_never_reached, detail};
    }
    if (actual != expected) {
      Refusal stale{Reason::stale_read_set, Cause::read_set_moved, detail};
      if (entry.domain == own_domain) stale.detail["own_domain"] = true;
      return stale;
    }
    if (check_in_flight && unsettled_actions(txn, entry.domain, ctx) > 0) {
      return Refusal{Reason::domain_race, Cause::domain_in_flight, detail};
    }
  }
  return std::nullopt;
}

Ticket ticket_of(const IntentRow& row) {
  return Ticket{row.intent, row.domain, row.seq, row.generation, row.token, row.lease_expires_at};
}

bool same_token(const std::string& a, const std::string& b) {
  // Constant time: the token is the capability.
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// Whether an admission issued this ticket: its (domain, seq, generation),
// and its token where the admission recorded the token's hash.
bool issued(LedgerTxn& txn, const Ticket& ticket) {
  const auto hash = txn.admission_token_hash(ticket.intent, ticket.domain, ticket.seq, ticket.generation);
  return hash && (hash->empty() || same_token(*hash, sha256_hex(ticket.token)));
}

// Returns the intent row iff ticket carries its current token and matches
// what was issued under it; otherwise why not.
std::variant<IntentRow, Refusal> row_held_by(LedgerTxn& txn, const Ticket& ticket) {
  auto row = txn.load_intent(ticket.intent);
  // A ticket whose token is not the current one is a lost lease only if an
  // admission issued it; otherwise it is made up, and nothing of it is kept.
  if (!(row && same_token(row->token, ticket.token)) && !issued(txn, ticket)) {
    return Refusal{Reason::ticket_invalid, Cause::not_issued,
                   {{"intent", ticket.intent},
                    {"domain", ticket.domain},
                    {"seq", ticket.seq},
                    {"generation", ticket.generation}}};
  }
  if (!row) {
    return Refusal{Reason::lease_lost, Cause::no_attempt, {{"intent", ticket.intent}}};
  }
  // Each admission draws a new token and a new generation, so the generation
  // the ledger holds with another token is an edited ticket, not a lease
  // lost; or, rarely, a holder whose intent was swept and admitted afresh
  // since (generations start over), so its result is still kept.
  const bool token_mismatch = row->generation == ticket.generation && !same_token(row->token, ticket.token);
  if (token_mismatch) {
    return Refusal{Reason::ticket_invalid, Cause::token_reissued,
                   {{"intent", ticket.intent}, {"current_generation", row->generation}}};
  }
  if (!same_token(row->token, ticket.token)) {
    return Refusal{Reason::lease_lost, Cause::taken_over,
                   {{"intent", ticket.intent},
                    {"current_generation", row->generation},
                    {"holder_agent", row->agent},
                    {"state", state_name(row->state)}}};
  }
  if (row->domain != ticket.domain || row->seq != ticket.seq || row->generation != ticket.generation) {
    return Refusal{Reason::ticket_invalid, Cause::ticket_edited, {{"intent", ticket.intent}}};
  }
  return *row;
}

}  // namespace

Refusal payload_mismatch(const std::string& intent, const std::string& recorded_tool,
                         const std::string& requested_tool) {
  return Refusal{Reason::payload_mismatch, Cause::other_action,
                 {{"intent", intent}, {"recorded_tool", recorded_tool}, {"requested_tool", requested_tool}}};
}

int64_t unsettled_actions(LedgerTxn& txn, const std::string& domain, const Context& ctx) {
  int64_t n = txn.count_live_in_flight(domain, ctx.now);
  if (!ctx.is_alive) return n;
  for (const IntentRow& row : txn.expired_in_flight(domain, ctx.now)) {
    if (ctx.is_alive(row.holder)) ++n;
  }
  return n;
}

PrepareOutcome prepare(LedgerTxn& txn, const Attempt& a, const Context& ctx, IntentRow* admitted) {
  const PrepareRequest& req = a.request;
  auto existing = txn.load_intent(req.intent);
  int64_t generation = 1;
  EventKind admission = EventKind::admitted;
  Json admission_detail = Json::object();
  if (existing) {
    IntentRow& row = *existing;
    if (row.state != IntentState::cleared && row.payload_hash != a.payload_hash) {
      count_refusal(txn, Reason::payload_mismatch);
      return payload_mismatch(req.intent, row.tool, req.tool);
    }
    switch (row.state) {
      case IntentState::done: {
        auto cert = txn.load_certificate(row.cert_hash);
        if (!cert) throw std::runtime_error("intent " + row.intent + " is done but its certificate is missing");
        Counters delta;
        delta.replayed = 1;
        txn.add_counters(delta);
        return Replayed{*cert};
      }
      case IntentState::failed:
      case IntentState::unknown:
        return prior_failure(txn, row);
      case IntentState::in_flight:
        if (ctx.is_dead && ctx.is_dead(row.holder)) {
          mark_unknown(txn, row, dead_holder_reason(row), EventKind::holder_dead, ctx);
          return prior_failure(txn, row);
        }
        if (row.lease_expires_at > ctx.now) {
          return refuse(txn, Reason::in_flight, Cause::held,
                        {{"intent", req.intent},
                         {"holder_agent", row.agent},
                         {"lease_expires_at_ms", row.lease_expires_at},
                         {"lease_ends_in_ms", row.lease_expires_at - ctx.now}});
        }
        // A holder seen running here may be in the middle of the effect: a
        // stalled write, a ledger it could not reach, a clock stepped forward.
        // Only a holder that is gone, or that cannot be seen, loses the intent.
        if (ctx.is_alive && ctx.is_alive(row.holder)) {
          return refuse(txn, Reason::in_flight, Cause::held_past_lease,
                        {{"intent", req.intent},
                         {"holder_agent", row.agent},
                         {"holder", row.holder.describe()},
                         {"lease_expires_at_ms", row.lease_expires_at}});
        }
        admission = EventKind::takeover;
        admission_detail = {{"previous_generation", row.generation},
                            {"previous_holder", row.holder.describe()},
                            {"previous_agent", row.agent},
                            {"lease_expired_at_ms", row.lease_expires_at}};
        break;
      case IntentState::cleared:
      case IntentState::none:
        break;
    }
    generation = row.generation + 1;
  }

  if (!ctx.admitting) {
    return Refusal{Reason::ledger_error, Cause::stopping, {{"intent", req.intent}}};
  }
  if (auto refusal = check_read_set(txn, req.read_set, ctx, /*check_in_flight=*/true)) {
    count_refusal(txn, refusal->reason);
    return *refusal;
  }

  if (req.parent && !txn.load_certificate(*req.parent)) {
    return Refusal{Reason::invalid_request, Cause::unknown_parent, {{"parent", *req.parent}}};
  }
  const auto reserved = txn.reserve_seq(req.domain, ctx.now);
  if (!reserved) {
    return refuse(txn, Reason::domain_race, Cause::domain_moved, {{"domain", req.domain}});
  }
  const DomainRow& domain = *reserved;
  const std::string parent = req.parent ? *req.parent : domain.head;

  IntentRow row;
  row.intent = req.intent;
  row.state = apply(existing ? existing->state : IntentState::none, admission);
  row.domain = req.domain;
  row.tool = req.tool;
  row.args = a.canonical_args;
  row.payload_hash = a.payload_hash;
  row.agent = req.agent;
  row.seq = domain.seq + 1;
  row.generation = generation;
  row.token = a.token;
  // Without randomness every ticket would share one token: refuse instead.
  if (row.token.empty()) throw std::runtime_error("the system random number generator failed; no ticket issued");
  row.read_set = req.read_set;
  row.parent = parent;
  row.known_clock = req.known_clock.value_or(VectorClock{});
  row.holder = ctx.me;
  row.lease_expires_at = ctx.now + ctx.lease_ttl_ms;
  row.admitted_at = ctx.now;
  if (existing) {
    txn.save_intent(row, ctx.now);
  } else {
    txn.insert_intent(row, ctx.now);
  }

  EventRecord e = event_for(admission, row, req.agent);
  e.detail = admission_detail;
  e.detail["holder"] = ctx.me.describe();
  // The token is the capability and stays secret; its hash tells a ticket
  // this admission issued from a made-up one, after the token has changed.
  e.detail["token_sha256"] = a.token_sha256.empty() ? sha256_hex(a.token) : a.token_sha256;
  txn.append_event(e, ctx.now);
  Counters delta;
  delta.admitted = 1;
  txn.add_counters(delta);
  if (admitted) *admitted = row;
  return Admitted{ticket_of(row)};
}

Certificate certificate_of(const IntentRow& row, Json args, const Json& result, const VectorClock& parent_clock) {
  Certificate cert;
  cert.intent = row.intent;
  cert.parent = row.parent;
  cert.domain = row.domain;
  cert.seq = row.seq;
  cert.generation = row.generation;
  cert.tool = row.tool;
  cert.args = std::move(args);
  cert.result = result;
  cert.read_set = row.read_set;
  cert.agent = row.agent;
  cert.vector_clock = row.known_clock;
  cert.vector_clock.merge(parent_clock);
  cert.vector_clock.tick(row.agent);
  return cert;
}

namespace {

// A result whose commit is refused is kept in the audit log, so nothing an
// agent reports is lost: the effect may have run. why names the refusal.
void keep_refused_result(LedgerTxn& txn, const Ticket& ticket, const Json& result, const char* why,
                         const Context& ctx) {
  EventRecord e;
  e.kind = EventKind::commit_refused;
  e.intent = ticket.intent;
  e.domain = ticket.domain;
  e.seq = ticket.seq;
  e.generation = ticket.generation;
  e.actor = ctx.me.describe();
  e.detail = {{"reason", why}, {"result", result}};
  txn.append_event(e, ctx.now);
}

}  // namespace

namespace {

bool same_admission(const IntentRow& a, const IntentRow& b) {
  return a.intent == b.intent && a.domain == b.domain && a.seq == b.seq && a.generation == b.generation &&
         a.tool == b.tool && a.args == b.args && a.parent == b.parent && a.read_set == b.read_set &&
         a.known_clock == b.known_clock && a.agent == b.agent;
}

}  // namespace

CommitOutcome commit(LedgerTxn& txn, const Ticket& ticket, const Json& result, const Context& ctx,
                     bool* recorded, const Sealed* sealed) {
  if (recorded) *recorded = false;
  auto held = row_held_by(txn, ticket);
  if (auto* refusal = std::get_if<Refusal>(&held)) {
    // A zombie, or a holder whose intent was swept (and perhaps admitted again
    // under the same generation): only a ticket edited in its seq, domain or
    // generation is not worth keeping.
    if (refusal->reason == Reason::lease_lost) keep_refused_result(txn, ticket, result, "lease_lost", ctx);
    if (refusal->cause == Cause::token_reissued) {
      keep_refused_result(txn, ticket, result, "token_mismatch", ctx);
    }
    return *refusal;
  }
  IntentRow row = std::get<IntentRow>(held);

  if (row.state == IntentState::done) {
    // A retried commit (its answer was lost) gets the same certificate.
    auto cert = txn.load_certificate(row.cert_hash);
    if (cert && canonicalize(cert->result) == canonicalize(result)) return *cert;
    keep_refused_result(txn, ticket, result, "already_committed", ctx);
    return Refusal{Reason::ticket_invalid, Cause::other_result,
                   {{"intent", row.intent}, {"certificate", row.cert_hash}}};
  }
  // A holder's commit is the news that its effect ran. An unknown outcome
  // learns it late; a cleared one (no attempt admitted since, or the token
  // would differ) was cleared on the belief that it had not: recorded as
  // done, its next prepare replays this result instead of running again.
  if (row.state != IntentState::in_flight && row.state != IntentState::unknown &&
      row.state != IntentState::cleared) {
    keep_refused_result(txn, ticket, result, "lease_lost", ctx);
    return Refusal{Reason::lease_lost, Cause::outcome_recorded,
                   {{"intent", row.intent}, {"state", state_name(row.state)}}};
  }

  // Re-validate the read-set: if what the decision was based on moved, the
  // effect ran on outdated state. Fence it for a person; keep the result.
  if (auto stale = check_read_set(txn, row.read_set, ctx, /*check_in_flight=*/false, row.domain, row.seq)) {
    row.state = apply(row.state, EventKind::commit_refused);
    row.reason = "commit refused: " + explain(*stale, Step::commit);
    EventRecord e = event_for(EventKind::commit_refused, row, row.agent);
    Json moved = stale->detail;
    moved.erase("own_domain");
    e.detail = {{"reason", kFencingRefusal}, {"read_set", std::move(moved)}, {"result", result}};
    txn.append_event(e, ctx.now);  // first, as in mark_unknown
    txn.save_outcome(row, ctx.now);
    stale->detail["after_effect"] = true;
    return *stale;
  }

  Certificate cert;
  std::string body;
  if (sealed && same_admission(row, sealed->from)) {
    cert = sealed->cert;
    body = sealed->body;
  } else {
    JsonError stored_args_error;
    auto args = parse_strict(row.args, &stored_args_error, WideIntegers::as_doubles);
    if (!args) throw std::runtime_error("stored args of " + row.intent + ": " + stored_args_error.message);
    VectorClock parent_clock;
    if (!row.parent.empty()) parent_clock = txn.certificate_clock(row.parent).value_or(VectorClock{});
    cert = certificate_of(row, std::move(*args), result, parent_clock);
    body = cert.seal();
  }
  if (cert.hash.empty()) throw std::runtime_error("certificate of " + row.intent + " has no canonical form");
  txn.insert_certificate(cert, body, ctx.now);
  // Signed here, on the writer: the signature covers how many unsigned
  // certificates the ledger held when signing began, which only the
  // transaction knows.
  if (ctx.signer) {
    const int64_t unsigned_before = txn.unsigned_before_signing();
    const CertificateSignature s = ctx.signer->sign(cert.hash, unsigned_before);
    txn.insert_signature(cert.hash, s.key_id, s.signature, unsigned_before, ctx.now);
  }
  txn.record_domain_effect(row.domain, cert.vector_clock, cert.hash, row.seq, ctx.now);

  const IntentState before = row.state;
  row.state = apply(before, EventKind::committed);
  row.cert_hash = cert.hash;
  row.reason = before == IntentState::unknown   ? "resolved by its holder's late commit"
               : before == IntentState::cleared ? "its holder committed after it was cleared: the effect ran"
                                                : "";
  txn.save_outcome(row, ctx.now);
  EventRecord e = event_for(EventKind::committed, row, row.agent);
  e.detail = {{"certificate", cert.hash}};
  if (before == IntentState::unknown) e.detail["resolved_unknown"] = true;
  if (before == IntentState::cleared) e.detail["after_clear"] = true;
  txn.append_event(e, ctx.now);
  Counters delta;
  delta.committed = 1;
  txn.add_counters(delta);
  if (recorded) *recorded = true;
  return cert;
}

AbortOutcome abort(LedgerTxn& txn, const Ticket& ticket, const std::string& reason, const Context& ctx,
                   bool* recorded, const Json* unrecorded_result) {
  if (recorded) *recorded = false;
  auto held = row_held_by(txn, ticket);
  if (auto* refusal = std::get_if<Refusal>(&held)) return *refusal;
  IntentRow row = std::get<IntentRow>(held);
  if (row.state == IntentState::failed) return Aborted{row.intent};  // a retried abort
  if (row.state != IntentState::in_flight && row.state != IntentState::unknown) {
    return Refusal{Reason::lease_lost, Cause::not_in_flight,
                   {{"intent", row.intent}, {"state", state_name(row.state)}}};
  }
  row.state = apply(row.state, EventKind::aborted);
  row.reason = reason.empty() ? "aborted by its holder" : "aborted: " + reason;
  EventRecord e = event_for(EventKind::aborted, row, row.agent);
  e.detail = {{"reason", reason}};
  // As text: such a result may hold integers past ±2^53, which the text
  // keeps digit for digit (invalid UTF-8 is replaced, as it must be in JSON).
  if (unrecorded_result) {
    e.detail["result_json"] = unrecorded_result->dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  txn.append_event(e, ctx.now);  // first, as in mark_unknown
  txn.save_outcome(row, ctx.now);
  Counters delta;
  delta.aborted = 1;
  txn.add_counters(delta);
  if (recorded) *recorded = true;
  return Aborted{row.intent};
}

HeartbeatOutcome heartbeat(LedgerTxn& txn, const Ticket& ticket, const Context& ctx) {
  auto held = row_held_by(txn, ticket);
  if (auto* refusal = std::get_if<Refusal>(&held)) return *refusal;
  IntentRow row = std::get<IntentRow>(held);
  if (row.state != IntentState::in_flight) {
    return Refusal{Reason::lease_lost, Cause::not_in_flight,
                   {{"intent", row.intent}, {"state", state_name(row.state)}}};
  }
  // Only ever longer: a clock stepped back, or a server with a shorter lease
  // TTL, must not bring the expiry closer (schema 9 refuses that too).
  row.lease_expires_at = std::max(row.lease_expires_at, ctx.now + ctx.lease_ttl_ms);
  txn.save_intent(row, ctx.now);
  return Extended{row.lease_expires_at};
}

namespace {

// How the holder of an intent in flight is seen from here, for an operator
// whose clear was refused: "leased", "gone", "running_here" or "unseen".
const char* holder_seen(const IntentRow& row, const Context& ctx) {
  if (row.lease_expires_at > ctx.now) return "leased";
  if (ctx.is_dead && ctx.is_dead(row.holder)) return "gone";
  if (ctx.is_alive && ctx.is_alive(row.holder)) return "running_here";
  return "unseen";
}

}  // namespace

ClearOutcome clear(LedgerTxn& txn, const std::string& intent, const std::string& operator_name,
                   const std::string& reason, const Context& ctx) {
  auto row = txn.load_intent(intent);
  const std::string previous = row ? state_name(row->state) : "none";
  if (const Status requested = txn.request_clear(intent, operator_name, reason); !requested.ok()) {
    Json detail = {{"intent", intent}, {"state", previous}, {"ledger_said", requested.message()}};
    if (row && row->state == IntentState::in_flight) {
      detail["holder"] = row->holder.describe();
      detail["holder_seen"] = holder_seen(*row, ctx);
      detail["lease_ends_in_ms"] = row->lease_expires_at - ctx.now;
    }
    return Refusal{Reason::invalid_request, Cause::clear_refused, std::move(detail)};
  }
  return Cleared{intent, previous};
}

int64_t reap_dead_holders(LedgerTxn& txn, const Context& ctx) {
  int64_t reaped = 0;
  for (IntentRow& row : txn.in_flight_on_host(ctx.me.host)) {
    if (!ctx.is_dead || !ctx.is_dead(row.holder)) continue;
    mark_unknown(txn, row, dead_holder_reason(row), EventKind::holder_dead, ctx);
    ++reaped;
  }
  return reaped;
}

bool withdraw(LedgerTxn& txn, const std::string& intent, const std::string& token, const std::string& why,
              const Context& ctx) {
  // Abort would also take an intent already fenced unknown; only one still
  // in flight under this very admission may be taken back.
  const auto row = txn.load_intent(intent);
  if (!row || row->state != IntentState::in_flight || !same_token(row->token, token)) return false;
  bool recorded = false;
  abort(txn, ticket_of(*row), why, ctx, &recorded);
  if (!recorded) return false;
  const ClearOutcome cleared = clear(txn, intent, ctx.me.describe(), "withdrawn: " + why, ctx);
  // Both or neither: a withdrawal that cannot clear leaves the admission in flight.
  if (const auto* refusal = std::get_if<Refusal>(&cleared)) throw std::runtime_error(explain(*refusal, Step::clear));
  return true;
}

bool fence_held(LedgerTxn& txn, const Ticket& ticket, const std::string& why, const Context& ctx) {
  auto held = row_held_by(txn, ticket);
  auto* row = std::get_if<IntentRow>(&held);
  if (!row || row->state != IntentState::in_flight) return false;
  mark_unknown(txn, *row, why, EventKind::fenced_on_exit, ctx);
  return true;
}

}  // namespace effectfence::rules
