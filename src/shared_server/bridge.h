// The stdio <-> Streamable HTTP bridge: what `serve --shared` becomes when a
// shared server runs. Lines from the MCP client on stdin are POSTed to the
// server (concurrently, so a slow call holds up nothing); the answers go
// back to stdout as lines.
//
// A failed request is not a dead server. While the lease still names the
// server and its process runs, a message whose HTTP exchange failed (reset,
// closed, refused) is sent again, with the same Idempotency-Key: the server
// answers a resend with the first delivery's answer, never a second
// decision. Only a server whose process is gone, or that has answered
// nothing for `unresponsive_ms`, is dead.
//
// When the server is dead the bridge finds another (reconnect() runs the
// election again, which may start one) and opens a new session with the
// client's own initialize. A tools/call that was in flight is not retried:
// it may have been admitted, so the client gets a clear error and the dead
// server's admission is fenced as unknown by the ledger's dead-holder rule.
// A request the old server never received (connection refused) and any
// other request are retried once on the new server.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"
#include "effectfence/json.h"
#include "mcp/line_io.h"
#include "mcp/log.h"
#include "mcp/protocol_era.h"
#include "mcp/server.h"
#include "mcp/worker_pool.h"

namespace httplib {
class Client;
}

namespace effectfence::shared {

// Where a shared server listens and the token it wants.
struct Endpoint {
  std::string host;
  int port = 0;
  std::string path = "/mcp";
  std::string token;
  std::string url;  // as published in the lease

  // Returns nullopt iff url is not http://host:port/path.
  static std::optional<Endpoint> parse(const std::string& url, const std::string& token);
};

// The outcome of one POST.
struct HttpExchange {
  bool delivered = false;           // false: no HTTP answer at all (the server is gone)
  bool maybe_received = true;       // false iff the connection was refused: the server never saw it
  std::string transport_error;      // why not, when !delivered
  int status = 0;
  std::string session;              // Mcp-Session-Id of the answer
  std::vector<std::string> messages;  // JSON-RPC messages in the body (JSON or SSE)
};

// Lets another thread drop the connection of a POST in flight: a client
// cancelling a stateless (2026-07-28) request over HTTP says so by closing
// the connection, and the server then withdraws what its answer carried.
class PostAbort {
 public:
  // Closes the connection (now, or as soon as post_message opens it); no
  // resend follows.
  void fire();
  bool fired() const;
  // For post_message: the client whose connection fire() closes.
  void arm(httplib::Client* client);
  void disarm();

 private:
  mutable Mutex mutex_;
  httplib::Client* client_ GUARDED_BY(mutex_) = nullptr;
  bool fired_ GUARDED_BY(mutex_) = false;
};

// POSTs one JSON-RPC message to endpoint. Never throws. idempotency_key,
// when not empty, goes as the Idempotency-Key header: a resend under it is
// answered with the first delivery's answer. abort, when given, may end the
// exchange early (undelivered). headers are sent too: a stateless message's
// standard headers (mcp::standard_request_headers).
HttpExchange post_message(const Endpoint& endpoint, const std::string& session, const std::string& protocol_version,
                          const std::string& body, const std::string& idempotency_key = "",
                          PostAbort* abort = nullptr, const mcp::HttpHeaders& headers = {});
// Ends a session (DELETE). Returns the HTTP status, 0 when unreachable.
int end_session(const Endpoint& endpoint, const std::string& session);
// GET /mcp with the token: a live effectfence server answers 405.
// Returns ok iff it did.
Status probe_server(const Endpoint& endpoint);

struct BridgeOptions {
  int64_t keepalive_ms = 30'000;  // ping interval, well within the server's session TTL
  // Returns true iff the lease still names the server at endpoint and its
  // process runs: an exchange with it that failed is then sent again. Empty:
  // every failed exchange means the server is gone.
  std::function<bool(const Endpoint& endpoint)> server_alive;
  // A server that runs but has let every exchange fail for this long is
  // judged dead all the same (EFFECTFENCE_SHARED_UNRESPONSIVE_MS).
  int64_t unresponsive_ms = 30'000;
  // Builds a server in this process for when no shared server can be used
  // any more (returns nullptr when it cannot either). Empty: never.
  std::function<std::unique_ptr<mcp::Server>(mcp::Server::Sink sink)> serve_alone;
};

class Bridge {
 public:
  // Runs the election again, or returns why no server can be used.
  using Reconnect = std::function<StatusOr<Endpoint>()>;

