// effectfence serve over real pipes: framing, JSON-RPC errors, bad input,
// and concurrency. Each test starts the real binary on a fresh ledger file.
#include <sqlite3.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "serve_process.h"
#include "support/temp_dir.h"

using namespace effectfence::testing;

namespace {

struct Session {
  TempDir dir;
  std::string db = dir.file("ledger.sqlite");
  ServeProcess serve{{"serve", "--db", db}};
};

Json prepare_args(const std::string& intent) {
  return Json{{"intent", intent},
              {"domain", "order:" + intent},
              {"tool", "charge"},
              {"args", {{"order", intent}, {"amount_cents", 4900}}},
              {"agent", "agent-a"}};
}

int error_code(const Json& response) { return response.at("error").at("code").get<int>(); }
std::string error_message(const Json& response) { return response.at("error").at("message").get<std::string>(); }

}  // namespace

TEST_CASE("initialize echoes a supported protocol version and answers the latest otherwise", "[serve]") {
  for (const char* version : {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}) {
    Session s;
    Json r = s.serve.request(version, "initialize", {{"protocolVersion", version}, {"capabilities", Json::object()}});
    CHECK(r["result"]["protocolVersion"] == version);
  }
  Session s;
  Json r = s.serve.initialize("2023-01-01");
  CHECK(r["result"]["protocolVersion"] == "2025-11-25");
  CHECK(r["result"]["serverInfo"]["name"] == "effectfence");
  CHECK(r["result"]["capabilities"].contains("tools"));
  // A session is initialized once; the second handshake is refused and the
  // session goes on.
  Json again = s.serve.request(2, "initialize", {{"protocolVersion", "2025-06-18"}});
  CHECK(error_code(again) == -32600);
  CHECK_THAT(again["error"]["message"].get<std::string>(), Catch::Contains("already initialized (protocol 2025-11-25)"));
  CHECK(s.serve.request(3, "ping")["result"] == Json::object());
}

TEST_CASE("string and integer ids come back unchanged", "[serve]") {
  Session s;
  s.serve.initialize();
  Json by_string = s.serve.request("abc", "ping");
  CHECK(by_string["id"] == "abc");
  CHECK(by_string["result"] == Json::object());
  Json by_integer = s.serve.request(42, "ping");
  CHECK(by_integer["id"].is_number_integer());
  CHECK(by_integer["id"] == 42);
  Json by_string_digits = s.serve.request("42", "ping");
  CHECK(by_string_digits["id"].is_string());
}

TEST_CASE("protocol errors: unknown method, malformed JSON, batches, bad params", "[serve]") {
  Session s;
  s.serve.initialize();

  Json unknown = s.serve.request(1, "no/such/method");
  CHECK(error_code(unknown) == -32601);

  s.serve.send_raw("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\n");
  auto malformed = s.serve.next_message();
  REQUIRE(malformed);
  CHECK((*malformed)["error"]["code"] == -32700);
  CHECK((*malformed)["id"].is_null());

  s.serve.send_raw("[{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}]\n");
  auto batch = s.serve.next_message();
  REQUIRE(batch);
  CHECK((*batch)["error"]["code"] == -32600);
  CHECK_THAT((*batch)["error"]["message"].get<std::string>(), Catch::Contains("batch"));

  Json no_version = s.serve.request(4, "initialize", {{"capabilities", Json::object()}});
  CHECK(error_code(no_version) == -32602);

  s.serve.send_raw("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\",\"params\":[1,2]}\n");
  CHECK(error_code(s.serve.response_to(5)) == -32602);

  CHECK(s.serve.request(6, "ping")["result"] == Json::object());
}

TEST_CASE("invalid UTF-8 is a parse error and the server keeps serving", "[serve]") {
  Session s;
  s.serve.initialize();
  s.serve.send_raw("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"fence_status\","
                   "\"arguments\":{\"intent\":\"caf\xe9\"}}}\n");
  auto bad = s.serve.next_message();
  REQUIRE(bad);
  CHECK((*bad)["error"]["code"] == -32700);
  CHECK_THAT((*bad)["error"]["message"].get<std::string>(), Catch::Contains("UTF-8"));
  CHECK(s.serve.request(2, "ping")["result"] == Json::object());
}

