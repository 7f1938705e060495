// effectfence serve's lifecycle: options, ledger selection, refusing bad
// ledger files before answering, and clean shutdown on EOF and signals.
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "serve_process.h"
#include "support/sqlite_query.h"
#include "support/temp_dir.h"

using namespace effectfence::testing;

namespace {

Json prepare_args(const std::string& intent) {
  return Json{{"intent", intent},
              {"domain", "order:" + intent},
              {"tool", "charge"},
              {"args", {{"order", intent}}},
              {"agent", "agent-a"}};
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

// Runs a serve that must refuse its ledger: it exits non-zero, naming the
// error on stderr, without answering the initialize already waiting on stdin.
// The initialize is in the pipe before serve starts: sent afterwards, it
// could find serve already gone (EPIPE) when the test is starved of CPU.
std::string expect_refused_ledger(const std::vector<std::string>& args) {
  const Json initialize{
      {"jsonrpc", "2.0"}, {"id", 1}, {"method", "initialize"}, {"params", {{"protocolVersion", "2025-11-25"}}}};
  ServeProcess serve(args, {}, initialize.dump() + "\n");
  const auto code = serve.wait_exit();
  REQUIRE(code);
  CHECK(*code == 2);  // could not run (docs/OPERATIONS.md, "Exit codes and errors")
  CHECK_FALSE(serve.next_message(100ms));
  CHECK(serve.stdout_lines().empty());
  return serve.stderr_text();
}

void run_sql(const std::string& path, const char* sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  CHECK(sqlite3_exec(db, sql, nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
}

// Starts and stops a serve on path so that it holds a real ledger.
void create_ledger(const std::string& path) {
  ServeProcess serve({"serve", "--db", path});
  serve.initialize();
  serve.close_stdin();
  REQUIRE(serve.wait_exit() == 0);
}

std::string intent_state(const std::string& db, const std::string& intent) {
  ServeProcess serve({"serve", "--db", db});
  serve.initialize();
  Json r = serve.call_tool(1, "fence_status", {{"intent", intent}});
  serve.close_stdin();
  REQUIRE(serve.wait_exit() == 0);
  return r["result"]["structuredContent"]["intent"]["state"];
}

// Waits up to 15 s for serve's log to show text; returns whether it did.
bool stderr_shows(ServeProcess& serve, const std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + 15s;
  while (serve.stderr_text().find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// Prepares and commits a fresh intent through serve (request ids id and
// id + 1); returns its certificate's hash.
std::string commit_intent(ServeProcess& serve, int id, const std::string& intent) {
  Json prepared = serve.call_tool(id, "fence_prepare", prepare_args(intent))["result"]["structuredContent"];
  REQUIRE(prepared["status"] == "fresh");
  Json committed = serve.call_tool(id + 1, "fence_commit",
                                   {{"prepared", prepared["prepared"]}, {"result", {{"charged", intent}}}});
  REQUIRE(committed["result"]["structuredContent"]["status"] == "committed");
  return committed["result"]["structuredContent"]["cert"]["hash"].get<std::string>();
}

// Polls the ledger file, with a connection of its own, until count_sql
// counts no row or bound passes; returns whether it did.
bool no_rows_within(const std::string& db, const std::string& count_sql, std::chrono::milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (query_int64(db, count_sql) != 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

}  // namespace

TEST_CASE("stdin EOF: finish, fence the admission nobody can commit, close the ledger and exit 0",
          "[serve][lifecycle]") {
  TempDir dir;
  const std::string db = dir.file("l.sqlite");
  ServeProcess serve({"serve", "--db", db});
  serve.initialize();
  CHECK(serve.call_tool(1, "fence_prepare", prepare_args("o-eof"))["result"]["structuredContent"]["status"] == "fresh");
  serve.close_stdin();
  CHECK(serve.wait_exit() == 0);
  CHECK_THAT(serve.stderr_text(), Catch::Contains("stdin closed") && Catch::Contains("fenced 1 admission") &&
                                      Catch::Contains("ledger closed"));
  CHECK(intent_state(db, "o-eof") == "unknown");
  // Its agent may still be in the middle of the tool call, ticket in hand.
  CHECK_THAT(query_text(db, "SELECT reason FROM intents WHERE intent = 'o-eof'"),
             Catch::Contains("may still be running the tool, and can still commit it through another server"));
}

TEST_CASE("a client that stops reading: the admission its answer carried is withdrawn, and serve stops",
          "[serve][lifecycle]") {
  TempDir dir;
  const std::string db = dir.file("l.sqlite");
  ServeProcess serve({"serve", "--db", db});
  serve.initialize();
  serve.close_stdout();
  serve.send(Json{{"jsonrpc", "2.0"},
                  {"id", 1},
                  {"method", "tools/call"},
                  {"params", {{"name", "fence_prepare"}, {"arguments", prepare_args("o-unread")}}}});
  CHECK(stderr_shows(serve, "withdrew the admission of o-unread"));
  serve.send(Json{{"jsonrpc", "2.0"}, {"id", 2}, {"method", "ping"}});  // intake stops at the next line
  CHECK(serve.wait_exit() == 0);
  CHECK_THAT(serve.stderr_text(), Catch::Contains("withdrew the admission of o-unread") &&
                                      Catch::Contains("stdout is closed") && !Catch::Contains("fenced 1 admission"));
  CHECK(intent_state(db, "o-unread") == "cleared");  // not in flight, not fenced: a retry is fresh
}

TEST_CASE("an admission serve could not fence on its way out is named in an error, and serve exits 1",
          "[serve][lifecycle]") {
  TempDir dir;
  const std::string db = dir.file("l.sqlite");
  ServeProcess serve({"serve", "--db", db});
  serve.initialize();
  CHECK(serve.call_tool(1, "fence_prepare", prepare_args("o-stuck"))["result"]["structuredContent"]["status"] ==
        "fresh");
  sqlite3* lock = nullptr;  // another process holds the write lock through both tries (10 s busy timeout each)
  REQUIRE(sqlite3_open(db.c_str(), &lock) == SQLITE_OK);
  REQUIRE(sqlite3_exec(lock, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK);
  serve.close_stdin();
  CHECK(serve.wait_exit(60s) == 1);
  REQUIRE(sqlite3_exec(lock, "ROLLBACK", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(lock);
  CHECK_THAT(serve.stderr_text(), Catch::Contains("trying once more") &&
                                      Catch::Contains("left 1 admission(s) in flight that this process could not "
                                                      "fence") &&
                                      Catch::Contains("o-stuck") && Catch::Contains("ledger closed"));
  CHECK(query_int64(db, "SELECT count(*) FROM intents WHERE intent = 'o-stuck' AND state = 'in_flight'") == 1);
}

TEST_CASE("SIGTERM, SIGINT and SIGHUP stop the server cleanly with exit 0", "[serve][lifecycle]") {
  TempDir dir;
  for (auto [sig, name] : {std::pair{SIGTERM, "SIGTERM"}, std::pair{SIGINT, "SIGINT"}, std::pair{SIGHUP, "SIGHUP"}}) {
    ServeProcess serve({"serve", "--db", dir.file("l.sqlite")});
    serve.initialize();  // answered: the handlers are installed
    serve.signal(sig);
    CHECK(serve.wait_exit() == 0);
    CHECK_THAT(serve.stderr_text(), Catch::Contains(std::string("received ") + name) && Catch::Contains("ledger closed"));
  }
}

TEST_CASE("a stop signal stops serve even while its client reads none of its output", "[serve][lifecycle]") {
  // A pipe, or a socket: what Node's child_process gives a child as stdio.
  const bool socket_stdout = GENERATE(false, true);
  CAPTURE(socket_stdout);
  TempDir dir;
  int in[2], out[2];
  REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
  if (socket_stdout) {
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, out) == 0);
    ::shutdown(out[0], SHUT_WR);  // out[0] reads, out[1] writes, as with the pipe
  } else {
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  }
  const std::string binary = EFFECTFENCE_BIN;
  const std::string db = dir.file("l.sqlite");
  const std::string log = dir.file("serve.log");
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(log_fd, 2);
    ::execl(binary.c_str(), binary.c_str(), "serve", "--db", db.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  // Far more answers than the pipe holds, none of them read.
  std::string requests = Json{{"jsonrpc", "2.0"}, {"id", 0}, {"method", "initialize"},
                              {"params", {{"protocolVersion", "2025-11-25"}}}}.dump() + "\n";
  for (int i = 1; i <= 400; ++i) {
    requests += Json{{"jsonrpc", "2.0"}, {"id", i}, {"method", "tools/list"}}.dump() + "\n";
  }
  REQUIRE(::write(in[1], requests.data(), requests.size()) == static_cast<ssize_t>(requests.size()));
  // Signalled once its output is full (and so its signal handling is long in
  // place: a signal during start-up, slow under a sanitizer, would kill it).
  int queued = 0;
  for (int i = 0; i < 3000 && (::ioctl(out[0], FIONREAD, &queued) != 0 || queued < 60000); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(queued >= 60000);
  REQUIRE(::kill(pid, SIGTERM) == 0);

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  int status = 0;
  pid_t done = 0;
  while ((done = ::waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (done == 0) ::kill(pid, SIGKILL), ::waitpid(pid, &status, 0);
  ::close(in[1]);
  ::close(out[0]);
  REQUIRE(done == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // The signal was the cause, and the log says so.
  std::ifstream written(log);
  const std::string text((std::istreambuf_iterator<char>(written)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Catch::Contains("received SIGTERM: stopping") &&
                       !Catch::Contains("stdout is closed (the client stopped reading answers)"));
}

TEST_CASE("SIGTERM finishes the call in flight without admitting it, then fences the admission nobody can commit",
          "[serve][lifecycle]") {
  TempDir dir;
  const std::string db = dir.file("l.sqlite");
  ServeProcess serve({"serve", "--db", db});
  serve.initialize();
  CHECK(serve.call_tool("held", "fence_prepare", prepare_args("o-held"))["result"]["structuredContent"]["status"] ==
        "fresh");

  sqlite3* lock = nullptr;
  REQUIRE(sqlite3_open(db.c_str(), &lock) == SQLITE_OK);
  sqlite3_busy_timeout(lock, 10000);  // serve's start-up housekeeping may hold the lock a moment
  REQUIRE(sqlite3_exec(lock, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK);
  serve.send(Json{{"jsonrpc", "2.0"},
                  {"id", "prep"},
                  {"method", "tools/call"},
                  {"params", {{"name", "fence_prepare"}, {"arguments", prepare_args("o-term")}}}});
  // Lines are read in order: once the ping is answered, the prepare is in flight.
  CHECK(serve.request("ping", "ping")["result"] == Json::object());
  serve.signal(SIGTERM);
  // serve stops admitting before it logs the signal; only then may the prepare reach the ledger.
  CHECK(stderr_shows(serve, "received SIGTERM"));
  REQUIRE(sqlite3_exec(lock, "ROLLBACK", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(lock);

  // Admitted now, it could never be committed (serve reads no more) and would
  // be fenced for an operator at once: it is refused, and nothing runs.
  const Json prepared = serve.response_to("prep")["result"]["structuredContent"];
  CHECK(prepared["status"] == "refused");
  CHECK(prepared["reason"] == "ledger_error");
  CHECK_THAT(prepared.value("explanation", ""), Catch::Contains("this server is stopping"));
  CHECK(serve.wait_exit() == 0);
  CHECK_THAT(serve.stderr_text(), Catch::Contains("received SIGTERM") && Catch::Contains("fenced 1 admission"));
  CHECK(intent_state(db, "o-held") == "unknown");  // answered before the signal: its tool may be running
  CHECK(intent_state(db, "o-term") == "none");
}

TEST_CASE("an empty ledger file (creator died before the schema) is initialised", "[serve][lifecycle]") {
  TempDir dir;
  const std::string db = dir.file("empty.sqlite");
  write_file(db, "");
  ServeProcess serve({"serve", "--db", db});
  Json r = serve.initialize();
  CHECK(r["result"]["protocolVersion"] == "2025-11-25");
  CHECK(serve.call_tool(1, "fence_prepare", prepare_args("o-e"))["result"]["structuredContent"]["status"] == "fresh");
}

TEST_CASE("files that are not a usable ledger are refused with a named error", "[serve][lifecycle]") {
  TempDir dir;
  SECTION("garbage") {
    const std::string db = dir.file("garbage.sqlite");
    write_file(db, std::string(4096, 'G'));
    // The ledger says what is wrong; the CLI adds how to choose another.
    CHECK_THAT(expect_refused_ledger({"serve", "--db", db}),
               Catch::Contains("cannot open ledger: not_a_ledger") && Catch::Contains("Use a new path for the ledger") &&
                   Catch::Contains("(the ledger is --db PATH, else $EFFECTFENCE_LEDGER)"));
    std::ifstream in(db, std::ios::binary);
    CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == std::string(4096, 'G'));  // untouched
  }
  SECTION("garbage, under --shared: the fence's own error refuses the client too, and no lease is left") {
    const std::string db = dir.file("garbage.sqlite");
    write_file(db, std::string(4096, 'G'));
    CHECK_THAT(expect_refused_ledger({"serve", "--shared", "--db", db}),
               Catch::Contains("cannot open ledger: not_a_ledger"));
    CHECK_FALSE(std::filesystem::exists(db + ".server.json"));
  }
  SECTION("another application's SQLite database, left byte for byte as it was (not even switched to WAL)") {
    const std::string db = dir.file("other.sqlite");
    run_sql(db, "CREATE TABLE customers(id INTEGER); INSERT INTO customers VALUES (1)");
    auto bytes = [&] {
      std::ifstream in(db, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), {});
    };
    const std::string before = bytes();
    CHECK_THAT(expect_refused_ledger({"serve", "--db", db}), Catch::Contains("not_a_ledger"));
    CHECK(bytes() == before);
    CHECK_FALSE(std::filesystem::exists(db + "-wal"));
  }
  SECTION("a ledger from a newer effectfence") {
    const std::string db = dir.file("newer.sqlite");
    create_ledger(db);
    run_sql(db, "PRAGMA user_version = 999");
    CHECK_THAT(expect_refused_ledger({"serve", "--db", db}), Catch::Contains("cannot open ledger: newer_schema"));
  }
  SECTION("a ledger whose pages are damaged behind an intact header") {
    const std::string db = dir.file("damaged.sqlite");
    create_ledger(db);
    REQUIRE_FALSE(std::filesystem::exists(db + "-wal"));  // all of it is in the file
    {
      std::fstream file(db, std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(3 * 4096);
      const std::string zeros(5 * 4096, '\0');
      file.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
      REQUIRE(file.good());
    }
    CHECK_THAT(expect_refused_ledger({"serve", "--db", db}),
               Catch::Contains("cannot open ledger: corrupt") && Catch::Contains("integrity_check"));
  }
  SECTION("a ledger whose schema version was reset") {
    const std::string db = dir.file("reset.sqlite");
    create_ledger(db);
    run_sql(db, "PRAGMA user_version = 0");
    CHECK_THAT(expect_refused_ledger({"serve", "--db", db}),
               Catch::Contains("cannot open ledger: corrupt") && Catch::Contains("schema version was set to 0"));
  }
  SECTION("a path that cannot be written") {
    CHECK_THAT(expect_refused_ledger({"serve", "--db", dir.file("no/such/dir/l.sqlite")}),
               Catch::Contains("cannot open ledger: unwritable"));
    CHECK_FALSE(std::filesystem::exists(dir.file("no")));  // an explicit path is never invented
  }
  SECTION("a directory") {
    CHECK_THAT(expect_refused_ledger({"serve", "--db", dir.path().string()}), Catch::Contains("cannot open ledger: "));
  }
}

TEST_CASE("the ledger is --db, else EFFECTFENCE_LEDGER, else the default state path", "[serve][lifecycle]") {
  TempDir dir;
  const std::string state = dir.file("state");
  const std::string from_env = dir.file("env.sqlite");
  const std::string from_flag = dir.file("flag.sqlite");
  const std::string fallback = state + "/effectfence/server.sqlite";
  auto run = [&](std::vector<std::string> args, const EnvChanges& env) {
    ServeProcess serve(std::move(args), env);
    serve.initialize();
    serve.close_stdin();
    REQUIRE(serve.wait_exit() == 0);
  };
  run({"serve", "--db", from_flag}, {{"EFFECTFENCE_LEDGER", from_env}, {"XDG_STATE_HOME", state}});
  CHECK(std::filesystem::exists(from_flag));
  CHECK_FALSE(std::filesystem::exists(from_env));
  run({"serve"}, {{"EFFECTFENCE_LEDGER", from_env}, {"XDG_STATE_HOME", state}});
  CHECK(std::filesystem::exists(from_env));
  CHECK_FALSE(std::filesystem::exists(fallback));
  run({"serve"}, {{"EFFECTFENCE_LEDGER", std::nullopt}, {"XDG_STATE_HOME", state}});
  CHECK(std::filesystem::exists(fallback));
}

TEST_CASE("without XDG_STATE_HOME the ledger is under ~/.local/state, memory keeps no file, the lease comes from the environment",
          "[serve][lifecycle]") {
  TempDir dir;
  const std::string home = dir.file("home");
  std::filesystem::create_directories(home);
  const std::string fallback = home + "/.local/state/effectfence/server.sqlite";

  {  // EFFECTFENCE_LEDGER=memory: decisions work, and nothing is written anywhere.
    ServeProcess serve({"serve"}, {{"EFFECTFENCE_LEDGER", "memory"}, {"XDG_STATE_HOME", std::nullopt}, {"HOME", home}});
    serve.initialize();
    CHECK(serve.call_tool(1, "fence_prepare", prepare_args("o-mem"))["result"]["structuredContent"]["status"] == "fresh");
    serve.close_stdin();
    REQUIRE(serve.wait_exit() == 0);
    CHECK(std::filesystem::is_empty(home));
  }

  {  // No XDG_STATE_HOME: the XDG default under $HOME; EFFECTFENCE_LEASE_SECS sets the lease.
    ServeProcess serve({"serve"}, {{"EFFECTFENCE_LEDGER", std::nullopt},
                                   {"XDG_STATE_HOME", std::nullopt},
                                   {"HOME", home},
                                   {"EFFECTFENCE_LEASE_SECS", "7"}});
    serve.initialize();
    Json prepared = serve.call_tool(1, "fence_prepare", prepare_args("o-lease"));
    CHECK(prepared["result"]["structuredContent"]["status"] == "fresh");
    CHECK(query_int64(fallback, "SELECT lease_expires_at - updated_at FROM intents WHERE intent = 'o-lease'") == 7000);
    serve.close_stdin();
    REQUIRE(serve.wait_exit() == 0);
  }
}

TEST_CASE("wrap without --db keeps one ledger per wrapped command in the state directory", "[serve][lifecycle]") {
  TempDir dir;
  const std::string state = dir.file("state");
  auto wrap_once = [&](const std::string& charges) {
    ServeProcess wrap({"wrap", "--", EFFECTFENCE_BIN, "demo-server", "--charges", dir.file(charges)},
                      {{"EFFECTFENCE_LEDGER", std::nullopt}, {"XDG_STATE_HOME", state}});
    wrap.initialize();
    wrap.close_stdin();
    REQUIRE(wrap.wait_exit() == 0);
  };
  auto ledgers = [&] {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(state + "/effectfence")) {
      const std::string name = entry.path().filename().string();
      if (name.size() > 7 && name.substr(name.size() - 7) == ".sqlite") names.push_back(name);
    }
    return names;
  };
  wrap_once("a.sqlite");
  REQUIRE(ledgers().size() == 1);
  CHECK_THAT(ledgers()[0], Catch::Matches("wrap-[0-9a-f]{16}\\.sqlite"));
  wrap_once("a.sqlite");  // the same command: the same ledger
  CHECK(ledgers().size() == 1);
  wrap_once("b.sqlite");  // another command: a ledger of its own
  CHECK(ledgers().size() == 2);
}

TEST_CASE("a wrapped child inherits only its own standard streams and not the agent's protocol pipe",
          "[serve][lifecycle]") {
  TempDir dir;
  const std::string fds = dir.file("child-fds.txt");
  // ls lists the descriptors it inherited (plus 3, the directory it reads),
  // then the shell becomes the server.
  ServeProcess wrap({"wrap", "--db", dir.file("ledger.sqlite"), "--", "/bin/sh", "-c",
                     "ls /proc/self/fd > '" + fds + "' 2>&1; exec '" + std::string(EFFECTFENCE_BIN) +
                         "' demo-server"});
  wrap.initialize();
  std::ifstream in(fds);
  std::vector<std::string> open;
  for (std::string fd; in >> fd;) open.push_back(fd);
  // A descendant holding the agent's stdout would keep the agent from seeing
  // EOF after wrap exits, and could write into the protocol stream.
  CHECK(open == std::vector<std::string>{"0", "1", "2", "3"});
  wrap.close_stdin();
  CHECK(wrap.wait_exit() == 0);
}

TEST_CASE("SIGTERM while the wrapped child is still in its handshake stops wrap at once, exit 0",
          "[serve][lifecycle]") {
  TempDir dir;
  const std::string started = dir.file("child-started");
  // A child that never answers initialize: wrap would wait a minute for it.
  ServeProcess wrap({"wrap", "--db", dir.file("ledger.sqlite"), "--", "/bin/sh", "-c",
                     "touch '" + started + "'; exec sleep 300"});
  wrap.send({{"jsonrpc", "2.0"},
             {"id", 1},
             {"method", "initialize"},
             {"params",
              {{"protocolVersion", "2025-11-25"},
               {"capabilities", Json::object()},
               {"clientInfo", {{"name", "t"}, {"version", "1"}}}}}});
  // The signal comes once the child is in its handshake.
  for (int i = 0; i < 1500 && !std::filesystem::exists(started); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(std::filesystem::exists(started));
  wrap.signal(SIGTERM);
  const Json answer = wrap.response_to(1);
  CHECK(answer.contains("error"));
  CHECK(wrap.wait_exit(std::chrono::seconds(15)) == 0);
  CHECK_THAT(wrap.stderr_text(), Catch::Contains("while the child server was starting"));
}

TEST_CASE("SIGTERM right after initialize, before the child starts, is not missed: wrap exits 0 at once",
          "[serve][lifecycle]") {
  TempDir dir;
  for (int round = 0; round < 3; ++round) {
    ServeProcess wrap({"wrap", "--db", dir.file("ledger.sqlite"), "--", "/bin/sh", "-c", "exec sleep 300"});
    // Its signal handlers are in place once it says which ledger it fences with.
    for (int i = 0; i < 1500 && wrap.stderr_text().find("fencing with") == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    wrap.send_raw(R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",)"
                  R"("capabilities":{},"clientInfo":{"name":"t","version":"1"}}})" "\n");
    wrap.signal(SIGTERM);  // at once: before, while or after wrap reads the line
    INFO("round " << round);
    CHECK(wrap.wait_exit(std::chrono::seconds(15)) == 0);
  }
}

TEST_CASE("serve --shared on a PostgreSQL ledger needs --lease, and the refusal keeps the password out",
          "[serve][lifecycle]") {
  // No server is asked: the refusal comes before any connection.
  const std::string err =
      expect_refused_ledger({"serve", "--shared", "--db", "postgres://fence:pw-never-printed@db.invalid/ledger"});
  CHECK_THAT(err, Catch::Contains("--shared with a PostgreSQL ledger needs --lease PATH"));
  CHECK_THAT(err, !Catch::Contains("pw-never-printed"));
}

TEST_CASE("help, version, bad options and no arguments", "[serve][lifecycle]") {
  {
    ServeProcess help({"serve", "--help"});
    REQUIRE(help.wait_exit() == 0);
    std::string out;
    while (auto line = help.next_line()) out += *line + "\n";
    CHECK_THAT(out, Catch::Contains("usage: effectfence serve") && Catch::Contains("--db") &&
                        Catch::Contains("EFFECTFENCE_LEDGER"));
  }
  {
    ServeProcess version({"serve", "--version"});
    REQUIRE(version.wait_exit() == 0);
    auto line = version.next_line();
    REQUIRE(line);
    CHECK_THAT(*line, Catch::StartsWith("effectfence "));
  }
  {
    ServeProcess bad({"serve", "--frobnicate"});
    CHECK(bad.wait_exit() == 2);
    CHECK_THAT(bad.stderr_text(), Catch::Contains("unknown option") && Catch::Contains("usage"));
  }
  {
    ServeProcess bad_level({"serve", "--log-level", "loud"});
    CHECK(bad_level.wait_exit() == 2);
  }
  {
    ServeProcess bare({});
    CHECK(bare.wait_exit() != 0);
    CHECK_THAT(bare.stderr_text(), Catch::Contains("usage: effectfence"));
  }
}

TEST_CASE("decisions queued behind a locked ledger share transactions, fence_stats and the exit log say so",
          "[serve][lifecycle]") {
  TempDir dir;
  const std::string db = dir.file("l.sqlite");
  ServeProcess serve({"serve", "--db", db});
  serve.initialize();
  const Json before = serve.call_tool(1, "fence_stats", Json::object())["result"]["structuredContent"]["batching"];

  // While another process holds the write lock, the prepares pile up in
  // serve's queue; once it is released they go out in few transactions.
  constexpr int kPrepares = 8;
  sqlite3* lock = nullptr;
  REQUIRE(sqlite3_open(db.c_str(), &lock) == SQLITE_OK);
  sqlite3_busy_timeout(lock, 10000);  // serve's start-up housekeeping may hold the lock a moment
  REQUIRE(sqlite3_exec(lock, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK);
  for (int i = 0; i < kPrepares; ++i) {
    serve.send(Json{{"jsonrpc", "2.0"},
                    {"id", 100 + i},
                    {"method", "tools/call"},
                    {"params", {{"name", "fence_prepare"}, {"arguments", prepare_args("o-batch-" + std::to_string(i))}}}});
  }
  CHECK(serve.request("ping", "ping")["result"] == Json::object());  // every prepare has been read
  REQUIRE(sqlite3_exec(lock, "ROLLBACK", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(lock);
  for (int i = 0; i < kPrepares; ++i) {
    CHECK(serve.response_to(100 + i)["result"]["structuredContent"]["status"] == "fresh");
  }

  const Json after = serve.call_tool(2, "fence_stats", Json::object())["result"]["structuredContent"]["batching"];
  const int64_t decisions = after["decisions"].get<int64_t>() - before["decisions"].get<int64_t>();
  const int64_t transactions = after["transactions"].get<int64_t>() - before["transactions"].get<int64_t>();
  CHECK(decisions >= kPrepares);
  CHECK(transactions >= 1);
  // The one waiting for the lock, then the rest together (plus one for each
  // write serve's maintenance thread may have slipped in meanwhile).
  CHECK(transactions <= 3 + (decisions - kPrepares));
  CHECK(after["queued"] == 0);

  serve.close_stdin();
  REQUIRE(serve.wait_exit() == 0);
  std::smatch m;
  const std::string log = serve.stderr_text();
  REQUIRE(std::regex_search(log, m, std::regex(R"(ledger: (\d+) decision\(s\) in (\d+) transaction\(s\), [0-9.]+ per transaction)")));
  CHECK(std::stol(m[1]) >= after["decisions"].get<int64_t>());
  CHECK(std::stol(m[2]) >= after["transactions"].get<int64_t>());
  CHECK(std::stol(m[2]) < std::stol(m[1]));
}

TEST_CASE("a server started while an operator holds the ledger's write lock answers initialize, and decides once "
          "the lock is let go", "[serve][lifecycle][busy]") {
  TempDir dir;
  const std::string db = dir.file("l.sqlite");
  {
    ServeProcess create({"serve", "--db", db});  // a ledger at the current schema
    create.initialize();
    create.close_stdin();
    REQUIRE(create.wait_exit() == 0);
  }
  // An operator's open transaction at the sqlite3 prompt: it holds the write lock.
  sqlite3* op = nullptr;
  REQUIRE(sqlite3_open(db.c_str(), &op) == SQLITE_OK);
  REQUIRE(sqlite3_exec(op, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK);

  const auto started = std::chrono::steady_clock::now();
  ServeProcess serve({"serve", "--db", db});
  const Json init = serve.initialize();
  REQUIRE(init.contains("result"));
  // Well within the busy timeout (10 s) it would have waited before exiting 2.
  CHECK(std::chrono::steady_clock::now() - started < 5s);
  CHECK(serve.request(2, "tools/list")["result"]["tools"].size() > 0);

  serve.send(Json{{"jsonrpc", "2.0"}, {"id", 3}, {"method", "tools/call"},
                  {"params", {{"name", "fence_prepare"}, {"arguments", prepare_args("o-locked")}}}});
  CHECK(serve.request("ping", "ping")["result"] == Json::object());  // read, and waiting for the lock
  REQUIRE(sqlite3_exec(op, "ROLLBACK", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(op);
  CHECK(serve.response_to(3)["result"]["structuredContent"]["status"] == "fresh");

  serve.close_stdin();
  CHECK(serve.wait_exit() == 0);
}

TEST_CASE("serve sweeps intents finished longer ago than EFFECTFENCE_RESULT_TTL_SECS: the certificate stays, "
          "younger results still replay, and only then is a duplicate new again",
          "[serve][lifecycle]") {
  TempDir dir;
  const std::string db = dir.file("l.sqlite");
  // o-old is dated back past the TTL rather than waited for: a wait, under
  // load, could age o-young past it too.
  constexpr int kTtlSecs = 600;
  std::string old_hash;
  {
    // The same TTL (its start-up sweep finds nothing yet): a longer one,
    // recorded in the ledger, would keep these results from the next server.
    ServeProcess serve({"serve", "--db", db}, {{"EFFECTFENCE_RESULT_TTL_SECS", std::to_string(kTtlSecs)}});
    serve.initialize();
    old_hash = commit_intent(serve, 1, "o-old");
    commit_intent(serve, 3, "o-young");
    serve.close_stdin();
    REQUIRE(serve.wait_exit() == 0);
  }
  const std::string done_kept =
      query_text(db, "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'intents_done_kept'");
  exec_sql(db, "BEGIN IMMEDIATE; DROP TRIGGER intents_done_kept; "
               "UPDATE intents SET updated_at = updated_at - " + std::to_string((kTtlSecs + 100) * 1000) +
               " WHERE intent = 'o-old'; " + done_kept + "; COMMIT");
  CHECK(query_int64(db, "SELECT count(*) FROM events WHERE kind = 'swept'") == 0);

  // serve sweeps once when it starts, then every few minutes.
  ServeProcess serve({"serve", "--db", db, "--log-level", "debug"},
                     {{"EFFECTFENCE_RESULT_TTL_SECS", std::to_string(kTtlSecs)}});
  serve.initialize();
  for (int i = 0; i < 100 && query_int64(db, "SELECT count(*) FROM events WHERE kind = 'swept'") == 0; ++i) {
    std::this_thread::sleep_for(100ms);
  }
  REQUIRE(query_int64(db, "SELECT count(*) FROM events WHERE kind = 'swept'") == 1);
  CHECK(query_int64(db, "SELECT json_extract(detail, '$.intents') FROM events WHERE kind = 'swept'") == 1);
  CHECK(query_int64(db, "SELECT count(*) FROM intents WHERE intent = 'o-old'") == 0);
  CHECK(query_int64(db, "SELECT count(*) FROM certificates WHERE intent = 'o-old' AND hash = '" + old_hash + "'") == 1);

  Json young = serve.call_tool(10, "fence_prepare", prepare_args("o-young"))["result"]["structuredContent"];
  CHECK(young["status"] == "already_done");
  Json old = serve.call_tool(11, "fence_prepare", prepare_args("o-old"))["result"]["structuredContent"];
  CHECK(old["status"] == "fresh");
  // The domain keeps counting: the new attempt never reuses the old number.
  CHECK(old["prepared"]["seq"].get<int64_t>() >
        query_int64(db, "SELECT seq FROM certificates WHERE hash = '" + old_hash + "'"));
  serve.close_stdin();
  REQUIRE(serve.wait_exit() == 0);
  CHECK_THAT(serve.stderr_text(), Catch::Contains("swept 1 finished intent(s) past their TTL"));
}

TEST_CASE("serve sweeps again every EFFECTFENCE_SWEEP_INTERVAL_SECS while it runs, not only when it starts",
          "[serve][lifecycle]") {
  TempDir dir;
  const std::string db = dir.file("l.sqlite");
  // Results replay for 1 ms and sweeps come every 0.2 s: at the default ten
  // minutes, nothing committed after the sweep at start would go in 20 s.
  ServeProcess serve({"serve", "--db", db, "--log-level", "debug"},
                     {{"EFFECTFENCE_RESULT_TTL_SECS", "0.001"}, {"EFFECTFENCE_SWEEP_INTERVAL_SECS", "0.2"}});
  serve.initialize();
  // The second intent is committed only once the first is gone: the sweep at
  // start, however late it ran, can have removed the first at most, so the
  // second goes only through a sweep that came after it.
  std::vector<std::string> hashes;
  int id = 1;
  for (const std::string intent : {"p-first", "p-second"}) {
    INFO(intent);
    hashes.push_back(commit_intent(serve, id, intent));
    id += 2;
    REQUIRE(no_rows_within(db, "SELECT count(*) FROM intents WHERE intent = '" + intent + "'", 20s));
  }
  CHECK_FALSE(serve.wait_exit(0ms));  // swept by the running serve, which has not been asked to stop
  for (const std::string& hash : hashes) {
    CHECK(query_int64(db, "SELECT count(*) FROM certificates WHERE hash = '" + hash + "'") == 1);
  }
  // One event per sweep that removed something, each naming its one intent.
  CHECK(query_int64(db, "SELECT count(*) FROM events WHERE kind = 'swept'") == 2);
  CHECK(query_int64(db, "SELECT count(*) FROM events WHERE kind = 'swept' AND json_extract(detail, '$.intents') = 1") ==
        2);
  serve.close_stdin();
  REQUIRE(serve.wait_exit() == 0);
  CHECK_THAT(serve.stderr_text(), Catch::Contains("swept 1 finished intent(s) past their TTL"));
}
