// Typed reads of one member of a JSON object, for from_json functions that
// must refuse wrong types instead of throwing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "effectfence/json.h"

namespace effectfence {

// The member as an int64, or nullopt if it is missing, not an integer, or
// beyond int64.
inline std::optional<int64_t> int64_member(const Json& j, const char* key) {
  const auto found = j.find(key);
  if (found == j.end()) return std::nullopt;
  if (found->is_number_unsigned()) {
    const uint64_t value = found->get<uint64_t>();
    if (value <= static_cast<uint64_t>(INT64_MAX)) return static_cast<int64_t>(value);
    return std::nullopt;
  }
  if (found->is_number_integer()) return found->get<int64_t>();
  return std::nullopt;
}

// The member as a string, or nullopt if it is missing or not a string.
inline std::optional<std::string> string_member(const Json& j, const char* key) {
  const auto found = j.find(key);
  if (found == j.end() || !found->is_string()) return std::nullopt;
  return found->get<std::string>();
}

}  // namespace effectfence
