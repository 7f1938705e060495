// Environment variables set for one scope, then put back as they were.
#pragma once

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

namespace effectfence::testing {

using Env = std::map<std::string, std::optional<std::string>>;  // nullopt: unset

class ScopedEnv {
 public:
  explicit ScopedEnv(const Env& changes) {
    for (const auto& [name, value] : changes) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      set(name, value);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) set(name, value);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  static void set(const std::string& name, const std::optional<std::string>& value) {
    if (value) ::setenv(name.c_str(), value->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
  Env saved_;
};

}  // namespace effectfence::testing
