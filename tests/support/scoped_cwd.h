// Runs a test in another working directory, and goes back at scope exit.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace effectfence::testing {

class ScopedCwd {
 public:
  explicit ScopedCwd(const std::string& dir) : previous_(std::filesystem::current_path()) {
    if (::chdir(dir.c_str()) != 0) throw std::runtime_error("cannot chdir to " + dir);
  }
  ~ScopedCwd() { (void)::chdir(previous_.c_str()); }
  ScopedCwd(const ScopedCwd&) = delete;
  ScopedCwd& operator=(const ScopedCwd&) = delete;

 private:
  std::filesystem::path previous_;
};

}  // namespace effectfence::testing
