#include "cli/time_text.h"

#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string_view>

namespace effectfence::cli {
namespace {

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// "90s", "30m", "1h", "7d" -> ms.
std::optional<int64_t> parse_relative_age(const std::string& text) {
  if (text.size() < 2) return std::nullopt;
  const std::string digits = text.substr(0, text.size() - 1);
  if (!all_digits(digits) || digits.size() > 9) return std::nullopt;
  int64_t unit_ms = 0;
  switch (text.back()) {
    case 's': unit_ms = 1'000; break;
    case 'm': unit_ms = 60'000; break;
    case 'h': unit_ms = 3'600'000; break;
    case 'd': unit_ms = 86'400'000; break;
    default: return std::nullopt;
  }
  return std::stoll(digits) * unit_ms;
}

// Reads exactly n digits at text[*pos] into *out.
bool read_digits(const std::string& text, size_t* pos, size_t n, int* out) {
  if (*pos + n > text.size()) return false;
  const std::string part = text.substr(*pos, n);
  if (!all_digits(part)) return false;
  *out = std::stoi(part);
  *pos += n;
  return true;
}

bool expect_char(const std::string& text, size_t* pos, char c) {
  if (*pos >= text.size() || text[*pos] != c) return false;
  ++*pos;
  return true;
}

// YYYY-MM-DD[THH:MM[:SS[.fff]](Z|+00:00)] -> ms since the epoch.
std::optional<int64_t> parse_iso_utc(const std::string& text) {
  std::tm tm{};
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0, millis = 0;
  size_t pos = 0;
  if (!read_digits(text, &pos, 4, &year) || !expect_char(text, &pos, '-') ||
      !read_digits(text, &pos, 2, &month) || !expect_char(text, &pos, '-') ||
      !read_digits(text, &pos, 2, &day)) {
    return std::nullopt;
  }
  if (pos < text.size()) {
    if (text[pos] != 'T' && text[pos] != 't' && text[pos] != ' ') return std::nullopt;
    ++pos;
    if (!read_digits(text, &pos, 2, &hour) || !expect_char(text, &pos, ':') ||
        !read_digits(text, &pos, 2, &minute)) {
      return std::nullopt;
    }
    if (pos < text.size() && text[pos] == ':') {
      ++pos;
      if (!read_digits(text, &pos, 2, &second)) return std::nullopt;
      if (pos < text.size() && text[pos] == '.') {
        ++pos;
        int scale = 100;
        const size_t start = pos;
        while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
          millis += (text[pos] - '0') * scale;
          scale /= 10;
          ++pos;
        }
        if (pos == start) return std::nullopt;
      }
    }
    // Only UTC: a local offset would make "since" mean different things on
    // different machines.
    const std::string zone = text.substr(pos);
    if (zone != "Z" && zone != "z" && zone != "+00:00") return std::nullopt;
  }
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) {
    return std::nullopt;
  }
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  const time_t seconds = timegm(&tm);
  if (tm.tm_mday != day) return std::nullopt;  // timegm normalised e.g. Feb 30
  return static_cast<int64_t>(seconds) * 1000 + millis;
}

}  // namespace

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::string format_utc(int64_t ms) {
  int64_t seconds = ms / 1000;
  int64_t millis = ms % 1000;
  if (millis < 0) {
    millis += 1000;
    seconds -= 1;
  }
  const time_t t = static_cast<time_t>(seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[96];  // room for any int the compiler can imagine in each field
  std::snprintf(buffer, sizeof buffer, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(millis));
  return buffer;
}

StatusOr<int64_t> parse_since(const std::string& text, int64_t now) {
  if (auto age = parse_relative_age(text)) return now - *age;
  if (auto at = parse_iso_utc(text)) return *at;
  return Status::Error("--since '" + text +
                       "' is neither an ISO-8601 UTC time (2026-11-29T10:00:00Z) nor an age (90s, 30m, 1h, 7d)");
}

}  // namespace effectfence::cli
