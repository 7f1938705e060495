// effectfence serve: the stdio MCP server with the fence_* tools.
//
// Lifecycle: open the ledger (refusing, with a named error, anything that is
// not a usable ledger) before reading a byte of input; serve until stdin
// ends or SIGTERM/SIGINT/SIGHUP; finish the calls in flight; fence the
// admissions nobody can commit through us any more; close the ledger; exit 0.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <variant>

#include "cli/subcommand.h"
#include "cli/output.h"
#include "cli/commands.h"
#include "cli/serve_shared.h"
#include "cli/server_process.h"
#include "cli/signing_key.h"
#include "cli/version.h"
#include "effectfence/fence.h"
#include "ledger/open_ledger.h"
#include "mcp/fence_tools.h"
#include "mcp/line_io.h"
#include "mcp/log.h"
#include "mcp/server.h"
#include "mcp/stop_signals.h"

namespace effectfence::cli {
namespace {


void print_serve_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: effectfence serve [--db PATH] [--signing-key FILE] [--log-level LEVEL]\n"
               "                         [--shared [--port N] [--lease PATH]]\n\n"
               "Runs the stdio MCP server: newline-delimited JSON-RPC on stdin/stdout, logs on stderr.\n"
               "Tools: fence_prepare, fence_commit, fence_abort, fence_heartbeat, fence_status, fence_stats.\n"
               "Several serve processes on one ledger file fence each other.\n\n"
               "options:\n"
               "  --db PATH          ledger file or postgres:// URL (default: $EFFECTFENCE_LEDGER, else %s)\n"
               "  --signing-key FILE sign every certificate issued with this Ed25519 key (effectfence keygen;\n"
               "                     default: $EFFECTFENCE_SIGNING_KEY, else unsigned); a key file that\n"
               "                     others can read, or that is not an Ed25519 key, is refused\n"
               "  --log-level LEVEL  error, warn, info (default) or debug\n"
               "  --shared           share one fence server per ledger over MCP Streamable HTTP: join the\n"
               "                     live one named by the lease file (<ledger>.server.json), else start it;\n"
               "                     when the lease cannot be used, serve this client alone\n"
               "  --lease PATH       the lease file (default: <ledger>.server.json)\n"
               "  --port N           the shared server's port (default: chosen by the system)\n"
               "  --bind ADDRESS     the shared server's address (default: 127.0.0.1)\n"
               "  --allow-non-loopback  permit a --bind address that is not loopback (prints a warning)\n"
               "  --help             this text\n"
               "  --version          the version\n\n"
               "Messages longer than %zu bytes are refused with \"message too large\".\n"
               "Stops on stdin EOF, SIGTERM, SIGINT or SIGHUP: finishes the calls in flight, fences\n"
               "admissions that can no longer be committed through this process, exits 0.\n",
               Settings::default_ledger_path("server").c_str(), mcp::kMaxMessageBytes);
}

struct ServeOptions {
  std::string db;
  std::optional<std::string> signing_key;
  mcp::LogLevel log_level = mcp::LogLevel::info;
  SharedOptions shared;
};

std::optional<int> parse_number(const std::string& flag, const std::optional<std::string>& value, int max, int* out) {
  try {
    size_t used = 0;
    const int n = value ? std::stoi(*value, &used) : -1;
    if (value && used == value->size() && n >= 0 && n <= max) {
      *out = n;
      return std::nullopt;
    }
  } catch (const std::exception&) {
  }
  std::fprintf(stderr, "effectfence serve: %s needs a number from 0 to %d\n", flag.c_str(), max);
  return 2;
}

