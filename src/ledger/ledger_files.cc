#include "ledger/ledger_files.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cstdio>
#include <cstdlib>

namespace effectfence {
namespace {

// The first n bytes of a regular file (fewer if it is shorter; none if it
// cannot be read or is not a regular file).
std::string file_head(const std::string& path, size_t n) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return "";
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return "";
  std::string head(n, '\0');
  head.resize(std::fread(head.data(), 1, n, f));
  std::fclose(f);
  return head;
}

constexpr char kDatabaseHeader[] = "SQLite format 3";  // 16 bytes with its NUL

std::string real_path(const std::string& path) {
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (!resolved) return "";
  std::string text(resolved);
  std::free(resolved);
  return text;
}

}  // namespace

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string resolved_path(const std::string& path) {
  if (path.empty()) return "";
  if (std::string file = real_path(path); !file.empty()) return file;
  const auto slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::string directory = real_path(directory_of(path));
  if (directory.empty() || name.empty()) return "";
  return (directory == "/" ? "" : directory) + "/" + name;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

std::vector<std::string> ledger_files(const std::string& path) {
  std::vector<std::string> files;
  const std::string resolved = resolved_path(path);
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    files.push_back(path + suffix);
    if (!resolved.empty() && resolved != path) files.push_back(resolved + suffix);
  }
  return files;
}

std::string database_beside(const std::string& path) {
  for (const std::string& name : {path, resolved_path(path)}) {
    for (const std::string suffix : {"-wal", "-shm", "-journal"}) {
      if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
        continue;
      }
      const std::string database = name.substr(0, name.size() - suffix.size());
      struct stat st {};
      if (::stat(database.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return database;
    }
  }
  return "";
}

Status orphaned_log(const std::string& path) {
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && (!S_ISREG(st.st_mode) || st.st_size > 0)) return Status::Ok();
  constexpr off_t kWalHeaderBytes = 32;  // a log with no frame holds no transaction
  for (const std::string& name : {path, resolved_path(path)}) {
    if (name.empty()) continue;
    const std::string log = name + "-wal";
    struct stat wal {};
    if (::stat(log.c_str(), &wal) != 0 || !S_ISREG(wal.st_mode) || wal.st_size <= kWalHeaderBytes) continue;
    return Status::Error(
        std::string("the ledger ") + (exists ? "is empty" : "does not exist") + ", but its log " + log + " holds " +
        std::to_string(wal.st_size) +
        " bytes of transactions that never reached the ledger file (a server stopped hard, and the ledger "
        "was then emptied, moved or deleted). Opening it would start a new ledger and delete that log, and "
        "recorded outcomes with it. Put the ledger file that goes with this log back in place (a moved one, "
        "or a backup with its -wal); if you are sure the log is stale, move " + log + " and " + name +
        "-shm away");
  }
  return Status::Ok();
}

bool on_read_only_filesystem(const std::string& path) {
  struct statvfs fs {};
  const bool known = ::statvfs(path.c_str(), &fs) == 0 || ::statvfs(directory_of(path).c_str(), &fs) == 0;
  return known && (fs.f_flag & ST_RDONLY);
}

std::string sqlite_file_name(const std::string& path) {
  return path.rfind("file:", 0) == 0 ? "./" + path : path;
}

bool is_sqlite_file(const std::string& path) {
  const std::string head = file_head(path, sizeof kDatabaseHeader);
  if (head == std::string(kDatabaseHeader, sizeof kDatabaseHeader)) return true;  // a database
  return head.size() >= 4 && head.compare(0, 3, "\x37\x7f\x06") == 0 &&
         (static_cast<unsigned char>(head[3]) == 0x82 || static_cast<unsigned char>(head[3]) == 0x83);
}

bool is_wal_database(const std::string& path) {
  const std::string head = file_head(path, 20);
  const std::string database(kDatabaseHeader, sizeof kDatabaseHeader);
  return head.size() == 20 && head.compare(0, database.size(), database) == 0 && head[18] == 2 && head[19] == 2;
}

std::string hard_links_problem(const std::string& path, unsigned long long names) {
  return "has " + std::to_string(names) +
         " names (hard links). SQLite keeps a ledger's lock and log beside the name it is opened by, so servers "
         "opening it under different names would not fence each other, and a reader under another name would not "
         "see what is still in the log. Find the others with find \"$(stat -c %m " + path + ")\" -xdev -samefile " +
         path + ", remove them, and give every server one name. A hard link is not a backup: it is the same file "
         "(make copies with sqlite3 " + path + " \".backup copy.sqlite\")";
}

Status companion_not_a_file(const std::string& path) {
  const std::vector<std::string> files = ledger_files(path);
  const std::string resolved = resolved_path(path);
  for (size_t i = 1; i < files.size(); ++i) {  // files[0] is the ledger itself
    if (files[i] == path || files[i] == resolved) continue;
    struct stat st {};
    if (::stat(files[i].c_str(), &st) != 0 || S_ISREG(st.st_mode)) continue;
    const char* what = S_ISDIR(st.st_mode) ? "a directory" : "not a regular file";
    return Status::Error("has " + files[i] + " beside it, which is " + what +
                         ": SQLite keeps the ledger's log, lock or journal under that name, so it cannot open the "
                         "ledger. Move " + files[i] + " away (it is no part of the ledger)");
  }
  return Status::Ok();
}

}  // namespace effectfence
