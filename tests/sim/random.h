// The simulator's only source of choices: one seeded generator, so a seed
// names one history and replaying it gives the same one.
#pragma once

#include <cstdint>

namespace effectfence::sim {

// SplitMix64: tiny, fast, and every seed (0 too) gives a full-period stream.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi]. REQUIRES: lo <= hi.
  int64_t between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  // True with probability percent/100.
  bool chance(int percent) { return static_cast<int>(next() % 100) < percent; }

 private:
  uint64_t state_;
};

}  // namespace effectfence::sim
