#include "effectfence/state_machine.h"

#include <algorithm>
#include <stdexcept>

#include "core/enum_names.h"

namespace effectfence {
namespace {

constexpr std::array<std::pair<EventKind, const char*>, 10> kEventKindNames = {{
    {EventKind::admitted, "admitted"},
    {EventKind::takeover, "takeover"},
    {EventKind::committed, "committed"},
    {EventKind::aborted, "aborted"},
    {EventKind::commit_refused, "commit_refused"},
    {EventKind::holder_dead, "holder_dead"},
    {EventKind::fenced_on_exit, "fenced_on_exit"},
    {EventKind::cleared, "cleared"},
    {EventKind::swept, "swept"},
    {EventKind::domain_evicted, "domain_evicted"},
}};

bool swept_state(IntentState s) {
  return std::find(kSweptStates.begin(), kSweptStates.end(), s) != kSweptStates.end();
}

}  // namespace

const char* event_kind_name(EventKind kind) { return name_of(kEventKindNames, kind, "invalid_event_kind"); }

std::optional<EventKind> event_kind_from_name(const std::string& name) { return value_of(kEventKindNames, name); }

std::optional<Transition> transition(IntentState from, EventKind event) {
  for (const Transition& t : kTransitions) {
    if (t.from == from && t.event == event) return t;
  }
  return std::nullopt;
}

std::optional<Transition> move_between(IntentState from, IntentState to) {
  for (const Transition& t : kTransitions) {
    if (t.from == from && t.to == to) return t;
  }
  return std::nullopt;
}

IntentState apply(IntentState from, EventKind event) {
  const auto t = transition(from, event);
  if (!t) {
    throw std::logic_error(std::string("the fence's state machine has no ") + event_kind_name(event) + " move from " +
                           state_name(from));
  }
  return t->to;
}

bool is_intent_event(EventKind kind) { return kind != EventKind::swept && kind != EventKind::domain_evicted; }

HistoryCheck::HistoryCheck(std::vector<int64_t> sweeps) : sweeps_(std::move(sweeps)) {
  std::sort(sweeps_.begin(), sweeps_.end());
}

bool HistoryCheck::swept_between(int64_t after, int64_t before) const {
  const auto it = std::upper_bound(sweeps_.begin(), sweeps_.end(), after);
  return it != sweeps_.end() && *it < before;
}

void HistoryCheck::event(int64_t id, EventKind kind, const std::string& intent, int64_t generation,
                         const std::string& refusal_reason) {
  if (!is_intent_event(kind)) return;
  if (!started_ || intent != intent_) {
    started_ = true;
    intent_ = intent;
    state_ = IntentState::none;
    generation_ = max_generation_ = last_event_ = 0;
  }
  const auto report = [&](const std::string& what) {
    findings_.push_back({id, intent, std::string(event_kind_name(kind)) + " event " + std::to_string(id) + " " + what});
  };
  // A sweep since this intent's last event may have forgotten it.
  const bool maybe_swept = swept_state(state_) && swept_between(last_event_, id);
  last_event_ = id;
  if (kind == EventKind::commit_refused && refusal_reason != kFencingRefusal) {
    // Kept for audit in any state; it names an attempt the ledger issued.
    if (generation > max_generation_) {
      report("names generation " + std::to_string(generation) + ", which was never admitted");
    }
    return;
  }
  IntentState from = state_;
  if (maybe_swept && kind == EventKind::admitted && (from == IntentState::done || generation == 1)) {
    from = IntentState::none;
  }
  const auto t = transition(from, kind);
  if (!t) {
    report(std::string("cannot follow state ") + state_name(state_) + " (generation " + std::to_string(generation_) +
           "): the state machine has no such move");
    return;
  }
  const int64_t expected = !t->new_attempt ? generation_ : from == IntentState::none ? 1 : generation_ + 1;
  if (generation != expected) {
    report("records generation " + std::to_string(generation) + " where the state machine gives " +
           std::to_string(expected));
  }
  state_ = t->to;
  generation_ = generation;
  max_generation_ = std::max(max_generation_, generation);
}

}  // namespace effectfence
