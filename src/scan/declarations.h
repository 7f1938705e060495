// Tool declarations in server source: where each tool is declared, its
// name, and the description bound to that declaration alone (found inside
// the declaration's own brackets, so a neighbour's words never bleed in).
//
//   TypeScript/JavaScript  server.tool("n", "d", ...), registerTool("n", {description}),
//                          addTool(...), { name: "n", description: "d", inputSchema: ... }
//   Python                 @mcp.tool / @server.tool(...) on a def (docstring), Tool(name=, description=)
//   Go                     mcp.NewTool("n", mcp.WithDescription("d")), Tool{Name: "n", Description: "d"}
//   Rust                   #[tool(description = "d")] on a fn, Tool::new("n", "d", ...)
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "effectfence/json.h"
#include "scan/source_tree.h"

namespace effectfence::scan {

struct ToolDeclaration {
  std::string name;
  std::string description;  // "" when the declaration carries none
  std::string form;         // which pattern found it, e.g. "registerTool(...)", "@tool def", "object literal"
  size_t file_index = 0;    // into SourceTree::files
  int line = 0;             // of the name
  size_t begin = 0;         // the declaration's extent in its file
  size_t end = 0;
  // The MCP hints written as true/false literals inside the declaration
  // (readOnlyHint, idempotentHint, destructiveHint in any spelling:
  // read_only_hint, ReadOnlyHint, WithReadOnlyHintAnnotation(true), ...),
  // as a tools/list annotations object; empty when none is written.
  Json annotations = Json::object();
};

// The hints written in [begin, end) of a file (see ToolDeclaration::annotations).
Json written_hints(const MaskedSource& source, size_t begin, size_t end);

// A keyed or positional entry of a bracketed list: `key: value`, `key = value`
// or a bare value. Offsets are into the file.
struct BracketEntry {
  std::string key;  // "" for a positional entry
  size_t value_begin = 0;
  size_t value_end = 0;
};

// The top-level entries between the bracket at open and its match at close.
std::vector<BracketEntry> bracket_entries(const MaskedSource& source, size_t open, size_t close);

// The text of the string literals in [begin, end), joined.
std::string literal_text(const MaskedSource& source, size_t begin, size_t end);

// Every tool declaration in one file, in order of appearance.
std::vector<ToolDeclaration> find_declarations(const SourceFile& file, size_t file_index);

// Every tool declaration in the tree, file by file.
std::vector<ToolDeclaration> find_declarations(const SourceTree& tree);

}  // namespace effectfence::scan
