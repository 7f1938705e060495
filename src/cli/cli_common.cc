#include "cli/cli_common.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <vector>

#include <SQLiteCpp/SQLiteCpp.h>
#include <sqlite3.h>

#include "ledger/ledger_files.h"
#include "ledger/log_damage.h"
#include "effectfence/fence.h"
#include "ledger/migrations.h"

namespace effectfence::cli {
namespace {

// Auditing waits this long for a writer's checkpoint rather than failing.
constexpr int kReadBusyTimeoutMs = 10'000;

const OptionSpec* find_spec(const std::vector<OptionSpec>& specs, const std::string& name) {
  for (const auto& spec : specs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// "90s", "30m", "1h", "7d" -> ms.
std::optional<int64_t> parse_relative_age(const std::string& text) {
  if (text.size() < 2) return std::nullopt;
  const std::string digits = text.substr(0, text.size() - 1);
  if (!all_digits(digits) || digits.size() > 9) return std::nullopt;
  int64_t unit_ms = 0;
  switch (text.back()) {
    case 's': unit_ms = 1'000; break;
    case 'm': unit_ms = 60'000; break;
    case 'h': unit_ms = 3'600'000; break;
    case 'd': unit_ms = 86'400'000; break;
    default: return std::nullopt;
  }
  return std::stoll(digits) * unit_ms;
}

// Reads exactly n digits at text[*pos] into *out.
bool read_digits(const std::string& text, size_t* pos, size_t n, int* out) {
  if (*pos + n > text.size()) return false;
  const std::string part = text.substr(*pos, n);
  if (!all_digits(part)) return false;
  *out = std::stoi(part);
  *pos += n;
  return true;
}

bool expect_char(const std::string& text, size_t* pos, char c) {
  if (*pos >= text.size() || text[*pos] != c) return false;
  ++*pos;
  return true;
}

// YYYY-MM-DD[THH:MM[:SS[.fff]](Z|+00:00)] -> ms since the epoch.
std::optional<int64_t> parse_iso_utc(const std::string& text) {
  std::tm tm{};
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0, millis = 0;
  size_t pos = 0;
  if (!read_digits(text, &pos, 4, &year) || !expect_char(text, &pos, '-') ||
      !read_digits(text, &pos, 2, &month) || !expect_char(text, &pos, '-') ||
      !read_digits(text, &pos, 2, &day)) {
    return std::nullopt;
  }
  if (pos < text.size()) {
    if (text[pos] != 'T' && text[pos] != 't' && text[pos] != ' ') return std::nullopt;
    ++pos;
    if (!read_digits(text, &pos, 2, &hour) || !expect_char(text, &pos, ':') ||
        !read_digits(text, &pos, 2, &minute)) {
      return std::nullopt;
    }
    if (pos < text.size() && text[pos] == ':') {
      ++pos;
      if (!read_digits(text, &pos, 2, &second)) return std::nullopt;
      if (pos < text.size() && text[pos] == '.') {
        ++pos;
        int scale = 100;
        const size_t start = pos;
        while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
          millis += (text[pos] - '0') * scale;
          scale /= 10;
          ++pos;
        }
        if (pos == start) return std::nullopt;
      }
    }
    // Only UTC: a local offset would make "since" mean different things on
    // different machines.
    const std::string zone = text.substr(pos);
    if (zone != "Z" && zone != "z" && zone != "+00:00") return std::nullopt;
  }
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) {
    return std::nullopt;
  }
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  const time_t seconds = timegm(&tm);
  if (tm.tm_mday != day) return std::nullopt;  // timegm normalised e.g. Feb 30
  return static_cast<int64_t>(seconds) * 1000 + millis;
}

}  // namespace

std::optional<std::string> ParsedArgs::value(const std::string& name) const {
  auto found = values.find(name);
  if (found == values.end()) return std::nullopt;
  return found->second;
}

std::vector<std::string> ParsedArgs::all(const std::string& name) const {
  auto found = repeated.find(name);
  return found == repeated.end() ? std::vector<std::string>{} : found->second;
}

std::optional<ParsedArgs> parse_args(const Args& args, const std::vector<OptionSpec>& specs,
                                     std::string* error) {
  ParsedArgs parsed;
  bool options_ended = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (options_ended || arg.size() < 2 || arg[0] != '-') {
      parsed.positionals.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_ended = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      parsed.switches.insert("help");
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      *error = "unknown option '" + arg + "'";
      return std::nullopt;
    }
    const size_t equals = arg.find('=');
    const std::string name = arg.substr(2, equals == std::string::npos ? std::string::npos : equals - 2);
    const OptionSpec* spec = find_spec(specs, name);
    if (!spec) {
      *error = "unknown option '--" + name + "'";
      return std::nullopt;
    }
    if (!spec->takes_value) {
      if (equals != std::string::npos) {
        *error = "--" + name + " takes no value";
        return std::nullopt;
      }
      parsed.switches.insert(name);
      continue;
    }
    std::string value;
    if (equals != std::string::npos) {
      value = arg.substr(equals + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      *error = "--" + name + " needs a value";
      return std::nullopt;
    }
    if (value.empty()) {
      *error = "--" + name + " needs a non-empty value";
      return std::nullopt;
    }
    if (spec->repeatable) parsed.repeated[name].push_back(value);
    // Which of two ledgers (or reasons) was meant is not ours to guess.
    if (!parsed.values.emplace(name, value).second && !spec->repeatable) {
      *error = "--" + name + " is given twice";
      return std::nullopt;
    }
  }
  return parsed;
}

// The other ledgers next to path (but except), as "; other ledgers in that
// directory: ...", or "": `wrap` names its ledger after the command it
// wraps, so an operator looking in the default place may be looking for one
// of these.
std::string ledgers_beside(const std::string& path, const std::string& except = "");

std::string resolve_ledger_path(const ParsedArgs& parsed, const std::string& command) {
  if (auto db = parsed.value("db")) return *db;
  const char* env = std::getenv("EFFECTFENCE_LEDGER");
  if (env && *env) return env;
  const std::string path = Settings::default_ledger_path("server");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (const std::string others = ledgers_beside(path, path); !others.empty()) {
      std::fprintf(stderr, "effectfence %s: note: reading the default ledger %s%s\n", command.c_str(), path.c_str(),
                   others.c_str());
    }
  }
  return path;
}