  Bridge(Endpoint endpoint, Reconnect reconnect, mcp::LineWriter& out, mcp::Logger& log, BridgeOptions options = {});
  // Stops the keepalive and finishes the requests in flight.
  ~Bridge();
  Bridge(const Bridge&) = delete;
  Bridge& operator=(const Bridge&) = delete;

  // Relays until stdin ends or stops, then ends the session.
  mcp::ReadEvent run(mcp::FdLineReader& in);

 private:
  struct State {
    Endpoint endpoint;
    std::string session;
    std::string protocol_version;
    uint64_t generation = 0;  // bumped on every new session
  };

  State snapshot() const;
  // POSTs line until an HTTP answer comes back, for as long as the server is
  // alive (options_.server_alive) and within options_.unresponsive_ms of the
  // first failure; each resend carries the same Idempotency-Key. The result
  // is undelivered only once the server is judged dead; maybe_received is
  // true iff any attempt may have reached it.
  HttpExchange post_while_alive(const Endpoint& endpoint, const std::string& session,
                                const std::string& protocol_version, const std::string& line,
                                PostAbort* abort = nullptr, const mcp::HttpHeaders& headers = {});
  // The client cancelled request_id: if it is a stateless request in
  // flight, its connection is closed. Returns true iff it was.
  bool cancel_stateless(const Json& request_id);
  // answer_client: false for a session the bridge opens for a stateless
  // client's presence, whose answer (or failure) is only logged.
  void open_session(const std::string& initialize_line, bool answer_client = true);
  void relay(const std::string& line);
  // Replaces the session of generation seen (once, whoever asks first).
  // server_lost: find a server again first. Returns false iff none.
  // replayed_initialized: set to the client's initialized notification iff
  // this call sent it to the new session.
  bool recover(uint64_t seen, bool server_lost, std::string* replayed_initialized = nullptr);
  // Moves the session into this process.
  bool serve_alone(const std::string& why) REQUIRES(recover_mutex_);
  // The alone server's sink: drops the answer to the replayed initialize.
  void deliver_alone(const std::string& line);
  void keepalive();
  void write_error(const Json& id, const std::string& message, const std::string& reason);
  // The answer to a call the server may have decided and did not answer.
  void write_server_lost(const Json& id, bool recovered);

  Mutex stateless_mutex_;
  // By the client's id.dump().
  std::map<std::string, std::shared_ptr<PostAbort>> stateless_in_flight_ GUARDED_BY(stateless_mutex_);

  mcp::LineWriter& out_;
  mcp::Logger& log_;
  const Reconnect reconnect_;
  const BridgeOptions options_;

  mutable Mutex mutex_;
  State state_ GUARDED_BY(mutex_);
  std::string initialize_line_ GUARDED_BY(mutex_);   // replayed to open a session on a new server
  std::string initialized_line_ GUARDED_BY(mutex_);
  Mutex recover_mutex_ ACQUIRED_BEFORE(mutex_);  // one recovery at a time; mutex_ taken inside it

  Mutex keepalive_mutex_;
  CondVar keepalive_wake_;
  bool stopping_ GUARDED_BY(keepalive_mutex_) = false;
  std::thread keepalive_thread_;
  std::string suppressed_answer_ GUARDED_BY(mutex_);  // id.dump() of the replayed initialize
  std::unique_ptr<mcp::Server> alone_;  // set once, by serve_alone
  std::atomic<mcp::Server*> alone_server_{nullptr};
  mcp::WorkerPool pool_;  // last: its destructor runs queued relays, which use the members above
};

}  // namespace effectfence::shared
