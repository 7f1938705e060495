#include "cli/options.h"
#include "cli/output.h"
#include "cli/time_text.h"
#include "ledger/read_only.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <catch2/catch.hpp>

#include "effectfence/fence.h"
#include "ledger/sqlite_ledger.h"
#include "support/scoped_cwd.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"

namespace effectfence::cli {
namespace {

const std::vector<OptionSpec> kSpecs = {{"db", true}, {"json", false}, {"reason", true}};

// parse_since's value, or nullopt when it refuses the text.
std::optional<int64_t> since(const std::string& text, int64_t now) {
  const auto parsed = parse_since(text, now);
  return parsed.ok() ? std::optional<int64_t>(*parsed) : std::nullopt;
}

// parse_args's error message, or "" when it parses.
std::string refusal_of(const Args& args) {
  const auto parsed = parse_args(args, kSpecs);
  return parsed.ok() ? "" : parsed.status().message();
}

TEST_CASE("parse_args takes values, switches and positionals in any order") {
  auto parsed = parse_args({"charge:1", "--db", "l.sqlite", "--json", "--reason=checked, ok"}, kSpecs);
  REQUIRE(parsed.ok());
  CHECK(parsed->value("db") == std::optional<std::string>("l.sqlite"));
  CHECK(parsed->value("reason") == std::optional<std::string>("checked, ok"));
  CHECK(parsed->has("json"));
  CHECK_FALSE(parsed->has("help"));
  CHECK(parsed->positionals == std::vector<std::string>{"charge:1"});
}

TEST_CASE("parse_args refuses unknown options, missing values, valued switches and repeated values") {
  CHECK(refusal_of({"--dbx", "x"}) == "unknown option '--dbx'");
  CHECK(refusal_of({"--db"}) == "--db needs a value");
  CHECK(refusal_of({"--db="}) == "--db needs a non-empty value");
  CHECK(refusal_of({"--json=yes"}) == "--json takes no value");
  CHECK(refusal_of({"-x"}) == "unknown option '-x'");
  CHECK(refusal_of({"--db", "a.sqlite", "--db=b.sqlite"}) == "--db is given twice");  // which one was meant?
}

TEST_CASE("parse_args: -h and --help are help, after -- everything is positional") {
  auto parsed = parse_args({"-h", "--", "--json", "-"}, kSpecs);
  REQUIRE(parsed.ok());
  CHECK(parsed->has("help"));
  CHECK_FALSE(parsed->has("json"));
  CHECK(parsed->positionals == std::vector<std::string>{"--json", "-"});
}

TEST_CASE("resolve_ledger_path: --db, then EFFECTFENCE_LEDGER, then the default") {
  ::setenv("EFFECTFENCE_LEDGER", "/tmp/from-env.sqlite", 1);
  CHECK(resolve_ledger_path(*parse_args({"--db", "/tmp/flag.sqlite"}, kSpecs), "stats") == "/tmp/flag.sqlite");
  CHECK(resolve_ledger_path(*parse_args({}, kSpecs), "stats") == "/tmp/from-env.sqlite");
  ::unsetenv("EFFECTFENCE_LEDGER");
  ::setenv("XDG_STATE_HOME", "/tmp/state", 1);
  CHECK(resolve_ledger_path(*parse_args({}, kSpecs), "stats") == "/tmp/state/effectfence/server.sqlite");
}

TEST_CASE("format_utc prints ISO-8601 UTC with milliseconds, also before 1970") {
  CHECK(format_utc(0) == "1970-01-01T00:00:00.000Z");
  CHECK(format_utc(1795946400123) == "2026-11-29T10:00:00.123Z");
  CHECK(format_utc(-1) == "1969-12-31T23:59:59.999Z");
}

TEST_CASE("parse_since reads ISO-8601 UTC times") {
  CHECK(since("2026-11-29T10:00:00Z", 0) == std::optional<int64_t>(1795946400000));
  CHECK(since("2026-11-29T10:00:00.5Z", 0) == std::optional<int64_t>(1795946400500));
  CHECK(since("2026-11-29T10:00:00.123+00:00", 0) == std::optional<int64_t>(1795946400123));
  CHECK(since("2026-11-29T10:00Z", 0) == std::optional<int64_t>(1795946400000));
  CHECK(since("2026-11-29", 0) == std::optional<int64_t>(1795910400000));
}

TEST_CASE("parse_since reads ages before now") {
  const int64_t now = 1'000'000'000'000;
  CHECK(since("90s", now) == std::optional<int64_t>(now - 90'000));
  CHECK(since("30m", now) == std::optional<int64_t>(now - 1'800'000));
  CHECK(since("1h", now) == std::optional<int64_t>(now - 3'600'000));
  CHECK(since("7d", now) == std::optional<int64_t>(now - 604'800'000));
}

TEST_CASE("parse_since refuses local times, impossible dates and junk") {
  std::string error;
  for (const char* bad : {"2026-11-29T10:00:00+01:00", "2026-11-29T10:00:00", "2026-02-30", "2026-13-01",
                          "2026-11-29T25:00:00Z", "yesterday", "1w", "h", "-1h", "", "2026-11-29T10:00:00.Z"}) {
    INFO(bad);
    const auto refused = parse_since(bad, 0);
    CHECK_FALSE(refused.ok());
    if (!refused.ok()) error = refused.status().message();
  }
  CHECK(error.find("ISO-8601") != std::string::npos);
}

TEST_CASE("csv_field quotes per RFC 4180 only when needed") {
  CHECK(csv_field("plain") == "plain");
  CHECK(csv_field("") == "");
  CHECK(csv_field("a,b") == "\"a,b\"");
  CHECK(csv_field("say \"hi\"") == "\"say \"\"hi\"\"\"");
  CHECK(csv_field("two\nlines") == "\"two\nlines\"");
  CHECK(csv_field("cr\r") == "\"cr\r\"");
}

TEST_CASE("open_ledger_read_only never creates a file, and the ledgers beside a missing one are named") {
  effectfence::testing::TempDir dir;
  const std::string path = dir.file("server.sqlite");
  const auto missing = open_ledger_read_only(path);
  CHECK_FALSE(missing.ok());
  CHECK(missing.status().message() == "no ledger at " + path);
  CHECK(missing.status().is_not_found());
  CHECK(ledgers_beside(path).empty());
  CHECK_FALSE(ledger_file_exists(path));

  // wrap names its ledger after the command it wraps.
  std::ofstream(dir.file("wrap-0123456789abcdef.sqlite")) << "";
  std::ofstream(dir.file("notes.txt")) << "";
  CHECK_FALSE(open_ledger_read_only(path).ok());
  CHECK(ledgers_beside(path) == "; other .sqlite files in that directory: " + dir.file("wrap-0123456789abcdef.sqlite"));
  CHECK_FALSE(ledger_file_exists(path));
}

TEST_CASE("beside the default ledger, the files named are wrap's ledgers, and the way to pick one is --db") {
  effectfence::testing::TempDir dir;
  effectfence::testing::ScopedEnv env(effectfence::testing::Env{{"XDG_STATE_HOME", dir.path().string()}});
  const std::string path = effectfence::Settings::default_ledger_path("server");
  std::filesystem::create_directories(dir.path() / "effectfence");
  const std::string wrap_ledger = (dir.path() / "effectfence" / "wrap-0123456789abcdef.sqlite").string();
  std::ofstream(wrap_ledger) << "";
  CHECK_FALSE(open_ledger_read_only(path).ok());
  CHECK(ledgers_beside(path) == "; other ledgers in that directory: " + wrap_ledger +
                                    " (wrap keeps one per wrapped command; pass one with --db)");
  CHECK_FALSE(ledger_file_exists(path));
}

TEST_CASE("open_ledger_read_only opens a file named like an SQLite URI as that file") {
  effectfence::testing::TempDir dir;
  effectfence::testing::ScopedCwd in_dir(dir.path().string());
  const std::string path = "file:ledger.sqlite";  // as a URI: ledger.sqlite, which does not exist
  REQUIRE(std::holds_alternative<std::unique_ptr<Ledger>>(open_sqlite_ledger(path, 1000)));
  const auto opened = open_ledger_read_only(path);
  CHECK(opened.ok());
  CHECK(opened.status().message().empty());
}

TEST_CASE("terminal_safe escapes control characters and leaves other text as it is") {
  CHECK(terminal_safe("plain text, ünïcode ✓") == "plain text, ünïcode ✓");
  CHECK(terminal_safe("line\nnext") == "line\\x0anext");
  CHECK(terminal_safe("a\x1b[8mhidden\x1b[0m") == "a\\x1b[8mhidden\\x1b[0m");
  CHECK(terminal_safe(std::string("nul\0tab\tdel\x7f", 12)) == "nul\\x00tab\\x09del\\x7f");
  CHECK(terminal_safe("csi\xc2\x9b" "2J") == "csi\\u009b2J");  // a C1 control (U+009B)
  CHECK(terminal_safe("\xc2\xa0nbsp") == "\xc2\xa0nbsp");      // U+00A0 is not a control
  CHECK(terminal_safe("cut\xc2") == "cut\xc2");
  CHECK(terminal_safe("typed \\x0a here") == "typed \\\\x0a here");  // a typed escape stays told apart
  CHECK(terminal_safe("abc\xe2\x80\xae" "dcba") == "abc\\u202e" "dcba");    // RIGHT-TO-LEFT OVERRIDE
  CHECK(terminal_safe("\xe2\x81\xa6x\xe2\x80\x8f") == "\\u2066x\\u200f");
  CHECK(terminal_safe("a\xd8\x9c" "b") == "a\\u061c" "b");
  CHECK(terminal_safe("dash \xe2\x80\x94 ok") == "dash \xe2\x80\x94 ok");   // U+2014 is text
  // Invisible characters, which would make two different names print alike.
  CHECK(terminal_safe("order-7\xe2\x80\x8b") == "order-7\\u200b");  // ZERO WIDTH SPACE
  CHECK(terminal_safe("order-7\xef\xbb\xbf") == "order-7\\ufeff");  // ZERO WIDTH NO-BREAK SPACE
  CHECK(terminal_safe("a\xe2\x81\xa0" "b\xc2\xad" "c") == "a\\u2060" "b\\u00ad" "c");
  CHECK(terminal_safe("\xef\xbc\xa1") == "\xef\xbc\xa1");  // U+FF21, a fullwidth letter, is text
  // Bytes that are no UTF-8 sequence are not read as one: two different
  // names never print as the same escape.
  CHECK(terminal_safe("x\xe2\xc0\x8b") == "x\xe2\xc0\x8b");
  CHECK(terminal_safe("x\xe2\x80\x8b") == "x\\u200b");
}

TEST_CASE("terminal_unescape gives back the text terminal_safe printed, and nothing else") {
  for (const std::string& text : {std::string("plain"), std::string("a\x1b[2J\nb"), std::string("nul\0x", 5),
                                 std::string("typed \\x0a"), std::string("csi\xc2\x9b" "2J"),
                                 std::string("order-7\xe2\x80\x8b\xef\xbb\xbf"), std::string("a\xd8\x9c" "b\xc2\xad")}) {
    INFO(terminal_safe(text));
    CHECK(terminal_unescape(terminal_safe(text)) == text);
  }
  CHECK(terminal_unescape("evil\\x1b[2J") == std::string("evil\x1b[2J"));
  CHECK_FALSE(terminal_unescape("C:\\tmp"));       // \t is no escape it writes
  CHECK_FALSE(terminal_unescape("trailing\\"));    // a lone backslash
  CHECK_FALSE(terminal_unescape("\\x41"));         // "A", which it prints as A
  CHECK_FALSE(terminal_unescape("\\u0041"));
  CHECK_FALSE(terminal_unescape("\\x1B"));         // it writes lowercase hex
  CHECK_FALSE(terminal_unescape("\\x1"));
}

}  // namespace
}  // namespace effectfence::cli
