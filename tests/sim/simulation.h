// One seeded history of the real fence: several simulated processes on two
// hosts, each with its own Fence on one SQLite ledger file, agents that
// prepare, run, commit, abort, heartbeat, stall and die, an operator who
// clears fenced intents with SQL, sweeps, a clock that runs, jumps and
// steps back, a ledger that is locked or whose syncs fail, and power lost
// between operations or at any sync. Every choice comes from the seed; the
// checker (sim/checker.h) judges what happened.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace effectfence::sim {

// A bug planted on purpose, so a run can prove the checker catches it.
enum class Plant {
  none,
  ignore_refusal,  // an agent refused in_flight or prior_failure runs the effect anyway
  lost_wal,        // power loss also loses the synced log: answered decisions vanish
  blind_commit,    // a commit does not compare the token: it writes over whatever attempt holds the row
};
const char* plant_name(Plant plant);
bool plant_from_name(const std::string& name, Plant* plant);

struct Config {
  uint64_t seed = 1;
  int steps = 0;   // scheduler steps; 0: drawn from the seed
  int agents = 0;  // 0: drawn from the seed
  Plant plant = Plant::none;
  std::string work_dir;    // a directory for this run's ledgers (removed after)
  std::string verify_bin;  // the effectfence binary whose `verify` checks the ledger at the end; "" skips
  // A freshly created, empty ledger to start from (saves the migrations per
  // seed); "": each run creates its own.
  std::string template_ledger;
  // A PostgreSQL database to run on instead of an SQLite file (each seed in
  // a schema of its own, dropped after); "": SQLite. No power loss, locks
  // or failing syncs are simulated on it.
  std::string postgres_url;
};

struct RunResult {
  int steps = 0, agents = 0;  // as run
  int64_t operations = 0;     // fence calls, SQL clears and sweeps
  int64_t crashes = 0;        // power losses simulated
  int64_t executions = 0;     // effects run
  int64_t verified = 0;       // ledgers `effectfence verify` checked
  std::vector<std::string> violations;
  std::vector<std::string> history;  // one line per step that did something
};

// Runs one history. Deterministic per config: the same config gives the
// same history (tokens differ; no decision depends on their value).
RunResult run_seed(const Config& config);

}  // namespace effectfence::sim
