// The client side of MCP over a pair of file descriptors (a child server's
// stdout and stdin): requests with our own ids, replies matched back to
// them, progress routed to the request that asked for it, notifications and
// the end of the connection reported through callbacks.
//
// Everything the server sends is checked: garbage on its stdout, replies to
// ids we never used, replies that are not JSON-RPC are logged by name and
// skipped; the client keeps reading.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
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
#include "mcp/server.h"

namespace effectfence::mcp {

// Replies from a server may be larger than what we accept from an agent
// (a tool that reads a file); past this a reply is refused as unreadable.
constexpr size_t kMaxChildMessageBytes = 64 * 1024 * 1024;

// The outcome of one request.
struct ClientReply {
  enum class Kind {
    result,      // the server answered with a result object
    error,       // the server answered with a JSON-RPC error
    closed,      // the connection ended before an answer came
    unreadable,  // an answer came but cannot be trusted (not an object, ambiguous JSON, too large)
  };
  Kind kind = Kind::closed;
  Json result;      // kind == result
  // kind == result: the result as the server wrote it (a raw_json node), to
  // be relayed with its key order and spelling.
  Json sent_result;
  RpcError error;   // kind == error
  std::string why;  // closed, unreadable: what happened, for logs and messages
};

class McpClient {
 public:
  struct Handlers {
    // Notifications from the server, except progress for a request that
    // asked for it. On the reading thread; must not block for long.
    // sent_params: the params as the server wrote them (a raw_json node), or
    // null when it sent none (params is {} then).
    std::function<void(const std::string& method, const Json& params, const Json& sent_params)> on_notification;
    // Once, when the server's output ends, after every pending request has
    // failed as closed. On the reading thread. Not called on destruction.
    std::function<void(const std::string& why)> on_closed;
    // Requests from the server other than ping (a proxy relays them to its
    // own client), with the server's id (to match a later cancellation). On
    // the reading thread; must not block: the answer goes through respond,
    // once, from any thread, under the server's id. Empty: answered -32601.
    // sent_params as for on_notification.
    std::function<void(const Json& id, const std::string& method, const Json& params, const Json& sent_params,
                       std::function<void(Reply)> respond)>
        on_request;
  };
  // Receives the params of each notifications/progress for one request,
  // with our progress token in it (the caller puts its own back), parsed
  // and as the server wrote them (a raw_json node).
  using ProgressSink = std::function<void(const Json& params, const Json& sent_params)>;

  // One request in flight. Thread-safe.
  class Request {
   public:
    const Json& id() const { return id_; }
    // False iff the request could not be written whole: the server cannot
    // have acted on it.
    bool delivered() const { return delivered_; }
    // Blocks up to timeout, or until wake(); returns the reply once there is one.
    std::optional<ClientReply> wait_for(std::chrono::milliseconds timeout);
    // Makes the current (or else the next) wait_for return early, once.
    void wake();

   private:
    friend class McpClient;
    explicit Request(Json id) : id_(std::move(id)) {}
    void complete(ClientReply reply);

    const Json id_;
    std::atomic<bool> delivered_{true};
    ProgressSink on_progress_;
    Mutex mutex_;
    CondVar done_;
    std::optional<ClientReply> reply_ GUARDED_BY(mutex_);
    bool woken_ GUARDED_BY(mutex_) = false;
  };

  // in_fd: what the server writes (its stdout); out_fd: what it reads (its
  // stdin). server_exit_fd (or -1): readable once the server process has
  // exited, which then closes the connection even while a process it
  // started still holds in_fd open. None is closed by the client. Starts
  // the reading thread.
  McpClient(int in_fd, int out_fd, Logger& log, Handlers handlers,
            size_t max_message_bytes = kMaxChildMessageBytes, int server_exit_fd = -1);
  // Stops reading and fails what is pending as closed.
  ~McpClient();
  McpClient(const McpClient&) = delete;
  McpClient& operator=(const McpClient&) = delete;

  // Sends a request. With on_progress, the request's _meta.progressToken is
  // replaced by one of ours and the server's progress for it goes there.
  // params may be a raw_json node (an object's text, sent as it is but for
  // that token) or null (the request is sent without params).
  // Never throws; a request that could not be sent is already failed.
  std::shared_ptr<Request> send(const std::string& method, Json params, ProgressSink on_progress = nullptr);
  // Tells the server to stop working on request (notifications/cancelled).
  // The request stays pending: a reply may still come.
  void cancel(const Request& request, const std::string& reason);
  // Stops waiting for request: a reply that comes later is logged and dropped.
  void abandon(const Request& request);
  // Queues a notification for the server. Returns false iff the connection
  // has ended. Never blocks: everything for the server is written, in the
  // order it was queued, by a thread of the client's own, so a server that
  // stops reading holds up no one but the requests sent to it (an agent's
  // reader least), and a notification is never overtaken by a later request.
  bool notify(const std::string& method, const Json& params);
  // send() and wait up to timeout; a timeout abandons the request and comes
  // back as closed.
  ClientReply call(const std::string& method, Json params, std::chrono::milliseconds timeout);
  // Speaks a stateless revision (2026-07-28) from now on: every request
  // sent carries meta's members (the protocol version, client info and
  // capabilities) in params._meta. Null: none (2025, after initialize).
  void set_envelope(Json meta);
  bool stateless() const;
  // True once the connection has ended.
  bool closed() const;
  // Ends the connection from this side: every pending request fails as
  // closed at once, and later ones cannot be sent. on_closed is not called;
  // the server's process, if any, is for its owner to stop.
  void give_up(const std::string& why);

