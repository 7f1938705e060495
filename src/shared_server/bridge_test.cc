// The bridge against a real HttpTransport and mcp::Server, reached through
// a TCP relay that fails chosen exchanges the way a loaded machine does: a
// connection closed before the request got through, or after the server
// answered but before the answer got back.
#include "shared_server/bridge.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <deque>
#include <mutex>
#include <thread>

#include "shared_server/http_transport.h"

namespace effectfence::shared {
namespace {

using namespace std::chrono_literals;

enum class Fate { pass, drop_request, drop_answer };

// Reads an HTTP message's head and its Content-Length body from fd.
std::string read_request(int fd) {
  std::string data;
  char buf[4096];
  for (;;) {
    const auto head_end = data.find("\r\n\r\n");
    if (head_end != std::string::npos) {
      size_t length = 0;
      std::string head = data.substr(0, head_end);
      for (auto& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (const auto at = head.find("content-length:"); at != std::string::npos) {
        length = std::stoul(head.substr(at + 15));
      }
      if (data.size() >= head_end + 4 + length) return data;
    }
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return data;
    data.append(buf, static_cast<size_t>(n));
  }
}

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A TCP relay in front of the server: each tools/call meets the next fate
// queued (pass once the queue is empty); everything else passes.
class FailingRelay {
 public:
  explicit FailingRelay(int server_port) : server_port_(server_port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(listener_, 64) == 0);
    socklen_t len = sizeof addr;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FailingRelay() {
    stopping_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    thread_.join();
    ::close(listener_);
  }

  int port() const { return port_; }
  void then(Fate fate, int times = 1) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int i = 0; i < times; ++i) fates_.push_back(fate);
  }
  int dropped() const { return dropped_; }

 private:
  void serve() {
    while (!stopping_) {
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) continue;
      const std::string request = read_request(client);
      Fate fate = Fate::pass;
      if (request.find("\"tools/call\"") != std::string::npos) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!fates_.empty()) {
          fate = fates_.front();
          fates_.pop_front();
        }
      }
      if (fate == Fate::drop_request) {
        ++dropped_;
        ::close(client);
        continue;
      }
      // The server checks that Host names its own port (DNS-rebinding protection).
      std::string request_to_server = request;
      const std::string from = "127.0.0.1:" + std::to_string(port_), to = "127.0.0.1:" + std::to_string(server_port_);
      if (const auto at = request_to_server.find(from); at != std::string::npos) request_to_server.replace(at, from.size(), to);
      std::string response;
      if (const int server = connect_to(server_port_); server >= 0) {
        (void)!::write(server, request_to_server.data(), request_to_server.size());
        char buf[4096];
        ssize_t n;
        while ((n = ::read(server, buf, sizeof buf)) > 0) response.append(buf, static_cast<size_t>(n));
        ::close(server);
      }
      if (fate == Fate::drop_answer) {
        ++dropped_;
      } else {
        (void)!::write(client, response.data(), response.size());
      }
      ::close(client);
    }
  }

  const int server_port_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> dropped_{0};
  std::mutex mutex_;
  std::deque<Fate> fates_;
  std::thread thread_;
};

// A real transport serving one tool that counts its runs.
struct CountingServer {
  std::atomic<int> runs{0};
  mcp::Logger log{"test server", mcp::LogLevel::error};
  HttpTransport http{HttpOptions{"127.0.0.1", 0, "secret"},
                     [this](mcp::Server::Sink sink) {
                       mcp::Tool tool;
                       tool.name = "count";
                       tool.input_schema = Json{{"type", "object"}};
                       tool.handler = [this](const Json&) {
                         return mcp::ToolResult(Json{{"run", ++runs}}, false);
                       };
                       HttpTransport::SessionServer session;
                       session.server = std::make_unique<mcp::Server>(mcp::ServerInfo{"count", "", "1", ""},
                                                                      std::vector<mcp::Tool>{tool}, std::move(sink), log);
                       return session;
                     },
                     log};
  CountingServer() {
    REQUIRE(http.bind().ok());
    http.start();
  }
  int port() const { return std::stoi(http.url().substr(http.url().rfind(':') + 1)); }
};

// A bridge whose client is this test: lines in through one pipe, out through another.
struct BridgedClient {
  int in[2];
  int out[2];
  mcp::Logger log{"test bridge", mcp::LogLevel::error};
  std::unique_ptr<mcp::LineWriter> writer;
  std::unique_ptr<Bridge> bridge;
  std::thread runner;
  std::string pending;

