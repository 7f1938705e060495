#include "mcp/client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <condition_variable>
#include <csignal>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "mcp/child_process.h"
#include "mcp/jsonrpc.h"

using namespace effectfence;
using namespace effectfence::mcp;
using namespace std::chrono_literals;

namespace {

// The server end of a client's pipes, driven line by line by the test.
class ScriptedServer {
 public:
  ScriptedServer() {
    int to_client[2], from_client[2];
    REQUIRE(::pipe2(to_client, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(from_client, O_CLOEXEC) == 0);
    client_in_ = to_client[0];
    write_fd_ = to_client[1];
    read_fd_ = from_client[0];
    client_out_ = from_client[1];
  }
  ~ScriptedServer() {
    for (int fd : {client_in_, write_fd_, read_fd_, client_out_}) {
      if (fd >= 0) ::close(fd);
    }
  }
  int client_in() const { return client_in_; }
  int client_out() const { return client_out_; }

  void say_raw(const std::string& line) {
    const std::string framed = line + "\n";
    REQUIRE(::write(write_fd_, framed.data(), framed.size()) == static_cast<ssize_t>(framed.size()));
  }
  void say(const Json& message) { say_raw(message.dump()); }
  // The next message the client wrote, waiting up to 10 s.
  Json heard() {
    for (;;) {
      if (auto newline = buffer_.find('\n'); newline != std::string::npos) {
        Json message = Json::parse(buffer_.substr(0, newline));
        buffer_.erase(0, newline + 1);
        return message;
      }
      pollfd p = {read_fd_, POLLIN, 0};
      if (::poll(&p, 1, 10'000) <= 0) FAIL("the client wrote nothing within 10 s");
      char chunk[4096];
      const ssize_t n = ::read(read_fd_, chunk, sizeof chunk);
      if (n <= 0) FAIL("the client closed its output");
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }
  // Ends the server's output: what a crashed child does.
  void hang_up() {
    ::close(write_fd_);
    write_fd_ = -1;
  }

 private:
  int client_in_ = -1, write_fd_ = -1, read_fd_ = -1, client_out_ = -1;
  std::string buffer_;
};

// What the client reported through its handlers.
struct Reports {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::pair<std::string, Json>> notifications;
  std::vector<std::string> closes;

  McpClient::Handlers handlers() {
    McpClient::Handlers h;
    h.on_notification = [this](const std::string& method, const Json& params, const Json&) {
      std::lock_guard<std::mutex> lock(mutex);
      notifications.emplace_back(method, params);
      changed.notify_all();
    };
    h.on_closed = [this](const std::string& why) {
      std::lock_guard<std::mutex> lock(mutex);
      closes.push_back(why);
      changed.notify_all();
    };
    return h;
  }
  bool wait_for_notifications(size_t n) {
    std::unique_lock<std::mutex> lock(mutex);
    return changed.wait_for(lock, 10s, [&] { return notifications.size() >= n; });
  }
};

struct Fixture {
  ScriptedServer server;
  Reports reports;
  Logger log{"client-test", LogLevel::error};
  McpClient client{server.client_in(), server.client_out(), log, reports.handlers(), 1024};
};

}  // namespace

TEST_CASE("requests carry the client's own ids and replies find their request", "[client]") {
  Fixture f;
  auto first = f.client.send("tools/call", {{"name", "a"}});
  auto second = f.client.send("tools/call", {{"name", "b"}});
  const Json sent_first = f.server.heard();
  const Json sent_second = f.server.heard();
  CHECK(sent_first["id"] == first->id());
  CHECK(sent_second["id"] == second->id());
  CHECK(first->id() != second->id());
  CHECK(sent_first["params"]["name"] == "a");
  // Answered out of order.
  f.server.say(jsonrpc::result_response(second->id(), {{"n", 2}}));
  f.server.say(jsonrpc::error_response(first->id(), -32602, "bad", {{"field", "x"}}));
  auto second_reply = second->wait_for(10s);
  REQUIRE(second_reply);
  CHECK(second_reply->kind == ClientReply::Kind::result);
  CHECK(second_reply->result == Json{{"n", 2}});
  auto first_reply = first->wait_for(10s);
  REQUIRE(first_reply);
  CHECK(first_reply->kind == ClientReply::Kind::error);
  CHECK(first_reply->error.code == -32602);
  CHECK(first_reply->error.message == "bad");
  CHECK(first_reply->error.data == Json{{"field", "x"}});
}

TEST_CASE("garbage, unknown ids and untrustworthy answers are skipped, the client keeps reading", "[client]") {
  Fixture f;
  auto request = f.client.send("tools/call", Json::object());
  f.server.heard();
  f.server.say_raw("Server started on stdio");  // a log line on the wrong stream
  f.server.say(jsonrpc::result_response(999, Json::object()));
  f.server.say_raw(std::string(2000, 'x'));  // over the client's 1024-byte limit
  f.server.say_raw(R"({"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"still here"}})");
  REQUIRE(f.reports.wait_for_notifications(1));
  CHECK_FALSE(request->wait_for(0ms));
  // An answer with a duplicate key cannot pass for a result.
  f.server.say_raw(R"({"jsonrpc":"2.0","id":)" + request->id().dump() + R"(,"result":{"a":1,"a":2}})");
  auto reply = request->wait_for(10s);
  REQUIRE(reply);
  CHECK(reply->kind == ClientReply::Kind::unreadable);

  auto scalar = f.client.send("tools/call", Json::object());
  f.server.heard();
  f.server.say(jsonrpc::result_response(scalar->id(), 42));
  auto scalar_reply = scalar->wait_for(10s);
  REQUIRE(scalar_reply);
  CHECK(scalar_reply->kind == ClientReply::Kind::unreadable);
  CHECK_FALSE(f.client.closed());
}

TEST_CASE("an answer that does not parse fails its request as unreadable instead of leaving it waiting",
          "[client]") {
  Fixture f;
  for (const std::string& broken : {std::string(R"(,"result":{"content":[{"type":"text","text":")") + "\xff\"}]}}",
                                    std::string(R"(,"result":{"content":[]})"),
                                    std::string(R"(,"result":{"content":[],"x":NaN}})")}) {
    auto request = f.client.send("tools/call", Json::object());
    f.server.heard();
    f.server.say_raw(R"({"jsonrpc":"2.0","id":)" + request->id().dump() + broken);
    auto reply = request->wait_for(10s);
    REQUIRE(reply);
    CHECK(reply->kind == ClientReply::Kind::unreadable);
  }
  // An answer with neither outcome, or with a method too, is a broken answer.
  for (const std::string& broken : {std::string("}"), std::string(R"(,"method":"x","result":{"content":[]}})"),
                                    std::string(R"(,"error":{"code":1,"message":"m"},"method":"x"})")}) {
    auto request = f.client.send("tools/call", Json::object());
    f.server.heard();
    f.server.say_raw(R"({"jsonrpc":"2.0","id":)" + request->id().dump() + broken);
    auto reply = request->wait_for(10s);
    INFO(broken);
    REQUIRE(reply);
    CHECK(reply->kind == ClientReply::Kind::unreadable);
  }
  // A broken request of the server's own, under an id that happens to be
  // ours, is no answer: the real answer still finds its request.
  auto pending = f.client.send("tools/call", Json::object());
  f.server.heard();
  f.server.say_raw(R"({"jsonrpc":"2.0","id":)" + pending->id().dump() +
                   R"(,"method":"roots/list","params":{"text":"\xff"}})");
  f.server.say_raw(R"({"jsonrpc":"2.0","id":)" + pending->id().dump() + R"(,"method":"x","params":[1]})");
  f.server.say_raw(R"({"jsonrpc":"2.0","id":)" + pending->id().dump() + R"(,"params":{"t":"\xff"},"method":"x"})");
  f.server.say_raw(R"({"jsonrpc":"2.0","id":)" + pending->id().dump() + R"(,"Method":"roots/list","params":{}})");
  CHECK_FALSE(pending->wait_for(200ms));
  f.server.say(jsonrpc::result_response(pending->id(), Json{{"done", true}}));
  auto reply = pending->wait_for(10s);
  REQUIRE(reply);
  CHECK(reply->kind == ClientReply::Kind::result);
  CHECK_FALSE(f.client.closed());
}

TEST_CASE("an error code beyond 32 bits is an internal error, never wrapped into another code", "[client]") {
  Fixture f;
  // (Beyond 2^53 the whole answer is refused as ambiguous JSON: unreadable.)
  for (const char* code : {"4294934694", "1099511627781", "-4294967297", "2147483648"}) {
    INFO(code);
    auto request = f.client.send("tools/call", Json::object());
    f.server.heard();
    f.server.say_raw(R"({"jsonrpc":"2.0","id":)" + request->id().dump() + R"(,"error":{"code":)" + code +
                     R"(,"message":"boom"}})");
    auto reply = request->wait_for(10s);
    REQUIRE(reply);
    REQUIRE(reply->kind == ClientReply::Kind::error);
    CHECK(reply->error.code == jsonrpc::kInternalError);
    CHECK_THAT(reply->error.message, Catch::Contains("boom") && Catch::Contains(code));
  }
  auto ordinary = f.client.send("tools/call", Json::object());
  f.server.heard();
  f.server.say_raw(R"({"jsonrpc":"2.0","id":)" + ordinary->id().dump() + R"(,"error":{"code":-32000,"message":"x"}})");
  auto reply = ordinary->wait_for(10s);
  REQUIRE(reply);
  CHECK(reply->error.code == -32000);
}

TEST_CASE("an oversized answer fails its request as unreadable", "[client]") {
  Fixture f;
  auto request = f.client.send("tools/call", Json::object());
  f.server.heard();
  f.server.say_raw(R"({"jsonrpc":"2.0","id":)" + request->id().dump() + R"(,"result":{"text":")" + std::string(2000, 'y') + "\"}}");
  auto reply = request->wait_for(10s);
  REQUIRE(reply);
  CHECK(reply->kind == ClientReply::Kind::unreadable);
  CHECK_THAT(reply->why, Catch::Contains("longer than 1024 bytes"));
}

TEST_CASE("progress goes to the request that asked for it, under the client's token", "[client]") {
  Fixture f;
  std::mutex mutex;
  std::vector<Json> progress;
  auto request = f.client.send("tools/call", {{"name", "slow"}, {"_meta", {{"progressToken", "agent-token"}}}},
                               [&](const Json& params, const Json&) {
                                 std::lock_guard<std::mutex> lock(mutex);
                                 progress.push_back(params);
                               });
  const Json sent = f.server.heard();
  CHECK(sent["params"]["_meta"]["progressToken"] == request->id());
  f.server.say(jsonrpc::notification("notifications/progress", {{"progressToken", request->id()}, {"progress", 1}}));
  f.server.say(jsonrpc::notification("notifications/progress", {{"progressToken", "nobody"}, {"progress", 1}}));
  f.server.say(jsonrpc::notification("notifications/tools/list_changed", Json::object()));
  REQUIRE(f.reports.wait_for_notifications(1));
  {
    std::lock_guard<std::mutex> lock(f.reports.mutex);
    CHECK(f.reports.notifications[0].first == "notifications/tools/list_changed");
  }
  f.server.say(jsonrpc::result_response(request->id(), Json::object()));
  REQUIRE(request->wait_for(10s));
  std::lock_guard<std::mutex> lock(mutex);
  REQUIRE(progress.size() == 1);
  CHECK(progress[0]["progress"] == 1);
}

TEST_CASE("the server's requests: ping is answered, anything else is -32601", "[client]") {
  Fixture f;
  f.server.say(jsonrpc::request("s1", "ping", Json::object()));
  CHECK(f.server.heard() == jsonrpc::result_response("s1", Json::object()));
  f.server.say(jsonrpc::request(7, "sampling/createMessage", Json::object()));
  const Json refused = f.server.heard();
  CHECK(refused["id"] == 7);
  CHECK(refused["error"]["code"] == jsonrpc::kMethodNotFound);
}

TEST_CASE("cancel tells the server, abandon drops a late answer", "[client]") {
  Fixture f;
  auto request = f.client.send("tools/call", Json::object());
  f.server.heard();
  f.client.cancel(*request, "the agent gave up");
  CHECK(f.server.heard() == jsonrpc::notification("notifications/cancelled",
                                                   {{"requestId", request->id()}, {"reason", "the agent gave up"}}));
  f.client.abandon(*request);
  f.server.say(jsonrpc::result_response(request->id(), Json::object()));
  // The next exchange shows the late answer was read and dropped, not given to the request.
  f.server.say(jsonrpc::request("after", "ping", Json::object()));
  CHECK(f.server.heard()["id"] == "after");
  CHECK_FALSE(request->wait_for(0ms));
}

TEST_CASE("the end of the server's output fails what is pending and is reported once", "[client]") {
  Fixture f;
  auto request = f.client.send("tools/call", Json::object());
  f.server.heard();
  f.server.hang_up();
  auto reply = request->wait_for(10s);
  REQUIRE(reply);
  CHECK(reply->kind == ClientReply::Kind::closed);
  CHECK(request->delivered());
  {
    std::unique_lock<std::mutex> lock(f.reports.mutex);
    REQUIRE(f.reports.changed.wait_for(lock, 10s, [&] { return !f.reports.closes.empty(); }));
    CHECK(f.reports.closes.size() == 1);
  }
  CHECK(f.client.closed());
  auto late = f.client.send("tools/call", Json::object());
  CHECK_FALSE(late->delivered());
  auto late_reply = late->wait_for(0ms);
  REQUIRE(late_reply);
  CHECK(late_reply->kind == ClientReply::Kind::closed);
}

TEST_CASE("initialize_client and list_all_tools follow the handshake and every page", "[client]") {
  Fixture f;
  std::optional<StatusOr<Json>> init;
  std::thread client_side([&] { init = initialize_client(f.client, {{"name", "t"}, {"version", "1"}}, 10s); });
  const Json initialize = f.server.heard();
  CHECK(initialize["method"] == "initialize");
  CHECK(initialize["params"]["protocolVersion"] == "2025-11-25");
  CHECK(initialize["params"]["capabilities"] == Json::object());
  f.server.say(jsonrpc::result_response(
      initialize["id"], {{"protocolVersion", "2024-11-05"}, {"capabilities", {{"tools", Json::object()}}},
                         {"serverInfo", {{"name", "s"}, {"version", "1"}}}}));
  CHECK(f.server.heard()["method"] == "notifications/initialized");
  client_side.join();
  REQUIRE(init->ok());
  CHECK((**init)["protocolVersion"] == "2024-11-05");

  std::optional<StatusOr<std::vector<Json>>> tools;
  std::thread lister([&] { tools = list_all_tools(f.client, 10s); });
  const Json page1 = f.server.heard();
  CHECK_FALSE(page1["params"].contains("cursor"));
  f.server.say(jsonrpc::result_response(page1["id"], {{"tools", {{{"name", "a"}}}}, {"nextCursor", "p2"}}));
  const Json page2 = f.server.heard();
  CHECK(page2["params"]["cursor"] == "p2");
  f.server.say(jsonrpc::result_response(page2["id"], {{"tools", {{{"name", "b"}, {"x", 1}}}}}));
  lister.join();
  REQUIRE(tools->ok());
  CHECK(**tools == std::vector<Json>{{{"name", "a"}}, {{"name", "b"}, {"x", 1}}});

  std::thread looping([&] { tools = list_all_tools(f.client, 10s); });
  const Json again1 = f.server.heard();
  f.server.say(jsonrpc::result_response(again1["id"], {{"tools", Json::array()}, {"nextCursor", "same"}}));
  const Json again2 = f.server.heard();
  f.server.say(jsonrpc::result_response(again2["id"], {{"tools", Json::array()}, {"nextCursor", "same"}}));
  looping.join();
  CHECK_FALSE(tools->ok());
  CHECK_THAT(tools->status().message(), Catch::Contains("repeats the cursor"));
}

TEST_CASE("initialize_client refuses a protocol revision effectfence does not speak", "[client]") {
  Fixture f;
  std::optional<StatusOr<Json>> init;
  std::thread client_side([&] { init = initialize_client(f.client, {{"name", "t"}}, 10s); });
  const Json initialize = f.server.heard();
  f.server.say(jsonrpc::result_response(initialize["id"], {{"protocolVersion", "1999-01-01"}, {"capabilities", Json::object()}}));
  client_side.join();
  CHECK_FALSE(init->ok());
  CHECK_THAT(init->status().message(), Catch::Contains("1999-01-01"));
}

TEST_CASE("wake ends one wait early without inventing a reply", "[client]") {
  Fixture f;
  auto request = f.client.send("tools/call", Json::object());
  f.server.heard();
  std::thread waker([&] { request->wake(); });
  const auto begun = std::chrono::steady_clock::now();
  CHECK_FALSE(request->wait_for(60s));
  CHECK(std::chrono::steady_clock::now() - begun < 30s);
  waker.join();
  CHECK_FALSE(request->wait_for(0ms));
}

TEST_CASE("a server's request goes to the handler, which answers later from another thread under the server's id",
          "[client]") {
  ScriptedServer server;
  Logger log{"client-test", LogLevel::error};
  std::mutex mutex;
  std::condition_variable asked;
  std::vector<std::pair<std::string, Json>> seen;
  std::vector<std::function<void(Reply)>> responders;
  McpClient::Handlers handlers;
  handlers.on_request = [&](const Json&, const std::string& method, const Json& params, const Json&,
                            std::function<void(Reply)> respond) {
    std::lock_guard<std::mutex> lock(mutex);
    seen.emplace_back(method, params);
    responders.push_back(std::move(respond));
    asked.notify_all();
  };
  auto client = std::make_unique<McpClient>(server.client_in(), server.client_out(), log, handlers);
  auto wait_asked = [&](size_t n) {
    std::unique_lock<std::mutex> lock(mutex);
    return asked.wait_for(lock, 10s, [&] { return responders.size() >= n; });
  };

  server.say(jsonrpc::request("s1", "ping", Json::object()));  // still answered by the client itself
  CHECK(server.heard() == jsonrpc::result_response("s1", Json::object()));
  server.say(jsonrpc::request(7, "sampling/createMessage", {{"maxTokens", 9}}));
  server.say(jsonrpc::request("r", "roots/list", Json::object()));
  REQUIRE(wait_asked(2));
  CHECK(seen[0] == std::make_pair(std::string("sampling/createMessage"), Json{{"maxTokens", 9}}));
  CHECK(seen[1].first == "roots/list");

  // Answered in the other order, from other threads; a second answer is ignored.
  std::thread([&] { responders[1](Reply::failure(-32601, "no roots here")); }).join();
  std::thread([&] {
    responders[0](Reply::of({{"role", "assistant"}}));
    responders[0](Reply::of({{"role", "twice"}}));
  }).join();
  const Json roots = server.heard();
  CHECK(roots["id"] == "r");
  CHECK(roots["error"]["code"] == -32601);
  CHECK(roots["error"]["message"] == "no roots here");
  CHECK(server.heard() == jsonrpc::result_response(7, {{"role", "assistant"}}));

  // An answer that comes after the client is gone is dropped.
  server.say(jsonrpc::request(8, "elicitation/create", Json::object()));
  REQUIRE(wait_asked(3));
  client.reset();
  responders[2](Reply::of(Json::object()));  // must not touch the destroyed client
}

TEST_CASE("initialize_client offers the client capabilities it is given", "[client]") {
  Fixture f;
  const Json offered = {{"roots", {{"listChanged", true}}}, {"sampling", Json::object()}};
  std::thread client_side([&] { (void)initialize_client(f.client, {{"name", "t"}}, 10s, ClientOffer{"", offered}); });
  const Json init = f.server.heard();
  CHECK(init["params"]["capabilities"] == offered);
  f.server.say(jsonrpc::result_response(init["id"], {{"protocolVersion", "2025-11-25"}, {"capabilities", Json::object()}}));
  CHECK(f.server.heard()["method"] == "notifications/initialized");
  client_side.join();
}

TEST_CASE("a server that exits while a process it started holds its output open: what is pending fails as closed",
          "[client]") {
  // The server hears the request, starts a helper that inherits its stdout
  // and stderr, and dies without answering.
  auto child_started = ChildProcess::start({"sh", "-c", "read request; sleep 1000 & echo \"helper $!\" >&2; exit 7"},
                                           nullptr);
  REQUIRE(child_started.ok());
  auto child = std::move(*child_started);
  Reports reports;
  Logger log{"client-test", LogLevel::error};
  {
    McpClient client(child->stdout_fd(), child->stdin_fd(), log, reports.handlers(), 1024, child->exit_fd());
    auto request = client.send("tools/call", Json::object());
    auto reply = request->wait_for(10s);
    REQUIRE(reply);
    CHECK(reply->kind == ClientReply::Kind::closed);
    std::unique_lock<std::mutex> lock(reports.mutex);
    REQUIRE(reports.changed.wait_for(lock, 10s, [&] { return !reports.closes.empty(); }));
    CHECK_THAT(reports.closes.front(), Catch::Contains("the server exited"));
  }
  CHECK(child->wait_exit(10s) == 7);  // and its process group (the helper with it) is gone
}

TEST_CASE("a server that closes its input but keeps running is closed as gone, and reported once", "[client]") {
  ::signal(SIGPIPE, SIG_IGN);  // as every effectfence command does: a closed pipe is an error, not a death
  int to_server[2], from_server[2];
  REQUIRE(::pipe2(to_server, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(from_server, O_CLOEXEC) == 0);
  ::close(to_server[0]);  // the server stops reading; its output stays open
  Reports reports;
  Logger log{"client-test", LogLevel::error};
  {
    McpClient client(from_server[0], to_server[1], log, reports.handlers(), 1024);
    auto request = client.send("tools/call", Json::object());
    auto reply = request->wait_for(10s);
    REQUIRE(reply);
    CHECK(reply->kind == ClientReply::Kind::closed);
    CHECK_FALSE(request->delivered());
    std::unique_lock<std::mutex> lock(reports.mutex);
    REQUIRE(reports.changed.wait_for(lock, 10s, [&] { return !reports.closes.empty(); }));
    CHECK(reports.closes.size() == 1);
    CHECK_THAT(reports.closes.front(), Catch::Contains("closed its input"));
    lock.unlock();
    CHECK(client.closed());
  }
  for (int fd : {to_server[1], from_server[0], from_server[1]}) ::close(fd);
}

TEST_CASE("a write that fails fails the requests queued behind it, which were never sent, instead of leaving "
          "their senders waiting",
          "[client]") {
  ::signal(SIGPIPE, SIG_IGN);
  int to_server[2], from_server[2];
  REQUIRE(::pipe2(to_server, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(from_server, O_CLOEXEC) == 0);
  Reports reports;
  Logger log{"client-test", LogLevel::error};
  {
    McpClient client(from_server[0], to_server[1], log, reports.handlers(), 1 << 20);
    // A request larger than the pipe holds: its write waits for a reader
    // that never comes, and the next requests queue behind it.
    std::vector<std::shared_ptr<McpClient::Request>> requests(4);
    std::vector<std::thread> senders;
    senders.emplace_back([&] { requests[0] = client.send("tools/call", Json{{"blob", std::string(512 << 10, 'x')}}); });
    // The others go only once it fills the pipe (a slow start, under a
    // sanitizer, must not let them out first).
    int queued = 0;
    for (int i = 0; i < 2000 && queued < 4096; ++i) {
      REQUIRE(::ioctl(to_server[0], FIONREAD, &queued) == 0);
      if (queued < 4096) std::this_thread::sleep_for(5ms);
    }
    REQUIRE(queued >= 4096);
    std::this_thread::sleep_for(50ms);  // and is waiting for room
    for (size_t i = 1; i < requests.size(); ++i) {
      senders.emplace_back([&, i] { requests[i] = client.send("tools/call", Json{{"n", i}}); });
    }
    std::this_thread::sleep_for(100ms);
    ::close(to_server[0]);  // the server dies without reading on
    for (std::thread& sender : senders) sender.join();  // before the fix, these waited for ever
    for (const auto& request : requests) {
      REQUIRE(request);
      auto reply = request->wait_for(10s);
      REQUIRE(reply);
      CHECK(reply->kind == ClientReply::Kind::closed);
      CHECK_FALSE(request->delivered());
    }
    // And a request after the failure fails at once too.
    auto later = client.send("tools/call", Json::object());
    auto reply = later->wait_for(10s);
    REQUIRE(reply);
    CHECK(reply->kind == ClientReply::Kind::closed);
  }
  for (int fd : {to_server[1], from_server[0], from_server[1]}) ::close(fd);
}
