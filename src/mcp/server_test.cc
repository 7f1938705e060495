#include "mcp/server.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "mcp/jsonrpc.h"

using namespace effectfence;
using namespace effectfence::mcp;

namespace {

// Collects what the server sends; lets a test wait for a given response.
class Outbox {
 public:
  Server::Sink sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mutex_);
      lines_.push_back(Json::parse(line));
      arrived_.notify_all();
    };
  }
  // The response to id, waiting up to 10 s for it.
  Json response(const Json& id) {
    std::unique_lock<std::mutex> lock(mutex_);
    Json found;
    arrived_.wait_for(lock, std::chrono::seconds(10), [&] {
      for (const auto& m : lines_) {
        if (m.contains("id") && m["id"] == id) {
          found = m;
          return true;
        }
      }
      return false;
    });
    if (found.is_null()) FAIL("no response to " << id.dump());
    return found;
  }
  std::vector<Json> all() {
    std::lock_guard<std::mutex> lock(mutex_);
    return lines_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<Json> lines_;
};

// A gate a tool waits behind until the test opens it.
struct Gate {
  std::mutex mutex;
  std::condition_variable changed;
  bool open = false;
  bool entered = false;
  void enter_and_wait() {
    std::unique_lock<std::mutex> lock(mutex);
    entered = true;
    changed.notify_all();
    changed.wait_for(lock, std::chrono::seconds(10), [&] { return open; });
  }
  bool wait_entered() {
    std::unique_lock<std::mutex> lock(mutex);
    return changed.wait_for(lock, std::chrono::seconds(10), [&] { return entered; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mutex);
    open = true;
    changed.notify_all();
  }
};

std::vector<Tool> test_tools(Gate* gate) {
  Tool echo;
  echo.name = "echo";
  echo.description = "echoes text";
  echo.input_schema = Json::parse(
      R"({"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false})");
  echo.output_schema = Json::parse(R"({"type":"object","properties":{"text":{"type":"string"}}})");
  echo.handler = [](const Json& a) { return ToolResult{Json{{"text", a["text"]}}, false}; };

  Tool slow = echo;
  slow.name = "slow";
  slow.handler = [gate](const Json& a) {
    gate->enter_and_wait();
    return ToolResult{Json{{"text", a["text"]}}, false};
  };

  Tool failing;
  failing.name = "failing";
  failing.input_schema = Json{{"type", "object"}};
  failing.handler = [](const Json&) -> ToolResult { throw std::runtime_error("boom"); };

  Tool picky = failing;
  picky.name = "picky";
  picky.handler = [](const Json&) -> ToolResult { throw InvalidArguments("give a or b"); };

  Tool refusing = failing;
  refusing.name = "refusing";
  refusing.handler = [](const Json&) { return ToolResult{Json{{"status", "refused"}}, true}; };
  return {echo, slow, failing, picky, refusing};
}

struct Fixture {
  Gate gate;
  Outbox out;
  Logger log{"test", LogLevel::error};
  Server server{ServerInfo{"t", "Test", "1.0", "use it"}, test_tools(&gate), out.sink(), log};

  Json call(const Json& id, const std::string& method, const Json& params = Json::object()) {
    server.handle_line(jsonrpc::serialize(jsonrpc::request(id, method, params)));
    return out.response(id);
  }
};

}  // namespace

TEST_CASE("initialize echoes a supported protocol version, else answers the latest", "[server]") {
  for (const char* version : {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}) {
    Fixture f;
    Json r = f.call(version, "initialize", {{"protocolVersion", version}, {"capabilities", Json::object()}});
    CHECK(r["result"]["protocolVersion"] == version);
  }
  Fixture f;
  CHECK(f.call(2, "initialize", Json::object())["error"]["code"] == jsonrpc::kInvalidParams);
  Json r = f.call(1, "initialize", {{"protocolVersion", "1999-01-01"}});  // the bad one above did not count
  CHECK(r["result"]["protocolVersion"] == "2025-11-25");
  CHECK(r["result"]["serverInfo"]["name"] == "t");
  CHECK(r["result"]["capabilities"]["tools"].is_object());
  CHECK(r["result"]["instructions"] == "use it");
  Fixture odd;
  Json odd_client = odd.call(3, "initialize", {{"protocolVersion", "2025-06-18"}, {"clientInfo", {{"name", 7}}}});
  CHECK(odd_client["result"]["protocolVersion"] == "2025-06-18");
}

TEST_CASE("a session is initialized once: a second initialize is refused, and the session keeps serving",
          "[server]") {
  Fixture f;
  CHECK(f.call(1, "initialize", {{"protocolVersion", "2025-06-18"}})["result"]["protocolVersion"] == "2025-06-18");
  Json again = f.call(2, "initialize", {{"protocolVersion", "2025-11-25"}});
  CHECK(again["error"]["code"] == jsonrpc::kInvalidRequest);
  CHECK_THAT(again["error"]["message"].get<std::string>(),
             Catch::Contains("already initialized (protocol 2025-06-18)") &&
                 Catch::Contains("start a new server process"));
  CHECK(f.call(3, "ping")["result"] == Json::object());
}

TEST_CASE("an initialize its hook refused does not count: the next one is answered", "[server]") {
  Outbox out;
  Logger log{"test", LogLevel::error};
  int attempts = 0;
  ServerExtensions extensions;
  extensions.on_initialize = [&attempts](const Json&) -> std::optional<RpcError> {
    if (++attempts == 1) return RpcError{jsonrpc::kInternalError, "the child is not up yet", nullptr};
    return std::nullopt;
  };
  Server server{ServerInfo{"t", "", "1.0", ""}, {}, out.sink(), log, Server::kDefaultMaxConcurrentCalls, extensions};
  server.handle_line(jsonrpc::serialize(jsonrpc::request(1, "initialize", {{"protocolVersion", "2025-06-18"}})));
  CHECK(out.response(1)["error"]["code"] == jsonrpc::kInternalError);
  server.handle_line(jsonrpc::serialize(jsonrpc::request(2, "initialize", {{"protocolVersion", "2025-03-26"}})));
  CHECK(out.response(2)["result"]["protocolVersion"] == "2025-03-26");
  CHECK(attempts == 2);
}

