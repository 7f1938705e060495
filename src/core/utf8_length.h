// The length of UTF-8 text in characters (code points), as JSON Schema's
// minLength and maxLength count it: every byte that does not continue a
// multi-byte sequence starts one.
#pragma once

#include <cstddef>
#include <string_view>

namespace effectfence {

inline size_t utf8_length(std::string_view text) {
  size_t n = 0;
  for (const char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace effectfence
