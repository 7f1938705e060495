#include "mcp/raw_json.h"

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "mcp/jsonrpc.h"
#include "mcp/server.h"

namespace effectfence::mcp {
namespace {

TEST_CASE("a raw node is written verbatim, key order and number spelling kept", "[raw_json]") {
  const std::string text = R"({"z":1.50,"a":{"y":[1e2,"\u00e9"],"b":null}})";
  const Json message = jsonrpc::result_response(7, raw_json(text));
  CHECK(jsonrpc::serialize(message) == R"({"id":7,"jsonrpc":"2.0","result":)" + text + "}");
  // Negative control: the same text parsed and written again is respelt and sorted.
  CHECK(jsonrpc::serialize(jsonrpc::result_response(7, Json::parse(text))) !=
        jsonrpc::serialize(message));
  // A tree without raw nodes is written as nlohmann writes it.
  const Json plain = {{"b", 1}, {"a", {1, 2.5, "x"}}};
  CHECK(jsonrpc::serialize(plain) == plain.dump());
  CHECK(is_raw_json(raw_json("{}")));
  CHECK_FALSE(is_raw_json(Json::binary({1, 2})));
  CHECK(raw_json_text(raw_json("  [1, 2] ")) == "[1, 2]");
}

TEST_CASE("member_text finds top-level members only, escaped keys too", "[raw_json]") {
  const std::string text = R"( { "a" : {"b": 1, "c": "}"} , "b" : [ 2, {"b":3} ], "k\u0065y": "v\"" } )";
  CHECK(member_text(text, "a") == std::optional<std::string_view>(R"({"b": 1, "c": "}"})"));
  CHECK(member_text(text, "b") == std::optional<std::string_view>(R"([ 2, {"b":3} ])"));
  CHECK(member_text(text, "key") == std::optional<std::string_view>(R"("v\"")"));
  CHECK_FALSE(member_text(text, "c"));
  CHECK_FALSE(member_text("[1]", "a"));
  CHECK(sent_member(R"({"method":"x"})", "params").is_null());
  CHECK(raw_json_text(sent_member(R"({"params":{"b":1,"a":2}})", "params")) == R"({"b":1,"a":2})");
}

TEST_CASE("with_member_text and without_member_text change one member and no other byte", "[raw_json]") {
  const std::string text = R"({"z":1, "_meta":{"q":true}, "a":2})";
  CHECK(with_member_text(text, "_meta", "{}") == R"({"z":1, "_meta":{}, "a":2})");
  CHECK(with_member_text(text, "new", R"({"x":1})") == R"({"z":1, "_meta":{"q":true}, "a":2,"new":{"x":1}})");
  CHECK(with_member_text("{}", "k", "1") == R"({"k":1})");
  CHECK(with_member_text("{ }", "k", "1") == R"({ "k":1})");
  CHECK(without_member_text(text, "_meta") == R"({"z":1, "a":2})");
  CHECK(without_member_text(text, "a") == R"({"z":1, "_meta":{"q":true}})");
  CHECK(without_member_text(text, "z") == R"({"_meta":{"q":true}, "a":2})");
  CHECK(without_member_text(R"({"only":1})", "only") == "{}");
  CHECK(without_member_text(text, "missing") == text);
  for (const std::string& edited : {with_member_text(text, "new", "[1]"), without_member_text(text, "_meta")}) {
    CHECK_NOTHROW(Json::parse(edited));
  }
}

TEST_CASE("element_texts splits an array as written", "[raw_json]") {
  const auto elements = element_texts(R"([ {"b":1,"a":[2,3]} , "x,y" ,1.0,[]])");
  REQUIRE(elements.size() == 4);
  CHECK(elements[0] == R"({"b":1,"a":[2,3]})");
  CHECK(elements[1] == R"("x,y")");
  CHECK(elements[2] == "1.0");
  CHECK(elements[3] == "[]");
  CHECK(element_texts("[]").empty());
  CHECK(element_texts(R"({"a":1})").empty());
}

// A server as wrap runs it (keep_sent_text), whose lines the test reads.
struct RelayingServer {
  Logger log{"raw-json-test", LogLevel::error};
  std::mutex mutex;
  std::vector<std::string> lines;
  std::vector<std::pair<std::string, Json>> passed;  // (method, params) the extensions got
  std::unique_ptr<Server> server;

