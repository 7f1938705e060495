// Drives the fence library in this process, with no protocol in between:
// the same pairs the serve benchmark sends (a new intent per pair, one domain
// per slot), through Fence::prepare_async and Fence::commit_async. What it
// reaches is what the ledger as shipped allows, before JSON-RPC and pipes.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "effectfence/fence.h"
#include "latency.h"
#include "pair_driver.h"

namespace effectfence::bench {

class FenceDriver {
 public:
  // Opens an SQLite ledger at `ledger_path`; throws if it cannot.
  FenceDriver(const std::string& ledger_path, Anomalies& anomalies, IntentNames intent_names = IntentNames::ordered);

  // Keeps `in_flight` pairs going until `seconds` have passed, then waits
  // for the last ones. Each sample is one pair, prepare to certificate.
  Timings run(size_t in_flight, double seconds);

 private:
  struct Slot {
    int64_t pair = 0;
    Clock::time_point started;
  };

  void start_pair(size_t slot);
  void on_prepared(size_t slot, PrepareOutcome outcome);
  void on_committed(size_t slot, const CommitOutcome& outcome);
  // Records the pair (if it completed) and starts the slot's next one, or
  // retires the slot once time is up or the pair failed.
  void end_pair(size_t slot, bool completed);
  std::string intent_of(int64_t pair) const;

  std::unique_ptr<Fence> fence_;
  Anomalies& anomalies_;
  std::string intent_prefix_;
  IntentNames intent_names_;

  std::mutex mu_;  // callbacks run on the ledger's answer thread
  std::condition_variable all_done_;
  std::vector<Slot> slots_;
  size_t active_ = 0;
  int64_t next_pair_ = 0;
  Clock::time_point deadline_;
  Timings timings_;
};

}  // namespace effectfence::bench
