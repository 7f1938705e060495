// What only the PostgreSQL ledger has: URLs and their secrets, connection
// errors, migrations shared by replicas, and the SQL an operator can run.
// Runs against the cluster EFFECTFENCE_TEST_LEDGER names (see suite.cmake).
#include <arpa/inet.h>
#include <poll.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "effectfence/refusal_text.h"
#include "core/random_token.h"
#include "ledger/migrations.h"
#include "ledger/open_ledger.h"
#include "ledger/pg_connection.h"
#include "ledger/postgres_ledger.h"
#include "fence/fence_internal.h"
#include "support/fence_helpers.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"

using namespace effectfence;
using namespace effectfence::testing;

namespace {

constexpr const char* kSecret = "s3cret-never-printed";

// The query string of the cluster's URL ("host=/tmp/..."), to build other URLs on it.
std::string cluster_query() {
  const std::string url = postgres_under_test();
  REQUIRE_FALSE(url.empty());
  return url.substr(url.find('?') + 1);
}

OpenError expect_refused(const std::string& url) {
  auto opened = open_ledger(url, 1000);
  REQUIRE(std::holds_alternative<OpenError>(opened));
  return std::get<OpenError>(opened);
}

}  // namespace

TEST_CASE("PostgreSQL URLs are recognised and their passwords never printed", "[postgres][url]") {
  CHECK(is_postgres_ledger("postgres://db.internal/ledger"));
  CHECK(is_postgres_ledger("postgresql://u@/ledger?host=/run/pg"));
  CHECK(is_postgres_ledger("postgres:"));
  CHECK_FALSE(is_postgres_ledger("/var/lib/postgres/ledger.sqlite"));
  CHECK_FALSE(is_postgres_ledger("memory"));
  CHECK(printable_ledger("postgres://alice:hunter2@db:5432/ledger") == "postgres://alice:***@db:5432/ledger");
  CHECK(printable_ledger("postgresql://alice@db/ledger?password=hunter2&sslmode=require") ==
        "postgresql://alice:***@db/ledger?sslmode=require");  // printed from what libpq reads
  CHECK(printable_ledger("postgresql://db/ledger") == "postgresql://db/ledger");
  CHECK(printable_ledger("postgres://alice:s3cret?Tr0ub#4dor@db/ledger") == "postgres://alice:***@db/ledger");
  CHECK(printable_ledger("postgres://db:5432/ledger?application_name=a:b@c") ==
        "postgres://db:5432/ledger?application_name=a:b@c");
  CHECK(printable_ledger("/tmp/a:b@c.sqlite") == "/tmp/a:b@c.sqlite");
}

// Regression: the printed form edited the text with a pattern that libpq
// does not share, and printed whole or in part what libpq reads as the password.
TEST_CASE("password_leaks_through_printed_ledger: whatever libpq calls a password is never printed",
          "[postgres][url]") {
  const struct {
    const char* ledger;
    const char* printed;
  } cases[] = {
      {"host=localhost password = hunter22", "password=*** host=localhost"},
      {"host=h password='two words'", "password=*** host=h"},
      {"host=h password=abc&hunter22", "password=*** host=h"},
      {"postgresql://u@h/db?pass%77ord=hunter22", "postgresql://u:***@h/db"},
      {"postgresql://u@h/db?password=hun ter22&sslmode=require", "postgresql://u:***@h/db?sslmode=require"},
      {"postgresql://u:hun%74er22@[::1]:5433/db", "postgresql://u:***@/db?host=::1&port=5433"},
  };
  for (const auto& c : cases) {
    const std::string printed = printable_ledger(c.ledger);
    CHECK(printed == c.printed);
    CHECK_THAT(printed, !Catch::Contains("hunter") && !Catch::Contains("two") && !Catch::Contains("words") &&
                            !Catch::Contains("ter22"));
    CHECK(printable_ledger(printed) == printed);  // a lease file's form reads back as itself
  }
  // What libpq cannot read is printed as nothing of it.
  CHECK(printable_ledger("postgres://u:hunter22@h/%zz") == "<unparseable connection string>");
  CHECK(printable_ledger("host=h password=hunter22 bogus=1") == "<unparseable connection string>");
}

