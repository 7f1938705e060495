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
  {
    auto child_started = ChildProcess::start({"sh", "-c", "echo 'to stderr' >&2; read line; echo \"got $line\""},
                                             err.sink());
    REQUIRE(child_started.ok());
    auto child = std::move(*child_started);
    REQUIRE(::write(child->stdin_fd(), "hello\n", 6) == 6);
    CHECK(read_line(child->stdout_fd()) == "got hello");
    CHECK(child->wait_exit(10s) == 0);
  }  // joins the stderr reader
  std::lock_guard<std::mutex> lock(err.mutex);
  CHECK(err.lines == std::vector<std::string>{"to stderr"});
}

TEST_CASE("a command that cannot run is a named error, not a child", "[child_process]") {
  auto child = ChildProcess::start({"/nonexistent/effectfence-no-such-server"}, nullptr);
  CHECK_FALSE(child.ok());
  CHECK_THAT(child.status().message(), Catch::Contains("cannot run '/nonexistent/effectfence-no-such-server'") &&
                                           Catch::Contains("No such file"));
  auto nothing = ChildProcess::start({}, nullptr);
  CHECK_FALSE(nothing.ok());
  CHECK(nothing.status().message() == "no command to run");
}

TEST_CASE("stop ends a child that ignores its closed stdin, and what it started", "[child_process]") {
  auto child_started = ChildProcess::start({"sh", "-c", "trap '' TERM; sleep 1000 & echo $!; wait"}, nullptr);
  REQUIRE(child_started.ok());
  auto child = std::move(*child_started);
  const int grandchild = open_pidfd(std::stoi(read_line(child->stdout_fd())));
  REQUIRE(grandchild >= 0);
  CHECK_FALSE(exits_within(grandchild, 0ms));
  CHECK(child->stop(200ms) == 128 + SIGKILL);
  CHECK(exits_within(grandchild, 10s));
  ::close(grandchild);
  CHECK(child->wait_exit(0ms) == 128 + SIGKILL);
}

TEST_CASE("a child's exit status and a signal that killed it are reported as a shell does", "[child_process]") {
  auto exits_started = ChildProcess::start({"sh", "-c", "exit 3"}, nullptr);
  REQUIRE(exits_started.ok());
  auto exits = std::move(*exits_started);
  CHECK(exits->wait_exit(10s) == 3);
  auto killed_started = ChildProcess::start({"sleep", "1000"}, nullptr);
  REQUIRE(killed_started.ok());
  auto killed = std::move(*killed_started);
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
  auto child_started = ChildProcess::start({"sh", "-c", "setsid sleep 1000 & echo $!; exit 0"}, nullptr);
  REQUIRE(child_started.ok());
  auto child = std::move(*child_started);
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
