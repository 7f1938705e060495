// A generic MCP server over newline-delimited JSON-RPC: initialize (version
// negotiation), ping, tools/list, tools/call, notifications/cancelled.
// Tool calls run concurrently (on a worker pool, or answered by callback);
// everything else is answered on the reading thread, in order. A proxy can replace the tool list while
// serving, answer with results it did not build, send notifications, send
// requests to the client (answered by callback), and take the requests and
// notifications the server does not handle itself.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/mutex.h"
#include "effectfence/json.h"
#include "mcp/line_io.h"
#include "mcp/log.h"
#include "mcp/protocol_era.h"
#include "mcp/schema_check.h"
#include "mcp/worker_pool.h"

namespace effectfence::mcp {

namespace jsonrpc {
struct Invalid;
}

// Protocol revisions this server speaks, newest first.
extern const char* const kSupportedProtocolVersions[4];
// Echoes requested if supported, else the newest we speak.
std::string negotiate_protocol_version(const std::string& requested);
// The -32600 message for a second initialize in a session that negotiated
// version: a session is initialized once.
std::string already_initialized_message(const std::string& version);

// A JSON-RPC error to answer a request with.
struct RpcError {
  int code = 0;
  std::string message;
  Json data;  // omitted when null
};

// The error object of a response from the other side, kept even when odd:
// a code that is not an integer of JSON-RPC's range becomes -32603 (cut to
// 32 bits it could pass for another code) and the message says what came.
RpcError rpc_error_from(const Json& error);

struct ToolResult {
  ToolResult() = default;
  ToolResult(Json structured, bool is_error) : structured(std::move(structured)), is_error(is_error) {}

  Json structured = Json::object();  // structuredContent; also sent as JSON text
  bool is_error = false;
  // When not empty: structuredContent as JSON text, byte for byte what
  // jsonrpc::serialize writes for it, and structured is not used. For the
  // results sent on every call, written without building a tree first.
  std::string structured_text;

  static ToolResult of_text(std::string structured_text, bool is_error);
  // structuredContent as a tree, however the tool gave it.
  Json structured_json() const;
};

// The JSON-RPC response line carrying a tool's result: structuredContent and
// the same JSON as text content; with modern, also resultType (2026-07-28).
std::string tool_result_line(const Json& id, const ToolResult& result, bool modern = false);

// A whole answer to a request, sent as given: a result object (e.g. relayed
// from another server) or a JSON-RPC error.
struct Reply {
  Json result = Json::object();  // sent iff error is empty
  std::optional<RpcError> error;

  static Reply of(Json result);
  static Reply failure(int code, std::string message, Json data = nullptr);
};

// The JSON-RPC response carrying reply to request id.
Json response_for(const Json& id, Reply reply);

// What a tool handler may know about the call besides its arguments.
// Thread-safe.
class CallContext {
 public:
  // retry: {requestState, inputResponses} of a 2026-07-28 retry (multi
  // round-trip requests), as far as the request carried them.
  CallContext(Json id, Json meta, Json sent_params = nullptr, Json retry = Json::object())
      : id_(std::move(id)), meta_(std::move(meta)), sent_params_(std::move(sent_params)), retry_(std::move(retry)) {}
  CallContext(const CallContext&) = delete;
  CallContext& operator=(const CallContext&) = delete;

  const Json& id() const { return id_; }
  // params._meta of the request (e.g. progressToken); {} when absent.
  const Json& meta() const { return meta_; }
  // With ServerExtensions::keep_sent_text: the request's params as the
  // client wrote them (a raw_json node), or null when it sent none.
  const Json& sent_params() const { return sent_params_; }
  // A retry's requestState ("" when none) and inputResponses ({} when none).
  std::string request_state() const;
  Json input_responses() const;
  bool cancelled() const;
  // Runs fn once the client cancels the call, at once if it already has.
  // A later call replaces an earlier fn that has not run yet. fn must not
  // call back into this context.
  void on_cancel(std::function<void()> fn);
  // Marks the call cancelled and runs the registered fn, if any.
  void cancel();

