// effectfence wrap: a fencing proxy in front of an existing stdio MCP server.
//
// Lifecycle: open the ledger; when the agent's initialize arrives, start the
// child with the agent's roots, sampling and elicitation capabilities, read
// its tools and answer from them (a child that cannot start: answer the
// error and exit 1); serve until stdin ends or SIGTERM/SIGINT/SIGHUP;
// finish the calls in flight; stop the child; fence the admissions nobody
// can record any more; exit 0.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <variant>

#include "cli/subcommand.h"
#include "cli/output.h"
#include "cli/commands.h"
#include "cli/server_process.h"
#include "cli/signing_key.h"
#include "cli/version.h"
#include "core/sha256.h"
#include "effectfence/fence.h"
#include "ledger/open_ledger.h"
#include "mcp/jsonrpc.h"
#include "mcp/line_io.h"
#include "mcp/log.h"
#include "mcp/proxy.h"
#include "mcp/server.h"
#include "mcp/stop_signals.h"

namespace effectfence::cli {
namespace {

constexpr int kMaxWaitSecs = 3600;
// Clients do send one call twice a few milliseconds apart: the second waits
// for the first one's result rather than being refused. Bounded, so a hung
// tool does not hold its duplicates for ever.
constexpr int kDefaultWaitSecs = 30;

void print_wrap_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: effectfence wrap [options] -- COMMAND [ARG...]\n\n"
               "Runs COMMAND (a stdio MCP server) as a child and serves its tools on stdin/stdout,\n"
               "mirrored 1:1, with every side-effecting call fenced: the first call runs and its\n"
               "result is recorded; an identical later call gets the recorded result replayed; an\n"
               "identical call while one runs waits for its result (--wait-secs), and the child\n"
               "never sees it. What reaches each side is what the other side sent, key order and\n"
               "all, but for what the fence changes (docs/WRAP.md, \"What differs\").\n\n"
               "options:\n"
               "  --db PATH              ledger file or postgres:// URL (default: $EFFECTFENCE_LEDGER,\n"
               "                         else one file per child command: %s)\n"
               "  --fence-all            also fence tools annotated readOnlyHint: true\n"
               "  --only TOOL,...        fence exactly these tools; pass the others through\n"
               "  --except TOOL,...      never fence these tools\n"
               "  --key-arg NAME         an argument whose string value is the agent's idempotency key\n"
               "                         (_meta.idempotencyKey, when given, comes first)\n"
               "  --on-tool-error MODE   fence (default): a call the tool answers with isError is fenced\n"
               "                         as failed, since its effect may have partly happened;\n"
               "                         release: an identical retry runs again\n"
               "  --wait-secs N          an identical call arriving while one runs waits up to N s for\n"
               "                         its result (default %d); a wait that runs out, or N = 0,\n"
               "                         gets the in_flight refusal\n"
               "  --signing-key FILE     sign every certificate issued with this Ed25519 key (effectfence\n"
               "                         keygen; default: $EFFECTFENCE_SIGNING_KEY, else unsigned); a key\n"
               "                         file that others can read, or not an Ed25519 key, is refused\n"
               "  --log-level LEVEL      error, warn, info (default) or debug\n"
               "  --help                 this text\n\n"
               "Counters: effectfence stats --db LEDGER. Fenced calls: effectfence fenced --db LEDGER.\n"
               "Stops on stdin EOF, SIGTERM, SIGINT or SIGHUP: finishes the calls in flight, stops the\n"
               "child, fences what can no longer be recorded, exits 0.\n",
               Settings::default_ledger_path("wrap-<hash of COMMAND>").c_str(), kDefaultWaitSecs);
}

struct WrapOptions {
  std::string db;
  std::optional<std::string> signing_key;
  mcp::ProxyOptions proxy = [] {
    mcp::ProxyOptions defaults;
    defaults.wait = std::chrono::seconds(kDefaultWaitSecs);
    return defaults;
  }();
  mcp::LogLevel log_level = mcp::LogLevel::info;
  std::vector<std::string> command;
};

std::set<std::string> split_names(const std::string& list) {
  std::set<std::string> names;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = list.find(',', start);
    const std::string name = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!name.empty()) names.insert(name);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return names;
}

