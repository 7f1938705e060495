// What a user would pick instead of effectfence for the same job: a fence
// kept in Redis (SET NX, then SET, with every write fsynced) or in
// PostgreSQL (INSERT ... ON CONFLICT DO NOTHING, then UPDATE, each commit
// synchronous). Each peer is a throwaway server on loopback, started in the
// scratch directory and stopped at the end, or one the user names.
#pragma once

#include <sys/types.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "intent_names.h"
#include "latency.h"
#include "pair_driver.h"

namespace effectfence::bench {

// A server process this benchmark started, stopped when destroyed.
class ServerProcess {
 public:
  // Starts argv[0] (a path) with argv, stdout and stderr to log_path; as
  // `run_as` (a user name) when not empty and this process is root.
  ServerProcess(const std::vector<std::string>& argv, const std::string& log_path, const std::string& run_as);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // True while it has not exited (reaps it if it has).
  bool running();
  // SIGTERM (or `signal`), then waits; SIGKILL after 30 s. Idempotent.
  void stop(int signal);
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

// What a server's processes (the one started and its direct children: the
// PostgreSQL backends and writers) have used so far. write_bytes is -1 when
// the kernel does not say.
struct ProcessUsage {
  double cpu_s = 0;
  double write_bytes = -1;
};
ProcessUsage process_tree_usage(pid_t root);

// The peer could not be measured at all because its server is not
// installed: reported by name with the reason, never silently.
struct PeerUnavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Peer {
 public:
  virtual ~Peer() = default;
  // "redis fence", "postgresql fence": the name in reports and errors.
  virtual const char* name() const = 0;
  // Where it listens, e.g. "127.0.0.1:6379" or a libpq connection string.
  virtual std::string endpoint() const = 0;

  // Keeps `in_flight` pairs going, one per connection, each call on its own
  // round trip, until `seconds` have passed, then waits for the last ones.
  // A sample is one pair. Wrong answers are noted as anomalies; a broken
  // connection throws, naming the peer.
  virtual Timings run(size_t in_flight, double seconds) = 0;

  // What the fence's data takes on disk now (Redis: its append-only files;
  // PostgreSQL: the table and its index), or -1 if not known.
  virtual double ledger_bytes() = 0;

  // The server process, when this benchmark started it; -1 otherwise.
  pid_t server_pid() const { return server_ ? server_->pid() : -1; }

 protected:
  std::unique_ptr<ServerProcess> server_;
};

// Starts redis-server in dir/redis on a free loopback port (appendonly,
// appendfsync always, no snapshots); throws PeerUnavailable when
// redis-server is not on PATH.
std::unique_ptr<Peer> start_redis(const std::string& dir, Anomalies& anomalies, IntentNames names);
// Uses the Redis at host:port (the fence's keys are prefixed per run).
std::unique_ptr<Peer> connect_redis(const std::string& host_port, Anomalies& anomalies, IntentNames names);

// initdb + postgres in dir/postgres on a free loopback port, with fsync and
// synchronous_commit on; throws PeerUnavailable when the server binaries
// are not installed. `max_connections` must cover the largest level.
std::unique_ptr<Peer> start_postgres(const std::string& dir, size_t max_connections, Anomalies& anomalies,
                                     IntentNames names);
// Uses the PostgreSQL at `conninfo` (a URL or key=value string); its table
// effectfence_bench_fence is dropped and created anew.
std::unique_ptr<Peer> connect_postgres(const std::string& conninfo, Anomalies& anomalies, IntentNames names);

}  // namespace effectfence::bench
