#include "scan/render.h"

#include <algorithm>

namespace effectfence::scan {
namespace {

constexpr size_t kListedItems = 20;  // per repository-wide list in the text report

std::string at(const Located& place) { return place.file + ":" + std::to_string(place.line); }

Json located_json(const Located& place) {
  return Json{{"file", place.file}, {"line", place.line}, {"what", place.what}};
}

template <typename T, typename F>
Json array_of(const std::vector<T>& items, F to_json) {
  Json out = Json::array();
  for (const T& item : items) out.push_back(to_json(item));
  return out;
}

std::string command_text(const std::vector<std::string>& command) {
  std::string text;
  for (const auto& word : command) text += (text.empty() ? "" : " ") + shell_word(word);
  return text;
}

void list_section(std::string* out, const std::string& title, const std::vector<Located>& items) {
  *out += "  " + title + " (" + std::to_string(items.size()) + ")" + (items.empty() ? "\n" : ":\n");
  for (size_t i = 0; i < items.size() && i < kListedItems; ++i) *out += "    " + at(items[i]) + "  " + items[i].what + "\n";
  if (items.size() > kListedItems) *out += "    ... " + std::to_string(items.size() - kListedItems) + " more (--json lists all)\n";
}

std::string tool_heading(const ToolFinding& tool) {
  std::string heading = tool.name;
  if (tool.source) heading += "  [" + at(tool.source->declared_at) + "]";
  if (tool.live) heading += "  [live: " + std::string(declared_name(tool.live->declared)) + "]";
  return heading;
}

}  // namespace

std::string render_text(const ScanReport& report) {
  std::string out = "effectfence scan: " + std::to_string(report.tools.size()) + " tool(s)";
  if (!report.root.empty()) out += "; source " + report.root + " (" + std::to_string(report.files_scanned) + " file(s))";
  if (!report.command.empty()) out += "; live " + command_text(report.command);
  out += "\n";
  if (!report.command.empty()) {
    // wrap's default, for the whole server at once.
    std::string fenced, passed;
    for (const ToolFinding& tool : report.tools) {
      if (!tool.live) continue;
      std::string& list = tool.live->wrap_fences_by_default ? fenced : passed;
      list += (list.empty() ? "" : ", ") + tool.name;
    }
    out += "effectfence wrap -- <this server> by default fences: " + (fenced.empty() ? "none" : fenced) +
           "\n  and passes through (declared read-only): " + (passed.empty() ? "none" : passed) + "\n";
  }
  out += "\n";

  const size_t candidates = static_cast<size_t>(std::count_if(report.tools.begin(), report.tools.end(),
      [](const ToolFinding& t) { return t.standing == Standing::candidate; }));
  out += "Candidates (" + std::to_string(candidates) + "): leads to check by hand, not verdicts.\n";
  if (candidates == 0) out += "  none: no tool has evidence that it acts without a declared guarantee\n";
  for (const ToolFinding& tool : report.tools) {
    if (tool.standing != Standing::candidate) continue;
    out += "\n  " + tool_heading(tool) + "\n    evidence:\n";
    for (const auto& line : tool.evidence) out += "      - " + line + "\n";
    out += "    check by hand:\n";
    for (const auto& line : tool.checks) out += "      - " + line + "\n";
    out += "    fence it:\n      " + tool.wrap_command + "\n";
  }

  out += "\nNot candidates (" + std::to_string(report.tools.size() - candidates) + "):\n";
  for (const ToolFinding& tool : report.tools) {
    if (tool.standing == Standing::candidate) continue;
    out += "  " + tool_heading(tool) + "  " + standing_name(tool.standing) + "\n";
    for (const auto& line : tool.evidence) out += "      - " + line + "\n";
    for (const auto& line : tool.checks) out += "      check: " + line + "\n";
    if (!tool.wrap_command.empty()) out += "      fence it anyway: " + tool.wrap_command + "\n";
  }

  if (!report.root.empty()) {
    out += "\nRepository context:\n";
    list_section(&out, "writes", report.writes);
    list_section(&out, "idempotency guards named in code", report.guards);
    out += "  retries around writes (" + std::to_string(report.retries_around_writes.size()) + ")" +
           (report.retries_around_writes.empty() ? "\n" : ":\n");
    for (const RetryFinding& r : report.retries_around_writes) {
      out += "    " + at(r.retry) + "  " + r.retry.what + " around " + at(r.write) + " " + r.write.what +
             (r.guarded ? " (a guard is named inside)" : "") + "\n";
    }
    if (!report.skipped_dirs.empty()) {
      const size_t n = report.skipped_dirs.size();
      out += "  not read: " + std::to_string(n) + " dependency, build, test or example director" +
             (n == 1 ? "y" : "ies") + ":";
      for (size_t i = 0; i < n && i < kListedItems; ++i) out += (i ? ", " : " ") + report.skipped_dirs[i];
      out += n > kListedItems ? ", ... " + std::to_string(n - kListedItems) + " more (--json lists all)\n" : "\n";
    }
  }

  out += "\nWhat this scan cannot see:\n";
  for (const auto& line : report.cannot_see) out += "  - " + line + "\n";
  if (candidates > 0) {
    out += "\nTo fence every tool the server does not declare read-only: effectfence wrap -- " +
           (report.command.empty() ? std::string("<command that starts this server>") : command_text(report.command)) + "\n";
  }
  return out;
}

Json render_json(const ScanReport& report) {
  Json tools = Json::array();
  for (const ToolFinding& tool : report.tools) {
    Json t = {{"name", tool.name},
              {"standing", standing_name(tool.standing)},
              {"candidate", tool.standing == Standing::candidate},
              {"effect_words", tool.effect_words},
              {"read_words", tool.read_words},
              {"leading_word", tool.leading_word},
              {"guard_seen", tool.guard_seen},
              {"evidence", tool.evidence},
              {"checks", tool.checks},
              {"wrap_command", tool.wrap_command.empty() ? Json(nullptr) : Json(tool.wrap_command)}};
    if (tool.source) {
      t["source"] = {{"file", tool.source->declared_at.file},
                     {"line", tool.source->declared_at.line},
                     {"form", tool.source->declared_at.what},
                     {"description", tool.source->description},
                     {"annotations", tool.source->annotations},
                     {"own_writes", array_of(tool.source->own_writes, located_json)},
                     {"also_declared_at", array_of(tool.source->also_declared_at, located_json)}};
    } else {
      t["source"] = nullptr;
    }
    if (tool.live) {
      t["live"] = {{"declared", declared_name(tool.live->declared)},
                   {"annotations", tool.live->annotations},
                   {"description", tool.live->description},
                   {"wrap_default", tool.live->wrap_fences_by_default ? "fenced" : "passed_through"}};
    } else {
      t["live"] = nullptr;
    }
    tools.push_back(std::move(t));
  }
  Json out = {{"mode", report.root.empty() ? "live" : (report.command.empty() ? "source" : "both")},
              {"root", report.root.empty() ? Json(nullptr) : Json(report.root)},
              {"command", report.command},
              {"files_scanned", report.files_scanned},
              {"skipped_dirs", report.skipped_dirs},
              {"tools", tools},
              {"writes", array_of(report.writes, located_json)},
              {"guards", array_of(report.guards, located_json)},
              {"retries_around_writes", array_of(report.retries_around_writes, [](const RetryFinding& r) {
                 return Json{{"retry", located_json(r.retry)}, {"write", located_json(r.write)}, {"guarded", r.guarded}};
               })},
              {"cannot_see", report.cannot_see}};
  return out;
}

}  // namespace effectfence::scan
