// Races between threads and between processes, on a real ledger (SQLite
// files, or PostgreSQL when EFFECTFENCE_TEST_LEDGER names one). Every
// collision is forced (threads released together from a barrier, processes
// hammering one intent), and each property is checked over many rounds.
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "effectfence/refusal_text.h"
#include "fence/fence_internal.h"
#include "support/fence_helpers.h"
#include "support/temp_dir.h"

using namespace effectfence;
using namespace effectfence::testing;

namespace {

// Releases every waiting thread at once.
class StartLine {
 public:
  explicit StartLine(int parties) : waiting_(parties) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mu_);
    if (--waiting_ == 0) {
      cv_.notify_all();
    } else {
      cv_.wait(lock, [this] { return waiting_ == 0; });
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_;
};

template <typename Fn>
std::vector<PrepareOutcome> race(int threads, Fn attempt) {
  std::vector<PrepareOutcome> outcomes(threads, Refusal{Reason::ledger_error, Cause::none, {}});
  StartLine start(threads);
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      start.arrive_and_wait();
      outcomes[i] = attempt(i);
    });
  }
  for (auto& t : pool) t.join();
  return outcomes;
}

int count_admitted(const std::vector<PrepareOutcome>& outcomes) {
  int n = 0;
  for (const auto& o : outcomes) n += std::holds_alternative<Admitted>(o) ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("16 threads racing one intent: exactly one admitted, then every duplicate replays", "[race]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  for (int round = 0; round < 20; ++round) {
    const std::string intent = "race-" + std::to_string(round);
    auto outcomes = race(16, [&](int) { return fence->prepare(charge(intent)); });
    REQUIRE(count_admitted(outcomes) == 1);
    Ticket ticket;
    for (const auto& o : outcomes) {
      if (auto* a = std::get_if<Admitted>(&o)) {
        ticket = a->ticket;
      } else {
        CHECK(std::get<Refusal>(o).reason == Reason::in_flight);
      }
    }
    auto cert = std::get<Certificate>(fence->commit(ticket, {{"round", round}}));
    auto replays = race(16, [&](int) { return fence->prepare(charge(intent)); });
    for (const auto& o : replays) {
      REQUIRE(std::holds_alternative<Replayed>(o));
      CHECK(std::get<Replayed>(o).cert.hash == cert.hash);
    }
  }
}

TEST_CASE("16 threads on two fences (two connections) racing one intent admit exactly one", "[race]") {
  TestLedger ledger;
  auto a = open_fence(ledger.settings());
  auto b = open_fence(ledger.settings());
  for (int round = 0; round < 20; ++round) {
    const std::string intent = "two-" + std::to_string(round);
    auto outcomes = race(16, [&](int i) { return (i % 2 ? a : b)->prepare(charge(intent)); });
    REQUIRE(count_admitted(outcomes) == 1);
  }
}

