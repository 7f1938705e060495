#include "mcp/fence_tools.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include <sqlite3.h>

#include <catch2/catch.hpp>

#include "mcp/jsonrpc.h"
#include "mcp/schema_check.h"
#include "support/fence_helpers.h"
#include "support/temp_dir.h"

using namespace effectfence;
using namespace effectfence::mcp;

namespace {

// The fence_* tools behind a Server on a memory ledger. Every structured
// result is checked against its tool's outputSchema, as the SDK client does.
class FenceToolsFixture {
 public:
  FenceToolsFixture() : FenceToolsFixture(Settings{}) {}
  explicit FenceToolsFixture(Settings settings)
      : fence_(testing::open_fence(std::move(settings))),
        tools_(fence_tools(*fence_, log_)),
        server_(ServerInfo{"effectfence", "", "test", kFenceInstructions}, tools_, sink(), log_) {}

  // Sends one call without waiting; returns its id.
  int send(const std::string& tool, const Json& arguments) {
    const int id = next_id_++;
    server_.handle_line(jsonrpc::serialize(
        jsonrpc::request(id, "tools/call", {{"name", tool}, {"arguments", arguments}})));
    return id;
  }
  // The tools/call result (or the JSON-RPC error) for one call.
  Json call(const std::string& tool, const Json& arguments) { return answer(tool, send(tool, arguments)); }
  Json answer(const std::string& tool, int id) {
    Json response = wait_for(id);
    if (response.contains("result")) {
      const Json& result = response["result"];
      INFO(tool << " returned " << result.dump());
      CHECK(schema_violation(schema_of(tool), result["structuredContent"]) == "");
      CHECK(Json::parse(result["content"][0]["text"].get<std::string>()) == result["structuredContent"]);
      CHECK(result["isError"] == (result["structuredContent"]["status"] == "refused"));
    }
    return response;
  }
  Json structured(const std::string& tool, const Json& arguments) {
    return structured_answer(tool, send(tool, arguments));
  }
  Json structured_answer(const std::string& tool, int id) {
    Json response = answer(tool, id);
    REQUIRE(response.contains("result"));
    return response["result"]["structuredContent"];
  }
  Fence& fence() { return *fence_; }

 private:
  Server::Sink sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mutex_);
      responses_.push_back(Json::parse(line));
      arrived_.notify_all();
    };
  }
  Json wait_for(int id) {
    std::unique_lock<std::mutex> lock(mutex_);
    Json found;
    arrived_.wait_for(lock, std::chrono::seconds(20), [&] {
      for (const auto& r : responses_) {
        if (r["id"] == id) found = r;
      }
      return !found.is_null();
    });
    REQUIRE_FALSE(found.is_null());
    return found;
  }
  const Json& schema_of(const std::string& tool) const {
    for (const auto& t : tools_) {
      if (t.name == tool) return t.output_schema;
    }
    FAIL("no tool " << tool);
    throw;
  }

  Logger log_{"test", LogLevel::error};
  std::unique_ptr<Fence> fence_;
  std::vector<Tool> tools_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<Json> responses_;
  int next_id_ = 1;
  Server server_;
};

Json charge_args(const std::string& intent, int amount = 4900) {
  return Json{{"intent", intent},
              {"domain", "order:" + intent},
              {"tool", "charge"},
              {"args", {{"order", intent}, {"amount_cents", amount}}},
              {"agent", "agent-a"}};
}

}  // namespace

