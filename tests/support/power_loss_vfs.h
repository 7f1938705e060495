// A SQLite VFS for tests that loses power on request, and fails syncs or
// writes of chosen files on request.
//
// It passes every call to the real VFS and remembers, for each file, its
// bytes as of its last successful xSync. crash_copy() writes those images,
// and nothing that was never synced, into another directory: a database
// opened there holds what a machine would find after the power came back
// at that instant. Writes and syncs wait while a copy is taken, so the copy
// is one instant.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace effectfence::testing {

class PowerLossVfs {
 public:
  // Becomes SQLite's default VFS until destroyed. REQUIRES: every
  // connection opened through it is closed before the destructor runs.
  PowerLossVfs() : real_(sqlite3_vfs_find(nullptr)) {
    if (!real_) throw std::runtime_error("no default SQLite VFS");
    vfs_.iVersion = 2;
    vfs_.szOsFile = static_cast<int>(sizeof(File)) + real_->szOsFile;
    vfs_.mxPathname = real_->mxPathname;
    vfs_.zName = "effectfence-power-loss";
    vfs_.pAppData = this;
    vfs_.xOpen = &PowerLossVfs::open;
    vfs_.xDelete = &PowerLossVfs::remove;
    vfs_.xAccess = [](sqlite3_vfs* v, const char* name, int flags, int* out) {
      return self(v)->real_->xAccess(self(v)->real_, name, flags, out);
    };
    vfs_.xFullPathname = [](sqlite3_vfs* v, const char* name, int n, char* out) {
      return self(v)->real_->xFullPathname(self(v)->real_, name, n, out);
    };
    vfs_.xDlOpen = [](sqlite3_vfs* v, const char* name) { return self(v)->real_->xDlOpen(self(v)->real_, name); };
    vfs_.xDlError = [](sqlite3_vfs* v, int n, char* out) { self(v)->real_->xDlError(self(v)->real_, n, out); };
    vfs_.xDlSym = [](sqlite3_vfs* v, void* h, const char* sym) { return self(v)->real_->xDlSym(self(v)->real_, h, sym); };
    vfs_.xDlClose = [](sqlite3_vfs* v, void* h) { self(v)->real_->xDlClose(self(v)->real_, h); };
    vfs_.xRandomness = [](sqlite3_vfs* v, int n, char* out) { return self(v)->real_->xRandomness(self(v)->real_, n, out); };
    vfs_.xSleep = [](sqlite3_vfs* v, int us) { return self(v)->real_->xSleep(self(v)->real_, us); };
    vfs_.xCurrentTime = [](sqlite3_vfs* v, double* out) {
      if (const auto clock = self(v)->clock()) {
        *out = static_cast<double>(clock()) / 86'400'000.0 + 2440587.5;  // a Julian day number
        return SQLITE_OK;
      }
      return self(v)->real_->xCurrentTime(self(v)->real_, out);
    };
    vfs_.xGetLastError = [](sqlite3_vfs* v, int n, char* out) {
      return self(v)->real_->xGetLastError(self(v)->real_, n, out);
    };
    vfs_.xCurrentTimeInt64 = [](sqlite3_vfs* v, sqlite3_int64* out) {
      if (const auto clock = self(v)->clock()) {
        *out = clock() + kUnixEpochJulianMs;
        return SQLITE_OK;
      }
      return self(v)->real_->xCurrentTimeInt64(self(v)->real_, out);
    };
    if (sqlite3_vfs_register(&vfs_, /*makeDflt=*/1) != SQLITE_OK) throw std::runtime_error("cannot register the VFS");
  }
  ~PowerLossVfs() { sqlite3_vfs_unregister(&vfs_); }
  PowerLossVfs(const PowerLossVfs&) = delete;
  PowerLossVfs& operator=(const PowerLossVfs&) = delete;

  // Writes the last synced image of every file in from_dir into to_dir,
  // under the same names. Returns how many files it wrote.
  int crash_copy(const std::string& from_dir, const std::string& to_dir) {
    const std::string prefix = std::filesystem::canonical(from_dir).string() + "/";
    std::lock_guard<std::mutex> lock(mutex_);
    int written = 0;
    for (const auto& [path, bytes] : synced_) {
      if (path.compare(0, prefix.size(), prefix) != 0) continue;
      std::ofstream out(std::filesystem::path(to_dir) / path.substr(prefix.size()), std::ios::binary);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      if (!out) throw std::runtime_error("cannot write the crash copy of " + path);
      ++written;
    }
    return written;
  }

  // From now on, syncs of files whose name ends with suffix fail with
  // SQLITE_IOERR_FSYNC and change nothing ("" stops failing them).
  void fail_syncs_of(const std::string& suffix) {
    std::lock_guard<std::mutex> lock(mutex_);
    failing_suffix_ = suffix;
  }

