// Content-addressed effect certificates.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "effectfence/json.h"
#include "effectfence/vector_clock.h"

namespace effectfence {

// "When I decided, domain D was at sequence S."
struct ReadSetEntry {
  std::string domain;
  int64_t seq = 0;
  bool operator==(const ReadSetEntry& o) const { return domain == o.domain && seq == o.seq; }
};

Json read_set_to_json(const std::vector<ReadSetEntry>& read_set);
// Returns nullopt iff j is not an array of {domain: string, seq: integer >= 0}.
std::optional<std::vector<ReadSetEntry>> read_set_from_json(const Json& j);

// The record of one effect that ran. hash is SHA-256 over the RFC 8785
// canonical JSON of every other field (see body()).
struct Certificate {
  std::string intent;
  std::string parent;  // hash of the certificate this effect built on; "" for none
  std::string domain;
  int64_t seq = 0;
  int64_t generation = 0;
  std::string tool;
  Json args;
  Json result;
  VectorClock vector_clock;
  std::vector<ReadSetEntry> read_set;
  std::string agent;
  std::string hash;

  // The hashed document: {intent, parent, domain, seq, generation, tool,
  // args, result, vector_clock, read_set, agent}; parent is null when empty.
  Json body() const;
  std::string canonical_body() const;
  std::string compute_hash() const;
  // Sets hash from the other fields. Returns the canonical body it hashed,
  // which is what a ledger stores ("" when there is none, hash then "").
  std::string seal();
  // Returns true iff hash matches the other fields.
  bool verify() const;

  // body() plus "hash".
  Json to_json() const;
  static std::optional<Certificate> from_json(const Json& j);
};

}  // namespace effectfence
