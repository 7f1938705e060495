// The intents SQL both ledgers share: one placeholder per column in either
// dialect, every column but the key overwritten on conflict, and the
// version bumped.
#include <catch2/catch.hpp>

#include <algorithm>
#include <stdexcept>

#include "ledger/intent_sql.h"

using namespace effectfence;

namespace {

size_t column_count() {
  const std::string columns = intent_sql::kColumns;
  return static_cast<size_t>(std::count(columns.begin(), columns.end(), ',')) + 1;
}

}  // namespace

TEST_CASE("the intent upsert has one placeholder per column in both dialects", "[ledger][sql]") {
  const size_t n = column_count();
  REQUIRE(n == 22);

  const std::string sqlite = intent_sql::upsert(intent_sql::Placeholders::question_marks);
  CHECK(static_cast<size_t>(std::count(sqlite.begin(), sqlite.end(), '?')) == n);
  CHECK(sqlite.find('$') == std::string::npos);

  const std::string pg = intent_sql::upsert(intent_sql::Placeholders::numbered);
  CHECK(pg.find("$" + std::to_string(n) + ")") != std::string::npos);
  CHECK(pg.find("$" + std::to_string(n + 1)) == std::string::npos);
  CHECK(pg.find('?') == std::string::npos);
}

TEST_CASE("on conflict the upsert overwrites every column but the key and bumps version", "[ledger][sql]") {
  const std::string sql = intent_sql::upsert(intent_sql::Placeholders::question_marks);
  CHECK_THAT(sql, Catch::StartsWith(std::string("INSERT INTO intents (") + intent_sql::kColumns + ") VALUES ("));
  CHECK_THAT(sql, Catch::Contains("ON CONFLICT (intent) DO UPDATE SET state=excluded.state, "));
  CHECK_THAT(sql, Catch::Contains("reason=excluded.reason, version=intents.version + 1"));
  CHECK_THAT(sql, !Catch::Contains("intent=excluded.intent"));
  const std::string sets = sql.substr(sql.find("DO UPDATE SET"));
  CHECK(static_cast<size_t>(std::count(sets.begin(), sets.end(), '=')) == column_count() - 1 + 1);
}

TEST_CASE("a stored JSON column that does not parse names the column", "[ledger][sql]") {
  CHECK(intent_sql::parse_stored("{\"a\":1}", "known_clock")["a"] == 1);
  CHECK_THROWS_WITH(intent_sql::parse_stored("{oops", "read_set"), Catch::Contains("malformed read_set"));
}