TEST_CASE("a connection attempt is bounded unless the URL or the environment bounds it", "[postgres][url]") {
  ScopedEnv no_timeout(Env{{"PGCONNECT_TIMEOUT", std::nullopt}, {"PGSERVICE", std::nullopt}});
  CHECK(pg::conninfo_of("postgres:") == "connect_timeout=10");
  CHECK(pg::conninfo_of("postgres://db/ledger") == "postgres://db/ledger?connect_timeout=10");
  CHECK(pg::conninfo_of("postgresql://u@/ledger?host=/run/pg") ==
        "postgresql://u@/ledger?host=/run/pg&connect_timeout=10");
  // A '?' in the password does not start the query.
  CHECK(pg::conninfo_of("postgres://alice:s3cret?x@db/ledger") ==
        "postgres://alice:s3cret?x@db/ledger?connect_timeout=10");
  CHECK(pg::conninfo_of("postgres://db/ledger?connect_timeout=3") == "postgres://db/ledger?connect_timeout=3");
  CHECK(pg::conninfo_of("postgres://db/ledger?service=ledger") == "postgres://db/ledger?service=ledger");
  ScopedEnv from_environment(Env{{"PGCONNECT_TIMEOUT", "4"}});
  CHECK(pg::conninfo_of("postgres://db/ledger") == "postgres://db/ledger");
}

TEST_CASE("a text value holding a NUL character is refused before PostgreSQL, not stored cut short",
          "[postgres][open]") {
  TestLedger ledger;
  auto db = pg::Connection::open(ledger.where());
  db->run("CREATE TEMP TABLE names (name text)");
  try {
    db->exec("INSERT INTO names VALUES ($1)", {pg::param(std::string("first") + '\0' + "second")});
    FAIL("a value holding NUL was sent");
  } catch (const pg::Error& e) {
    CHECK(e.sqlstate() == "22021");
    CHECK_THAT(e.what(), Catch::Contains("NUL character"));
  }
  CHECK(db->exec("SELECT count(*) FROM names").integer(0, 0) == 0);
}

TEST_CASE("a password holding an unencoded '@' is refused before libpq reads a piece of it as the host",
          "[postgres][url]") {
  const OpenError e = expect_refused("postgres://fence:Hunter2@Secret99@127.0.0.1:1/ledger");
  CHECK(e.code == OpenErrorCode::invalid_settings);
  CHECK_THAT(e.message, Catch::Contains("percent-encode"));
  CHECK_THAT(e.message, !Catch::Contains("Hunter2") && !Catch::Contains("Secret99"));
  CHECK(printable_ledger("postgres://fence:p@ss:w/rd@db:5432/ledger?sslmode=require") ==
        "postgres://***@db:5432/ledger?sslmode=require");
  CHECK(printable_ledger("postgres://fence:s3cret@db/ledger?application_name=a:b@c") ==
        "postgres://fence:***@db/ledger?application_name=a:b@c");  // an '@' in the query is no password's
}

TEST_CASE("a key=value connection string is refused, not taken as a file name, and its password hidden",
          "[postgres][url]") {
  const OpenError e = expect_refused("host=/tmp user=fence password=KvSecret77 dbname=ledger");
  CHECK(e.code == OpenErrorCode::invalid_settings);
  CHECK_THAT(e.message, Catch::Contains("key=value connection string") && Catch::Contains("postgresql://"));
  CHECK_THAT(e.message, !Catch::Contains("KvSecret77"));
  CHECK_FALSE(std::filesystem::exists("host=/tmp user=fence password=KvSecret77 dbname=ledger"));
}

TEST_CASE("a server that accepts and never answers is a named error, not a hang", "[postgres][open]") {
  ScopedEnv short_bound(Env{{"PGCONNECT_TIMEOUT", "2"}});  // the default's 10 s, shortened for the test
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::listen(listener, 8) == 0);  // the kernel completes the handshake; nobody ever reads
  socklen_t length = sizeof address;
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  const std::string url = "postgresql://fence@127.0.0.1:" + std::to_string(ntohs(address.sin_port)) + "/ledger";
  const auto started = std::chrono::steady_clock::now();
  const OpenError e = expect_refused(url);
  ::close(listener);
  CHECK(e.code == OpenErrorCode::unreachable);
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(30));
}

TEST_CASE("an unreachable server is a named error that names it, without the password", "[postgres][open]") {
  const std::string url =
      std::string("postgresql://effectfence:") + kSecret + "@/effectfence?host=/nonexistent-socket-dir";
  const OpenError e = expect_refused(url);
  CHECK(e.code == OpenErrorCode::unreachable);
  CHECK(std::string(open_error_name(e.code)) == "unreachable");
  CHECK_THAT(e.message, Catch::Contains("cannot reach the PostgreSQL server"));
  CHECK_THAT(e.message, Catch::Contains("/nonexistent-socket-dir"));
  CHECK_THAT(e.message, !Catch::Contains(kSecret));
}