int usage_error(const std::string& message) {
  std::fprintf(stderr, "effectfence wrap: %s\n\n", message.c_str());
  print_wrap_usage(stderr);
  return 2;
}

// Returns an exit code when the command is done (help, bad usage), or
// nullopt to go on.
std::optional<int> parse_options(const Args& args, WrapOptions* options) {
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    auto value_of = [&](const std::string& flag) -> std::optional<std::string> {
      if (arg.rfind(flag + "=", 0) == 0) return arg.substr(flag.size() + 1);
      if (arg == flag && i + 1 < args.size()) return args[++i];
      return std::nullopt;
    };
    auto is = [&](const std::string& flag) { return arg == flag || arg.rfind(flag + "=", 0) == 0; };
    if (arg == "--help" || arg == "-h") {
      print_wrap_usage(stdout);
      return 0;
    }
    if (arg == "--version") {
      std::printf("effectfence %s (commit %s)\n", kVersion, kBuildCommit);
      return 0;
    }
    if (arg == "--fence-all") {
      options->proxy.policy.fence_all = true;
    } else if (is("--db")) {
      auto value = value_of("--db");
      if (!value || value->empty()) return usage_error("--db needs a path");
      options->db = *value;
    } else if (is("--signing-key")) {
      auto value = value_of("--signing-key");
      if (!value || value->empty()) return usage_error("--signing-key needs a file (effectfence keygen writes one)");
      options->signing_key = *value;
    } else if (is("--only") || is("--except")) {
      const bool only = is("--only");
      auto value = value_of(only ? "--only" : "--except");
      auto names = value ? split_names(*value) : std::set<std::string>{};
      if (names.empty()) return usage_error(std::string(only ? "--only" : "--except") + " needs TOOL[,TOOL...]");
      (only ? options->proxy.policy.only : options->proxy.policy.except).insert(names.begin(), names.end());
    } else if (is("--key-arg")) {
      auto value = value_of("--key-arg");
      if (!value || value->empty()) return usage_error("--key-arg needs an argument name");
      options->proxy.key_arg = *value;
    } else if (is("--on-tool-error")) {
      auto value = value_of("--on-tool-error");
      if (value == std::optional<std::string>("fence")) options->proxy.on_tool_error = mcp::OnToolError::fence;
      else if (value == std::optional<std::string>("release")) options->proxy.on_tool_error = mcp::OnToolError::release;
      else return usage_error("--on-tool-error must be fence or release");
    } else if (is("--wait-secs")) {
      auto value = value_of("--wait-secs");
      char* end = nullptr;
      const double secs = value ? std::strtod(value->c_str(), &end) : -1;
      if (!value || value->empty() || *end != '\0' || !(secs >= 0) || secs > kMaxWaitSecs) {
        return usage_error("--wait-secs must be a number of seconds from 0 to " + std::to_string(kMaxWaitSecs));
      }
      options->proxy.wait = std::chrono::milliseconds(static_cast<int64_t>(secs * 1000));
    } else if (is("--log-level")) {
      auto value = value_of("--log-level");
      auto level = value ? mcp::log_level_from_name(*value) : std::nullopt;
      if (!level) return usage_error("--log-level must be error, warn, info or debug");
      options->log_level = *level;
    } else if (!arg.empty() && arg[0] == '-') {
      return usage_error("unknown option '" + arg + "'");
    } else {
      break;  // the command starts here (the "--" is optional)
    }
  }
  options->command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (options->command.empty()) return usage_error("no server command given (effectfence wrap [options] -- COMMAND ...)");
  return std::nullopt;
}

// One ledger per distinct child command, so two servers that both have a
// tool of the same name never fence each other.
std::string default_ledger_name(const std::vector<std::string>& command) {
  Json argv = Json::array();
  for (const std::string& word : command) argv.push_back(word);
  JsonError ignored;
  const std::string fingerprint = validate_canonicalizable(argv, &ignored) ? canonicalize(argv) : argv.dump();
  return "wrap-" + sha256_hex(fingerprint).substr(0, 16);
}


std::string shell_quoted(const std::string& word) {
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}