  BridgedClient(int port, BridgeOptions options) {
    std::signal(SIGPIPE, SIG_IGN);
    REQUIRE(::pipe(in) == 0);
    REQUIRE(::pipe(out) == 0);
    writer = std::make_unique<mcp::LineWriter>(out[1]);
    auto endpoint = Endpoint::parse("http://127.0.0.1:" + std::to_string(port) + "/mcp", "secret");
    REQUIRE(endpoint);
    bridge = std::make_unique<Bridge>(*endpoint, []() -> StatusOr<Endpoint> {
      return Status::Error("no other server in this test");
    }, *writer, log, options);
    runner = std::thread([this] {
      mcp::FdLineReader reader(in[0], -1);
      bridge->run(reader);
    });
  }
  ~BridgedClient() {
    ::close(in[1]);
    runner.join();
    bridge.reset();
    ::close(in[0]);
    ::close(out[0]);
    ::close(out[1]);
  }

  void send(const Json& message) {
    const std::string line = message.dump() + "\n";
    REQUIRE(::write(in[1], line.data(), line.size()) == static_cast<ssize_t>(line.size()));
  }
  // The next line the bridge wrote, within 20 s.
  Json next() {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    for (;;) {
      if (const auto nl = pending.find('\n'); nl != std::string::npos) {
        Json message = Json::parse(pending.substr(0, nl));
        pending.erase(0, nl + 1);
        return message;
      }
      pollfd p{out[0], POLLIN, 0};
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::read(out[0], buf, sizeof buf);
      REQUIRE(n > 0);
      pending.append(buf, static_cast<size_t>(n));
    }
  }
  void handshake() {
    send({{"jsonrpc", "2.0"}, {"id", 0}, {"method", "initialize"},
          {"params", {{"protocolVersion", "2025-06-18"}, {"capabilities", Json::object()},
                      {"clientInfo", {{"name", "t"}, {"version", "1"}}}}}});
    REQUIRE(next().contains("result"));
    send({{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}});
  }
  Json call(int id) {
    send({{"jsonrpc", "2.0"}, {"id", id}, {"method", "tools/call"},
          {"params", {{"name", "count"}, {"arguments", Json::object()}}}});
    return next();
  }
};

BridgeOptions alive(std::atomic<bool>* is_alive, int64_t unresponsive_ms = 30'000) {
  BridgeOptions options;
  options.keepalive_ms = 3'600'000;
  options.unresponsive_ms = unresponsive_ms;
  options.server_alive = [is_alive](const Endpoint&) { return is_alive->load(); };
  return options;
}

TEST_CASE("busy is not dead: a call whose answer was lost on the way is sent again and gets the first answer, "
          "the tool having run once", "[bridge]") {
  CountingServer server;
  FailingRelay relay(server.port());
  std::atomic<bool> is_alive{true};
  BridgedClient client(relay.port(), alive(&is_alive));
  client.handshake();
  relay.then(Fate::drop_answer);
  const Json answer = client.call(7);
  INFO(answer.dump());
  REQUIRE(answer["id"] == 7);
  REQUIRE(answer["result"]["structuredContent"]["run"] == 1);
  REQUIRE(relay.dropped() == 1);
  REQUIRE(server.runs == 1);
  // The session goes on: the next call runs the tool once more.
  REQUIRE(client.call(8)["result"]["structuredContent"]["run"] == 2);
}

TEST_CASE("busy is not dead: a call that never got through is sent again and runs once", "[bridge]") {
  CountingServer server;
  FailingRelay relay(server.port());
  std::atomic<bool> is_alive{true};
  BridgedClient client(relay.port(), alive(&is_alive));
  client.handshake();
  relay.then(Fate::drop_request, 3);
  const Json answer = client.call(7);
  INFO(answer.dump());
  REQUIRE(answer["result"]["structuredContent"]["run"] == 1);
  REQUIRE(relay.dropped() == 3);
  REQUIRE(server.runs == 1);
}

TEST_CASE("a server whose process is gone is dead: the call in flight is answered server_lost, not sent again",
          "[bridge]") {
  CountingServer server;
  FailingRelay relay(server.port());
  std::atomic<bool> is_alive{true};
  BridgedClient client(relay.port(), alive(&is_alive));
  client.handshake();
  is_alive = false;
  relay.then(Fate::drop_answer);
  const Json answer = client.call(7);
  INFO(answer.dump());
  REQUIRE(answer["error"]["data"]["reason"] == "server_lost");
  REQUIRE(server.runs == 1);  // it did run: exactly why the call must not be sent again
}

