// What the front-door harnesses (stdio, http) share: one fence on a real
// SQLite ledger in a scratch directory for the whole run, a way to tell
// whether anything reached that ledger, and the checks every answer must
// pass whatever line it answers.
#pragma once

#include <sqlite3.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "effectfence/fence.h"
#include "effectfence/json.h"
#include "mcp/jsonrpc.h"
#include "oracle.h"

namespace effectfence::fuzz {

// The fence every input talks to, on a ledger file in /dev/shm (or /tmp),
// removed when the process exits. Intents outlive an input, as they
// outlive a client.
class FuzzLedger {
 public:
  static FuzzLedger& get() {
    static FuzzLedger* ledger = new FuzzLedger();  // never destroyed: calls may still run at exit
    return *ledger;
  }
  Fence& fence() { return *fence_; }

  // A number that changes whenever another connection commits a write to
  // the ledger (SQLite's data_version).
  int64_t version() {
    sqlite3_stmt* q = nullptr;
    int64_t v = -1;
    if (sqlite3_prepare_v2(observer_, "PRAGMA data_version", -1, &q, nullptr) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW) {
      v = sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
    require(v >= 0, std::string("cannot read the ledger's data_version: ") + sqlite3_errmsg(observer_));
    return v;
  }

 private:
  FuzzLedger() {
    const char* base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    dir_ = std::string(base) + "/effectfence-fuzz." + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::atexit([] { std::filesystem::remove_all(get().dir_); });
    Settings s;
    s.ledger_path = dir_ + "/ledger.sqlite";
    auto opened = Fence::open(s);
    if (auto* error = std::get_if<OpenError>(&opened)) oracle_failed("cannot open the fuzz ledger: " + error->message);
    fence_ = std::move(std::get<std::unique_ptr<Fence>>(opened));
    require(sqlite3_open_v2(s.ledger_path.c_str(), &observer_, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK,
            "cannot open the fuzz ledger to observe it");
  }

  std::string dir_;
  std::unique_ptr<Fence> fence_;
  sqlite3* observer_ = nullptr;
};

// The error codes a JSON-RPC error from this server may carry: each has a
// name (mcp/jsonrpc.h), and -32800 is MCP's "request cancelled".
inline bool named_error_code(const Json& code) {
  if (!code.is_number_integer()) return false;
  switch (code.get<int64_t>()) {
    case mcp::jsonrpc::kParseError:
    case mcp::jsonrpc::kInvalidRequest:
    case mcp::jsonrpc::kMethodNotFound:
    case mcp::jsonrpc::kInvalidParams:
    case mcp::jsonrpc::kInternalError:
    case mcp::jsonrpc::kServerBusy:
    case -32800:
      return true;
    default:
      return false;
  }
}

// Every answer is a JSON-RPC 2.0 response: an id, and exactly one of a
// result and an error; an error has a named code and says what is wrong.
inline void check_answer(const Json& answer, const std::string& shown) {
  require(answer.is_object() && answer.value("jsonrpc", "") == "2.0" && answer.contains("id"),
          "an answer that is not a JSON-RPC 2.0 response: " + shown);
  require(answer.contains("result") != answer.contains("error"),
          "an answer with both or neither of result and error: " + shown);
  if (!answer.contains("error")) return;
  const Json& error = answer["error"];
  require(error.is_object() && named_error_code(error.value("code", Json())),
          "an error without a named JSON-RPC code: " + shown);
  require(error.contains("message") && error["message"].is_string() && !error["message"].get<std::string>().empty(),
          "an error without a message: " + shown);
}

// Whether answer, to a tools/call, is a tool's result over arguments it
// took (not a JSON-RPC error, nor a refusal of the arguments themselves):
// the only kind of call that may write to the ledger.
inline bool took_arguments(const Json& answer) {
  if (!answer.contains("result") || !answer["result"].is_object()) return false;
  const Json sc = answer["result"].value("structuredContent", Json::object());
  return !(sc.is_object() && sc.value("reason", "") == "invalid_request");
}

}  // namespace effectfence::fuzz