TEST_CASE("every fence tool declares object input and output schemas", "[fence_tools]") {
  Logger log("test", LogLevel::error);
  auto fence = testing::open_fence(Settings{});
  std::vector<std::string> names;
  for (const Tool& tool : fence_tools(*fence, log)) {
    names.push_back(tool.name);
    CHECK(tool.input_schema["type"] == "object");
    CHECK(tool.output_schema["type"] == "object");
    CHECK_FALSE(tool.description.empty());
    CHECK(tool.annotations.contains("readOnlyHint"));
    if (tool.name == "fence_prepare") {
      for (const char* name : {"intent", "domain", "tool", "agent"}) {
        CHECK(tool.input_schema["properties"][name]["maxLength"] == kMaxNameCharacters);
      }
      CHECK(tool.input_schema["properties"]["read_set"]["items"]["properties"]["domain"]["maxLength"] ==
            kMaxNameCharacters);
    }
  }
  CHECK(names == std::vector<std::string>{"fence_prepare", "fence_commit", "fence_abort", "fence_heartbeat",
                                          "fence_status", "fence_stats"});
}

TEST_CASE("prepare, commit, then a duplicate prepare replays the same certificate", "[fence_tools]") {
  FenceToolsFixture f;
  Json fresh = f.structured("fence_prepare", charge_args("o-1"));
  REQUIRE(fresh["status"] == "fresh");
  Json committed = f.structured("fence_commit", {{"prepared", fresh["prepared"]}, {"result", {{"charge_id", "ch_1"}}}});
  REQUIRE(committed["status"] == "committed");
  Json again = f.structured("fence_prepare", charge_args("o-1"));
  REQUIRE(again["status"] == "already_done");
  CHECK(again["cert"]["hash"] == committed["cert"]["hash"]);
  CHECK(again["cert"]["result"] == Json{{"charge_id", "ch_1"}});

  Json status = f.structured("fence_status", {{"intent", "o-1"}});
  CHECK(status["intent"]["state"] == "done");
  CHECK(status["intent"]["cert"]["hash"] == committed["cert"]["hash"]);
  CHECK(status["domain"]["domain"] == "order:o-1");
  CHECK(status["domain"]["seq"] == committed["cert"]["seq"]);

  // An abort or heartbeat after the commit changes nothing, and says the
  // intent may be committed already, not only that its lease lapsed.
  for (const char* tool : {"fence_abort", "fence_heartbeat"}) {
    Json args = {{"prepared", fresh["prepared"]}};
    if (std::string(tool) == "fence_abort") args["reason"] = "late";
    Json late = f.structured(tool, args);
    INFO(tool << ": " << late.dump());
    CHECK(late["status"] == "refused");
    CHECK(late["reason"] == "lease_lost");
    CHECK_THAT(late["message"].get<std::string>(), Catch::Contains("already committed"));
  }
  CHECK(f.structured("fence_status", {{"intent", "o-1"}})["intent"]["state"] == "done");
}

TEST_CASE("a concurrent duplicate is refused with a message a model can act on", "[fence_tools]") {
  FenceToolsFixture f;
  REQUIRE(f.structured("fence_prepare", charge_args("o-2"))["status"] == "fresh");
  Json refused = f.structured("fence_prepare", charge_args("o-2"));
  CHECK(refused["status"] == "refused");
  CHECK(refused["reason"] == "in_flight");
  CHECK(refused["message"] ==
        "another attempt of this intent is in flight; do not run the tool; retry fence_prepare in a few seconds");
  CHECK_FALSE(refused["explanation"].get<std::string>().empty());
}

TEST_CASE("different args under one intent are a payload mismatch", "[fence_tools]") {
  FenceToolsFixture f;
  Json fresh = f.structured("fence_prepare", charge_args("o-3", 100));
  f.structured("fence_commit", {{"prepared", fresh["prepared"]}, {"result", "ok"}});
  Json mismatch = f.structured("fence_prepare", charge_args("o-3", 200));
  CHECK(mismatch["reason"] == "payload_mismatch");
}

