// A SQLite VFS that hands a commit's write-ahead log frames to the kernel in
// one write.
//
// SQLite appends each frame of a commit to the log with two pwrite calls
// (its 24-byte header, then the page), about forty per group commit, and
// each system call costs the writer thread time every decision waits for.
// This VFS wraps another (the default; in tests, a fault-injecting one). It
// gathers contiguous writes to a `-wal` file in memory and writes them out
// before anything could need them: before the log is synced, read,
// truncated or sized, before any file-control call, and whenever a write
// does not follow the gathered ones (SQLite rewrites frames it already
// wrote) or the buffer is full. Every other file passes straight through.
//
// Bytes still gathered when the connection gives up the log's write lock
// belong to a transaction that rolled back, and are dropped: written later,
// without the lock, they could land on frames another writer committed. A
// failed write of gathered bytes fails every later write, sync and read of
// that log, so a transaction that lost frames cannot commit.
//
// SQLite writes to the log after a commit's sync only when it pads commits
// to a sector boundary, for a database without powersafe overwrite: such a
// database's log is not gathered at all.
//
// REQUIRES: only connections that run with `PRAGMA synchronous = FULL`, in
// the normal locking mode, are opened through it. Then every commit syncs
// the log before it makes its frames visible to other connections, so no
// other connection can ever look for a frame that is still in the buffer,
// and every transaction ends by releasing the write lock, which is when a
// rolled-back one's bytes are dropped (`PRAGMA locking_mode = EXCLUSIVE`
// keeps the lock in memory, so they would be kept).
#pragma once

#include <mutex>

struct sqlite3_vfs;

namespace effectfence {

// While it lives, a VFS for one connection, wrapping the VFS that is
// SQLite's default now, is registered under name() so that the connection
// can be opened by name; the connection keeps using it after this is gone.
// It is registered only for that moment, and never as the default, so no
// other code can open through it or wrap it. Statements that look the
// connection's VFS up by name again (VACUUM, ATTACH) fail on such a
// connection; the ledger's writer runs neither. Holds a process-wide lock:
// open the connection, then let this go.
class BatchedLogVfs {
 public:
  BatchedLogVfs();
  ~BatchedLogVfs();
  BatchedLogVfs(const BatchedLogVfs&) = delete;
  BatchedLogVfs& operator=(const BatchedLogVfs&) = delete;

  // nullptr if SQLite refused to register it: open with the default then.
  const char* name() const;

 private:
  std::lock_guard<std::mutex> lock_;
  sqlite3_vfs* registered_ = nullptr;
};

}  // namespace effectfence
