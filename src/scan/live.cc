#include "scan/live.h"

#include "mcp/proxy.h"

namespace effectfence::scan {
namespace {

// nullopt unless the hint is present as a boolean.
std::optional<bool> hint(const Json& annotations, const char* key) {
  if (!annotations.is_object()) return std::nullopt;
  auto it = annotations.find(key);
  if (it == annotations.end() || !it->is_boolean()) return std::nullopt;
  return it->get<bool>();
}

}  // namespace

const char* declared_name(Declared declared) {
  switch (declared) {
    case Declared::read_only: return "read_only";
    case Declared::idempotent: return "idempotent";
    case Declared::non_idempotent_or_destructive: return "non_idempotent_or_destructive";
    case Declared::undeclared: return "undeclared";
  }
  return "undeclared";
}

LiveTool read_live_tool(const Json& entry) {
  LiveTool tool;
  tool.name = entry.value("name", "");
  if (auto d = entry.find("description"); d != entry.end() && d->is_string()) tool.description = d->get<std::string>();
  if (auto a = entry.find("annotations"); a != entry.end() && a->is_object()) tool.annotations = *a;
  const auto read_only = hint(tool.annotations, "readOnlyHint");
  const auto idempotent = hint(tool.annotations, "idempotentHint");
  const auto destructive = hint(tool.annotations, "destructiveHint");
  if (read_only == std::optional<bool>(true)) {
    tool.declared = Declared::read_only;
  } else if (idempotent == std::optional<bool>(true)) {
    tool.declared = Declared::idempotent;
  } else if (read_only || idempotent || destructive) {
    tool.declared = Declared::non_idempotent_or_destructive;
  } else {
    tool.declared = Declared::undeclared;
  }
  tool.wrap_fences_by_default = mcp::is_fenced(mcp::FencePolicy{}, entry);
  return tool;
}

std::vector<LiveTool> read_live_tools(const std::vector<Json>& entries) {
  std::vector<LiveTool> tools;
  for (const Json& entry : entries) {
    if (entry.is_object() && entry.contains("name") && entry["name"].is_string()) tools.push_back(read_live_tool(entry));
  }
  return tools;
}

}  // namespace effectfence::scan
