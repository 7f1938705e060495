// What every long-running stdio server subcommand (serve, wrap) needs
// around its protocol loop.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "effectfence/fence.h"
#include "effectfence/maintenance.h"
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

// The reason serve and the shared server record for each admission their
// Maintenance fences on the way out: who names the process, e.g.
// "effectfence serve".
std::string server_exit_reason(const std::string& who);

// After Maintenance::stop: the log says how many admissions nobody can commit
// through this process any more became unknown (fenced). Returns false, after
// an error naming them, iff some stayed in flight because the ledger refused
// the write even when tried again.
bool report_what_was_left(const Maintenance::Stopped& stopped, mcp::Logger& log);

// Logs how many decisions each of this process's ledger transactions
// carried: how well group commit worked, for whoever tunes the load.
void log_group_commit(const Fence& fence, mcp::Logger& log);

// Maintenance for a server: it sweeps on the fence's sweep interval,
// records exit_reason for what it fences at stop, and tells log.
Maintenance::Options maintenance_options(const std::string& exit_reason, mcp::Logger& log);

}  // namespace effectfence::cli
