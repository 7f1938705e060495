// effectfence probe: does a server fire one action twice? A bare MCP client
// sends N byte-identical calls of one named tool and counts the distinct
// effects it can see in the answers.
//
// Distinct successful answers to identical calls are proof of double
// execution. Identical answers prove nothing (a server may act twice and
// answer alike), so they are reported as inconclusive, never as a zero.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "cli/child_session.h"
#include "cli/commands.h"

namespace effectfence::cli {
namespace {

constexpr int kExitNoDoubleFireProven = 0;
constexpr int kExitDoubleFireProven = 1;
constexpr int kExitCouldNotProbe = 2;

struct ProbeOptions {
  std::string tool;
  Json args = Json::object();
  int calls = 20;
  bool sequential = false;
  bool json = false;
  int timeout_secs = 30;
  std::vector<std::string> command;
};

struct ProbeReport {
  int sent = 0;
  int succeeded = 0;
  int tool_errors = 0;
  int transport_failures = 0;
  std::set<std::string> effects;  // canonical answers of the successful calls
  std::vector<std::string> failure_samples;

  std::string verdict() const {
    if (effects.size() > 1) return "double_fire";
    if (succeeded > 1) return "inconclusive";
    return "not_enough_answers";
  }
  int exit_code() const { return effects.size() > 1 ? kExitDoubleFireProven : kExitNoDoubleFireProven; }
};

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: effectfence probe --tool NAME [--args JSON] [-n N] [--sequential] [--json]\n"
               "                         [--timeout-secs S] -- COMMAND [ARG...]\n\n"
               "Starts COMMAND (a stdio MCP server), checks that tool NAME exists (no other tool is\n"
               "ever called), sends N byte-identical calls of it, concurrently (or one after another\n"
               "with --sequential: retries rather than races) and reports calls sent, succeeded, tool\n"
               "errors, transport failures and the DISTINCT effects seen in the answers.\n\n"
               "Distinct answers to identical calls prove the server ran the action more than once.\n"
               "Identical answers are inconclusive: a server can act twice and answer alike.\n\n"
               "  --tool NAME        the tool to call (required)\n"
               "  --args JSON        its arguments, a JSON object (default {})\n"
               "  -n N               how many calls (default 20, at most 1000)\n"
               "  --sequential       one call after another instead of all at once\n"
               "  --json             machine-readable report on stdout\n"
               "  --timeout-secs S   how long to wait for the server and each answer (default 30)\n\n"
               "exit: 0 no double-fire proven, 1 double-fire proven, 2 could not probe\n");
}

std::optional<int> parse_int(const std::string& text, int lo, int hi) {
  try {
    size_t used = 0;
    const int v = std::stoi(text, &used);
    if (used == text.size() && v >= lo && v <= hi) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// Returns an exit code when done (help, bad usage), else nullopt.
std::optional<int> parse_options(const Args& args, ProbeOptions* o) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_value = i + 1 < args.size();
    if (a == "--") {
      o->command.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    } else if (a == "--help" || a == "-h") {
      print_usage(stdout);
      return 0;
    } else if (a == "--tool" && has_value) {
      o->tool = args[++i];
    } else if (a == "--args" && has_value) {
      JsonError error;
      auto parsed = parse_strict(args[++i], &error);
      if (!parsed || !parsed->is_object()) {
        std::fprintf(stderr, "effectfence probe: --args must be a JSON object%s%s\n", parsed ? "" : ": ",
                     parsed ? "" : error.message.c_str());
        return kExitCouldNotProbe;
      }
      o->args = *parsed;
    } else if ((a == "-n" || a == "--calls") && has_value) {
      auto n = parse_int(args[++i], 1, 1000);
      if (!n) {
        std::fprintf(stderr, "effectfence probe: -n needs a number from 1 to 1000\n");
        return kExitCouldNotProbe;
      }
      o->calls = *n;
    } else if (a == "--timeout-secs" && has_value) {
      auto s = parse_int(args[++i], 1, 3600);
      if (!s) {
        std::fprintf(stderr, "effectfence probe: --timeout-secs needs a number of seconds\n");
        return kExitCouldNotProbe;
      }
      o->timeout_secs = *s;
    } else if (a == "--sequential") {
      o->sequential = true;
    } else if (a == "--json") {
      o->json = true;
    } else {
      std::fprintf(stderr, "effectfence probe: unknown or incomplete option '%s'\n\n", a.c_str());
      print_usage(stderr);
      return kExitCouldNotProbe;
    }
  }
  if (o->tool.empty() || o->command.empty()) {
    std::fprintf(stderr, "effectfence probe: --tool NAME and -- COMMAND are required\n\n");
    print_usage(stderr);
    return kExitCouldNotProbe;
  }
  return std::nullopt;
}

// What identifies an effect in an answer: what the tool returned, not the
// envelope (a proxy's _meta note on a replay is not a different effect).
std::string effect_of(const Json& result) {
  Json effect = Json::object();
  for (const char* key : {"content", "structuredContent"}) {
    if (result.contains(key)) effect[key] = result.at(key);
  }
  JsonError ignored;
  return validate_canonicalizable(effect, &ignored) ? canonicalize(effect) : effect.dump();
}