TEST_CASE("ambiguous JSON in tool arguments is refused with the request's id", "[serve]") {
  Session s;
  s.serve.initialize();
  s.serve.send_raw(
      "{\"jsonrpc\":\"2.0\",\"id\":\"dup\",\"method\":\"tools/call\",\"params\":{\"name\":\"fence_prepare\","
      "\"arguments\":{\"intent\":\"i\",\"domain\":\"d\",\"tool\":\"t\",\"agent\":\"a\","
      "\"args\":{\"amount\":1,\"amount\":1000}}}}\n");
  Json duplicate = s.serve.response_to("dup");
  CHECK(error_code(duplicate) == -32602);
  CHECK_THAT(error_message(duplicate), Catch::Contains("duplicate"));

  s.serve.send_raw(
      "{\"jsonrpc\":\"2.0\",\"id\":\"big\",\"method\":\"tools/call\",\"params\":{\"name\":\"fence_prepare\","
      "\"arguments\":{\"intent\":\"i\",\"domain\":\"d\",\"tool\":\"t\",\"agent\":\"a\","
      "\"args\":{\"amount\":9007199254740993}}}}\n");
  Json unsafe = s.serve.response_to("big");
  CHECK(error_code(unsafe) == -32602);

  // Nothing was admitted by either.
  Json status = s.serve.call_tool(3, "fence_status", {{"intent", "i"}});
  CHECK(status["result"]["structuredContent"]["intent"]["state"] == "none");
}

TEST_CASE("an oversized line is refused as too large and the next one is served", "[serve]") {
  Session s;
  s.serve.initialize();
  const std::string head = "{\"jsonrpc\":\"2.0\",\"id\":\"huge\",\"method\":\"tools/call\",\"params\":{\"name\":"
                           "\"fence_status\",\"arguments\":{\"intent\":\"";
  const std::string line = head + std::string(4 * 1024 * 1024, 'x') + "\"}}}\n";
  s.serve.send_raw(line);
  Json huge = s.serve.response_to("huge");
  CHECK(error_code(huge) == -32600);
  CHECK_THAT(error_message(huge), Catch::Contains("too large") && Catch::Contains("4194304"));
  CHECK(s.serve.request("after", "ping")["result"] == Json::object());

  // Written id last, as the TypeScript SDK writes every request: still
  // answered to its id, not left to time out.
  s.serve.send_raw("{\"method\":\"tools/call\",\"params\":{\"name\":\"fence_commit\",\"arguments\":{\"result\":\"" +
                   std::string(5 * 1024 * 1024, 'y') + "\"}},\"jsonrpc\":\"2.0\",\"id\":41}\n");
  Json last = s.serve.response_to(41);
  CHECK(error_code(last) == -32600);
  CHECK_THAT(error_message(last), Catch::Contains("too large"));
  CHECK(s.serve.request("after-2", "ping")["result"] == Json::object());
}

TEST_CASE("notifications get no response", "[serve]") {
  Session s;
  s.serve.initialize();
  s.serve.send(Json{{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}, {"params", {{"requestId", 99}}}});
  s.serve.send(Json{{"jsonrpc", "2.0"}, {"method", "notifications/unheard_of"}});
  s.serve.send(Json{{"jsonrpc", "2.0"}, {"id", "p"}, {"method", "ping"}});
  auto next = s.serve.next_message();
  REQUIRE(next);
  CHECK((*next)["id"] == "p");
}

TEST_CASE("an unknown tool is -32602, arguments a tool refuses are a refusal the model can read and correct",
          "[serve]") {
  Session s;
  s.serve.initialize();
  Json unknown = s.serve.call_tool(1, "fence_nonsense", Json::object());
  CHECK(error_code(unknown) == -32602);
  CHECK_THAT(error_message(unknown), Catch::Contains("unknown tool") && Catch::Contains("fence_prepare"));

  // MCP 2025-11-25: input validation errors are tool execution errors.
  auto refused_for = [](const Json& response) {
    INFO(response.dump());
    CHECK(response["result"]["isError"] == true);
    const Json& sc = response["result"]["structuredContent"];
    CHECK(sc["status"] == "refused");
    CHECK(sc["reason"] == "invalid_request");
    CHECK(Json::parse(response["result"]["content"][0]["text"].get<std::string>()) == sc);
    return sc.value("explanation", "");
  };
  Json missing = prepare_args("o-1");
  missing.erase("intent");
  CHECK_THAT(refused_for(s.serve.call_tool(2, "fence_prepare", missing)), Catch::Contains("intent"));

  Json wrong_type = prepare_args("o-1");
  wrong_type["args"] = "amount=5";
  CHECK_THAT(refused_for(s.serve.call_tool(3, "fence_prepare", wrong_type)), Catch::Contains("/args"));
  // And what only the handler can tell (a negative sequence number).
  Json bad_read_set = prepare_args("o-1");
  bad_read_set["read_set"] = Json::array({{{"domain", "d"}, {"seq", -1}}});
  CHECK_THAT(refused_for(s.serve.call_tool(5, "fence_prepare", bad_read_set)), Catch::Contains("read_set"));

  Json fresh = s.serve.call_tool(4, "fence_prepare", prepare_args("o-1"));
  CHECK(fresh["result"]["structuredContent"]["status"] == "fresh");
}

