#include "ledger/job_threads.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

using namespace effectfence;

TEST_CASE("one job thread runs jobs in order, survives a throwing job, and finishes all before it goes",
          "[ledger][job_threads]") {
  std::vector<int> ran;  // touched only by the one job thread until it is joined
  {
    JobThreads one(1, "test-one");
    one.post([] { throw std::runtime_error("a caller's mistake"); });
    std::vector<std::function<void()>> batch;
    for (int i = 0; i < 500; ++i) batch.push_back([&ran, i] { ran.push_back(i); });
    one.post(std::move(batch));
    one.post([&ran] { ran.push_back(500); });
  }
  REQUIRE(ran.size() == 501);
  for (int i = 0; i <= 500; ++i) CHECK(ran[i] == i);
}

TEST_CASE("several job threads run jobs at the same time", "[ledger][job_threads]") {
  JobThreads four(4, "test-four");
  std::mutex mu;
  std::condition_variable cv;
  int waiting = 0;
  std::atomic<int> met{0};
  for (int i = 0; i < 4; ++i) {
    four.post([&] {
      // Each job waits until all four are running at once.
      std::unique_lock<std::mutex> lock(mu);
      ++waiting;
      cv.notify_all();
      if (cv.wait_for(lock, std::chrono::seconds(10), [&] { return waiting == 4; })) met += 1;
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  REQUIRE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return waiting == 4; }));
  lock.unlock();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (met < 4 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  CHECK(met == 4);
}

TEST_CASE("job threads refuse jobs once stopping, so their owner can answer them instead",
          "[ledger][job_threads]") {
  JobThreads one(1, "test-stop");
  std::atomic<int> ran{0};
  std::atomic<bool> posted_while_stopping{true};
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  REQUIRE(one.post([&] {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return release; });
    ran += 1;
  }));
  REQUIRE(one.post([&] {
    // Runs during stop(): posting more is refused, not queued and lost.
    posted_while_stopping = one.post([&] { ran += 100; });
    ran += 1;
  }));
  std::thread stopper([&] { one.stop(); });
  // stop() has begun once a post is refused; then let the first job finish.
  while (one.post([] {})) std::this_thread::yield();
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  stopper.join();
  CHECK(ran == 2);
  CHECK_FALSE(posted_while_stopping);
  CHECK_FALSE(one.post([&] { ran += 1000; }));
  one.stop();  // idempotent
  CHECK(ran == 2);
}