TEST_CASE("ping, tools/list and unknown methods", "[server]") {
  Fixture f;
  CHECK(f.call("p", "ping")["result"] == Json::object());
  Json list = f.call(1, "tools/list")["result"]["tools"];
  REQUIRE(list.size() == 5);
  CHECK(list[0]["name"] == "echo");
  CHECK(list[0]["inputSchema"]["type"] == "object");
  CHECK(list[0]["outputSchema"]["type"] == "object");
  Json unknown = f.call(2, "resources/list");
  CHECK(unknown["error"]["code"] == jsonrpc::kMethodNotFound);
  // Every tool is on one page: no cursor was handed out, so none is valid.
  Json cursor = f.call(3, "tools/list", {{"cursor", "page-2"}});
  CHECK(cursor["error"]["code"] == jsonrpc::kInvalidParams);
  CHECK_THAT(cursor["error"]["message"].get<std::string>(), Catch::Contains("unknown cursor"));
  // A null cursor is no cursor: the first page.
  CHECK(f.call(4, "tools/list", {{"cursor", nullptr}})["result"]["tools"].size() == 5);
  // A notification sent with an id is a request for a method there is not;
  // the answer says what it is.
  Json noted = f.call(5, "notifications/initialized");
  CHECK(noted["error"]["code"] == jsonrpc::kMethodNotFound);
  CHECK_THAT(noted["error"]["message"].get<std::string>(), Catch::Contains("is a notification") &&
                                                               Catch::Contains("without an \"id\""));
}

TEST_CASE("tools/call returns structuredContent and the same JSON as text", "[server]") {
  Fixture f;
  Json r = f.call(1, "tools/call", {{"name", "echo"}, {"arguments", {{"text", "hi"}}}})["result"];
  CHECK(r["structuredContent"] == Json{{"text", "hi"}});
  CHECK(Json::parse(r["content"][0]["text"].get<std::string>()) == r["structuredContent"]);
  CHECK(r["content"][0]["type"] == "text");
  CHECK(r["isError"] == false);
  CHECK(f.call(2, "tools/call", {{"name", "refusing"}})["result"]["isError"] == true);
}

TEST_CASE("a tool result's line is byte for byte the serialized response, with the JSON once as text", "[server]") {
  const Json structured = {{"status", "refused"},
                           {"message", "quote \" backslash \\ newline \n tab \t snowman \u2603 nul \u0001"},
                           {"detail", {{"nested", {1, 2.5, nullptr, true}}, {"empty", Json::object()}}},
                           {"zeta", "last"}};
  for (const Json& id : {Json(7), Json("call-\"7\""), Json(-1)}) {
    for (bool is_error : {false, true}) {
      const ToolResult result{structured, is_error};
      const Json expected = jsonrpc::result_response(
          id, Json{{"content", Json::array({Json{{"type", "text"}, {"text", jsonrpc::serialize(structured)}}})},
                   {"structuredContent", structured},
                   {"isError", is_error}});
      const std::string line = tool_result_line(id, result);
      CHECK(line == jsonrpc::serialize(expected));
      const Json parsed = Json::parse(line);
      CHECK(parsed["result"]["structuredContent"] == structured);
      CHECK(Json::parse(parsed["result"]["content"][0]["text"].get<std::string>()) == structured);
    }
  }
}

TEST_CASE("a malformed tools/call or an unknown tool is -32602, arguments a tool refuses are a tool error, "
          "the server keeps serving",
          "[server]") {
  Fixture f;
  Json unknown = f.call(1, "tools/call", {{"name", "nope"}});
  CHECK(unknown["error"]["code"] == jsonrpc::kInvalidParams);
  CHECK_THAT(unknown["error"]["message"].get<std::string>(), Catch::Contains("unknown tool") && Catch::Contains("echo"));
  CHECK(f.call(4, "tools/call", {{"arguments", Json::object()}})["error"]["code"] == jsonrpc::kInvalidParams);
  CHECK(f.call(5, "tools/call", {{"name", "echo"}, {"arguments", "x"}})["error"]["code"] == jsonrpc::kInvalidParams);

  // MCP 2025-11-25 (SEP-1303): the model sees these and can correct them.
  // Text only: a structuredContent would have to match echo's outputSchema.
  auto tool_error_text = [](const Json& response) {
    INFO(response.dump());
    CHECK_FALSE(response.contains("error"));
    CHECK(response["result"]["isError"] == true);
    CHECK_FALSE(response["result"].contains("structuredContent"));
    return response["result"]["content"][0]["text"].get<std::string>();
  };
  CHECK_THAT(tool_error_text(f.call(2, "tools/call", {{"name", "echo"}, {"arguments", Json::object()}})),
             Catch::Contains("invalid arguments for echo") && Catch::Contains("/text"));
  CHECK_THAT(tool_error_text(f.call(3, "tools/call", {{"name", "echo"}, {"arguments", {{"text", 5}}}})),
             Catch::Contains("/text"));
  CHECK_THAT(tool_error_text(f.call(6, "tools/call", {{"name", "picky"}})), Catch::Contains("give a or b"));
  Json failing = f.call(7, "tools/call", {{"name", "failing"}});
  CHECK(failing["error"]["code"] == jsonrpc::kInternalError);
  CHECK_THAT(failing["error"]["message"].get<std::string>(), Catch::Contains("boom"));
  CHECK(f.call(8, "ping")["result"] == Json::object());
}

