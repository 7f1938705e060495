// One value from an SQL query on a database file, for tests that check
// what a ledger wrote with a connection of their own.
#pragma once

#include <cstdint>
#include <string>

#include <sqlite3.h>

#include <catch2/catch.hpp>

namespace effectfence::testing {

inline int64_t query_int64(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &q, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(q) == SQLITE_ROW);
  const int64_t n = sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  sqlite3_close(db);
  return n;
}

inline std::string query_text(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &q, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(q) == SQLITE_ROW);
  const unsigned char* text = sqlite3_column_text(q, 0);
  std::string out = text ? reinterpret_cast<const char*>(text) : "";
  sqlite3_finalize(q);
  sqlite3_close(db);
  return out;
}

// Runs SQL on a database file, for tests that change a ledger by hand as an
// operator would.
inline void exec_sql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  const std::string message = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  INFO(message);
  REQUIRE(rc == SQLITE_OK);
}

}  // namespace effectfence::testing
