// One-line, levelled logging to stderr: stdout belongs to the protocol.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/mutex.h"

namespace effectfence::mcp {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

const char* log_level_name(LogLevel level);
// Returns nullopt iff name is not one of error, warn, info, debug.
std::optional<LogLevel> log_level_from_name(std::string_view name);

// Writes "<program>: <level>: <message>\n" with a single write(2), so lines
// from concurrent threads (and processes sharing the stream) never interleave.
// Thread-safe.
class Logger {
 public:
  explicit Logger(std::string program, LogLevel level = LogLevel::info, int fd = 2);

  bool enabled(LogLevel level) const { return level <= level_; }
  // Control characters in message (newlines, ESC, ...) are escaped, as by
  // terminal_safe: one event, one line, and nothing a client wrote can
  // steer the terminal that shows it.
  void log(LogLevel level, std::string_view message);
  void error(std::string_view message) { log(LogLevel::error, message); }
  void warn(std::string_view message) { log(LogLevel::warn, message); }
  void info(std::string_view message) { log(LogLevel::info, message); }
  void debug(std::string_view message) { log(LogLevel::debug, message); }

 private:
  const std::string program_;
  const LogLevel level_;
  const int fd_;
  Mutex write_mutex_;
};

}  // namespace effectfence::mcp