// Collects the outcomes of asynchronous calls, answered on other threads.
template <typename Outcome>
class Answers {
 public:
  std::function<void(Outcome)> slot(size_t i) {
    return [this, i](Outcome outcome) {
      std::lock_guard<std::mutex> lock(mu_);
      got_.emplace_back(i, std::move(outcome));
      cv_.notify_all();
    };
  }
  // Every answer, in the order of the slots; fails unless exactly n arrive.
  std::vector<Outcome> wait(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    REQUIRE(cv_.wait_for(lock, std::chrono::seconds(30), [&] { return got_.size() >= n; }));
    REQUIRE(got_.size() == n);
    std::vector<std::optional<Outcome>> ordered(n);
    for (auto& [i, outcome] : got_) {
      REQUIRE(i < n);
      REQUIRE_FALSE(ordered[i].has_value());  // answered once
      ordered[i] = outcome;
    }
    std::vector<Outcome> out;
    for (auto& o : ordered) out.push_back(*o);
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<size_t, Outcome>> got_;
};

TEST_CASE("asynchronous prepares on two fences racing one intent admit exactly one, then replay", "[race][async]") {
  TestLedger ledger;
  auto a = open_fence(ledger.settings());
  auto b = open_fence(ledger.settings());
  for (int round = 0; round < 10; ++round) {
    const std::string intent = "async-" + std::to_string(round);
    Answers<PrepareOutcome> prepared;
    std::thread other([&] {
      for (size_t i = 1; i < 32; i += 2) b->prepare_async(charge(intent), prepared.slot(i));
    });
    for (size_t i = 0; i < 32; i += 2) a->prepare_async(charge(intent), prepared.slot(i));
    other.join();
    const auto outcomes = prepared.wait(32);
    REQUIRE(count_admitted(outcomes) == 1);
    Ticket ticket;
    size_t holder = 0;
    for (size_t i = 0; i < outcomes.size(); ++i) {
      if (auto* admitted = std::get_if<Admitted>(&outcomes[i])) {
        ticket = admitted->ticket;
        holder = i;
      } else {
        CHECK(std::get<Refusal>(outcomes[i]).reason == Reason::in_flight);
      }
    }
    Answers<CommitOutcome> committed;
    (holder % 2 ? b : a)->commit_async(ticket, {{"round", round}}, committed.slot(0));
    const Certificate cert = std::get<Certificate>(committed.wait(1)[0]);
    // One at a time: a duplicate that arrives while the same process is
    // still deciding the intent is refused in_flight, not replayed.
    for (int i = 0; i < 4; ++i) {
      Answers<PrepareOutcome> replay;
      (i % 2 ? b : a)->prepare_async(charge(intent), replay.slot(0));
      const PrepareOutcome o = replay.wait(1)[0];
      REQUIRE(std::holds_alternative<Replayed>(o));
      CHECK(std::get<Replayed>(o).cert.hash == cert.hash);
    }
  }
}

TEST_CASE("a commit issued from a prepare's answer completes: answers may start more work", "[race][async]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  constexpr size_t kIntents = 100;
  Answers<CommitOutcome> committed;
  for (size_t i = 0; i < kIntents; ++i) {
    fence->prepare_async(charge("chain-" + std::to_string(i)), [&, i](PrepareOutcome outcome) {
      auto* admitted = std::get_if<Admitted>(&outcome);
      if (!admitted) return committed.slot(i)(Refusal{Reason::ledger_error, Cause::none, {{"outcome", outcome_name(outcome)}}});
      fence->commit_async(admitted->ticket, {{"n", i}}, committed.slot(i));
    });
  }
  const auto outcomes = committed.wait(kIntents);
  std::set<std::string> hashes;
  for (const auto& o : outcomes) {
    if (auto* refusal = std::get_if<Refusal>(&o)) FAIL("refused: " << explain(*refusal, Step::commit) << " " << refusal->detail.dump());
    hashes.insert(std::get<Certificate>(o).hash);
  }
  CHECK(hashes.size() == kIntents);
  auto stats = std::get<Stats>(fence->stats());
  CHECK(stats.process.admitted == kIntents);
  CHECK(stats.process.committed == kIntents);
}

TEST_CASE("a fence closed with asynchronous decisions pending still answers every one", "[race][async]") {
  TestLedger ledger;
  constexpr int kIntents = 64;
  std::atomic<int> admitted{0};
  std::atomic<int> answered{0};
  std::atomic<int> follow_ups_answered{0};
  {
    auto fence = open_fence(ledger.settings());
    Fence* f = fence.get();
    for (int i = 0; i < kIntents; ++i) {
      f->prepare_async(charge("closing-" + std::to_string(i)), [&, f, i](PrepareOutcome outcome) {
        if (std::holds_alternative<Admitted>(outcome)) admitted += 1;
        answered += 1;
        // More work asked for while the fence closes is answered too (decided,
        // or refused as closing), never dropped.
        f->prepare_async(charge("after-" + std::to_string(i)), [&](PrepareOutcome) { follow_ups_answered += 1; });
      });
    }
  }  // the fence closes with most of these still queued
  CHECK(answered == kIntents);
  CHECK(admitted == kIntents);
  CHECK(follow_ups_answered == kIntents);
}

TEST_CASE("a forced same-instant domain race admits exactly one, every time", "[race][read_set]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  auto other = open_fence(ledger.settings());
  for (int round = 0; round < 50; ++round) {
    const std::string domain = "cluster-" + std::to_string(round);
    auto outcomes = race(8, [&](int i) {
      PrepareRequest r = charge("action-" + std::to_string(round) + "-" + std::to_string(i));
      r.domain = domain;
      r.read_set = {{domain, 0}};  // everyone decided on the same state
      return (i % 2 ? fence : other)->prepare(r);
    });
    REQUIRE(count_admitted(outcomes) == 1);
    for (const auto& o : outcomes) {
      if (auto* r = std::get_if<Refusal>(&o)) {
        CHECK((r->reason == Reason::domain_race || r->reason == Reason::stale_read_set));
      }
    }
  }
}

TEST_CASE("32 threads on one domain never share a sequence number", "[race][domain]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  auto other = open_fence(ledger.settings());
  auto outcomes = race(32, [&](int i) {
    PrepareRequest r = charge("seq-" + std::to_string(i));
    r.domain = "shared";
    return (i % 2 ? fence : other)->prepare(r);
  });
  std::set<int64_t> seqs;
  for (const auto& o : outcomes) seqs.insert(admitted_ticket(o).seq);
  CHECK(seqs.size() == 32);
  CHECK(*seqs.begin() == 1);
  CHECK(*seqs.rbegin() == 32);
}

namespace {

// Runs in a forked child: many attempts at one intent; commits if admitted.
// Exit code: number of admissions (0 or 1), or 100+ on error.
[[noreturn]] void hammer(const std::string& path, int attempts) {
  auto opened = Fence::open(file_settings(path));
  if (!std::holds_alternative<std::unique_ptr<Fence>>(opened)) _exit(100);
  auto& fence = *std::get<std::unique_ptr<Fence>>(opened);
  int admitted = 0;
  for (int i = 0; i < attempts; ++i) {
    auto o = fence.prepare(charge("multi-process"));
    if (auto* a = std::get_if<Admitted>(&o)) {
      ++admitted;
      if (!std::holds_alternative<Certificate>(fence.commit(a->ticket, {{"by", getpid()}}))) _exit(101);
    } else if (auto* r = std::get_if<Refusal>(&o)) {
      if (r->reason != Reason::in_flight) _exit(102);
    }
  }
  opened = OpenError{};
  _exit(admitted);
}

}  // namespace

TEST_CASE("8 processes x 100 attempts on one intent: exactly one admission in total", "[race][process]") {
  TestLedger ledger;
  const std::string path = ledger.where();
  { open_fence(file_settings(path)); }  // create the schema once, then fork with no threads alive
  std::vector<pid_t> children;
  for (int i = 0; i < 8; ++i) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) hammer(path, 100);
    children.push_back(pid);
  }
  int admissions = 0;
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) < 100);
    admissions += WEXITSTATUS(status);
  }
  CHECK(admissions == 1);

  auto reopened = open_fence(file_settings(path));
  auto late = reopened->prepare(charge("multi-process"));
  REQUIRE(std::holds_alternative<Replayed>(late));
  CHECK(std::get<Replayed>(late).cert.verify());
  auto stats = std::get<Stats>(reopened->stats());
  CHECK(stats.ledger.admitted == 1);
  CHECK(stats.ledger.total_attempts() == 8 * 100 + 1);
}

