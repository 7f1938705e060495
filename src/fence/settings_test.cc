// Settings from the environment: the configuration table of docs/OPERATIONS.md.
#include <fcntl.h>
#include <pwd.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include <catch2/catch.hpp>

#include "effectfence/fence.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"

using namespace effectfence;
using namespace effectfence::testing;

namespace {

// What fn writes to stderr (fd 2), and its settings.
Settings settings_and_stderr(std::string* written) {
  TempDir dir;
  const std::string path = dir.file("stderr.txt");
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(saved >= 0);
  REQUIRE(file >= 0);
  ::dup2(file, 2);
  ::close(file);
  const Settings s = Settings::from_environment();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::ifstream in(path);
  written->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return s;
}

}  // namespace

TEST_CASE("lease and result lifetimes come from the environment, in seconds", "[settings]") {
  ScopedEnv env(Env{{"EFFECTFENCE_LEASE_SECS", "7"}, {"EFFECTFENCE_RESULT_TTL_SECS", "1.5"}});
  const Settings s = Settings::from_environment();
  CHECK(s.lease_ttl_ms == 7000);
  CHECK(s.result_ttl_ms == 1500);
}

TEST_CASE("without the variables the defaults hold: a 60 s lease, results replayed for a day", "[settings]") {
  ScopedEnv env(Env{{"EFFECTFENCE_LEASE_SECS", std::nullopt}, {"EFFECTFENCE_RESULT_TTL_SECS", std::nullopt}});
  const Settings s = Settings::from_environment();
  CHECK(s.lease_ttl_ms == 60000);
  CHECK(s.result_ttl_ms == 86400000);
}

TEST_CASE("a lifetime that is not a positive number of seconds is ignored, not half-read", "[settings]") {
  // 0.0005 s would round to a 0 ms lease: expired when granted, admitting every duplicate.
  for (const char* bad : {"abc", "10s", "0", "-5", "1e12", "0.0005", "nan"}) {
    INFO(bad);
    ScopedEnv env(Env{{"EFFECTFENCE_LEASE_SECS", bad}, {"EFFECTFENCE_RESULT_TTL_SECS", bad}});
    std::string warned;
    const Settings s = settings_and_stderr(&warned);
    CHECK(s.lease_ttl_ms == 60000);
    CHECK(s.result_ttl_ms == 86400000);
    // Ignored out loud, naming the variable, the value and what is accepted.
    for (const char* name : {"EFFECTFENCE_LEASE_SECS", "EFFECTFENCE_RESULT_TTL_SECS"}) {
      CHECK_THAT(warned, Catch::Contains(std::string("ignoring ") + name + "='" + bad + "'") &&
                             Catch::Contains("from 0.001 to 315360000"));
    }
  }
  // The shortest accepted, 1 ms, is taken without a warning.
  ScopedEnv env(Env{{"EFFECTFENCE_LEASE_SECS", "0.001"}, {"EFFECTFENCE_RESULT_TTL_SECS", "0.001"}});
  std::string warned;
  const Settings s = settings_and_stderr(&warned);
  CHECK(s.lease_ttl_ms == 1);
  CHECK(s.result_ttl_ms == 1);
  CHECK(warned.empty());
}

TEST_CASE("ten years is the longest lifetime accepted, as the warning and docs/OPERATIONS.md say", "[settings]") {
  {
    ScopedEnv env(Env{{"EFFECTFENCE_LEASE_SECS", "315360000"}, {"EFFECTFENCE_RESULT_TTL_SECS", "315360000"}});
    const Settings s = Settings::from_environment();
    CHECK(s.lease_ttl_ms == Settings::kMaxLifetimeMs);
    CHECK(s.result_ttl_ms == Settings::kMaxLifetimeMs);
  }
  ScopedEnv env(Env{{"EFFECTFENCE_LEASE_SECS", "315360001"}, {"EFFECTFENCE_RESULT_TTL_SECS", "315360001"}});
  const Settings s = Settings::from_environment();
  CHECK(s.lease_ttl_ms == 60000);
  CHECK(s.result_ttl_ms == 86400000);
}