 private:
  const Json id_;
  const Json meta_;
  const Json sent_params_;
  const Json retry_;
  mutable Mutex mutex_;
  bool cancelled_ GUARDED_BY(mutex_) = false;
  std::function<void()> on_cancel_ GUARDED_BY(mutex_);
};

// Thrown by a tool handler for arguments its schema could not rule out
// (e.g. an inconsistent combination). Answered as arguments that break the
// input schema are: a tool error (isError) saying what(), which the model
// sees and can correct (MCP 2025-11-25, SEP-1303), not a JSON-RPC error.
struct InvalidArguments : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Tool {
  std::string name;
  std::string title;
  std::string description;
  Json input_schema;   // checked before the handler runs
  Json output_schema;  // what structured always conforms to
  Json annotations = Json::object();
  // When false, arguments go to the handler unchecked (a proxy leaves the
  // check to the server it forwards to).
  bool check_arguments = true;
  // When not null, the tools/list entry exactly as given (a mirrored tool);
  // the fields above are then only used by the server for the name.
  Json listing_entry;
  // Runs on a worker thread. Arguments conform to input_schema.
  std::function<ToolResult(const Json& arguments)> handler;
  // Used instead of handler when set; its reply is sent as is.
  std::function<Reply(const Json& arguments, CallContext& call)> contextual_handler;
  // Used instead of both when set, for work that answers by callback (the
  // fence's ledger): runs on the reading thread, must not block, and calls
  // respond exactly once, from any thread, possibly before it returns. No
  // thread waits for the call meanwhile. The arguments are the handler's to
  // keep (moved in, not copied).
  using Respond = std::function<void(ToolResult)>;
  std::function<void(Json&& arguments, Respond respond)> async_handler;
  // Called with an async_handler's result when it was not sent because the
  // client cancelled the call first: whatever the result hands over (an
  // admission) reached no one and can be taken back. Must not block.
  std::function<void(const ToolResult& result)> on_undelivered;
  // The tool error for arguments it refuses (message says why), conforming
  // to output_schema. Unset: a plain isError text result.
  std::function<ToolResult(const std::string& message)> invalid_arguments;

  Json listing() const;  // the tools/list entry
};

// The response line for a call with arguments the tool refuses (why: what
// is wrong with them): tool.invalid_arguments's tool error, else a plain
// text one.
std::string invalid_arguments_line(const Json& id, const Tool& tool, const std::string& why, bool modern = false);

struct ServerInfo {
  std::string name;
  std::string title;
  std::string version;
  std::string instructions;  // shown to the model by most hosts
};

// What a server that relays another one (a proxy) adds; every member may be
// left empty.
struct ServerExtensions {
  // The initialize result's capabilities; null: {"tools": {"listChanged": false}}.
  Json capabilities;
  // Sees initialize's params before it is answered, on the reading thread;
  // may take its time (the client waits for the answer anyway), e.g. to
  // start what it relays and set_info()/set_tools() from it. An error is
  // answered instead of the initialize result.
  std::function<std::optional<RpcError>(const Json& params)> on_initialize;
  // Answers a request for a method the server does not implement, on a
  // worker thread; an exception is answered -32603. Empty: -32601.
  std::function<Reply(const std::string& method, const Json& params)> on_request;
  // Sees the envelope of a 2026-07-28 request (no initialize: the request
  // carries what initialize would have said) before it is handled, on the
  // reading thread, until it has accepted one; may take its time, like
  // on_initialize. An error is answered instead of that request.
  std::function<std::optional<RpcError>(const Envelope& envelope)> on_stateless;
  // Sees every notification except notifications/initialized (on the
  // reading thread, after the server's own handling). Must not block.
  std::function<void(const std::string& method, const Json& params)> on_notification;
  // For a relay: what it passes on keeps the client's text (key order,
  // number spelling). Then on_request and on_notification get the params
  // as the client wrote them (a raw_json node, see raw_json.h; null when it
  // sent none), tool calls have them in CallContext::sent_params(), and the
  // client's answers to request() carry its result that way.
  bool keep_sent_text = false;
};

// Thrown by a Sink that could not deliver a line at all: the client's end of
// the output is closed. The line is then treated as never sent, so an
// admission it carried is withdrawn instead of left for nobody to commit.
struct OutputClosed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Server {
 public:
  // Receives every outgoing message as one line; called from any thread.
  // Throws OutputClosed when the client can no longer receive anything.
  using Sink = std::function<void(const std::string& line)>;
  static constexpr size_t kDefaultMaxConcurrentCalls = 128;
  // Beyond max_concurrent_calls running, this many per running call may
  // wait; a call beyond those is refused at once with kServerBusy.
  static constexpr size_t kQueuedPerRunningCall = 4;