void print_error(const std::string& command, const std::string& step, const std::string& message) {
  std::fprintf(stderr, "effectfence %s: %s: %s\n", command.c_str(), step.c_str(), message.c_str());
}

int run_guarded(const std::string& command, const std::function<int()>& body) {
  try {
    return body();
  } catch (const SQLite::Exception& e) {
    print_error(command, "reading the ledger", e.what());
  } catch (const std::exception& e) {
    print_error(command, "unexpected error", e.what());
  } catch (...) {
    print_error(command, "unexpected error", "unknown exception");
  }
  return kExitFailure;
}

bool ledger_file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

namespace {

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

// The checks every reader makes before trusting what a file says.
std::unique_ptr<SQLite::Database> checked_ledger(std::unique_ptr<SQLite::Database> db, const std::string& path,
                                                 std::string* error) {
  const int app_id = db->execAndGet("PRAGMA application_id").getInt();
  const int version = db->execAndGet("PRAGMA user_version").getInt();
  if (const std::string damaged = misidentified_ledger(*db, path); !damaged.empty()) {
    *error = path + " " + damaged;
    return nullptr;
  }
  if (app_id != kApplicationId) {
    *error = path + " is not an effectfence ledger (application_id " + std::to_string(app_id) + ")";
    return nullptr;
  }
  if (version > latest_schema_version()) {
    *error = path + " has schema version " + std::to_string(version) + " but this effectfence knows " +
             std::to_string(latest_schema_version()) + "; upgrade effectfence";
    return nullptr;
  }
  // Read at version 0, a ledger's tables would be held to no protections
  // at all (verify builds the triggers it expects from the version).
  if (version <= 0) {
    *error = db->execAndGet("SELECT count(*) FROM sqlite_master").getInt() > 0
                 ? path + " holds a ledger's tables but its schema version was set to " + std::to_string(version) +
                       " (PRAGMA user_version); set it back to the version its tables are at (see migrations/) "
                       "or restore it from a backup"
                 : path + " is an effectfence ledger with no schema yet; serve or wrap initialises it";
    return nullptr;
  }
  return db;
}

}  // namespace

std::string ledgers_beside(const std::string& path, const std::string& except) {
  std::error_code ignored;
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(directory_of(path), ignored)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().string() == except) continue;
    if (entry.is_regular_file(ignored) && name.size() > 7 && name.compare(name.size() - 7, 7, ".sqlite") == 0) {
      found.push_back(entry.path().string());
    }
  }
  if (found.empty()) return "";
  std::sort(found.begin(), found.end());
  std::string list;
  for (size_t i = 0; i < found.size() && i < 10; ++i) list += (i ? ", " : "") + found[i];
  if (found.size() > 10) list += ", and " + std::to_string(found.size() - 10) + " more";
  // Only the default place is where wrap's own ledgers are: elsewhere the
  // path was given, and a file beside it is a likelier typo than a wrap ledger.
  if (path == Settings::default_ledger_path("server")) {
    return "; other ledgers in that directory: " + list + " (wrap keeps one per wrapped command; pass one with --db)";
  }
  return "; other .sqlite files in that directory: " + list;
}

