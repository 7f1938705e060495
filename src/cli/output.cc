#include "cli/output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "cli/subcommand.h"

namespace effectfence::cli {

void print_json_line(const Json& json) {
  std::printf("%s\n", json.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
}

std::string csv_field(std::string_view value) {
  if (value.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(value);
  std::string quoted = "\"";
  for (char c : value) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  quoted += '"';
  return quoted;
}


namespace {
bool closed_at_start[3] = {false, false, false};  // stdin, stdout, stderr
}  // namespace

void hold_closed_standard_streams() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    closed_at_start[fd] = true;
    // open() returns the lowest free number: this one, the lower ones being
    // open. Stdout gets /dev/full, so a report printed to it fails instead
    // of vanishing with exit 0. Without these devices (a bare container)
    // the root directory holds the number, and writes to it fail too (so
    // stdout never falls back to /dev/null).
    int held = fd == 1 ? ::open("/dev/full", O_WRONLY) : ::open("/dev/null", O_RDWR);
    if (held < 0) held = ::open("/", O_RDONLY | O_DIRECTORY);
    if (held >= 0 && held != fd) ::close(held);
  }
}

bool stdout_closed_at_start() { return closed_at_start[1]; }

std::optional<int> refuse_closed_protocol_streams(const char* command) {
  const bool in = closed_at_start[0], out = closed_at_start[1];
  if (!in && !out) return std::nullopt;
  std::fprintf(stderr,
               "effectfence %s: %s closed: it speaks MCP, reading requests on stdin and answering on stdout. "
               "Start it from an MCP client, which connects both\n",
               command, in ? (out ? "stdin and stdout are" : "stdin is") : "stdout is");
  return kExitFailure;
}

}  // namespace effectfence::cli
