#include "ledger/ledger_files.h"

#include <sys/stat.h>

#include <cstdlib>

namespace effectfence {
namespace {

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

}  // namespace effectfence
