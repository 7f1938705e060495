#include "mcp/worker_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include <catch2/catch.hpp>

using effectfence::mcp::WorkerPool;

TEST_CASE("WorkerPool runs at least 64 blocking jobs at once", "[worker_pool]") {
  constexpr int kJobs = 64;
  WorkerPool pool(kJobs, 16);
  std::mutex mutex;
  std::condition_variable changed;
  int started = 0;
  std::atomic<int> saw_everyone{0};
  for (int i = 0; i < kJobs; ++i) {
    pool.submit([&] {
      std::unique_lock<std::mutex> lock(mutex);
      ++started;
      changed.notify_all();
      // Each job waits for all the others: with fewer threads this times out.
      if (changed.wait_for(lock, std::chrono::seconds(10), [&] { return started == kJobs; })) ++saw_everyone;
    });
  }
  pool.wait_idle();
  CHECK(saw_everyone == kJobs);
  CHECK(pool.thread_count() == size_t(kJobs));
}

TEST_CASE("WorkerPool grows only as far as the work needs", "[worker_pool]") {
  WorkerPool pool(64, 16);
  std::atomic<int> ran{0};
  for (int i = 0; i < 20; ++i) {
    pool.submit([&] { ++ran; });
    pool.wait_idle();
  }
  CHECK(ran == 20);
  CHECK(pool.thread_count() == 1);
}

TEST_CASE("WorkerPool's destructor runs queued jobs", "[worker_pool]") {
  std::atomic<int> ran{0};
  {
    WorkerPool pool(2, 100);
    for (int i = 0; i < 50; ++i) pool.submit([&] { ++ran; });
  }
  CHECK(ran == 50);
}

TEST_CASE("WorkerPool's try_submit refuses, without running the job, once every waiting place is taken",
          "[worker_pool]") {
  std::mutex mutex;
  std::condition_variable changed;
  bool open = false;
  int started = 0;
  std::atomic<int> ran{0};
  auto held = [&] {
    std::unique_lock<std::mutex> lock(mutex);
    ++started;
    changed.notify_all();
    changed.wait(lock, [&] { return open; });
    ++ran;
  };
  WorkerPool pool(1, 2);
  REQUIRE(pool.try_submit(held));
  {
    std::unique_lock<std::mutex> lock(mutex);
    REQUIRE(changed.wait_for(lock, std::chrono::seconds(10), [&] { return started == 1; }));
  }
  CHECK(pool.try_submit(held));  // two waiting places behind the running job
  CHECK(pool.try_submit(held));
  CHECK_FALSE(pool.try_submit([&] { ran += 100; }));
  {
    std::lock_guard<std::mutex> lock(mutex);
    open = true;
  }
  changed.notify_all();
  pool.wait_idle();
  CHECK(ran == 3);
}
