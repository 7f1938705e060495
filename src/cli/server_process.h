// What every long-running stdio server subcommand (serve, wrap) needs
// around its protocol loop.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "core/mutex.h"
#include "effectfence/fence.h"
#include "mcp/decision_metrics.h"
#include "mcp/log.h"
#include "mcp/server.h"
#include "mcp/session_admissions.h"

namespace effectfence::cli {

// Moves fd 1 out of reach: stdout carries only protocol, so anything else
// that prints to it (a library, a stray printf) lands on stderr instead.
// Returns the descriptor the protocol is written to: non-blocking when it is
// a pipe, so a LineWriter given a stop_fd never waits on a client that does
// not read once a stop signal came.
int claim_stdout();

// After a stop signal, how long a write to a client that does not read
// waits for room before the output is given up (its answers are then not
// delivered, and admissions nobody received are fenced at exit).
constexpr std::chrono::milliseconds kStopWriteGrace{2000};

// The MCP server with the fence tools, as serve offers it (over stdio, or
// per session of the shared server, which keeps each session's tickets in
// admissions and counts every session's decisions in metrics).
std::unique_ptr<mcp::Server> fence_server(Fence& fence, mcp::Server::Sink sink, mcp::Logger& log,
                                          std::shared_ptr<mcp::SessionAdmissions> admissions = nullptr,
                                          std::shared_ptr<mcp::DecisionMetrics> metrics = nullptr);

// On the way out of serve: admissions nobody can commit through this
// process any more become unknown (fenced), and the log says how many.
// who names the process in the recorded reason, e.g. "effectfence serve".
// Returns false, after an error naming them, iff some stayed in flight
// because the ledger refused the write even when tried again.
bool fence_what_is_left(Fence& fence, const std::string& who, mcp::Logger& log);

// Logs how many decisions each of this process's ledger transactions
// carried: how well group commit worked, for whoever tunes the load.
void log_group_commit(const Fence& fence, mcp::Logger& log);

// On a background thread: notices dead holders promptly (their in-flight
// intents become unknown, fenced) and drops finished intents past their TTL,
// once at start and then every sweep_interval (Settings::sweep_interval_ms).
class Maintenance {
 public:
  Maintenance(Fence& fence, std::chrono::milliseconds sweep_interval, mcp::Logger& log);
  ~Maintenance();
  Maintenance(const Maintenance&) = delete;
  Maintenance& operator=(const Maintenance&) = delete;

 private:
  void run();
  void reap();
  void sweep();

  Fence& fence_;
  const std::chrono::milliseconds sweep_interval_;
  mcp::Logger& log_;
  Mutex mutex_;
  CondVar wake_;
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace effectfence::cli
