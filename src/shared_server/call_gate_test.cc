#include "shared_server/call_gate.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

namespace effectfence::shared {
namespace {

using namespace std::chrono_literals;
using Entry = CallGate::Entry;

void wait_until(const std::function<bool()>& done) {
  for (int i = 0; i < 2000 && !done(); ++i) std::this_thread::sleep_for(5ms);
  REQUIRE(done());
}

TEST_CASE("a call gate runs max_running calls, lets max_waiting wait, and turns the next away busy", "[call_gate]") {
  CallGate gate(2, 1);
  REQUIRE(gate.enter() == Entry::run);
  REQUIRE(gate.enter() == Entry::run);
  std::atomic<bool> third_runs{false};
  std::thread third([&] {
    CallTurn turn(&gate);
    third_runs = turn.entry() == Entry::run;
  });
  wait_until([&] { return gate.waiting() == 1; });
  CHECK_FALSE(third_runs);
  CHECK(gate.enter() == Entry::busy);  // two run, one waits: nothing more
  CHECK(gate.running() == 2);

  gate.leave();  // a turn frees: the waiting call takes it
  third.join();
  CHECK(third_runs);
  CHECK(gate.running() == 1);  // the third left as its CallTurn ended
  CHECK(gate.waiting() == 0);
  gate.leave();
  CHECK(gate.running() == 0);
}

TEST_CASE("every waiting call gets a turn as turns free", "[call_gate]") {
  CallGate gate(1, 2);
  REQUIRE(gate.enter() == Entry::run);
  std::atomic<int> order{0};
  std::atomic<int> first_at{0};
  std::atomic<int> second_at{0};
  std::thread first([&] {
    CallTurn turn(&gate);
    first_at = ++order;
  });
  wait_until([&] { return gate.waiting() == 1; });
  std::thread second([&] {
    CallTurn turn(&gate);
    second_at = ++order;
  });
  wait_until([&] { return gate.waiting() == 2; });
  gate.leave();
  first.join();
  second.join();
  CHECK(first_at > 0);
  CHECK(second_at > 0);
  CHECK(gate.running() == 0);
  CHECK(gate.waiting() == 0);
}

TEST_CASE("closing a call gate turns waiting and new calls away, and lets running ones finish", "[call_gate]") {
  CallGate gate(1, 4);
  REQUIRE(gate.enter() == Entry::run);
  std::atomic<int> waited{-1};
  std::thread waiter([&] { waited = static_cast<int>(gate.enter()); });
  wait_until([&] { return gate.waiting() == 1; });
  gate.close();
  waiter.join();
  CHECK(waited == static_cast<int>(Entry::closed));
  CHECK(gate.enter() == Entry::closed);
  CHECK(gate.running() == 1);
  gate.leave();
  CHECK(gate.running() == 0);
}

}  // namespace
}  // namespace effectfence::shared
