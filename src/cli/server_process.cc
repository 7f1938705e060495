#include "cli/server_process.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cli/version.h"
#include "mcp/fence_tools.h"

namespace effectfence::cli {
namespace {

// A pipe to the client, reopened as a description of our own that does not
// block: a write to a client that stopped reading can then give up when a
// stop signal comes (LineWriter's stop_fd), instead of holding the process.
// Only pipes: O_NONBLOCK on the inherited description would reach whoever
// shares it (a shell's terminal), and reopening a file would lose its offset.
int nonblocking_if_pipe(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) return fd;
  const int own = ::open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (own < 0) return fd;
  ::close(fd);
  return own;
}

}  // namespace

int claim_stdout() {
  std::fflush(stdout);
  // Close-on-exec: a child must not inherit the agent's protocol stream.
  const int protocol_fd = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
  if (protocol_fd < 0) return 1;
  ::dup2(2, 1);
  return nonblocking_if_pipe(protocol_fd);
}

std::unique_ptr<mcp::Server> fence_server(Fence& fence, mcp::Server::Sink sink, mcp::Logger& log,
                                          std::shared_ptr<mcp::SessionAdmissions> admissions,
                                          std::shared_ptr<mcp::DecisionMetrics> metrics) {
  return std::make_unique<mcp::Server>(
      mcp::ServerInfo{"effectfence", "effectfence: exactly-once side effects", kVersion, mcp::kFenceInstructions},
      mcp::fence_tools(fence, log, std::move(admissions), std::move(metrics)), std::move(sink), log);
}

std::string server_exit_reason(const std::string& who) {
  return who + " (pid " + std::to_string(::getpid()) +
         ") exited before the admission was committed or aborted; the agent that holds its ticket "
         "may still be running the tool, and can still commit it through another server";
}

Maintenance::Options maintenance_options(const std::string& exit_reason, mcp::Logger& log) {
  Maintenance::Options options;
  options.exit_reason = exit_reason;
  options.log = [&log](Maintenance::Level level, const std::string& message) {
    switch (level) {
      case Maintenance::Level::error: log.error(message); break;
      case Maintenance::Level::warn: log.warn(message); break;
      case Maintenance::Level::info: log.info(message); break;
      case Maintenance::Level::debug: log.debug(message); break;
    }
  };
  return options;
}

bool report_what_was_left(const Maintenance::Stopped& stopped, mcp::Logger& log) {
  if (stopped.fenced > 0) {
    log.warn("fenced " + std::to_string(stopped.fenced) +
             " admission(s) of this process as unknown: their clients can no longer commit through it");
  }
  const std::vector<std::string>& left = stopped.left_in_flight;
  if (left.empty()) return true;
  std::string names;
  for (size_t i = 0; i < left.size() && i < 10; ++i) names += (i ? ", " : "") + left[i];
  if (left.size() > 10) names += ", ...";
  log.error("left " + std::to_string(left.size()) + " admission(s) in flight that this process could not fence " +
            "(the ledger refused the write): " + names +
            ". Their clients can no longer commit through this process (a commit of the same ticket through "
            "another server is still recorded); another process on this host fences them as unknown once this "
            "one is gone, and one on another host may take one over when its lease runs out. Check what their "
            "tools did before anyone runs them again");
  return false;
}

void log_group_commit(const Fence& fence, mcp::Logger& log) {
  const LedgerMetrics m = fence.ledger_metrics();
  if (m.transactions > 0) {
    char per[32];
    std::snprintf(per, sizeof per, "%.1f", static_cast<double>(m.decisions) / static_cast<double>(m.transactions));
    log.info("ledger: " + std::to_string(m.decisions) + " decision(s) in " + std::to_string(m.transactions) +
             " transaction(s), " + per + " per transaction");
  }
}

}  // namespace effectfence::cli