TEST_CASE("tools/list: every tool has input and output schemas", "[serve]") {
  Session s;
  s.serve.initialize();
  Json tools = s.serve.request(1, "tools/list")["result"]["tools"];
  std::vector<std::string> names;
  for (const auto& tool : tools) {
    names.push_back(tool["name"]);
    CHECK(tool["inputSchema"]["type"] == "object");
    CHECK(tool["outputSchema"]["type"] == "object");
    CHECK(tool["description"].get<std::string>().size() > 40);
  }
  CHECK(names == std::vector<std::string>{"fence_prepare", "fence_commit", "fence_abort", "fence_heartbeat",
                                          "fence_status", "fence_stats"});
}

TEST_CASE("refusals are isError results with a status, a reason and advice", "[serve]") {
  Session s;
  s.serve.initialize();
  REQUIRE(s.serve.call_tool(1, "fence_prepare", prepare_args("o-2"))["result"]["structuredContent"]["status"] ==
          "fresh");
  Json result = s.serve.call_tool(2, "fence_prepare", prepare_args("o-2"))["result"];
  CHECK(result["isError"] == true);
  CHECK(result["structuredContent"]["status"] == "refused");
  CHECK(result["structuredContent"]["reason"] == "in_flight");
  CHECK_THAT(result["structuredContent"]["message"].get<std::string>(),
             Catch::Contains("do not run the tool; retry fence_prepare in a few seconds"));
  CHECK(Json::parse(result["content"][0]["text"].get<std::string>()) == result["structuredContent"]);
}

TEST_CASE("a call blocked on the ledger does not hold up other requests", "[serve]") {
  Session s;
  s.serve.initialize();
  // The ledger exists once serve answered; take its write lock from outside.
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(s.db.c_str(), &db) == SQLITE_OK);
  sqlite3_busy_timeout(db, 10000);  // serve's start-up housekeeping may hold the lock a moment
  REQUIRE(sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK);

  auto prepare = [](const char* id) {
    return Json{{"jsonrpc", "2.0"},
                {"id", id},
                {"method", "tools/call"},
                {"params", {{"name", "fence_prepare"}, {"arguments", prepare_args("o-3")}}}};
  };
  // Two attempts of one intent: whichever reaches the fence first waits for
  // the disk; the other is refused at once, while the first still waits.
  s.serve.send(prepare("a"));
  s.serve.send(prepare("b"));
  s.serve.send(Json{{"jsonrpc", "2.0"}, {"id", "quick"}, {"method", "ping"}});
  auto first = s.serve.next_message();
  auto second = s.serve.next_message();
  REQUIRE(first);
  REQUIRE(second);
  INFO("first: " << first->dump() << "\nsecond: " << second->dump());
  const Json& refused = (*first)["id"] == "quick" ? *second : *first;
  const Json& ping = (*first)["id"] == "quick" ? *first : *second;
  CHECK(ping["id"] == "quick");
  CHECK(refused["result"]["structuredContent"]["reason"] == "in_flight");
  const std::string waiting = refused["id"] == "a" ? "b" : "a";

  REQUIRE(sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  Json admitted = s.serve.response_to(waiting);
  INFO(admitted.dump());
  CHECK(admitted["result"]["structuredContent"]["status"] == "fresh");
}

TEST_CASE("a fence_prepare cancelled before its answer went out is withdrawn: a retry is fresh at once, not after "
          "the lease, and no operator is needed",
          "[serve]") {
  Session s;
  s.serve.initialize();
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(s.db.c_str(), &db) == SQLITE_OK);
  sqlite3_busy_timeout(db, 10000);
  REQUIRE(sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK);
  // The prepare waits for the disk; the client gives up on it meanwhile
  // (the official SDK sends this when its request timeout fires).
  s.serve.send(Json{{"jsonrpc", "2.0"},
                    {"id", "gave-up"},
                    {"method", "tools/call"},
                    {"params", {{"name", "fence_prepare"}, {"arguments", prepare_args("o-cancelled")}}}});
  s.serve.send(Json{{"jsonrpc", "2.0"},
                    {"method", "notifications/cancelled"},
                    {"params", {{"requestId", "gave-up"}, {"reason", "request timed out"}}}});
  s.serve.send(Json{{"jsonrpc", "2.0"}, {"id", "after-cancel"}, {"method", "ping"}});
  REQUIRE(s.serve.response_to("after-cancel")["result"].is_object());  // the cancellation was read
  REQUIRE(sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr) == SQLITE_OK);

  // Decided and withdrawn in the background: within seconds, far inside
  // the lease (60 s), the same intent is fresh again.
  Json retry;
  for (int attempt = 0; attempt < 50; ++attempt) {
    retry = s.serve.call_tool(100 + attempt, "fence_prepare", prepare_args("o-cancelled"))["result"];
    if (retry["structuredContent"]["status"] != "refused") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  INFO(retry.dump());
  CHECK(retry["structuredContent"]["status"] == "fresh");
  CHECK(retry["structuredContent"]["prepared"]["generation"] == 2);  // the withdrawn admission was the first

  auto count = [&](const char* sql) {
    sqlite3_stmt* q = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, sql, -1, &q, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(q) == SQLITE_ROW);
    const int n = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    return n;
  };
  CHECK(count("SELECT count(*) FROM events WHERE intent = 'o-cancelled' AND kind = 'aborted'") == 1);
  CHECK(count("SELECT count(*) FROM events WHERE intent = 'o-cancelled' AND kind = 'cleared' AND "
              "json_extract(detail, '$.reason') LIKE 'withdrawn: %'") == 1);
  sqlite3_close(db);
  s.serve.close_stdin();
  REQUIRE(s.serve.wait_exit() == 0);
  for (const auto& line : s.serve.stdout_lines()) CHECK(Json::parse(line).value("id", Json()) != "gave-up");
}

