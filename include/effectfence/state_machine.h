// The fence's state machine, written once.
//
// Every state an intent can be in, every event the ledger records, and which
// event moves an intent from which state to which. The rules
// (src/fence/rules.cc) move intents only through `apply`; `verify` replays
// every intent's events against the same table (HistoryCheck); and the
// schemas' CHECK lists and hand-edit triggers are tested against it
// (src/ledger/state_machine_schema_test.cc, tests/postgres), so the four
// places that know the protocol cannot drift apart silently.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "effectfence/types.h"

namespace effectfence {

// The kinds of rows in the events table (its CHECK lists exactly these).
enum class EventKind {
  admitted,        // a new attempt: none or cleared -> in_flight
  takeover,        // a lease ran out and its holder cannot be seen: a new attempt
  committed,       // in_flight -> done, with a certificate
  aborted,         // in_flight -> failed
  commit_refused,  // a late commit kept for audit; the state does not move
  holder_dead,     // in_flight -> unknown: its holder is gone
  fenced_on_exit,  // in_flight -> unknown: its holder stopped without an outcome
  cleared,         // failed or unknown -> cleared, by an operator (INSERT INTO clears)
  swept,           // done and cleared intents past the result lifetime are forgotten
  domain_evicted,  // an idle domain's row is dropped; its last seq is kept here
};
constexpr std::array<EventKind, 10> kEventKinds = {
    EventKind::admitted,       EventKind::takeover,    EventKind::committed,      EventKind::aborted,
    EventKind::commit_refused, EventKind::holder_dead, EventKind::fenced_on_exit, EventKind::cleared,
    EventKind::swept,          EventKind::domain_evicted};
// The states the intents table stores (every IntentState but none).
constexpr std::array<IntentState, 5> kStoredStates = {IntentState::in_flight, IntentState::done, IntentState::failed,
                                                      IntentState::unknown, IntentState::cleared};

const char* event_kind_name(EventKind kind);
std::optional<EventKind> event_kind_from_name(const std::string& name);

// What the ledger must hold before it lets an intent's state move, so that a
// hand edit of the state column cannot leave an outcome without its record.
enum class Evidence {
  none,         // the fence's own admission (a new token and generation)
  certificate,  // a certificate of this intent and generation
  event,        // an event of this kind for this intent and generation
  clear,        // an audited operator clear: a row in clears
};

struct Transition {
  EventKind event;
  IntentState from;
  IntentState to;
  bool new_attempt;  // a new generation with a new token
  Evidence evidence;
};

// Every allowed move of one intent's state. An (event, from) pair not listed
// here is not a move: the rules refuse it, verify reports it.
constexpr std::array<Transition, 13> kTransitions = {{
    {EventKind::admitted, IntentState::none, IntentState::in_flight, true, Evidence::none},
    {EventKind::admitted, IntentState::cleared, IntentState::in_flight, true, Evidence::none},
    {EventKind::takeover, IntentState::in_flight, IntentState::in_flight, true, Evidence::none},
    {EventKind::committed, IntentState::in_flight, IntentState::done, false, Evidence::certificate},
    // A holder's late commit is the news that its effect ran.
    {EventKind::committed, IntentState::unknown, IntentState::done, false, Evidence::certificate},
    {EventKind::committed, IntentState::cleared, IntentState::done, false, Evidence::certificate},
    {EventKind::aborted, IntentState::in_flight, IntentState::failed, false, Evidence::event},
    {EventKind::aborted, IntentState::unknown, IntentState::failed, false, Evidence::event},
    // A commit whose read-set moved: the effect ran on outdated state.
    {EventKind::commit_refused, IntentState::in_flight, IntentState::failed, false, Evidence::event},
    {EventKind::holder_dead, IntentState::in_flight, IntentState::unknown, false, Evidence::event},
    {EventKind::fenced_on_exit, IntentState::in_flight, IntentState::unknown, false, Evidence::event},
    {EventKind::cleared, IntentState::failed, IntentState::cleared, false, Evidence::clear},
    {EventKind::cleared, IntentState::unknown, IntentState::cleared, false, Evidence::clear},
}};
// A commit_refused event moves its intent only when it fences it (the
// stale read-set above, its detail's reason "stale_read_set"); otherwise it
// keeps a late or edited commit's result for audit and moves nothing.
constexpr const char* kFencingRefusal = "stale_read_set";
// A sweep forgets intents in these states (their rows are deleted; the
// next admission of the name starts again at generation 1).
constexpr std::array<IntentState, 2> kSweptStates = {IntentState::done, IntentState::cleared};

// The move `event` makes from `from`, if it is one.
std::optional<Transition> transition(IntentState from, EventKind event);
// The move from `from` to `to`, if any event makes it.
std::optional<Transition> move_between(IntentState from, IntentState to);
// The state `event` moves `from` to. REQUIRES: transition(from, event)
// exists; otherwise throws std::logic_error (a rule broke the machine).
IntentState apply(IntentState from, EventKind event);
// Whether events of this kind name one intent and move it (or keep it, for
// commit_refused) -- as opposed to ledger-wide and domain events.
bool is_intent_event(EventKind kind);

// Replays a ledger's events against kTransitions, one intent at a time,
// holding only the intent being replayed (so it runs in constant memory on
// any ledger). Each finding names the event id.
class HistoryCheck {
 public:
  struct Finding {
    int64_t event_id;
    std::string intent;
    std::string message;
  };
  // sweeps: the ids of every swept event (a sweep may forget done and
  // cleared intents; the next admission then starts at generation 1).
  explicit HistoryCheck(std::vector<int64_t> sweeps);
  // REQUIRES: each intent's events arrive together, in the order the ledger
  // numbered them (ORDER BY intent, id). Ledger-wide and domain events are
  // ignored. refusal_reason: a commit_refused event's detail reason.
  void event(int64_t id, EventKind kind, const std::string& intent, int64_t generation,
             const std::string& refusal_reason = "");
  const std::vector<Finding>& findings() const { return findings_; }

 private:
  bool swept_between(int64_t after, int64_t before) const;

  std::vector<int64_t> sweeps_;  // sorted
  bool started_ = false;
  std::string intent_;           // the intent being replayed
  IntentState state_ = IntentState::none;
  int64_t generation_ = 0;
  int64_t max_generation_ = 0;  // over every attempt, swept ones too
  int64_t last_event_ = 0;
  std::vector<Finding> findings_;
};

}  // namespace effectfence
