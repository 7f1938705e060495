#include "mcp/stop_signals.h"

#include <poll.h>

#include <csignal>

#include <catch2/catch.hpp>

using namespace effectfence::mcp;

TEST_CASE("stop signals: the first is named, every one is counted, the fd turns readable", "[stop_signals]") {
  StopSignals stop;
  CHECK(stop.received() == 0);
  CHECK(stop.count() == 0);
  pollfd p = {stop.fd(), POLLIN, 0};
  CHECK(::poll(&p, 1, 0) == 0);
  std::raise(SIGTERM);
  std::raise(SIGINT);
  std::raise(SIGHUP);
  CHECK(stop.received() == SIGTERM);
  CHECK(stop.count() == 3);  // wrap's "another stop signal stops them now" counts on each one
  CHECK(::poll(&p, 1, 0) == 1);
}
