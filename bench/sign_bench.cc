// effectfence_sign_bench: what signing every certificate costs serve.
//
// Starts two `effectfence serve` processes side by side, each on a ledger
// of its own in one scratch directory, one with --signing-key (a key from
// `effectfence keygen`) and one without, and drives each in turn with
// fence_prepare + fence_commit pairs, --in-flight at a time, for --seconds
// per slice. The slices alternate (unsigned, signed, signed, unsigned,
// ...) for --rounds rounds, so both see the same noisy machine; it prints each
// slice's pairs/s, then each server's range and median and the signed
// server's median as a share of the unsigned one's. At the end both
// ledgers pass `effectfence verify`, the signed one with --public-key.
//   effectfence_sign_bench [--bin PATH] [--seconds S] [--rounds N]
//                          [--in-flight F] [--dir DIR] [--json]
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "child_process.h"
#include "pair_driver.h"

namespace {

using effectfence::bench::Anomalies;
using effectfence::bench::ChildProcess;
using effectfence::bench::PairDriver;
using Json = nlohmann::json;

struct Options {
  std::string bin = "./build/effectfence";
  double seconds = 3;
  int rounds = 5;
  size_t in_flight = 16;
  std::string dir = ".";
  bool json = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--bin") o.bin = value();
    else if (a == "--seconds") o.seconds = std::stod(value());
    else if (a == "--rounds") o.rounds = std::stoi(value());
    else if (a == "--in-flight") o.in_flight = std::stoul(value());
    else if (a == "--dir") o.dir = value();
    else if (a == "--json") o.json = true;
    else throw std::runtime_error("unknown option " + a);
  }
  if (o.seconds <= 0 || o.rounds <= 0 || o.in_flight == 0) {
    throw std::runtime_error("--seconds, --rounds and --in-flight must be positive");
  }
  return o;
}

// Runs a command through the shell; returns its exit status.
int run(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// One server under test and the pairs/s of each of its slices.
struct Server {
  std::string name;
  std::string ledger;
  std::unique_ptr<ChildProcess> process;
  std::unique_ptr<PairDriver> driver;
  std::vector<double> rates;
  size_t pairs = 0;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    std::string tmpl = o.dir + "/effectfence-sign-bench-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("cannot create a scratch directory in " + o.dir);
    const std::string dir = tmpl;
    const std::string key = dir + "/fence.key";
    if (run(o.bin + " keygen --out " + key + " >/dev/null") != 0) throw std::runtime_error("keygen failed");

    Anomalies anomalies;
    Server servers[2];
    servers[0].name = "unsigned";
    servers[1].name = "signed";
    for (Server& s : servers) {
      s.ledger = dir + "/" + s.name + ".sqlite";
      std::vector<std::string> argv_server = {o.bin, "serve", "--db", s.ledger};
      if (s.name == "signed") {
        argv_server.push_back("--signing-key");
        argv_server.push_back(key);
      }
      s.process = std::make_unique<ChildProcess>(argv_server, dir + "/" + s.name + ".log");
      s.driver = std::make_unique<PairDriver>(*s.process, anomalies);
      s.driver->handshake();
      s.driver->run(o.in_flight, 0.5);  // warm up: the ledger's pages, the key
    }
    if (!o.json) {
      std::printf("%5s %10s %12s %12s\n", "round", "server", "pairs/s", "p50 ms");
    }
    for (int round = 1; round <= o.rounds; ++round) {
      // ABBA: each server goes first in every other round, so neither
      // always gets the slice after the other's writes.
      for (int k = 0; k < 2; ++k) {
        Server& s = servers[round % 2 == 1 ? k : 1 - k];
        const auto timings = s.driver->run(o.in_flight, o.seconds);
        const auto summary = effectfence::bench::summarize(timings);
        s.rates.push_back(summary.per_second);
        s.pairs += summary.count;
        if (!o.json) {
          std::printf("%5d %10s %12.0f %12.2f\n", round, s.name.c_str(), summary.per_second, summary.p50_ms);
          std::fflush(stdout);
        }
      }
    }
    int exits = 0;
    for (Server& s : servers) exits += s.process->finish() != 0;
    const bool unsigned_ok = run(o.bin + " verify --db " + servers[0].ledger + " >/dev/null 2>&1") == 0;
    const bool signed_ok = run(o.bin + " verify --require-signed --db " + servers[1].ledger + " --public-key " +
                               key + ".pub >/dev/null 2>&1") == 0;

    Json report = {{"command", Json::array()},
                   {"seconds_per_slice", o.seconds},
                   {"rounds", o.rounds},
                   {"in_flight", o.in_flight},
                   {"anomalies", anomalies.total()},
                   {"verify_ok", unsigned_ok && signed_ok},
                   {"server_exits_nonzero", exits}};
    for (int i = 0; i < argc; ++i) report["command"].push_back(argv[i]);
    for (const Server& s : servers) {
      report[s.name] = {{"pairs_per_second", s.rates},
                        {"min", *std::min_element(s.rates.begin(), s.rates.end())},
                        {"median", median(s.rates)},
                        {"max", *std::max_element(s.rates.begin(), s.rates.end())},
                        {"pairs", s.pairs}};
    }
    const double share = median(servers[1].rates) / median(servers[0].rates);
    report["signed_over_unsigned_median"] = share;
    // Each round's two slices ran back to back: their ratio sees the least noise.
    std::vector<double> per_round;
    for (size_t i = 0; i < servers[0].rates.size(); ++i) per_round.push_back(servers[1].rates[i] / servers[0].rates[i]);
    report["signed_over_unsigned_by_round"] = per_round;
    if (o.json) {
      std::printf("%s\n", report.dump().c_str());
    } else {
      for (const Server& s : servers) {
        std::printf("%-9s pairs/s over %d slices of %.1f s at %zu in flight: %.0f to %.0f, median %.0f (%zu pairs)\n",
                    s.name.c_str(), o.rounds, o.seconds, o.in_flight, report[s.name]["min"].get<double>(),
                    report[s.name]["max"].get<double>(), report[s.name]["median"].get<double>(), s.pairs);
      }
      std::printf("signed median / unsigned median: %.2f; signed / unsigned within a round: %.2f to %.2f, median %.2f\n",
                  share, *std::min_element(per_round.begin(), per_round.end()),
                  *std::max_element(per_round.begin(), per_round.end()), median(per_round));
      std::printf("anomalies: %zu; verify: %s (the signed ledger with --require-signed --public-key)\n",
                  anomalies.total(), report["verify_ok"].get<bool>() ? "ok" : "FAILED");
    }
    const bool ok = anomalies.total() == 0 && report["verify_ok"].get<bool>() && exits == 0;
    if (ok) run("rm -rf " + dir);
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "effectfence_sign_bench: %s\n", e.what());
    return 2;
  }
}