TEST_CASE("a server sweeps every EFFECTFENCE_SWEEP_INTERVAL_SECS, ten minutes without it", "[settings][sweep]") {
  {
    ScopedEnv env(Env{{"EFFECTFENCE_SWEEP_INTERVAL_SECS", std::nullopt}});
    CHECK(Settings::from_environment().sweep_interval_ms == 600000);
  }
  for (const auto& [secs, ms] : {std::pair<const char*, int64_t>{"30", 30000},
                                 {"0.25", 250},
                                 {"0.001", 1},
                                 {"315360000", Settings::kMaxLifetimeMs}}) {
    INFO(secs);
    ScopedEnv env(Env{{"EFFECTFENCE_SWEEP_INTERVAL_SECS", secs}});
    std::string warned;
    CHECK(settings_and_stderr(&warned).sweep_interval_ms == ms);
    CHECK(warned.empty());
  }
}

TEST_CASE("a sweep interval that is not a positive number of seconds up to ten years is ignored with a warning",
          "[settings][sweep]") {
  // 0.0005 s would round to 0 ms: a server sweeping without pause.
  for (const char* bad : {"abc", "10m", "0", "-5", "0.0005", "315360001", "nan"}) {
    INFO(bad);
    ScopedEnv env(Env{{"EFFECTFENCE_SWEEP_INTERVAL_SECS", bad}});
    std::string warned;
    CHECK(settings_and_stderr(&warned).sweep_interval_ms == 600000);
    CHECK_THAT(warned, Catch::Contains(std::string("ignoring EFFECTFENCE_SWEEP_INTERVAL_SECS='") + bad + "'") &&
                           Catch::Contains("from 0.001 to 315360000"));
  }
}

TEST_CASE("EFFECTFENCE_LEDGER names the ledger, otherwise the XDG state directory, created on demand", "[settings]") {
  {
    ScopedEnv env(Env{{"EFFECTFENCE_LEDGER", "/srv/ledger.sqlite"}});
    const Settings s = Settings::from_environment();
    CHECK(s.ledger_path == "/srv/ledger.sqlite");
    CHECK_FALSE(s.create_parent_directories);  // an explicit path is never invented
  }
  {
    ScopedEnv env(Env{{"EFFECTFENCE_LEDGER", std::nullopt}, {"XDG_STATE_HOME", "/x/state"}});
    const Settings s = Settings::from_environment("wrap-abc");
    CHECK(s.ledger_path == "/x/state/effectfence/wrap-abc.sqlite");
    CHECK(s.create_parent_directories);
  }
  {
    ScopedEnv env(Env{{"EFFECTFENCE_LEDGER", ""}, {"XDG_STATE_HOME", std::nullopt}, {"HOME", "/home/ann"}});
    CHECK(Settings::from_environment().ledger_path == "/home/ann/.local/state/effectfence/server.sqlite");
  }
  {  // Relative values are ignored (the XDG spec), never resolved against the working directory.
    ScopedEnv env(Env{{"EFFECTFENCE_LEDGER", std::nullopt}, {"XDG_STATE_HOME", "relative"}, {"HOME", "/home/ann"}});
    CHECK(Settings::from_environment().ledger_path == "/home/ann/.local/state/effectfence/server.sqlite");
  }
  for (const std::optional<std::string>& home : {std::optional<std::string>(), std::optional<std::string>("here")}) {
    ScopedEnv env(Env{{"EFFECTFENCE_LEDGER", std::nullopt}, {"XDG_STATE_HOME", std::nullopt}, {"HOME", home}});
    const passwd* user = ::getpwuid(::geteuid());
    REQUIRE(user);
    CHECK(Settings::from_environment().ledger_path ==
          std::string(user->pw_dir) + "/.local/state/effectfence/server.sqlite");
  }
}

TEST_CASE("a fence opened with a lease under 1 ms or a lifetime past ten years is refused before any file is touched", "[settings]") {
  TempDir dir;
  const int64_t past_ten_years = int64_t{10} * 365 * 86'400'000 + 1;
  for (const auto& [lease, result] : {std::pair<int64_t, int64_t>{0, 1000},
                                      {-5, 1000},
                                      {1000, -1},
                                      {past_ten_years, 1000},
                                      {INT64_MAX, 1000},
                                      {1000, past_ten_years}}) {
    INFO("lease " << lease << " ms, result " << result << " ms");
    Settings s;
    s.ledger_path = (dir.path() / "ledger.sqlite").string();
    s.lease_ttl_ms = lease;
    s.result_ttl_ms = result;
    auto opened = Fence::open(s);
    REQUIRE(std::holds_alternative<OpenError>(opened));
    CHECK(std::get<OpenError>(opened).code == OpenErrorCode::invalid_settings);
    CHECK_THAT(std::get<OpenError>(opened).message, Catch::Contains("nothing was opened"));
    CHECK_FALSE(std::filesystem::exists(s.ledger_path));
  }
}
