// effectfence demo: the double charge, then the fence; then the turf war.
//
// Everything here runs through the real Fence on a real ledger file in a
// temporary directory; the "payment provider" is a toy that records every
// charge it executes in its own SQLite file, so the counts are measured,
// not printed from a script.
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <SQLiteCpp/SQLiteCpp.h>

#include "cli/commands.h"
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

// A toy payment provider: every call is a new charge, like most real ones.
class ToyProvider {
 public:
  explicit ToyProvider(const std::string& path)
      : db_(path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE | SQLite::OPEN_FULLMUTEX) {
    db_.exec("PRAGMA journal_mode = WAL");
    db_.exec("CREATE TABLE IF NOT EXISTS charges (id INTEGER PRIMARY KEY, orderid TEXT, cents INTEGER)");
  }
  std::string charge(const std::string& order, int cents) {
    std::lock_guard<std::mutex> lock(mu_);
    SQLite::Statement q(db_, "INSERT INTO charges (orderid, cents) VALUES (?, ?)");
    q.bind(1, order);
    q.bind(2, cents);
    q.exec();
    return "ch_" + std::to_string(db_.getLastInsertRowid());
  }
  int charges_for(const std::string& order) {
    std::lock_guard<std::mutex> lock(mu_);
    SQLite::Statement q(db_, "SELECT count(*) FROM charges WHERE orderid = ?");
    q.bind(1, order);
    q.executeStep();
    return q.getColumn(0).getInt();
  }

 private:
  std::mutex mu_;
  SQLite::Database db_;
};

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

PrepareRequest charge_request(const std::string& order, int agent) {
  PrepareRequest r;
  r.intent = "charge:" + order;
  r.domain = "order:" + order;
  r.tool = "charge";
  r.args = {{"order", order}, {"amount_cents", 4900}};
  r.agent = "agent-" + std::to_string(agent);
  return r;
}

void scene_double_charge(Fence& fence, ToyProvider& provider, const Style& st) {
  std::printf("%s\n", st.bold("Scene 1: twelve agents reach for one $49 charge at the same instant").c_str());
  at_once(kAgents, [&](int) { provider.charge("order-straight", 4900); });
  const int straight = provider.charges_for("order-straight");
  std::printf("  straight to the provider:  %s\n",
              st.red(std::to_string(straight) + " charges for one order").c_str());

  std::atomic<int> ran{0}, refused{0};
  at_once(kAgents, [&](int i) {
    auto outcome = fence.prepare(charge_request("order-fenced", i));
    if (auto* admitted = std::get_if<Admitted>(&outcome)) {
      const std::string id = provider.charge("order-fenced", 4900);
      fence.commit(admitted->ticket, {{"charge_id", id}});
      ++ran;
    } else {
      ++refused;
    }
  });
  // The refused agents retry later, as agents do: they get the recorded result.
  int replayed = 0;
  std::string replayed_id;
  for (int i = 0; i < kAgents; ++i) {
    auto outcome = fence.prepare(charge_request("order-fenced", i));
    if (auto* r = std::get_if<Replayed>(&outcome)) {
      ++replayed;
      replayed_id = r->cert.result.value("charge_id", "");
    }
  }
  const int fenced = provider.charges_for("order-fenced");
  std::printf("  through effectfence:       %s  (%d ran, %d refused at the same instant before running)\n",
              st.green(std::to_string(fenced) + " charge").c_str(), ran.load(), refused.load());
  std::printf("  %d retries afterwards were replayed %s without charging again\n", replayed,
              replayed_id.c_str());
}

void scene_turf_war(Fence& fence, const Style& st) {
  std::printf("\n%s\n", st.bold("Scene 2: the turf war - three SRE agents, one latency alert").c_str());
  const std::string cluster = "cluster:checkout";
  const auto read = fence.domain_status(cluster);
  const auto* state = std::get_if<DomainStatus>(&read);
  const int64_t observed = state ? state->seq : 0;
  std::printf("  all three read %s at seq %lld\n", cluster.c_str(), static_cast<long long>(observed));
  const char* actions[] = {"scale_up", "rollback", "restart"};
  std::vector<PrepareOutcome> outcomes(3, Refusal{Reason::ledger_error, "", {}});
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
                  st.dim(r->message).c_str());
    }
  }
}

}  // namespace

int run_demo(const Args& args) {
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      std::printf("usage: effectfence demo\n\nShows twelve agents double-charging an order, then the same "
                  "race behind the fence, then three agents deciding on one cluster.\n");
      return 0;
    }
  }
  const Style st{isatty(STDOUT_FILENO) != 0};
  char pattern[] = "/tmp/effectfence-demo-XXXXXX";
  if (!mkdtemp(pattern)) {
    std::perror("effectfence demo: cannot create a temporary directory");
    return 1;
  }
  const std::string dir = pattern;
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
      ToyProvider provider(dir + "/provider.sqlite");
      scene_double_charge(fence, provider, st);
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
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return status;
}

}  // namespace effectfence::cli
