// A child process whose stdin and stdout are pipes to us (an MCP server
// spoken to over stdio) and whose stderr lines are handed to a callback.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"

namespace effectfence::mcp {

class ChildProcess {
 public:
  // Receives each line the child writes to stderr (without the newline)
  // and the child's pid, on a thread of its own.
  using StderrSink = std::function<void(pid_t pid, std::string_view line)>;

  // Starts argv[0] (looked up in PATH) with argv, in a process group of its
  // own so that stopping it also stops what it started (npx starts node).
  // Returns the error ("cannot run 'x': No such file or directory") when
  // it cannot be started. Never throws.
  static StatusOr<std::unique_ptr<ChildProcess>> start(const std::vector<std::string>& argv, StderrSink on_stderr);
  // Stops the child (see stop()) if it is still running.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Our ends of its stdin (we write) and stdout (we read). They stay open
  // until this object is destroyed, except stdin after close_stdin().
  int stdin_fd() const { return to_child_; }
  int stdout_fd() const { return from_child_; }
  // Readable once the child has exited, even while a process it started
  // (in a session of its own, out of reach of stop()) holds its stdout or
  // stderr open: a pidfd, or -1 where the kernel has none. Open until this
  // object is destroyed.
  int exit_fd() const { return exit_fd_; }

  // Closes its stdin: the polite request to stop for a stdio server.
  void close_stdin();
  // Sends sig to the child's process group.
  void signal(int sig);
  // Waits up to timeout for the child to exit. Returns its status as a
  // shell reports it (128 + signal when killed), or nullopt if still running.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);
  // Closes stdin and waits up to grace, then SIGTERM and waits up to grace,
  // then SIGKILL. Returns the exit status.
  int stop(std::chrono::milliseconds grace = std::chrono::seconds(2));

 private:
  ChildProcess() = default;
  void read_stderr(int fd, StderrSink sink);

  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  int exit_fd_ = -1;
  Mutex mutex_;
  std::optional<int> exit_status_ GUARDED_BY(mutex_);
  std::thread stderr_reader_;
};

// The argv as one line for logs, each word quoted when it needs to be.
std::string describe_command(const std::vector<std::string>& argv);

}  // namespace effectfence::mcp
