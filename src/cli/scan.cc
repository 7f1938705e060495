// effectfence scan: finds the tools of an MCP server that could fire one
// effect twice, from its source (PATH), from what it serves (-- COMMAND:
// tools/list only, never a tool call), or both joined by tool name.
// A candidate finder: evidence and next steps, never a verdict.
#include <csignal>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cli/child_session.h"
#include "cli/subcommand.h"
#include "cli/commands.h"
#include "scan/render.h"

namespace effectfence::cli {
namespace {

constexpr int kExitScanned = 0;      // it ran, whatever it found
constexpr int kExitCouldNotScan = 2;  // bad usage, unreadable path, a server that would not start

struct ScanOptions {
  std::string path;
  std::vector<std::string> command;
  bool json = false;
  int timeout_secs = 30;
};

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: effectfence scan [--json] [--timeout-secs S] PATH\n"
               "       effectfence scan [--json] [--timeout-secs S] -- COMMAND [ARG...]\n"
               "       effectfence scan [--json] [--timeout-secs S] PATH -- COMMAND [ARG...]\n\n"
               "Finds the tools of an MCP server that could fire the same effect twice: candidates\n"
               "with evidence, what to check by hand and the effectfence wrap line that fences them.\n"
               "It finds leads, it does not prove: read the evidence before you accuse a tool.\n\n"
               "  PATH               the server's source tree (TypeScript, JavaScript, Python, Go, Rust;\n"
               "                     node_modules, build output, tests and examples are not read)\n"
               "  -- COMMAND         start the server (stdio) and read its tools/list; no tool is called\n"
               "  --json             machine-readable report on stdout\n"
               "  --timeout-secs S   how long to wait for the server (default 30)\n\n"
               "exit: 0 the scan ran (whatever it found), 2 it could not\n");
}

int usage_error(const std::string& message) {
  std::fprintf(stderr, "effectfence scan: %s\n\n", message.c_str());
  print_usage(stderr);
  return kExitCouldNotScan;
}

// Returns an exit code when done (help, bad usage), else nullopt.
std::optional<int> parse_options(const Args& args, ScanOptions* o) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      o->command.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      if (o->command.empty()) return usage_error("no server command after --");
      break;
    } else if (a == "--help" || a == "-h") {
      print_usage(stdout);
      return kExitScanned;
    } else if (a == "--json") {
      o->json = true;
    } else if (a == "--timeout-secs") {
      int secs = 0;
      size_t used = 0;
      try {
        secs = i + 1 < args.size() ? std::stoi(args[i + 1], &used) : 0;
      } catch (const std::exception&) {
      }
      if (secs < 1 || secs > 3600 || used != args[i + 1].size()) {
        return usage_error("--timeout-secs needs a number of seconds from 1 to 3600");
      }
      o->timeout_secs = secs;
      ++i;
    } else if (!a.empty() && a[0] == '-') {
      return usage_error("unknown option '" + a + "'");
    } else if (o->path.empty()) {
      o->path = a;
    } else {
      return usage_error("one PATH only (got '" + o->path + "' and '" + a + "'); a server command goes after --");
    }
  }
  if (o->path.empty() && o->command.empty()) return usage_error("give a source PATH, a server (-- COMMAND), or both");
  return std::nullopt;
}

// The server's tools, read once; nullopt after a named error on stderr.
std::optional<std::vector<Json>> read_live_tools(const ScanOptions& o) {
  mcp::Logger log("effectfence scan", mcp::LogLevel::warn);
  const auto timeout = std::chrono::seconds(o.timeout_secs);
  auto session = open_child_session(o.command, "effectfence-scan", log, timeout);
  if (!session.ok()) {
    print_error("scan", "starting the server", session.status().message());
    return std::nullopt;
  }
  auto tools = mcp::list_all_tools(*(*session)->client, timeout);
  if (!tools.ok()) {
    print_error("scan", "listing the server's tools", tools.status().message());
    return std::nullopt;
  }
  return std::move(*tools);
}

int scan(const ScanOptions& o) {
  std::optional<scan::SourceTree> tree;
  if (!o.path.empty()) {
    auto read = scan::read_source_tree(o.path);
    if (!read.ok()) {
      print_error("scan", "reading the source", read.status().message());
      return kExitCouldNotScan;
    }
    tree = std::move(*read);
  }
  std::optional<std::vector<Json>> live;
  if (!o.command.empty()) {
    live = read_live_tools(o);
    if (!live) return kExitCouldNotScan;
  }
  const scan::ScanReport report = scan::build_report(tree ? &*tree : nullptr, live ? &*live : nullptr, o.command);
  if (o.json) {
    std::printf("%s\n", scan::render_json(report).dump(2, ' ', false, Json::error_handler_t::replace).c_str());
  } else {
    std::fputs(scan::render_text(report).c_str(), stdout);
  }
  return kExitScanned;
}

}  // namespace

int run_scan(const Args& args) {
  ScanOptions options;
  if (auto done = parse_options(args, &options)) return *done;
  std::signal(SIGPIPE, SIG_IGN);  // a server that died is a write error to report, not our death
  return run_guarded("scan", [&] { return scan(options); });  // an escaped exception: kExitFailure, 2
}

}  // namespace effectfence::cli