 private:
  void read_loop();
  void handle_line(const Line& line);
  void handle_response(const Json& id, ClientReply reply);
  void handle_request(const Json& id, const std::string& method, const Json& params, const Json& sent_params);
  void handle_notification(const std::string& method, const Json& params, const Json& sent_params);
  // Queues message and waits until the writer thread has written it (true)
  // or could not (false).
  bool write(const Json& message);
  // Queues message without waiting; false iff the connection has ended.
  bool post(const Json& message);
  void write_queued();
  std::shared_ptr<Request> take_pending(const Json& id);
  // Fails what is pending as closed; tells handlers_.on_closed iff report.
  void close_connection(const std::string& why, bool report = true);

  const int in_fd_;
  const int server_exit_fd_;
  Logger& log_;
  const Handlers handlers_;
  const size_t max_message_bytes_;
  // Readable once the client is closing: stops the reader and any write
  // waiting for a server that does not read. {-1, -1} if it could not be made.
  const std::array<int, 2> stop_pipe_;
  LineWriter writer_;
  // Lets an answer to a server's request come after the client is gone:
  // respond() then writes nothing.
  struct Answers {
    Mutex mutex;
    McpClient* client GUARDED_BY(mutex) = nullptr;  // null once the client is closing
  };
  std::shared_ptr<Answers> answers_;

  // Lines for the server, written in order by writer_thread_; written is
  // set (true iff the whole line went out) for the ones a caller waits for.
  struct Outgoing {
    std::string line;
    std::shared_ptr<std::promise<bool>> written;
  };
  Mutex outbox_mutex_;
  CondVar outbox_ready_;
  std::deque<Outgoing> outbox_ GUARDED_BY(outbox_mutex_);
  bool outbox_stopping_ GUARDED_BY(outbox_mutex_) = false;
  bool outbox_failed_ GUARDED_BY(outbox_mutex_) = false;  // a write failed: nothing more is queued
  std::thread writer_thread_;

  mutable Mutex mutex_;
  int64_t next_id_ GUARDED_BY(mutex_) = 1;
  std::map<std::string, std::shared_ptr<Request>> pending_ GUARDED_BY(mutex_);  // by id.dump()
  bool closed_ GUARDED_BY(mutex_) = false;
  std::string closed_why_ GUARDED_BY(mutex_);
  Json envelope_ GUARDED_BY(mutex_);  // null: the server was initialized (2025)
  std::thread reader_;  // last: starts once the members above exist
};

// What a client asks for in initialize: a protocol revision ("" for the
// newest we speak) and its client capabilities.
struct ClientOffer {
  std::string protocol_version;
  Json capabilities = Json::object();
};

// The MCP handshake: initialize with offer, then notifications/initialized.
// Returns the initialize result, or the error.
StatusOr<Json> initialize_client(McpClient& client, const Json& client_info, std::chrono::milliseconds timeout,
                                 const ClientOffer& offer = {});

// For a server that refused initialize: server/discover, sent with the
// stateless envelope (client_info, offer's capabilities). If the server
// speaks a stateless revision we speak, the client keeps that envelope for
// every later request, and the result looks like initialize's
// (protocolVersion, capabilities, serverInfo, instructions). Otherwise
// the error.
StatusOr<Json> discover_client(McpClient& client, const Json& client_info, std::chrono::milliseconds timeout,
                               const ClientOffer& offer = {});

// Every tool of the server, following nextCursor page by page. Returns the
// tools/list entries as the server sent them, or the error (a failed
// request, a malformed page, a duplicate name, a cursor that repeats).
// sent_tools, when given, gets each entry as the server wrote it (raw_json).
StatusOr<std::vector<Json>> list_all_tools(McpClient& client, std::chrono::milliseconds timeout,
                                           std::vector<Json>* sent_tools = nullptr);

// "error -32602: message" / "closed: why" / ..., for logs and messages.
std::string describe_reply(const ClientReply& reply);

}  // namespace effectfence::mcp
