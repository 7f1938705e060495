// What durable writes cost on this machine without effectfence: the floor
// the serve figures are compared against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "intent_names.h"
#include "latency.h"

namespace effectfence::bench {

// Overwrites 512 bytes of a preallocated file and fdatasync()s it, in a loop,
// for `seconds`. The file is created at `path` and removed afterwards.
Timings measure_fdatasync(const std::string& path, double seconds);

// Serial transactions on a fresh WAL database with synchronous=FULL, each
// `BEGIN IMMEDIATE; INSERT one row; COMMIT`, for `seconds`. The database is
// created at `path` and removed (with its -wal/-shm) afterwards.
Timings measure_sqlite_serial(const std::string& path, double seconds);

// The bare rows below (see measure_sqlite_bare_pairs), in a database kept
// open between runs, so that one database can take pairs in steps: the
// growth mode's windows. The database is created fresh at `path`.
class BarePairs {
 public:
  BarePairs(std::string path, size_t in_flight, IntentNames intent_names);
  ~BarePairs();
  BarePairs(const BarePairs&) = delete;
  BarePairs& operator=(const BarePairs&) = delete;

  // Pairs, `in_flight` prepares to a transaction and their commits in the
  // next, until `seconds` have passed or `max_pairs` ran (< 0: no limit);
  // each sample is one pair.
  Timings run(double seconds, int64_t max_pairs = -1);
  // What the database's files take once the log is checkpointed into it.
  double ledger_bytes();
  // Closes the database and removes its files.
  void remove();

 private:
  struct State;
  std::string path_;
  size_t in_flight_;
  IntentNames intent_names_;
  long next_ = 0;  // the next pair's number
  std::unique_ptr<State> state_;
};

// The least any ledger must write for a pair, with group commit as generous
// as `in_flight` calls allow (every call in flight in one transaction): a
// prepare reserves the domain's next seq and inserts the intent, a commit
// inserts the certificate and marks the intent done. No audit trail, no
// indexes beyond the keys, no JSON, no protocol. Each transaction carries
// `in_flight` prepares, the next one their commits; a sample is one pair.
// When `ledger_bytes` is not null, it is set to what the database's files
// took on disk at the end, before they were removed.
Timings measure_sqlite_bare_pairs(const std::string& path, size_t in_flight, double seconds,
                                  IntentNames intent_names = IntentNames::ordered, double* ledger_bytes = nullptr);

// The bytes of an SQLite database's file and its -wal file; 0 for missing ones.
double sqlite_files_bytes(const std::string& path);

}  // namespace effectfence::bench
