// A generic MCP server over newline-delimited JSON-RPC: initialize (version
// negotiation), ping, tools/list, tools/call, notifications/cancelled.
// Tool calls run concurrently on a worker pool; everything else is answered
// on the reading thread, in order.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "effectfence/json.h"
#include "mcp/line_io.h"
#include "mcp/log.h"
#include "mcp/worker_pool.h"

namespace effectfence::mcp {

// Protocol revisions this server speaks, newest first.
extern const char* const kSupportedProtocolVersions[4];
// Echoes requested if supported, else the newest we speak.
std::string negotiate_protocol_version(const std::string& requested);

struct ToolResult {
  Json structured = Json::object();  // structuredContent; also sent as JSON text
  bool is_error = false;
};

// Thrown by a tool handler for arguments its schema could not rule out
// (e.g. an inconsistent combination). Answered with -32602 and what().
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
  // Runs on a worker thread. Arguments conform to input_schema.
  std::function<ToolResult(const Json& arguments)> handler;

  Json listing() const;  // the tools/list entry
};

struct ServerInfo {
  std::string name;
  std::string title;
  std::string version;
  std::string instructions;  // shown to the model by most hosts
};

class Server {
 public:
  // Receives every outgoing message as one line; called from any thread.
  using Sink = std::function<void(const std::string& line)>;
  static constexpr size_t kDefaultMaxConcurrentCalls = 128;

  Server(ServerInfo info, std::vector<Tool> tools, Sink sink, Logger& log,
         size_t max_concurrent_calls = kDefaultMaxConcurrentCalls);
  // Finishes the calls in flight.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Handles one incoming line (blank lines are ignored). Never throws.
  void handle_line(std::string_view line);
  // Answers a line that went over the size limit.
  void handle_oversized(std::string_view prefix);
  // Feeds every line of reader to the server until the input ends or stops.
  ReadEvent pump(FdLineReader& reader);
  // Blocks until every call accepted so far has been answered (or dropped
  // because it was cancelled).
  void drain();
  // Tool calls accepted and not yet finished.
  size_t calls_in_flight() const;

 private:
  struct Call;

  void dispatch(const Json& id, const std::string& method, const Json& params);
  void on_notification(const std::string& method, const Json& params);
  Json initialize(const Json& params);
  Json list_tools() const;
  void start_tool_call(const Json& id, const Json& params);
  void run_tool_call(const std::shared_ptr<Call>& call);
  void finish_call(const std::shared_ptr<Call>& call, const Json& response);
  void send(const Json& message);
  void send_error(const Json& id, int code, std::string message);

  const ServerInfo info_;
  std::vector<Tool> tools_;
  std::map<std::string, size_t> tool_index_;
  Sink sink_;
  Logger& log_;

  mutable std::mutex calls_mutex_;
  std::map<std::string, std::shared_ptr<Call>> calls_;  // by id.dump(): 1 and "1" differ
  std::atomic<bool> initialized_{false};

  WorkerPool pool_;  // last: its destructor runs the queued calls, which use the members above
};

}  // namespace effectfence::mcp
