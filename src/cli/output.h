// What the subcommands write: JSON lines, CSV fields, and the standard
// streams they were started with.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/terminal_safe.h"
#include "effectfence/json.h"

namespace effectfence::cli {

// The header row of `export --format csv`, which `verify` recognises to say
// it reads only JSONL dumps.
constexpr const char* kExportCsvHeader =
    "type,at,at_ms,event_id,kind,actor,detail,certificate,parent,intent,domain,seq,generation,tool,agent,body";

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
// Why a report to stdout could not be written, when it was closed at start.
inline constexpr const char* kStdoutClosed =
    "it was closed when effectfence started (run it with stdout open, or give --out where the command has it)";
// For the commands that speak MCP on stdin and stdout: a named error and
// exit 2 if either was closed (an MCP client starts them with both open).
std::optional<int> refuse_closed_protocol_streams(const char* command);

}  // namespace effectfence::cli
