// A file SQLite can open whose bytes live in this process's memory.
//
// The ledger's writer serves its temporary files from it: statement and
// savepoint journals that outgrow their first chunk, sorts, temporary
// tables. SQLite keeps such journals in one chunk of the spill size only
// when they may spill to a file (`temp_store = FILE`); spilled here, a
// decision still never needs a temporary directory, which may be full,
// read-only or missing without the ledger's disk being at fault.
#pragma once

struct sqlite3_file;

namespace effectfence {

// The bytes to allocate for one (SQLite's szOsFile).
int memory_file_size();

// Opens an empty one in `file`, memory_file_size() bytes that SQLite
// allocated: SQLITE_OK, or SQLITE_NOMEM. A write that finds no memory
// fails with SQLITE_IOERR_NOMEM.
int open_memory_file(sqlite3_file* file);

}  // namespace effectfence
