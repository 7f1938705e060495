// Paths of a SQLite ledger and the files SQLite keeps beside it. SQLite
// names its -wal, -shm and -journal after the ledger's resolved path (links
// followed), so anything that must not touch them compares against those.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace effectfence {

// "dir/name" -> "dir"; "name" -> "."; "/name" -> "/".
std::string directory_of(const std::string& path);
// The absolute path with links followed: of the file itself when it exists,
// else of its directory with the name appended. "" if neither resolves.
std::string resolved_path(const std::string& path);
// Returns true iff both exist and are one file (links followed).
bool same_file(const std::string& a, const std::string& b);
// The ledger at path and its companions, as SQLite names them, both as
// spelled and as resolved: main file, -wal, -shm, -journal.
std::vector<std::string> ledger_files(const std::string& path);

// The database whose -wal, -shm or -journal path names (as spelled, or
// with links followed), if that database exists; "" otherwise. Such a path
// is that database's log or lock: a ledger or a dump written there would
// take the place of another database's committed transactions.
std::string database_beside(const std::string& path);

// A log SQLite would throw away: when the ledger at path is missing or
// empty but a -wal beside it holds frames (transactions committed there and
// never copied into the ledger, whose file was since emptied, moved or
// deleted), a message naming the log and the way out; ok otherwise.
// Opening would start a new, empty ledger and delete the log, and with it
// outcomes that late duplicates must be replayed.
Status orphaned_log(const std::string& path);

// When a name SQLite keeps beside the ledger (its -wal, -shm or -journal,
// as spelled or resolved) is taken by something that is not a regular file
// (a directory, a fifo): what it is and what to do; ok otherwise. SQLite
// would only say it cannot open the database.
Status companion_not_a_file(const std::string& path);

// What is wrong with a ledger file of names > 1 names (hard links), and how
// to fix it. SQLite keeps a ledger's lock and log beside the name it is
// opened by: under two names, servers would not fence each other, and a
// reader under the other name would not see the log's transactions.
std::string hard_links_problem(const std::string& path, unsigned long long names);

// Returns true iff path (or, while it does not exist, its directory) is on
// a filesystem mounted read-only.
bool on_read_only_filesystem(const std::string& path);

// path as SQLite must be given it to open exactly that file. A name that
// starts with "file:" would otherwise be read as a URI, naming another file
// and taking parameters (nolock, immutable, psow) that change how the ledger
// is locked and written.
std::string sqlite_file_name(const std::string& path);

// Returns true iff path is a regular file that starts like one of SQLite's:
// a database ("SQLite format 3\0") or a write-ahead log (magic 0x377f0682/3).
bool is_sqlite_file(const std::string& path);
// Returns true iff path is an SQLite database whose header says WAL mode
// (bytes 18 and 19 are 2): even a read-only connection needs its -shm then.
bool is_wal_database(const std::string& path);

}  // namespace effectfence
