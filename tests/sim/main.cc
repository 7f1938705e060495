// effectfence_simulate: the real fence under seeded simulation (see
// sim/simulation.h). Runs seeds, checks every history, and for a seed that
// breaks a promise prints the seed, the smallest history it could shrink it
// to, and the command that replays exactly that history.
//
//   effectfence_simulate [--seeds N] [--seed S] [--from S] [--steps K] [--agents A]
//                        [--plant NAME] [--expect-violation] [--verify-bin PATH]
//                        [--work-dir DIR] [--history]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <filesystem>
#include <memory>

#include "effectfence/fence.h"
#include "sim/simulation.h"

using namespace effectfence::sim;

namespace {

struct Options {
  uint64_t from = 1;
  uint64_t seeds = 100;
  bool single = false;
  Config base;
  bool expect_violation = false;
  bool history = false;
  uint64_t verify_every = 1;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "effectfence_simulate: %s\n"
               "usage: effectfence_simulate [--seeds N] [--seed S | --from S] [--steps K] [--agents A]\n"
               "       [--plant none|ignore-refusal|lost-wal|blind-commit] [--expect-violation] [--verify-bin PATH]\n"
               "       [--work-dir DIR] [--history] [--postgres URL]\n",
               why);
  std::exit(2);
}

uint64_t number(const char* flag, const char* text) {
  char* end = nullptr;
  const unsigned long long n = std::strtoull(text, &end, 10);
  if (!*text || *end) usage((std::string(flag) + " takes a non-negative integer, not '" + text + "'").c_str());
  return n;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage((flag + " needs a value").c_str());
      return argv[++i];
    };
    if (flag == "--seeds") {
      o.seeds = number("--seeds", value());
    } else if (flag == "--seed") {
      o.from = number("--seed", value());
      o.single = true;
    } else if (flag == "--from") {
      o.from = number("--from", value());
    } else if (flag == "--steps") {
      o.base.steps = static_cast<int>(number("--steps", value()));
    } else if (flag == "--agents") {
      o.base.agents = static_cast<int>(number("--agents", value()));
    } else if (flag == "--plant") {
      const char* name = value();
      if (!plant_from_name(name, &o.base.plant)) usage((std::string("unknown plant '") + name + "'").c_str());
    } else if (flag == "--expect-violation") {
      o.expect_violation = true;
    } else if (flag == "--verify-bin") {
      o.base.verify_bin = value();
    } else if (flag == "--work-dir") {
      o.base.work_dir = value();
    } else if (flag == "--verify-every") {
      o.verify_every = number("--verify-every", value());
      if (o.verify_every == 0) usage("--verify-every takes 1 or more");
    } else if (flag == "--postgres") {
      o.base.postgres_url = value();
    } else if (flag == "--history") {
      o.history = true;
    } else {
      usage(("unknown argument '" + flag + "'").c_str());
    }
  }
  if (o.single) o.seeds = 1;
  if (o.base.work_dir.empty()) {
    // tmpfs when there is one: the fsyncs the VFS counts need no disk.
    const char* base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    o.base.work_dir = std::string(base) + "/effectfence-simulate." + std::to_string(getpid());
  }
  return o;
}

std::string replay_command(const Config& c) {
  std::string cmd = "tools/simulate --seed " + std::to_string(c.seed) + " --steps " + std::to_string(c.steps) +
                    " --agents " + std::to_string(c.agents);
  if (c.plant != Plant::none) cmd += std::string(" --plant ") + plant_name(c.plant);
  if (!c.postgres_url.empty()) cmd += " --postgres '" + c.postgres_url + "'";
  return cmd;
}

