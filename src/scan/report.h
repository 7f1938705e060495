// The scan's findings, joined by tool name across the source and the live
// server: a candidate finder's report, evidence and next steps, no verdicts.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "effectfence/json.h"
#include "scan/declarations.h"
#include "scan/evidence.h"
#include "scan/live.h"
#include "scan/source_tree.h"

namespace effectfence::scan {

// A place in the scanned tree and what is there.
struct Located {
  std::string file;
  int line = 0;
  std::string what;
};

// A tool as its source shows it.
struct SourceTool {
  Located declared_at;  // what: the pattern that found it
  std::string description;
  Json annotations = Json::object();  // hints written in the declaration
  std::vector<Located> own_writes;   // writes inside the declaration itself
  std::vector<Located> also_declared_at;
};

enum class Standing {
  candidate,            // worth a look by hand
  reads,                // declared read-only, or says it reads and nothing else
  declared_idempotent,  // the server declares idempotentHint: true
  no_write_in_tree,     // sounds like an effect, but the tree has no write at all
  unclear,              // no words either way, no write of its own
};

const char* standing_name(Standing standing);

struct ToolFinding {
  std::string name;
  std::optional<SourceTool> source;
  std::optional<LiveTool> live;
  std::vector<std::string> effect_words;  // of its name and its own description
  std::vector<std::string> read_words;
  std::string leading_word;  // what it mainly does by its own name (words.h)
  Standing standing = Standing::unclear;
  bool guard_seen = false;  // some idempotency guard is named in the tree's code
  std::vector<std::string> evidence;  // what was seen, one line each
  std::vector<std::string> checks;    // what to check by hand
  std::string wrap_command;           // how to fence it (candidates and idempotent tools)
};

struct RetryFinding {
  Located retry;  // what: "loop" or "retry helper"
  Located write;  // what: the write's kind
  bool guarded = false;
};

struct ScanReport {
  std::string root;                  // "" when no source was read
  std::vector<std::string> command;  // empty when no server was started
  size_t files_scanned = 0;
  std::vector<std::string> skipped_dirs;
  std::vector<ToolFinding> tools;  // candidates first, then the rest; by name within
  std::vector<Located> writes;     // what: kind and code
  std::vector<Located> guards;     // what: the identifier
  std::vector<RetryFinding> retries_around_writes;
  std::vector<std::string> cannot_see;
};

// Joins what was read. tree and live_tools are each optional (nullptr), not both.
ScanReport build_report(const SourceTree* tree, const std::vector<Json>* live_tools,
                        const std::vector<std::string>& command);

// `effectfence wrap --only TOOL -- COMMAND`, the command quoted for a POSIX
// shell, or a placeholder when it is not known.
std::string wrap_line(const std::string& tool, const std::vector<std::string>& command);

// A word for a POSIX shell: as is when it is safe, else single-quoted.
std::string shell_word(const std::string& word);

}  // namespace effectfence::scan
