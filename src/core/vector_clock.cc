#include "effectfence/vector_clock.h"

#include <stdexcept>

#include "core/json_members.h"
#include "core/sha256.h"

namespace effectfence {
namespace {

// Counters stop here so that every clock stays representable in canonical
// JSON; no agent can tick 2^53 times in practice.
constexpr uint64_t kMaxCounter = static_cast<uint64_t>(kMaxSafeInteger);

}  // namespace

uint64_t VectorClock::get(const std::string& agent) const {
  const auto found = counters_.find(agent);
  return found == counters_.end() ? 0 : found->second;
}

void VectorClock::tick(const std::string& agent) {
  uint64_t& counter = counters_[agent];
  if (counter < kMaxCounter) ++counter;
}

void VectorClock::merge(const VectorClock& other) {
  for (const auto& [agent, counter] : other.counters_) {
    uint64_t& mine = counters_[agent];
    if (counter > mine) mine = counter;
  }
}

bool VectorClock::le(const VectorClock& other) const {
  // Zero counters are never stored, so agents missing from *this are 0 <= anything.
  for (const auto& [agent, counter] : counters_) {
    if (counter > other.get(agent)) return false;
  }
  return true;
}

bool VectorClock::concurrent(const VectorClock& other) const {
  return !le(other) && !other.le(*this);
}

bool VectorClock::operator==(const VectorClock& other) const {
  return counters_ == other.counters_;
}

Json VectorClock::to_json() const {
  Json j = Json::object();
  for (const auto& [agent, counter] : counters_) j[agent] = counter;
  return j;
}

std::optional<VectorClock> VectorClock::from_json(const Json& j) {
  if (!j.is_object()) return std::nullopt;
  VectorClock clock;
  for (auto member = j.begin(); member != j.end(); ++member) {
    const std::optional<uint64_t> counter = non_negative_integer(member.value(), kMaxCounter);
    if (!counter) return std::nullopt;
    // A zero is the same as absence; storing it would break operator==.
    if (*counter > 0) clock.counters_[member.key()] = *counter;
  }
  return clock;
}

std::string VectorClock::digest() const {
  // Only an agent name that is not valid UTF-8 has no canonical form; such a
  // clock has no digest ("") rather than a digest it might share.
  try {
    return sha256_hex(canonicalize(to_json()));
  } catch (const std::invalid_argument&) {
    return "";
  }
}

}  // namespace effectfence
