#include "effectfence/certificate.h"

#include <cstdint>
#include <utility>

#include "core/json_members.h"

namespace effectfence {
namespace {

std::optional<ReadSetEntry> entry_from_json(const Json& j) {
  if (!j.is_object()) return std::nullopt;
  auto domain = string_member(j, "domain");
  const auto seq = non_negative_member(j, "seq");
  if (!domain || !seq) return std::nullopt;
  return ReadSetEntry{std::move(*domain), *seq};
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
