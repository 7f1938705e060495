#include "effectfence/state_machine.h"

#include <set>
#include <stdexcept>

#include <catch2/catch.hpp>

using namespace effectfence;

TEST_CASE("every event kind has one name, and each name reads back as its kind", "[state_machine]") {
  std::set<std::string> names;
  for (EventKind k : kEventKinds) {
    const std::string name = event_kind_name(k);
    CHECK(names.insert(name).second);
    CHECK(event_kind_from_name(name) == k);
  }
  CHECK(names.size() == kEventKinds.size());
  CHECK_FALSE(event_kind_from_name("committed "));
  CHECK_FALSE(event_kind_from_name("replayed"));
}

TEST_CASE("the table moves intents between stored states only, each (state, event) at most once",
          "[state_machine]") {
  std::set<std::pair<IntentState, EventKind>> seen;
  for (const Transition& t : kTransitions) {
    CHECK(seen.insert({t.from, t.event}).second);
    CHECK(t.to != IntentState::none);
    CHECK(is_intent_event(t.event));
    // A new attempt is an admission, and an admission needs no evidence.
    CHECK(t.new_attempt == (t.event == EventKind::admitted || t.event == EventKind::takeover));
    if (t.new_attempt) CHECK(t.evidence == Evidence::none);
  }
  // What the brief promises: done is final, fenced states leave only by a
  // clear or their holder's own late word, and nothing returns to none.
  CHECK_FALSE(move_between(IntentState::done, IntentState::failed));
  CHECK_FALSE(move_between(IntentState::done, IntentState::cleared));
  CHECK_FALSE(move_between(IntentState::failed, IntentState::in_flight));
  CHECK_FALSE(move_between(IntentState::failed, IntentState::done));
  CHECK_FALSE(move_between(IntentState::unknown, IntentState::in_flight));
  CHECK(move_between(IntentState::failed, IntentState::cleared)->evidence == Evidence::clear);
  CHECK(move_between(IntentState::in_flight, IntentState::done)->evidence == Evidence::certificate);
}

TEST_CASE("apply gives the table's next state and throws on a move the table lacks", "[state_machine]") {
  CHECK(apply(IntentState::none, EventKind::admitted) == IntentState::in_flight);
  CHECK(apply(IntentState::in_flight, EventKind::committed) == IntentState::done);
  CHECK(apply(IntentState::unknown, EventKind::committed) == IntentState::done);
  CHECK_THROWS_AS(apply(IntentState::done, EventKind::committed), std::logic_error);
  CHECK_THROWS_AS(apply(IntentState::failed, EventKind::admitted), std::logic_error);
  CHECK_THROWS_AS(apply(IntentState::in_flight, EventKind::cleared), std::logic_error);
}

namespace {

struct Ev {
  int64_t id;
  EventKind kind;
  const char* intent;
  int64_t generation;
  const char* reason = "";
};

std::vector<HistoryCheck::Finding> replay(std::vector<int64_t> sweeps, const std::vector<Ev>& events) {
  HistoryCheck h(std::move(sweeps));
  for (const Ev& e : events) h.event(e.id, e.kind, e.intent, e.generation, e.reason);
  return h.findings();
}

}  // namespace

TEST_CASE("histories the fence writes replay without a finding", "[state_machine][verify]") {
  using K = EventKind;
  // Sorted by intent, then id, as verify reads them.
  CHECK(replay({}, {{1, K::admitted, "a", 1}, {2, K::committed, "a", 1}}).empty());
  CHECK(replay({}, {{1, K::admitted, "b", 1},
                    {3, K::aborted, "b", 1},
                    {4, K::cleared, "b", 1},
                    {5, K::admitted, "b", 2},
                    {6, K::commit_refused, "b", 1, "lease_lost"},
                    {7, K::takeover, "b", 3},
                    {8, K::holder_dead, "b", 3},
                    {9, K::committed, "b", 3}})
            .empty());
  CHECK(replay({}, {{1, K::admitted, "c", 1}, {2, K::commit_refused, "c", 1, "stale_read_set"}, {3, K::cleared, "c", 1}})
            .empty());
  // Swept after it was done, the name starts again at generation 1.
  CHECK(replay({5}, {{1, K::admitted, "d", 1}, {2, K::committed, "d", 1}, {9, K::admitted, "d", 1}}).empty());
}

TEST_CASE("histories no fence writes are each found, naming the event", "[state_machine][verify]") {
  using K = EventKind;
  SECTION("a second commit of a done intent") {
    auto f = replay({}, {{1, K::admitted, "a", 1}, {2, K::committed, "a", 1}, {3, K::committed, "a", 1}});
    REQUIRE(f.size() == 1);
    CHECK(f[0].event_id == 3);
    CHECK(f[0].message.find("cannot follow state done") != std::string::npos);
  }
  SECTION("an admission of a done intent that no sweep forgot") {
    auto f = replay({}, {{1, K::admitted, "a", 1}, {2, K::committed, "a", 1}, {3, K::admitted, "a", 1}});
    REQUIRE(f.size() == 1);
    CHECK(f[0].event_id == 3);
  }
  SECTION("a commit with no admission") {
    auto f = replay({}, {{4, K::committed, "a", 1}});
    REQUIRE(f.size() == 1);
    CHECK(f[0].intent == "a");
  }
  SECTION("a re-admission that does not raise the generation") {
    auto f = replay({}, {{1, K::admitted, "a", 1}, {2, K::aborted, "a", 1}, {3, K::cleared, "a", 1}, {4, K::admitted, "a", 1}});
    REQUIRE(f.size() == 1);
    CHECK(f[0].message.find("where the state machine gives 2") != std::string::npos);
  }
  SECTION("a failed intent admitted again without a clear") {
    auto f = replay({}, {{1, K::admitted, "a", 1}, {2, K::aborted, "a", 1}, {3, K::admitted, "a", 2}});
    REQUIRE(f.size() == 1);
    CHECK(f[0].event_id == 3);
  }
  SECTION("a refused commit naming an attempt never admitted") {
    auto f = replay({}, {{1, K::admitted, "a", 1}, {2, K::commit_refused, "a", 7, "lease_lost"}});
    REQUIRE(f.size() == 1);
  }
  SECTION("each intent is replayed from its own start") {
    auto f = replay({}, {{1, K::admitted, "a", 1}, {2, K::committed, "b", 1}});
    REQUIRE(f.size() == 1);
    CHECK(f[0].intent == "b");
  }
}
