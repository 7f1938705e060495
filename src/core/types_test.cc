#include <catch2/catch.hpp>

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "effectfence/types.h"

using namespace effectfence;

TEST_CASE("reason names are the enumerator names and round-trip", "[types]") {
  const std::vector<std::pair<Reason, std::string>> reasons = {
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
  };
  for (const auto& [reason, name] : reasons) {
    CHECK(reason_name(reason) == name);
    CHECK(reason_from_name(name) == reason);
  }
  CHECK_FALSE(reason_from_name("").has_value());
  CHECK_FALSE(reason_from_name("Stale_Read_Set").has_value());
  CHECK_FALSE(reason_from_name("stale_read_set ").has_value());
}

TEST_CASE("state names round-trip", "[types]") {
  const std::vector<std::pair<IntentState, std::string>> states = {
      {IntentState::none, "none"},       {IntentState::in_flight, "in_flight"},
      {IntentState::done, "done"},       {IntentState::failed, "failed"},
      {IntentState::unknown, "unknown"}, {IntentState::cleared, "cleared"},
  };
  for (const auto& [state, name] : states) {
    CHECK(state_name(state) == name);
    CHECK(state_from_name(name) == state);
  }
  CHECK_FALSE(state_from_name("DONE").has_value());
  CHECK_FALSE(state_from_name("stale_read_set").has_value());
}

TEST_CASE("out-of-range enumerators still get a name", "[types]") {
  CHECK_FALSE(reason_from_name(reason_name(static_cast<Reason>(99))).has_value());
  CHECK_FALSE(state_from_name(state_name(static_cast<IntentState>(99))).has_value());
}

namespace {

Ticket sample_ticket() {
  Ticket t;
  t.intent = "charge:order-123";
  t.domain = "order:123";
  t.seq = 41;
  t.generation = 3;
  t.token = "00112233445566778899aabbccddeeff";
  t.lease_expires_at_ms = 1700000000123;
  return t;
}

}  // namespace

TEST_CASE("Ticket to_json / from_json round-trip", "[types]") {
  const Ticket t = sample_ticket();
  const Json j = t.to_json();
  CHECK(j == Json{{"intent", "charge:order-123"},
                  {"domain", "order:123"},
                  {"seq", 41},
                  {"generation", 3},
                  {"token", "00112233445566778899aabbccddeeff"},
                  {"lease_expires_at_ms", 1700000000123}});
  const auto back = Ticket::from_json(Json::parse(j.dump()));
  REQUIRE(back.has_value());
  CHECK(back->intent == t.intent);
  CHECK(back->domain == t.domain);
  CHECK(back->seq == t.seq);
  CHECK(back->generation == t.generation);
  CHECK(back->token == t.token);
  CHECK(back->lease_expires_at_ms == t.lease_expires_at_ms);
}

TEST_CASE("Ticket::from_json refuses missing fields and wrong types", "[types]") {
  const Json good = sample_ticket().to_json();
  for (auto member = good.begin(); member != good.end(); ++member) {
    INFO(member.key());
    Json missing = good;
    missing.erase(member.key());
    CHECK_FALSE(Ticket::from_json(missing).has_value());
    Json wrong = good;
    wrong[member.key()] = member->is_string() ? Json(1) : Json("1");
    CHECK_FALSE(Ticket::from_json(wrong).has_value());
  }
  Json fractional = good;
  fractional["seq"] = 41.5;
  CHECK_FALSE(Ticket::from_json(fractional).has_value());
  Json negative = good;
  negative["seq"] = -1;
  CHECK_FALSE(Ticket::from_json(negative).has_value());
  // 3.0 is the integer 3, as in the inputSchema: a client that re-encodes numbers passes the same ticket.
  Json reencoded = good;
  reencoded["generation"] = 3.0;
  reencoded["seq"] = 41.0;
  const auto same = Ticket::from_json(reencoded);
  REQUIRE(same.has_value());
  CHECK(same->same_attempt(sample_ticket()));
  Json too_big = good;
  too_big["generation"] = uint64_t{1} << 63;
  CHECK_FALSE(Ticket::from_json(too_big).has_value());
  CHECK_FALSE(Ticket::from_json(Json::array()).has_value());
  CHECK_FALSE(Ticket::from_json(Json()).has_value());
}

TEST_CASE("IntentStatus::to_json includes conditional fields only when they apply", "[types]") {
  IntentStatus s;
  s.state = IntentState::done;
  s.intent = "i";
  s.domain = "d";
  s.tool = "t";
  s.agent = "a";
  s.args = Json{{"x", 1}};
  s.seq = 4;
  s.generation = 2;
  s.lease_expires_at_ms = 999;
  s.updated_at_ms = 1000;

  Json j = s.to_json();
  CHECK(j["state"] == "done");
  CHECK(j["intent"] == "i");
  CHECK(j["domain"] == "d");
  CHECK(j["tool"] == "t");
  CHECK(j["agent"] == "a");
  CHECK(j["args"] == Json{{"x", 1}});
  CHECK(j["seq"] == 4);
  CHECK(j["generation"] == 2);
  CHECK(j["updated_at_ms"] == 1000);
  CHECK_FALSE(j.contains("lease_expires_at_ms"));
  CHECK_FALSE(j.contains("reason"));
  CHECK_FALSE(j.contains("cert"));

  s.state = IntentState::in_flight;
  CHECK(s.to_json()["lease_expires_at_ms"] == 999);

  s.state = IntentState::failed;
  s.reason = "card declined";
  j = s.to_json();
  CHECK(j["state"] == "failed");
  CHECK(j["reason"] == "card declined");
  CHECK_FALSE(j.contains("lease_expires_at_ms"));

  Certificate cert;
  cert.intent = "i";
  cert.seal();
  s.state = IntentState::done;
  s.cert = cert;
  j = s.to_json();
  REQUIRE(j.contains("cert"));
  CHECK(j["cert"] == cert.to_json());
}

