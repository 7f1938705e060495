// The ledger a behavioural test runs against, so one suite covers both
// engines: an SQLite file in a fresh directory by default, or a fresh
// schema in the PostgreSQL database EFFECTFENCE_TEST_LEDGER names (CTest
// registers the suites a second time that way, against a throwaway cluster).
#pragma once

#include <sqlite3.h>

#include <cstdlib>
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "core/random_token.h"
#include "effectfence/fence.h"
#include "ledger/pg_connection.h"
#include "support/sqlite_query.h"
#include "support/temp_dir.h"

namespace effectfence::testing {

// The PostgreSQL URL the suite runs against, or "" for SQLite.
inline std::string postgres_under_test() {
  const char* url = std::getenv("EFFECTFENCE_TEST_LEDGER");
  return url && pg::is_postgres_url(url) ? url : "";
}

class TestLedger {
 public:
  TestLedger() : server_(postgres_under_test()) {
    if (server_.empty()) {
      where_ = dir_.file("l.sqlite");
      return;
    }
    schema_ = "t_" + random_token_hex().substr(0, 16);
    admin().exec("CREATE SCHEMA " + schema_);
    where_ = server_ + (server_.find('?') == std::string::npos ? "?" : "&") + "options=-csearch_path%3D" + schema_;
  }
  ~TestLedger() {
    if (schema_.empty()) return;
    try {
      admin().exec("DROP SCHEMA " + schema_ + " CASCADE");
    } catch (const pg::Error&) {
      // Left for the cluster's teardown.
    }
  }
  TestLedger(const TestLedger&) = delete;
  TestLedger& operator=(const TestLedger&) = delete;

  bool is_postgres() const { return !schema_.empty(); }
  // What Settings::ledger_path (or --db) takes.
  const std::string& where() const { return where_; }
  Settings settings() const {
    Settings s;
    s.ledger_path = where_;
    return s;
  }
  // A file or directory path of this test's own (SQLite and PostgreSQL alike).
  std::string file(const std::string& name) const { return dir_.file(name); }

  // The single integer a query returns, read with the engine's own client.
  int64_t count(const std::string& sql) {
    if (is_postgres()) return session().exec(sql).integer(0, 0);
    return query_int64(where_, sql);
  }

  // The single text value a query returns ("" for NULL).
  std::string text(const std::string& sql) {
    if (is_postgres()) return session().exec(sql).text(0, 0);
    return query_text(where_, sql);
  }

  // Runs SQL as an operator at the sqlite3 or psql prompt would.
  void exec(const std::string& sql) {
    if (is_postgres()) {
      session().run(sql);
      return;
    }
    exec_sql(where_, sql);
  }

  // Runs SQL as exec does, and returns the ledger's refusal ("" if it ran).
  std::string try_exec(const std::string& sql) {
    if (is_postgres()) {
      try {
        session().run(sql);
        return "";
      } catch (const std::exception& e) {
        return e.what();
      }
    }
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(where_.c_str(), &db) == SQLITE_OK);
    char* err = nullptr;
    const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
    std::string message = rc == SQLITE_OK ? "" : err ? err : "error " + std::to_string(rc);
    sqlite3_free(err);
    sqlite3_close(db);
    return message;
  }

  // Runs SQL on intents past one of its triggers, then puts the trigger back
  // as effectfence built it: for a state an operator may not make by hand
  // but the world can (a holder on another host).
  void exec_past_trigger(const std::string& trigger, const std::string& sql) {
    if (is_postgres()) {
      exec("BEGIN; ALTER TABLE intents DISABLE TRIGGER " + trigger + "; " + sql +
           "; ALTER TABLE intents ENABLE TRIGGER " + trigger + "; COMMIT");
      return;
    }
    const std::string restore =
        query_text(where_, "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = '" + trigger + "'");
    exec("BEGIN IMMEDIATE; DROP TRIGGER " + trigger + "; " + sql + "; " + restore + "; COMMIT");
  }

  // Holds, from a connection of its own, the lock a decision on intent
  // must take first: BEGIN IMMEDIATE on SQLite (the whole file), the
  // intent's advisory lock on PostgreSQL. Until unlock(), such a decision
  // waits; reads do not.
  void lock_for(const std::string& intent) {
    if (is_postgres()) {
      locker_ = pg::Connection::open(where_);
      locker_->exec("SELECT pg_advisory_lock(hashtextextended($1, 0))", {pg::param("intent:" + intent)});
      return;
    }
    REQUIRE(sqlite3_open(where_.c_str(), &sqlite_locker_) == SQLITE_OK);
    REQUIRE(sqlite3_exec(sqlite_locker_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK);
  }
  void unlock() {
    if (locker_) {
      locker_.reset();  // closing the session releases its advisory locks
      return;
    }
    REQUIRE(sqlite3_exec(sqlite_locker_, "COMMIT", nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(sqlite_locker_);
    sqlite_locker_ = nullptr;
  }

  // SQL for the text of a top-level member of a JSON column.
  std::string json_member(const std::string& column, const std::string& member) const {
    if (is_postgres()) return "(" + column + "::json ->> '" + member + "')";
    return "json_extract(" + column + ", '$." + member + "')";
  }

 private:
  static pg::Connection& open_into(std::unique_ptr<pg::Connection>& slot, const std::string& url) {
    if (!slot) slot = pg::Connection::open(url);
    return *slot;
  }
  pg::Connection& admin() { return open_into(admin_, server_); }
  pg::Connection& session() { return open_into(session_, where_); }

  TempDir dir_;
  std::string server_, schema_, where_;
  std::unique_ptr<pg::Connection> admin_, session_, locker_;
  sqlite3* sqlite_locker_ = nullptr;
};

}  // namespace effectfence::testing
