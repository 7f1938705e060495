#include "ledger/memory_file.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <vector>

namespace effectfence {
namespace {

// SQLite allocates it and never runs constructors, so the bytes are held
// through a plain pointer, made in open_memory_file() and freed by close.
struct MemoryFile {
  sqlite3_file base;
  std::vector<char>* bytes;
};

std::vector<char>& bytes_of(sqlite3_file* f) { return *reinterpret_cast<MemoryFile*>(f)->bytes; }

int file_close(sqlite3_file* f) {
  auto* m = reinterpret_cast<MemoryFile*>(f);
  delete m->bytes;
  m->bytes = nullptr;
  return SQLITE_OK;
}

// Past the end reads as zeros, with SQLite's short-read code.
int file_read(sqlite3_file* f, void* out, int n, sqlite3_int64 offset) {
  const std::vector<char>& bytes = bytes_of(f);
  const auto wanted = static_cast<size_t>(n);
  const auto from = static_cast<size_t>(offset);
  const size_t have = from < bytes.size() ? std::min(wanted, bytes.size() - from) : 0;
  if (have > 0) std::memcpy(out, bytes.data() + from, have);
  if (have == wanted) return SQLITE_OK;
  std::memset(static_cast<char*>(out) + have, 0, wanted - have);
  return SQLITE_IOERR_SHORT_READ;
}

int file_write(sqlite3_file* f, const void* data, int n, sqlite3_int64 offset) {
  std::vector<char>& bytes = bytes_of(f);
  const auto end = static_cast<size_t>(offset) + static_cast<size_t>(n);
  try {
    if (end > bytes.size()) bytes.resize(end);
  } catch (const std::bad_alloc&) {
    return SQLITE_IOERR_NOMEM;
  }
  std::memcpy(bytes.data() + offset, data, static_cast<size_t>(n));
  return SQLITE_OK;
}

int file_truncate(sqlite3_file* f, sqlite3_int64 size) {
  std::vector<char>& bytes = bytes_of(f);
  if (static_cast<size_t>(size) < bytes.size()) bytes.resize(static_cast<size_t>(size));
  return SQLITE_OK;
}

int file_size(sqlite3_file* f, sqlite3_int64* size) {
  *size = static_cast<sqlite3_int64>(bytes_of(f).size());
  return SQLITE_OK;
}

// One process, one connection: nothing to sync or lock.
const sqlite3_io_methods kMethods = {
    1,  // iVersion: no shared memory, no memory mapping
    &file_close,
    &file_read,
    &file_write,
    &file_truncate,
    [](sqlite3_file*, int) { return SQLITE_OK; },  // xSync
    &file_size,
    [](sqlite3_file*, int) { return SQLITE_OK; },  // xLock
    [](sqlite3_file*, int) { return SQLITE_OK; },  // xUnlock
    [](sqlite3_file*, int* reserved) {
      *reserved = 0;
      return SQLITE_OK;
    },
    [](sqlite3_file*, int, void*) { return SQLITE_NOTFOUND; },  // xFileControl
    [](sqlite3_file*) { return 4096; },                           // xSectorSize
    [](sqlite3_file*) { return 0; },                              // xDeviceCharacteristics
    nullptr,                                                      // xShmMap
    nullptr,                                                      // xShmLock
    nullptr,                                                      // xShmBarrier
    nullptr,                                                      // xShmUnmap
    nullptr,                                                      // xFetch
    nullptr,                                                      // xUnfetch
};

}  // namespace

int memory_file_size() { return static_cast<int>(sizeof(MemoryFile)); }

int open_memory_file(sqlite3_file* file) {
  auto* m = reinterpret_cast<MemoryFile*>(file);
  m->bytes = new (std::nothrow) std::vector<char>;
  if (m->bytes == nullptr) return SQLITE_NOMEM;
  m->base.pMethods = &kMethods;
  return SQLITE_OK;
}

}  // namespace effectfence
