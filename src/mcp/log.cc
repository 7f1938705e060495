#include "mcp/log.h"

#include <unistd.h>

#include <cerrno>

#include "core/terminal_safe.h"

namespace effectfence::mcp {

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::error: return "error";
    case LogLevel::warn: return "warn";
    case LogLevel::info: return "info";
    case LogLevel::debug: return "debug";
  }
  return "?";
}

std::optional<LogLevel> log_level_from_name(std::string_view name) {
  for (LogLevel level : {LogLevel::error, LogLevel::warn, LogLevel::info, LogLevel::debug}) {
    if (name == log_level_name(level)) return level;
  }
  return std::nullopt;
}

Logger::Logger(std::string program, LogLevel level, int fd)
    : program_(std::move(program)), level_(level), fd_(fd) {}

void Logger::log(LogLevel level, std::string_view message) {
  if (!enabled(level)) return;
  std::string line;
  line.reserve(program_.size() + message.size() + 16);
  line += program_;
  line += ": ";
  line += log_level_name(level);
  line += ": ";
  line += terminal_safe(message);  // one line, and no control sequences from clients' text
  line += '\n';

  MutexLock lock(&write_mutex_);
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stderr is gone; nothing better to do with a log line
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace effectfence::mcp