TEST_CASE("edited, forged and malformed tickets are refused", "[fence_tools]") {
  FenceToolsFixture f;
  Json ticket = f.structured("fence_prepare", charge_args("o-4"))["prepared"];

  Json forged_token = ticket;
  forged_token["token"] = std::string(32, '0');
  const Json forged = f.structured("fence_commit", {{"prepared", forged_token}, {"result", 1}});
  CHECK(forged["status"] == "refused");
  CHECK(forged["reason"] == "ticket_invalid");

  Json edited_seq = ticket;
  edited_seq["seq"] = ticket["seq"].get<int64_t>() + 1;
  CHECK(f.structured("fence_commit", {{"prepared", edited_seq}, {"result", 1}})["status"] == "refused");

  Json edited_intent = ticket;
  edited_intent["intent"] = "o-other";
  CHECK(f.structured("fence_heartbeat", {{"prepared", edited_intent}})["status"] == "refused");

  Json malformed = f.structured("fence_commit", {{"prepared", {{"intent", "o-4"}}}, {"result", 1}});
  CHECK(malformed["reason"] == "ticket_invalid");

  // None of that touched the real admission.
  CHECK(f.structured("fence_status", {{"intent", "o-4"}})["intent"]["state"] == "in_flight");
  CHECK(f.structured("fence_commit", {{"prepared", ticket}, {"result", 1}})["status"] == "committed");
}

TEST_CASE("abort fences the intent until it is cleared", "[fence_tools]") {
  FenceToolsFixture f;
  Json ticket = f.structured("fence_prepare", charge_args("o-5"))["prepared"];
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Json heartbeat = f.structured("fence_heartbeat", {{"prepared", ticket}});
  CHECK(heartbeat["status"] == "extended");
  CHECK(heartbeat["lease_expires_at"].get<int64_t>() > ticket["lease_expires_at_ms"].get<int64_t>());
  Json aborted = f.structured("fence_abort", {{"prepared", ticket}, {"reason", "gateway timed out"}});
  CHECK(aborted["status"] == "aborted");
  CHECK(aborted["intent"] == "o-5");
  Json status = f.structured("fence_status", {{"intent", "o-5"}});
  CHECK(status["intent"]["state"] == "failed");
  CHECK_THAT(status["intent"]["reason"].get<std::string>(), Catch::Contains("gateway timed out"));
  Json again = f.structured("fence_prepare", charge_args("o-5"));
  CHECK(again["reason"] == "prior_failure");
  CHECK_THAT(again["message"].get<std::string>(), Catch::Contains("operator"));
  CHECK(f.structured("fence_heartbeat", {{"prepared", ticket}})["reason"] == "lease_lost");

  // Once an operator clears it, the next prepare is a fresh attempt.
  REQUIRE(std::holds_alternative<Cleared>(f.fence().clear("o-5", "alice", "gateway shows no charge")));
  CHECK(f.structured("fence_prepare", charge_args("o-5"))["status"] == "fresh");
}

