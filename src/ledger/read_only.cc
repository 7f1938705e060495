#include "ledger/read_only.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include <SQLiteCpp/SQLiteCpp.h>
#include <sqlite3.h>

#include "ledger/ledger_files.h"
#include "ledger/log_damage.h"
#include "ledger/migrations.h"

namespace effectfence {

bool ledger_file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

namespace {

// Auditing waits this long for a writer's checkpoint rather than failing.
constexpr int kReadBusyTimeoutMs = 10'000;

// A WAL database that no connection has open has no -shm file, and even a
// read-only connection must create one beside it.
bool cannot_share_wal_index(const std::string& path, int sqlite_code) {
  const int primary = sqlite_code & 0xff;
  if (primary != SQLITE_CANTOPEN && primary != SQLITE_READONLY) return false;
  struct stat st {};
  return is_wal_database(path) && ::stat((path + "-shm").c_str(), &st) != 0 &&
         ::access(directory_of(path).c_str(), W_OK) != 0;
}

// Commits still in the -wal, not yet copied into the database file.
bool log_holds_commits(const std::string& path) {
  struct stat st {};
  return ::stat((path + "-wal").c_str(), &st) == 0 && st.st_size > 0;
}

// path as one word of a shell command an operator can paste.
std::string shell_word(const std::string& path) {
  const bool plain = !path.empty() && std::all_of(path.begin(), path.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("/._-+:,=@", c) != nullptr;
  });
  if (plain) return path;
  std::string quoted = "'";
  for (const char c : path) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string wal_index_needed(const std::string& path) {
  const std::string copy = "mkdir -p /tmp/ledger-copy && cp " + shell_word(path) +
                           (log_holds_commits(path) ? " " + shell_word(path + "-wal") : "") + " /tmp/ledger-copy/";
  if (on_read_only_filesystem(path)) {
    return "cannot read " + path + " in place: it is on a read-only filesystem, and its -wal holds commits that " +
           "only a -shm file (which cannot be created there) lets SQLite read. Read a copy, with its -wal: " + copy;
  }
  return "cannot read " + path + " as this user: no process has it open, so SQLite must create " + path +
         "-shm to read it, and " + directory_of(path) +
         " is not writable. Run this as the ledger's owner, or while a server has it open, or read a copy "
         "(with its -wal, if there is one): " + copy;
}

// A file: URI naming the absolute path, for the query parameters only a URI
// takes. The empty authority (file://) keeps a path that starts with // a
// path.
std::string file_uri(const std::filesystem::path& absolute, const char* query) {
  static const char* kHex = "0123456789abcdef";
  std::string uri = "file://";
  for (const char c : absolute.string()) {
    const auto byte = static_cast<unsigned char>(c);
    if (std::isalnum(byte) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') {
      uri += c;
    } else {
      uri += '%';
      uri += kHex[byte >> 4];
      uri += kHex[byte & 0xF];
    }
  }
  return uri + "?" + query;
}

// What a ledger read in place looked like when it was opened: the file, and
// whether a -wal or -shm was beside it.
struct FileState {
  ino_t inode = 0;
  off_t size = 0;
  int64_t modified_ns = 0;
  bool log = false, index = false;
  bool operator==(const FileState& o) const {
    return inode == o.inode && size == o.size && modified_ns == o.modified_ns && log == o.log && index == o.index;
  }
};

FileState state_of(const std::string& path) {
  struct stat st {};
  FileState state;
  if (::stat(path.c_str(), &st) == 0) {
    state.inode = st.st_ino;
    state.size = st.st_size;
    state.modified_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  }
  state.log = ::stat((path + "-wal").c_str(), &st) == 0;
  state.index = ::stat((path + "-shm").c_str(), &st) == 0;
  return state;
}

std::vector<std::pair<std::string, FileState>> read_in_place;  // checked once the command is done

// A WAL ledger on read-only media (a mounted snapshot or backup) that no
// process has open and whose log is empty: SQLite may read the file as
// immutable, without the -shm it could not create there. A mount that is
// read-only here may be written through another one (a read-only bind
// mount of a live directory); check_reads_in_place() tells if it was.
std::unique_ptr<SQLite::Database> open_on_read_only_media(const std::string& path) {
  if (!on_read_only_filesystem(path) || log_holds_commits(path)) return nullptr;
  read_in_place.emplace_back(path, state_of(path));
  std::error_code failed;
  const std::filesystem::path absolute = std::filesystem::absolute(path, failed);
  if (failed) return nullptr;
  return std::make_unique<SQLite::Database>(file_uri(absolute, "immutable=1"), SQLite::OPEN_READONLY | SQLite::OPEN_URI,
                                            kReadBusyTimeoutMs);
}

// The checks every reader makes before trusting what a file says: those a
// server makes (ledger/migrations.h), and that it already is a ledger,
// which a reader will not make of it.
StatusOr<std::unique_ptr<SQLite::Database>> checked_ledger(std::unique_ptr<SQLite::Database> db,
                                                           const std::string& path) {
  const int app_id = db->execAndGet("PRAGMA application_id").getInt();
  const int version = db->execAndGet("PRAGMA user_version").getInt();
  if (const Status damaged = misidentified_ledger(*db, path); !damaged.ok()) {
    return Status::Error(path + " " + damaged.message());
  }
  if (app_id != kApplicationId) {
    return Status::Error(path + " is not an effectfence ledger (application_id " + std::to_string(app_id) + ")");
  }
  if (const Status wrong = schema_version_problem(*db); !wrong.ok()) {
    return Status::Error(path + " " + wrong.message());
  }
  if (version <= 0) {
    return Status::Error(path + " is an effectfence ledger with no schema yet; serve or wrap initialises it");
  }
  return db;
}

}  // namespace

StatusOr<std::unique_ptr<SQLite::Database>> open_ledger_read_only(const std::string& path) {
  // Before SQLite, which would delete such a log even on a read-only open.
  if (const Status log = orphaned_log(path); !log.ok()) return Status::Error(path + ": " + log.message());
  for (const Status& log : {damaged_log(path), foreign_log(path), companion_not_a_file(path)}) {
    if (log.ok()) continue;
    return Status::Error(path + ": " + log.message());
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::NotFound("no ledger at " + path);
  if (!S_ISREG(st.st_mode)) return Status::Error(path + " is not a ledger file");
  // Read under another name than its servers', the ledger would be read
  // without its log: an audit missing the latest outcomes, and exit 0.
  if (st.st_nlink > 1) return Status::Error(path + " " + hard_links_problem(path, st.st_nlink));
  try {
    try {
      return checked_ledger(
          std::make_unique<SQLite::Database>(sqlite_file_name(path), SQLite::OPEN_READONLY, kReadBusyTimeoutMs),
          path);
    } catch (const SQLite::Exception& e) {
      if (!cannot_share_wal_index(path, e.getExtendedErrorCode())) throw;
      if (auto db = open_on_read_only_media(path)) return checked_ledger(std::move(db), path);
      return Status::Error(wal_index_needed(path));
    }
  } catch (const SQLite::Exception& e) {
    return Status::Error(path + ": " + e.what());
  }
}

std::optional<std::string> ledger_changed_while_read_in_place() {
  for (const auto& [path, opened] : read_in_place) {
    if (!(state_of(path) == opened)) return path;
  }
  return std::nullopt;
}

}  // namespace effectfence