TEST_CASE("a holder killed with SIGKILL fences its intent as unknown until cleared", "[process][dead_holder]") {
  TestLedger ledger;
  const std::string path = ledger.where();
  { open_fence(file_settings(path)); }
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(ready[0]);
    auto opened = Fence::open(file_settings(path));
    if (!std::holds_alternative<std::unique_ptr<Fence>>(opened)) _exit(100);
    auto o = std::get<std::unique_ptr<Fence>>(opened)->prepare(charge("doomed"));
    const char c = std::holds_alternative<Admitted>(o) ? 'A' : 'X';
    if (write(ready[1], &c, 1) != 1) _exit(101);
    for (;;) pause();  // "running the effect" until killed
  }
  close(ready[1]);
  char c = 0;
  REQUIRE(read(ready[0], &c, 1) == 1);
  close(ready[0]);
  REQUIRE(c == 'A');
  REQUIRE(kill(pid, SIGKILL) == 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);

  // Long lease: only the holder's death can explain the fencing.
  Settings s = file_settings(path);
  s.lease_ttl_ms = 3'600'000;
  auto fence = open_fence(s);
  auto status_now = std::get<IntentStatus>(fence->intent_status("doomed"));
  CHECK(status_now.state == IntentState::unknown);
  CHECK_THAT(status_now.reason, Catch::Contains(std::to_string(pid)));
  CHECK(refusal_reason(fence->prepare(charge("doomed"))) == Reason::prior_failure);
  REQUIRE(std::holds_alternative<Cleared>(fence->clear("doomed", "ops", "provider shows no charge")));
  CHECK(admitted_ticket(fence->prepare(charge("doomed"))).generation == 2);
}