TEST_CASE("stdout carries only JSON-RPC, stderr carries one-line levelled logs", "[serve]") {
  Session s;
  s.serve.initialize();
  s.serve.send_raw("not json\n");
  s.serve.call_tool(1, "fence_prepare", prepare_args("o-4"));
  s.serve.close_stdin();
  while (s.serve.next_message()) {
  }
  REQUIRE(s.serve.wait_exit() == 0);
  for (const auto& line : s.serve.stdout_lines()) {
    Json message = Json::parse(line);
    CHECK(message["jsonrpc"] == "2.0");
  }
  const std::regex log_line("effectfence serve: (error|warn|info|debug): .+");
  const std::string err = s.serve.stderr_text();
  REQUIRE_FALSE(err.empty());
  size_t start = 0;
  while (start < err.size()) {
    const size_t end = err.find('\n', start);
    REQUIRE(end != std::string::npos);
    const std::string line = err.substr(start, end - start);
    CHECK(std::regex_match(line, log_line));
    start = end + 1;
  }
  CHECK_THAT(err, Catch::Contains("warn: refused a message: parse error"));
}

TEST_CASE("numbers RFC 8785 writes as wide integers (1e20) are recorded, replayed after a restart, and verify",
          "[serve]") {
  // The double 1e20 is written 100000000000000000000 in canonical JSON, an
  // integer literal the fence refuses as input: what it recorded itself
  // must still read back as the double it hashed.
  TempDir dir;
  const std::string db = dir.file("ledger.sqlite");
  Json prepare = prepare_args("o-wide");
  prepare["args"]["amount"] = 1e18;
  const Json result = {{"amount", 1e20}, {"fee", 2.5e17}};
  std::string hash;
  {
    ServeProcess serve{{"serve", "--db", db}};
    serve.initialize();
    const Json fresh = serve.call_tool(1, "fence_prepare", prepare)["result"]["structuredContent"];
    REQUIRE(fresh["status"] == "fresh");
    const Json committed =
        serve.call_tool(2, "fence_commit", {{"prepared", fresh["prepared"]}, {"result", result}})["result"];
    REQUIRE(committed["structuredContent"]["status"] == "committed");
    hash = committed["structuredContent"]["cert"]["hash"].get<std::string>();
    serve.close_stdin();
    REQUIRE(serve.wait_exit() == 0);
  }
  {
    // A new process: nothing cached, every value read from the ledger.
    ServeProcess serve{{"serve", "--db", db}};
    serve.initialize();
    const Json replay = serve.call_tool(1, "fence_prepare", prepare)["result"]["structuredContent"];
    REQUIRE(replay["status"] == "already_done");
    CHECK(replay["cert"]["hash"] == hash);
    CHECK(replay["cert"]["result"] == result);
    CHECK(replay["cert"]["args"]["amount"] == 1e18);
    // The next effect on the domain reads the certificate before it to chain to it.
    Json next = prepare_args("o-wide-2");
    next["domain"] = prepare["domain"];
    next["parent"] = hash;
    const Json fresh = serve.call_tool(2, "fence_prepare", next)["result"]["structuredContent"];
    REQUIRE(fresh["status"] == "fresh");
    const Json committed =
        serve.call_tool(3, "fence_commit", {{"prepared", fresh["prepared"]}, {"result", {{"ok", true}}}})["result"];
    CHECK(committed["structuredContent"]["status"] == "committed");
    serve.close_stdin();
    REQUIRE(serve.wait_exit() == 0);
  }
  ServeProcess verify{{"verify", "--db", db}};
  CHECK(verify.wait_exit() == 0);
  const std::string dump = dir.file("audit.jsonl");
  ServeProcess exporter{{"export", "--db", db, "--out", dump}};
  REQUIRE(exporter.wait_exit() == 0);
  ServeProcess verify_export{{"verify", "--export", dump}};
  CHECK(verify_export.wait_exit() == 0);
}
