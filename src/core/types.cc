#include "effectfence/types.h"

#include <array>
#include <initializer_list>
#include <limits>
#include <utility>

#include "core/enum_names.h"
#include "core/json_members.h"

namespace effectfence {
namespace {

constexpr std::array<std::pair<Reason, const char*>, 10> kReasonNames = {{
    {Reason::in_flight, "in_flight"},
    {Reason::domain_race, "domain_race"},
    {Reason::stale_read_set, "stale_read_set"},
    {Reason::prior_failure, "prior_failure"},
    {Reason::payload_mismatch, "payload_mismatch"},
    {Reason::lease_lost, "lease_lost"},
    {Reason::ticket_invalid, "ticket_invalid"},
    {Reason::invalid_request, "invalid_request"},
    {Reason::ledger_busy, "ledger_busy"},
    {Reason::ledger_error, "ledger_error"},
}};

constexpr std::array<std::pair<IntentState, const char*>, 6> kStateNames = {{
    {IntentState::none, "none"},
    {IntentState::in_flight, "in_flight"},
    {IntentState::done, "done"},
    {IntentState::failed, "failed"},
    {IntentState::unknown, "unknown"},
    {IntentState::cleared, "cleared"},
}};

}  // namespace

const char* reason_name(Reason reason) { return name_of(kReasonNames, reason, "invalid_reason"); }

std::optional<Reason> reason_from_name(const std::string& name) { return value_of(kReasonNames, name); }

bool is_storage_failure(Cause cause) {
  switch (cause) {
    case Cause::storage_failed:
    case Cause::disk_failed:
    case Cause::undo_failed:
    case Cause::file_replaced:
    case Cause::rolled_back:
    case Cause::outcome_unknown:
      return true;
    default:
      return false;
  }
}

const char* state_name(IntentState s) { return name_of(kStateNames, s, "invalid_state"); }

std::optional<IntentState> state_from_name(const std::string& name) { return value_of(kStateNames, name); }

Json Ticket::to_json() const {
  return Json{
      {"intent", intent},
      {"domain", domain},
      {"seq", seq},
      {"generation", generation},
      {"token", token},
      {"lease_expires_at_ms", lease_expires_at_ms},
  };
}

bool Ticket::same_attempt(const Ticket& other) const {
  return token == other.token && intent == other.intent && domain == other.domain && seq == other.seq &&
         generation == other.generation;
}

std::optional<Ticket> Ticket::from_json(const Json& j) {
  if (!j.is_object()) return std::nullopt;
  // Numbers as the inputSchema declares them (integers >= 0, 3.0 included):
  // a client that re-encodes 1 as 1.0 passes back the same ticket.
  auto intent = string_member(j, "intent");
  auto domain = string_member(j, "domain");
  const auto seq = non_negative_member(j, "seq");
  const auto generation = non_negative_member(j, "generation");
  auto token = string_member(j, "token");
  const auto lease_expires_at_ms = non_negative_member(j, "lease_expires_at_ms");
  if (!intent || !domain || !seq || !generation || !token || !lease_expires_at_ms) return std::nullopt;
  Ticket ticket;
  ticket.intent = std::move(*intent);
  ticket.domain = std::move(*domain);
  ticket.seq = *seq;
  ticket.generation = *generation;
  ticket.token = std::move(*token);
  ticket.lease_expires_at_ms = *lease_expires_at_ms;
  return ticket;
}

Json IntentStatus::to_json() const {
  Json j = {
      {"state", state_name(state)},
      {"intent", intent},
      {"domain", domain},
      {"tool", tool},
      {"agent", agent},
      {"args", args},
      {"seq", seq},
      {"generation", generation},
  };
  if (state == IntentState::in_flight) j["lease_expires_at_ms"] = lease_expires_at_ms;
  j["updated_at_ms"] = updated_at_ms;
  if (!reason.empty()) j["reason"] = reason;
  if (cert) j["cert"] = cert->to_json();
  return j;
}

Json DomainStatus::to_json() const {
  return Json{
      {"domain", domain},
      {"exists", exists},
      {"seq", seq},
      {"clock", clock.to_json()},
      {"head", head.empty() ? Json(nullptr) : Json(head)},
      {"in_flight", in_flight},
      {"fenced", fenced},
  };
}

namespace {

int64_t saturating_add(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (!__builtin_add_overflow(a, b, &sum)) return sum;
  return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

int64_t saturating_sum(std::initializer_list<int64_t> values) {
  int64_t sum = 0;
  for (int64_t v : values) sum = saturating_add(sum, v);
  return sum;
}

}  // namespace

int64_t Counters::refusals() const {
  return saturating_sum({refused_stale_read_set, refused_domain_race, refused_in_flight, refused_prior_failure,
                         refused_payload_mismatch});
}

int64_t Counters::total_attempts() const { return saturating_sum({admitted, replayed, refusals()}); }

int64_t Counters::prevented() const { return saturating_add(replayed, refusals()); }

Counters& Counters::operator+=(const Counters& o) {
  admitted = saturating_add(admitted, o.admitted);
  replayed = saturating_add(replayed, o.replayed);
  refused_stale_read_set = saturating_add(refused_stale_read_set, o.refused_stale_read_set);
  refused_domain_race = saturating_add(refused_domain_race, o.refused_domain_race);
  refused_in_flight = saturating_add(refused_in_flight, o.refused_in_flight);
  refused_prior_failure = saturating_add(refused_prior_failure, o.refused_prior_failure);
  refused_payload_mismatch = saturating_add(refused_payload_mismatch, o.refused_payload_mismatch);
  committed = saturating_add(committed, o.committed);
  aborted = saturating_add(aborted, o.aborted);
  return *this;
}

Json Counters::to_json() const {
  return Json{
      {"admitted", admitted},
      {"replayed", replayed},
      {"refused",
       {
           {"stale_read_set", refused_stale_read_set},
           {"domain_race", refused_domain_race},
           {"in_flight", refused_in_flight},
           {"prior_failure", refused_prior_failure},
           {"payload_mismatch", refused_payload_mismatch},
       }},
      {"total_attempts", total_attempts()},
      {"prevented", prevented()},
      {"committed", committed},
      {"aborted", aborted},
  };
}

Json Stats::to_json() const { return Json{{"process", process.to_json()}, {"ledger", ledger.to_json()}}; }

}  // namespace effectfence