TEST_CASE("a live holder in another PID namespace on this host is not judged by a pid it does not share",
          "[process][dead_holder]") {
  TestLedger ledger;
  if (ledger.is_postgres()) return;  // the holder logic is the same; one run is enough
  const std::string path = ledger.where();
  { open_fence(file_settings(path)); }
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  // A container that shares the host name but not the PID namespace (and
  // mounts its own /proc): its server is pid 1 there.
  const pid_t outer = fork();
  REQUIRE(outer >= 0);
  if (outer == 0) {
    close(ready[0]);
    if (unshare(CLONE_NEWPID | CLONE_NEWNS) != 0) _exit(77);
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(77);
    const pid_t holder = fork();
    if (holder < 0) _exit(77);
    // Its pid as we see it: killing us would not end it (it is its
    // namespace's init, not ours).
    if (holder > 0 && write(ready[1], &holder, sizeof holder) != sizeof holder) _exit(101);
    if (holder == 0) {
      if (mount("proc", "/proc", "proc", 0, nullptr) != 0) _exit(77);
      auto opened = Fence::open(file_settings(path));
      if (!std::holds_alternative<std::unique_ptr<Fence>>(opened)) _exit(100);
      auto o = std::get<std::unique_ptr<Fence>>(opened)->prepare(charge("payout:500"));
      const char c = std::holds_alternative<Admitted>(o) && getpid() == 1 ? 'A' : 'X';
      if (write(ready[1], &c, 1) != 1) _exit(101);
      for (;;) pause();  // "running the effect" until killed
    }
    int status = 0;
    waitpid(holder, &status, 0);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 0);
  }
  close(ready[1]);
  pid_t holder = 0;
  char c = 0;
  const bool started = read(ready[0], &holder, sizeof holder) == sizeof holder && read(ready[0], &c, 1) == 1;
  close(ready[0]);
  if (!started) {
    if (holder > 0) kill(holder, SIGKILL);
    int status = 0;
    waitpid(outer, &status, 0);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 77);
    WARN("cannot make a PID namespace here (needs CAP_SYS_ADMIN): not tested");
    return;
  }
  // However this test ends, the holder and its parent go with it.
  struct Reaper {
    pid_t holder, outer;
    ~Reaper() {
      kill(holder, SIGKILL);
      int status = 0;
      waitpid(outer, &status, 0);
    }
  } reaper{holder, outer};
  REQUIRE(c == 'A');

  // Its pid 1 is our init, started at another time: judged by pid, the
  // holder would look gone, its payout fenced, cleared by an operator, and
  // run again while the first still runs.
  auto fence = open_fence(file_settings(path));
  CHECK(FenceInternal::reap_dead_holders(*fence) == 0);
  CHECK(std::get<IntentStatus>(fence->intent_status("payout:500")).state == IntentState::in_flight);
  CHECK(refusal_reason(fence->prepare(charge("payout:500"))) == Reason::in_flight);

}

TEST_CASE("a locked ledger gives ledger_busy after the busy timeout, never an admission", "[busy]") {
  TestLedger ledger;
  const std::string path = ledger.where();
  Settings s = file_settings(path);
  s.busy_timeout_ms = 200;
  auto fence = open_fence(s);
  ledger.lock_for("busy");
  auto blocked = fence->prepare(charge("busy"));
  CHECK(refusal_reason(blocked) == Reason::ledger_busy);
  ledger.unlock();
  CHECK(admitted_ticket(fence->prepare(charge("busy"))).generation == 1);
}

TEST_CASE("reads are answered while a write waits for another process's lock", "[busy]") {
  TestLedger ledger;
  const std::string path = ledger.where();
  Settings s = file_settings(path);
  s.busy_timeout_ms = 3000;
  auto fence = open_fence(s);
  ledger.lock_for("waits");
  std::atomic<bool> prepare_done{false};
  std::thread blocked([&] {
    fence->prepare(charge("waits"));
    prepare_done = true;
  });
  // Let the prepare reach the lock (if it has not yet, the reads below are
  // simply not behind it and the test proves less, never more).
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto status = fence->intent_status("waits");
  REQUIRE(std::holds_alternative<IntentStatus>(status));
  CHECK(std::get<IntentStatus>(status).state == IntentState::none);
  REQUIRE(std::holds_alternative<DomainStatus>(fence->domain_status("order:waits")));
  REQUIRE(std::holds_alternative<Stats>(fence->stats()));
  // Had the reads queued behind the blocked write, they would only have been
  // answered after it gave up with ledger_busy.
  CHECK_FALSE(prepare_done);
  ledger.unlock();
  blocked.join();
  CHECK(prepare_done);
}

TEST_CASE("admissions the ledger would not let a stopping process fence stay held, are named, and are fenced "
          "when tried again",
          "[busy]") {
  TestLedger ledger;
  Settings s = file_settings(ledger.where());
  s.busy_timeout_ms = 200;
  auto fence = open_fence(s);
  admitted_ticket(fence->prepare(charge("left")));
  ledger.lock_for("left");
  std::vector<std::string> left;
  CHECK(FenceInternal::fence_own_in_flight(*fence, "stopping", &left) == 0);
  CHECK(left == std::vector<std::string>{"left"});
  ledger.unlock();
  CHECK(std::get<IntentStatus>(fence->intent_status("left")).state == IntentState::in_flight);
  left.clear();
  CHECK(FenceInternal::fence_own_in_flight(*fence, "stopping", &left) == 1);
  CHECK(left.empty());
  CHECK(std::get<IntentStatus>(fence->intent_status("left")).state == IntentState::unknown);
}
