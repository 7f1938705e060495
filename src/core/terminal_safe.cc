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

}  // namespace

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
    } else if ((c == 0xE2 || c == 0xEF) && next >= 0x80 && third >= 0x80 &&
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