TEST_CASE("a running server that answers nothing for the unresponsive bound is judged dead", "[bridge]") {
  CountingServer server;
  FailingRelay relay(server.port());
  std::atomic<bool> is_alive{true};
  BridgedClient client(relay.port(), alive(&is_alive, /*unresponsive_ms=*/300));
  client.handshake();
  relay.then(Fate::drop_answer, 1000);
  const auto started = std::chrono::steady_clock::now();
  const Json answer = client.call(7);
  INFO(answer.dump());
  REQUIRE(answer["error"]["data"]["reason"] == "server_lost");
  REQUIRE(std::chrono::steady_clock::now() - started >= 300ms);
  REQUIRE(server.runs == 1);  // every resend got the first delivery's answer (then lost again)
}

TEST_CASE("a shared server with every call turn taken and its wait full answers 429 server busy under the "
          "request's id, nothing decided, and the others once it has room, answering pings and /metrics meanwhile"
          , "[bridge][http]") {
  std::atomic<int> started{0};
  std::atomic<bool> open_gate{false};
  mcp::Logger log{"test server", mcp::LogLevel::error};
  HttpOptions options{"127.0.0.1", 0, "secret"};
  options.max_running_calls = 1;
  options.max_waiting_calls = 1;
  options.metrics = [] { return std::string("# the metrics\n"); };
  HttpTransport http{options,
                     [&](mcp::Server::Sink sink) {
                       mcp::Tool tool;
                       tool.name = "wait";
                       tool.input_schema = Json{{"type", "object"}};
                       tool.handler = [&](const Json&) {
                         ++started;
                         while (!open_gate) std::this_thread::sleep_for(5ms);
                         return mcp::ToolResult(Json{{"ok", true}}, false);
                       };
                       HttpTransport::SessionServer session;
                       session.server = std::make_unique<mcp::Server>(mcp::ServerInfo{"w", "", "1", ""},
                                                                      std::vector<mcp::Tool>{tool}, std::move(sink), log);
                       return session;
                     },
                     log};
  REQUIRE(http.bind().ok());
  http.start();
  const auto endpoint = Endpoint::parse(http.url(), "secret");
  REQUIRE(endpoint);
  const Json init{{"jsonrpc", "2.0"}, {"id", 0}, {"method", "initialize"},
                  {"params", {{"protocolVersion", "2025-06-18"}, {"capabilities", Json::object()},
                              {"clientInfo", {{"name", "t"}, {"version", "1"}}}}}};
  const HttpExchange opened = post_message(*endpoint, "", "", init.dump());
  REQUIRE(opened.status == 200);
  const std::string session = opened.session;
  auto call = [&](int id) {
    return post_message(*endpoint, session, "2025-06-18",
                        Json{{"jsonrpc", "2.0"}, {"id", id}, {"method", "tools/call"},
                             {"params", {{"name", "wait"}, {"arguments", Json::object()}}}}.dump());
  };
  HttpExchange first, second;
  std::thread a([&] { first = call(1); });
  while (started == 0) std::this_thread::sleep_for(5ms);  // the one handler is taken
  std::thread b([&] { second = call(2); });
  std::this_thread::sleep_for(300ms);  // the one queue slot is taken

  const HttpExchange third = call(3);
  REQUIRE(third.status == kTooBusy);
  REQUIRE(third.messages.size() == 1);
  const Json refusal = Json::parse(third.messages[0]);
  CHECK(refusal["id"] == 3);
  CHECK(refusal["error"]["code"] == -32000);
  CHECK(refusal["error"]["message"].get<std::string>().find("nothing was decided") != std::string::npos);
  CHECK(started == 1);

  // A tool call waits for its turn, not for a thread: what decides nothing is answered at once.
  const HttpExchange ping = post_message(*endpoint, session, "2025-06-18",
                                         Json{{"jsonrpc", "2.0"}, {"id", 4}, {"method", "ping"}}.dump());
  CHECK(ping.status == 200);
  httplib::Client scraper(endpoint->host, endpoint->port);
  scraper.set_read_timeout(5, 0);
  const auto metrics = scraper.Get("/metrics", {{"Authorization", "Bearer secret"}});
  REQUIRE(metrics);
  CHECK(metrics->status == 200);
  CHECK(metrics->body.find("# the metrics") == 0);
  CHECK(metrics->body.find("effectfence_http_requests_in_progress 1") != std::string::npos);  // the running call
  CHECK(metrics->body.find("effectfence_http_calls_waiting 1") != std::string::npos);         // the second
  CHECK(started == 1);

  open_gate = true;
  a.join();
  b.join();
  CHECK(first.status == 200);
  CHECK(second.status == 200);
  CHECK(started == 2);  // the refused one never ran
}

}  // namespace
}  // namespace effectfence::shared
