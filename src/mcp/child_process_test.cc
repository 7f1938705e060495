#include "mcp/child_process.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>
#include <mutex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

using namespace effectfence::mcp;
using namespace std::chrono_literals;

namespace {

// The next line the child writes on stdout, waiting up to 10 s.
std::string read_line(int fd) {
  std::string line;
  char c;
  while (line.size() < 4096) {
    pollfd p = {fd, POLLIN, 0};
    if (::poll(&p, 1, 10'000) <= 0) break;
    if (::read(fd, &c, 1) != 1 || c == '\n') break;
    line += c;
  }
  return line;
}

// A handle on a process that is not our child: readable once it has exited.
int open_pidfd(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

// True iff the process behind pidfd exits within timeout.
bool exits_within(int pidfd, std::chrono::milliseconds timeout) {
  pollfd p = {pidfd, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) == 1;
}

struct StderrLines {
  std::mutex mutex;
  std::vector<std::string> lines;
  ChildProcess::StderrSink sink() {
    return [this](pid_t, std::string_view line) {
      std::lock_guard<std::mutex> lock(mutex);
      lines.emplace_back(line);
    };
  }
};

}  // namespace

TEST_CASE("a child talks over its stdin and stdout, its stderr lines reach the sink", "[child_process]") {
  StderrLines err;
  std::string error;
  {
    auto child = ChildProcess::start({"sh", "-c", "echo 'to stderr' >&2; read line; echo \"got $line\""},
                                     err.sink(), &error);
    REQUIRE(child);
    CHECK(error.empty());
    REQUIRE(::write(child->stdin_fd(), "hello\n", 6) == 6);
    CHECK(read_line(child->stdout_fd()) == "got hello");
    CHECK(child->wait_exit(10s) == 0);
  }  // joins the stderr reader
  std::lock_guard<std::mutex> lock(err.mutex);
  CHECK(err.lines == std::vector<std::string>{"to stderr"});
}

TEST_CASE("a command that cannot run is a named error, not a child", "[child_process]") {
  std::string error;
  auto child = ChildProcess::start({"/nonexistent/effectfence-no-such-server"}, nullptr, &error);
  CHECK_FALSE(child);
  CHECK_THAT(error, Catch::Contains("cannot run '/nonexistent/effectfence-no-such-server'") &&
                        Catch::Contains("No such file"));
  CHECK_FALSE(ChildProcess::start({}, nullptr, &error));
}

TEST_CASE("stop ends a child that ignores its closed stdin, and what it started", "[child_process]") {
  std::string error;
  auto child = ChildProcess::start({"sh", "-c", "trap '' TERM; sleep 1000 & echo $!; wait"}, nullptr, &error);
  REQUIRE(child);
  const int grandchild = open_pidfd(std::stoi(read_line(child->stdout_fd())));
  REQUIRE(grandchild >= 0);
  CHECK_FALSE(exits_within(grandchild, 0ms));
  CHECK(child->stop(200ms) == 128 + SIGKILL);
  CHECK(exits_within(grandchild, 10s));
  ::close(grandchild);
  CHECK(child->wait_exit(0ms) == 128 + SIGKILL);
}

TEST_CASE("a child's exit status and a signal that killed it are reported as a shell does", "[child_process]") {
  std::string error;
  auto exits = ChildProcess::start({"sh", "-c", "exit 3"}, nullptr, &error);
  REQUIRE(exits);
  CHECK(exits->wait_exit(10s) == 3);
  auto killed = ChildProcess::start({"sleep", "1000"}, nullptr, &error);
  REQUIRE(killed);
  CHECK_FALSE(killed->wait_exit(0ms));
  killed->signal(SIGKILL);
  CHECK(killed->wait_exit(10s) == 128 + SIGKILL);
}

TEST_CASE("describe_command quotes what a shell would split", "[child_process]") {
  CHECK(describe_command({"npx", "-y", "@kazuph/mcp-taskmanager"}) == "npx -y @kazuph/mcp-taskmanager");
  CHECK(describe_command({"sh", "-c", "echo 'a b'"}) == "sh -c 'echo '\\''a b'\\'''");
  CHECK(describe_command({""}) == "''");
}

TEST_CASE("a child that exits while what it started in a session of its own holds its stdout and stderr: "
          "exit_fd says so, and letting it go does not wait for that process",
          "[child_process]") {
  std::string error;
  auto child = ChildProcess::start({"sh", "-c", "setsid sleep 1000 & echo $!; exit 0"}, nullptr, &error);
  REQUIRE(child);
  const pid_t helper_pid = std::stoi(read_line(child->stdout_fd()));
  const int helper = open_pidfd(helper_pid);
  REQUIRE(helper >= 0);
  REQUIRE(child->exit_fd() >= 0);
  CHECK(exits_within(child->exit_fd(), 10s));
  pollfd out = {child->stdout_fd(), POLLIN, 0};
  CHECK(::poll(&out, 1, 100) == 0);  // no end of file: the helper holds stdout open

  const auto start = std::chrono::steady_clock::now();
  child.reset();  // joins the stderr reader, which the helper's open stderr must not hold up
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  CHECK_FALSE(exits_within(helper, 0ms));  // out of reach of stop(): it lives on
  ::kill(helper_pid, SIGKILL);
  CHECK(exits_within(helper, 10s));
  ::close(helper);
}
