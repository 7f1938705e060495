#include "shared_server/deliveries.h"

#include <catch2/catch.hpp>

namespace effectfence::shared {
namespace {

using Seen = Deliveries::Seen;

TEST_CASE("a resend of a handled message gets the first answer, not a second handling", "[deliveries]") {
  Deliveries d;
  std::optional<std::string> answer;
  REQUIRE(d.deliver("k1", "{\"id\":1}", 0, &answer) == Seen::first);
  REQUIRE(d.deliver("k1", "{\"id\":1}", 5, &answer) == Seen::pending);
  REQUIRE(d.pending("k1"));
  d.finish("k1", std::string("{\"id\":1,\"result\":{}}"), 10);
  REQUIRE_FALSE(d.pending("k1"));
  REQUIRE(d.deliver("k1", "{\"id\":1}", 20, &answer) == Seen::answered);
  REQUIRE(answer == std::optional<std::string>("{\"id\":1,\"result\":{}}"));
}

TEST_CASE("a key reused for another message is refused, not answered with the first message's answer", "[deliveries]") {
  Deliveries d;
  std::optional<std::string> answer;
  REQUIRE(d.deliver("k", "{\"id\":1}", 0, &answer) == Seen::first);
  d.finish("k", std::string("a"), 1);
  REQUIRE(d.deliver("k", "{\"id\":2}", 2, &answer) == Seen::conflicting);
  REQUIRE(d.deliver("other", "{\"id\":1}", 2, &answer) == Seen::first);
}

TEST_CASE("an answer is dropped after its keep time and its key remembered: a late resend is not handled again",
          "[deliveries]") {
  DeliveryLimits limits;
  limits.answer_keep_ms = 100;
  limits.key_keep_ms = 1000;
  Deliveries d(limits);
  std::optional<std::string> answer;
  REQUIRE(d.deliver("k", "m", 0, &answer) == Seen::first);
  d.finish("k", std::string("the answer"), 0);
  REQUIRE(d.kept_answer_bytes() == 10);
  REQUIRE(d.deliver("k", "m", 101, &answer) == Seen::forgotten);
  REQUIRE(d.kept_answer_bytes() == 0);
  // Past the key's own keep time it is gone for good (the resend window is long over).
  REQUIRE(d.deliver("x", "y", 1200, &answer) == Seen::first);
  REQUIRE(d.deliver("k", "m", 1200, &answer) == Seen::first);
}

TEST_CASE("kept answers stay within the byte budget, oldest dropped first", "[deliveries]") {
  DeliveryLimits limits;
  limits.answer_budget_bytes = 25;
  Deliveries d(limits);
  std::optional<std::string> answer;
  for (int i = 0; i < 5; ++i) {
    const std::string key = "k" + std::to_string(i);
    REQUIRE(d.deliver(key, "m" + key, i, &answer) == Seen::first);
    d.finish(key, std::string(10, 'a'), i);
    REQUIRE(d.kept_answer_bytes() <= 25);
  }
  REQUIRE(d.deliver("k0", "mk0", 10, &answer) == Seen::forgotten);
  REQUIRE(d.deliver("k4", "mk4", 10, &answer) == Seen::answered);
  REQUIRE(answer == std::optional<std::string>(std::string(10, 'a')));
}

TEST_CASE("a forgotten key reused for another message is still refused as conflicting", "[deliveries]") {
  DeliveryLimits limits;
  limits.answer_keep_ms = 0;
  Deliveries d(limits);
  std::optional<std::string> answer;
  REQUIRE(d.deliver("k", "m", 0, &answer) == Seen::first);
  d.finish("k", std::string("answer"), 0);
  REQUIRE(d.deliver("x", "y", 1, &answer) == Seen::first);  // drops k's answer
  REQUIRE(d.kept_answer_bytes() == 0);
  REQUIRE(d.deliver("k", "other", 2, &answer) == Seen::conflicting);
  REQUIRE(d.deliver("k", "m", 2, &answer) == Seen::forgotten);
  REQUIRE(d.size() == 2);
}

TEST_CASE("remembered keys are bounded in number", "[deliveries]") {
  DeliveryLimits limits;
  limits.answer_keep_ms = 0;
  limits.max_keys = 3;
  Deliveries d(limits);
  std::optional<std::string> answer;
  for (int i = 0; i < 10; ++i) {
    const std::string key = "k" + std::to_string(i);
    REQUIRE(d.deliver(key, "m", i * 10, &answer) == Seen::first);
    d.finish(key, std::nullopt, i * 10);
  }
  REQUIRE(d.size() <= 4);  // three remembered keys, and the one just finished
}

}  // namespace
}  // namespace effectfence::shared