// Returns an exit code when the command is done (help, version, bad usage),
// or nullopt to go on serving.
std::optional<int> parse_options(const Args& args, ServeOptions* options) {
  std::string shared_only_flag;  // a flag that means nothing without --shared
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    for (const char* flag : {"--lease", "--bind", "--port", "--allow-non-loopback"}) {
      if (arg == flag || arg.rfind(std::string(flag) + "=", 0) == 0) shared_only_flag = flag;
    }
    auto value_of = [&](const std::string& flag) -> std::optional<std::string> {
      if (arg.rfind(flag + "=", 0) == 0) return arg.substr(flag.size() + 1);
      if (arg == flag && i + 1 < args.size()) return args[++i];
      return std::nullopt;
    };
    if (arg == "--help" || arg == "-h") {
      print_serve_usage(stdout);
      return 0;
    }
    if (arg == "--version") {
      std::printf("effectfence %s (commit %s)\n", kVersion, kBuildCommit);
      return 0;
    }
    if (arg == "--db" || arg.rfind("--db=", 0) == 0) {
      auto value = value_of("--db");
      if (!value || value->empty()) {
        std::fprintf(stderr, "effectfence serve: --db needs a path\n");
        return 2;
      }
      options->db = *value;
    } else if (arg == "--signing-key" || arg.rfind("--signing-key=", 0) == 0) {
      auto value = value_of("--signing-key");
      if (!value || value->empty()) {
        std::fprintf(stderr, "effectfence serve: --signing-key needs a file (effectfence keygen writes one)\n");
        return 2;
      }
      options->signing_key = *value;
    } else if (arg == "--log-level" || arg.rfind("--log-level=", 0) == 0) {
      auto value = value_of("--log-level");
      auto level = value ? mcp::log_level_from_name(*value) : std::nullopt;
      if (!level) {
        std::fprintf(stderr, "effectfence serve: --log-level must be error, warn, info or debug\n");
        return 2;
      }
      options->log_level = *level;
      options->shared.log_level = *level;
    } else if (arg == "--shared") {
      options->shared.enabled = true;
    } else if (arg == "--allow-non-loopback") {
      options->shared.allow_non_loopback = true;
    } else if (arg == "--lease" || arg.rfind("--lease=", 0) == 0) {
      auto value = value_of("--lease");
      if (!value || value->empty()) {
        std::fprintf(stderr, "effectfence serve: --lease needs a path\n");
        return 2;
      }
      options->shared.lease_path = *value;
    } else if (arg == "--bind" || arg.rfind("--bind=", 0) == 0) {
      auto value = value_of("--bind");
      if (!value || value->empty()) {
        std::fprintf(stderr, "effectfence serve: --bind needs an address\n");
        return 2;
      }
      options->shared.bind = *value;
    } else if (arg == "--port" || arg.rfind("--port=", 0) == 0) {
      if (auto done = parse_number("--port", value_of("--port"), 65535, &options->shared.port)) return done;
    } else if (arg == "--shared-server-report-fd" || arg.rfind("--shared-server-report-fd=", 0) == 0) {
      // Internal: this process is the shared server a client started (see serve_shared.cc).
      if (auto done = parse_number("--shared-server-report-fd", value_of("--shared-server-report-fd"), 65535,
                                   &options->shared.host_report_fd)) {
        return done;
      }
    } else {
      std::fprintf(stderr, "effectfence serve: unknown option '%s'\n\n", arg.c_str());
      print_serve_usage(stderr);
      return 2;
    }
  }
  if (!shared_only_flag.empty() && !options->shared.enabled && options->shared.host_report_fd < 0) {
    std::fprintf(stderr, "effectfence serve: %s applies to the shared server only; add --shared\n",
                 shared_only_flag.c_str());
    return 2;
  }
  if (!is_loopback(options->shared.bind) && !options->shared.allow_non_loopback) {
    std::fprintf(stderr,
                 "effectfence serve: --bind %s is not a loopback address; the shared server would be reachable "
                 "from other hosts. Add --allow-non-loopback if that is what you want\n",
                 options->shared.bind.c_str());
    return 2;
  }
  options->shared.read_environment();
  return std::nullopt;
}

}  // namespace

