// The intents SQL of both ledgers: one placeholder per column, every column
// but the key overwritten, and the version bumped.
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

TEST_CASE("the PostgreSQL upsert has one numbered placeholder per column", "[ledger][sql]") {
  const size_t n = column_count();
  REQUIRE(n == 22);
  const std::string pg = intent_sql::upsert();
  CHECK(pg.find("$" + std::to_string(n) + ")") != std::string::npos);
  CHECK(pg.find("$" + std::to_string(n + 1)) == std::string::npos);
  CHECK(pg.find('?') == std::string::npos);
}

TEST_CASE("on conflict the upsert overwrites every column but the key and bumps version", "[ledger][sql]") {
  const std::string sql = intent_sql::upsert();
  CHECK_THAT(sql, Catch::StartsWith(std::string("INSERT INTO intents (") + intent_sql::kColumns + ") VALUES ("));
  CHECK_THAT(sql, Catch::Contains("ON CONFLICT (intent) DO UPDATE SET state=excluded.state, "));
  CHECK_THAT(sql, Catch::Contains("reason=excluded.reason, version=intents.version + 1"));
  CHECK_THAT(sql, !Catch::Contains("intent=excluded.intent"));
  const std::string sets = sql.substr(sql.find("DO UPDATE SET"));
  CHECK(static_cast<size_t>(std::count(sets.begin(), sets.end(), '=')) == column_count() - 1 + 1);
}

TEST_CASE("SQLite's update and insert bind the same numbered parameters in column order", "[ledger][sql]") {
  const size_t n = column_count();
  const std::string update = intent_sql::update_row();
  CHECK_THAT(update, Catch::StartsWith("UPDATE intents SET state=?2, domain=?3, "));
  CHECK_THAT(update, Catch::EndsWith("reason=?22, version=version + 1 WHERE intent=?1"));
  CHECK_THAT(update, !Catch::Contains("intent=?1,"));
  CHECK(static_cast<size_t>(std::count(update.begin(), update.end(), '?')) == n);

  const std::string insert = intent_sql::insert_row('?');
  CHECK(insert == std::string("INSERT INTO intents (") + intent_sql::kColumns + ") VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,"
                  "?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22)");
  CHECK_THAT(insert, !Catch::Contains("ON CONFLICT"));
}

TEST_CASE("PostgreSQL's insert of a new intent and both ledgers' outcome write", "[ledger][sql]") {
  CHECK(intent_sql::insert_row('$') == std::string("INSERT INTO intents (") + intent_sql::kColumns +
                                           ") VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,"
                                           "$18,$19,$20,$21,$22)");
  // Only the outcome's columns: never the holder, token, lease or args.
  CHECK(intent_sql::outcome_update('$') ==
        "UPDATE intents SET state = $2, cert_hash = $3, reason = $4, updated_at = $5, version = version + 1 "
        "WHERE intent = $1");
  CHECK(intent_sql::outcome_update('?') ==
        "UPDATE intents SET state = ?2, cert_hash = ?3, reason = ?4, updated_at = ?5, version = version + 1 "
        "WHERE intent = ?1");
}

TEST_CASE("a stored JSON column that does not parse names the column", "[ledger][sql]") {
  CHECK(intent_sql::parse_stored("{\"a\":1}", "known_clock")["a"] == 1);
  CHECK_THROWS_WITH(intent_sql::parse_stored("{oops", "read_set"), Catch::Contains("malformed read_set"));
}