  Server(ServerInfo info, std::vector<Tool> tools, Sink sink, Logger& log,
         size_t max_concurrent_calls = kDefaultMaxConcurrentCalls, ServerExtensions extensions = {});
  // Finishes the calls in flight.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Handles one incoming line (blank lines are ignored). Never throws.
  void handle_line(std::string_view line);
  // Answers a line that went over the size limit, of which prefix is the
  // start and tail the end (as Line keeps them).
  void handle_oversized(std::string_view prefix, std::string_view tail = {});
  // Feeds every line of reader to the server until the input ends or stops,
  // or until keep_reading (asked after each line) says no (then eof).
  ReadEvent pump(FdLineReader& reader, const std::function<bool()>& keep_reading = nullptr);
  // Blocks until every call accepted so far has been answered (or dropped
  // because it was cancelled). The client can answer nothing any more:
  // requests to it still pending fail (their on_reply gets an error), and
  // later ones fail at once.
  void drain();
  // Tool calls accepted and not yet finished.
  size_t calls_in_flight() const;
  // Replaces the tool list; calls already running keep the tool they began
  // with. Does not notify the client (see notify()).
  void set_tools(std::vector<Tool> tools);
  // Replaces the serverInfo, instructions and capabilities that initialize
  // answers with (capabilities as in ServerExtensions).
  void set_info(ServerInfo info, Json capabilities);
  // Sends a notification to the client; callable from any thread. A
  // list_changed notification goes to a 2026-07-28 client's open
  // subscriptions/listen requests that asked for it (stamped with their id).
  void notify(const std::string& method, const Json& params);

  // The client's answer to a request of ours: its result, or its error.
  using ReplyHandler = std::function<void(Reply reply)>;
  // Sends a request to the client with an id of the server's own; on_reply
  // gets the answer once, on the reading thread (it must not block), or an
  // error when the server drains first. Sent only once the client has said
  // notifications/initialized (queued until then). Callable from any
  // thread; never blocks waiting for the answer, and sets no timeout.
  // A 2026-07-28 client takes no requests from a server (it is asked
  // within a result instead): such a request fails at once, naming why.
  // Returns the id it used; null when it could not be sent (on_reply has
  // had its error then).
  Json request(const std::string& method, const Json& params, ReplyHandler on_reply);
  // Tells the client to stop working on request id (notifications/cancelled,
  // if it was sent) and forgets it: on_reply is not called any more.
  void cancel_request(const Json& id, const std::string& reason);
  // Requests sent and not yet answered.
  size_t requests_in_flight() const;

 private:
  struct Call;
  struct ToolSet {
    std::vector<Tool> tools;
    std::map<std::string, size_t> index;
    // tools[i].input_schema read once, for the tools whose arguments are checked.
    std::vector<std::optional<CompiledSchema>> input_checks;
  };

