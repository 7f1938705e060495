#include "mcp/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstring>

namespace effectfence::mcp {
namespace {

constexpr auto kExitPollInterval = std::chrono::milliseconds(10);
// Reads of stderr after the child exited, before the reader gives up on a
// process it started that keeps writing.
constexpr int kMaxReadsAfterExit = 1024;

// A descriptor that becomes readable when pid exits, or -1 (kernels before
// 5.3). It carries close-on-exec.
int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

void close_fd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

int shell_status(int status) {
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

// Runs in the forked child of a threaded process: async-signal-safe calls
// only. Reports a failed exec through report_fd as the errno value.
// How many descriptors a child could have inherited, read before fork
// (bounded: marking a million of them one by one would take a while).
int inheritable_fd_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 65536;
  return static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 65536));
}

[[noreturn]] void exec_child(char* const argv[], int stdin_fd, int stdout_fd, int stderr_fd, int report_fd,
                             int fd_limit) {
  ::setpgid(0, 0);
  // Dispositions the parent set (SIGPIPE ignored) and its signal mask are
  // inherited across exec; a server expects the defaults.
  ::signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (::dup2(stdin_fd, 0) < 0 || ::dup2(stdout_fd, 1) < 0 || ::dup2(stderr_fd, 2) < 0) {
    const int e = errno;
    (void)!::write(report_fd, &e, sizeof e);
    ::_exit(126);
  }
  // Nothing else crosses exec: not the agent's protocol pipe, not a library's
  // descriptor opened without O_CLOEXEC, not what our own parent leaked.
  // Kernels before 5.11 lack CLOSE_RANGE_CLOEXEC: mark them one by one.
  if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    for (int fd = 3; fd < fd_limit; ++fd) {
      const int flags = ::fcntl(fd, F_GETFD);
      if (flags >= 0) (void)::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
    }
  }
  ::execvp(argv[0], argv);
  const int e = errno;
  (void)!::write(report_fd, &e, sizeof e);
  ::_exit(127);
}

bool needs_quoting(const std::string& word) {
  if (word.empty()) return true;
  for (char c : word) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || std::strchr("@%+=:,./_-", c))) return true;
  }
  return false;
}

}  // namespace

std::string describe_command(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& word : argv) {
    if (!line.empty()) line += ' ';
    if (!needs_quoting(word)) {
      line += word;
      continue;
    }
    line += '\'';
    for (char c : word) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::start(const std::vector<std::string>& argv,
                                                            StderrSink on_stderr) {
  if (argv.empty()) {
    return Status::Error("no command to run");
  }
  int in[2], out[2], err[2], report[2];
  if (::pipe2(in, O_CLOEXEC) != 0) {
    return Status::Error(std::string("pipe: ") + std::strerror(errno));
  }
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 || ::pipe2(report, O_CLOEXEC) != 0) {
    const std::string error = std::string("pipe: ") + std::strerror(errno);
    for (int fd : {in[0], in[1]}) ::close(fd);
    return Status::Error(error);
  }
  // Built before fork: the child may not allocate.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  const int fd_limit = inheritable_fd_limit();

  const pid_t pid = ::fork();
  if (pid == 0) exec_child(args.data(), in[0], out[1], err[1], report[1], fd_limit);
  for (int fd : {in[0], out[1], err[1], report[1]}) ::close(fd);
  if (pid < 0) {
    const std::string error = std::string("fork: ") + std::strerror(errno);
    for (int fd : {in[1], out[0], err[0], report[0]}) ::close(fd);
    return Status::Error(error);
  }
  // Also in the parent, so the group exists before anyone signals it.
  ::setpgid(pid, pid);

  int exec_errno = 0;
  ssize_t n;
  while ((n = ::read(report[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  ::close(report[0]);
  std::unique_ptr<ChildProcess> child(new ChildProcess());
  child->pid_ = pid;
  child->to_child_ = in[1];
  child->from_child_ = out[0];
  if (n > 0) {
    const std::string error = "cannot run '" + argv[0] + "': " + std::strerror(exec_errno);
    ::close(err[0]);
    child->wait_exit(std::chrono::seconds(5));
    return Status::Error(error);
  }
  child->exit_fd_ = open_pidfd(pid);
  const int stderr_fd = err[0];
  child->stderr_reader_ = std::thread([raw = child.get(), stderr_fd, sink = std::move(on_stderr)] {
    raw->read_stderr(stderr_fd, sink);
  });
  return child;
}

ChildProcess::~ChildProcess() {
  stop();
  if (stderr_reader_.joinable()) stderr_reader_.join();
  close_fd(&to_child_);
  close_fd(&from_child_);
  close_fd(&exit_fd_);
}

void ChildProcess::read_stderr(int fd, StderrSink sink) {
  std::string pending;
  char buffer[4096];
  for (int reads_after_exit = 0;;) {
    // Once the child has exited, what is left is read and the reader stops:
    // a process it started in a session of its own may hold stderr open for
    // ever, and the destructor waits for this thread.
    pollfd fds[2] = {{fd, POLLIN, 0}, {exit_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) break;
    if (fds[1].revents != 0 && (fds[0].revents == 0 || ++reads_after_exit > kMaxReadsAfterExit)) break;
    if (fds[0].revents == 0) continue;
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buffer, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t end; (end = pending.find('\n', start)) != std::string::npos; start = end + 1) {
      if (sink) sink(pid_, std::string_view(pending).substr(start, end - start));
    }
    pending.erase(0, start);
    // A child that never ends a line must not grow this without bound.
    if (pending.size() > 64 * 1024) {
      if (sink) sink(pid_, pending);
      pending.clear();
    }
  }
  if (!pending.empty() && sink) sink(pid_, pending);
  ::close(fd);
}

void ChildProcess::close_stdin() { close_fd(&to_child_); }

void ChildProcess::signal(int sig) {
  MutexLock lock(&mutex_);
  if (!exit_status_) ::kill(-pid_, sig);
}

std::optional<int> ChildProcess::wait_exit(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    {
      MutexLock lock(&mutex_);
      if (exit_status_) return exit_status_;
      siginfo_t info{};
      const int seen = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
      if (seen < 0 && errno != EINTR) {
        exit_status_ = 255;  // not our child any more: nothing left to wait for
        return exit_status_;
      }
      if (seen == 0 && info.si_pid == pid_) {
        // Whatever it started dies with it, so nothing keeps its pipes open.
        // Safe while it is an unreaped zombie: its group id cannot be reused.
        ::kill(-pid_, SIGKILL);
        int status = 0;
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
        exit_status_ = shell_status(status);
        return exit_status_;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(kExitPollInterval);
  }
}

int ChildProcess::stop(std::chrono::milliseconds grace) {
  close_stdin();
  if (auto status = wait_exit(grace)) return *status;
  signal(SIGTERM);
  if (auto status = wait_exit(grace)) return *status;
  signal(SIGKILL);
  if (auto status = wait_exit(std::chrono::seconds(10))) return *status;
  return 128 + SIGKILL;
}

}  // namespace effectfence::mcp
