// The lease file: classification of whatever lies at the path, atomic
// takeover under the directory lock, and removal of our own lease only.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "ledger/holder.h"
#include "shared_server/bridge.h"
#include "shared_server/election.h"
#include "shared_server/lease.h"
#include "support/temp_dir.h"

using namespace effectfence;
using namespace effectfence::shared;
using effectfence::testing::TempDir;

namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

Lease lease_of(const Holder& owner, const std::string& url, int64_t created_at_ms, const std::string& token = "t0") {
  Lease lease;
  lease.owner = owner;
  lease.url = url;
  lease.token = token;
  lease.created_at_ms = created_at_ms;
  lease.ledger = "ledger.sqlite";
  return lease;
}

// A process that has exited and been reaped: its pid names nobody.
Holder dead_process() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  Holder h = this_process();
  h.pid = child;
  h.started = 0;
  return h;
}

size_t leftover_temp_files(const TempDir& dir) {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().extension() == ".tmp") ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("every kind of lease file is classified, and only a live or starting owner keeps it") {
  TempDir dir;
  const std::string path = dir.file("l.server.json");
  const int64_t now = wall_clock_ms();
  const int64_t bind_deadline = 1000;

  CHECK(read_lease(path, now, bind_deadline).kind == LeaseCase::missing);

  write_text(path, "");
  CHECK(read_lease(path, now, bind_deadline).kind == LeaseCase::empty);

  write_text(path, "{\"format\": \"something else\"}");
  CHECK(read_lease(path, now, bind_deadline).kind == LeaseCase::corrupt);
  write_text(path, "\x01\x02 not json");
  CHECK(read_lease(path, now, bind_deadline).kind == LeaseCase::corrupt);

  write_text(path, lease_of(dead_process(), "http://127.0.0.1:9/mcp", now).to_text());
  CHECK(read_lease(path, now, bind_deadline).kind == LeaseCase::stale);

  write_text(path, lease_of(this_process(), "http://127.0.0.1:9/mcp", now).to_text());
  const LeaseReading live = read_lease(path, now, bind_deadline);
  CHECK(live.kind == LeaseCase::live);
  REQUIRE(live.lease);
  CHECK(live.lease->owner.pid == ::getpid());

  write_text(path, lease_of(this_process(), "", now - 10).to_text());
  CHECK(read_lease(path, now, bind_deadline).kind == LeaseCase::starting);
  write_text(path, lease_of(this_process(), "", now - bind_deadline - 1).to_text());
  CHECK(read_lease(path, now, bind_deadline).kind == LeaseCase::abandoned);

  // A live pid whose start time differs is another process that reused the pid.
  Holder reused = this_process();
  reused.started += 12345;
  write_text(path, lease_of(reused, "http://127.0.0.1:9/mcp", now).to_text());
  CHECK(read_lease(path, now, bind_deadline).kind == LeaseCase::stale);

  // Another user could write it: trusted, it would send every call to a
  // server of theirs.
  write_text(path, lease_of(this_process(), "http://127.0.0.1:9/mcp", now).to_text());
  REQUIRE(::chmod(path.c_str(), 0622) == 0);
  const LeaseReading writable = read_lease(path, now, bind_deadline);
  CHECK(writable.kind == LeaseCase::unreadable);
  CHECK_THAT(writable.detail, Catch::Contains("writable by other users"));
  if (::geteuid() == 0) {  // only root can give a file away
    REQUIRE(::chmod(path.c_str(), 0600) == 0);
    REQUIRE(::chown(path.c_str(), 65534, 65534) == 0);
    const LeaseReading foreign = read_lease(path, now, bind_deadline);
    CHECK(foreign.kind == LeaseCase::unreadable);
    CHECK_THAT(foreign.detail, Catch::Contains("owned by uid 65534"));
  }

  // A fifo at the path is reported at once, never waited on.
  std::filesystem::remove(path);
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  const LeaseReading fifo = read_lease(path, now, bind_deadline);
  CHECK(fifo.kind == LeaseCase::unreadable);
  CHECK_THAT(fifo.detail, Catch::Contains("not a regular file"));

  std::filesystem::remove(path);
  std::filesystem::create_directory(path);
  CHECK(read_lease(path, now, bind_deadline).kind == LeaseCase::unreadable);

  for (LeaseCase c : {LeaseCase::missing, LeaseCase::stale, LeaseCase::corrupt, LeaseCase::empty, LeaseCase::abandoned}) {
    CHECK(may_take_over(c));
  }
  for (LeaseCase c : {LeaseCase::live, LeaseCase::starting, LeaseCase::unreadable}) CHECK_FALSE(may_take_over(c));
}

