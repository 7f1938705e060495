// effectfence fenced: the intents that are fenced (failed or unknown) and
// why. Each one waits for a person to find out whether its effect happened
// and then clear it; nothing re-runs it before that.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/options.h"
#include "cli/output.h"
#include "cli/subcommand.h"
#include "cli/time_text.h"
#include "cli/commands.h"
#include "ledger/audit_reads.h"
#include "effectfence/fence.h"
#include "effectfence/json.h"

namespace effectfence::cli {
namespace {

constexpr const char* kCommand = "fenced";

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: effectfence fenced [--db PATH] [--json]\n\n"
               "Lists the fenced intents (state failed or unknown), oldest first, with the tool,\n"
               "arguments, agent, since when and why. A fenced intent is refused (prior_failure)\n"
               "until an operator checks the real outcome and clears it:\n"
               "  effectfence clear --db PATH INTENT --reason \"...\"\n"
               "Also lists the intents in flight whose holder process on this host is gone (any\n"
               "server opening the ledger, or effectfence clear, fences them as unknown), and the\n"
               "intents still in flight past their lease whose holder process is\n"
               "running on this host: identical calls are refused in_flight while it runs. If it\n"
               "will never finish one (its agent is gone), stop it (kill -TERM PID): it fences\n"
               "what it holds as unknown.\n"
               "Opens the ledger read-only. The same list in SQL: SELECT * FROM fenced;\n\n"
               "options:\n"
               "  --db PATH  ledger file or postgres:// URL (default: $EFFECTFENCE_LEDGER, else %s)\n"
               "  --json     one JSON object: {path, count, fenced: [{intent, state, tool, args,\n"
               "             domain, agent, reason, since, since_ms, generation, holder}],\n"
               "             holder_gone: [{intent, tool, args, domain, agent, holder, admitted,\n"
               "             admitted_ms}],\n"
               "             past_lease: [{intent, tool, args, domain, agent, holder, lease_expired,\n"
               "             lease_expired_ms}]}\n"
               "  --help     this text\n",
               Settings::default_ledger_path("server").c_str());
}

// args is canonical JSON in the ledger; shown as a string if someone broke it.
Json args_json(const std::string& text) {
  JsonError error;
  auto parsed = parse_strict(text, &error, WideIntegers::as_doubles);
  return parsed ? *parsed : Json(text);
}

struct Report {
  std::vector<FencedIntent> fenced;
  std::vector<HeldIntent> holder_gone;
  std::vector<HeldIntent> past_lease;
};

// time_key names at_ms: "admitted" or "lease_expired" (and its _ms twin).
Json held_json(const std::vector<HeldIntent>& held, const std::string& time_key) {
  Json list = Json::array();
  for (const auto& h : held) {
    list.push_back({{"intent", h.intent},
                    {"tool", h.tool},
                    {"args", args_json(h.args)},
                    {"domain", h.domain},
                    {"agent", h.agent},
                    {"holder", h.holder},
                    {time_key, format_utc(h.at_ms)},
                    {time_key + "_ms", h.at_ms}});
  }
  return list;
}

void print_json(const std::string& path, const Report& report) {
  const auto& fenced = report.fenced;
  Json list = Json::array();
  for (const auto& f : fenced) {
    list.push_back({{"intent", f.intent},
                    {"state", f.state},
                    {"tool", f.tool},
                    {"args", args_json(f.args)},
                    {"domain", f.domain},
                    {"agent", f.agent},
                    {"reason", f.reason},
                    {"since", format_utc(f.since_ms)},
                    {"since_ms", f.since_ms},
                    {"generation", f.generation},
                    {"holder", f.holder}});
  }
  const Json out = {{"path", path},
                    {"count", fenced.size()},
                    {"fenced", list},
                    {"holder_gone", held_json(report.holder_gone, "admitted")},
                    {"past_lease", held_json(report.past_lease, "lease_expired")}};
  print_json_line(out);
}