TEST_CASE("bad credentials are a named error, without the password", "[postgres][open]") {
  const std::string url = std::string("postgresql://effectfence_pw:") + kSecret + "@/effectfence?" + cluster_query();
  const OpenError e = expect_refused(url);
  CHECK(e.code == OpenErrorCode::auth);
  CHECK_THAT(e.message, Catch::Contains("password authentication failed"));
  CHECK_THAT(e.message, Catch::Contains("effectfence_pw:***@"));
  CHECK_THAT(e.message, !Catch::Contains(kSecret));
}

TEST_CASE("a URL libpq cannot read is a named settings error, without the password", "[postgres][open]") {
  // A raw % in the password: libpq quotes the piece it could not decode.
  const std::string raw = "Tr0ub4dor%zz-never-printed";
  const OpenError e = expect_refused("postgresql://effectfence:" + raw + "@/effectfence?" + cluster_query());
  CHECK(e.code == OpenErrorCode::invalid_settings);
  CHECK_THAT(e.message, Catch::Contains("percent-encode"));
  CHECK_THAT(e.message, !Catch::Contains("Tr0ub4dor"));
}

TEST_CASE("a database the server does not have is named as such, not as bad credentials", "[postgres][open]") {
  const OpenError e = expect_refused("postgresql://effectfence@/no_such_ledger_db?" + cluster_query());
  CHECK(e.code == OpenErrorCode::invalid_settings);
  CHECK_THAT(e.message, Catch::Contains("no such database"));
  CHECK_THAT(e.message, Catch::Contains("no_such_ledger_db"));
}

TEST_CASE("describe() names the server with the password scrubbed", "[postgres][open]") {
  TestLedger ledger;
  // The cluster trusts local connections, so the password is accepted and ignored.
  std::string url = ledger.where();
  url.replace(url.find("effectfence@"), 12, std::string("effectfence:") + kSecret + "@");
  Settings s;
  s.ledger_path = url;
  auto fence = open_fence(s);
  CHECK_THAT(fence->describe_ledger(), Catch::StartsWith("postgres:postgresql://effectfence:***@"));
  CHECK_THAT(fence->describe_ledger(),
             Catch::EndsWith("(schema " + std::to_string(postgres_migrations().back().version) + ")"));
  CHECK_THAT(fence->describe_ledger(), !Catch::Contains(kSecret));
}

