// build_report: joins source and live findings by tool name and decides
// which tools are worth a look, with the evidence and checks for each.
#include <algorithm>
#include <map>
#include <optional>

#include "scan/report.h"
#include "scan/words.h"

namespace effectfence::scan {
namespace {

constexpr size_t kContextItems = 3;  // repository-wide items quoted per candidate

std::string at(const Located& place) { return place.file + ":" + std::to_string(place.line); }

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

void merge_words(const std::vector<std::string>& more, std::vector<std::string>* into) {
  for (const auto& w : more) {
    if (std::find(into->begin(), into->end(), w) == into->end()) into->push_back(w);
  }
}

struct Context {
  const ScanReport& report;
  bool have_source;
  const std::vector<std::string>& command;
};

// What the tool declares: the served annotations, else those written in
// its source, else nothing.
std::optional<Declared> declared_of(const ToolFinding& tool) {
  if (tool.live) return tool.live->declared;
  if (tool.source && !tool.source->annotations.empty()) {
    return read_live_tool(Json{{"name", tool.name}, {"annotations", tool.source->annotations}}).declared;
  }
  return std::nullopt;
}

Standing decide(const ToolFinding& tool, const Context& context) {
  if (const auto declared = declared_of(tool)) {
    switch (*declared) {
      case Declared::read_only: return Standing::reads;
      case Declared::idempotent: return Standing::declared_idempotent;
      case Declared::non_idempotent_or_destructive: return Standing::candidate;
      case Declared::undeclared: break;
    }
  }
  // A tool that says it reads is believed: it leads with a read word, or
  // says nothing of acting.
  if (is_read_word(tool.leading_word) || (!tool.read_words.empty() && tool.effect_words.empty())) {
    return Standing::reads;
  }
  if (tool.source && !tool.effect_words.empty() && context.report.writes.empty()) return Standing::no_write_in_tree;
  if (tool.live) return Standing::candidate;  // undeclared: MCP's defaults assume the worst
  // Not served (or not asked): the tool came from the source.
  if (!tool.effect_words.empty() || !tool.source->own_writes.empty()) return Standing::candidate;
  return Standing::unclear;
}

void live_evidence(const LiveTool& live, ToolFinding* tool) {
  switch (live.declared) {
    case Declared::read_only:
      tool->evidence.push_back("live: declared read-only (readOnlyHint: true)");
      break;
    case Declared::idempotent:
      tool->evidence.push_back("live: declared idempotent (idempotentHint: true)");
      break;
    case Declared::non_idempotent_or_destructive:
      tool->evidence.push_back("live: declared " + std::string(live.annotations.value("destructiveHint", true) ? "destructive" : "not destructive") +
                               " and not idempotent (annotations " + live.annotations.dump() + ")");
      break;
    case Declared::undeclared:
      tool->evidence.push_back(
          "live: undeclared (no readOnlyHint, idempotentHint or destructiveHint; MCP's defaults assume a "
          "destructive, non-idempotent tool)");
      break;
  }
  tool->evidence.push_back(std::string("live: effectfence wrap ") +
                           (live.wrap_fences_by_default ? "fences it by default" : "passes it through by default"));
}

void candidate_details(const Context& context, ToolFinding* tool) {
  const ScanReport& report = context.report;
  if (!tool->effect_words.empty()) tool->evidence.push_back("its own words say it acts: " + joined(tool->effect_words));
  if (!tool->read_words.empty()) tool->evidence.push_back("its own words also say it looks: " + joined(tool->read_words));
  if (tool->source) {
    for (const Located& w : tool->source->own_writes) {
      tool->evidence.push_back("write inside its declaration: " + at(w) + " " + w.what);
    }
  }
  if (context.have_source) {
    if (report.writes.empty()) {
      tool->evidence.push_back("no write found anywhere in the tree");
    } else {
      std::string sample;
      for (size_t i = 0; i < report.writes.size() && i < kContextItems; ++i) {
        sample += (i ? "; " : "") + at(report.writes[i]) + " " + report.writes[i].what;
      }
      tool->evidence.push_back("writes in the tree (" + std::to_string(report.writes.size()) +
                               ", context, not tied to this tool): " + sample);
    }
    if (report.guards.empty()) {
      tool->evidence.push_back("no idempotency guard named in the tree's code");
    } else {
      tool->guard_seen = true;
      std::string sample;
      for (size_t i = 0; i < report.guards.size() && i < kContextItems; ++i) {
        sample += (i ? "; " : "") + at(report.guards[i]) + " " + report.guards[i].what;
      }
      tool->evidence.push_back("idempotency guards named in code (" + std::to_string(report.guards.size()) + "): " + sample);
      tool->checks.push_back("whether a guard named above is on this tool's path, and keyed by what the caller "
                             "retries with (not a fresh value per attempt)");
    }
    for (const RetryFinding& r : report.retries_around_writes) {
      tool->evidence.push_back("retry (" + r.retry.what + ") at " + at(r.retry) + " around a write at " +
                               at(r.write) + " " + r.write.what + (r.guarded ? ", with a guard named inside" : ""));
    }
    if (!report.retries_around_writes.empty()) {
      tool->checks.push_back("whether a retry listed above resends a write whose first attempt may have "
                             "succeeded (a timeout after the effect)");
    }
  }
  tool->checks.push_back("what the handler of " + tool->name +
                         " calls, and whether the service behind it deduplicates on its own");
  std::string server = "<command that starts this server>";
  if (!context.command.empty()) {
    server.clear();
    for (const auto& word : context.command) server += (server.empty() ? "" : " ") + shell_word(word);
  }
  tool->checks.push_back("what two identical calls of " + tool->name + " do, against a test account: effectfence probe --tool " +
                         shell_word(tool->name) + " --args '{...}' -- " + server);
  if (tool->live && tool->live->declared == Declared::undeclared) {
    tool->checks.push_back("add annotations to the tool (readOnlyHint, idempotentHint, destructiveHint), so "
                           "clients need not assume the worst");
  }
}

ToolFinding& finding_for(const std::string& name, std::map<std::string, ToolFinding>* tools) {
  ToolFinding& tool = (*tools)[name];
  tool.name = name;
  return tool;
}

std::vector<std::string> cannot_see(const SourceTree* tree, bool have_live) {
  const bool have_source = tree != nullptr;
  std::vector<std::string> lines = {
      "guards in the services the code calls (an API that deduplicates on its side, a database constraint)",
      "SDKs and libraries outside the tree: node_modules, vendor, site-packages and build output are not read",
      "runtime configuration: environment, feature flags, gateways or clients that retry on their own",
      "whether a write listed for the tree runs on a given tool's path: writes are context, not tied to a tool",
      "tools whose names or descriptions are built at run time, and declaration forms it does not know",
  };
  if (tree) {
    for (const SourceFile& file : tree->files) {
      if (!file.masked.unread_from) continue;
      lines.push_back(file.path + " from line " + std::to_string(file.masked.line_of(*file.masked.unread_from)) +
                      ": templates nested deeper than " + std::to_string(kMaxTemplateNesting) +
                      " levels (template_nesting_too_deep), the rest of the file was not read");
    }
  }
  if (!have_source) lines.push_back("the server's source: only what tools/list says was read (scan PATH adds it)");
  if (!have_live) {
    lines.push_back("what the running server declares: annotations come from tools/list (scan -- COMMAND adds it)");
  } else {
    lines.push_back("whether the annotations are true: they are the server's own claims, and no tool was called");
  }
  return lines;
}

}  // namespace

const char* standing_name(Standing standing) {
  switch (standing) {
    case Standing::candidate: return "candidate";
    case Standing::reads: return "reads";
    case Standing::declared_idempotent: return "declared_idempotent";
    case Standing::no_write_in_tree: return "no_write_in_tree";
    case Standing::unclear: return "unclear";
  }
  return "unclear";
}

std::string shell_word(const std::string& word) {
  const bool safe = !word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                           "0123456789-_./=:,@%+") == std::string::npos;
  if (safe) return word;
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string wrap_line(const std::string& tool, const std::vector<std::string>& command) {
  std::string line = "effectfence wrap --only " + shell_word(tool) + " --";
  if (command.empty()) return line + " <command that starts this server>";
  for (const auto& word : command) line += " " + shell_word(word);
  return line;
}

ScanReport build_report(const SourceTree* tree, const std::vector<Json>* live_tools,
                        const std::vector<std::string>& command) {
  ScanReport report;
  report.command = command;
  std::map<std::string, ToolFinding> tools;
  if (tree) {
    report.root = tree->root;
    report.files_scanned = tree->files.size();
    report.skipped_dirs = tree->skipped_dirs;
    const Evidence evidence = collect_evidence(*tree);
    auto place = [&](size_t file_index, int line, std::string what) {
      return Located{tree->files[file_index].path, line, std::move(what)};
    };
    for (const WriteSite& w : evidence.writes) report.writes.push_back(place(w.file_index, w.line, w.kind + " " + w.code));
    for (const Guard& g : evidence.guards) report.guards.push_back(place(g.file_index, g.line, g.name));
    for (const RetryAroundWrite& r : evidence.retries) {
      report.retries_around_writes.push_back(RetryFinding{place(r.file_index, r.line, r.how),
                                                          place(r.write.file_index, r.write.line, r.write.kind + " " + r.write.code),
                                                          r.guarded});
    }
    for (const ToolDeclaration& d : find_declarations(*tree)) {
      ToolFinding& tool = finding_for(d.name, &tools);
      const Located here = place(d.file_index, d.line, d.form);
      if (tool.source) {  // the same name declared twice: keep the first, name the others
        tool.source->also_declared_at.push_back(here);
        continue;
      }
      SourceTool source{here, d.description, d.annotations, {}, {}};
      for (const WriteSite& w : evidence.writes) {
        if (w.file_index == d.file_index && w.offset >= d.begin && w.offset < d.end) {
          source.own_writes.push_back(place(w.file_index, w.line, w.kind + " " + w.code));
        }
      }
      tool.source = std::move(source);
      merge_words(effect_words(d.name + " " + d.description), &tool.effect_words);
      merge_words(read_words(d.name + " " + d.description), &tool.read_words);
      tool.leading_word = leading_word(d.name, d.description);
    }
  }
  if (live_tools) {
    for (const LiveTool& live : read_live_tools(*live_tools)) {
      ToolFinding& tool = finding_for(live.name, &tools);
      tool.live = live;
      merge_words(effect_words(live.name + " " + live.description), &tool.effect_words);
      merge_words(read_words(live.name + " " + live.description), &tool.read_words);
      if (tool.leading_word.empty()) tool.leading_word = leading_word(live.name, live.description);
    }
  }

  const Context context{report, tree != nullptr, command};
  for (auto& [name, tool] : tools) {
    if (tool.source) {
      tool.evidence.push_back("declared at " + at(tool.source->declared_at) + " (" + tool.source->declared_at.what + ")");
      for (const Located& other : tool.source->also_declared_at) tool.evidence.push_back("also declared at " + at(other));
    } else if (tree) {
      tool.evidence.push_back("not found in the source (declared in a form the scan does not know, or outside the tree)");
    }
    if (tool.source && !tool.source->annotations.empty() && !tool.live) {
      tool.evidence.push_back("its declaration writes the hints " + tool.source->annotations.dump() + " (" +
                              declared_name(*declared_of(tool)) +
                              "; what the server serves is what counts: scan -- COMMAND reads it)");
    }
    if (tool.live) {
      live_evidence(*tool.live, &tool);
    } else if (live_tools) {
      tool.evidence.push_back("live: not in the server's tools/list (declared but not served, or served under another name)");
    }
    tool.standing = decide(tool, context);
    switch (tool.standing) {
      case Standing::candidate:
        candidate_details(context, &tool);
        tool.wrap_command = wrap_line(name, command);
        break;
      case Standing::declared_idempotent:
        tool.checks.push_back("that an identical repeat of " + name + " really changes nothing more");
        tool.wrap_command = wrap_line(name, command);
        break;
      case Standing::reads:
        if (!tool.read_words.empty()) tool.evidence.push_back("its own words say it looks: " + joined(tool.read_words));
        if (!tool.effect_words.empty() && (!tool.live || tool.live->declared == Declared::undeclared)) {
          tool.evidence.push_back("it leads with \"" + tool.leading_word + "\"; its effect words (" +
                                  joined(tool.effect_words) + ") are taken as what it looks at");
        }
        break;
      case Standing::no_write_in_tree:
        tool.evidence.push_back("its own words say it acts (" + joined(tool.effect_words) +
                                "), but no write was found anywhere in the tree: it may only build something "
                                "(a link, a payload) for someone else to act on");
        tool.checks.push_back("whether " + name + " hands its result to a service that acts (then scan that service)");
        break;
      case Standing::unclear:
        tool.evidence.push_back("no effect or read words in its name or description, no write in its declaration");
        break;
    }
  }
  for (auto& [name, tool] : tools) report.tools.push_back(std::move(tool));
  std::stable_sort(report.tools.begin(), report.tools.end(), [](const ToolFinding& a, const ToolFinding& b) {
    return (a.standing == Standing::candidate) > (b.standing == Standing::candidate);
  });
  report.cannot_see = cannot_see(tree, live_tools != nullptr);
  return report;
}

}  // namespace effectfence::scan
