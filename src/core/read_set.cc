#include "effectfence/certificate.h"

#include <cstdint>

#include "core/json_members.h"

namespace effectfence {
namespace {

std::optional<ReadSetEntry> entry_from_json(const Json& j) {
  if (!j.is_object()) return std::nullopt;
  const auto domain = j.find("domain");
  const auto seq = j.find("seq");
  if (domain == j.end() || seq == j.end() || !domain->is_string()) return std::nullopt;
  const std::optional<uint64_t> seq_value = non_negative_integer(*seq, INT64_MAX);
  if (!seq_value) return std::nullopt;
  return ReadSetEntry{domain->get<std::string>(), static_cast<int64_t>(*seq_value)};
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