std::unique_ptr<SQLite::Database> open_ledger_read_only(const std::string& path, std::string* error) {
  // Before SQLite, which would delete such a log even on a read-only open.
  if (const std::string log = orphaned_log(path); !log.empty()) {
    *error = path + ": " + log;
    return nullptr;
  }
  for (const std::string& log : {damaged_log(path), foreign_log(path), companion_not_a_file(path)}) {
    if (log.empty()) continue;
    *error = path + ": " + log;
    return nullptr;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    *error = "no ledger at " + path + ledgers_beside(path);
    return nullptr;
  }
  if (!S_ISREG(st.st_mode)) {
    *error = path + " is not a ledger file";
    return nullptr;
  }
  // Read under another name than its servers', the ledger would be read
  // without its log: an audit missing the latest outcomes, and exit 0.
  if (st.st_nlink > 1) {
    *error = path + " " + hard_links_problem(path, st.st_nlink);
    return nullptr;
  }
  try {
    try {
      return checked_ledger(
          std::make_unique<SQLite::Database>(sqlite_file_name(path), SQLite::OPEN_READONLY, kReadBusyTimeoutMs),
          path, error);
    } catch (const SQLite::Exception& e) {
      if (!cannot_share_wal_index(path, e.getExtendedErrorCode())) throw;
      if (auto db = open_on_read_only_media(path)) return checked_ledger(std::move(db), path, error);
      *error = wal_index_needed(path);
      return nullptr;
    }
  } catch (const SQLite::Exception& e) {
    *error = path + ": " + e.what();
    return nullptr;
  }
}

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

void print_json_line(const Json& json) {
  std::printf("%s\n", json.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
}

std::string format_utc(int64_t ms) {
  int64_t seconds = ms / 1000;
  int64_t millis = ms % 1000;
  if (millis < 0) {
    millis += 1000;
    seconds -= 1;
  }
  const time_t t = static_cast<time_t>(seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[96];  // room for any int the compiler can imagine in each field
  std::snprintf(buffer, sizeof buffer, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(millis));
  return buffer;
}

std::optional<int64_t> parse_since(const std::string& text, int64_t now, std::string* error) {
  if (auto age = parse_relative_age(text)) return now - *age;
  if (auto at = parse_iso_utc(text)) return *at;
  *error = "--since '" + text +
           "' is neither an ISO-8601 UTC time (2026-11-29T10:00:00Z) nor an age (90s, 30m, 1h, 7d)";
  return std::nullopt;
}

std::string csv_field(std::string_view value) {
  if (value.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(value);
  std::string quoted = "\"";
  for (char c : value) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  quoted += '"';
  return quoted;
}


namespace {
bool closed_at_start[3] = {false, false, false};  // stdin, stdout, stderr
}  // namespace

void hold_closed_standard_streams() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    closed_at_start[fd] = true;
    // open() returns the lowest free number: this one, the lower ones being
    // open. Stdout gets /dev/full, so a report printed to it fails instead
    // of vanishing with exit 0. Without these devices (a bare container)
    // the root directory holds the number, and writes to it fail too (so
    // stdout never falls back to /dev/null).
    int held = fd == 1 ? ::open("/dev/full", O_WRONLY) : ::open("/dev/null", O_RDWR);
    if (held < 0) held = ::open("/", O_RDONLY | O_DIRECTORY);
    if (held >= 0 && held != fd) ::close(held);
  }
}

bool stdout_closed_at_start() { return closed_at_start[1]; }

namespace {

// The first ledger read in place that changed since it was opened, if any.
const std::string* changed_read_in_place() {
  for (const auto& [path, opened] : read_in_place) {
    if (!(state_of(path) == opened)) return &path;
  }
  return nullptr;
}

}  // namespace

bool ledger_changed_while_read_in_place() { return changed_read_in_place() != nullptr; }

int check_reads_in_place(const char* command, int exit_code) {
  if (const std::string* path = changed_read_in_place()) {
    std::fprintf(stderr,
                 "effectfence %s: reading the ledger: %s changed while it was read in place from a read-only mount "
                 "(a process writes it through another mount), so what was printed may not be one consistent "
                 "state. Read it where the servers run, or read a copy made while none has it open\n",
                 command, path->c_str());
    return exit_code == 0 ? kExitFailure : exit_code;
  }
  return exit_code;
}

std::optional<int> refuse_closed_protocol_streams(const char* command) {
  const bool in = closed_at_start[0], out = closed_at_start[1];
  if (!in && !out) return std::nullopt;
  std::fprintf(stderr,
               "effectfence %s: %s closed: it speaks MCP, reading requests on stdin and answering on stdout. "
               "Start it from an MCP client, which connects both\n",
               command, in ? (out ? "stdin and stdout are" : "stdin is") : "stdout is");
  return kExitFailure;
}

}  // namespace effectfence::cli
