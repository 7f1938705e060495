// Freezes a PostgreSQL server the way a hung host does: SIGSTOP to the
// postmaster and to every process it started. Connections stay open and the
// kernel still takes bytes into their sockets, but nothing answers.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace effectfence::testing {

class FrozenServer {
 public:
  // The longest a server stays frozen, even if this process hangs or dies:
  // a watchdog process thaws it then (or as soon as this process is gone).
  static constexpr std::chrono::seconds kMaxFreeze{60};

  // Freezes the server that url connects to (found through a backend's parent).
  explicit FrozenServer(const std::string& url);
  // Thaws it, whatever ended the scope (a failed REQUIRE included).
  ~FrozenServer();
  FrozenServer(const FrozenServer&) = delete;
  FrozenServer& operator=(const FrozenServer&) = delete;

  // True iff the postmaster and every process it started are still stopped.
  bool all_stopped() const;
  // How many processes were frozen (the postmaster and its children).
  size_t processes() const { return frozen_.size(); }
  // SIGCONT to every frozen process; idempotent.
  void thaw();

 private:
  void start_watchdog();
  void stop_watchdog();

  std::vector<pid_t> frozen_;
  int watchdog_pipe_ = -1;  // its other end closing (thaw, or our death) makes the watchdog thaw
};

}  // namespace effectfence::testing
