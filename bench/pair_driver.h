// Drives `effectfence serve` the way a busy agent fleet would: a fixed number
// of fence_prepare + fence_commit pairs in flight, each for a new intent,
// checking every answer while timing it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "child_process.h"
#include "intent_names.h"
#include "latency.h"

namespace effectfence::bench {

using Json = nlohmann::json;

// Answers that were not what a correct fence gives a fresh intent.
struct Anomalies {
  std::map<std::string, size_t> counts;  // by kind, e.g. "prepare: refused (in_flight)"
  std::vector<std::string> examples;     // the first few, in full

  void note(const std::string& kind, const std::string& detail);
  size_t total() const;
};

class PairDriver {
 public:
  PairDriver(ChildProcess& server, Anomalies& anomalies, IntentNames intent_names = IntentNames::ordered);

  // initialize + notifications/initialized; throws if the server does not answer.
  void handshake();

  // What each pair is: the fence's two decisions, or two `ping`s, the
  // cheapest calls serve answers, which measure the protocol path alone.
  enum class Work { fence, ping };

  // Keeps `in_flight` pairs going, starting new ones until `seconds` have
  // passed (or `max_pairs` have started, when it is not negative), then
  // waits for the last ones. Each sample is one pair, from sending its
  // first call to receiving its second call's answer.
  Timings run(size_t in_flight, double seconds, Work work = Work::fence, int64_t max_pairs = -1);

  // The server's group commit so far (fence_stats "batching"). Call it
  // between runs, with nothing in flight.
  struct Batching {
    int64_t transactions = 0;
    int64_t decisions = 0;
  };
  Batching batching();

 private:
  enum class Step { prepare, commit, first_ping, second_ping };
  struct Pending {
    size_t slot;
    Step step;
  };
  struct Slot {
    int64_t pair = 0;
    Clock::time_point started;
  };

  int64_t send_call(const char* tool, Json arguments);
  int64_t send_ping();
  void start_pair(size_t slot);
  void end_pair(size_t slot, bool completed);
  void on_message(const std::string& line);
  void on_prepared(size_t slot, const Json& outcome);
  void on_committed(size_t slot, const Json& outcome);
  void on_pinged(size_t slot, Step step, const Json& message);
  std::vector<std::string> wait_for_lines();

  ChildProcess& server_;
  Anomalies& anomalies_;
  std::string intent_prefix_;
  IntentNames intent_names_;
  int64_t next_id_ = 1;
  int64_t next_pair_ = 0;
  std::unordered_map<int64_t, Pending> pending_;
  std::vector<Slot> slots_;
  Clock::time_point deadline_;
  int64_t pairs_left_ = -1;  // pairs this run may still start; negative: no limit
  Work work_ = Work::fence;
  Timings timings_;
};

}  // namespace effectfence::bench
