#include "effectfence/certificate.h"

#include <cmath>

namespace effectfence {
namespace {

std::optional<int64_t> non_negative_integer(const Json& j) {
  if (j.is_number_unsigned()) {
    const uint64_t value = j.get<uint64_t>();
    if (value <= static_cast<uint64_t>(INT64_MAX)) return static_cast<int64_t>(value);
    return std::nullopt;
  }
  if (j.is_number_integer() && j.get<int64_t>() >= 0) return j.get<int64_t>();
  // 3.0 is an integer to JSON Schema, which the tools' inputSchema is.
  if (j.is_number_float()) {
    const double value = j.get<double>();
    if (value >= 0 && value <= static_cast<double>(kMaxSafeInteger) && std::floor(value) == value) {
      return static_cast<int64_t>(value);
    }
  }
  return std::nullopt;
}

std::optional<ReadSetEntry> entry_from_json(const Json& j) {
  if (!j.is_object()) return std::nullopt;
  const auto domain = j.find("domain");
  const auto seq = j.find("seq");
  if (domain == j.end() || seq == j.end() || !domain->is_string()) return std::nullopt;
  const std::optional<int64_t> seq_value = non_negative_integer(*seq);
  if (!seq_value) return std::nullopt;
  return ReadSetEntry{domain->get<std::string>(), *seq_value};
}

}  // namespace

Json read_set_to_json(const std::vector<ReadSetEntry>& read_set) {
  Json j = Json::array();
  for (const ReadSetEntry& entry : read_set) j.push_back({{"domain", entry.domain}, {"seq", entry.seq}});
  return j;
}

std::optional<std::vector<ReadSetEntry>> read_set_from_json(const Json& j) {
  if (!j.is_array()) return std::nullopt;
  std::vector<ReadSetEntry> read_set;
  read_set.reserve(j.size());
  for (const Json& element : j) {
    std::optional<ReadSetEntry> entry = entry_from_json(element);
    if (!entry) return std::nullopt;
    read_set.push_back(std::move(*entry));
  }
  return read_set;
}

}  // namespace effectfence
