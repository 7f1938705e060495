// Causal order between agents: one counter per agent.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "effectfence/json.h"

namespace effectfence {

class VectorClock {
 public:
  VectorClock() = default;

  // Counter of agent; 0 when the agent never ticked.
  uint64_t get(const std::string& agent) const;
  // Advances agent's own counter by one.
  void tick(const std::string& agent);
  // Elementwise maximum with other.
  void merge(const VectorClock& other);

  // Returns true iff every counter of *this is <= the same counter of other
  // (this happened before or equals other).
  bool le(const VectorClock& other) const;
  // Returns true iff neither clock is <= the other.
  bool concurrent(const VectorClock& other) const;
  bool operator==(const VectorClock& other) const;

  // {"agent": counter, ...}; zero counters are omitted so equal clocks
  // serialize alike.
  Json to_json() const;
  // Returns nullopt iff j is not an object of non-negative safe integers.
  static std::optional<VectorClock> from_json(const Json& j);
  // Lower-case hex SHA-256 of the canonical JSON form.
  std::string digest() const;

  const std::map<std::string, uint64_t>& counters() const { return counters_; }

 private:
  std::map<std::string, uint64_t> counters_;
};

}  // namespace effectfence