TEST_CASE("malformed lines are answered and blank lines, notifications and malformed responses are not", "[server]") {
  Fixture f;
  f.server.handle_line("   ");
  f.server.handle_line(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
  f.server.handle_line(R"({"jsonrpc":"2.0","method":"notifications/whatever"})");
  // Response-shaped: answering would send the client a response to its own id 5.
  f.server.handle_line(R"({"jsonrpc":"2.0","id":5,"result":{},"error":{"code":1,"message":"x"}})");
  f.server.handle_line(R"({"jsonrpc":"2.0","id":6,"result":{},"error":null})");
  f.server.handle_line("{nope");
  // An oversized notification: a method, and no id ahead of its params nor at its end.
  f.server.handle_oversized(R"({"jsonrpc":"2.0","method":"notifications/message","params":{"data":"aaa)", "aaa\"}}");
  f.server.handle_oversized(R"({"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"x":"aaa)");
  CHECK(f.out.response("big")["error"]["code"] == jsonrpc::kInvalidRequest);
  f.server.handle_oversized(R"({"jsonrpc":"2.0","method":"tools/call","params":{"x":"aaa)", R"(aaa"},"id":"late"})");
  CHECK(f.out.response("late")["error"]["code"] == jsonrpc::kInvalidRequest);
  auto all = f.out.all();
  REQUIRE(all.size() == 3);
  CHECK(all[0]["error"]["code"] == jsonrpc::kParseError);
  CHECK(all[0]["id"].is_null());
}

TEST_CASE("an unreadable notification is not answered, and a cancellation with a lone surrogate still cancels",
          "[server]") {
  Fixture f;
  f.server.handle_line(R"({"jsonrpc":"2.0","method":"notifications/whatever","params":{"a":1,"a":2}})");
  f.server.handle_line(R"({"jsonrpc":"2.0","method":"notifications/whatever","params":{"s":"\udc00"}})");
  f.server.handle_line(R"({"jsonrpc":"2.0","method":"notifications/whatever","params":{"n":123456789012345678901}})");
  CHECK(f.out.all().empty());

  f.server.handle_line(jsonrpc::serialize(
      jsonrpc::request("c", "tools/call", {{"name", "slow"}, {"arguments", {{"text", "x"}}}})));
  REQUIRE(f.gate.wait_entered());
  // A reason cut mid-emoji, as JSON.stringify writes it.
  f.server.handle_line(R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c","reason":"stop \ud83d"}})");
  f.gate.release();
  f.server.drain();
  CHECK(f.out.all().empty());
  CHECK(f.server.calls_in_flight() == 0);
}

TEST_CASE("an id holding a lone surrogate is not read as another id that holds U+FFFD", "[server]") {
  Fixture f;
  // A call whose id really is U+FFFD.
  f.server.handle_line(R"({"jsonrpc":"2.0","id":"\ufffd","method":"tools/call","params":{"name":"slow","arguments":{"text":"kept"}}})");
  REQUIRE(f.gate.wait_entered());
  // Neither names it: a ping under "\ud800" is no reuse of its id, and a
  // cancellation of "\ud800" does not cancel it.
  f.server.handle_line(R"({"jsonrpc":"2.0","id":"\ud800","method":"ping"})");
  f.server.handle_line(R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"\ud800"}})");
  const std::vector<Json> meanwhile = f.out.all();
  REQUIRE(meanwhile.size() == 1);
  CHECK(meanwhile[0]["id"].is_null());  // its id cannot be told: answered as unreadable
  CHECK_THAT(meanwhile[0]["error"]["message"].get<std::string>(), !Catch::Contains("already used"));
  f.gate.release();
  f.server.drain();
  const std::vector<Json> all = f.out.all();
  REQUIRE(all.size() == 2);
  CHECK(all[1]["id"] == "\xEF\xBF\xBD");
  CHECK(all[1]["result"]["structuredContent"]["text"] == "kept");  // not cancelled
}

TEST_CASE("a slow call does not hold up other requests", "[server]") {
  Fixture f;
  f.server.handle_line(jsonrpc::serialize(
      jsonrpc::request(1, "tools/call", {{"name", "slow"}, {"arguments", {{"text", "late"}}}})));
  REQUIRE(f.gate.wait_entered());
  CHECK(f.call(2, "ping")["result"] == Json::object());
  CHECK(f.call(3, "tools/call", {{"name", "echo"}, {"arguments", {{"text", "early"}}}})["result"]["structuredContent"]["text"] == "early");
  // The echo's worker sends its answer before it counts itself out.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (f.server.calls_in_flight() > 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(f.server.calls_in_flight() == 1);  // the slow call, still held
  f.gate.release();
  CHECK(f.out.response(1)["result"]["structuredContent"]["text"] == "late");
  auto all = f.out.all();
  CHECK(all.back()["id"] == 1);  // answered last, though asked first
}

TEST_CASE("a cancelled call completes but its result is not sent", "[server]") {
  Fixture f;
  f.server.handle_line(jsonrpc::serialize(
      jsonrpc::request("c", "tools/call", {{"name", "slow"}, {"arguments", {{"text", "x"}}}})));
  REQUIRE(f.gate.wait_entered());
  Json duplicate = f.call("c", "tools/call", {{"name", "echo"}, {"arguments", {{"text", "y"}}}});
  CHECK(duplicate["error"]["code"] == jsonrpc::kInvalidRequest);
  f.server.handle_line(jsonrpc::serialize(
      jsonrpc::notification("notifications/cancelled", {{"requestId", "c"}, {"reason", 42}})));
  f.gate.release();
  f.server.drain();
  for (const auto& m : f.out.all()) CHECK_FALSE(m.contains("result"));
  CHECK(f.server.calls_in_flight() == 0);
}

namespace {

Tool relayed_tool(const std::string& name, std::function<Reply(const Json&, CallContext&)> handler) {
  Tool tool;
  tool.name = name;
  tool.input_schema = Json{{"type", "object"}, {"properties", {{"n", {{"type", "integer"}}}}}, {"required", {"n"}}};
  tool.check_arguments = false;
  tool.listing_entry = Json{{"name", name}, {"inputSchema", tool.input_schema}, {"icons", Json::array()}};
  tool.contextual_handler = std::move(handler);
  return tool;
}

}  // namespace

