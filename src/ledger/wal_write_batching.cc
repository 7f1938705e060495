#include "ledger/wal_write_batching.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace effectfence {
namespace {

// A commit of the largest batch writes a few MiB of frames; beyond this the
// gathered bytes are written out and gathering starts again.
constexpr size_t kMaxGathered = 8u << 20;
// SQLite never writes more than a page and a frame header at once, and the
// unix VFS relies on it: it masks a larger count to its low 17 bits. So the
// gathered bytes go out in pieces below 128 KiB (a typical commit: one).
constexpr size_t kMaxWrite = 0x1f000;
// The shared-memory lock slot of the log's single writer, fixed by SQLite's
// WAL format.
constexpr int kWriteLockSlot = 0;

// Writes to a log file not yet handed to the kernel: bytes, contiguous,
// starting at offset. failed: a write of gathered bytes failed once, so
// the file no longer holds what SQLite believes it wrote.
struct Gathered {
  std::vector<char> bytes;
  sqlite3_int64 offset = 0;
  bool failed = false;
};

struct File;

// One per connection opened through BatchedLogVfs, and never freed: the
// connection keeps pointing at vfs. log: that connection's -wal file while
// it is open.
// powersafe_overwrite: what the database file reports. Without it SQLite
// pads each commit to a sector boundary and writes the end of the padding
// after the commit's sync, expecting it in the file at once; the log is then
// not gathered at all.
struct Connection {
  std::string name;
  sqlite3_vfs vfs{};
  sqlite3_vfs* wrapped = nullptr;
  File* log = nullptr;
  bool powersafe_overwrite = false;
};

// SQLite allocates szOsFile bytes for this and never runs constructors, so
// it holds only plain pointers. real: the wrapped VFS's file, allocated in
// vfs_open(). gathered: nullptr for every file but the log.
struct File {
  sqlite3_file base;
  sqlite3_file* real;
  Gathered* gathered;
  Connection* owner;
};

File* self(sqlite3_file* f) { return reinterpret_cast<File*>(f); }
sqlite3_file* real(sqlite3_file* f) { return self(f)->real; }
Connection* owner(sqlite3_vfs* v) { return static_cast<Connection*>(v->pAppData); }
sqlite3_vfs* base(sqlite3_vfs* v) { return owner(v)->wrapped; }

// Writes the gathered bytes. A failure is reported as an I/O error (never
// as SQLITE_FULL, which SQLite treats as recoverable on a read) and is
// final for the file: a transaction that lost frames must not commit.
int flush(File* f) {
  Gathered* g = f->gathered;
  if (!g) return SQLITE_OK;
  if (g->failed) return SQLITE_IOERR_WRITE;
  int rc = SQLITE_OK;
  for (size_t done = 0; done < g->bytes.size() && rc == SQLITE_OK; done += kMaxWrite) {
    const size_t n = std::min(kMaxWrite, g->bytes.size() - done);
    rc = f->real->pMethods->xWrite(f->real, g->bytes.data() + done, static_cast<int>(n),
                                   g->offset + static_cast<sqlite3_int64>(done));
  }
  g->bytes.clear();
  if (rc == SQLITE_OK) return SQLITE_OK;
  g->failed = true;
  return SQLITE_IOERR_WRITE;
}

// Gathered bytes left when the connection gives up the write lock belong to
// a transaction that rolled back (a commit flushed its own at its sync):
// SQLite never reads them, and written later, without the lock, they could
// land on frames another writer has committed since.
void discard(File* f) {
  if (f->gathered) f->gathered->bytes.clear();
}

int file_write(sqlite3_file* file, const void* data, int n, sqlite3_int64 offset) {
  File* f = self(file);
  Gathered* g = f->gathered;
  if (!g) return f->real->pMethods->xWrite(f->real, data, n, offset);
  if (g->failed) return SQLITE_IOERR_WRITE;
  const size_t size = static_cast<size_t>(n);
  const bool follows = !g->bytes.empty() && offset == g->offset + static_cast<sqlite3_int64>(g->bytes.size());
  if (!follows || g->bytes.size() + size > kMaxGathered) {
    if (const int rc = flush(f); rc != SQLITE_OK) return rc;
    g->offset = offset;
  }
  try {
    const char* bytes = static_cast<const char*>(data);
    g->bytes.insert(g->bytes.end(), bytes, bytes + size);
  } catch (const std::bad_alloc&) {
    g->bytes.clear();
    g->failed = true;
    return SQLITE_IOERR_NOMEM;
  }
  return SQLITE_OK;
}

int file_close(sqlite3_file* file) {
  File* f = self(file);
  // Whatever is still gathered was never committed (a commit flushed its
  // own): it goes with the buffer.
  if (f->gathered && f->owner->log == f) f->owner->log = nullptr;
  const int closed = f->real->pMethods ? f->real->pMethods->xClose(f->real) : SQLITE_OK;
  sqlite3_free(f->real);
  delete f->gathered;
  f->real = nullptr;
  f->gathered = nullptr;
  return closed;
}

int shm_lock(sqlite3_file* file, int offset, int n, int flags) {
  File* f = self(file);
  if ((flags & SQLITE_SHM_UNLOCK) && offset == kWriteLockSlot && f->owner->log) discard(f->owner->log);
  return f->real->pMethods->xShmLock(f->real, offset, n, flags);
}

// Runs op on the wrapped file once every gathered byte is written.
template <typename Op>
int after_flush(sqlite3_file* file, Op op) {
  if (const int rc = flush(self(file)); rc != SQLITE_OK) return rc;
  return op(real(file));
}

const sqlite3_io_methods kMethods = {
    2,  // iVersion: shared memory (WAL), no memory mapping (SQLite's default mmap_size is 0)
    &file_close,
    [](sqlite3_file* f, void* out, int n, sqlite3_int64 offset) {
      return after_flush(f, [&](sqlite3_file* r) { return r->pMethods->xRead(r, out, n, offset); });
    },
    &file_write,
    [](sqlite3_file* f, sqlite3_int64 size) {
      return after_flush(f, [&](sqlite3_file* r) { return r->pMethods->xTruncate(r, size); });
    },
    [](sqlite3_file* f, int flags) {
      return after_flush(f, [&](sqlite3_file* r) { return r->pMethods->xSync(r, flags); });
    },
    [](sqlite3_file* f, sqlite3_int64* size) {
      return after_flush(f, [&](sqlite3_file* r) { return r->pMethods->xFileSize(r, size); });
    },
    [](sqlite3_file* f, int level) { return real(f)->pMethods->xLock(real(f), level); },
    [](sqlite3_file* f, int level) { return real(f)->pMethods->xUnlock(real(f), level); },
    [](sqlite3_file* f, int* out) { return real(f)->pMethods->xCheckReservedLock(real(f), out); },
    [](sqlite3_file* f, int op, void* arg) {
      return after_flush(f, [&](sqlite3_file* r) { return r->pMethods->xFileControl(r, op, arg); });
    },
    [](sqlite3_file* f) { return real(f)->pMethods->xSectorSize(real(f)); },
    [](sqlite3_file* f) { return real(f)->pMethods->xDeviceCharacteristics(real(f)); },
    [](sqlite3_file* f, int page, int size, int extend, void volatile** out) {
      return real(f)->pMethods->xShmMap(real(f), page, size, extend, out);
    },
    &shm_lock,
    [](sqlite3_file* f) { real(f)->pMethods->xShmBarrier(real(f)); },
    [](sqlite3_file* f, int delete_flag) { return real(f)->pMethods->xShmUnmap(real(f), delete_flag); },
    nullptr,  // xFetch
    nullptr,  // xUnfetch
};

int vfs_open(sqlite3_vfs* vfs, const char* name, sqlite3_file* file, int flags, int* out_flags) {
  File* f = self(file);
  f->base.pMethods = nullptr;  // until the wrapped file is open: SQLite then calls no method
  f->real = nullptr;
  f->gathered = nullptr;
  f->owner = owner(vfs);
  sqlite3_vfs* wrapped = base(vfs);
  auto* inner = static_cast<sqlite3_file*>(sqlite3_malloc(wrapped->szOsFile));
  if (!inner) return SQLITE_NOMEM;
  std::memset(inner, 0, static_cast<size_t>(wrapped->szOsFile));
  const int rc = wrapped->xOpen(wrapped, name, inner, flags, out_flags);
  if (rc != SQLITE_OK) {
    if (inner->pMethods) inner->pMethods->xClose(inner);
    sqlite3_free(inner);
    return rc;
  }
  if (flags & SQLITE_OPEN_MAIN_DB) {
    f->owner->powersafe_overwrite =
        (inner->pMethods->xDeviceCharacteristics(inner) & SQLITE_IOCAP_POWERSAFE_OVERWRITE) != 0;
  }
  // One log per connection; a second one (an attached database's) passes
  // straight through.
  if ((flags & SQLITE_OPEN_WAL) && !f->owner->log && f->owner->powersafe_overwrite) {
    f->gathered = new (std::nothrow) Gathered;
    if (!f->gathered) {
      inner->pMethods->xClose(inner);
      sqlite3_free(inner);
      return SQLITE_NOMEM;
    }
    f->owner->log = f;
  }
  f->real = inner;
  f->base.pMethods = &kMethods;
  return SQLITE_OK;
}

void make_vfs(Connection& c) {
  sqlite3_vfs& v = c.vfs;
  v.iVersion = 2;
  v.szOsFile = static_cast<int>(sizeof(File));
  v.mxPathname = c.wrapped->mxPathname;
  v.zName = c.name.c_str();
  v.pAppData = &c;
  v.xOpen = &vfs_open;
  v.xDelete = [](sqlite3_vfs* v, const char* name, int sync_dir) { return base(v)->xDelete(base(v), name, sync_dir); };
  v.xAccess = [](sqlite3_vfs* v, const char* name, int flags, int* out) {
    return base(v)->xAccess(base(v), name, flags, out);
  };
  v.xFullPathname = [](sqlite3_vfs* v, const char* name, int n, char* out) {
    return base(v)->xFullPathname(base(v), name, n, out);
  };
  v.xDlOpen = [](sqlite3_vfs* v, const char* name) { return base(v)->xDlOpen(base(v), name); };
  v.xDlError = [](sqlite3_vfs* v, int n, char* out) { base(v)->xDlError(base(v), n, out); };
  v.xDlSym = [](sqlite3_vfs* v, void* h, const char* sym) { return base(v)->xDlSym(base(v), h, sym); };
  v.xDlClose = [](sqlite3_vfs* v, void* h) { base(v)->xDlClose(base(v), h); };
  v.xRandomness = [](sqlite3_vfs* v, int n, char* out) { return base(v)->xRandomness(base(v), n, out); };
  v.xSleep = [](sqlite3_vfs* v, int us) { return base(v)->xSleep(base(v), us); };
  v.xCurrentTime = [](sqlite3_vfs* v, double* out) { return base(v)->xCurrentTime(base(v), out); };
  v.xGetLastError = [](sqlite3_vfs* v, int n, char* out) { return base(v)->xGetLastError(base(v), n, out); };
  v.xCurrentTimeInt64 = [](sqlite3_vfs* v, sqlite3_int64* out) {
    return base(v)->xCurrentTimeInt64(base(v), out);
  };
}

std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}

// Every connection's VFS, reachable for the life of the process (a static
// container would be destroyed at exit, before connections closed later).
std::vector<Connection*>& connections() {
  static auto* all = new std::vector<Connection*>;
  return *all;
}

}  // namespace

BatchedLogVfs::BatchedLogVfs() : lock_(registry_mutex()) {
  sqlite3_vfs* wrapped = sqlite3_vfs_find(nullptr);
  if (!wrapped) return;
  auto* c = new Connection;
  connections().push_back(c);
  c->wrapped = wrapped;
  c->name = "effectfence-wal-batching-" + std::to_string(connections().size());
  make_vfs(*c);
  if (sqlite3_vfs_register(&c->vfs, /*makeDflt=*/0) == SQLITE_OK) registered_ = &c->vfs;
}

BatchedLogVfs::~BatchedLogVfs() {
  if (registered_) sqlite3_vfs_unregister(registered_);
}

const char* BatchedLogVfs::name() const { return registered_ ? registered_->zName : nullptr; }

}  // namespace effectfence