  // From now on hook(path) runs before each sync of a named file, outside
  // the VFS's lock, so it may call crash_copy: that copy is the instant
  // before the sync, the power lost while the disk was asked to keep the
  // write. nullptr removes it.
  void before_sync(std::function<void(const std::string& path)> hook) {
    std::lock_guard<std::mutex> lock(mutex_);
    before_sync_ = std::move(hook);
  }

  // From now on SQL's 'now' (julianday('now'), column defaults) reads
  // unix_ms instead of the system clock: a simulated clock for the ledger's
  // SQL as well as for the fence. nullptr restores the system clock.
  void set_clock(std::function<int64_t()> unix_ms) {
    std::lock_guard<std::mutex> lock(mutex_);
    clock_ = std::move(unix_ms);
  }

  // Successful syncs so far, of any file.
  int syncs() {
    std::lock_guard<std::mutex> lock(mutex_);
    return syncs_;
  }

  // From now on, writes to files whose name ends with suffix fail with error
  // (an SQLite error code) and change nothing ("" stops failing them).
  void fail_writes_of(const std::string& suffix, int error) {
    std::lock_guard<std::mutex> lock(mutex_);
    failing_writes_suffix_ = suffix;
    write_error_ = error;
  }

  // From now on, opening a temporary file (a spilled journal, a sort's run:
  // any file SQLite opens without a name) fails as it does when no
  // temporary directory can be written: SQLITE_IOERR_GETTEMPPATH.
  void refuse_temporary_files() {
    std::lock_guard<std::mutex> lock(mutex_);
    refuse_temporary_ = true;
  }

  // Temporary files SQLite tried to open so far, refused or not.
  int temporary_files_asked_for() {
    std::lock_guard<std::mutex> lock(mutex_);
    return temporary_asked_;
  }

  // Successful writes so far to files whose name ends with suffix.
  int writes_of(const std::string& suffix) {
    std::lock_guard<std::mutex> lock(mutex_);
    int n = 0;
    for (const auto& [path, count] : writes_) {
      if (ends_with(path, suffix)) n += count;
    }
    return n;
  }

 private:
  // SQLite hands xOpen szOsFile bytes; ours come first, the real file's after.
  struct File {
    sqlite3_file base;  // first: SQLite reads pMethods from here
    sqlite3_file* real;
    PowerLossVfs* vfs;
    std::string path;  // "" for temporary files, which are not tracked
  };
  static_assert(sizeof(File) % 8 == 0, "the real file that follows needs 8-byte alignment");

  static PowerLossVfs* self(sqlite3_vfs* v) { return static_cast<PowerLossVfs*>(v->pAppData); }
  static constexpr sqlite3_int64 kUnixEpochJulianMs = 210'866'760'000'000;  // 1970-01-01 as a Julian day, in ms
  std::function<int64_t()> clock() {
    std::lock_guard<std::mutex> lock(mutex_);
    return clock_;
  }
  static File* file(sqlite3_file* f) { return reinterpret_cast<File*>(f); }
  static sqlite3_file* real(sqlite3_file* f) { return file(f)->real; }

  static int open(sqlite3_vfs* v, const char* name, sqlite3_file* f, int flags, int* out_flags) {
    PowerLossVfs* me = self(v);
    File* shim = new (f) File{};
    shim->real = reinterpret_cast<sqlite3_file*>(reinterpret_cast<char*>(f) + sizeof(File));
    std::memset(shim->real, 0, static_cast<size_t>(me->real_->szOsFile));
    shim->vfs = me;
    if (name) shim->path = name;
    if (!name) {
      std::lock_guard<std::mutex> lock(me->mutex_);
      ++me->temporary_asked_;
      if (me->refuse_temporary_) {
        shim->~File();
        f->pMethods = nullptr;
        return SQLITE_IOERR_GETTEMPPATH;
      }
    }
    const int rc = me->real_->xOpen(me->real_, name, shim->real, flags, out_flags);
    if (rc != SQLITE_OK) {
      if (shim->real->pMethods) shim->real->pMethods->xClose(shim->real);
      shim->~File();
      f->pMethods = nullptr;  // SQLite calls no xClose after a failed xOpen
      return rc;
    }
    shim->base.pMethods = &kMethods;
    // A file that is on disk when first opened (a crash copy restarted
    // from) survives a power loss as it is, until a sync says otherwise.
    std::lock_guard<std::mutex> lock(me->mutex_);
    if (name && !me->synced_.count(shim->path)) {
      sqlite3_int64 size = 0;
      std::vector<char> bytes;
      if (shim->real->pMethods->xFileSize(shim->real, &size) == SQLITE_OK && size > 0) {
        bytes.resize(static_cast<size_t>(size));
        if (shim->real->pMethods->xRead(shim->real, bytes.data(), static_cast<int>(size), 0) != SQLITE_OK) bytes.clear();
      }
      if (!bytes.empty()) me->synced_[shim->path] = std::move(bytes);
    }
    return SQLITE_OK;
  }

