// Who serves a ledger: join the live shared server, or take the lease over
// and start one, or give up and serve alone. Bounded in time, not in
// rounds: whatever the lease file holds, elect() returns by the deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>

#include "mcp/log.h"
#include "shared_server/bridge.h"
#include "shared_server/lease.h"

namespace effectfence::shared {

struct ElectionOptions {
  std::string lease_path;
  std::string ledger;                // this client's ledger: a server of another one is never joined
  int64_t deadline_ms = 10'000;      // EFFECTFENCE_SHARED_ELECTION_MS
  int64_t bind_deadline_ms = 5'000;  // EFFECTFENCE_SHARED_BIND_DEADLINE_MS: a lease without URL after this is abandoned
  // This client's fence settings: a server that keeps others is not joined.
  int64_t lease_ttl_ms = Settings{}.lease_ttl_ms;
  int64_t result_ttl_ms = Settings{}.result_ttl_ms;
};

// What a candidate server process reports after trying to claim the lease.
struct CandidateReport {
  enum class Outcome { ready, lost, failed } outcome = Outcome::failed;
  std::string detail;  // failed: why the shared server cannot be used
};

struct Joined {
  Endpoint endpoint;
  LeaseCase found = LeaseCase::live;  // what the lease held when this process first looked
};
struct Standalone {
  std::string reason;
};
using Election = std::variant<Joined, Standalone>;

// Starts a server process that claims the lease (under the directory lock,
// taking over only what may be taken over) and reports before deadline.
using StartCandidate = std::function<CandidateReport(std::chrono::steady_clock::time_point deadline)>;

// Logs one line per lease case met ("lease <path>: stale (its owner, pid 12,
// is gone): taking over").
Election elect(const ElectionOptions& options, const StartCandidate& start_candidate, mcp::Logger& log);

// Returns true iff the lease at lease_path still names the server at
// endpoint (its URL and token) and the lease's owner process is running.
bool still_serves(const std::string& lease_path, const Endpoint& endpoint, int64_t bind_deadline_ms);

// What the server process does to claim the lease: under the directory
// lock, re-reads it and writes lease iff the case found may be taken over.
// Returns ok when claimed; "lost: ..." when another process got there
// first; otherwise why the lease cannot be written.
Status claim_lease(const std::string& path, const Lease& lease, int64_t bind_deadline_ms);
// Publishes lease (now with its URL) iff the file still holds its token.
Status publish_lease(const std::string& path, const Lease& lease);

}  // namespace effectfence::shared
