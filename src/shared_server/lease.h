// The lease file of the shared fence server (<ledger>.server.json, 0600):
// who serves this ledger over HTTP, where, and with which bearer token.
//
// Nothing left in this file may lock a client out: every reader classifies
// what it finds, and anything but a live, listening owner is taken over.
// Writes go to a temporary file that is renamed over the lease, under an
// exclusive flock of the lease's directory (released by the kernel when its
// holder dies), so two processes taking over one lease end with one owner.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"
#include "effectfence/fence.h"
#include "effectfence/ledger.h"

namespace effectfence::shared {

struct Lease {
  Holder owner;              // the server process (pid + start time, as for intent holders)
  std::string url;           // "" until the server listens
  std::string token;         // bearer token every HTTP request must carry
  int64_t created_at_ms = 0;
  std::string ledger;        // the ledger served (an absolute path): clients of another ledger do not join
  // The server's fence settings: a client asking for others does not join
  // (its results would be swept sooner, its attempts taken over sooner,
  // than it was told). 0: not recorded (an older server).
  int64_t lease_ttl_ms = Settings{}.lease_ttl_ms;
  int64_t result_ttl_ms = Settings{}.result_ttl_ms;

  std::string to_text() const;
  // Returns nullopt iff text is not a lease document.
  static std::optional<Lease> from_text(const std::string& text);
};

// What a reader finds at the lease path.
enum class LeaseCase {
  missing,     // no file: start a server
  live,        // the owner runs and has published its URL: join it
  starting,    // the owner runs and is still within the bind deadline: wait
  stale,       // the owner process is gone: take over
  corrupt,     // not a lease document: take over
  empty,       // zero bytes (the writer died between create and write): take over
  abandoned,   // no URL past the bind deadline: take over
  unreadable,  // cannot be read at all (permissions, a directory): do not share
};

const char* lease_case_name(LeaseCase c);
// Returns true iff a process may replace a lease found in this case.
bool may_take_over(LeaseCase c);

struct LeaseReading {
  LeaseCase kind = LeaseCase::missing;
  std::optional<Lease> lease;  // set for live, starting, stale, abandoned
  std::string detail;          // what was seen, for the log line
};

// Reads and classifies the lease at path. A lease without a URL older than
// bind_deadline_ms is abandoned even if its owner still runs.
LeaseReading read_lease(const std::string& path, int64_t now_ms, int64_t bind_deadline_ms);
// What read_lease makes of a file holding text (empty, corrupt, stale, live,
// starting or abandoned; never missing or unreadable).
LeaseReading classify_lease(const std::string& text, int64_t now_ms, int64_t bind_deadline_ms);

// Returns ok iff fd is a regular file of this user's that no other user may
// write; otherwise why it is not to be trusted. The lease and the servers'
// log live beside the ledger, where another user may be able to plant one.
Status why_untrusted(int fd);

// An exclusive flock of the lease's directory, held while a process reads
// and replaces the lease. The kernel drops it when the holder dies, so it
// cannot outlive a crash.
class DirectoryLock {
 public:
  // Tries until deadline. ok() tells whether the lock is held; error() why not.
  DirectoryLock(const std::string& lease_path, std::chrono::steady_clock::time_point deadline);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  bool ok() const { return fd_ >= 0; }
  const std::string& error() const { return error_; }

 private:
  int fd_ = -1;
  std::string error_;
};

// Writes lease to a new 0600 file beside path and renames it over path.
// REQUIRES: the DirectoryLock of path is held.
// Returns why it failed, if it did (nothing is left behind).
Status write_lease(const std::string& path, const Lease& lease);

// Removes the lease iff it still carries token (never a successor's).
// Takes the DirectoryLock itself, waiting up to lock_wait for it.
// Returns ok once removed, else why not ("not ours: ..." when a successor
// holds it, otherwise the lock or unlink error).
Status remove_lease_if_ours(const std::string& path, const std::string& token,
                            std::chrono::milliseconds lock_wait = std::chrono::seconds(10));

// Returns true iff the file at path is a lease carrying token.
// REQUIRES: the DirectoryLock of path is held.
bool lease_is_ours(const std::string& path, const std::string& token);

// <ledger>.server.json
std::string default_lease_path(const std::string& ledger_path);

// ledger_path as a lease records it: absolute with links resolved (where
// the file or its directory exists), so that clients started from other
// directories can compare it; a URL with its password scrubbed.
std::string absolute_ledger_path(const std::string& ledger_path);
// Returns true iff a lease names its ledger by a relative file path, as
// leases of older versions did: it does not say which directory it meant.
bool names_ledger_relatively(const std::string& leased);
// Returns true iff the ledger a lease names and this client's are one: the
// same file, else the same resolved path; URLs the same once scrubbed. A
// relative or empty lease ledger matches nothing.
bool same_ledger(const std::string& leased, const std::string& mine);

int64_t wall_clock_ms();

}  // namespace effectfence::shared
