// Name tables for enums: one array of {value, name} pairs per enum, read
// both ways. Used by the types (src/core/types.cc) and the state machine.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>

namespace effectfence {

template <typename Enum, size_t N>
const char* name_of(const std::array<std::pair<Enum, const char*>, N>& names, Enum value, const char* fallback) {
  for (const auto& [candidate, name] : names) {
    if (candidate == value) return name;
  }
  return fallback;
}

template <typename Enum, size_t N>
std::optional<Enum> value_of(const std::array<std::pair<Enum, const char*>, N>& names, const std::string& name) {
  for (const auto& [value, candidate] : names) {
    if (name == candidate) return value;
  }
  return std::nullopt;
}

}  // namespace effectfence
