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

TEST_CASE("WorkerPool with no thread to run a job refuses it from try_submit and runs it inline from submit",
          "[worker_pool]") {
  const WorkerPool::ThreadStarter none = [](std::function<void()>) -> std::thread {
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
  };
  int ran = 0;
  {
    WorkerPool pool(4, 4, none);
    CHECK_FALSE(pool.try_submit([&] { ++ran; }));  // refused, never left queued for nobody
    CHECK(ran == 0);
    const std::thread::id caller = std::this_thread::get_id();
    std::thread::id ran_on;
    pool.submit([&] {
      ++ran;
      ran_on = std::this_thread::get_id();
    });
    CHECK(ran == 1);
    CHECK(ran_on == caller);
    pool.wait_idle();  // returns: nothing is queued
    CHECK(pool.thread_count() == 0);
  }
  CHECK(ran == 1);
}

TEST_CASE("WorkerPool that cannot grow queues jobs for the threads it has", "[worker_pool]") {
  int started = 0;
  const WorkerPool::ThreadStarter one = [&](std::function<void()> body) -> std::thread {
    if (started++ > 0) throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
    return std::thread(std::move(body));
  };
  std::atomic<int> ran{0};
  WorkerPool pool(4, 8, one);
  for (int i = 0; i < 5; ++i) CHECK(pool.try_submit([&] { ++ran; }));
  pool.wait_idle();
  CHECK(ran == 5);
  CHECK(pool.thread_count() == 1);
}
