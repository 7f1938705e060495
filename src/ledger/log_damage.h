// Damage in a ledger's write-ahead log that SQLite would pass over in
// silence. SQLite reads a -wal from its start and stops at the first frame
// whose checksum or salt is wrong: every transaction after it is dropped as
// if never committed. A done intent would then read as in flight or unknown
// and, once cleared, run again. These functions find that case before
// SQLite opens the ledger, so it can be refused instead.
#pragma once

#include <cstdint>
#include <istream>
#include <string>

#include "core/status.h"

namespace effectfence {

// What a scan of a log's bytes found.
struct LogScan {
  uint64_t frames_read = 0;     // frames SQLite would read (its valid prefix)
  uint64_t commits_read = 0;    // transactions in that prefix
  uint64_t commits_lost = 0;    // commits past the first bad frame that SQLite would drop
  uint64_t break_offset = 0;    // the first bad frame's offset, when commits_lost > 0
};

// Reads a -wal file from its start. Past the first bad frame, a run of
// frames that each check out against the one before and carry the log's
// salts, holding two commits or more, is what damage leaves, not a crash: a
// writer starts a transaction only once the one before it is durable, so a
// crash leaves at most one transaction half written, at the end. The bad
// frame itself counts when it is a commit frame of the log: the damage may
// be in the very frame that ends a transaction.
// commits_lost is the most commits one such run holds, when two or more.
// database_page_size (0 if unknown) stands in for a damaged header's.
LogScan scan_log(std::istream& log, uint32_t database_page_size = 0);

// The ledger's -wal (as spelled and with links followed) scanned twice; a
// message naming the log, what SQLite would drop and the way out when both
// scans agree on lost commits and the log was not written meanwhile, ok
// otherwise. A server writing the log while it is read can make one scan
// see a frame half old and half new, with its next commits after it.
Status damaged_log(const std::string& ledger_path);

// A message naming the ledger's -wal and what to do when its header is
// sound but of a log format other than the one this SQLite reads, ok when
// not. SQLite refuses such a log only as "unable to open database file",
// which reads as a permissions problem; the log may hold commits.
Status foreign_log(const std::string& ledger_path);

}  // namespace effectfence
