#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "effectfence/fence.h"

namespace effectfence {
namespace {

// Reads a number of seconds from the environment, in ms: at least 0.001,
// since a lifetime that rounds to 0 ms is over when it starts.
int64_t seconds_from_env(const char* name, int64_t default_ms) {
  const char* raw = std::getenv(name);
  if (!raw || !*raw) return default_ms;
  char* end = nullptr;
  const double secs = std::strtod(raw, &end);
  if (end == raw || *end != '\0' || !(secs >= 0.001) || secs > Settings::kMaxLifetimeMs / 1000.0) {
    std::fprintf(stderr, "effectfence: ignoring %s='%s': expected a number of seconds, at least 0.001\n", name,
                 raw);
    return default_ms;
  }
  return static_cast<int64_t>(secs * 1000.0);
}

}  // namespace

std::string Settings::default_ledger_path(const std::string& name) {
  const char* xdg = std::getenv("XDG_STATE_HOME");
  std::string dir;
  if (xdg && *xdg) {
    dir = std::string(xdg) + "/effectfence";
  } else {
    const char* home = std::getenv("HOME");
    dir = std::string(home && *home ? home : ".") + "/.local/state/effectfence";
  }
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
  return s;
}

int64_t Settings::now_ms() const {
  if (clock_ms) return clock_ms();
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

}  // namespace effectfence