  void dispatch(const Json& id, const std::string& method, Json params);
  // Answers server/discover (2026-07-28): the revisions, capabilities and
  // instructions initialize would have given.
  Json discover();
  // serverInfo as initialize gives it.
  Json server_info_json() const;
  // Sends a result of method, stamped for 2026-07-28 iff modern.
  void send_result(const Json& id, Json result, const std::string& method, bool modern);
  // subscriptions/listen: acknowledged at once, answered never; ends with
  // the client's notifications/cancelled for it.
  void listen(const Json& id, const Json& params);
  void on_response(const Json& id, const std::optional<Json>& result, const std::optional<Json>& error);
  // Sends the requests queued before the client was initialized.
  void client_ready();
  // Fails every pending request with why; later requests fail at once.
  void fail_requests(const std::string& why);
  void on_notification(const std::string& method, const Json& params);
  // What extensions get as a message's params: with keep_sent_text, the
  // sent ones (sent_params_), else params.
  Json passed_on(const Json& params) const;
  Reply initialize(const Json& params);
  Json list_tools() const;
  void start_tool_call(const Json& id, Json params, bool modern);
  // Gives call its context (from params._meta) and enters it in calls_;
  // false (answered -32600) when its id is already in flight.
  bool register_call(const std::shared_ptr<Call>& call, const Json& params);
  // -32600: the id names a call still in flight.
  void refuse_reused_id(const Json& id);
  bool id_in_flight(const Json& id) const;
  // Sends invalid's error, or the reused-id one if its id is in flight.
  void answer_invalid(const jsonrpc::Invalid& invalid);
  void run_tool_call(const std::shared_ptr<Call>& call);
  void start_async_tool_call(const std::shared_ptr<Call>& call);
  void async_call_finished();
  void start_other_request(const Json& id, const std::string& method, const Json& params, bool modern);
  std::shared_ptr<const ToolSet> tool_set() const;
  // Sends a call's response line, unless the call was cancelled. Returns
  // false iff the response was not sent: the call was cancelled, or the
  // client's end of the output is closed.
  bool finish_call(const std::shared_ptr<Call>& call, const std::string& response);
  // Hands line to the sink. Returns false iff it could not be delivered at
  // all (OutputClosed); a line that may have gone out in part counts as sent.
  // what names the line for the log, and is only asked when delivery fails.
  bool deliver(const std::string& line, const std::function<std::string()>& what);
  void send(const Json& message);
  void send_error(const Json& id, int code, std::string message);

  const ServerExtensions extensions_;
  mutable Mutex info_mutex_;
  ServerInfo info_ GUARDED_BY(info_mutex_);
  Json capabilities_ GUARDED_BY(info_mutex_);
  mutable Mutex tools_mutex_;
  std::shared_ptr<const ToolSet> tools_ GUARDED_BY(tools_mutex_);
  Sink sink_;
  Logger& log_;

  mutable Mutex calls_mutex_;
  std::map<std::string, std::shared_ptr<Call>> calls_ GUARDED_BY(calls_mutex_);  // by id.dump(): 1 and "1" differ
  std::atomic<bool> initialized_{false};
  std::string negotiated_version_;  // set once initialize succeeded; only the thread handling lines touches it
  // With keep_sent_text, the params of the request being dispatched, as
  // sent (raw_json, or null); only the thread handling lines touches it, and
  // only with keep_sent_text (a stateless server handles lines on many
  // threads, and keeps no sent text).
  Json sent_params_;
  bool stateless_accepted_ = false;  // on_stateless said yes; only the thread handling lines touches it
  std::atomic<bool> stateless_client_{false};  // a 2026-07-28 request came, and no initialize
  // Open subscriptions/listen requests: id -> whether it wants tools/list_changed.
  Mutex listeners_mutex_;
  std::map<std::string, std::pair<Json, bool>> listeners_ GUARDED_BY(listeners_mutex_);

  // Requests to the client, by id.dump(); queued_ holds the lines of those
  // not sent yet (the client is not initialized).
  mutable Mutex requests_mutex_;
  int64_t next_request_id_ GUARDED_BY(requests_mutex_) = 1;
  std::map<std::string, ReplyHandler> requests_ GUARDED_BY(requests_mutex_);
  std::vector<std::pair<std::string, std::string>> queued_ GUARDED_BY(requests_mutex_);  // (id.dump(), line)
  bool client_ready_ GUARDED_BY(requests_mutex_) = false;
  // Why no request can be answered any more; "" while open.
  std::string requests_closed_ GUARDED_BY(requests_mutex_);

  // Answers a call there is no room for, without starting it.
  void refuse_busy(const std::shared_ptr<Call>& call);

  // Asynchronous tool calls not yet answered; beyond as many as the worker
  // pool takes (running plus waiting), a new one is refused.
  const size_t max_concurrent_calls_;
  Mutex async_mutex_;
  CondVar async_changed_;
  size_t async_calls_ GUARDED_BY(async_mutex_) = 0;

  WorkerPool pool_;  // last: its destructor runs the queued calls, which use the members above
};

}  // namespace effectfence::mcp
