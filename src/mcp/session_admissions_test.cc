// The tickets one client session holds, kept by the fence tools, and fenced
// when the session ends: on a real SQLite ledger file.
#include "mcp/session_admissions.h"

#include <future>
#include <map>

#include <catch2/catch.hpp>

#include "mcp/fence_tools.h"
#include "support/fence_helpers.h"
#include "support/temp_dir.h"

using namespace effectfence;
using namespace effectfence::mcp;
using namespace effectfence::testing;

namespace {

// The fence tools of one session, called directly (the MCP framing has its own tests).
class SessionTools {
 public:
  SessionTools(std::shared_ptr<AdmissionOwners> owners, Fence& fence, Logger& log)
      : admissions_(std::make_shared<SessionAdmissions>(std::move(owners))) {
    for (Tool& tool : fence_tools(fence, log, admissions_)) tools_[tool.name] = std::move(tool);
  }

  Json call(const std::string& name, const Json& arguments) {
    const Tool& tool = tools_.at(name);
    if (!tool.async_handler) return tool.handler(arguments).structured_json();
    std::promise<ToolResult> answered;
    tool.async_handler(Json(arguments), [&answered](ToolResult result) { answered.set_value(std::move(result)); });
    return answered.get_future().get().structured_json();
  }

  Json prepare(const std::string& intent) {
    const PrepareRequest r = charge(intent);
    return call("fence_prepare", {{"intent", r.intent}, {"domain", r.domain}, {"tool", r.tool}, {"args", r.args},
                                  {"agent", r.agent}});
  }

  SessionAdmissions& admissions() { return *admissions_; }

 private:
  std::shared_ptr<SessionAdmissions> admissions_;
  std::map<std::string, Tool> tools_;
};

std::string state_of(Fence& fence, const std::string& intent) {
  auto status = fence.intent_status(intent);
  REQUIRE(std::holds_alternative<IntentStatus>(status));
  return state_name(std::get<IntentStatus>(status).state);
}

}  // namespace

TEST_CASE("a session's admissions that were neither committed nor aborted are fenced unknown when it ends, and only those") {
  TempDir dir;
  auto fence = open_fence(file_settings(dir.file("ledger.sqlite")));
  Logger log("session_admissions_test", LogLevel::error);
  SessionTools session(std::make_shared<AdmissionOwners>(*fence), *fence, log);

  const Json left = session.prepare("charge:left");
  REQUIRE(left["status"] == "fresh");
  const Json done = session.prepare("charge:done");
  REQUIRE(session.call("fence_commit", {{"prepared", done["prepared"]}, {"result", {{"id", "ch_1"}}}})["status"] ==
          "committed");
  const Json failed = session.prepare("charge:failed");
  REQUIRE(session.call("fence_abort", {{"prepared", failed["prepared"]}, {"reason", "provider down"}})["status"] ==
          "aborted");
  CHECK(session.prepare("charge:left")["status"] == "refused");  // a duplicate holds nothing
  // A commit refused for good settles its ticket too: nothing is left to fence.
  const Json stale = session.prepare("charge:stale");
  REQUIRE(session.call("fence_abort", {{"prepared", stale["prepared"]}, {"reason", "gave up"}})["status"] == "aborted");
  CHECK(session.call("fence_commit", {{"prepared", stale["prepared"]}, {"result", {{"id", "late"}}}})["status"] ==
        "refused");
  CHECK(session.admissions().count() == 1);

  CHECK(session.admissions().fence_all("its session ended") == 1);
  CHECK(state_of(*fence, "charge:left") == "unknown");
  CHECK(state_of(*fence, "charge:done") == "done");
  CHECK(state_of(*fence, "charge:failed") == "failed");
  CHECK(session.admissions().count() == 0);
  // The holder can still record what happened.
  CHECK(session.call("fence_commit", {{"prepared", left["prepared"]}, {"result", {{"id", "ch_2"}}}})["status"] ==
        "committed");
}

TEST_CASE("a ticket kept alive through another session moves there: only that session's end fences it") {
  TempDir dir;
  auto fence = open_fence(file_settings(dir.file("ledger.sqlite")));
  Logger log("session_admissions_test", LogLevel::error);
  auto owners = std::make_shared<AdmissionOwners>(*fence);
  SessionTools first(owners, *fence, log);
  SessionTools second(owners, *fence, log);

  const Json ticket = first.prepare("charge:moved")["prepared"];
  CHECK(first.admissions().count() == 1);
  REQUIRE(second.call("fence_heartbeat", {{"prepared", ticket}})["status"] == "extended");
  CHECK(first.admissions().count() == 0);
  CHECK(second.admissions().count() == 1);

  // The session the client left ends: the one it reconnected through keeps the intent in flight.
  CHECK(first.admissions().fence_all("first session ended") == 0);
  CHECK(state_of(*fence, "charge:moved") == "in_flight");
  CHECK(second.call("fence_heartbeat", {{"prepared", ticket}})["status"] == "extended");
  CHECK(second.admissions().fence_all("second session ended") == 1);
  CHECK(state_of(*fence, "charge:moved") == "unknown");
}

TEST_CASE("a commit refused while its ticket still holds the intent keeps it the session's to fence") {
  TempDir dir;
  auto fence = open_fence(file_settings(dir.file("ledger.sqlite")));
  Logger log("session_admissions_test", LogLevel::error);
  SessionTools session(std::make_shared<AdmissionOwners>(*fence), *fence, log);

  const Json ticket = session.prepare("charge:big-id")["prepared"];
  // A result with an integer beyond 2^53 has no canonical form: refused before the ledger is touched.
  const Json refused = session.call("fence_commit", {{"prepared", ticket}, {"result", {{"id", 9007199254740993LL}}}});
  REQUIRE(refused["status"] == "refused");
  CHECK(refused["reason"] == "invalid_request");
  CHECK(state_of(*fence, "charge:big-id") == "in_flight");
  CHECK(session.admissions().count() == 1);
  CHECK(session.admissions().fence_all("its session ended") == 1);
  CHECK(state_of(*fence, "charge:big-id") == "unknown");
}

TEST_CASE("a commit or abort with an edited ticket leaves the session's real admission to be fenced when it ends") {
  TempDir dir;
  auto fence = open_fence(file_settings(dir.file("ledger.sqlite")));
  Logger log("session_admissions_test", LogLevel::error);
  SessionTools session(std::make_shared<AdmissionOwners>(*fence), *fence, log);

  const Json ticket = session.prepare("charge:held")["prepared"];
  for (const char* field : {"intent", "domain"}) {
    Json edited = ticket;
    edited[field] = "charge:other";
    for (const char* tool : {"fence_commit", "fence_abort"}) {
      const Json refused = tool == std::string("fence_commit")
                               ? session.call(tool, {{"prepared", edited}, {"result", {{"ok", 1}}}})
                               : session.call(tool, {{"prepared", edited}, {"reason", "mixed up"}});
      INFO(tool << " with an edited " << field << ": " << refused.dump());
      CHECK(refused["status"] == "refused");
    }
  }
  CHECK(state_of(*fence, "charge:held") == "in_flight");
  CHECK(session.admissions().count() == 1);
  CHECK(session.admissions().fence_all("its session ended") == 1);
  CHECK(state_of(*fence, "charge:held") == "unknown");
}