TEST_CASE("replicas opening a new database at once migrate it exactly once", "[postgres][schema]") {
  TestLedger ledger;
  std::atomic<int> opened{0};
  std::vector<std::thread> replicas;
  for (int i = 0; i < 8; ++i) {
    replicas.emplace_back([&] {
      if (std::holds_alternative<std::unique_ptr<Ledger>>(open_ledger(ledger.where(), 10'000))) ++opened;
    });
  }
  for (auto& t : replicas) t.join();
  CHECK(opened == 8);
  CHECK(ledger.count("SELECT count(*) FROM effectfence_schema") == static_cast<int64_t>(postgres_migrations().size()));
  CHECK(ledger.count("SELECT max(version) FROM effectfence_schema") == postgres_migrations().back().version);
  CHECK(ledger.count("SELECT count(*) FROM counters") == 9);
}

TEST_CASE("a database from a newer effectfence is refused", "[postgres][schema]") {
  TestLedger ledger;
  { open_fence(ledger.settings()); }
  ledger.exec("INSERT INTO effectfence_schema (version, name) VALUES (999, '0999_future.sql')");
  const OpenError e = expect_refused(ledger.where());
  CHECK(e.code == OpenErrorCode::newer_schema);
  CHECK_THAT(e.message, Catch::Contains("schema version 999"));
}

TEST_CASE("a database holding another application's tables is refused and left untouched", "[postgres][open]") {
  TestLedger ledger;
  ledger.exec("CREATE TABLE intents (id integer)");
  const OpenError e = expect_refused(ledger.where());
  CHECK(e.code == OpenErrorCode::not_a_ledger);
  CHECK(ledger.count("SELECT count(*) FROM information_schema.tables WHERE table_name = 'effectfence_schema' "
                     "AND table_schema = current_schema()") == 0);
}

namespace {

// sql is refused, with an error whose message contains `message`.
void expect_refused_sql(TestLedger& ledger, const std::string& sql, const std::string& message) {
  INFO(sql);
  try {
    ledger.exec(sql);
    FAIL("the ledger accepted: " << sql);
  } catch (const pg::Error& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains(message));
  }
}

}  // namespace

TEST_CASE("certificates, events and clears cannot be changed through SQL", "[postgres][audit]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  const Ticket t = admitted_ticket(fence->prepare(charge("audit")));
  REQUIRE(std::holds_alternative<Certificate>(fence->commit(t, {{"ok", true}})));
  fence->abort(admitted_ticket(fence->prepare(charge("to-clear"))), "unclear");
  REQUIRE(std::holds_alternative<Cleared>(fence->clear("to-clear", "alice", "checked")));
  for (const char* sql : {"UPDATE certificates SET body = '{}'", "DELETE FROM certificates",
                          "TRUNCATE certificates CASCADE", "UPDATE events SET actor = 'mallory'",
                          "DELETE FROM events", "TRUNCATE events", "UPDATE clears SET reason = 'other'",
                          "DELETE FROM clears"}) {
    expect_refused_sql(ledger, sql, "effectfence: ");
  }
  CHECK(ledger.count("SELECT count(*) FROM certificates") == 1);
  CHECK(ledger.count("SELECT count(*) FROM clears WHERE previous_state = 'failed'") == 1);

  // Only the ledger dates a clear: dated by hand it would slip past queries by time.
  fence->abort(admitted_ticket(fence->prepare(charge("to-backdate"))), "unclear");
  for (const char* sql : {"INSERT INTO clears(intent, operator, reason, requested_at) "
                          "VALUES ('to-backdate', 'mallory', 'ok', 0)",
                          "INSERT INTO clears(intent, operator, reason, requested_at) "
                          "VALUES ('to-backdate', 'mallory', 'ok', effectfence_now_ms() + 3600000)"}) {
    expect_refused_sql(ledger, sql, "requested_at is the time the ledger records the clear");
  }
  expect_refused_sql(ledger,
                     "INSERT INTO clears(intent, operator, reason, previous_state) "
                     "VALUES ('to-backdate', 'mallory', 'ok', 'unknown')",
                     "previous_state is filled in by the ledger");
  CHECK(ledger.count("SELECT count(*) FROM clears WHERE intent = 'to-backdate'") == 0);
  // Dated when it is inserted, not when its transaction began: one statement
  // at a time, as at the psql prompt (one message shares one statement time).
  for (const char* sql : {"BEGIN", "CREATE TABLE clear_began AS SELECT effectfence_now_ms() AS ms",
                          "SELECT pg_sleep(1.2)",
                          "INSERT INTO clears(intent, operator, reason) VALUES ('to-backdate', 'carol', 'checked')",
                          "COMMIT"}) {
    ledger.exec(sql);
  }
  CHECK(ledger.count("SELECT count(*) FROM events, clear_began WHERE kind = 'cleared' AND intent = 'to-backdate' "
                     "AND at >= ms + 1000 AND abs(at - effectfence_now_ms()) < 60000") == 1);
}

TEST_CASE("an intent is cleared only through clears, keeps its name and holder, and is deleted only once finished and swept",
          "[postgres][audit]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  REQUIRE(std::holds_alternative<Certificate>(fence->commit(admitted_ticket(fence->prepare(charge("done"))), {{"ok", 1}})));
  fence->abort(admitted_ticket(fence->prepare(charge("failed"))), "unclear");
  admitted_ticket(fence->prepare(charge("in-flight")));

  const std::string by_hand = "effectfence: clear an intent with INSERT INTO clears(intent, operator, reason)";
  expect_refused_sql(ledger, "UPDATE intents SET state = 'cleared' WHERE intent = 'failed'", by_hand);
  expect_refused_sql(ledger, "UPDATE intents SET state = 'cleared', updated_at = effectfence_now_ms() WHERE intent = 'in-flight'",
                     by_hand);
  const std::string unfinished = "effectfence: an in-flight, failed or unknown intent cannot be deleted";
  expect_refused_sql(ledger, "DELETE FROM intents WHERE intent = 'failed'", unfinished);
  expect_refused_sql(ledger, "DELETE FROM intents WHERE intent = 'in-flight'", unfinished);
  expect_refused_sql(ledger, "TRUNCATE intents", "effectfence: intents cannot be truncated");
  expect_refused_sql(ledger, "UPDATE intents SET intent = 'failed-old' WHERE intent = 'failed'",
                     "effectfence: an intent cannot be renamed");
  // A fenced intent cannot be put back in flight (to be taken over) or made
  // done (to be deleted) by hand; nor any intent done without its certificate.
  expect_refused_sql(ledger, "UPDATE intents SET state = 'in_flight', lease_expires_at = 0 WHERE intent = 'failed'",
                     "effectfence: a failed or unknown intent stays fenced until it is cleared");
  expect_refused_sql(ledger, "UPDATE intents SET state = 'done' WHERE intent = 'in-flight'",
                     "effectfence: an intent is done only with the certificate of its effect");
  // An attempt in flight may be running its tool: fenced by hand, a clear
  // would then let it run a second time.
  expect_refused_sql(ledger, "UPDATE intents SET state = 'unknown' WHERE intent = 'in-flight'",
                     "effectfence: an attempt in flight may be running its tool");
  expect_refused_sql(ledger, "UPDATE intents SET state = 'failed', updated_at = 9 WHERE intent = 'in-flight'",
                     "effectfence: an attempt in flight may be running its tool");
  // An attempt's holder, token and lease change only with a new admission.
  const std::string holder =
      "effectfence: an attempt's holder, token, generation and lease change only when it is admitted again";
  expect_refused_sql(ledger, "UPDATE intents SET lease_expires_at = 0 WHERE intent = 'in-flight'", holder);
  expect_refused_sql(ledger, "UPDATE intents SET holder_host = 'elsewhere' WHERE intent = 'in-flight'", holder);
  expect_refused_sql(ledger, "UPDATE intents SET token = 'forged' WHERE intent = 'in-flight'", holder);
  expect_refused_sql(ledger, "UPDATE intents SET generation = 0 WHERE intent = 'in-flight'", holder);
  // A done intent replays its result until a sweep's cutoff passes it.
  const std::string results = "effectfence: a done intent replays its result to late duplicates";
  expect_refused_sql(ledger, "DELETE FROM intents WHERE intent = 'done'", results);
  expect_refused_sql(ledger, "UPDATE intents SET state = 'failed' WHERE intent = 'done'",
                     "effectfence: a done intent cannot be changed");
  expect_refused_sql(ledger, "UPDATE intents SET updated_at = 0 WHERE intent = 'done'",
                     "effectfence: a done intent cannot be changed");
  expect_refused_sql(ledger, "UPDATE intents SET generation = generation + 1 WHERE intent = 'in-flight'", holder);
  // A domain's sequence and head only move forward; it goes only after its eviction event.
  const std::string back = "effectfence: a domain's sequence number and head only move forward";
  expect_refused_sql(ledger, "UPDATE domains SET seq = seq - 1", back);
  expect_refused_sql(ledger, "UPDATE domains SET head = NULL", back);
  expect_refused_sql(ledger, "UPDATE domains SET domain = domain || '-2'", back);
  expect_refused_sql(ledger, "DELETE FROM domains", "effectfence: a domain is deleted only as effectfence evicts");
  expect_refused_sql(ledger, "TRUNCATE domains", "effectfence: domains cannot be truncated");
  CHECK(ledger.count("SELECT count(*) FROM intents WHERE state IN ('failed', 'in_flight', 'done')") == 3);
  CHECK(ledger.count("SELECT count(*) FROM clears") == 0);

  ledger.exec("INSERT INTO clears(intent, operator, reason) VALUES ('failed', 'carol', 'checked')");
  CHECK(ledger.count("SELECT count(*) FROM intents WHERE intent = 'failed' AND state = 'cleared'") == 1);
  CHECK(ledger.count("SELECT count(*) FROM events WHERE kind = 'cleared' AND actor = 'carol'") == 1);
  // Re-admitted and fenced again, it is not cleared by a hand UPDATE dated
  // like that clear: the clear was of the attempt before.
  fence->abort(admitted_ticket(fence->prepare(charge("failed"))), "unclear again");
  expect_refused_sql(ledger,
                     "UPDATE intents SET state = 'cleared', updated_at = (SELECT requested_at FROM clears "
                     "WHERE intent = 'failed') WHERE intent = 'failed'",
                     by_hand);
  ledger.exec("INSERT INTO clears(intent, operator, reason) VALUES ('failed', 'carol', 'checked again')");
  // Under a cutoff less than the result TTL before its sweep, still refused.
  ledger.exec("UPDATE retention SET value = 1000 WHERE name = 'result_ttl_ms'");
  ledger.exec("INSERT INTO events(at, kind, actor, detail) SELECT effectfence_now_ms() + 1500, 'swept', 'dave', "
              "json_build_object('older_than_ms', effectfence_now_ms() + 1000)::text");
  expect_refused_sql(ledger, "DELETE FROM intents WHERE state IN ('done', 'cleared')", results);
  ledger.exec("INSERT INTO events(at, kind, actor, detail) SELECT effectfence_now_ms() + 3000, 'swept', 'dave', "
              "json_build_object('older_than_ms', effectfence_now_ms() + 1000)::text");
  ledger.exec("DELETE FROM intents WHERE state IN ('done', 'cleared')");
  CHECK(ledger.count("SELECT count(*) FROM intents") == 1);
}

TEST_CASE("the operator's SQL clear refuses done, in-flight and nonexistent intents", "[postgres][clear]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  const Ticket running = admitted_ticket(fence->prepare(charge("running")));
  REQUIRE(std::holds_alternative<Certificate>(
      fence->commit(admitted_ticket(fence->prepare(charge("finished"))), {{"ok", true}})));
  for (const char* intent : {"running", "finished", "nobody"}) {
    INFO(intent);
    try {
      ledger.exec(std::string("INSERT INTO clears(intent, operator, reason) VALUES ('") + intent +
                  "', 'bob', 'why not')");
      FAIL("the clear was accepted");
    } catch (const pg::Error& e) {
      CHECK_THAT(std::string(e.what()), Catch::Contains("cannot clear"));
    }
  }
  CHECK(ledger.count("SELECT count(*) FROM events WHERE kind = 'cleared'") == 0);
  fence->abort(running, "over");
  ledger.exec("INSERT INTO clears(intent, operator, reason) VALUES ('running', 'bob', 'provider shows nothing')");
  CHECK(ledger.count("SELECT count(*) FROM fenced") == 0);
  CHECK(ledger.count("SELECT count(*) FROM recent_events WHERE kind = 'cleared' AND actor = 'bob'") == 1);
  CHECK(ledger.count("SELECT admitted FROM stats") == 2);
  CHECK(std::holds_alternative<Replayed>(fence->prepare(charge("finished"))));
}

namespace {

// Waits until some session of this cluster waits for an advisory lock.
void wait_for_lock_waiter(TestLedger& ledger) {
  for (int i = 0; i < 500; ++i) {
    if (ledger.count("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted") > 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL("no decision came to wait for the lock");
}

// A name for a fence's connections (application_name), so that a test ends
// only its own: other tests share the cluster.
std::string connection_name(const std::string& prefix) { return prefix + "_" + random_token_hex().substr(0, 12); }

std::unique_ptr<Fence> open_named_fence(const TestLedger& ledger, const std::string& name) {
  Settings settings = ledger.settings();
  settings.ledger_path += "&application_name=" + name;
  return open_fence(settings);
}


// A relay on a Unix socket in front of the cluster's. Once armed, it passes
// the next COMMIT on, reads the server's answer to it and drops it, then
// cuts that connection: the decision is recorded, and its answer lost.
class CommitCutter {
 public:
  CommitCutter(const std::string& server_socket, const std::string& relay_dir)
      : server_socket_(server_socket), relay_socket_(relay_dir + "/.s.PGSQL.5432") {
    listener_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address = unix_address(relay_socket_);
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(listener_, 16) == 0);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~CommitCutter() {
    stop_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    for (auto& relay : relays_) relay.join();
    ::close(listener_);
  }
  void arm() { armed_ = true; }
  bool cut() const { return cut_; }

 private:
  static sockaddr_un unix_address(const std::string& path) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    REQUIRE(path.size() < sizeof address.sun_path);
    std::copy(path.begin(), path.end(), address.sun_path);
    return address;
  }
  void accept_loop() {
    for (;;) {
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0 || stop_) break;
      relays_.emplace_back([this, client] { relay(client); });
    }
  }
  void relay(int client) {
    const int server = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address = unix_address(server_socket_);
    if (::connect(server, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      ::close(client);
      ::close(server);
      return;
    }
    char buffer[65536];
    while (!stop_) {
      pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      if (::poll(fds, 2, 100) <= 0) continue;
      if (fds[0].revents) {
        const ssize_t n = ::read(client, buffer, sizeof buffer);
        if (n <= 0 || ::write(server, buffer, static_cast<size_t>(n)) != n) break;
        // The query "COMMIT" itself (not "BEGIN ... READ COMMITTED").
        const std::string sent(buffer, static_cast<size_t>(n));
        if (armed_ && sent.find(std::string("COMMIT\0", 7)) != std::string::npos) {
          armed_ = false;
          drain_until_ready(server);  // the server has committed and answered: nobody hears it
          cut_ = true;
          break;
        }
      }
      if (fds[1].revents) {
        const ssize_t n = ::read(server, buffer, sizeof buffer);
        if (n <= 0 || ::write(client, buffer, static_cast<size_t>(n)) != n) break;
      }
    }
    ::close(client);
    ::close(server);
  }
  // Reads the server's answer up to its ReadyForQuery ('Z', length 5).
  static void drain_until_ready(int server) {
    std::string seen;
    char buffer[4096];
    for (int i = 0; i < 100 && seen.find(std::string("Z\0\0\0\5", 5)) == std::string::npos; ++i) {
      pollfd fd{server, POLLIN, 0};
      if (::poll(&fd, 1, 100) <= 0) continue;
      const ssize_t n = ::read(server, buffer, sizeof buffer);
      if (n <= 0) return;
      seen.append(buffer, static_cast<size_t>(n));
    }
  }

  std::string server_socket_, relay_socket_;
  int listener_ = -1;
  std::atomic<bool> stop_{false}, armed_{false}, cut_{false};
  std::thread acceptor_;
  std::vector<std::thread> relays_;
};

}  // namespace

TEST_CASE("a clear committed while a late commit is being decided is not overwritten by it", "[postgres][clear]") {
  TestLedger ledger;
  auto fence = open_fence(ledger.settings());
  const PrepareRequest request = charge("late");
  const Ticket ticket = admitted_ticket(fence->prepare(request));
  REQUIRE(fence->fence_unknown(ticket, "its holder went away"));

  // The late commit reads the intent, then waits for its domain's lock.
  auto domain_lock = pg::Connection::open(ledger.where());
  domain_lock->exec("SELECT pg_advisory_lock(hashtextextended($1, 0))", {pg::param("domain:" + request.domain)});
  std::thread committer([&] { fence->commit(ticket, {{"charge_id", "ch_late"}}); });
  wait_for_lock_waiter(ledger);

  // Meanwhile an operator clears it by SQL (from a connection of its own).
  std::string clear_error;
  std::thread clearer([&] {
    try {
      pg::Connection::open(ledger.where())
          ->run("INSERT INTO clears(intent, operator, reason) VALUES ('late', 'bob', 'provider shows nothing')");
    } catch (const pg::Error& e) {
      clear_error = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the clear runs now, or waits for the commit
  domain_lock.reset();
  committer.join();
  clearer.join();

  // One of them happened first, and the other saw it: a clear refused
  // because the intent is done, or a commit that knows it came after the
  // clear (it records the effect), never a clear a commit overwrote unseen.
  const int64_t clears = ledger.count("SELECT count(*) FROM clears WHERE intent = 'late'");
  const int64_t done = ledger.count("SELECT count(*) FROM intents WHERE intent = 'late' AND state = 'done'");
  const int64_t after_clear = ledger.count(
      "SELECT count(*) FROM events WHERE intent = 'late' AND kind = 'committed' AND "
      "detail LIKE '%\"after_clear\":true%'");
  INFO("clear error: " << clear_error);
  CHECK(done == 1);
  CHECK(after_clear == clears);
  if (clears == 0) CHECK_THAT(clear_error, Catch::Contains("cannot clear"));
}

TEST_CASE("connections the server ended while idle are replaced, and the next decisions go through", "[postgres][pool]") {
  TestLedger ledger;
  const std::string name = connection_name("pool");
  auto fence = open_named_fence(ledger, name);
  std::vector<std::thread> warm;
  for (int i = 0; i < 4; ++i) warm.emplace_back([&, i] { fence->prepare(charge("warm-" + std::to_string(i))); });
  for (auto& t : warm) t.join();

  // What a server restart or an idle-session cut does to the pooled connections.
  REQUIRE(ledger.count("SELECT count(*) FROM pg_stat_activity WHERE application_name = '" + name + "'") > 0);
  ledger.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '" + name + "'");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));

  std::vector<std::string> outcomes(4);
  std::vector<std::thread> after;
  for (int i = 0; i < 4; ++i) {
    after.emplace_back([&, i] { outcomes[i] = outcome_name(fence->prepare(charge("after-" + std::to_string(i)))); });
  }
  for (auto& t : after) t.join();
  for (const std::string& o : outcomes) CHECK(o == "admitted");
}

TEST_CASE("statements prepared before their table's columns changed are prepared again on a fresh connection",
          "[postgres][pool]") {
  TestLedger ledger;
  auto fence = open_named_fence(ledger, connection_name("stale"));
  REQUIRE(std::string(outcome_name(fence->prepare(charge("before")))) == "admitted");
  // What a newer effectfence's migration may do under a running server: a
  // column read by a prepared statement changes type, and PostgreSQL
  // refuses to run that statement again ("cached plan must not change
  // result type") on every connection that prepared it.
  ledger.exec("ALTER TABLE intents ALTER COLUMN payload_hash TYPE varchar");
  CHECK(std::string(outcome_name(fence->prepare(charge("after")))) == "admitted");
}

TEST_CASE("a connection lost while committing is never retried, and the refusal says the decision may be recorded", "[postgres][pool]") {
  TestLedger ledger;
  const std::string name = connection_name("commit");
  auto fence = open_named_fence(ledger, name);
  // A deferred trigger holds the COMMIT of every decision that writes an event, long enough to cut it then.
  ledger.exec("CREATE FUNCTION hold_commit() RETURNS trigger LANGUAGE plpgsql AS "
              "$$ BEGIN PERFORM pg_sleep(3); RETURN NULL; END $$");
  ledger.exec("CREATE CONSTRAINT TRIGGER hold_commit AFTER INSERT ON events DEFERRABLE INITIALLY DEFERRED "
              "FOR EACH ROW EXECUTE FUNCTION hold_commit()");

  PrepareOutcome outcome;
  std::thread decider([&] { outcome = fence->prepare(charge("cut")); });
  const std::string sleeping = "SELECT count(*) FROM pg_stat_activity WHERE application_name = '" + name +
                               "' AND wait_event = 'PgSleep'";
  for (int i = 0; i < 500 && ledger.count(sleeping) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(ledger.count(sleeping) == 1);
  ledger.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '" + name +
              "' AND wait_event = 'PgSleep'");
  decider.join();

  REQUIRE(std::holds_alternative<Refusal>(outcome));
  const Refusal& refusal = std::get<Refusal>(outcome);
  CHECK(refusal.reason == Reason::ledger_error);
  CHECK_THAT(explain(refusal, Step::prepare), Catch::Contains("may or may not have been recorded"));
  CHECK_THAT(explain(refusal, Step::prepare), Catch::Contains("Do not run the tool"));
  // Not retried: the one attempt is all the log shows (the cut one was undone here, so none).
  CHECK(ledger.count("SELECT count(*) FROM events WHERE intent = 'cut'") == 0);
}

TEST_CASE("an admission recorded while its answer was lost with the connection is taken back, and a retry is fresh",
          "[postgres][pool]") {
  TestLedger ledger;
  TempDir relay_dir;
  const std::string url = ledger.where();
  const size_t host_at = url.find("host=") + 5;
  const size_t host_end = url.find('&', host_at);
  const std::string server_dir = url.substr(host_at, host_end - host_at);
  CommitCutter cutter(server_dir + "/.s.PGSQL.5432", relay_dir.path().string());
  Settings settings = ledger.settings();
  settings.ledger_path = url.substr(0, host_at) + relay_dir.path().string() + url.substr(host_end);
  auto fence = open_fence(settings);

  cutter.arm();
  const PrepareOutcome lost = fence->prepare(charge("cut"));
  REQUIRE(cutter.cut());
  REQUIRE(refusal_reason(lost) == Reason::ledger_error);
  CHECK_THAT(explain(std::get<Refusal>(lost), Step::prepare), Catch::Contains("may or may not have been recorded"));
  // It was recorded, and this process holds it: a retry is refused until it is taken back.
  CHECK(ledger.count("SELECT count(*) FROM intents WHERE intent = 'cut' AND state = 'in_flight'") == 1);
  CHECK(refusal_reason(fence->prepare(charge("cut"))) == Reason::in_flight);

  CHECK(FenceInternal::take_back_unanswered(*fence) == 1);
  CHECK(ledger.count("SELECT count(*) FROM events WHERE intent = 'cut' AND kind = 'cleared' AND "
                     "detail::json ->> 'reason' LIKE 'withdrawn: %answer was lost%'") == 1);
  CHECK(std::holds_alternative<Admitted>(fence->prepare(charge("cut"))));
  CHECK(FenceInternal::take_back_unanswered(*fence) == 0);  // each is taken back once
}
