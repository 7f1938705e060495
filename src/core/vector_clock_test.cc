#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "effectfence/vector_clock.h"

using effectfence::Json;
using effectfence::VectorClock;

namespace {

VectorClock clock_of(const std::map<std::string, int>& ticks) {
  VectorClock clock;
  for (const auto& [agent, count] : ticks) {
    for (int i = 0; i < count; ++i) clock.tick(agent);
  }
  return clock;
}

VectorClock merged(VectorClock a, const VectorClock& b) {
  a.merge(b);
  return a;
}

// Small clocks over three agents, including equal, ordered and concurrent pairs.
std::vector<VectorClock> samples() {
  return {
      clock_of({}),
      clock_of({{"a", 1}}),
      clock_of({{"a", 2}}),
      clock_of({{"b", 1}}),
      clock_of({{"a", 1}, {"b", 1}}),
      clock_of({{"a", 2}, {"b", 1}}),
      clock_of({{"a", 1}, {"c", 3}}),
      clock_of({{"a", 2}, {"b", 2}, {"c", 3}}),
      clock_of({{"b", 3}, {"c", 1}}),
  };
}

}  // namespace

TEST_CASE("get, tick and merge", "[vector_clock]") {
  VectorClock clock;
  CHECK(clock.get("a") == 0);
  clock.tick("a");
  clock.tick("a");
  clock.tick("b");
  CHECK(clock.get("a") == 2);
  CHECK(clock.get("b") == 1);
  clock.merge(clock_of({{"a", 1}, {"c", 4}}));
  CHECK(clock.get("a") == 2);
  CHECK(clock.get("b") == 1);
  CHECK(clock.get("c") == 4);
}

TEST_CASE("merge is commutative, associative and idempotent", "[vector_clock]") {
  const auto clocks = samples();
  for (const auto& a : clocks) {
    CHECK(merged(a, a) == a);
    for (const auto& b : clocks) {
      CHECK(merged(a, b) == merged(b, a));
      CHECK(a.le(merged(a, b)));
      for (const auto& c : clocks) CHECK(merged(merged(a, b), c) == merged(a, merged(b, c)));
    }
  }
}

TEST_CASE("le is reflexive, antisymmetric and transitive", "[vector_clock]") {
  const auto clocks = samples();
  for (const auto& a : clocks) {
    CHECK(a.le(a));
    for (const auto& b : clocks) {
      if (a.le(b) && b.le(a)) CHECK(a == b);
      for (const auto& c : clocks) {
        if (a.le(b) && b.le(c)) CHECK(a.le(c));
      }
    }
  }
}

TEST_CASE("the samples contain both ordered and concurrent pairs", "[vector_clock]") {
  const VectorClock a1 = clock_of({{"a", 1}});
  const VectorClock b1 = clock_of({{"b", 1}});
  const VectorClock a1b1 = clock_of({{"a", 1}, {"b", 1}});
  CHECK(a1.le(a1b1));
  CHECK_FALSE(a1b1.le(a1));
  CHECK_FALSE(a1.le(b1));
  CHECK(a1.concurrent(b1));
  CHECK(b1.concurrent(a1));
  CHECK_FALSE(a1.concurrent(a1b1));
  CHECK_FALSE(a1.concurrent(a1));
  CHECK(VectorClock().le(b1));
}

TEST_CASE("concurrent means neither clock is <= the other", "[vector_clock]") {
  const auto clocks = samples();
  for (const auto& a : clocks) {
    for (const auto& b : clocks) CHECK(a.concurrent(b) == (!a.le(b) && !b.le(a)));
  }
}

TEST_CASE("tick makes a clock strictly greater", "[vector_clock]") {
  for (const auto& before : samples()) {
    for (const std::string agent : {"a", "b", "z"}) {
      VectorClock after = before;
      after.tick(agent);
      CHECK(before.le(after));
      CHECK_FALSE(after.le(before));
      CHECK_FALSE(after == before);
      CHECK(after.get(agent) == before.get(agent) + 1);
    }
  }
}

TEST_CASE("digest is stable and depends only on the counters", "[vector_clock]") {
  const VectorClock ab = clock_of({{"a", 2}, {"b", 1}});
  VectorClock ba;
  ba.tick("b");
  ba.tick("a");
  ba.tick("a");
  CHECK(ab == ba);
  CHECK(ab.digest() == ba.digest());
  CHECK(ab.digest().size() == 64);
  CHECK(ab.digest() != clock_of({{"a", 1}, {"b", 2}}).digest());
  // SHA-256 of the canonical form {"a":2,"b":1}.
  CHECK(ab.digest() == "d3626ac30a87e6f7a6428233b3c68299976865fa5508e4267c5415c76af7a772");
  // SHA-256 of {}.
  CHECK(VectorClock().digest() == "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a");
}

TEST_CASE("to_json omits zero counters and from_json inverts it", "[vector_clock]") {
  const VectorClock clock = clock_of({{"a", 2}, {"b", 1}});
  CHECK(clock.to_json() == Json{{"a", 2}, {"b", 1}});
  const auto back = VectorClock::from_json(clock.to_json());
  REQUIRE(back.has_value());
  CHECK(*back == clock);

  const auto with_zero = VectorClock::from_json(Json{{"a", 2}, {"b", 1}, {"c", 0}});
  REQUIRE(with_zero.has_value());
  CHECK(*with_zero == clock);
  CHECK(with_zero->digest() == clock.digest());
  CHECK(with_zero->to_json() == Json{{"a", 2}, {"b", 1}});
}

TEST_CASE("from_json refuses anything but an object of non-negative safe integers (3.0 is one, as in JSON Schema)",
          "[vector_clock]") {
  CHECK_FALSE(VectorClock::from_json(Json::array()).has_value());
  CHECK_FALSE(VectorClock::from_json(Json(3)).has_value());
  CHECK_FALSE(VectorClock::from_json(Json()).has_value());
  CHECK_FALSE(VectorClock::from_json(Json{{"a", -1}}).has_value());
  CHECK_FALSE(VectorClock::from_json(Json{{"a", 1.5}}).has_value());
  REQUIRE(VectorClock::from_json(Json{{"a", 1.0}}).has_value());
  CHECK(VectorClock::from_json(Json{{"a", 1.0}})->to_json() == Json{{"a", 1}});
  CHECK_FALSE(VectorClock::from_json(Json{{"a", 9007199254740994.0}}).has_value());
  CHECK_FALSE(VectorClock::from_json(Json{{"a", "1"}}).has_value());
  CHECK_FALSE(VectorClock::from_json(Json{{"a", uint64_t{9007199254740993}}}).has_value());
  CHECK(VectorClock::from_json(Json{{"a", uint64_t{9007199254740992}}}).has_value());
  CHECK(VectorClock::from_json(Json::object()).has_value());
}

TEST_CASE("a clock without a canonical form has no digest", "[vector_clock]") {
  VectorClock clock;
  clock.tick("\xff");
  CHECK(clock.digest().empty());
}