TEST_CASE("a lease is written 0600 through a temporary file that does not stay behind") {
  TempDir dir;
  const std::string path = dir.file("l.server.json");
  DirectoryLock lock(path, std::chrono::steady_clock::now() + std::chrono::seconds(1));
  REQUIRE(lock.ok());
  const Lease lease = lease_of(this_process(), "http://127.0.0.1:1234/mcp", wall_clock_ms(), "abc");
  REQUIRE(write_lease(path, lease).ok());
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(leftover_temp_files(dir) == 0);
  const auto back = Lease::from_text(lease.to_text());
  REQUIRE(back);
  CHECK(back->url == lease.url);
  CHECK(back->token == "abc");
  CHECK(back->owner.started == lease.owner.started);
}

TEST_CASE("16 threads taking over one corrupt lease: exactly one claims it, the rest lose") {
  TempDir dir;
  const std::string path = dir.file("l.server.json");
  write_text(path, "corrupt");
  std::atomic<int> claimed{0}, lost{0}, failed{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      // Each claim is for a live owner without a URL: what a server writes before it binds.
      const Status outcome =
          claim_lease(path, lease_of(this_process(), "", wall_clock_ms(), "t" + std::to_string(i)), 60'000);
      if (outcome.ok()) ++claimed;
      else if (outcome.message().rfind("lost", 0) == 0) ++lost;
      else ++failed;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(claimed == 1);
  CHECK(lost == 15);
  CHECK(failed == 0);
  CHECK(read_lease(path, wall_clock_ms(), 60'000).kind == LeaseCase::starting);
  CHECK(leftover_temp_files(dir) == 0);
}

TEST_CASE("a server publishes and removes only its own lease, never a successor's") {
  TempDir dir;
  const std::string path = dir.file("l.server.json");
  Lease mine = lease_of(this_process(), "", wall_clock_ms(), "mine");
  REQUIRE(claim_lease(path, mine, 60'000).ok());
  mine.url = "http://127.0.0.1:1234/mcp";
  REQUIRE(publish_lease(path, mine).ok());
  CHECK(read_lease(path, wall_clock_ms(), 60'000).kind == LeaseCase::live);

  // Someone judged it stale and took it over: the old owner must not touch the new lease.
  {
    DirectoryLock lock(path, std::chrono::steady_clock::now() + std::chrono::seconds(1));
    REQUIRE(write_lease(path, lease_of(this_process(), "", wall_clock_ms(), "successor")).ok());
  }
  CHECK(publish_lease(path, mine).message().rfind("lost", 0) == 0);
  CHECK(remove_lease_if_ours(path, "mine").message().rfind("not ours", 0) == 0);
  CHECK(std::filesystem::exists(path));
  CHECK(remove_lease_if_ours(path, "successor").ok());
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("removing the lease waits for the directory lock, and says why when it cannot") {
  TempDir dir;
  const std::string path = dir.file("l.server.json");
  {
    DirectoryLock lock(path, std::chrono::steady_clock::now() + std::chrono::seconds(1));
    REQUIRE(write_lease(path, lease_of(this_process(), "http://127.0.0.1:1234/mcp", wall_clock_ms(), "mine")).ok());
  }
  {
    DirectoryLock held(path, std::chrono::steady_clock::now() + std::chrono::seconds(1));
    REQUIRE(held.ok());
    const Status removed = remove_lease_if_ours(path, "mine", std::chrono::milliseconds(50));
    CHECK(removed.message().find("stayed locked by another process") != std::string::npos);
    CHECK(std::filesystem::exists(path));
  }
  // A holder that lets go while the remover waits: the lease goes.
  auto held = std::make_unique<DirectoryLock>(path, std::chrono::steady_clock::now() + std::chrono::seconds(1));
  REQUIRE(held->ok());
  std::thread release([&held] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    held.reset();
  });
  CHECK(remove_lease_if_ours(path, "mine", std::chrono::seconds(5)).ok());
  release.join();
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("a live lease is never taken over by a claim") {
  TempDir dir;
  const std::string path = dir.file("l.server.json");
  write_text(path, lease_of(this_process(), "http://127.0.0.1:9/mcp", wall_clock_ms(), "owner").to_text());
  const Status stolen = claim_lease(path, lease_of(this_process(), "", wall_clock_ms(), "thief"), 60'000);
  CHECK(stolen.message().rfind("lost", 0) == 0);
  CHECK(Lease::from_text([&] {
          std::ifstream in(path);
          return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        }())->token == "owner");
}

TEST_CASE("endpoints are parsed from the lease's URL, and anything else is refused") {
  const auto e = Endpoint::parse("http://127.0.0.1:4321/mcp", "tok");
  REQUIRE(e);
  CHECK(e->host == "127.0.0.1");
  CHECK(e->port == 4321);
  CHECK(e->path == "/mcp");
  CHECK(e->token == "tok");
  const auto v6 = Endpoint::parse("http://[::1]:80/mcp", "");
  REQUIRE(v6);
  CHECK(v6->host == "::1");
  CHECK(v6->port == 80);
  for (const char* bad : {"", "https://127.0.0.1:1/mcp", "http://127.0.0.1/mcp", "http://127.0.0.1:0/mcp",
                          "http://127.0.0.1:99999/mcp", "http://:80/mcp", "http://127.0.0.1:8x/mcp"}) {
    CHECK_FALSE(Endpoint::parse(bad, ""));
  }
}

TEST_CASE("one ledger is recognised under any spelling of its path, and two ledgers are never taken for one") {
  TempDir dir;
  const std::string a = dir.file("a.sqlite");
  const std::string b = dir.file("b.sqlite");
  write_text(a, "");
  write_text(b, "");
  const std::string dotted = dir.path().string() + "/./a.sqlite";
  const std::string linked = dir.file("link.sqlite");
  REQUIRE(::symlink(a.c_str(), linked.c_str()) == 0);

  CHECK(same_ledger(a, dotted));
  CHECK(same_ledger(a, linked));
  CHECK(absolute_ledger_path(linked) == absolute_ledger_path(a));
  CHECK_FALSE(same_ledger(a, b));
  // Not created yet: compared by absolute path.
  CHECK(same_ledger(dir.file("new.sqlite"), dir.path().string() + "/./new.sqlite"));
  CHECK_FALSE(same_ledger(dir.file("new.sqlite"), dir.file("other.sqlite")));
  CHECK(absolute_ledger_path(dir.file("new.sqlite")).front() == '/');
  // A lease that does not name its ledger, or names it relatively (as older
  // versions did), matches none: it does not say which directory it meant.
  CHECK_FALSE(same_ledger("", a));
  CHECK_FALSE(same_ledger("a.sqlite", a));
  CHECK_FALSE(same_ledger("a.sqlite", "a.sqlite"));
  CHECK(same_ledger("postgres://h/db", "postgres://h/db"));
  CHECK_FALSE(same_ledger("postgres://h/db", "postgres://h/other"));
  // URLs are recorded and compared without their passwords.
  CHECK(absolute_ledger_path("postgres://ops:s3cret@h/db") == "postgres://ops:***@h/db");
  CHECK(same_ledger(absolute_ledger_path("postgres://ops:s3cret@h/db"), "postgres://ops:other@h/db"));
  // Two URLs libpq cannot read print alike, and are not taken for one ledger.
  CHECK(absolute_ledger_path("postgres://ops:s3cret@h/%zz") == "<unparseable connection string>");
  CHECK_FALSE(same_ledger(absolute_ledger_path("postgres://ops:s3cret@h/%zz"), "postgres://h/%zy"));
}

TEST_CASE("a live lease of another ledger is not joined: the client is served alone, told why, and nothing is started") {
  TempDir dir;
  const std::string path = dir.file("shared.server.json");
  Lease other = lease_of(this_process(), "http://127.0.0.1:9/mcp", wall_clock_ms(), "owner");
  other.ledger = absolute_ledger_path(dir.file("a.sqlite"));
  write_text(path, other.to_text());

  mcp::Logger log("lease_test", mcp::LogLevel::error);
  bool started = false;
  auto start = [&](std::chrono::steady_clock::time_point) {
    started = true;
    return CandidateReport{CandidateReport::Outcome::failed, "must not start"};
  };
  ElectionOptions options{path, absolute_ledger_path(dir.file("b.sqlite")), 2'000, 1'000};
  const Election result = elect(options, start, log);
  REQUIRE(std::holds_alternative<Standalone>(result));
  const std::string& reason = std::get<Standalone>(result).reason;
  CHECK(reason.find("another ledger (" + other.ledger + ")") != std::string::npos);
  CHECK(reason.find("give each ledger its own --lease") != std::string::npos);
  CHECK_FALSE(started);

  // A lease of an older version names its ledger relatively: not joined, and said why.
  other.ledger = "a.sqlite";
  write_text(path, other.to_text());
  const Election relative = elect(options, start, log);
  REQUIRE(std::holds_alternative<Standalone>(relative));
  CHECK(std::get<Standalone>(relative).reason.find("a lease written by an older effectfence") != std::string::npos);
  CHECK_FALSE(started);

  // Passwords in either URL are never shown.
  other.ledger = "postgres://ops:LeaseSide@h/a";
  write_text(path, other.to_text());
  ElectionOptions pg_options = options;
  pg_options.ledger = "postgres://ops:ClientSide@h/b";
  const Election urls = elect(pg_options, start, log);
  REQUIRE(std::holds_alternative<Standalone>(urls));
  CHECK(std::get<Standalone>(urls).reason.find("LeaseSide") == std::string::npos);
  CHECK(std::get<Standalone>(urls).reason.find("ClientSide") == std::string::npos);
  CHECK(std::get<Standalone>(urls).reason.find("postgres://ops:***@h/a") != std::string::npos);
  write_text(path, lease_of(this_process(), "http://127.0.0.1:9/mcp", wall_clock_ms(), "owner").to_text());
  other.ledger = absolute_ledger_path(dir.file("a.sqlite"));
  write_text(path, other.to_text());

  // The same ledger, spelled differently, is not refused for its ledger (the
  // owner here listens nowhere, so the election then runs out of time).
  options.ledger = dir.path().string() + "/./a.sqlite";
  options.deadline_ms = 300;
  const Election same = elect(options, start, log);
  REQUIRE(std::holds_alternative<Standalone>(same));
  CHECK(std::get<Standalone>(same).reason.find("another ledger") == std::string::npos);
  CHECK(std::get<Standalone>(same).reason.find("does not answer") != std::string::npos);
}

TEST_CASE("a live lease of a server with other fence settings is not joined: the client is served alone, told why") {
  TempDir dir;
  const std::string path = dir.file("shared.server.json");
  const std::string ledger = absolute_ledger_path(dir.file("a.sqlite"));
  mcp::Logger log("lease_test", mcp::LogLevel::error);
  auto start = [&](std::chrono::steady_clock::time_point) {
    return CandidateReport{CandidateReport::Outcome::failed, "must not start"};
  };
  ElectionOptions options{path, ledger, 300, 1'000};
  options.result_ttl_ms = 172'800'000;  // this client promises results for two days

  Lease server = lease_of(this_process(), "http://127.0.0.1:9/mcp", wall_clock_ms(), "owner");
  server.ledger = ledger;
  server.result_ttl_ms = 2'000;
  write_text(path, server.to_text());
  const Election shorter = elect(options, start, log);
  REQUIRE(std::holds_alternative<Standalone>(shorter));
  CHECK_THAT(std::get<Standalone>(shorter).reason,
             Catch::Contains("keeps a lease of 60000 ms and results for 2000 ms, and this client asks for a lease "
                             "of 60000 ms and results for 172800000 ms") &&
                 Catch::Contains("EFFECTFENCE_RESULT_TTL_SECS"));

  options.result_ttl_ms = server.result_ttl_ms;
  options.lease_ttl_ms = 3'600'000;
  const Election lease = elect(options, start, log);
  REQUIRE(std::holds_alternative<Standalone>(lease));
  CHECK_THAT(std::get<Standalone>(lease).reason, Catch::Contains("a lease of 3600000 ms"));

  // A lease written before servers recorded their settings.
  server.lease_ttl_ms = 0;
  server.result_ttl_ms = 0;
  write_text(path, server.to_text());
  const Election older = elect(options, start, log);
  REQUIRE(std::holds_alternative<Standalone>(older));
  CHECK_THAT(std::get<Standalone>(older).reason, Catch::Contains("does not say which lease and result TTL"));

  // The same settings: not refused for them (the owner here listens nowhere).
  server.lease_ttl_ms = options.lease_ttl_ms;
  server.result_ttl_ms = options.result_ttl_ms;
  write_text(path, server.to_text());
  const Election same = elect(options, start, log);
  REQUIRE(std::holds_alternative<Standalone>(same));
  CHECK_THAT(std::get<Standalone>(same).reason, Catch::Contains("does not answer"));
}

// Regression: the pid was not range-checked; 4294967297 became pid 1 for
// kill(), which is always there, so a corrupt lease read as live.
TEST_CASE("lease_pid_out_of_range: a pid no process can have makes the lease corrupt, never live") {
  TempDir dir;
  const std::string path = dir.file("l.server.json");
  const int64_t now = wall_clock_ms();
  const Lease good = lease_of(this_process(), "http://127.0.0.1:9/mcp", now);
  const std::string text = good.to_text();
  const std::string own_pid = "\"pid\": " + std::to_string(::getpid());
  REQUIRE(text.find(own_pid) != std::string::npos);
  for (const std::string pid : {"4294967297", "2147483648", "18446744073709551615", "-1", "0",
                                "-9223372036854775808"}) {
    INFO("pid " << pid);
    std::string bad = text;
    bad.replace(bad.find(own_pid), own_pid.size(), "\"pid\": " + pid);
    CHECK_FALSE(Lease::from_text(bad));
    write_text(path, bad);
    const LeaseReading reading = read_lease(path, now, 1000);
    CHECK(reading.kind == LeaseCase::corrupt);
  }
  // The largest pid_t is still a pid (of nobody here: the lease is stale).
  std::string largest = text;
  largest.replace(largest.find(own_pid), own_pid.size(), "\"pid\": 2147483647");
  REQUIRE(Lease::from_text(largest));
  CHECK(Lease::from_text(largest)->owner.pid == 2147483647);
}