// Replays the seed with fewer agents, then fewer steps, keeping the
// smallest history that still breaks a promise.
RunResult shrink(Config& c, RunResult failing) {
  c.steps = failing.steps;
  c.agents = failing.agents;
  for (int agents = 1; agents < c.agents; ++agents) {
    Config t = c;
    t.agents = agents;
    RunResult r = run_seed(t);
    if (!r.violations.empty()) {
      c.agents = agents;
      c.steps = r.steps;
      failing = std::move(r);
      break;
    }
  }
  int lo = 1, hi = c.steps;  // hi fails
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    Config t = c;
    t.steps = mid;
    RunResult r = run_seed(t);
    if (!r.violations.empty()) {
      hi = mid;
      failing = std::move(r);
    } else {
      lo = mid + 1;
    }
  }
  c.steps = hi;
  if (failing.steps != hi) {
    failing = run_seed(c);
  }
  return failing;
}

void print_history(const RunResult& r) {
  for (const std::string& line : r.history) std::printf("  %s\n", line.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  // One empty ledger made by the fence itself, copied for every seed.
  const std::string template_dir = o.base.work_dir + ".template";
  if (o.base.postgres_url.empty()) {
    std::filesystem::create_directories(template_dir);
    o.base.template_ledger = template_dir + "/ledger.sqlite";
    effectfence::Settings s;
    s.ledger_path = o.base.template_ledger;
    auto opened = effectfence::Fence::open(s);
    if (std::holds_alternative<effectfence::OpenError>(opened)) {
      std::fprintf(stderr, "effectfence_simulate: cannot create %s: %s\n", s.ledger_path.c_str(),
                   std::get<effectfence::OpenError>(opened).message.c_str());
      return 2;
    }
  }
  const auto started = std::chrono::steady_clock::now();
  uint64_t run = 0, failing_seeds = 0;
  int64_t operations = 0, crashes = 0, executions = 0, violations = 0, verified = 0;
  for (uint64_t seed = o.from; seed < o.from + o.seeds; ++seed) {
    Config c = o.base;
    c.seed = seed;
    if ((seed - o.from) % o.verify_every != 0) c.verify_bin.clear();
    RunResult r = run_seed(c);
    verified += r.verified;
    ++run;
    operations += r.operations;
    crashes += r.crashes;
    executions += r.executions;
    violations += static_cast<int64_t>(r.violations.size());
    if (o.history) print_history(r);
    if (r.violations.empty()) continue;
    ++failing_seeds;
    std::printf("seed %llu breaks a promise:\n", static_cast<unsigned long long>(seed));
    for (const std::string& v : r.violations) std::printf("  VIOLATION: %s\n", v.c_str());
    RunResult small = shrink(c, std::move(r));
    std::printf("smallest history found (%d agents, %d steps); replay with: %s\n", c.agents, c.steps,
                replay_command(c).c_str());
    for (const std::string& v : small.violations) std::printf("  VIOLATION: %s\n", v.c_str());
    print_history(small);
    std::fflush(stdout);
    if (o.expect_violation) break;  // the planted bug is caught
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::filesystem::remove_all(template_dir);
  std::printf("seeds run: %llu (from %llu), operations: %lld, effects run: %lld, crashes simulated: %lld, "
              "ledgers verified: %lld, violations: %lld in %llu seeds, plant: %s, %.1f s\n",
              static_cast<unsigned long long>(run), static_cast<unsigned long long>(o.from),
              static_cast<long long>(operations), static_cast<long long>(executions),
              static_cast<long long>(crashes), static_cast<long long>(verified), static_cast<long long>(violations),
              static_cast<unsigned long long>(failing_seeds), plant_name(o.base.plant), seconds);
  if (!o.base.postgres_url.empty()) std::printf("ledger: PostgreSQL (a schema per seed; no power loss, locks or failing syncs)\n");
  if (o.expect_violation) {
    if (failing_seeds == 0) {
      std::printf("NEGATIVE CONTROL FAILED: the planted bug '%s' went unnoticed in %llu seeds\n",
                  plant_name(o.base.plant), static_cast<unsigned long long>(run));
      return 1;
    }
    std::printf("negative control: the planted bug '%s' was caught\n", plant_name(o.base.plant));
    return 0;
  }
  return failing_seeds == 0 ? 0 : 1;
}
