#include "cli/server_process.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cli/version.h"
#include "fence/fence_internal.h"
#include "mcp/fence_tools.h"

namespace effectfence::cli {
namespace {

constexpr auto kReapInterval = std::chrono::seconds(2);

}  // namespace

namespace {

// A pipe to the client, reopened as a description of our own that does not
// block: a write to a client that stopped reading can then give up when a
// stop signal comes (LineWriter's stop_fd), instead of holding the process.
// Only pipes: O_NONBLOCK on the inherited description would reach whoever
// shares it (a shell's terminal), and reopening a file would lose its offset.
int nonblocking_if_pipe(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) return fd;
  const int own = ::open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (own < 0) return fd;
  ::close(fd);
  return own;
}

}  // namespace

int claim_stdout() {
  std::fflush(stdout);
  // Close-on-exec: a child must not inherit the agent's protocol stream.
  const int protocol_fd = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
  if (protocol_fd < 0) return 1;
  ::dup2(2, 1);
  return nonblocking_if_pipe(protocol_fd);
}

Maintenance::Maintenance(Fence& fence, std::chrono::milliseconds sweep_interval, mcp::Logger& log)
    : fence_(fence), sweep_interval_(sweep_interval), log_(log), thread_([this] { run(); }) {}

Maintenance::~Maintenance() {
  {
    MutexLock lock(&mutex_);
    stopping_ = true;
  }
  wake_.NotifyAll();
  thread_.join();
}

// Each job on its own schedule, both due at start: a sweep interval shorter
// than the reap interval is kept, not rounded up to it.
void Maintenance::run() {
  using Clock = std::chrono::steady_clock;
  Clock::time_point next_reap = Clock::now();
  Clock::time_point next_sweep = next_reap;
  MutexLock lock(&mutex_);
  while (!stopping_) {
    lock.Unlock();
    if (Clock::now() >= next_reap) {
      reap();
      next_reap = Clock::now() + kReapInterval;
    }
    if (Clock::now() >= next_sweep) {
      sweep();
      next_sweep = Clock::now() + sweep_interval_;
    }
    lock.Lock();
    const Clock::time_point due = std::min(next_reap, next_sweep);
    while (!stopping_) {
      if (!wake_.WaitUntil(&mutex_, due)) break;
    }
  }
}

void Maintenance::reap() {
  if (const int64_t taken_back = FenceInternal::take_back_unanswered(fence_); taken_back > 0) {
    log_.info("took back " + std::to_string(taken_back) +
              " admission(s) whose answer was lost with the ledger connection: their next prepare is fresh");
  }
  if (const int64_t reaped = FenceInternal::reap_dead_holders(fence_); reaped > 0) {
    log_.warn("fenced " + std::to_string(reaped) +
              " in-flight intent(s) as unknown: their holder process is gone; an operator must reconcile them");
  }
}

void Maintenance::sweep() {
  const int64_t swept = FenceInternal::sweep(fence_);
  if (swept < 0) log_.warn("sweeping finished intents failed; will retry");
  else if (swept > 0) log_.debug("swept " + std::to_string(swept) + " finished intent(s) past their TTL");
}

std::unique_ptr<mcp::Server> fence_server(Fence& fence, mcp::Server::Sink sink, mcp::Logger& log,
                                          std::shared_ptr<mcp::SessionAdmissions> admissions,
                                          std::shared_ptr<mcp::DecisionMetrics> metrics) {
  return std::make_unique<mcp::Server>(
      mcp::ServerInfo{"effectfence", "effectfence: exactly-once side effects", kVersion, mcp::kFenceInstructions},
      mcp::fence_tools(fence, log, std::move(admissions), std::move(metrics)), std::move(sink), log);
}

bool fence_what_is_left(Fence& fence, const std::string& who, mcp::Logger& log) {
  const std::string why = who + " (pid " + std::to_string(::getpid()) +
                          ") exited before the admission was committed or aborted; the agent that holds its ticket "
                          "may still be running the tool, and can still commit it through another server";
  std::vector<std::string> left;
  int64_t fenced = FenceInternal::fence_own_in_flight(fence, why, &left);
  if (!left.empty()) {
    log.warn("could not fence " + std::to_string(left.size()) + " admission(s) as unknown (the ledger refused the "
             "write); trying once more");
    std::this_thread::sleep_for(std::chrono::seconds(1));
    left.clear();
    fenced += FenceInternal::fence_own_in_flight(fence, why, &left);
  }
  if (fenced > 0) {
    log.warn("fenced " + std::to_string(fenced) +
             " admission(s) of this process as unknown: their clients can no longer commit through it");
  }
  if (left.empty()) return true;
  std::string names;
  for (size_t i = 0; i < left.size() && i < 10; ++i) names += (i ? ", " : "") + left[i];
  if (left.size() > 10) names += ", ...";
  log.error("left " + std::to_string(left.size()) + " admission(s) in flight that this process could not fence " +
            "(the ledger refused the write): " + names +
            ". Their clients can no longer commit through this process (a commit of the same ticket through "
            "another server is still recorded); another process on this host fences them as unknown once this "
            "one is gone, and one on another host may take one over when its lease runs out. Check what their "
            "tools did before anyone runs them again");
  return false;
}

void log_group_commit(const Fence& fence, mcp::Logger& log) {
  const LedgerMetrics m = fence.ledger_metrics();
  if (m.transactions > 0) {
    char per[32];
    std::snprintf(per, sizeof per, "%.1f", static_cast<double>(m.decisions) / static_cast<double>(m.transactions));
    log.info("ledger: " + std::to_string(m.decisions) + " decision(s) in " + std::to_string(m.transactions) +
             " transaction(s), " + per + " per transaction");
  }
}

}  // namespace effectfence::cli
