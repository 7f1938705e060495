// effectfence serve --shared: one fence server per ledger, shared by every
// client over MCP Streamable HTTP, behind a lease file nothing can lock out
// (see docs/SHARED.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "effectfence/fence.h"
#include "mcp/log.h"
#include "mcp/stop_signals.h"

namespace effectfence::cli {

struct SharedOptions {
  bool enabled = false;
  std::string lease_path;           // "" = <ledger>.server.json
  int port = 0;                     // 0: chosen by the operating system
  std::string bind = "127.0.0.1";
  bool allow_non_loopback = false;  // required for a --bind that is not loopback
  std::string signing_key_path;     // "" = certificates unsigned; passed on to the server it starts
  int host_report_fd = -1;          // internal: this process is the server a candidate launcher waits for
  mcp::LogLevel log_level = mcp::LogLevel::info;

  // Timings, overridable through the environment (tests shorten them).
  int64_t idle_ms = 60'000;            // EFFECTFENCE_SHARED_IDLE_MS: server exits this long after its last session
  int64_t session_ttl_ms = 120'000;    // EFFECTFENCE_SHARED_SESSION_TTL_MS
  int64_t keepalive_ms = 30'000;       // EFFECTFENCE_SHARED_KEEPALIVE_MS: a bridge's ping interval
  int64_t election_ms = 10'000;        // EFFECTFENCE_SHARED_ELECTION_MS
  int64_t bind_deadline_ms = 5'000;    // EFFECTFENCE_SHARED_BIND_DEADLINE_MS
  int64_t unresponsive_ms = 30'000;    // EFFECTFENCE_SHARED_UNRESPONSIVE_MS: a running server answering nothing this long is dead

  void read_environment();
};

// Returns true iff host names a loopback address.
bool is_loopback(const std::string& host);

// The client's side: joins (or starts) the shared server and bridges stdin/
// stdout to it until the client leaves. Returns the exit code, or nullopt
// when the shared server cannot be used: the caller then serves the client
// alone, as plain serve does (the reason is logged).
std::optional<int> serve_through_shared_server(const SharedOptions& options, const Settings& settings,
                                               int protocol_fd, mcp::StopSignals& stop, mcp::Logger& log);

// The shared server process itself (started by a client's election): claims
// the lease, serves HTTP until idle or a stop signal, removes the lease.
int run_shared_server(const SharedOptions& options, const Settings& settings, mcp::StopSignals& stop);

}  // namespace effectfence::cli