namespace {

// A ledger file with a short busy timeout, and another connection that can
// hold its write lock, so the tools' decisions are refused ledger_busy.
struct LockableLedger {
  effectfence::testing::TempDir dir;
  Settings settings;
  sqlite3* blocker = nullptr;
  LockableLedger() {
    settings.ledger_path = dir.file("l.sqlite");
    settings.busy_timeout_ms = 100;
  }
  ~LockableLedger() { unlock(); }
  void lock() {
    REQUIRE(sqlite3_open(settings.ledger_path.c_str(), &blocker) == SQLITE_OK);
    REQUIRE(sqlite3_exec(blocker, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK);
  }
  void unlock() {
    if (!blocker) return;
    sqlite3_exec(blocker, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close(blocker);
    blocker = nullptr;
  }
};

}  // namespace

TEST_CASE("a commit refused because the ledger stayed locked says to retry it, not to hold back the tool",
          "[fence_tools]") {
  LockableLedger ledger;
  FenceToolsFixture f(ledger.settings);
  Json ticket = f.structured("fence_prepare", charge_args("o-busy"))["prepared"];
  ledger.lock();
  Json refused = f.structured("fence_commit", {{"prepared", ticket}, {"result", {{"ok", true}}}});
  ledger.unlock();
  CHECK(refused["reason"] == "ledger_busy");
  CHECK_THAT(refused["message"].get<std::string>(), Catch::Contains("retry fence_commit with the same ticket"));
  CHECK_THAT(refused["explanation"].get<std::string>(), Catch::Contains("locked") && !Catch::Contains("do not run"));
  CHECK(f.structured("fence_commit", {{"prepared", ticket}, {"result", {{"ok", true}}}})["status"] == "committed");
}

TEST_CASE("a heartbeat or abort the ledger could not take says the ticket may still hold the intent: keep it",
          "[fence_tools]") {
  LockableLedger ledger;
  FenceToolsFixture f(ledger.settings);
  Json ticket = f.structured("fence_prepare", charge_args("o-held"))["prepared"];
  ledger.lock();
  Json heartbeat = f.structured("fence_heartbeat", {{"prepared", ticket}});
  Json abort = f.structured("fence_abort", {{"prepared", ticket}, {"reason", "provider declined"}});
  ledger.unlock();
  for (const Json& refused : {heartbeat, abort}) {
    CHECK(refused["reason"] == "ledger_busy");
    CHECK_THAT(refused["message"].get<std::string>(),
               Catch::Contains("your ticket still holds the intent") && Catch::Contains("same ticket"));
  }
  // As it says: the same ticket still holds it.
  CHECK(f.structured("fence_heartbeat", {{"prepared", ticket}})["status"] == "extended");
  CHECK(f.structured("fence_abort", {{"prepared", ticket}, {"reason", "provider declined"}})["status"] == "aborted");
  // A failed ledger (not only a locked one) says the same for them.
  for (Step step : {Step::heartbeat, Step::abort}) {
    CHECK_THAT(advise(Reason::ledger_error, step),
               Catch::Contains("may still hold the intent") && !Catch::Contains("hold nothing"));
  }
}

TEST_CASE("a stale read-set is refused before the effect, with its detail", "[fence_tools]") {
  FenceToolsFixture f;
  Json first = charge_args("scale-1");
  first["domain"] = "cluster:prod";
  Json ticket = f.structured("fence_prepare", first)["prepared"];
  f.structured("fence_commit", {{"prepared", ticket}, {"result", "scaled"}});
  const int64_t seq_now = f.structured("fence_status", {{"domain", "cluster:prod"}})["domain"]["seq"];

  Json second = charge_args("scale-2");
  second["domain"] = "cluster:prod";
  second["read_set"] = {{{"domain", "cluster:prod"}, {"seq", seq_now - 1}}};
  Json stale = f.structured("fence_prepare", second);
  CHECK(stale["reason"] == "stale_read_set");
  CHECK(stale["detail"]["domain"] == "cluster:prod");

  second["read_set"] = {{{"domain", "cluster:prod"}, {"seq", seq_now}}};
  CHECK(f.structured("fence_prepare", second)["status"] == "fresh");
}

TEST_CASE("fence_status is read-only and answers for unknown intents and domains", "[fence_tools]") {
  FenceToolsFixture f;
  Json status = f.structured("fence_status", {{"intent", "never"}, {"domain", "nowhere"}});
  CHECK(status["status"] == "ok");
  CHECK(status["intent"]["state"] == "none");
  CHECK(status["domain"]["exists"] == false);
  CHECK(status["domain"]["seq"] == 0);
  CHECK(f.structured("fence_status", {{"intent", "never"}})["intent"]["state"] == "none");
  CHECK(f.structured("fence_stats", Json::object())["ledger"]["total_attempts"] == 0);
  Json neither = f.call("fence_status", Json::object());
  CHECK(neither["result"]["structuredContent"]["reason"] == "invalid_request");
}

namespace {

// What a fence tool answers for arguments it refuses: a refusal the model
// reads (MCP 2025-11-25), whose explanation names the problem.
std::string invalid_request_explanation(const Json& response) {
  INFO(response.dump());
  CHECK_FALSE(response.contains("error"));
  CHECK(response["result"]["isError"] == true);
  CHECK(response["result"]["structuredContent"]["status"] == "refused");
  CHECK(response["result"]["structuredContent"]["reason"] == "invalid_request");
  return response["result"]["structuredContent"].value("explanation", "");
}

}  // namespace

TEST_CASE("integers written as 3.0 are integers, as the inputSchema says (JSON Schema)", "[fence_tools]") {
  FenceToolsFixture f;
  Json args = charge_args("o-float");
  args["read_set"] = Json::array({{{"domain", "order:o-float"}, {"seq", 0.0}}});
  args["known_clock"] = {{"agent-a", 2.0}};
  CHECK(f.structured("fence_prepare", args)["status"] == "fresh");
}

TEST_CASE("bad arguments are refused invalid_request, naming the field", "[fence_tools]") {
  FenceToolsFixture f;
  Json missing = charge_args("o-6");
  missing.erase("agent");
  CHECK_THAT(invalid_request_explanation(f.call("fence_prepare", missing)), Catch::Contains("/agent"));

  Json typo = charge_args("o-6");
  typo["read_sets"] = Json::array();
  CHECK_THAT(invalid_request_explanation(f.call("fence_prepare", typo)), Catch::Contains("read_sets"));

  Json bad_seq = charge_args("o-6");
  bad_seq["read_set"] = {{{"domain", "d"}, {"seq", -1}}};
  CHECK_THAT(invalid_request_explanation(f.call("fence_prepare", bad_seq)), Catch::Contains("read_set"));

  Json bad_clock = charge_args("o-6");
  bad_clock["known_clock"] = {{"agent-a", "three"}};
  CHECK_THAT(invalid_request_explanation(f.call("fence_prepare", bad_clock)), Catch::Contains("known_clock"));
  // A counter near what a clock holds would leave the agent's ticks nowhere to go.
  Json huge_clock = charge_args("o-6");
  huge_clock["known_clock"] = {{"agent-a", 9007199254740991}};
  CHECK_THAT(invalid_request_explanation(f.call("fence_prepare", huge_clock)), Catch::Contains("known_clock"));

  // Names are at most 1024 characters, as the inputSchema declares (maxLength), however many bytes.
  Json long_intent = charge_args("o-6");
  long_intent["intent"] = std::string(1025, 'i');
  CHECK_THAT(invalid_request_explanation(f.call("fence_prepare", long_intent)),
             Catch::Contains("/intent") && Catch::Contains("at most 1024 characters"));
  Json long_domain = charge_args("o-6");
  long_domain["read_set"] = {{{"domain", std::string(1025, 'd')}, {"seq", 0}}};
  CHECK_THAT(invalid_request_explanation(f.call("fence_prepare", long_domain)), Catch::Contains("/read_set/0/domain"));

  invalid_request_explanation(f.call("fence_commit", {{"prepared", "ticket"}, {"result", 1}}));
  invalid_request_explanation(f.call("fence_stats", {{"x", 1}}));
  CHECK(f.structured("fence_stats", Json::object())["ledger"]["total_attempts"] == 0);  // nothing was decided

  // 2^52 itself is a counter an agent may have seen.
  Json top_clock = charge_args("o-6b");
  top_clock["known_clock"] = {{"agent-a", uint64_t{1} << 52}};
  CHECK(f.structured("fence_prepare", top_clock)["status"] == "fresh");
}

TEST_CASE("the server's compiled check of every fence tool's schemas answers as schema_violation does",
          "[fence_tools][schema]") {
  Logger log("test", LogLevel::error);
  auto fence = testing::open_fence(Settings{});
  std::vector<Json> values;
  auto variant = [&](const char* field, Json value) {
    Json args = charge_args("o-7");
    if (value.is_null()) args.erase(field);
    else args[field] = std::move(value);
    values.push_back(std::move(args));
  };
  values.push_back(charge_args("o-7"));
  for (const char* field : {"intent", "domain", "tool", "agent", "args"}) {
    variant(field, nullptr);  // missing
    variant(field, 7);
    variant(field, "");
    variant(field, Json::object());
  }
  variant("intent", std::string(1024, 'i'));
  variant("intent", std::string(1025, 'i'));
  variant("agent", std::string(1024 / 4 * 3, '\xE2'));  // not text, but counted all the same
  variant("read_set", Json::array({{{"domain", "d"}, {"seq", 0}}, {{"domain", "e"}, {"seq", 2.0}}}));
  variant("read_set", Json::array({{{"domain", "d"}, {"seq", -1}}}));
  variant("read_set", Json::array({{{"domain", "d"}, {"seq", 1.5}}}));
  variant("read_set", Json::array({{{"domain", std::string(1025, 'd')}, {"seq", 0}}}));
  variant("read_set", Json::array({{{"domain", "d"}}}));
  variant("read_set", Json::array({{{"domain", "d"}, {"seq", 0}, {"extra", 1}}}));
  variant("read_set", Json::array({"d"}));
  variant("read_set", Json::object());
  variant("known_clock", {{"agent-a", 2}, {"a/b~c", uint64_t{1} << 52}});
  variant("known_clock", {{"agent-a", (uint64_t{1} << 52) + 1}});
  variant("known_clock", {{"agent-a", -1}});
  variant("known_clock", {{"agent-a", "three"}});
  variant("parent", nullptr);
  variant("parent", "abc");
  variant("parent", 3);
  variant("read_sets", Json::array());
  values.push_back(Json::object());
  values.push_back(Json{{"prepared", "ticket"}, {"result", 1}});
  values.push_back(Json{{"prepared", {{"intent", "i"}}}, {"result", nullptr}});
  values.push_back(Json{{"prepared", {{"intent", "i"}}}, {"reason", ""}});
  values.push_back(Json{{"prepared", {{"intent", "i"}}}, {"reason", "r"}, {"x", 1}});
  values.push_back(Json{{"intent", "i"}, {"domain", 3}});
  values.push_back(Json{{"x", 1}});
  for (const Tool& tool : fence_tools(*fence, log)) {
    for (const Json* schema : {&tool.input_schema, &tool.output_schema}) {
      const CompiledSchema compiled(*schema);
      for (const Json& value : values) {
        INFO(tool.name << ": " << value.dump(-1, ' ', false, Json::error_handler_t::replace));
        CHECK(compiled.violation(value) == schema_violation(*schema, value));
      }
    }
  }
}

TEST_CASE("concurrent prepares of one intent through the server admit exactly one", "[fence_tools]") {
  FenceToolsFixture f;
  constexpr int kRacers = 32;
  std::vector<int> ids;
  for (int i = 0; i < kRacers; ++i) ids.push_back(f.send("fence_prepare", charge_args("race-1")));
  std::vector<Json> results;
  for (int id : ids) results.push_back(f.structured_answer("fence_prepare", id));
  int fresh = 0;
  for (const auto& r : results) {
    if (r["status"] == "fresh") ++fresh;
    else CHECK(r["status"] == "refused");
  }
  CHECK(fresh == 1);
  Json stats = f.structured("fence_stats", Json::object());
  CHECK(stats["process"]["admitted"] == 1);
  CHECK(stats["process"]["total_attempts"] == kRacers);
  CHECK(stats["process"]["prevented"] == kRacers - 1);
  // The admission, at least, was written; refusals decided in memory need no transaction.
  const Json& batching = stats["batching"];
  CHECK(batching["decisions"].get<int64_t>() >= 1);
  CHECK(batching["transactions"].get<int64_t>() >= 1);
  CHECK(batching["transactions"].get<int64_t>() <= batching["decisions"].get<int64_t>());
  CHECK(batching["queued"] == 0);
}