// One entry of a held list; when names at_ms ("admitted ...", "lease ran out ...").
void print_held(const HeldIntent& h, const std::string& when) {
  std::printf("\n%s  [%s]\n", terminal_safe(h.intent).c_str(), when.c_str());
  std::printf("  tool    %s %s\n", terminal_safe(h.tool).c_str(), terminal_safe(h.args).c_str());
  std::printf("  domain  %s   agent %s   holder %s\n", terminal_safe(h.domain).c_str(),
              terminal_safe(h.agent).c_str(), terminal_safe(h.holder).c_str());
}

void print_holder_gone(const std::string& path, const std::vector<HeldIntent>& holder_gone) {
  if (holder_gone.empty()) return;
  std::printf("\n%zu intent(s) in flight whose holder process on this host is gone: their effect may or\n"
              "may not have happened. Any server opening the ledger fences them as unknown; check each\n"
              "and clear it: effectfence clear --db %s INTENT --reason \"...\"\n",
              holder_gone.size(), path.c_str());
  for (const auto& h : holder_gone) print_held(h, "admitted " + format_utc(h.at_ms) + ", holder gone");
}

void print_past_lease(const std::vector<HeldIntent>& past_lease) {
  if (past_lease.empty()) return;
  std::printf("\n%zu intent(s) still in flight past their lease: identical calls are refused while the\n"
              "holder runs. If it will never finish them (its agent is gone), stop it (kill -TERM PID):\n"
              "it fences them as unknown, to check and clear as above.\n",
              past_lease.size());
  for (const auto& h : past_lease) print_held(h, "lease ran out " + format_utc(h.at_ms));
}

void print_text(const std::string& path, const Report& report) {
  const auto& fenced = report.fenced;
  const auto& past_lease = report.past_lease;
  if (fenced.empty()) {
    std::printf("no fenced intents in %s\n", path.c_str());
    print_holder_gone(path, report.holder_gone);
    print_past_lease(past_lease);
    return;
  }
  std::printf("%zu fenced intent(s) in %s; each is refused until an operator checks whether its effect\n"
              "happened and clears it: effectfence clear --db %s INTENT --reason \"...\"\n",
              fenced.size(), path.c_str(), path.c_str());
  // Every field but the time is text an agent or a person wrote.
  for (const auto& f : fenced) {
    std::printf("\n%s  [%s since %s]\n", terminal_safe(f.intent).c_str(), terminal_safe(f.state).c_str(),
                format_utc(f.since_ms).c_str());
    std::printf("  tool    %s %s\n", terminal_safe(f.tool).c_str(), terminal_safe(f.args).c_str());
    std::printf("  domain  %s   agent %s   generation %lld   holder %s\n", terminal_safe(f.domain).c_str(),
                terminal_safe(f.agent).c_str(), static_cast<long long>(f.generation), terminal_safe(f.holder).c_str());
    std::printf("  why     %s\n", f.reason.empty() ? "(no reason recorded)" : terminal_safe(f.reason).c_str());
  }
  print_holder_gone(path, report.holder_gone);
  print_past_lease(past_lease);
}

int fenced(const ParsedArgs& parsed) {
  const std::string path = resolve_ledger_path(parsed, kCommand);
  auto opened = open_ledger_reader(path);
  if (!opened.ok()) {
    print_error(kCommand, "opening the ledger", opened.status().message());
    return kExitFailure;
  }
  std::unique_ptr<LedgerReader> db = std::move(*opened);
  Report report;
  try {
    report.fenced = read_fenced(*db);
    report.holder_gone = read_holder_gone(*db);
    report.past_lease = read_past_lease(*db, ledger_now_ms(*db));
  } catch (const std::exception& e) {
    print_error(kCommand, "reading fenced intents", e.what());
    return kExitFailure;
  }
  if (parsed.has("json")) {
    print_json(db->name(), report);
  } else {
    print_text(db->name(), report);
  }
  return kExitOk;
}

}  // namespace

int run_fenced(const Args& args) {
  return run_command({kCommand, {{"db", true}, {"json", false}}, print_usage}, args, fenced);
}

}  // namespace effectfence::cli
