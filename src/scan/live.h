// What a running server says about its own tools (tools/list), read the way
// MCP defines the annotations: a missing hint takes its default, and the
// defaults assume the worst (not read-only, destructive, not idempotent).
#pragma once

#include <string>
#include <vector>

#include "effectfence/json.h"

namespace effectfence::scan {

enum class Declared {
  read_only,                      // readOnlyHint: true
  idempotent,                     // idempotentHint: true (and not read-only)
  non_idempotent_or_destructive,  // hints given, none of the above
  undeclared,                     // no readOnlyHint, idempotentHint or destructiveHint
};

const char* declared_name(Declared declared);

struct LiveTool {
  std::string name;
  std::string description;
  Declared declared = Declared::undeclared;
  Json annotations;  // as the server sent them, or null
  // What plain `effectfence wrap -- COMMAND` does with the tool: the very
  // rule wrap applies (mcp::is_fenced with the default policy).
  bool wrap_fences_by_default = true;
};

// One tools/list entry. Entries without a string name are skipped by the caller.
LiveTool read_live_tool(const Json& entry);

// Every entry with a name, in the server's order.
std::vector<LiveTool> read_live_tools(const std::vector<Json>& entries);

}  // namespace effectfence::scan
