// effectfence demo: the double charge, then the fence; then the turf war.
//
// Everything here is real: the "payment provider" is `effectfence
// demo-server`, an MCP server that records every charge it executes in its
// own SQLite file; the agents are MCP calls racing to it, straight and then
// through `effectfence wrap`; the turf war runs through the Fence on the same
// ledger file. The counts are measured, not printed from a script.
#include <unistd.h>

#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>


#include "effectfence/refusal_text.h"
#include "cli/commands.h"
#include "cli/child_session.h"
#include "effectfence/fence.h"

namespace effectfence::cli {
namespace {

constexpr int kAgents = 12;

struct Style {
  bool color;
  std::string bold(const std::string& s) const { return color ? "\033[1m" + s + "\033[0m" : s; }
  std::string red(const std::string& s) const { return color ? "\033[31m" + s + "\033[0m" : s; }
  std::string green(const std::string& s) const { return color ? "\033[32m" + s + "\033[0m" : s; }
  std::string dim(const std::string& s) const { return color ? "\033[2m" + s + "\033[0m" : s; }
};

// The path of this binary: the demo starts it again as demo-server and wrap.
std::string self_path() {
  std::error_code error;
  auto path = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::string("effectfence") : path.string();
}

struct Volley {
  int ran = 0;       // answered with a result of the provider
  int replayed = 0;  // answered from the fence's record
  int refused = 0;   // refused before reaching the provider
  int failed = 0;    // no usable answer
  std::string charge_id;
};

// Sends `agents` identical charge calls at once, as agents racing would.
Volley fire_charges(mcp::McpClient& client, int agents) {
  const Json params = {{"name", "charge"}, {"arguments", {{"order", "order-1042"}, {"amount_cents", 4900}}}};
  std::vector<std::shared_ptr<mcp::McpClient::Request>> calls;
  for (int i = 0; i < agents; ++i) calls.push_back(client.send("tools/call", params));
  Volley v;
  for (auto& call : calls) {
    auto reply = call->wait_for(std::chrono::seconds(30));
    if (!reply || reply->kind != mcp::ClientReply::Kind::result) {
      ++v.failed;
      continue;
    }
    const Json& r = reply->result;
    if (r.value("isError", false)) {
      ++v.refused;
    } else if (r.contains("_meta") && r["_meta"].value("effectfence", Json::object()).value("replayed", false)) {
      ++v.replayed;
    } else {
      ++v.ran;
      v.charge_id = r.value("structuredContent", Json::object()).value("charge_id", "");
    }
  }
  return v;
}

// Asks the provider (read-only) how many charges it executed for the order.
int64_t charges_executed(mcp::McpClient& client) {
  auto reply = client.call("tools/call", {{"name", "list_charges"}, {"arguments", {{"order", "order-1042"}}}},
                           std::chrono::seconds(30));
  if (reply.kind != mcp::ClientReply::Kind::result) return -1;
  return reply.result.value("structuredContent", Json::object()).value("count", int64_t{-1});
}

// Runs fn(i) on n threads released at the same instant.
void at_once(int n, const std::function<void(int)>& fn) {
  std::mutex mu;
  std::condition_variable cv;
  int waiting = n;
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      {
        std::unique_lock<std::mutex> lock(mu);
        if (--waiting == 0) cv.notify_all();
        cv.wait(lock, [&] { return waiting == 0; });
      }
      fn(i);
    });
  }
  for (auto& t : threads) t.join();
}

// Twelve agents, one $49 charge: straight to the provider, then through
// `effectfence wrap` in front of the same provider. Real processes, real MCP.
bool scene_double_charge(const std::string& dir, const std::string& ledger, const Style& st) {
  std::printf("%s\n", st.bold("Scene 1: twelve agents reach for one $49 charge at the same instant").c_str());
  const std::string self = self_path();
  mcp::Logger log("effectfence demo", mcp::LogLevel::error);
  auto straight_opened = open_child_session({self, "demo-server", "--charges", dir + "/provider-straight.sqlite"},
                                            "effectfence-demo", log, std::chrono::seconds(10));
  if (!straight_opened.ok()) {
    std::fprintf(stderr, "effectfence demo: starting demo-server: %s\n", straight_opened.status().message().c_str());
    return false;
  }
  const std::unique_ptr<ChildSession>& straight = *straight_opened;
  const Volley raw = fire_charges(*straight->client, kAgents);
  const int64_t raw_charges = charges_executed(*straight->client);
  std::printf("  straight to the provider:   %s\n",
              st.red(std::to_string(raw_charges) + " charges for one order (" + std::to_string(raw.ran) +
                     " agents each got a charge id of their own)")
                  .c_str());

  auto fenced_opened = open_child_session(
      // Refused at once (no --wait-secs wait), as the scene tells it: the refused retry and get the replay.
      {self, "wrap", "--db", ledger, "--log-level", "error", "--wait-secs", "0", "--", self, "demo-server", "--charges",
       dir + "/provider-fenced.sqlite"},
      "effectfence-demo", log, std::chrono::seconds(10));
  if (!fenced_opened.ok()) {
    std::fprintf(stderr, "effectfence demo: starting wrap: %s\n", fenced_opened.status().message().c_str());
    return false;
  }
  const std::unique_ptr<ChildSession>& fenced = *fenced_opened;
  const Volley race = fire_charges(*fenced->client, kAgents);
  // The refused agents retry a moment later, as agents do.
  const Volley retry = fire_charges(*fenced->client, kAgents);
  const int64_t fenced_charges = charges_executed(*fenced->client);
  std::printf("  through effectfence wrap:   %s  (%d ran; %d refused before reaching the provider)\n",
              st.green(std::to_string(fenced_charges) + " charge").c_str(), race.ran, race.refused);
  std::printf("  %d retries a moment later:  %d replayed %s from the record, %d ran again\n", kAgents,
              retry.replayed, race.charge_id.c_str(), retry.ran);
  return raw_charges == kAgents && fenced_charges == 1;
}

