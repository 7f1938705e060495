// The SQLite ledger: one WAL-mode file shared by every process on a host.
//
// Why it is safe across processes: every decision runs inside BEGIN
// IMMEDIATE, which takes the file's single write lock before the first read,
// so the rows a decision reads cannot change until it commits; and with
// synchronous=FULL the commit is fsync'd before write() returns, so no
// answer is ever given for a decision a crash could undo.
#pragma once

#include <memory>
#include <string>
#include <variant>

#include "effectfence/ledger.h"

namespace effectfence {

// Opens (creating or migrating as needed) the ledger at path; "memory" opens
// a private in-memory ledger. Refuses, with a named error, files that are not
// ours, are corrupt, are newer than this binary, or cannot be written.
// An empty file (a creator died before writing the schema) is initialised.
std::variant<std::unique_ptr<Ledger>, OpenError> open_sqlite_ledger(const std::string& path,
                                                                    int64_t busy_timeout_ms);

// Process-wide SQLite settings for a program that serves a ledger: SQLite
// otherwise counts every allocation under one global mutex, statistics
// nothing here reads. Call first thing in main, before any thread or
// connection exists; later calls (SQLite already running) change nothing.
void configure_sqlite_for_process();

}  // namespace effectfence
