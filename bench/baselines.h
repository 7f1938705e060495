// What durable writes cost on this machine without effectfence: the floor
// the serve figures are compared against.
#pragma once

#include <string>

#include "latency.h"

namespace effectfence::bench {

// Overwrites 512 bytes of a preallocated file and fdatasync()s it, in a loop,
// for `seconds`. The file is created at `path` and removed afterwards.
Timings measure_fdatasync(const std::string& path, double seconds);

// Serial transactions on a fresh WAL database with synchronous=FULL, each
// `BEGIN IMMEDIATE; INSERT one row; COMMIT`, for `seconds`. The database is
// created at `path` and removed (with its -wal/-shm) afterwards.
Timings measure_sqlite_serial(const std::string& path, double seconds);

}  // namespace effectfence::bench