// Keeps up to three different failures to show.
void note_failure(const std::string& what, ProbeReport* report) {
  auto& samples = report->failure_samples;
  if (samples.size() < 3 && std::find(samples.begin(), samples.end(), what) == samples.end()) samples.push_back(what);
}

void tally(const mcp::ClientReply& reply, ProbeReport* report) {
  if (reply.kind == mcp::ClientReply::Kind::result && reply.result.is_object()) {
    if (reply.result.value("isError", false)) {
      ++report->tool_errors;
      note_failure(effect_of(reply.result), report);
    } else {
      ++report->succeeded;
      report->effects.insert(effect_of(reply.result));
    }
    return;
  }
  ++report->transport_failures;
  note_failure(mcp::describe_reply(reply), report);
}

ProbeReport fire(mcp::McpClient& client, const ProbeOptions& o) {
  const Json params = {{"name", o.tool}, {"arguments", o.args}};
  const auto timeout = std::chrono::seconds(o.timeout_secs);
  ProbeReport report;
  if (o.sequential) {
    for (int i = 0; i < o.calls; ++i) {
      ++report.sent;
      tally(client.call("tools/call", params, timeout), &report);
    }
    return report;
  }
  // All requests are written before any answer is awaited: the race.
  std::vector<std::shared_ptr<mcp::McpClient::Request>> requests;
  for (int i = 0; i < o.calls; ++i) {
    requests.push_back(client.send("tools/call", params));
    ++report.sent;
  }
  for (auto& request : requests) {
    auto reply = request->wait_for(timeout);
    if (!reply) {
      client.abandon(*request);
      mcp::ClientReply timed_out;  // kind closed
      timed_out.why = "no answer within the timeout";
      reply = std::move(timed_out);
    }
    tally(*reply, &report);
  }
  return report;
}

void print_report(const ProbeOptions& o, const ProbeReport& r) {
  if (o.json) {
    const Json j = {{"tool", o.tool},
                    {"args", o.args},
                    {"mode", o.sequential ? "sequential" : "concurrent"},
                    {"sent", r.sent},
                    {"succeeded", r.succeeded},
                    {"tool_errors", r.tool_errors},
                    {"transport_failures", r.transport_failures},
                    {"distinct_effects", r.effects.size()},
                    {"verdict", r.verdict()},
                    {"failure_samples", r.failure_samples}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("probe: %d %s calls of %s %s\n", r.sent, o.sequential ? "sequential" : "concurrent", o.tool.c_str(),
              canonicalize(o.args).c_str());
  std::printf("  sent                %d\n  succeeded           %d\n  tool errors         %d\n"
              "  transport failures  %d\n  DISTINCT effects    %zu\n",
              r.sent, r.succeeded, r.tool_errors, r.transport_failures, r.effects.size());
  for (const auto& sample : r.failure_samples) std::printf("  e.g. failure: %.300s\n", sample.c_str());
  if (r.verdict() == "double_fire") {
    std::printf("verdict: DOUBLE-FIRE PROVEN: %zu different results for one identical action.\n"
                "         Put it behind the fence: effectfence wrap -- <this server>\n",
                r.effects.size());
  } else if (r.verdict() == "inconclusive") {
    std::printf("verdict: inconclusive: every successful answer was identical. That proves no double\n"
                "         execution, and no single one either: a server can act twice and answer alike.\n");
  } else {
    std::printf("verdict: not enough successful answers to judge\n");
  }
}

}  // namespace

int run_probe(const Args& args) {
  ProbeOptions options;
  if (auto done = parse_options(args, &options)) return *done;
  mcp::Logger log("effectfence probe", mcp::LogLevel::warn);
  std::signal(SIGPIPE, SIG_IGN);  // a server that died is a write error to report, not our death
  try {
    auto opened = open_child_session(options.command, "effectfence-probe", log,
                                     std::chrono::seconds(options.timeout_secs));
    if (!opened.ok()) {
      std::fprintf(stderr, "effectfence probe: starting the server: %s\n", opened.status().message().c_str());
      return kExitCouldNotProbe;
    }
    const std::unique_ptr<ChildSession>& session = *opened;
    auto tools = mcp::list_all_tools(*session->client, std::chrono::seconds(options.timeout_secs));
    if (!tools.ok()) {
      std::fprintf(stderr, "effectfence probe: listing the server's tools: %s\n", tools.status().message().c_str());
      return kExitCouldNotProbe;
    }
    bool found = false;
    for (const Json& t : *tools) found = found || (t.is_object() && t.value("name", "") == options.tool);
    if (!found) {
      std::fprintf(stderr, "effectfence probe: the server has no tool '%s' (it has %zu tools)\n",
                   options.tool.c_str(), tools->size());
      return kExitCouldNotProbe;
    }
    const ProbeReport report = fire(*session->client, options);
    print_report(options, report);
    if (report.sent > 0 && report.transport_failures == report.sent) return kExitCouldNotProbe;
    return report.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "effectfence probe: %s\n", e.what());
    return kExitCouldNotProbe;
  }
}

}  // namespace effectfence::cli
