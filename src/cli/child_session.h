// An MCP server started as a child process and spoken to as a client:
// what probe and demo need to reach a server the way an agent's host does.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "mcp/child_process.h"
#include "mcp/client.h"
#include "mcp/log.h"

namespace effectfence::cli {

struct ChildSession {
  std::unique_ptr<mcp::ChildProcess> child;
  std::unique_ptr<mcp::McpClient> client;
  Json server_info;  // the initialize result

  // Closes the client, then stops the child (stdin EOF, then signals).
  ~ChildSession();
};

// Starts argv, initializes it as client_name. Returns the error when the
// command cannot run or does not speak MCP in time.
// Child stderr lines go to log at debug level, prefixed with the pid.
StatusOr<std::unique_ptr<ChildSession>> open_child_session(const std::vector<std::string>& argv,
                                                           const std::string& client_name, mcp::Logger& log,
                                                           std::chrono::milliseconds timeout);

}  // namespace effectfence::cli
