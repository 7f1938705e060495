// StatelessRequests on a real mcp::Server with a tool that answers by
// callback from another thread, as fence_prepare does: an answer whose
// client went away is never handed over, and the tool hears of it.
#include "shared_server/stateless_requests.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <thread>

#include "mcp/jsonrpc.h"

namespace effectfence::shared {
namespace {

// A server with one tool, "slow", that answers {"n": <its argument>} after
// delay_ms from a thread of its own; undelivered counts the answers the
// server reported as not sent.
struct Fixture {
  mcp::Logger log{"test stateless", mcp::LogLevel::error};
  std::atomic<int> undelivered{0};
  std::atomic<bool> responding{false};  // set just before the tool answers
  int delay_ms = 300;
  StatelessRequests requests{[this](mcp::Server::Sink sink) {
                               mcp::Tool slow;
                               slow.name = "slow";
                               slow.input_schema = {{"type", "object"}};
                               slow.async_handler = [this](Json&& arguments, mcp::Tool::Respond respond) {
                                 std::thread([this, arguments, respond] {
                                   std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
                                   responding = true;
                                   respond(mcp::ToolResult(Json{{"n", arguments.value("n", 0)}}, false));
                                 }).detach();
                               };
                               slow.on_undelivered = [this](const mcp::ToolResult&) { ++undelivered; };
                               return std::make_unique<mcp::Server>(mcp::ServerInfo{"t", "", "1", ""},
                                                                    std::vector<mcp::Tool>{slow}, sink, log);
                             },
                             log};
  std::atomic<bool> stopping{false};

  static Json call(const Json& id, int n) {
    return {{"jsonrpc", "2.0"},
            {"id", id},
            {"method", "tools/call"},
            {"params",
             {{"name", "slow"},
              {"arguments", {{"n", n}}},
              {"_meta",
               {{"io.modelcontextprotocol/protocolVersion", "2026-07-28"},
                {"io.modelcontextprotocol/clientCapabilities", Json::object()}}}}}};
  }
};

TEST_CASE("a stateless answer goes back under the client's id, stamped for 2026-07-28, and two clients may share an id",
          "[stateless]") {
  Fixture f;
  auto first = std::async(std::launch::async, [&] { return f.requests.handle(Fixture::call(1, 10), [] { return true; }, f.stopping); });
  auto second = std::async(std::launch::async, [&] { return f.requests.handle(Fixture::call(1, 20), [] { return true; }, f.stopping); });
  const Json a = Json::parse(first.get());
  const Json b = Json::parse(second.get());
  CHECK(a["id"] == 1);
  CHECK(b["id"] == 1);
  CHECK(a["result"]["structuredContent"]["n"] == 10);
  CHECK(b["result"]["structuredContent"]["n"] == 20);
  CHECK(a["result"]["resultType"] == "complete");
  CHECK(f.undelivered == 0);  // the control: delivered answers are not taken back
  CHECK(f.requests.in_progress() == 0);
}

TEST_CASE("a client gone before the answer cancels the call: nothing is handed over and the tool takes it back",
          "[stateless]") {
  Fixture f;
  std::atomic<int> checks{0};
  // Connected for the first look, gone after: the client closed while the tool worked.
  const std::string answer = f.requests.handle(Fixture::call("x", 1), [&] { return checks++ == 0; }, f.stopping);
  CHECK(answer.empty());
  for (int i = 0; i < 100 && f.undelivered == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(f.undelivered == 1);
}

TEST_CASE("a client gone just as the answer comes: the answer is refused at the handover and taken back",
          "[stateless]") {
  Fixture f;
  // Connected until the tool starts answering: the close and the answer
  // cross, and whichever look sees it first, nothing is handed over.
  const std::string answer = f.requests.handle(Fixture::call(7, 1), [&] { return !f.responding.load(); }, f.stopping);
  CHECK(answer.empty());
  for (int i = 0; i < 100 && f.undelivered == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(f.undelivered == 1);
}

}  // namespace
}  // namespace effectfence::shared
