// Runs `effectfence serve` as a child process and talks to it over pipes,
// the way an MCP host does.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace effectfence::testing {

using Json = nlohmann::json;
using namespace std::chrono_literals;

// Environment changes for the child: a value sets, nullopt unsets.
using EnvChanges = std::map<std::string, std::optional<std::string>>;

class ServeProcess {
 public:
  // Starts EFFECTFENCE_BIN with args (e.g. {"serve", "--db", path}).
  // stdin_bytes (at most PIPE_BUF) are in the child's stdin before it starts:
  // unlike send(), this cannot fail with EPIPE when the child exits at once.
  explicit ServeProcess(std::vector<std::string> args, const EnvChanges& env = {},
                        const std::string& stdin_bytes = "");
  // SIGKILLs the child if it is still running.
  ~ServeProcess();
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  pid_t pid() const { return pid_; }
  void send_raw(const std::string& bytes);
  void send(const Json& message) { send_raw(message.dump() + "\n"); }
  // Sends a request and returns the response with its id (other lines that
  // arrive meanwhile are kept for later). Fails the test on timeout.
  Json request(const Json& id, const std::string& method, const Json& params = Json::object());
  Json call_tool(const Json& id, const std::string& name, const Json& arguments);
  // The next raw line on stdout; nullopt at EOF or after timeout.
  std::optional<std::string> next_line(std::chrono::milliseconds timeout = 15s);
  // The next line on stdout, parsed (failing the test if it is not JSON);
  // nullopt at EOF or after timeout.
  std::optional<Json> next_message(std::chrono::milliseconds timeout = 15s);
  // Waits for the message with this id.
  Json response_to(const Json& id, std::chrono::milliseconds timeout = 15s);
  // Sends initialize and notifications/initialized.
  Json initialize(const std::string& protocol_version = "2025-11-25");

  void close_stdin();
  // Closes our end of the child's stdout, as a client that stops reading.
  void close_stdout();
  void signal(int sig);
  // Exit code (128 + signal when killed), or nullopt if still running after timeout.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout = 20s);
  // Every stdout line read so far, as written.
  const std::vector<std::string>& stdout_lines() const { return stdout_lines_; }
  // What the child wrote to stderr so far (complete after wait_exit()).
  std::string stderr_text();

 private:
  bool read_stdout_line(std::string* line, std::chrono::milliseconds timeout);

  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;
  std::optional<int> exit_code_;
  std::string stdout_buffer_;
  std::vector<std::string> stdout_lines_;
  std::vector<Json> backlog_;
  std::mutex stderr_mutex_;
  std::string stderr_text_;
  std::thread stderr_reader_;
};

// The path of the binary under test.
std::string effectfence_binary();

}  // namespace effectfence::testing
