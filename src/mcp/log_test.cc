#include "mcp/log.h"

#include <unistd.h>

#include <string>

#include <catch2/catch.hpp>

using effectfence::mcp::Logger;
using effectfence::mcp::LogLevel;

namespace {

// What one call of log() writes to its descriptor.
std::string logged(const std::string& message) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  {
    Logger log("effectfence serve", LogLevel::debug, fds[1]);
    log.info(message);
  }
  ::close(fds[1]);
  std::string out;
  char buffer[4096];
  ssize_t n = 0;
  while ((n = ::read(fds[0], buffer, sizeof buffer)) > 0) out.append(buffer, static_cast<size_t>(n));
  ::close(fds[0]);
  return out;
}

}  // namespace

TEST_CASE("a log entry is one line with its level, whatever text a client put in it", "[log]") {
  CHECK(logged("plain text") == "effectfence serve: info: plain text\n");
  // ESC sequences would retitle or erase the terminal; a newline or a vertical
  // tab would start what looks like another entry.
  const std::string hostile = "x\x1b]0;pwned\x07\x1b[2K\nfake: error: ledger corrupt\x0b\r";
  const std::string line = logged("client " + hostile);
  CHECK(line == "effectfence serve: info: client x\\x1b]0;pwned\\x07\\x1b[2K\\x0afake: error: ledger corrupt"
                "\\x0b\\x0d\n");
  CHECK(logged("NEL \xc2\x85 and a real \\x1b") == "effectfence serve: info: NEL \\u0085 and a real \\\\x1b\n");
}
