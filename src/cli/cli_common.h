// What the operator subcommands (stats, fenced, clear, export, verify) share:
// option parsing, finding and opening the ledger, times, CSV fields, errors.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <SQLiteCpp/Database.h>

#include "core/terminal_safe.h"

#include "cli/commands.h"
#include "effectfence/json.h"

namespace effectfence::cli {

// Exit codes shared by every subcommand.
constexpr int kExitOk = 0;
constexpr int kExitProblems = 1;  // verify found tampering or a broken chain
constexpr int kExitFailure = 2;   // usage error, or the command could not run

// The header row of `export --format csv`, which `verify` recognises to say
// it reads only JSONL dumps.
constexpr const char* kExportCsvHeader =
    "type,at,at_ms,event_id,kind,actor,detail,certificate,parent,intent,domain,seq,generation,tool,agent,body";

// One option a subcommand accepts: "--name VALUE" / "--name=VALUE" when
// takes_value, else a switch "--name".
struct OptionSpec {
  std::string name;  // without the leading "--"
  bool takes_value = false;
  bool repeatable = false;  // may be given more than once (a value option; see ParsedArgs::all)
};

struct ParsedArgs {
  std::map<std::string, std::string> values;
  std::set<std::string> switches;
  std::vector<std::string> positionals;

  bool has(const std::string& name) const { return switches.count(name) > 0 || values.count(name) > 0; }
  std::optional<std::string> value(const std::string& name) const;
  // Every value of a repeatable option, in the order given.
  std::map<std::string, std::vector<std::string>> repeated;
  std::vector<std::string> all(const std::string& name) const;
};

// Parses args against specs ("--help"/"-h" is always accepted as the switch
// "help"; "--" ends the options). Returns nullopt and fills *error for an
// unknown option, a missing or empty value, or a value given to a switch.
std::optional<ParsedArgs> parse_args(const Args& args, const std::vector<OptionSpec>& specs,
                                     std::string* error);

// --db, else $EFFECTFENCE_LEDGER, else Settings::default_ledger_path("server").
// When it falls back to the default ledger and other ledgers lie beside it
// (wrap keeps one per wrapped command), says so on stderr for command: the
// operator may have meant one of those.
std::string resolve_ledger_path(const ParsedArgs& parsed, const std::string& command);

// Prints "effectfence COMMAND: STEP: MESSAGE" on stderr, so every error
// names the step that failed.
void print_error(const std::string& command, const std::string& step, const std::string& message);

// Runs body and turns any exception escaping it into a named error and
// kExitFailure: a subcommand never dies with an uncaught exception.
int run_guarded(const std::string& command, const std::function<int()>& body);

// Returns true iff path names an existing regular file.
bool ledger_file_exists(const std::string& path);

// Opens an existing ledger with a read-only connection, so auditing can never
// write to it (and never creates a file where none was). Checks that the file
// is an effectfence ledger this binary understands. Returns nullptr and fills
// *error ("no ledger at PATH", "... is not an effectfence ledger", ...) on failure.
std::unique_ptr<SQLite::Database> open_ledger_read_only(const std::string& path, std::string* error);

// Milliseconds since the Unix epoch, now.
int64_t now_ms();

// ISO-8601 UTC with milliseconds: "2026-11-29T10:00:00.123Z".
std::string format_utc(int64_t ms);

// Parses a --since value into ms since the epoch: an ISO-8601 UTC time
// ("2026-11-29T10:00:00Z", "2026-11-29T10:00:00.5Z", "2026-11-29") or a
// relative age before now_ms ("90s", "30m", "1h", "7d").
// Returns nullopt and fills *error iff text is neither.
std::optional<int64_t> parse_since(const std::string& text, int64_t now_ms, std::string* error);

// Prints json on one line of stdout. Bytes that are not UTF-8 (a damaged
// ledger, a reason typed in another encoding) become U+FFFD instead of
// failing the whole report.
void print_json_line(const Json& json);

// One CSV field per RFC 4180: quoted (with quotes doubled) iff it holds a
// comma, a quote, CR or LF.
std::string csv_field(std::string_view value);

using effectfence::terminal_safe;  // reports print agents' text through it

// Run first in main: each of stdin, stdout and stderr that was closed gets
// a device (stdout /dev/full, so writing a report to it fails; the others
// /dev/null), so that no file or pipe opened later takes its number and is
// read or written as if it were that stream. Remembers which were closed.
void hold_closed_standard_streams();
bool stdout_closed_at_start();
// Run in main once a command is done: exit_code, or a failure with a named
// error if a ledger read in place on a read-only mount changed meanwhile.
int check_reads_in_place(const char* command, int exit_code);
// True iff a ledger read in place has changed since it was opened (what
// check_reads_in_place reports), for a command that must know before it
// puts what it read anywhere.
bool ledger_changed_while_read_in_place();
// Why a report to stdout could not be written, when it was closed at start.
inline constexpr const char* kStdoutClosed =
    "it was closed when effectfence started (run it with stdout open, or give --out where the command has it)";
// For the commands that speak MCP on stdin and stdout: a named error and
// exit 2 if either was closed (an MCP client starts them with both open).
std::optional<int> refuse_closed_protocol_streams(const char* command);

}  // namespace effectfence::cli
