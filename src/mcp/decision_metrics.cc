#include "mcp/decision_metrics.h"

#include <algorithm>
#include <string>

namespace effectfence::mcp {
namespace {

constexpr const char* kToolNames[] = {"fence_prepare", "fence_commit", "fence_abort", "fence_heartbeat"};

// The refusals that keep an attempt from running against the fence's rules,
// as Counters::prevented counts them; the others (a ledger that could not
// decide, bad arguments) prevent nothing, they just decide nothing.
bool prevents(Reason reason) {
  switch (reason) {
    case Reason::in_flight:
    case Reason::domain_race:
    case Reason::stale_read_set:
    case Reason::prior_failure:
    case Reason::payload_mismatch:
      return true;
    default:
      return false;
  }
}

}  // namespace

void DecisionMetrics::observe(Call call, Duration took) {
  const int64_t ns = std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(took).count());
  const double seconds = static_cast<double>(ns) / 1e9;
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(kBucketSeconds.begin(), kBucketSeconds.end(), seconds) - kBucketSeconds.begin());
  buckets_[call][bucket].fetch_add(1, std::memory_order_relaxed);
  sum_ns_[call].fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

void DecisionMetrics::prepared(const PrepareOutcome& outcome, Duration took) {
  if (std::holds_alternative<Admitted>(outcome)) admitted_.fetch_add(1, std::memory_order_relaxed);
  else if (std::holds_alternative<Replayed>(outcome)) replayed_.fetch_add(1, std::memory_order_relaxed);
  else refused(kPrepare, std::get<Refusal>(outcome).reason);
  observe(kPrepare, took);
}

void DecisionMetrics::committed(const CommitOutcome& outcome, Duration took) {
  if (const auto* refusal = std::get_if<Refusal>(&outcome)) refused(kCommit, refusal->reason);
  else committed_.fetch_add(1, std::memory_order_relaxed);
  observe(kCommit, took);
}

void DecisionMetrics::aborted(const AbortOutcome& outcome, Duration took) {
  if (const auto* refusal = std::get_if<Refusal>(&outcome)) refused(kAbort, refusal->reason);
  else aborted_.fetch_add(1, std::memory_order_relaxed);
  observe(kAbort, took);
}

void DecisionMetrics::extended(const HeartbeatOutcome& outcome, Duration took) {
  if (const auto* refusal = std::get_if<Refusal>(&outcome)) refused(kHeartbeat, refusal->reason);
  else extended_.fetch_add(1, std::memory_order_relaxed);
  observe(kHeartbeat, took);
}

HistogramCounts DecisionMetrics::latency(Call call) const {
  HistogramCounts h;
  h.bounds.assign(kBucketSeconds.begin(), kBucketSeconds.end());
  for (const auto& bucket : buckets_[call]) h.counts.push_back(bucket.load(std::memory_order_relaxed));
  h.sum = static_cast<double>(sum_ns_[call].load(std::memory_order_relaxed)) / 1e9;
  return h;
}

void DecisionMetrics::write(PrometheusText& out, const LedgerMetrics& group) const {
  using Type = PrometheusText::Type;
  auto counter = [&out](const char* name, const char* help, uint64_t value) {
    out.family(name, Type::counter, help);
    out.sample(name, {}, value);
  };
  counter("effectfence_admissions_total",
          "fence_prepare calls answered fresh: the caller may run the effect once", admitted_.load());
  counter("effectfence_replays_total",
          "fence_prepare calls answered already_done: the effect ran before, its recorded result was replayed",
          replayed_.load());

  out.family("effectfence_refusals_total", Type::counter,
             "Fence tool calls refused, by tool and reason; the tool's effect was not run or recorded");
  uint64_t prevented = replayed_.load();
  for (size_t call = 0; call < kCalls; ++call) {
    for (size_t r = 0; r < kReasons; ++r) {
      const Reason reason = static_cast<Reason>(r);
      const uint64_t n = refusals_[call][r].load();
      if (call == kPrepare && prevents(reason)) prevented += n;
      out.sample("effectfence_refusals_total", {{"tool", kToolNames[call]}, {"reason", reason_name(reason)}}, n);
    }
  }
  counter("effectfence_prevented_total",
          "fence_prepare calls that kept an effect from running again or against the fence's rules: replays, "
          "and refusals for in_flight, domain_race, stale_read_set, prior_failure or payload_mismatch",
          prevented);
  counter("effectfence_commits_total", "fence_commit calls that recorded a result and its certificate",
          committed_.load());
  counter("effectfence_aborts_total", "fence_abort calls that fenced their intent as failed", aborted_.load());
  counter("effectfence_lease_extensions_total", "fence_heartbeat calls that extended a lease", extended_.load());

  out.family("effectfence_decision_seconds", Type::histogram,
             "Time from a fence tool call reaching the fence to its answer, by tool");
  for (size_t call = 0; call < kCalls; ++call) {
    out.histogram({{"tool", kToolNames[call]}}, latency(static_cast<Call>(call)));
  }

  counter("effectfence_group_commit_decisions_total",
          "Ledger reads and writes this process's fence had answered (decisions per transaction: divide by "
          "effectfence_group_commit_transactions_total)",
          group.decisions);
  counter("effectfence_group_commit_transactions_total",
          "Ledger transactions that carried those decisions (several share one under load: group commit)",
          group.transactions);
  out.family("effectfence_group_commit_queued_decisions", Type::gauge,
             "Decisions waiting for the ledger's next transaction now");
  out.sample("effectfence_group_commit_queued_decisions", {}, group.queued);
}

}  // namespace effectfence::mcp
