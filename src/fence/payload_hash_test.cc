// The payload hash that tells one action from another under one intent id
// is stored in every ledger: its formula must never drift.
#include <sqlite3.h>

#include <catch2/catch.hpp>

#include "core/sha256.h"
#include "support/fence_helpers.h"
#include "support/temp_dir.h"

using namespace effectfence;
using namespace effectfence::testing;

namespace {

std::string stored_payload_hash(const std::string& path, const std::string& intent) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "SELECT payload_hash FROM intents WHERE intent = ?", -1, &q, nullptr) == SQLITE_OK);
  sqlite3_bind_text(q, 1, intent.c_str(), -1, SQLITE_TRANSIENT);
  REQUIRE(sqlite3_step(q) == SQLITE_ROW);
  std::string hash = reinterpret_cast<const char*>(sqlite3_column_text(q, 0));
  sqlite3_finalize(q);
  sqlite3_close(db);
  return hash;
}

}  // namespace

TEST_CASE("the payload hash is SHA-256 of the canonical {tool, args}", "[fence][payload]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  auto fence = open_fence(file_settings(path));
  PrepareRequest request = charge("p-1");
  request.tool = "pay \"quoted\" \xC3\xA9";
  request.args = Json::parse(R"({"z": [1, 2.5, {"b": null, "a": "\u00e9\n"}], "a": true, "\u20ac": -0})");
  admitted_ticket(fence->prepare(request));
  const std::string expected = sha256_hex(canonicalize(Json{{"tool", request.tool}, {"args", request.args}}));
  CHECK(stored_payload_hash(path, "p-1") == expected);
  // Written differently, the same arguments are the same action.
  PrepareRequest reordered = request;
  reordered.args = Json::parse(R"({"\u20ac": 0, "a": true, "z": [1, 25e-1, {"a": "\u00e9\n", "b": null}]})");
  CHECK(refusal_reason(fence->prepare(reordered)) == Reason::in_flight);  // not payload_mismatch
}
