// How the benchmark names the intents its pairs act on.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace effectfence::bench {

// ordered: in the order the pairs start, so each new name sorts after the
// last and every index keyed by it grows at one end. scattered: spread over
// the key space, as order ids or UUIDs are in use, so each lands on a page
// of its own in a large index.
enum class IntentNames { ordered, scattered };

// `prefix` then the pair's number, or, scattered, 16 hex digits of a
// one-to-one mix of it (splitmix64's), so names never repeat.
inline std::string intent_name(const std::string& prefix, int64_t pair, IntentNames names) {
  if (names == IntentNames::ordered) return prefix + std::to_string(pair);
  uint64_t x = static_cast<uint64_t>(pair) + 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(x));
  return prefix + hex;
}

}  // namespace effectfence::bench
