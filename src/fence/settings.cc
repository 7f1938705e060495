#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <pwd.h>
#include <unistd.h>

#include "effectfence/fence.h"

namespace effectfence {
namespace {

// Reads a number of seconds from the environment, in ms: at least 0.001,
// since a lifetime that rounds to 0 ms is over when it starts (and a sweep
// interval of 0 ms never pauses), and at most ten years
// (Settings::kMaxLifetimeMs), so that now + it cannot overflow.
int64_t seconds_from_env(const char* name, int64_t default_ms) {
  const char* raw = std::getenv(name);
  if (!raw || !*raw) return default_ms;
  char* end = nullptr;
  const double secs = std::strtod(raw, &end);
  if (end == raw || *end != '\0' || !(secs >= 0.001) || secs > Settings::kMaxLifetimeMs / 1000.0) {
    std::fprintf(stderr,
                 "effectfence: ignoring %s='%s': expected a number of seconds from 0.001 to %lld (ten years)\n",
                 name, raw, static_cast<long long>(Settings::kMaxLifetimeMs / 1000));
    return default_ms;
  }
  return static_cast<int64_t>(secs * 1000.0);
}

// $HOME if it is an absolute path, else the user database's home directory:
// a relative or missing HOME must not put the ledger wherever the process
// happens to start. "." only if neither exists.
std::string home_directory() {
  const char* home = std::getenv("HOME");
  if (home && home[0] == '/') return home;
  if (const passwd* user = ::getpwuid(::geteuid()); user && user->pw_dir && user->pw_dir[0] == '/') {
    return user->pw_dir;
  }
  return ".";
}

}  // namespace

std::string Settings::default_ledger_path(const std::string& name) {
  // The XDG base directory spec: a relative XDG_STATE_HOME is invalid and ignored.
  const char* xdg = std::getenv("XDG_STATE_HOME");
  const std::string dir =
      xdg && xdg[0] == '/' ? std::string(xdg) + "/effectfence" : home_directory() + "/.local/state/effectfence";
  return dir + "/" + name + ".sqlite";
}

Settings Settings::from_environment(const std::string& default_name) {
  Settings s;
  const char* ledger = std::getenv("EFFECTFENCE_LEDGER");
  if (ledger && *ledger) {
    s.ledger_path = ledger;
  } else {
    s.ledger_path = default_ledger_path(default_name);
    s.create_parent_directories = true;
  }
  s.lease_ttl_ms = seconds_from_env("EFFECTFENCE_LEASE_SECS", s.lease_ttl_ms);
  s.result_ttl_ms = seconds_from_env("EFFECTFENCE_RESULT_TTL_SECS", s.result_ttl_ms);
  s.sweep_interval_ms = seconds_from_env("EFFECTFENCE_SWEEP_INTERVAL_SECS", s.sweep_interval_ms);
  return s;
}

int64_t Settings::now_ms() const {
  if (clock_ms) return clock_ms();
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

}  // namespace effectfence