TEST_CASE("DomainStatus::to_json", "[types]") {
  DomainStatus d;
  d.domain = "order:1";
  d.exists = true;
  d.seq = 9;
  d.clock.tick("a");
  d.in_flight = 2;
  d.fenced = 1;
  Json j = d.to_json();
  CHECK(j == Json{{"domain", "order:1"},
                  {"exists", true},
                  {"seq", 9},
                  {"clock", Json{{"a", 1}}},
                  {"head", nullptr},
                  {"in_flight", 2},
                  {"fenced", 1}});
  d.head = "abc";
  CHECK(d.to_json()["head"] == "abc");
}

namespace {

Counters sample_counters() {
  Counters c;
  c.admitted = 10;
  c.replayed = 3;
  c.refused_stale_read_set = 1;
  c.refused_domain_race = 2;
  c.refused_in_flight = 4;
  c.refused_prior_failure = 8;
  c.refused_payload_mismatch = 16;
  c.committed = 7;
  c.aborted = 2;
  return c;
}

}  // namespace

TEST_CASE("Counters derive refusals, attempts and prevented", "[types]") {
  const Counters c = sample_counters();
  CHECK(c.refusals() == 31);
  CHECK(c.total_attempts() == 44);
  CHECK(c.prevented() == 34);
}

TEST_CASE("Counters += adds every counter", "[types]") {
  Counters sum = sample_counters();
  sum += sample_counters();
  const Counters one = sample_counters();
  CHECK(sum.admitted == 2 * one.admitted);
  CHECK(sum.replayed == 2 * one.replayed);
  CHECK(sum.refused_stale_read_set == 2 * one.refused_stale_read_set);
  CHECK(sum.refused_domain_race == 2 * one.refused_domain_race);
  CHECK(sum.refused_in_flight == 2 * one.refused_in_flight);
  CHECK(sum.refused_prior_failure == 2 * one.refused_prior_failure);
  CHECK(sum.refused_payload_mismatch == 2 * one.refused_payload_mismatch);
  CHECK(sum.committed == 2 * one.committed);
  CHECK(sum.aborted == 2 * one.aborted);
  Counters zero;
  zero += one;
  CHECK(zero.to_json() == one.to_json());
}

TEST_CASE("Counters sums saturate at the int64 limits instead of wrapping around", "[types]") {
  constexpr int64_t max = std::numeric_limits<int64_t>::max();
  constexpr int64_t min = std::numeric_limits<int64_t>::min();
  Counters c;
  c.admitted = max;
  c.replayed = max - 1;
  c.refused_in_flight = max;
  c.refused_prior_failure = 5;
  CHECK(c.refusals() == max);
  CHECK(c.total_attempts() == max);
  CHECK(c.prevented() == max);
  Counters sum = c;
  sum += c;
  CHECK(sum.admitted == max);
  CHECK(sum.refused_prior_failure == 10);
  Counters low;
  low.refused_domain_race = min;
  low.refused_stale_read_set = -1;
  CHECK(low.refusals() == min);
  low += low;
  CHECK(low.refused_domain_race == min);
}

TEST_CASE("Counters::to_json layout and round-trip of every counter", "[types]") {
  const Counters c = sample_counters();
  const Json j = c.to_json();
  CHECK(j == Json::parse(R"({
    "admitted": 10, "replayed": 3,
    "refused": {"stale_read_set": 1, "domain_race": 2, "in_flight": 4, "prior_failure": 8, "payload_mismatch": 16},
    "total_attempts": 44, "prevented": 34, "committed": 7, "aborted": 2})"));

  Counters back;
  back.admitted = j["admitted"].get<int64_t>();
  back.replayed = j["replayed"].get<int64_t>();
  back.refused_stale_read_set = j["refused"]["stale_read_set"].get<int64_t>();
  back.refused_domain_race = j["refused"]["domain_race"].get<int64_t>();
  back.refused_in_flight = j["refused"]["in_flight"].get<int64_t>();
  back.refused_prior_failure = j["refused"]["prior_failure"].get<int64_t>();
  back.refused_payload_mismatch = j["refused"]["payload_mismatch"].get<int64_t>();
  back.committed = j["committed"].get<int64_t>();
  back.aborted = j["aborted"].get<int64_t>();
  CHECK(back.to_json() == j);
}

TEST_CASE("Stats::to_json nests process and ledger counters", "[types]") {
  Stats s;
  s.process = sample_counters();
  s.ledger = sample_counters();
  s.ledger += sample_counters();
  const Json j = s.to_json();
  CHECK(j.size() == 2);
  CHECK(j["process"] == s.process.to_json());
  CHECK(j["ledger"] == s.ledger.to_json());
  CHECK(j["ledger"]["admitted"] == 20);
}
