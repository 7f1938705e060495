// What a server's fence tools decided, counted where they answer: each call
// of fence_prepare, fence_commit, fence_abort and fence_heartbeat whose
// arguments were well-formed is counted once, by outcome, and timed. The
// shared server shows them on GET /metrics.
//
// Recording is a few relaxed atomic adds (no lock): it sits on every
// decision's path. A reader may see a call counted in one family and not
// yet in another; each histogram is read so that its +Inf bucket and its
// _count agree.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "effectfence/ledger.h"
#include "effectfence/types.h"
#include "mcp/prometheus.h"

namespace effectfence::mcp {

class DecisionMetrics {
 public:
  using Duration = std::chrono::steady_clock::duration;
  // The latency buckets' upper bounds, in seconds: from the in-process fast
  // path (tens of microseconds) to the ledger's busy timeout (10 s).
  static constexpr std::array<double, 16> kBucketSeconds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                            0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                                            1,      2.5,     5,      10};

  void prepared(const PrepareOutcome& outcome, Duration took);
  void committed(const CommitOutcome& outcome, Duration took);
  void aborted(const AbortOutcome& outcome, Duration took);
  void extended(const HeartbeatOutcome& outcome, Duration took);

  // Writes every family: the outcomes since this object was made, the
  // decision latency, and group (the fence's ledger batching so far).
  void write(PrometheusText& out, const LedgerMetrics& group) const;

 private:
  enum Call { kPrepare, kCommit, kAbort, kHeartbeat, kCalls };
  static constexpr size_t kReasons = static_cast<size_t>(Reason::ledger_error) + 1;
  static constexpr size_t kBuckets = kBucketSeconds.size() + 1;  // the last: above every bound

  void refused(Call call, Reason reason) { refusals_[call][static_cast<size_t>(reason)].fetch_add(1, std::memory_order_relaxed); }
  void observe(Call call, Duration took);
  HistogramCounts latency(Call call) const;

  std::atomic<uint64_t> admitted_{0};
  std::atomic<uint64_t> replayed_{0};
  std::atomic<uint64_t> committed_{0};
  std::atomic<uint64_t> aborted_{0};
  std::atomic<uint64_t> extended_{0};
  std::array<std::array<std::atomic<uint64_t>, kReasons>, kCalls> refusals_{};
  std::array<std::array<std::atomic<uint64_t>, kBuckets>, kCalls> buckets_{};
  std::array<std::atomic<uint64_t>, kCalls> sum_ns_{};
};

}  // namespace effectfence::mcp
