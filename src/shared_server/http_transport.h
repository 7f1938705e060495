// MCP Streamable HTTP (2025-11-25) in front of one mcp::Server per session,
// and (2026-07-28) without sessions in front of one more mcp::Server for
// every stateless request (StatelessRequests): a POST whose request names
// protocol 2026-07-28 in params._meta, or asks server/discover, opens none.
//
//   POST /mcp    one JSON-RPC message. A request is answered in the HTTP
//                response (application/json, or a one-event text/event-stream
//                when the client prefers it); notifications and responses get
//                202. initialize opens a session (Mcp-Session-Id).
//   DELETE /mcp  ends the session.
//   GET /mcp     405: this server sends nothing unasked.
//   GET /metrics the server's counters in the Prometheus text format
//                (HttpOptions::metrics; 404 without it).
//
// Every request must carry "Authorization: Bearer <token>" (401 otherwise)
// and a loopback Host and Origin (403 otherwise: DNS-rebinding protection).
// An unknown session is 404, so a client knows to initialize again.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"
#include "mcp/jsonrpc.h"
#include "mcp/log.h"
#include "mcp/server.h"
#include "shared_server/call_gate.h"
#include "shared_server/deliveries.h"
#include "shared_server/stateless_requests.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace effectfence::shared {

// The status of a request the server took and handled but could not answer
// (it stopped, or the session ended, meanwhile): it may have been decided,
// so unlike 503 and 404 (never processed) it must not be sent again.
constexpr int kAnswerLost = 500;
// The status of a resend (same Idempotency-Key) of a message the server
// decided, whose answer it no longer keeps: not decided again.
constexpr int kAnswerGone = 410;
// The status of a request refused because the server has as many requests
// queued as it takes: nothing was decided, send it again later. Its body is
// a JSON-RPC error (kServerBusy) under the request's id.
constexpr int kTooBusy = 429;
// Names one delivery of a message: a resend under the same key gets the
// first delivery's answer instead of being handled again.
constexpr const char* kIdempotencyHeader = "Idempotency-Key";

struct HttpOptions {
  std::string bind_host = "127.0.0.1";
  int port = 0;  // 0: chosen by the operating system
  std::string token;
  // A session with no request for this long is closed (a client that died
  // without DELETE). Bridges ping well within it.
  int64_t session_ttl_ms = 120'000;
  // Tool calls run at once, and calls that may wait for a turn (CallGate);
  // a call beyond both is answered kTooBusy at once, nothing decided.
  size_t max_running_calls = 128;
  size_t max_waiting_calls = 1024;
  // The body of GET /metrics (mcp::kPrometheusContentType), written when
  // asked; unset: no /metrics. Called on the HTTP threads, several at once.
  std::function<std::string()> metrics = nullptr;
};

class HttpTransport {
 public:
  // One session's MCP server, and what to do once the session has ended
  // (DELETE, the TTL, or the transport stopping) and its calls finished.
  struct SessionServer {
    std::unique_ptr<mcp::Server> server;
    std::function<void()> ended;
  };
  // Builds the MCP server of one session; sink carries its outgoing lines.
  using ServerFactory = std::function<SessionServer(mcp::Server::Sink sink)>;

  HttpTransport(HttpOptions options, ServerFactory factory, mcp::Logger& log);
  // Stops listening and closes every session (their calls finish first).
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Binds the socket, or returns why not.
  Status bind();
  // Serves on a background thread. REQUIRES: bind() succeeded.
  void start();
  // Stops taking requests (503), lets the requests in progress get their
  // answers (within a grace period), then stops listening.
  void stop();

  // http://<host>:<port>/mcp
  std::string url() const;
  size_t session_count() const;
  // Closes sessions idle beyond the TTL. Returns how many.
  size_t expire_idle_sessions();
  // Milliseconds since the last session closed (or since start when none
  // opened yet); 0 while a session is open.
  int64_t ms_without_sessions() const;
  // Returns true iff a session was ever opened.
  bool had_session() const;

  // Handles one request as the routes of /mcp do (the Host, Origin and
  // token checks, then POST, DELETE or GET), without a socket: the seam the
  // HTTP fuzzer (tests/fuzz/fuzz_http.cc) drives. Any other path is 404.
  void handle(const httplib::Request& req, httplib::Response& res);

 private:
  struct Session;

  void handle_post(const httplib::Request& req, httplib::Response& res);
  void handle_delete(const httplib::Request& req, httplib::Response& res);
  static void handle_get(httplib::Response& res);
  // Answers a resend of a message the session has seen (Idempotency-Key).
  static void answer_resend(httplib::Response& res, Deliveries::Seen seen, const mcp::jsonrpc::Request* request,
                            const std::optional<std::string>& earlier, bool event_stream);
  // 403/401 checks; returns true iff the request may proceed.
  bool admit(const httplib::Request& req, httplib::Response& res) const;
  bool host_allowed(const std::string& host_header) const;
  bool origin_allowed(const std::string& origin) const;
  std::shared_ptr<Session> find_session(const std::string& id) const;
  // Returns true iff `id` is that of a call still waiting in the session the
  // request names: a second answer under it would reach that call's client.
  bool id_in_flight(const httplib::Request& req, const Json& id) const;
  std::shared_ptr<Session> open_session();
  void close_session(const std::shared_ptr<Session>& session, const char* why);
  void forget_session(const std::string& id);

  const HttpOptions options_;
  const ServerFactory factory_;
  mcp::Logger& log_;
  std::unique_ptr<httplib::Server> http_;
  int listen_fd_ = -1;  // set by bind(), on its thread
  int port_ = 0;
  std::thread listener_;
  size_t requests_in_progress() const;

  // 2026-07-28 requests, which open no session; built on first use.
  std::unique_ptr<StatelessRequests> stateless_;
  std::function<void()> stateless_ended_;
  // Handles a POST of the stateless revision (no session).
  void handle_stateless(const httplib::Request& req, httplib::Response& res, const Json& document, bool request,
                        bool event_stream);

  CallGate calls_;
  std::atomic<bool> draining_{false};
  std::atomic<bool> stopping_{false};

  mutable Mutex sessions_mutex_;
  std::map<std::string, std::shared_ptr<Session>> sessions_ GUARDED_BY(sessions_mutex_);
  int64_t empty_since_ms_ GUARDED_BY(sessions_mutex_);
  bool had_session_ GUARDED_BY(sessions_mutex_) = false;
};

}  // namespace effectfence::shared
