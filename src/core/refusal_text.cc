#include "effectfence/refusal_text.h"

#include <cstdint>

namespace effectfence {
namespace {

// A fact as text: strings as they are, numbers in decimal, absent as "".
std::string fact(const Json& detail, const char* key) {
  if (!detail.is_object()) return "";
  const auto it = detail.find(key);
  if (it == detail.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  return it->dump();
}

bool flag(const Json& detail, const char* key) {
  if (!detail.is_object()) return false;
  const auto it = detail.find(key);
  return it != detail.end() && it->is_boolean() && it->get<bool>();
}

int64_t number(const Json& detail, const char* key) {
  if (!detail.is_object()) return 0;
  const auto it = detail.find(key);
  return it != detail.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

// "12 s", rounded up, never negative.
std::string seconds(int64_t ms) {
  const int64_t s = (ms + 999) / 1000;
  return std::to_string(s > 0 ? s : 0) + " s";
}

const char* call_name(Step step) {
  switch (step) {
    case Step::prepare: return "fence_prepare";
    case Step::commit: return "fence_commit";
    case Step::abort: return "fence_abort";
    case Step::heartbeat: return "fence_heartbeat";
    case Step::clear: return "clear";
    case Step::read: return "fence_status";
  }
  return "call";
}

std::string quoted(const std::string& name) { return "'" + name + "'"; }

std::string bad_argument(const Json& d) {
  const std::string field = fact(d, "field");
  const std::string problem = fact(d, "problem");
  if (problem == "empty") return field + " must be a non-empty string";
  if (problem == "nul") return field + " contains a NUL character (U+0000); names are text without it";
  if (problem == "too_long") return field + " is longer than " + fact(d, "limit") + " characters";
  if (problem == "negative_seq") return "read_set seq must be >= 0 (domain " + quoted(fact(d, "domain")) + ")";
  if (problem == "missing") return "a " + field + " is required to clear a fenced intent (it goes in the audit log)";
  if (problem == "schema") return fact(d, "error");
  return field + ": " + fact(d, "error");  // unencodable
}

std::string read_set_moved(const Json& d) {
  const std::string decided = flag(d, "own_domain") ? "this attempt's admission took seq " + fact(d, "expected")
                                                    : "you decided at seq " + fact(d, "expected");
  const std::string moved = "domain " + quoted(fact(d, "domain")) + " has moved since you read it (" + decided +
                            ", it is now at " + fact(d, "actual") +
                            "). Do not run the tool: re-read the domain (fence_status) and decide again.";
  if (!flag(d, "after_effect")) return moved;
  return "the effect was run but not certified: " + moved +
         " The intent is now fenced as failed for an operator to reconcile.";
}

// What the operator who tried to clear it can do about an intent in this
// state, after the ledger's own sentence.
std::string clear_refused(const Json& d) {
  const std::string said = fact(d, "ledger_said");
  const std::string state = fact(d, "state");
  const std::string holder = fact(d, "holder");
  const std::string seen = fact(d, "holder_seen");
  std::string because;
  if (state == "cleared") {
    because = " It is cleared already: its next prepare is fresh, so there is nothing to clear.";
  } else if (state == "done") {
    because = " It is done: its effect ran, and late duplicates get its result replayed.";
  } else if (state == "in_flight" && seen == "leased") {
    because = " It is in flight: its holder (" + holder + ") may be running the effect now; its lease ends in " +
              seconds(number(d, "lease_ends_in_ms")) + ". Wait for its outcome.";
  } else if (state == "in_flight" && seen == "gone") {
    because = " It is in flight past its lease, and its holder (" + holder + ") is gone: the next prepare of it, "
              "or a server starting on this host, fences it as unknown, which you can then check and clear.";
  } else if (state == "in_flight" && seen == "running_here") {
    because = " It is in flight past its lease, held by " + holder + ", which still runs on this host and may be "
              "in the middle of the effect. If it will never finish, stop it (kill -TERM its pid): it then fences "
              "the intent as unknown, which you can check and clear.";
  } else if (state == "in_flight") {
    because = " It is in flight past its lease, held by " + holder + ", which cannot be seen from here (another "
              "host): the next prepare of it takes the attempt over and runs the effect again. If that process may "
              "still be running it, stop it there first.";
  }
  const bool ended = (!said.empty() && said.back() == '.') || because.empty();
  return said + (ended ? "" : ".") + because;
}

// "ledger: " or "ledger NAME: ", as the ledger names itself in errors.
std::string ledger_prefix(const Json& d) {
  const std::string name = fact(d, "ledger");
  return name.empty() ? "ledger: " : "ledger " + name + ": ";
}

std::string storage_failed(const Json& d) {
  std::string text = ledger_prefix(d) + fact(d, "step") + ": " + fact(d, "error") + "; nothing was decided";
  if (const std::string undo = fact(d, "undo_error"); !undo.empty()) {
    text += " (and undoing it failed: " + undo + ")";
  }
  return text;
}

}  // namespace

std::string explain(const Refusal& refusal, Step step) {
  const Json& d = refusal.detail;
  const std::string intent = quoted(fact(d, "intent"));
  const std::string call = call_name(step);
  switch (refusal.cause) {
    case Cause::bad_argument:
      return bad_argument(d);
    case Cause::seq_never_reached:
      return "read_set names seq " + fact(d, "expected") + " of domain " + quoted(fact(d, "domain")) +
             ", which is only at seq " + fact(d, "actual") +
             ", so nobody read it there. Do not run the tool: read the domain with fence_status and put the seq "
             "it reports in read_set.";
    case Cause::unknown_parent:
      return "parent certificate " + fact(d, "parent") +
             " is not in this ledger; pass the hash of a certificate this ledger issued, or omit parent";
    case Cause::clear_refused:
      return clear_refused(d);
    case Cause::held:
      return "another attempt of intent " + intent + " (agent " + fact(d, "holder_agent") +
             ") is in flight; do not run the tool. Retry fence_prepare in a few seconds: you will get its "
             "recorded result, or the lease expires in " +
             seconds(number(d, "lease_ends_in_ms")) + ".";
    case Cause::held_past_lease:
      return "another attempt of intent " + intent + " (agent " + fact(d, "holder_agent") +
             ") is in flight; do not run the tool. Its lease ran out, but its holder, process " + fact(d, "holder") +
             ", is still running on this host, so the effect may be under way. Retry fence_prepare later: you "
             "will get its recorded result, and if that process ends without one the intent is fenced for an "
             "operator.";
    case Cause::same_instant:
      return "an identical attempt of intent " + intent +
             " is in flight in this process; do not run the tool. Retry fence_prepare in a few seconds to get its "
             "recorded result.";
    case Cause::domain_in_flight:
      return "domain " + quoted(fact(d, "domain")) +
             " has an action in flight whose outcome is not known yet, so the state you read may be about to "
             "change. Do not run the tool: wait a few seconds, re-read the domain and decide again.";
    case Cause::domain_moved:
      return "domain " + quoted(fact(d, "domain")) +
             " moved while this attempt was being decided; do not run the tool; re-read the domain and decide "
             "again.";
    case Cause::read_set_moved:
      return read_set_moved(d);
    case Cause::fenced:
      return "intent " + intent + " is fenced as " + fact(d, "state") + ": " + fact(d, "recorded_reason") +
             ". Its effect may or may not have happened; do not run the tool. An operator must check and clear "
             "it (effectfence clear) before it can run again.";
    case Cause::other_action: {
      const std::string recorded_tool = fact(d, "recorded_tool");
      const std::string requested_tool = fact(d, "requested_tool");
      const std::string recorded = recorded_tool != requested_tool
                                       ? "tool " + quoted(recorded_tool) + ", not " + quoted(requested_tool)
                                       : "tool " + quoted(recorded_tool) + " with other arguments";
      return "intent " + intent + " was recorded for a different action (" + recorded +
             "). Do not run the tool: one intent id names one action; use a new intent id for a different "
             "action.";
    }
    case Cause::not_issued:
      return call + " refused: no admission of intent " + intent + " issued this ticket (generation " +
             fact(d, "generation") + ", seq " + fact(d, "seq") + " of domain " + quoted(fact(d, "domain")) +
             "): an edited or made-up ticket. Nothing was recorded. Send the ticket exactly as fence_prepare "
             "returned it.";
    case Cause::no_attempt:
      return call + " refused: intent " + intent +
             " has no attempt in the ledger (never admitted, or finished and swept after the result lifetime). "
             "This " + call + " was not recorded as an outcome; a certificate recorded before the sweep is kept.";
    case Cause::token_reissued:
      return call + " refused: the ticket's token for intent " + intent +
             " is not the one the ledger issued for its generation " + fact(d, "current_generation") +
             " (an edited ticket, or an attempt whose intent was swept and admitted again since). Send the ticket "
             "exactly as fence_prepare returned it.";
    case Cause::taken_over:
      return call + " refused: your lease on intent " + intent + " was lost; generation " +
             fact(d, "current_generation") + " (agent " + fact(d, "holder_agent") + ") now holds it, state " +
             fact(d, "state") + ". Your " + call + " was not recorded as the outcome.";
    case Cause::ticket_edited:
      return call + " refused: the ticket for intent " + intent +
             " does not match what the ledger issued (edited ticket?). Send the ticket exactly as fence_prepare "
             "returned it.";
    case Cause::ticket_has_nul:
      return "the ticket holds a NUL character (U+0000), which no admission issues; send the ticket exactly as "
             "fence_prepare returned it";
    case Cause::ticket_unreadable:
      return "the prepared ticket lacks a field or has one of the wrong type";
    case Cause::other_result:
      return "intent " + intent +
             " was already committed with a different result; the first result stands (yours is kept in the "
             "audit log)";
    case Cause::outcome_recorded:
      return "fence_commit refused: intent " + intent + " is " + fact(d, "state") +
             "; an outcome is already recorded. Your result is kept in the audit log, not as the outcome.";
    case Cause::not_in_flight: {
      std::string text = call + " refused: intent " + intent + " is " + fact(d, "state");
      if (step == Step::heartbeat && fact(d, "state") == "unknown") {
        text += " (its holder was thought gone); if your effect finished, fence_commit with this ticket still "
                "records it";
      }
      return text;
    }
    case Cause::locked:
      if (fact(d, "engine") == "postgresql") {
        return "the PostgreSQL ledger stayed locked by another decision beyond the busy timeout; nothing was "
               "decided; retry in a few seconds";
      }
      return "the ledger stayed locked by another process beyond the busy timeout; nothing was decided; retry in "
             "a few seconds";
    case Cause::storage_failed:
      return storage_failed(d);
    case Cause::disk_failed:
      return ledger_prefix(d) + fact(d, "step") + ": the disk failed (" + fact(d, "error") +
             "); whether the decisions in flight were recorded is unknown. This process refuses every decision "
             "from now on, since what it writes after a failed write or sync cannot be trusted to survive: free "
             "space or repair the disk, then restart it";
    case Cause::undo_failed:
      return ledger_prefix(d) +
             "a failed decision could be neither undone nor rolled back with its transaction, so whether what "
             "this process writes next is sound is unknown. This process refuses every decision from now on: "
             "restart it";
    case Cause::file_replaced:
      return ledger_prefix(d) + "the file " + fact(d, "path") +
             " was deleted or replaced while this process had it open, so what it decides now would fence "
             "nothing against the other processes. This process refuses every decision from now on: put the "
             "ledger back (or restore it from a backup), then restart it";
    case Cause::rolled_back: {
      const std::string error = fact(d, "error");
      return ledger_prefix(d) + "SQLite rolled back the shared transaction" +
             (error.empty() ? "" : " (" + fact(d, "step") + ": " + error + ")") +
             "; nothing was decided; retry in a few seconds";
    }
    case Cause::closing:
      return ledger_prefix(d) + "closing; nothing was decided";
    case Cause::stopping:
      return "this server is stopping and admits nothing more: nothing was decided. Do not run the tool; retry "
             "fence_prepare once your client is connected to a running server.";
    case Cause::outcome_unknown:
      return ledger_prefix(d) + "the connection was lost while committing (" + fact(d, "error") +
             "), so this decision may or may not have been recorded. Do not run the tool on this answer. Retry "
             "the same call: a recorded commit is returned again; a recorded admission, whose ticket nobody "
             "received, is taken back once the ledger answers, and a retry is refused in_flight until then";
    case Cause::no_decision:
    case Cause::none:
      break;
  }
  return std::string("refused: ") + reason_name(refusal.reason);
}

std::string advise(Reason reason, Step step) {
  const bool before_effect = step == Step::prepare;
  switch (reason) {
    case Reason::in_flight:
      return "another attempt of this intent is in flight; do not run the tool; retry fence_prepare in a few seconds";
    case Reason::domain_race:
      return "another action on this domain is in flight or won the same instant; do not run the tool; check "
             "fence_status for the domain, confirm your decision still holds, then retry fence_prepare with an "
             "up-to-date read_set";
    case Reason::stale_read_set:
      if (before_effect) {
        return "something your decision read has changed since (see detail); do not run the "
               "tool; read the current state again (fence_status gives each domain's seq), decide again, and call "
               "fence_prepare with the new read_set";
      }
      return "a domain your decision read moved before the commit, so the effect ran on outdated state; the intent "
             "is now fenced as failed; tell an operator, who must reconcile and clear it";
    case Reason::prior_failure:
      return "an earlier attempt of this intent failed or its outcome is unknown, so it may have taken effect; do "
             "not run the tool; an operator must reconcile and clear the intent (effectfence clear) before it can "
             "be tried again";
    case Reason::payload_mismatch:
      return "this intent id was already used for a different tool or args; do not run the tool; a different "
             "action needs its own intent id";
    case Reason::lease_lost:
      if (step == Step::commit) {
        return "this ticket no longer holds the intent (its lease lapsed and another attempt took over, or it was "
               "fenced), so the result was not recorded; do not retry the commit; tell an operator the tool ran, "
               "with its result";
      }
      return "this ticket no longer holds the intent (it was already committed, its lease lapsed and another "
             "attempt took over, or it was fenced; see explanation); nothing was recorded; check fence_status before "
             "doing anything else";
    case Reason::ticket_invalid:
      if (step == Step::commit) {
        return "the ledger did not take this commit (see explanation): the ticket differs from what fence_prepare "
               "issued (pass the \"prepared\" object back unchanged), or the intent was already committed with "
               "another result, which stands; do not run the tool again";
      }
      return "the prepared ticket does not match what the ledger issued; pass the \"prepared\" object from "
             "fence_prepare unchanged";
    case Reason::invalid_request:
      return "these arguments cannot describe an action; do not run the tool; fix them and try again";
    case Reason::ledger_busy:
      if (step == Step::commit) {
        return "the ledger stayed locked and the result is not recorded yet; retry fence_commit with the same "
               "ticket and result in a few seconds";
      }
      if (step == Step::abort || step == Step::heartbeat) {
        return "the ledger stayed locked, so nothing was decided; your ticket still holds the intent; retry with the "
               "same ticket in a few seconds";
      }
      return "the ledger stayed locked, so nothing was decided; do not run the tool yet; retry in a few seconds";
    case Reason::ledger_error:
      if (step == Step::commit) {
        return "the result could not be recorded; retry fence_commit with the same ticket and result, and if it "
               "keeps failing tell an operator the tool ran";
      }
      if (step == Step::abort || step == Step::heartbeat) {
        return "the fence could not record this (see explanation: the ledger failed, or this server is stopping); "
               "your ticket may still hold the intent: keep it, retry with the same ticket in a few seconds, and "
               "if it keeps failing tell an operator which intent you hold";
      }
      // Not "nothing was decided": a connection lost while committing leaves that open.
      return "the fence could not decide (see explanation: the ledger failed, or this server is stopping), so you "
             "hold nothing: do not run the tool; retry fence_prepare later, and tell an operator if it keeps "
             "failing";
  }
  return "refused; do not run the tool";
}

}  // namespace effectfence
