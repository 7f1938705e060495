#include "mcp/input_rounds.h"

#include <catch2/catch.hpp>

using effectfence::Json;
using effectfence::Ticket;
using namespace effectfence::mcp;

namespace {

// A question whose answer lands in *answer.
ChildAsk ask_into(std::optional<Reply>* answer, const std::string& method = "elicitation/create") {
  return ChildAsk{method, Json{{"message", "confirm?"}}, [answer](Reply reply) { *answer = std::move(reply); }};
}

}  // namespace

TEST_CASE("input rounds: a child's question goes to the one running call, never to a guess", "[input_rounds]") {
  InputRounds rounds;
  std::optional<Reply> answer;
  ChildAsk ask = ask_into(&answer);
  CHECK(rounds.route(ask).message().find("no call") != std::string::npos);

  auto first = rounds.begin();
  CHECK(rounds.route(ask).ok());
  CHECK(first->has_asks());
  CHECK(first->take().size() == 1);

  auto second = rounds.begin();
  ChildAsk other = ask_into(&answer);
  const effectfence::Status routed = rounds.route(other);
  CHECK(routed.message().find("2 calls") != std::string::npos);
  CHECK_FALSE(first->has_asks());
  CHECK_FALSE(second->has_asks());
  REQUIRE(other.respond);  // left with the caller, to be refused

  rounds.forget(first);
  CHECK(rounds.route(other).ok());
  CHECK(second->has_asks());
}

TEST_CASE("input rounds: a parked call is found by its requestState once, and only by it", "[input_rounds]") {
  InputRounds rounds;
  std::optional<Reply> answer;
  ParkedCall call;
  call.tool = "charge";
  call.intent = "wrap:charge:abc";
  call.round = rounds.begin();
  std::vector<ChildAsk> asks;
  asks.push_back(ask_into(&answer));
  const Json result = rounds.park(std::move(call), std::move(asks));
  CHECK(result["resultType"] == "input_required");
  REQUIRE(result["inputRequests"].size() == 1);
  const std::string key = result["inputRequests"].begin().key();
  const Json request = result["inputRequests"][key];
  CHECK(request["method"] == "elicitation/create");
  CHECK(request["params"]["message"] == "confirm?");
  const std::string state = result["requestState"].get<std::string>();
  CHECK(state.size() == 32);

  CHECK_FALSE(rounds.resume(state + "0"));
  CHECK_FALSE(rounds.resume(""));
  std::optional<ParkedCall> resumed = rounds.resume(state);
  REQUIRE(resumed);
  CHECK(resumed->tool == "charge");
  CHECK(resumed->asks.count(key) == 1);
  CHECK_FALSE(rounds.resume(state));  // taken
  CHECK_FALSE(answer);                // nothing answered the child yet
}

TEST_CASE("input rounds: answers go to the child's questions by key, and an unanswered one is asked again", "[input_rounds]") {
  InputRounds rounds;
  std::optional<Reply> confirm, sample;
  ParkedCall call;
  call.tool = "charge";
  call.round = rounds.begin();
  std::vector<ChildAsk> asks;
  asks.push_back(ask_into(&confirm));
  asks.push_back(ask_into(&sample, "sampling/createMessage"));
  const Json first = rounds.park(std::move(call), std::move(asks));
  std::string confirm_key, sample_key;
  for (const auto& [key, request] : first["inputRequests"].items()) {
    (request["method"] == "elicitation/create" ? confirm_key : sample_key) = key;
  }
  REQUIRE(!confirm_key.empty());
  REQUIRE(!sample_key.empty());

  ParkedCall resumed = *rounds.resume(first["requestState"].get<std::string>());
  answer_asks(resumed, Json{{confirm_key, {{"action", "accept"}, {"content", {{"approver", "ada"}}}}},
                            {"ask-unknown", {{"action", "accept"}}}});
  REQUIRE(confirm);
  CHECK_FALSE(confirm->error);
  CHECK(confirm->result["content"]["approver"] == "ada");
  CHECK_FALSE(sample);
  REQUIRE(resumed.asks.size() == 1);
  CHECK(resumed.asks.count(sample_key) == 1);

  const Json again = rounds.park(std::move(resumed), {});
  REQUIRE(again["inputRequests"].size() == 1);
  CHECK(again["inputRequests"].contains(sample_key));
  CHECK(again["requestState"] != first["requestState"]);
}

TEST_CASE("input rounds: calls parked too long expire, and their tickets are kept alive until then", "[input_rounds]") {
  InputRounds rounds;
  ParkedCall call;
  call.tool = "charge";
  call.round = rounds.begin();
  Ticket ticket;
  ticket.intent = "wrap:charge:abc";
  call.ticket = ticket;
  rounds.park(std::move(call), {});
  REQUIRE(rounds.parked_tickets().size() == 1);
  CHECK(rounds.parked_tickets()[0].intent == "wrap:charge:abc");
  CHECK(rounds.expire(InputRounds::Clock::now() - std::chrono::hours(1)).empty());
  const auto expired = rounds.expire(InputRounds::Clock::now());
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].tool == "charge");
  CHECK(rounds.parked_tickets().empty());
}

TEST_CASE("input rounds: a question left when its call finishes is answered with an error", "[input_rounds]") {
  InputRounds rounds;
  std::optional<Reply> answer;
  auto round = rounds.begin();
  ChildAsk ask = ask_into(&answer);
  REQUIRE(rounds.route(ask).ok());
  rounds.forget(round);
  REQUIRE(answer);
  REQUIRE(answer->error);
  CHECK(answer->error->message.find("has finished") != std::string::npos);
  ChildAsk late = ask_into(&answer);
  CHECK_FALSE(rounds.route(late).ok());  // no call runs any more
}
