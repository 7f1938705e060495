#include "shared_server/election.h"

#include <set>
#include <thread>

#include "ledger/open_ledger.h"

namespace effectfence::shared {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(25);

// Why a client whose fence settings are not its server's is served alone:
// joined, it would be told its results replay for its TTL and its attempts
// are held for its lease, and the server would keep its own.
std::string settings_differ(const Lease& lease, const ElectionOptions& mine) {
  auto both = [](int64_t lease_ms, int64_t result_ms) {
    return "a lease of " + std::to_string(lease_ms) + " ms and results for " + std::to_string(result_ms) + " ms";
  };
  const std::string theirs = lease.lease_ttl_ms == 0 && lease.result_ttl_ms == 0
                                 ? "does not say which lease and result TTL it keeps (an older effectfence)"
                                 : "keeps " + both(lease.lease_ttl_ms, lease.result_ttl_ms);
  return "the shared server " + theirs + ", and this client asks for " + both(mine.lease_ttl_ms, mine.result_ttl_ms) +
         " (EFFECTFENCE_LEASE_SECS, EFFECTFENCE_RESULT_TTL_SECS); give every client of one ledger the same settings "
         "to share a server";
}

// Why the server a live or starting lease names is not this client's to
// join, or "".
Status why_not_joined(const Lease& lease, const ElectionOptions& mine) {
  if (!same_ledger(lease.ledger, mine.ledger)) {
    // One lease path configured for two ledgers: joining would fence this client in the wrong ledger.
    const std::string& leased = lease.ledger;
    return Status::Error(
        "the lease " + mine.lease_path + " belongs to the shared server of another ledger (" +
        (leased.empty() ? std::string("not named") : printable_ledger(leased)) + "), not " +
        printable_ledger(mine.ledger) +
        (names_ledger_relatively(leased) ? " (a relative path: a lease written by an older effectfence)" : "") +
        "; give each ledger its own --lease");
  }
  if (lease.lease_ttl_ms != mine.lease_ttl_ms || lease.result_ttl_ms != mine.result_ttl_ms) {
    return Status::Error(settings_differ(lease, mine));
  }
  return Status::Ok();
}

}  // namespace

Status claim_lease(const std::string& path, const Lease& lease, int64_t bind_deadline_ms) {
  DirectoryLock lock(path, Clock::now() + std::chrono::seconds(2));
  if (!lock.ok()) return Status::Error(lock.error());
  const LeaseReading seen = read_lease(path, wall_clock_ms(), bind_deadline_ms);
  if (seen.kind == LeaseCase::unreadable) return Status::Error(seen.detail);
  if (!may_take_over(seen.kind)) {
    return Status::Error(std::string("lost: the lease is ") + lease_case_name(seen.kind) + " (" + seen.detail + ")");
  }
  return write_lease(path, lease);
}

Status publish_lease(const std::string& path, const Lease& lease) {
  DirectoryLock lock(path, Clock::now() + std::chrono::seconds(2));
  if (!lock.ok()) return Status::Error(lock.error());
  if (!lease_is_ours(path, lease.token)) {
    return Status::Error("lost: another process took the lease over while this one was binding");
  }
  return write_lease(path, lease);
}

Election elect(const ElectionOptions& options, const StartCandidate& start_candidate, mcp::Logger& log) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(options.deadline_ms);
  std::set<std::string> announced;  // one log line per case and detail
  std::optional<LeaseCase> first_seen;
  std::string last_problem = "nothing was tried";
  auto announce = [&](const LeaseReading& r, const char* action) {
    const std::string line = "lease " + options.lease_path + ": " + lease_case_name(r.kind) + " (" + r.detail + "): " + action;
    if (announced.insert(line).second) log.info(line);
  };

  while (Clock::now() < deadline) {
    const LeaseReading reading = read_lease(options.lease_path, wall_clock_ms(), options.bind_deadline_ms);
    if (!first_seen) first_seen = reading.kind;
    if (reading.lease && (reading.kind == LeaseCase::live || reading.kind == LeaseCase::starting)) {
      if (Status joinable = why_not_joined(*reading.lease, options); !joinable.ok()) {
        return Standalone{joinable.message()};
      }
    }
    switch (reading.kind) {
      case LeaseCase::unreadable:
        return Standalone{reading.detail};
      case LeaseCase::live: {
        std::optional<Endpoint> endpoint = Endpoint::parse(reading.lease->url, reading.lease->token);
        if (!endpoint) {
          last_problem = "the lease names an unusable URL \"" + reading.lease->url + "\"";
          break;
        }
        const Status answered = probe_server(*endpoint);
        if (answered.ok()) {
          announce(reading, "joining");
          return Joined{*endpoint, *first_seen};
        }
        // The owner runs but does not answer (yet): never take a live process's lease; wait, then give up.
        last_problem = "the shared server (" + reading.detail + ") does not answer: " + answered.message();
        break;
      }
      case LeaseCase::starting:
        announce(reading, "waiting for it");
        last_problem = "the shared server (" + reading.detail + ") did not finish starting";
        break;
      case LeaseCase::missing:
      case LeaseCase::stale:
      case LeaseCase::corrupt:
      case LeaseCase::empty:
      case LeaseCase::abandoned: {
        announce(reading, reading.kind == LeaseCase::missing ? "starting the shared server" : "taking over");
        const CandidateReport report = start_candidate(deadline);
        if (report.outcome == CandidateReport::Outcome::failed) return Standalone{report.detail};
        if (report.outcome == CandidateReport::Outcome::lost) {
          log.debug("another process claimed the lease first: " + report.detail);
        }
        continue;  // look again: the lease now names the winner
      }
    }
    std::this_thread::sleep_for(kPoll);
  }
  return Standalone{"no shared server became usable within " + std::to_string(options.deadline_ms) + " ms: " + last_problem};
}

bool still_serves(const std::string& lease_path, const Endpoint& endpoint, int64_t bind_deadline_ms) {
  const LeaseReading reading = read_lease(lease_path, wall_clock_ms(), bind_deadline_ms);
  return reading.kind == LeaseCase::live && reading.lease && reading.lease->url == endpoint.url &&
         reading.lease->token == endpoint.token;
}

}  // namespace effectfence::shared