void scene_turf_war(Fence& fence, const Style& st) {
  std::printf("\n%s\n", st.bold("Scene 2: the turf war - three SRE agents, one latency alert").c_str());
  const std::string cluster = "cluster:checkout";
  const auto read = fence.domain_status(cluster);
  const auto* state = std::get_if<DomainStatus>(&read);
  const int64_t observed = state ? state->seq : 0;
  std::printf("  all three read %s at seq %lld\n", cluster.c_str(), static_cast<long long>(observed));
  const char* actions[] = {"scale_up", "rollback", "restart"};
  std::vector<PrepareOutcome> outcomes(3, Refusal{Reason::ledger_error, Cause::no_decision});
  at_once(3, [&](int i) {
    PrepareRequest r;
    r.intent = std::string("sre:") + actions[i] + ":alert-7";
    r.domain = cluster;
    r.tool = actions[i];
    r.args = {{"cluster", "checkout"}};
    r.agent = std::string("sre-") + actions[i];
    r.read_set = {{cluster, observed}};
    outcomes[i] = fence.prepare(r);
  });
  for (int i = 0; i < 3; ++i) {
    if (auto* a = std::get_if<Admitted>(&outcomes[i])) {
      fence.commit(a->ticket, {{"action", actions[i]}, {"ok", true}});
      std::printf("  %-9s %s\n", actions[i], st.green("acts (seq " + std::to_string(a->ticket.seq) + ")").c_str());
    } else if (auto* r = std::get_if<Refusal>(&outcomes[i])) {
      std::printf("  %-9s %s %s\n", actions[i], st.red(std::string("refused: ") + reason_name(r->reason)).c_str(),
                  st.dim(explain(*r, Step::prepare)).c_str());
    }
  }
}

}  // namespace

int run_demo(const Args& args) {
  std::string kept_dir;  // --dir: run there and keep the files (ledger, the provider's charge books)
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::printf("usage: effectfence demo [--dir DIR]\n\nShows twelve agents double-charging an order, then the "
                  "same race behind the fence, then three agents deciding on one cluster.\n\n"
                  "  --dir DIR   run in DIR (created if missing) and keep the ledger and the provider's\n"
                  "              charge books there; default: a temporary directory, removed afterwards\n");
      return 0;
    }
    if (args[i] == "--dir" && i + 1 < args.size()) {
      kept_dir = args[++i];
    } else {
      std::fprintf(stderr, "effectfence demo: unknown or incomplete option '%s'\n", args[i].c_str());
      return 2;
    }
  }
  std::signal(SIGPIPE, SIG_IGN);  // a child that died is a write error to report, not our death
  const Style st{isatty(STDOUT_FILENO) != 0};
  std::string dir = kept_dir;
  if (dir.empty()) {
    char pattern[] = "/tmp/effectfence-demo-XXXXXX";
    if (!mkdtemp(pattern)) {
      std::perror("effectfence demo: cannot create a temporary directory");
      return 1;
    }
    dir = pattern;
  } else {
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) {
      std::fprintf(stderr, "effectfence demo: cannot create %s: %s\n", dir.c_str(), error.message().c_str());
      return 1;
    }
  }
  int status = 0;
  {
    Settings settings;
    settings.ledger_path = dir + "/ledger.sqlite";
    auto opened = Fence::open(settings);
    if (auto* error = std::get_if<OpenError>(&opened)) {
      std::fprintf(stderr, "effectfence demo: %s\n", error->message.c_str());
      return 1;
    }
    Fence& fence = *std::get<std::unique_ptr<Fence>>(opened);
    try {
      if (!scene_double_charge(dir, settings.ledger_path, st)) status = 1;
      scene_turf_war(fence, st);
      const auto counted = fence.stats();
      if (auto* stats = std::get_if<Stats>(&counted)) {
        std::printf("\n%s admitted %lld, replayed %lld, refused %lld: %lld duplicate executions prevented\n",
                    st.bold("fence_stats:").c_str(), static_cast<long long>(stats->ledger.admitted),
                    static_cast<long long>(stats->ledger.replayed),
                    static_cast<long long>(stats->ledger.refusals()),
                    static_cast<long long>(stats->ledger.prevented()));
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "effectfence demo: %s\n", e.what());
      status = 1;
    }
  }
  if (kept_dir.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  return status;
}

}  // namespace effectfence::cli