int run_serve(const Args& args) {
  ServeOptions options;
  if (auto done = parse_options(args, &options)) return *done;
  if (auto refused = refuse_closed_protocol_streams("serve")) return *refused;

  mcp::Logger log("effectfence serve", options.log_level);
  std::signal(SIGPIPE, SIG_IGN);  // a client that went away is a write error, not our death
  mcp::StopSignals stop;
  const int protocol_fd = claim_stdout();

  Settings settings = Settings::from_environment("server");
  if (!options.db.empty()) {
    settings.ledger_path = options.db;
    settings.create_parent_directories = false;  // an explicit path is used as given, never invented
  }
  // Refused before anything else starts: a server that would record
  // unsigned certificates into a signed ledger fails verify later instead.
  const std::string key_path = signing_key_path(options.signing_key);
  if (const Status loaded = load_signing_key(key_path, &settings); !loaded.ok()) {
    log.error("cannot use the signing key: " + loaded.message());
    return 2;
  }
  options.shared.signing_key_path = key_path;
  // The default lease lies beside an SQLite ledger; a URL is no place on
  // this host, and a path made of it would carry its password into logs.
  if (options.shared.enabled && options.shared.lease_path.empty() && is_postgres_ledger(settings.ledger_path)) {
    log.error("--shared with a PostgreSQL ledger needs --lease PATH: a file on this host that every serve --shared "
              "of this host names, so they find one another's server");
    return 2;
  }
  if (options.shared.host_report_fd >= 0) return run_shared_server(options.shared, settings, stop);
  if (options.shared.enabled) {
    if (!is_loopback(options.shared.bind)) {
      log.warn("the shared server binds " + options.shared.bind +
               ", which is not loopback: other hosts can reach it (the bearer token still guards it)");
    }
    if (auto done = serve_through_shared_server(options.shared, settings, protocol_fd, stop, log)) return *done;
  }

  auto opened = Fence::open(settings);
  if (auto* error = std::get_if<OpenError>(&opened)) {
    log.error("cannot open ledger: " + open_error_text(*error));
    return 2;  // could not run, as for every subcommand
  }
  std::unique_ptr<Fence> fence = std::move(std::get<std::unique_ptr<Fence>>(opened));
  log.info("serving " + fence->describe_ledger() + " (pid " + std::to_string(::getpid()) + ", lease " +
           std::to_string(settings.lease_ttl_ms / 1000) + "s" + signing_note(settings) + ")");

  Maintenance maintenance(*fence, maintenance_options(server_exit_reason("effectfence serve"), log));
  size_t unfinished = 0;
  {
    mcp::LineWriter out(protocol_fd, stop.fd(), kStopWriteGrace);
    // A client that closed our stdout can be told nothing: what would have
    // been admitted for it is withdrawn (OutputClosed), and intake stops.
    auto server = fence_server(
        *fence,
        [&out](const std::string& line) {
          bool nothing_written = false;
          if (!out.write_line(line, &nothing_written) && nothing_written) {
            throw mcp::OutputClosed("stdout is closed: the client stopped reading");
          }
        },
        log);
    mcp::FdLineReader reader(0, stop.fd());
    server->pump(reader, [&out] { return !out.broken(); });
    maintenance.stop_admitting();  // nobody could commit what it admitted now: it would be fenced at once
    unfinished = server->calls_in_flight();
    // A signal is named first: one that came while the client was not
    // reading also gives up on stdout (after a grace), and was the cause.
    if (stop.received() != 0) {
      log.info(std::string("received ") + mcp::signal_name(stop.received()) + ": stopping; finishing " +
               std::to_string(unfinished) + " call(s) in flight" +
               (out.broken() ? ", whose admissions are withdrawn: the client is not reading answers" : ""));
    } else if (out.broken()) {
      log.error("stdout is closed (the client stopped reading answers): stopping; finishing " +
                std::to_string(unfinished) + " call(s) in flight, whose admissions are withdrawn");
    } else {
      log.info("stdin closed: stopping; finishing " + std::to_string(unfinished) + " call(s) in flight");
    }
    server->drain();
  }

  const bool all_fenced = report_what_was_left(maintenance.stop(), log);
  log_group_commit(*fence, log);
  fence.reset();
  log.info("ledger closed; bye");
  return all_fenced ? 0 : 1;  // 1: stopped, but admissions were left in flight (logged)
}

}  // namespace effectfence::cli