mcp::ServerInfo server_info_from(const Json& child) {
  const Json info = child.value("serverInfo", Json::object());
  auto text = [](const Json& object, const char* key, const char* fallback) {
    auto it = object.find(key);
    return it != object.end() && it->is_string() ? it->get<std::string>() : std::string(fallback);
  };
  return mcp::ServerInfo{text(info, "name", "wrapped"), text(info, "title", ""), text(info, "version", "0"),
                         text(child, "instructions", "")};
}

// Waits for the calls in flight, for as long as they take: a result that
// comes is recorded, so a retry replays it. A stop signal during the wait
// stops the child instead; what it was running is fenced as unknown.
// signals_seen: the stop signals that began the shutdown (1, or 0 for the
// end of stdin); any more stop the child.
// Runs work on this thread. If a stop signal beyond the first signals_seen
// comes before it returns, interrupt() runs once, on a watcher thread, and
// should make work return soon. Returns true iff it ran.
bool run_interruptible(const mcp::StopSignals& stop, int signals_seen, const std::function<void()>& work,
                       const std::function<void()>& interrupt) {
  std::atomic<bool> done{false};
  std::atomic<bool> interrupted{false};
  std::thread watcher([&] {
    while (!done) {
      if (stop.count() > signals_seen) {
        interrupted = true;
        interrupt();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  work();
  done = true;
  watcher.join();
  return interrupted;
}

void finish_calls(mcp::Server& server, mcp::Proxy& proxy, const mcp::StopSignals& stop, int signals_seen,
                  mcp::Logger& log) {
  run_interruptible(stop, signals_seen, [&] { server.drain(); }, [&] {
    log.warn("a stop signal came while finishing: stopping the child server now; the calls it was running "
             "are fenced as unknown");
    proxy.stop_child_now();
  });
}

int serve_wrapped(const WrapOptions& options, mcp::Logger& log, mcp::StopSignals& stop, int protocol_fd) {
  Settings settings = Settings::from_environment(default_ledger_name(options.command));
  if (!options.db.empty()) {
    settings.ledger_path = options.db;
    settings.create_parent_directories = false;
  }
  if (const Status loaded = load_signing_key(signing_key_path(options.signing_key), &settings); !loaded.ok()) {
    log.error("cannot use the signing key: " + loaded.message());
    return 2;
  }
  auto opened = Fence::open(settings);
  if (auto* error = std::get_if<OpenError>(&opened)) {
    log.error("cannot open ledger: " + open_error_text(*error));
    return 2;  // could not run, as for every subcommand
  }
  std::unique_ptr<Fence> fence = std::move(std::get<std::unique_ptr<Fence>>(opened));
  mcp::ProxyOptions proxy_options = options.proxy;
  // Shown to agents in refusals: a PostgreSQL password must not be.
  proxy_options.ledger_option = "--db " + shell_quoted(printable_ledger(settings.ledger_path));
  log.info("fencing with " + fence->describe_ledger() + " (pid " + std::to_string(::getpid()) + ", lease " +
           std::to_string(settings.lease_ttl_ms / 1000) + "s" + signing_note(settings) + ")");

  Maintenance maintenance(*fence, maintenance_options("effectfence wrap (pid " + std::to_string(::getpid()) +
                                                         ") exited before the call's outcome was recorded",
                                                     log));
  bool child_failed = false;
  {
    mcp::Proxy proxy(*fence, mcp::process_launcher(options.command, log), log, proxy_options);
    mcp::LineWriter out(protocol_fd, stop.fd(), kStopWriteGrace);
    mcp::Server* server_of_proxy = nullptr;  // set before any input is read
    mcp::ServerExtensions extensions;
    extensions.keep_sent_text = true;  // what is relayed reaches the child as the agent wrote it
    // The child starts only now, so it is offered what the agent offers
    // (roots, sampling, elicitation) and its answer is the agent's.
    extensions.on_initialize = [&](const Json& params) -> std::optional<mcp::RpcError> {
      proxy.on_initialize(params);
      std::optional<Status> start;  // none if a stop signal came first
      // The child's handshake may take a minute, while nothing reads the
      // agent's input: a stop signal, before it or meanwhile, ends it.
      const bool stopped = stop.count() > 0 || run_interruptible(stop, 0, [&] { start = proxy.start(); }, [&] {
        log.info("a stop signal came while the child server was starting: stopping it");
        proxy.stop_child_now();
      });
      const bool started = start && start->ok();
      if (!started && stopped) {
        return mcp::RpcError{mcp::jsonrpc::kInternalError, "effectfence wrap is stopping (a stop signal came)",
                             nullptr};
      }
      if (!started) {
        const std::string error = start ? start->message() : std::string();
        const std::string why = "cannot start " + mcp::describe_command(options.command) + ": " + error;
        log.error(why);
        child_failed = true;
        return mcp::RpcError{mcp::jsonrpc::kInternalError, why, nullptr};
      }
      server_of_proxy->set_info(server_info_from(proxy.child_info()), proxy.capabilities());
      server_of_proxy->set_tools(proxy.tools());
      return std::nullopt;
    };
    // A 2026-07-28 agent sends no initialize: its first request's envelope
    // starts the child as initialize would, offering the newest 2025
    // revision (what the child is spoken to in) and the roots, sampling and
    // elicitation the agent declares: what the child asks mid-call reaches
    // the agent in the call's answer (input_required).
    extensions.on_stateless = [&extensions, &proxy](const mcp::Envelope& envelope) {
      proxy.on_stateless_agent();
      Json params = {{"protocolVersion", mcp::kSupportedProtocolVersions[0]},
                     {"capabilities", envelope.client_capabilities.is_object() ? envelope.client_capabilities
                                                                               : Json::object()}};
      if (envelope.client_info.is_object()) params["clientInfo"] = envelope.client_info;
      return extensions.on_initialize(params);
    };
    extensions.on_request = [&proxy](const std::string& method, const Json& params) {
      return proxy.forward_request(method, params);
    };
    extensions.on_notification = [&proxy](const std::string& method, const Json& params) {
      proxy.on_agent_notification(method, params);
    };
    mcp::Server server(mcp::ServerInfo{"effectfence-wrap", "", kVersion, ""}, {},
                       [&out](const std::string& line) { out.write_line(line); }, log,
                       mcp::Server::kDefaultMaxConcurrentCalls, extensions);
    server_of_proxy = &server;
    proxy.attach(&server);
    mcp::FdLineReader reader(0, stop.fd());
    // A child that cannot start ends the session once the agent has its answer.
    const mcp::ReadEvent stopped_by = server.pump(reader, [&child_failed] { return !child_failed; });
    proxy.stop_waiting();  // finishing what runs does not include waiting for others' calls
    const size_t unfinished = server.calls_in_flight();
    if (child_failed) {
      log.info("stopping: the child server cannot be started");
    } else if (stopped_by == mcp::ReadEvent::stopped) {
      log.info(std::string("received ") + mcp::signal_name(stop.received()) + ": stopping; finishing " +
               std::to_string(unfinished) + " call(s) in flight (another stop signal stops them now)");
    } else {
      log.info("stdin closed: stopping; finishing " + std::to_string(unfinished) +
               " call(s) in flight (a stop signal stops them now)");
    }
    finish_calls(server, proxy, stop, stopped_by == mcp::ReadEvent::stopped ? 1 : 0, log);
    proxy.attach(nullptr);
    proxy.stop();
  }
  const Maintenance::Stopped stopped = maintenance.stop();
  if (child_failed) return 1;

  if (stopped.fenced > 0) {
    log.warn("fenced " + std::to_string(stopped.fenced) + " call(s) whose outcome was not recorded as unknown");
  }
  log_group_commit(*fence, log);
  fence.reset();
  log.info("ledger closed; bye");
  return 0;
}

}  // namespace

int run_wrap(const Args& args) {
  WrapOptions options;
  if (auto done = parse_options(args, &options)) return *done;
  if (auto refused = refuse_closed_protocol_streams("wrap")) return *refused;
  if (!options.proxy.policy.only.empty() && !options.proxy.policy.except.empty()) {
    return usage_error("--only and --except cannot be combined");
  }
  mcp::Logger log("effectfence wrap", options.log_level);
  std::signal(SIGPIPE, SIG_IGN);  // a client or child that went away is a write error, not our death
  mcp::StopSignals stop;
  const int protocol_fd = claim_stdout();
  try {
    return serve_wrapped(options, log, stop, protocol_fd);
  } catch (const std::exception& e) {
    log.error(std::string("internal error: ") + e.what());
    return 1;
  }
}

}  // namespace effectfence::cli
