// Timed loops and the figures the benchmark reports for them.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <vector>

namespace effectfence::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// One timed loop: each operation's latency, and the wall time of the loop.
struct Timings {
  std::vector<double> samples;  // seconds
  double elapsed_s = 0;

  void merge(const Timings& other) {
    samples.insert(samples.end(), other.samples.begin(), other.samples.end());
    elapsed_s += other.elapsed_s;
  }
};

struct Summary {
  size_t count = 0;
  double per_second = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
};

// Nearest-rank percentile of sorted samples; p in (0, 1].
inline double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size(), std::max<size_t>(rank, 1)) - 1];
}

inline Summary summarize(const Timings& t) {
  std::vector<double> sorted = t.samples;
  std::sort(sorted.begin(), sorted.end());
  Summary s;
  s.count = sorted.size();
  s.per_second = t.elapsed_s > 0 ? static_cast<double>(sorted.size()) / t.elapsed_s : 0;
  s.p50_ms = percentile(sorted, 0.50) * 1e3;
  s.p99_ms = percentile(sorted, 0.99) * 1e3;
  s.max_ms = sorted.empty() ? 0 : sorted.back() * 1e3;
  return s;
}

}  // namespace effectfence::bench