TEST_CASE("a relaying server lists entries as given and sends replies as they are", "[server][extensions]") {
  Outbox out;
  Logger log{"test", LogLevel::error};
  Json seen_meta;
  std::vector<Tool> tools = {relayed_tool("relay", [&](const Json& args, CallContext& call) {
    seen_meta = call.meta();
    if (args.contains("fail")) return Reply::failure(-32000, "child said no", Json{{"why", "x"}});
    return Reply::of(Json{{"content", Json::array()}, {"odd", args}});
  })};
  ServerExtensions extensions;
  extensions.capabilities = Json{{"tools", {{"listChanged", true}}}, {"logging", Json::object()}};
  Server server{ServerInfo{"t", "", "1", ""}, tools, out.sink(), log, 4, extensions};
  auto ask = [&](const Json& id, const std::string& method, const Json& params = Json::object()) {
    server.handle_line(jsonrpc::serialize(jsonrpc::request(id, method, params)));
    return out.response(id);
  };

  CHECK(ask(1, "initialize", {{"protocolVersion", "2025-11-25"}})["result"]["capabilities"] == extensions.capabilities);
  CHECK(ask(2, "tools/list")["result"]["tools"][0] == tools[0].listing_entry);
  // Arguments the schema would refuse reach the handler: the relayed server judges them.
  Json relayed = ask(3, "tools/call", {{"name", "relay"}, {"arguments", {{"m", "x"}}}, {"_meta", {{"progressToken", 9}}}});
  CHECK(relayed["result"] == Json{{"content", Json::array()}, {"odd", {{"m", "x"}}}});
  CHECK(seen_meta == Json{{"progressToken", 9}});
  Json failed = ask(4, "tools/call", {{"name", "relay"}, {"arguments", {{"fail", true}}}});
  CHECK(failed["error"] == Json{{"code", -32000}, {"message", "child said no"}, {"data", {{"why", "x"}}}});
}

TEST_CASE("set_tools replaces the list while a running call keeps its tool", "[server][extensions]") {
  Gate gate;
  Outbox out;
  Logger log{"test", LogLevel::error};
  std::vector<Tool> first = {relayed_tool("old", [&](const Json&, CallContext&) {
    gate.enter_and_wait();
    return Reply::of(Json{{"from", "old"}});
  })};
  Server server{ServerInfo{"t", "", "1", ""}, first, out.sink(), log};
  server.handle_line(jsonrpc::serialize(jsonrpc::request(1, "tools/call", {{"name", "old"}, {"arguments", Json::object()}})));
  REQUIRE(gate.wait_entered());
  server.set_tools({relayed_tool("new", [](const Json&, CallContext&) { return Reply::of(Json{{"from", "new"}}); })});
  server.handle_line(jsonrpc::serialize(jsonrpc::request(2, "tools/list", Json::object())));
  Json listed = out.response(2)["result"]["tools"];
  REQUIRE(listed.size() == 1);
  CHECK(listed[0]["name"] == "new");
  server.handle_line(jsonrpc::serialize(jsonrpc::request(3, "tools/call", {{"name", "old"}})));
  CHECK(out.response(3)["error"]["code"] == jsonrpc::kInvalidParams);
  gate.release();
  CHECK(out.response(1)["result"]["from"] == "old");
}

TEST_CASE("a cancellation reaches the handler's callback, other requests and notifications reach the hooks",
          "[server][extensions]") {
  Gate gate;
  Outbox out;
  Logger log{"test", LogLevel::error};
  std::mutex mutex;
  std::condition_variable changed;
  bool cancel_seen = false;
  std::vector<std::string> notes;
  std::vector<Tool> tools = {relayed_tool("wait", [&](const Json&, CallContext& call) {
    call.on_cancel([&] {
      std::lock_guard<std::mutex> lock(mutex);
      cancel_seen = true;
      changed.notify_all();
    });
    gate.enter_and_wait();
    return Reply::of(Json::object());
  })};
  ServerExtensions extensions;
  extensions.on_request = [](const std::string& method, const Json& params) {
    return Reply::of(Json{{"method", method}, {"params", params}});
  };
  extensions.on_notification = [&](const std::string& method, const Json&) {
    std::lock_guard<std::mutex> lock(mutex);
    notes.push_back(method);
  };
  Server server{ServerInfo{"t", "", "1", ""}, tools, out.sink(), log, 4, extensions};

  server.handle_line(jsonrpc::serialize(jsonrpc::request("w", "tools/call", {{"name", "wait"}})));
  REQUIRE(gate.wait_entered());
  server.handle_line(jsonrpc::serialize(jsonrpc::notification("notifications/cancelled", {{"requestId", "w"}})));
  {
    std::unique_lock<std::mutex> lock(mutex);
    CHECK(changed.wait_for(lock, std::chrono::seconds(10), [&] { return cancel_seen; }));
  }
  gate.release();
  server.handle_line(jsonrpc::serialize(jsonrpc::request(5, "resources/list", {{"cursor", "c"}})));
  CHECK(out.response(5)["result"] == Json{{"method", "resources/list"}, {"params", {{"cursor", "c"}}}});
  server.handle_line(jsonrpc::serialize(jsonrpc::notification("notifications/roots/list_changed", Json::object())));
  server.notify("notifications/tools/list_changed", Json::object());
  server.drain();
  {
    std::lock_guard<std::mutex> lock(mutex);
    CHECK(notes == std::vector<std::string>{"notifications/cancelled", "notifications/roots/list_changed"});
  }
  auto all = out.all();
  CHECK(all.back() == jsonrpc::notification("notifications/tools/list_changed", Json::object()));
  for (const auto& m : all) CHECK(m.value("id", Json()) != "w");
}

namespace {

// An asynchronous tool whose answers the test gives by hand, from its own thread.
struct Deferred {
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<std::pair<Json, Tool::Respond>> pending;  // (arguments, respond)

