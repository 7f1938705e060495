#include "serve_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include <catch2/catch.hpp>

extern char** environ;

namespace effectfence::testing {
namespace {

std::vector<std::string> child_environment(const EnvChanges& changes) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (changes.count(name) == 0) env.push_back(entry);
  }
  for (const auto& [name, value] : changes) {
    if (value) env.push_back(name + "=" + *value);
  }
  return env;
}

int milliseconds_left(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

}  // namespace

std::string effectfence_binary() { return EFFECTFENCE_BIN; }

ServeProcess::ServeProcess(std::vector<std::string> args, const EnvChanges& env_changes,
                           const std::string& stdin_bytes) {
  ::signal(SIGPIPE, SIG_IGN);
  int in[2], out[2], err[2];
  REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(err, O_CLOEXEC) == 0);
  // Written while we still hold the read end: a pipe always has room for
  // PIPE_BUF bytes, so this neither blocks nor races the child's exit.
  REQUIRE(stdin_bytes.size() <= PIPE_BUF);
  if (!stdin_bytes.empty()) {
    REQUIRE(::write(in[1], stdin_bytes.data(), stdin_bytes.size()) == static_cast<ssize_t>(stdin_bytes.size()));
  }

  // Everything exec needs is built before fork: the child only calls
  // async-signal-safe functions.
  const std::string binary = effectfence_binary();
  std::vector<std::string> argv_storage = {binary};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_storage = child_environment(env_changes);
  std::vector<char*> envp;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);

  pid_ = ::fork();
  REQUIRE(pid_ >= 0);
  if (pid_ == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execve(binary.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  stdin_fd_ = in[1];
  stdout_fd_ = out[0];
  stderr_fd_ = err[0];
  stderr_reader_ = std::thread([this] {
    char buffer[4096];
    ssize_t n;
    while ((n = ::read(stderr_fd_, buffer, sizeof buffer)) > 0 || (n < 0 && errno == EINTR)) {
      if (n > 0) {
        std::lock_guard<std::mutex> lock(stderr_mutex_);
        stderr_text_.append(buffer, static_cast<size_t>(n));
      }
    }
  });
}

ServeProcess::~ServeProcess() {
  if (!exit_code_) {
    ::kill(pid_, SIGKILL);
    wait_exit(10s);
  }
  close_stdin();
  if (stderr_reader_.joinable()) stderr_reader_.join();
  ::close(stdout_fd_);
  ::close(stderr_fd_);
}

void ServeProcess::send_raw(const std::string& bytes) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(stdin_fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    REQUIRE(n > 0);
    p += n;
    left -= static_cast<size_t>(n);
  }
}

bool ServeProcess::read_stdout_line(std::string* line, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto newline = stdout_buffer_.find('\n');
    if (newline != std::string::npos) {
      *line = stdout_buffer_.substr(0, newline);
      stdout_buffer_.erase(0, newline + 1);
      stdout_lines_.push_back(*line);
      return true;
    }
    pollfd p = {stdout_fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, milliseconds_left(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;  // timeout
    char buffer[65536];
    const ssize_t n = ::read(stdout_fd_, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;  // EOF
    stdout_buffer_.append(buffer, static_cast<size_t>(n));
  }
}

std::optional<std::string> ServeProcess::next_line(std::chrono::milliseconds timeout) {
  std::string line;
  if (!read_stdout_line(&line, timeout)) return std::nullopt;
  return line;
}

std::optional<Json> ServeProcess::next_message(std::chrono::milliseconds timeout) {
  if (!backlog_.empty()) {
    Json first = backlog_.front();
    backlog_.erase(backlog_.begin());
    return first;
  }
  std::string line;
  if (!read_stdout_line(&line, timeout)) return std::nullopt;
  Json message = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (message.is_discarded()) FAIL("stdout carried a line that is not JSON: " << line.substr(0, 200));
  return message;
}

Json ServeProcess::response_to(const Json& id, std::chrono::milliseconds timeout) {
  for (auto it = backlog_.begin(); it != backlog_.end(); ++it) {
    if (it->contains("id") && (*it)["id"] == id) {
      Json found = *it;
      backlog_.erase(it);
      return found;
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string line;
  while (read_stdout_line(&line, std::chrono::milliseconds(milliseconds_left(deadline)))) {
    Json message = Json::parse(line, nullptr, false);
    if (message.is_discarded()) FAIL("stdout carried a line that is not JSON: " << line.substr(0, 200));
    if (message.contains("id") && message["id"] == id) return message;
    backlog_.push_back(message);
  }
  FAIL("no response to " << id.dump() << "; stderr:\n" << stderr_text());
  return Json();
}

Json ServeProcess::request(const Json& id, const std::string& method, const Json& params) {
  send(Json{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}});
  return response_to(id);
}

Json ServeProcess::call_tool(const Json& id, const std::string& name, const Json& arguments) {
  return request(id, "tools/call", {{"name", name}, {"arguments", arguments}});
}

Json ServeProcess::initialize(const std::string& protocol_version) {
  Json response = request("init", "initialize",
                          {{"protocolVersion", protocol_version},
                           {"capabilities", Json::object()},
                           {"clientInfo", {{"name", "serve_protocol_test"}, {"version", "1"}}}});
  send(Json{{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}});
  return response;
}

void ServeProcess::close_stdin() {
  if (stdin_fd_ >= 0) ::close(stdin_fd_);
  stdin_fd_ = -1;
}

void ServeProcess::close_stdout() {
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
  stdout_fd_ = -1;
}

void ServeProcess::signal(int sig) { REQUIRE(::kill(pid_, sig) == 0); }

std::optional<int> ServeProcess::wait_exit(std::chrono::milliseconds timeout) {
  if (exit_code_) return exit_code_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      close_stdin();
      if (stderr_reader_.joinable()) stderr_reader_.join();
      return exit_code_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    // Polling a child's exit: there is no fd to wait on without pidfd.
    std::this_thread::sleep_for(10ms);
  }
}

std::string ServeProcess::stderr_text() {
  std::lock_guard<std::mutex> lock(stderr_mutex_);
  return stderr_text_;
}

}  // namespace effectfence::testing