  explicit RelayingServer(bool keep_sent_text) {
    ServerExtensions extensions;
    extensions.keep_sent_text = keep_sent_text;
    extensions.on_request = [this](const std::string& method, const Json& params) {
      std::lock_guard<std::mutex> lock(mutex);
      passed.emplace_back(method, params);
      return Reply::of(raw_json(R"({"z":1, "a":[2.50]})"));
    };
    extensions.on_notification = [this](const std::string& method, const Json& params) {
      std::lock_guard<std::mutex> lock(mutex);
      passed.emplace_back(method, params);
    };
    server = std::make_unique<Server>(ServerInfo{"t", "", "1", ""}, std::vector<Tool>{},
                                      [this](const std::string& line) {
                                        std::lock_guard<std::mutex> lock(mutex);
                                        lines.push_back(line);
                                      },
                                      log, 4, extensions);
  }
  std::string last_line() {
    std::lock_guard<std::mutex> lock(mutex);
    return lines.empty() ? "" : lines.back();
  }
};

TEST_CASE("a relaying server passes on what its client wrote, and writes what it relays as given", "[raw_json]") {
  RelayingServer relay(true);
  Server& server = *relay.server;
  server.handle_line(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");

  // Its own request to the client: params as given, none when null; the
  // client's answer comes back as the client wrote it.
  Json answered;
  server.request("sampling/createMessage", raw_json(R"({"z":1,"a":2})"), [&](Reply reply) { answered = reply.result; });
  CHECK(member_text(relay.last_line(), "params") == std::optional<std::string_view>(R"({"z":1,"a":2})"));
  const Json id = Json::parse(relay.last_line())["id"];
  server.handle_line(R"({"jsonrpc":"2.0","id":)" + id.dump() + R"(,"result":{"role":"assistant", "model":"m"}})");
  REQUIRE(is_raw_json(answered));
  CHECK(raw_json_text(answered) == R"({"role":"assistant", "model":"m"})");
  server.request("roots/list", nullptr, [](Reply) {});
  CHECK_FALSE(member_text(relay.last_line(), "params"));
  CHECK(member_text(relay.last_line(), "method") == std::optional<std::string_view>(R"("roots/list")"));

  // The client's requests and notifications: params as written, null when none.
  server.handle_line(R"({"jsonrpc":"2.0","id":5,"method":"prompts/get","params":{"name":"p","arguments":{"b":"1","a":"2"}}})");
  server.handle_line(R"({"jsonrpc":"2.0","id":6,"method":"prompts/list"})");
  server.handle_line(R"({"jsonrpc":"2.0","method":"notifications/roots/list_changed"})");
  server.drain();
  std::lock_guard<std::mutex> lock(relay.mutex);
  REQUIRE(relay.passed.size() == 3);
  std::map<std::string, Json> by_method(relay.passed.begin(), relay.passed.end());  // requests run on workers
  REQUIRE(is_raw_json(by_method["prompts/get"]));
  CHECK(raw_json_text(by_method["prompts/get"]) == R"({"name":"p","arguments":{"b":"1","a":"2"}})");
  CHECK(by_method.at("prompts/list").is_null());
  CHECK(by_method.at("notifications/roots/list_changed").is_null());
  // Its answer relays the result text as given.
  bool found = false;
  for (const std::string& line : relay.lines) {
    if (member_text(line, "id") == std::optional<std::string_view>("5")) {
      CHECK(member_text(line, "result") == std::optional<std::string_view>(R"({"z":1, "a":[2.50]})"));
      found = true;
    }
  }
  CHECK(found);
}

TEST_CASE("a server that does not relay passes on params parsed, {} when none were sent", "[raw_json]") {
  RelayingServer plain(false);
  plain.server->handle_line(R"({"jsonrpc":"2.0","id":6,"method":"prompts/list"})");
  plain.server->handle_line(R"({"jsonrpc":"2.0","method":"notifications/roots/list_changed"})");
  plain.server->drain();
  std::lock_guard<std::mutex> lock(plain.mutex);
  REQUIRE(plain.passed.size() == 2);
  for (const auto& [method, params] : plain.passed) CHECK(params == Json::object());
}

}  // namespace
}  // namespace effectfence::mcp