  Tool tool(const std::string& name) {
    Tool t;
    t.name = name;
    t.input_schema = Json{{"type", "object"}};
    t.async_handler = [this](const Json& arguments, Tool::Respond respond) {
      if (arguments.contains("now")) return respond(ToolResult{Json{{"now", arguments["now"]}}, false});
      if (arguments.contains("bad")) throw InvalidArguments("bad was given");
      std::lock_guard<std::mutex> lock(mutex);
      pending.emplace_back(arguments, std::move(respond));
      arrived.notify_all();
    };
    return t;
  }
  bool wait_pending(size_t n) {
    std::unique_lock<std::mutex> lock(mutex);
    return arrived.wait_for(lock, std::chrono::seconds(10), [&] { return pending.size() >= n; });
  }
  // Answers the oldest pending call from another thread.
  void answer_oldest() {
    std::pair<Json, Tool::Respond> call;
    {
      std::lock_guard<std::mutex> lock(mutex);
      call = std::move(pending.front());
      pending.erase(pending.begin());
    }
    std::thread([call = std::move(call)] { call.second(ToolResult{Json{{"echo", call.first}}, false}); }).join();
  }
};

}  // namespace

TEST_CASE("an asynchronous tool answers later, from any thread, without holding up other calls", "[server][async]") {
  Deferred deferred;
  Outbox out;
  Logger log{"test", LogLevel::error};
  Server server{ServerInfo{"t", "", "1.0", ""}, {deferred.tool("later")}, out.sink(), log};
  server.handle_line(jsonrpc::serialize(jsonrpc::request(1, "tools/call", {{"name", "later"}, {"arguments", {{"n", 1}}}})));
  server.handle_line(jsonrpc::serialize(jsonrpc::request(2, "tools/call", {{"name", "later"}, {"arguments", {{"now", 2}}}})));
  server.handle_line(jsonrpc::serialize(jsonrpc::request(3, "tools/call", {{"name", "later"}, {"arguments", {{"bad", 1}}}})));
  server.handle_line(jsonrpc::serialize(jsonrpc::request(4, "ping", Json::object())));
  // Answered while call 1 is still pending: an immediate answer, an error, a ping.
  CHECK(out.response(2)["result"]["structuredContent"]["now"] == 2);
  CHECK(out.response(3)["result"]["isError"] == true);  // arguments the handler refused: a tool error
  CHECK_THAT(out.response(3)["result"]["content"][0]["text"].get<std::string>(), Catch::Contains("bad was given"));
  CHECK(out.response(4)["result"] == Json::object());
  REQUIRE(deferred.wait_pending(1));
  CHECK(server.calls_in_flight() == 1);
  deferred.answer_oldest();
  Json r = out.response(1);
  CHECK(r["result"]["structuredContent"]["echo"]["n"] == 1);
  CHECK(r["result"]["isError"] == false);
  CHECK(server.calls_in_flight() == 0);
  int answers_to_1 = 0;
  for (const auto& m : out.all()) answers_to_1 += m.value("id", Json()) == 1 ? 1 : 0;
  CHECK(answers_to_1 == 1);
}

