// effectfence demo-server: a toy payment provider as an MCP stdio server.
//
// Like most real providers it has no idempotency of its own: every `charge`
// call is a new charge, recorded in its own SQLite file with a fresh id, so
// double-fires are visible and countable (`list_charges`). The demo, the
// tests and `probe` point at it.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>

#include <SQLiteCpp/SQLiteCpp.h>

#include "cli/commands.h"
#include "cli/version.h"
#include "core/mutex.h"
#include "mcp/line_io.h"
#include "mcp/log.h"
#include "mcp/server.h"
#include "mcp/stop_signals.h"

namespace effectfence::cli {
namespace {

struct DemoServerOptions {
  std::string charges_path;
  int delay_ms = 200;  // a provider's round trip: concurrent calls overlap, as they do for real
};

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: effectfence demo-server [--charges FILE] [--delay-ms N]\n\n"
               "A toy payment provider over MCP stdio, for demos and tests. Tools:\n"
               "  charge {order, amount_cents}   executes a new charge on every call (no idempotency)\n"
               "  list_charges {order?}          read-only: the charges executed so far\n\n"
               "  --charges FILE   where executed charges are recorded (default: %s)\n"
               "  --delay-ms N     how long a charge takes (default 200)\n",
               "$TMPDIR/effectfence-demo-charges.sqlite");
}

std::optional<int> parse_options(const Args& args, DemoServerOptions* options) {
  const char* tmp = std::getenv("TMPDIR");
  options->charges_path = std::string(tmp && *tmp ? tmp : "/tmp") + "/effectfence-demo-charges.sqlite";
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const bool has_value = i + 1 < args.size();
    if (arg == "--help" || arg == "-h") {
      print_usage(stdout);
      return 0;
    } else if (arg == "--charges" && has_value) {
      options->charges_path = args[++i];
    } else if (arg == "--delay-ms" && has_value) {
      try {
        options->delay_ms = std::stoi(args[++i]);
      } catch (const std::exception&) {
        options->delay_ms = -1;
      }
      if (options->delay_ms < 0 || options->delay_ms > 600'000) {
        std::fprintf(stderr, "effectfence demo-server: --delay-ms needs a number of milliseconds\n");
        return 2;
      }
    } else {
      std::fprintf(stderr, "effectfence demo-server: unknown or incomplete option '%s'\n\n", arg.c_str());
      print_usage(stderr);
      return 2;
    }
  }
  return std::nullopt;
}

// The provider's books: one row per executed charge.
class ChargeBook {
 public:
  explicit ChargeBook(const std::string& path)
      : db_(path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE | SQLite::OPEN_FULLMUTEX, 5000) {
    db_.exec("PRAGMA journal_mode = WAL");
    db_.exec(
        "CREATE TABLE IF NOT EXISTS charges (id INTEGER PRIMARY KEY, order_id TEXT NOT NULL, "
        "amount_cents INTEGER NOT NULL, pid INTEGER NOT NULL, at TEXT NOT NULL DEFAULT "
        "(strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))");
  }

  Json charge(const std::string& order, int64_t cents) {
    MutexLock lock(&mu_);
    SQLite::Statement q(db_, "INSERT INTO charges (order_id, amount_cents, pid) VALUES (?, ?, ?)");
    q.bind(1, order);
    q.bind(2, cents);
    q.bind(3, static_cast<int64_t>(::getpid()));
    q.exec();
    return Json{{"charge_id", "ch_" + std::to_string(db_.getLastInsertRowid())},
                {"order", order},
                {"amount_cents", cents}};
  }

  Json list(const std::optional<std::string>& order) {
    MutexLock lock(&mu_);
    SQLite::Statement q(db_, order ? "SELECT id, order_id, amount_cents FROM charges WHERE order_id = ? ORDER BY id"
                                   : "SELECT id, order_id, amount_cents FROM charges ORDER BY id");
    if (order) q.bind(1, *order);
    Json charges = Json::array();
    while (q.executeStep()) {
      charges.push_back({{"charge_id", "ch_" + std::to_string(q.getColumn(0).getInt64())},
                         {"order", q.getColumn(1).getString()},
                         {"amount_cents", q.getColumn(2).getInt64()}});
    }
    return Json{{"count", charges.size()}, {"charges", charges}};
  }

 private:
  Mutex mu_;
  SQLite::Database db_ GUARDED_BY(mu_);
};

Json charge_schema() {
  return Json{{"type", "object"},
              {"required", {"charge_id", "order", "amount_cents"}},
              {"properties",
               {{"charge_id", {{"type", "string"}}},
                {"order", {{"type", "string"}}},
                {"amount_cents", {{"type", "integer"}}}}}};
}

std::vector<mcp::Tool> provider_tools(ChargeBook& book, int delay_ms) {
  mcp::Tool charge;
  charge.name = "charge";
  charge.title = "Charge an order";
  charge.description = "Charges the customer for an order. Every call executes a new charge.";
  charge.input_schema = {{"type", "object"},
                         {"required", {"order", "amount_cents"}},
                         {"properties",
                          {{"order", {{"type", "string"}, {"minLength", 1}}},
                           {"amount_cents", {{"type", "integer"}, {"minimum", 1}}}}},
                         {"additionalProperties", false}};
  charge.output_schema = charge_schema();
  charge.annotations = {{"readOnlyHint", false}, {"idempotentHint", false}, {"destructiveHint", false},
                        {"openWorldHint", true}};
  charge.handler = [&book, delay_ms](const Json& args) {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    mcp::ToolResult result;
    result.structured = book.charge(args.at("order").get<std::string>(), args.at("amount_cents").get<int64_t>());
    return result;
  };

  mcp::Tool list;
  list.name = "list_charges";
  list.title = "List executed charges";
  list.description = "Lists the charges executed so far, optionally for one order. Changes nothing.";
  list.input_schema = {{"type", "object"},
                       {"properties", {{"order", {{"type", "string"}}}}},
                       {"additionalProperties", false}};
  list.output_schema = {{"type", "object"},
                        {"required", {"count", "charges"}},
                        {"properties",
                         {{"count", {{"type", "integer"}}},
                          {"charges", {{"type", "array"}, {"items", charge_schema()}}}}}};
  list.annotations = {{"readOnlyHint", true}, {"openWorldHint", false}};
  list.handler = [&book](const Json& args) {
    std::optional<std::string> order;
    if (args.contains("order")) order = args.at("order").get<std::string>();
    mcp::ToolResult result;
    result.structured = book.list(order);
    return result;
  };
  return {charge, list};
}

}  // namespace

int run_demo_server(const Args& args) {
  DemoServerOptions options;
  if (auto done = parse_options(args, &options)) return *done;
  mcp::Logger log("effectfence demo-server", mcp::LogLevel::warn);
  std::signal(SIGPIPE, SIG_IGN);
  mcp::StopSignals stop;
  try {
    ChargeBook book(options.charges_path);
    mcp::LineWriter out(STDOUT_FILENO);
    mcp::ServerInfo info;
    info.name = "effectfence-demo-provider";
    info.title = "A toy payment provider";
    info.version = kVersion;
    info.instructions = "Charges orders. It has no idempotency: every charge call charges again.";
    mcp::Server server(info, provider_tools(book, options.delay_ms),
                       [&out](const std::string& line) { out.write_line(line); }, log);
    mcp::FdLineReader reader(STDIN_FILENO, stop.fd());
    server.pump(reader);
    server.drain();
  } catch (const std::exception& e) {
    log.error(std::string("cannot run: ") + e.what());
    return 1;
  }
  return 0;
}

}  // namespace effectfence::cli
