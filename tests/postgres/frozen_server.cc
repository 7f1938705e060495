#include "postgres/frozen_server.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>

#include "ledger/pg_connection.h"

namespace effectfence::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kStopWithin = std::chrono::seconds(5);

// A process's state letter and parent, from /proc/PID/stat ("PID (comm) S PPID ...");
// nullopt once it is gone.
struct ProcStat {
  char state = '?';
  pid_t parent = 0;
};

std::optional<ProcStat> stat_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  const size_t comm_end = line.rfind(')');  // the command name may hold spaces and ')'
  if (comm_end == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(comm_end + 1));
  ProcStat stat;
  rest >> stat.state >> stat.parent;
  if (!rest) return std::nullopt;
  return stat;
}

// Stopped, or exited: either way it can answer nothing.
bool cannot_run(pid_t pid) {
  const auto stat = stat_of(pid);
  return !stat || stat->state == 'T' || stat->state == 't' || stat->state == 'Z' || stat->state == 'X';
}

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    const auto stat = stat_of(pid);
    if (stat && stat->parent == parent) children.push_back(pid);
  }
  return children;
}

pid_t postmaster_of(const std::string& url) {
  auto connection = pg::Connection::open(url);
  const auto backend = static_cast<pid_t>(connection->exec("SELECT pg_backend_pid()").integer(0, 0));
  const auto stat = stat_of(backend);
  REQUIRE(stat);
  REQUIRE(stat->parent > 1);
  return stat->parent;
}

bool wait_until_cannot_run(pid_t pid) {
  const auto deadline = Clock::now() + kStopWithin;
  while (!cannot_run(pid)) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

int64_t monotonic_ms() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1'000'000;
}

// The watchdog's whole life, in a forked child of a threaded process: only
// async-signal-safe calls. It learns each pid before that pid is stopped, and
// thaws them all when the pipe closes (thaw(), or this test process dying) or
// when kMaxFreeze has passed.
[[noreturn]] void watch_and_thaw(int pipe_in, char* received, size_t capacity, int max_fd) {
  // Nor the test's output: CTest reads it until every writer has closed it.
  const int null_fd = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3 && null_fd >= 0; ++fd) ::dup2(null_fd, fd);
  for (int fd = 3; fd < max_fd; ++fd) {
    if (fd != pipe_in) ::close(fd);  // holds nothing of the test's open: pipes to serve, connections
  }
  const int64_t give_up = monotonic_ms() + std::chrono::milliseconds(FrozenServer::kMaxFreeze).count();
  size_t have = 0;
  for (;;) {
    const int64_t left = give_up - monotonic_ms();
    if (left <= 0) break;
    pollfd p = {pipe_in, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    const ssize_t n = ::read(pipe_in, received + have, capacity - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // closed: thaw now
    have += static_cast<size_t>(n);
  }
  for (size_t at = 0; at + sizeof(pid_t) <= have; at += sizeof(pid_t)) {
    pid_t pid;
    std::memcpy(&pid, received + at, sizeof pid);
    ::kill(pid, SIGCONT);
  }
  ::_exit(0);
}

}  // namespace

FrozenServer::FrozenServer(const std::string& url) {
  const pid_t postmaster = postmaster_of(url);
  start_watchdog();
  auto freeze = [&](pid_t pid) {
    // The watchdog hears of it first, so no stopped process is unknown to it.
    REQUIRE(::write(watchdog_pipe_, &pid, sizeof pid) == static_cast<ssize_t>(sizeof pid));
    frozen_.push_back(pid);
    ::kill(pid, SIGSTOP);  // ESRCH: it exited, and answers nothing either
  };
  try {
    // The postmaster first, so that it starts no process once the children are listed.
    freeze(postmaster);
    REQUIRE(wait_until_cannot_run(postmaster));
    for (pid_t child : children_of(postmaster)) freeze(child);
    for (pid_t pid : frozen_) REQUIRE(wait_until_cannot_run(pid));
  } catch (...) {
    thaw();
    throw;
  }
}

FrozenServer::~FrozenServer() { thaw(); }

bool FrozenServer::all_stopped() const {
  return !frozen_.empty() && std::all_of(frozen_.begin(), frozen_.end(), cannot_run);
}

void FrozenServer::thaw() {
  for (pid_t pid : frozen_) ::kill(pid, SIGCONT);
  frozen_.clear();
  stop_watchdog();
}

void FrozenServer::start_watchdog() {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  // Everything the child needs is made before fork.
  static char received[64 * 1024];
  const int max_fd = static_cast<int>(std::min<long>(::sysconf(_SC_OPEN_MAX), 65536));
  // The watchdog outlives whatever ends this test: a session of its own and
  // a second fork take it out of the process group and the process tree
  // that CTest kills on a timeout, and it ignores the signals of a cancel.
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) ::signal(sig, SIG_IGN);
    watch_and_thaw(fds[0], received, sizeof received, max_fd);
  }
  ::close(fds[0]);
  if (pid < 0) {
    ::close(fds[1]);
    FAIL("fork failed: " << std::strerror(errno));
  }
  ::waitpid(pid, nullptr, 0);  // the first child, gone once the watchdog is started
  watchdog_pipe_ = fds[1];
}

// Closing the pipe tells the watchdog to thaw what it knows and exit.
void FrozenServer::stop_watchdog() {
  if (watchdog_pipe_ >= 0) ::close(watchdog_pipe_);
  watchdog_pipe_ = -1;
}

}  // namespace effectfence::testing
