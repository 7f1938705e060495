#include "cli/child_session.h"

#include "cli/version.h"

namespace effectfence::cli {

ChildSession::~ChildSession() {
  client.reset();  // stop reading before the pipes go away
  if (child) child->stop(std::chrono::seconds(2));
}

StatusOr<std::unique_ptr<ChildSession>> open_child_session(const std::vector<std::string>& argv,
                                                           const std::string& client_name, mcp::Logger& log,
                                                           std::chrono::milliseconds timeout) {
  auto child = mcp::ChildProcess::start(argv, [&log](pid_t pid, std::string_view line) {
    log.debug("server[" + std::to_string(pid) + "]: " + std::string(line));
  });
  if (!child.ok()) return child.status();
  auto session = std::make_unique<ChildSession>();
  session->child = std::move(*child);
  session->client = std::make_unique<mcp::McpClient>(session->child->stdout_fd(), session->child->stdin_fd(),
                                                     log, mcp::McpClient::Handlers{}, mcp::kMaxChildMessageBytes,
                                                     session->child->exit_fd());
  auto info = mcp::initialize_client(*session->client, Json{{"name", client_name}, {"version", kVersion}}, timeout);
  if (!info.ok()) return info.status();
  session->server_info = *info;
  return session;
}

}  // namespace effectfence::cli
