// Typed reads of JSON values and object members, for from_json functions
// that must refuse wrong types instead of throwing.
#pragma once

#include <algorithm>
#include <cmath>
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

// j as an integer in [0, max], or nullopt. An integral float (3.0) is one
// too, as in JSON Schema, which the tools' inputSchema is, up to 2^53, where
// floats stop being exact.
inline std::optional<uint64_t> non_negative_integer(const Json& j, uint64_t max) {
  if (j.is_number_unsigned()) {
    const uint64_t value = j.get<uint64_t>();
    if (value <= max) return value;
    return std::nullopt;
  }
  if (j.is_number_integer()) {
    const int64_t value = j.get<int64_t>();
    if (value >= 0 && static_cast<uint64_t>(value) <= max) return static_cast<uint64_t>(value);
    return std::nullopt;
  }
  if (j.is_number_float()) {
    const double value = j.get<double>();
    const double limit = static_cast<double>(std::min(max, static_cast<uint64_t>(kMaxSafeInteger)));
    if (value >= 0 && value <= limit && std::floor(value) == value) return static_cast<uint64_t>(value);
  }
  return std::nullopt;
}

// The member as a count or sequence number: an integer from 0 to INT64_MAX
// (3.0 included, as above), or nullopt.
inline std::optional<int64_t> non_negative_member(const Json& j, const char* key) {
  const auto found = j.find(key);
  if (found == j.end()) return std::nullopt;
  const auto value = non_negative_integer(*found, static_cast<uint64_t>(INT64_MAX));
  if (!value) return std::nullopt;
  return static_cast<int64_t>(*value);
}

// The member as a string, or nullopt if it is missing or not a string.
inline std::optional<std::string> string_member(const Json& j, const char* key) {
  const auto found = j.find(key);
  if (found == j.end() || !found->is_string()) return std::nullopt;
  return found->get<std::string>();
}

}  // namespace effectfence
