#include "core/terminal_safe.h"

#include <cstdio>

namespace effectfence {
namespace {

// Bidirectional controls (U+200E/F, U+202A..E, U+2066..9) reorder the rest
// of the line; zero-width characters (U+200B..D, U+2060..4, U+FEFF) make
// two different names print alike.
bool hidden_or_reordering(unsigned code) {
  return (code >= 0x200B && code <= 0x200F) || (code >= 0x202A && code <= 0x202E) ||
         (code >= 0x2060 && code <= 0x2064) || (code >= 0x2066 && code <= 0x2069) || code == 0xFEFF;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The value of the count lowercase hex digits at text[at], or -1.
long hex_value(std::string_view text, size_t at, size_t count) {
  if (at + count > text.size()) return -1;
  long value = 0;
  for (size_t i = 0; i < count; ++i) {
    const int digit = hex_digit(text[at + i]);
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

void append_utf8(std::string* out, unsigned code) {  // code < 0x10000
  if (code < 0x80) {
    *out += static_cast<char>(code);
  } else if (code < 0x800) {
    *out += static_cast<char>(0xC0 | (code >> 6));
    *out += static_cast<char>(0x80 | (code & 0x3F));
  } else {
    *out += static_cast<char>(0xE0 | (code >> 12));
    *out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (code & 0x3F));
  }
}

}  // namespace

std::optional<std::string> terminal_unescape(std::string_view shown) {
  std::string out;
  out.reserve(shown.size());
  for (size_t i = 0; i < shown.size(); ++i) {
    if (shown[i] != '\\') {
      out += shown[i];
      continue;
    }
    const char kind = i + 1 < shown.size() ? shown[i + 1] : '\0';
    if (kind == '\\') {
      out += '\\';
      i += 1;
    } else if (const long byte = kind == 'x' ? hex_value(shown, i + 2, 2) : -1; byte >= 0) {
      out += static_cast<char>(byte);
      i += 3;
    } else if (const long code = kind == 'u' ? hex_value(shown, i + 2, 4) : -1; code >= 0) {
      append_utf8(&out, static_cast<unsigned>(code));
      i += 5;
    } else {
      return std::nullopt;
    }
  }
  // Only what terminal_safe writes: \x41 or \u0041 would name "A" twice.
  if (terminal_safe(out) != shown) return std::nullopt;
  return out;
}

std::string terminal_safe(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  char escaped[8];
  for (size_t i = 0; i < value.size(); ++i) {
    const auto c = static_cast<unsigned char>(value[i]);
    const auto next = i + 1 < value.size() ? static_cast<unsigned char>(value[i + 1]) : 0;
    const auto third = i + 2 < value.size() ? static_cast<unsigned char>(value[i + 2]) : 0;
    if (c == '\\') {
      out += "\\\\";  // so that an escape cannot be faked by typing one
    } else if (c < 0x20 || c == 0x7F) {
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
    } else if (c == 0xC2 && next >= 0x80 && next <= 0x9F) {  // U+0080..U+009F
      std::snprintf(escaped, sizeof escaped, "\\u00%02x", next);
      out += escaped;
      ++i;
    } else if (c == 0xD8 && next == 0x9C) {  // U+061C ARABIC LETTER MARK, a bidirectional control
      out += "\\u061c";
      ++i;
    } else if (c == 0xC2 && next == 0xAD) {  // U+00AD SOFT HYPHEN, invisible
      out += "\\u00ad";
      ++i;
    } else if ((c == 0xE2 || c == 0xEF) && next >= 0x80 && next <= 0xBF && third >= 0x80 && third <= 0xBF &&
               hidden_or_reordering(((c & 0x0Fu) << 12) | ((next & 0x3Fu) << 6) | (third & 0x3Fu))) {
      const unsigned code = ((c & 0x0Fu) << 12) | ((next & 0x3Fu) << 6) | (third & 0x3Fu);
      std::snprintf(escaped, sizeof escaped, "\\u%04x", code);
      out += escaped;
      i += 2;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace effectfence