  static int remove(sqlite3_vfs* v, const char* name, int sync_dir) {
    PowerLossVfs* me = self(v);
    std::lock_guard<std::mutex> lock(me->mutex_);
    const int rc = me->real_->xDelete(me->real_, name, sync_dir);
    if (rc == SQLITE_OK) me->synced_.erase(name);
    return rc;
  }

  static int close(sqlite3_file* f) {
    File* shim = file(f);
    const int rc = shim->real->pMethods ? shim->real->pMethods->xClose(shim->real) : SQLITE_OK;
    shim->~File();
    return rc;
  }

  static bool ends_with(const std::string& path, const std::string& suffix) {
    return !suffix.empty() && path.size() >= suffix.size() &&
           path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  }

  static int write(sqlite3_file* f, const void* data, int n, sqlite3_int64 offset) {
    File* shim = file(f);
    PowerLossVfs* me = shim->vfs;
    std::lock_guard<std::mutex> lock(me->mutex_);
    if (ends_with(shim->path, me->failing_writes_suffix_)) return me->write_error_;
    const int rc = real(f)->pMethods->xWrite(real(f), data, n, offset);
    if (rc == SQLITE_OK && !shim->path.empty()) ++me->writes_[shim->path];
    return rc;
  }

  static int truncate(sqlite3_file* f, sqlite3_int64 size) {
    std::lock_guard<std::mutex> lock(file(f)->vfs->mutex_);
    return real(f)->pMethods->xTruncate(real(f), size);
  }

  // What the disk holds after a sync: the file as it is now.
  static int sync(sqlite3_file* f, int flags) {
    File* shim = file(f);
    PowerLossVfs* me = shim->vfs;
    std::function<void(const std::string&)> hook;
    {
      std::lock_guard<std::mutex> lock(me->mutex_);
      hook = me->before_sync_;
    }
    if (hook && !shim->path.empty()) hook(shim->path);
    std::lock_guard<std::mutex> lock(me->mutex_);
    if (ends_with(shim->path, me->failing_suffix_)) return SQLITE_IOERR_FSYNC;
    const int rc = real(f)->pMethods->xSync(real(f), flags);
    if (rc != SQLITE_OK || shim->path.empty()) return rc;
    sqlite3_int64 size = 0;
    if (real(f)->pMethods->xFileSize(real(f), &size) != SQLITE_OK) return SQLITE_IOERR_FSYNC;
    std::vector<char> bytes(static_cast<size_t>(size));
    if (size > 0 && real(f)->pMethods->xRead(real(f), bytes.data(), static_cast<int>(size), 0) != SQLITE_OK) {
      return SQLITE_IOERR_FSYNC;
    }
    me->synced_[shim->path] = std::move(bytes);
    ++me->syncs_;
    return rc;
  }

  static inline const sqlite3_io_methods kMethods = {
      2,  // iVersion: shared memory (WAL) but no memory mapping
      &PowerLossVfs::close,
      [](sqlite3_file* f, void* out, int n, sqlite3_int64 offset) { return real(f)->pMethods->xRead(real(f), out, n, offset); },
      &PowerLossVfs::write,
      &PowerLossVfs::truncate,
      &PowerLossVfs::sync,
      [](sqlite3_file* f, sqlite3_int64* size) { return real(f)->pMethods->xFileSize(real(f), size); },
      [](sqlite3_file* f, int level) { return real(f)->pMethods->xLock(real(f), level); },
      [](sqlite3_file* f, int level) { return real(f)->pMethods->xUnlock(real(f), level); },
      [](sqlite3_file* f, int* out) { return real(f)->pMethods->xCheckReservedLock(real(f), out); },
      [](sqlite3_file* f, int op, void* arg) { return real(f)->pMethods->xFileControl(real(f), op, arg); },
      [](sqlite3_file* f) { return real(f)->pMethods->xSectorSize(real(f)); },
      [](sqlite3_file* f) { return real(f)->pMethods->xDeviceCharacteristics(real(f)); },
      [](sqlite3_file* f, int page, int size, int extend, void volatile** out) {
        return real(f)->pMethods->xShmMap(real(f), page, size, extend, out);
      },
      [](sqlite3_file* f, int offset, int n, int flags) { return real(f)->pMethods->xShmLock(real(f), offset, n, flags); },
      [](sqlite3_file* f) { real(f)->pMethods->xShmBarrier(real(f)); },
      [](sqlite3_file* f, int delete_flag) { return real(f)->pMethods->xShmUnmap(real(f), delete_flag); },
      nullptr,  // xFetch
      nullptr,  // xUnfetch
  };

  sqlite3_vfs* real_;
  sqlite3_vfs vfs_{};
  std::mutex mutex_;
  std::map<std::string, std::vector<char>> synced_;
  int syncs_ = 0;
  std::string failing_suffix_;
  std::string failing_writes_suffix_;
  int write_error_ = SQLITE_OK;
  bool refuse_temporary_ = false;
  int temporary_asked_ = 0;
  std::map<std::string, int> writes_;
  std::function<void(const std::string&)> before_sync_;
  std::function<int64_t()> clock_;
};

}  // namespace effectfence::testing