TEST_CASE("asynchronous calls beyond what the server takes are refused busy at once, and drain waits for every answer",
          "[server][async]") {
  Deferred deferred;
  Outbox out;
  Logger log{"test", LogLevel::error};
  Server server{ServerInfo{"t", "", "1.0", ""}, {deferred.tool("later")}, out.sink(), log, /*max_concurrent_calls=*/2};
  const size_t accepted = 2 + Server::kQueuedPerRunningCall * 2;
  auto call = [&](int id) {
    server.handle_line(jsonrpc::serialize(jsonrpc::request(id, "tools/call", {{"name", "later"}, {"arguments", {{"n", id}}}})));
  };
  // Taken in on the spot (a reader that waited for room would hang here).
  auto filling = std::async(std::launch::async, [&] {
    for (size_t id = 1; id <= accepted; ++id) call(static_cast<int>(id));
  });
  REQUIRE(filling.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  REQUIRE(deferred.wait_pending(accepted));
  const int over = static_cast<int>(accepted) + 1;
  // The reader is not held: the call over the limit is answered on the spot.
  auto reader = std::async(std::launch::async, [&] { call(over); });
  REQUIRE(reader.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  const Json busy = out.response(over);
  CHECK(busy["error"]["code"] == jsonrpc::kServerBusy);
  CHECK_THAT(busy["error"]["message"].get<std::string>(), Catch::Contains("was not started"));
  CHECK(server.calls_in_flight() == accepted);
  server.handle_line(jsonrpc::serialize(jsonrpc::request("p", "ping", Json::object())));
  CHECK(out.response("p")["result"] == Json::object());

  deferred.answer_oldest();
  call(over + 1);  // room again once one was answered
  REQUIRE(deferred.wait_pending(accepted));
  std::atomic<bool> drained{false};
  std::thread drainer([&] {
    server.drain();
    drained = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(drained);
  for (size_t i = 0; i < accepted; ++i) deferred.answer_oldest();
  drainer.join();
  CHECK(drained);
  for (int id = 1; id <= over + 1; ++id) {
    if (id == over) continue;
    CHECK(out.response(id)["result"]["structuredContent"]["echo"]["n"] == id);
  }
}

TEST_CASE("an answer the client cannot receive is undone before drain returns", "[server][async]") {
  // A serve whose client closed stdout withdraws the admission the answer
  // carried; it must be queued before serve goes on to fence what it holds.
  Deferred deferred;
  Logger log{"test", LogLevel::error};
  Server server{ServerInfo{"t", "", "1.0", ""}, {}, [](const std::string&) { throw OutputClosed("gone"); }, log};
  Tool tool = deferred.tool("later");
  std::atomic<bool> undone{false};
  tool.on_undelivered = [&undone](const ToolResult& result) {
    CHECK(result.structured["echo"]["n"] == 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a slow undo: drain must wait for it
    undone = true;
  };
  server.set_tools({tool});
  server.handle_line(jsonrpc::serialize(jsonrpc::request(1, "tools/call", {{"name", "later"}, {"arguments", {{"n", 1}}}})));
  REQUIRE(deferred.wait_pending(1));
  std::thread answering([&] { deferred.answer_oldest(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the answer is being undone
  server.drain();
  CHECK(undone);
  answering.join();
}

TEST_CASE("a call beyond the worker pool's room is refused busy at once, so the reader is never held",
          "[server]") {
  Gate gate;
  Outbox out;
  Logger log{"test", LogLevel::error};
  Server server{ServerInfo{"t", "", "1.0", ""}, test_tools(&gate), out.sink(), log, /*max_concurrent_calls=*/1};
  auto call = [&](int id, const char* tool) {
    server.handle_line(jsonrpc::serialize(
        jsonrpc::request(id, "tools/call", {{"name", tool}, {"arguments", {{"text", std::to_string(id)}}}})));
  };
  // One running and every waiting place taken, all held by a gate that only
  // this thread, the reader, can open: as a relayed sampling answer would.
  call(1, "slow");
  REQUIRE(gate.wait_entered());
  const int taken = 1 + static_cast<int>(Server::kQueuedPerRunningCall);
  for (int id = 2; id <= taken; ++id) call(id, "slow");
  auto reader = std::async(std::launch::async, [&] { call(taken + 1, "echo"); });
  REQUIRE(reader.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  CHECK(out.response(taken + 1)["error"]["code"] == jsonrpc::kServerBusy);
  gate.release();
  for (int id = 1; id <= taken; ++id) CHECK(out.response(id)["result"]["structuredContent"]["text"] == std::to_string(id));
}

TEST_CASE("an id already used by a call in flight is refused -32600, the first call still completes", "[server]") {
  Fixture f;
  f.server.handle_line(jsonrpc::serialize(jsonrpc::request(7, "tools/call", {{"name", "slow"}, {"arguments", {{"text", "first"}}}})));
  REQUIRE(f.gate.wait_entered());
  Json dup = f.call(7, "tools/call", {{"name", "echo"}, {"arguments", {{"text", "second"}}}});
  CHECK(dup["error"]["code"] == jsonrpc::kInvalidRequest);
  CHECK_THAT(dup["error"]["message"].get<std::string>(), Catch::Contains("already used by a call in flight"));
  // So are requests answered on the spot, and requests refused on the spot
  // for what they hold: every answer below would otherwise be a second
  // answer to 7 (each is sent before handle_line returns).
  const std::vector<std::string> answered_at_once = {
      jsonrpc::serialize(jsonrpc::request(7, "ping", Json::object())),
      jsonrpc::serialize(jsonrpc::request(7, "tools/list", Json::object())),
      jsonrpc::serialize(jsonrpc::request(7, "no/such/method", Json::object())),
      jsonrpc::serialize(jsonrpc::request(7, "tools/call", {{"name", "nope"}})),
      jsonrpc::serialize(jsonrpc::request(7, "tools/call", {{"name", "echo"}, {"arguments", {{"text", 1}}}})),
      R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":[1]})",
      R"({"jsonrpc":"1.0","id":7,"method":"ping"})",
      R"({"jsonrpc":"2.0","id":7,"method":"ping","params":{"a":1,"a":2}})",
      R"({"jsonrpc":"2.0","id":7,"method":"ping","params":{"s":"\ud800"}})",
  };
  for (const std::string& line : answered_at_once) {
    const size_t before = f.out.all().size();
    f.server.handle_line(line);
    const std::vector<Json> after = f.out.all();
    REQUIRE(after.size() == before + 1);
    INFO(line << " -> " << after.back().dump());
    CHECK(after.back()["id"] == 7);
    CHECK(after.back()["error"]["code"] == jsonrpc::kInvalidRequest);
    CHECK_THAT(after.back()["error"]["message"].get<std::string>(), Catch::Contains("already used by a call in flight"));
  }
  {
    const size_t before = f.out.all().size();
    f.server.handle_oversized(R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"x":"aaa)", "aaa\"}}");
    const std::vector<Json> after = f.out.all();
    REQUIRE(after.size() == before + 1);
    CHECK(after.back()["id"] == 7);
    CHECK_THAT(after.back()["error"]["message"].get<std::string>(), Catch::Contains("already used by a call in flight"));
  }
  f.gate.release();
  f.server.drain();
  int results_for_7 = 0;
  for (const auto& m : f.out.all()) {
    if (m.value("id", Json()) == 7 && m.contains("result")) {
      ++results_for_7;
      CHECK(m["result"]["structuredContent"]["text"] == "first");
    }
  }
  CHECK(results_for_7 == 1);
}

TEST_CASE("an id stays in flight until its answer is out: a reuse meanwhile is refused, never answered first",
          "[server]") {
  Outbox out;
  Logger log{"test", LogLevel::error};
  Gate gate;
  std::mutex mutex;
  std::condition_variable changed;
  bool writing_answer = false, let_it_out = false;
  const Server::Sink collect = out.sink();
  // The answer to call 7 stalls in the sink, as on a stdout nobody reads yet.
  Server::Sink stalling = [&](const std::string& line) {
    const Json message = Json::parse(line);
    if (message.value("id", Json()) == 7 && message.contains("result") && message["result"].contains("content")) {
      std::unique_lock<std::mutex> lock(mutex);
      writing_answer = true;
      changed.notify_all();
      changed.wait(lock, [&] { return let_it_out; });
    }
    collect(line);
  };
  Server server{ServerInfo{"t", "Test", "1.0", "use it"}, test_tools(&gate), stalling, log};
  server.handle_line(jsonrpc::serialize(jsonrpc::notification("notifications/initialized", Json::object())));
  server.handle_line(jsonrpc::serialize(jsonrpc::request(7, "tools/call", {{"name", "echo"}, {"arguments", {{"text", "first"}}}})));
  {
    std::unique_lock<std::mutex> lock(mutex);
    REQUIRE(changed.wait_for(lock, std::chrono::seconds(10), [&] { return writing_answer; }));
  }
  server.handle_line(jsonrpc::serialize(jsonrpc::request(7, "ping", Json::object())));
  const std::vector<Json> meanwhile = out.all();
  {
    std::lock_guard<std::mutex> lock(mutex);
    let_it_out = true;
    changed.notify_all();
  }
  server.drain();
  REQUIRE(meanwhile.size() == 1);
  CHECK(meanwhile[0]["id"] == 7);
  CHECK_THAT(meanwhile[0]["error"]["message"].get<std::string>(), Catch::Contains("already used by a call in flight"));
  const std::vector<Json> all = out.all();
  REQUIRE(all.size() == 2);
  CHECK(all[1]["result"]["structuredContent"]["text"] == "first");
  CHECK(server.calls_in_flight() == 0);
}

namespace {

// The replies a server's requests got, by the order they were made.
struct Replies {
  std::mutex mutex;
  std::vector<Reply> got;
  Server::ReplyHandler handler() {
    return [this](Reply reply) {
      std::lock_guard<std::mutex> lock(mutex);
      got.push_back(std::move(reply));
    };
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mutex);
    return got.size();
  }
};

// The requests the server has sent its client so far.
std::vector<Json> requests_sent(Outbox& out) {
  std::vector<Json> requests;
  for (const Json& m : out.all()) {
    if (m.contains("method") && m.contains("id")) requests.push_back(m);
  }
  return requests;
}

}  // namespace

TEST_CASE("requests to the client wait for its initialized, carry the server's ids and get the client's answers",
          "[server][requests]") {
  Fixture f;
  Replies replies;
  f.server.request("roots/list", Json::object(), replies.handler());
  CHECK(requests_sent(f.out).empty());  // the client has not said initialized yet
  f.call(1, "initialize", {{"protocolVersion", "2025-11-25"}});
  f.server.handle_line(jsonrpc::serialize(jsonrpc::notification("notifications/initialized", Json::object())));
  f.server.request("sampling/createMessage", {{"maxTokens", 5}}, replies.handler());
  std::vector<Json> sent = requests_sent(f.out);
  REQUIRE(sent.size() == 2);
  CHECK(sent[0]["method"] == "roots/list");
  CHECK(sent[1]["method"] == "sampling/createMessage");
  CHECK(sent[1]["params"] == Json{{"maxTokens", 5}});
  CHECK(sent[0]["id"] != sent[1]["id"]);
  CHECK(f.server.requests_in_flight() == 2);

  // Answered out of order: an error, an answer to an id never used, a result.
  f.server.handle_line(jsonrpc::serialize(jsonrpc::error_response(sent[1]["id"], -1, "declined", {{"why", "user"}})));
  f.server.handle_line(jsonrpc::serialize(jsonrpc::result_response("effectfence-999", Json::object())));
  f.server.handle_line(jsonrpc::serialize(jsonrpc::result_response(sent[0]["id"], {{"roots", Json::array()}})));
  REQUIRE(replies.size() == 2);
  CHECK(replies.got[0].error);
  CHECK(replies.got[0].error->code == -1);
  CHECK(replies.got[0].error->message == "declined");
  CHECK(replies.got[0].error->data == Json{{"why", "user"}});
  CHECK_FALSE(replies.got[1].error);
  CHECK(replies.got[1].result == Json{{"roots", Json::array()}});
  CHECK(f.server.requests_in_flight() == 0);
  // The answers are not answered: nothing but the two requests and initialize's result went out.
  CHECK(f.out.all().size() == 3);
  // A second answer to an id already answered is dropped too.
  f.server.handle_line(jsonrpc::serialize(jsonrpc::result_response(sent[0]["id"], Json::object())));
  CHECK(replies.size() == 2);
}

TEST_CASE("a cancelled request: the client is told if it was sent, and its answer is dropped", "[server][requests]") {
  Fixture f;
  Replies replies;
  const Json queued = f.server.request("roots/list", Json::object(), replies.handler());
  REQUIRE(queued.is_string());
  f.server.cancel_request(queued, "not needed any more");  // never sent: nothing to tell
  f.server.handle_line(jsonrpc::serialize(jsonrpc::notification("notifications/initialized", Json::object())));
  CHECK(requests_sent(f.out).empty());
  CHECK(f.out.all().empty());

  const Json sent = f.server.request("sampling/createMessage", Json::object(), replies.handler());
  REQUIRE(requests_sent(f.out).size() == 1);
  f.server.cancel_request(sent, "timed out");
  const std::vector<Json> out = f.out.all();
  REQUIRE(out.size() == 2);
  CHECK(out[1] == jsonrpc::notification("notifications/cancelled", {{"requestId", sent}, {"reason", "timed out"}}));
  f.server.handle_line(jsonrpc::serialize(jsonrpc::result_response(sent, Json::object())));
  CHECK(replies.size() == 0);
  CHECK(f.server.requests_in_flight() == 0);
  f.server.cancel_request(sent, "again");  // already forgotten: nothing more is sent
  CHECK(f.out.all().size() == 2);
}

TEST_CASE("drain fails the requests the client has not answered, sent or queued, and every later one",
          "[server][requests]") {
  Fixture f;
  Replies replies;
  f.server.request("elicitation/create", Json::object(), replies.handler());  // queued: not initialized
  f.server.handle_line(jsonrpc::serialize(jsonrpc::notification("notifications/initialized", Json::object())));
  f.server.request("roots/list", Json::object(), replies.handler());  // sent
  f.server.request("sampling/createMessage", Json::object(), replies.handler());
  REQUIRE(requests_sent(f.out).size() == 3);
  f.server.handle_line(jsonrpc::serialize(jsonrpc::result_response(requests_sent(f.out)[2]["id"], Json::object())));
  f.server.drain();
  REQUIRE(replies.size() == 3);
  CHECK_FALSE(replies.got[0].error);  // the one answered
  for (size_t i : {1, 2}) {
    REQUIRE(replies.got[i].error);
    CHECK(replies.got[i].error->code == jsonrpc::kInternalError);
  }
  f.server.request("roots/list", Json::object(), replies.handler());
  REQUIRE(replies.size() == 4);
  CHECK(replies.got[3].error);
  CHECK(requests_sent(f.out).size() == 3);
}

TEST_CASE("a call can wait on a request to the client without holding up the reading thread", "[server][requests]") {
  Outbox out;
  Logger log{"test", LogLevel::error};
  Server* server_ptr = nullptr;
  // The tool asks the client and answers with what the client said.
  std::vector<Tool> tools = {relayed_tool("ask", [&](const Json&, CallContext&) {
    std::mutex mutex;
    std::condition_variable answered;
    std::optional<Reply> got;
    server_ptr->request("sampling/createMessage", {{"maxTokens", 1}}, [&](Reply reply) {
      std::lock_guard<std::mutex> lock(mutex);
      got = std::move(reply);
      answered.notify_all();
    });
    std::unique_lock<std::mutex> lock(mutex);
    answered.wait_for(lock, std::chrono::seconds(10), [&] { return got.has_value(); });
    return got ? Reply::of(Json{{"client_said", got->result}}) : Reply::failure(-1, "no answer");
  })};
  Server server{ServerInfo{"t", "", "1", ""}, tools, out.sink(), log};
  server_ptr = &server;
  server.handle_line(jsonrpc::serialize(jsonrpc::notification("notifications/initialized", Json::object())));
  server.handle_line(jsonrpc::serialize(jsonrpc::request(1, "tools/call", {{"name", "ask"}})));
  Json asked;
  for (int i = 0; i < 1000 && asked.is_null(); ++i) {
    for (const Json& m : requests_sent(out)) asked = m;
    if (asked.is_null()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(asked["method"] == "sampling/createMessage");
  // The reading thread still answers while the call waits.
  server.handle_line(jsonrpc::serialize(jsonrpc::request(2, "ping", Json::object())));
  CHECK(out.response(2)["result"] == Json::object());
  server.handle_line(jsonrpc::serialize(jsonrpc::result_response(asked["id"], {{"text", "hi"}})));
  CHECK(out.response(1)["result"] == Json{{"client_said", {{"text", "hi"}}}});
}

TEST_CASE("a response that cannot be read is never answered: it fails the request of ours it answers",
          "[server][requests]") {
  Fixture f;
  Replies replies;
  f.call(1, "initialize", {{"protocolVersion", "2025-11-25"}});
  f.server.handle_line(jsonrpc::serialize(jsonrpc::notification("notifications/initialized", Json::object())));
  const size_t answers_before = f.out.all().size();
  const std::vector<std::string> unreadable = {
      R"(,"result":{"content":{"type":"text","text":"cut \ud83d"}}})",  // a lone surrogate
      R"(,"result":{"n":12345678901234567000}})",                          // a number no double keeps apart
      R"(,"result":{"a":1,"a":2}})",                                       // a duplicate key
      R"(,"result":{},"error":{"code":1,"message":"both"}})",              // two outcomes
  };
  for (size_t i = 0; i < unreadable.size(); ++i) {
    f.server.request("sampling/createMessage", {{"maxTokens", 5}}, replies.handler());
    const Json id = requests_sent(f.out).back()["id"];
    f.server.handle_line(R"({"jsonrpc":"2.0","id":)" + id.dump() + unreadable[i]);
    REQUIRE(replies.size() == i + 1);
    REQUIRE(replies.got[i].error);
    CHECK_THAT(replies.got[i].error->message, Catch::Contains("could not be read"));
  }
  // A response with the wrong envelope fails its request too.
  f.server.request("sampling/createMessage", {{"maxTokens", 5}}, replies.handler());
  f.server.handle_line(R"({"jsonrpc":"1.0","id":)" + requests_sent(f.out).back()["id"].dump() + R"(,"result":{}})");
  REQUIRE(replies.size() == unreadable.size() + 1);
  CHECK(replies.got.back().error);
  CHECK(f.server.requests_in_flight() == 0);
  // None of them was answered: only our own requests went out.
  CHECK(f.out.all().size() == answers_before + unreadable.size() + 1);
}

TEST_CASE("an oversized response is never answered: it fails the request of ours it answers", "[server][requests]") {
  Fixture f;
  Replies replies;
  f.call(1, "initialize", {{"protocolVersion", "2025-11-25"}});
  f.server.handle_line(jsonrpc::serialize(jsonrpc::notification("notifications/initialized", Json::object())));
  f.server.request("sampling/createMessage", {{"maxTokens", 5}}, replies.handler());
  const std::vector<Json> sent = requests_sent(f.out);
  REQUIRE(sent.size() == 1);
  const size_t before = f.out.all().size();

  // What the reader keeps of a line over the limit: its first bytes.
  f.server.handle_oversized(R"({"jsonrpc":"2.0","id":)" + sent[0]["id"].dump() + R"(,"result":{"content":"xxxxxxxx)");
  REQUIRE(replies.size() == 1);
  REQUIRE(replies.got[0].error);
  CHECK_THAT(replies.got[0].error->message, Catch::Contains("larger than"));
  f.server.handle_oversized(R"({"jsonrpc":"2.0","id":"never-ours","error":{"code":1,"message":"xxxxxxxx)");
  CHECK(f.out.all().size() == before);  // neither was answered
  CHECK(f.server.requests_in_flight() == 0);

  // Id last (the TypeScript SDK's order): found at the line's end; and one
  // with no id to be read is dropped, never answered with a null id.
  f.server.request("sampling/createMessage", {{"maxTokens", 5}}, replies.handler());
  const std::vector<Json> again = requests_sent(f.out);
  REQUIRE(again.size() == 2);
  f.server.handle_oversized(R"({"result":{"content":"xxxxxxxx)",
                            R"(xxxx"},"jsonrpc":"2.0","id":)" + again[1]["id"].dump() + "}");
  REQUIRE(replies.size() == 2);
  REQUIRE(replies.got[1].error);
  f.server.handle_oversized(R"({"result":{"content":"xxxxxxxx)", R"(xxxx"}})");
  CHECK(f.out.all().size() == before + 1);  // only the second request went out
  CHECK(f.server.requests_in_flight() == 0);
}

TEST_CASE("id_after_overflowing_number: serve answers a request whose id follows 1e400, once, under its id",
          "[server]") {
  Fixture f;
  f.server.handle_line(R"({"jsonrpc":"2.0","method":"m","params":{"n":1e400},"id":7})");
  auto all = f.out.all();
  REQUIRE(all.size() == 1);
  CHECK(all[0]["id"] == 7);
  CHECK(all[0]["error"]["code"] == jsonrpc::kInvalidParams);
}
