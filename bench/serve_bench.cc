// effectfence_bench: how many prepare+commit pairs `effectfence serve`
// decides per second with 1..64 calls in flight, against what the same disk
// does for one SQLite transaction at a time. See bench/README.md.
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sqlite3.h>

#include "baselines.h"
#include "child_process.h"
#include "fence_driver.h"
#include "latency.h"
#include "ledger/sqlite_ledger.h"
#include "pair_driver.h"

namespace effectfence::bench {
namespace {

constexpr size_t kTargetLevel = 16;
constexpr double kRequiredRatio = 2.0;
constexpr double kAimedRatio = 3.0;
constexpr size_t kWarmupInFlight = 16;

struct Options {
  std::string bin = "./build/effectfence";
  std::string floor_bin;  // empty: effectfence_floor beside this benchmark; "none": not measured
  std::string parent_dir = ".";
  double seconds = 3;
  double warmup_seconds = 1;
  int rounds = 3;  // SQLite and serve slices alternate this many times per level
  std::vector<size_t> levels = {1, 4, 16, 64};
  std::string log_level;  // empty: the server's default
  std::string db;         // the server's ledger; empty: a new SQLite file in the scratch directory
  IntentNames intent_names = IntentNames::ordered;
  bool json = false;
  bool keep = false;
  std::string command_line;
};

// A reference measurement taken alongside serve at one level: its pairs/s,
// their ratio to the serial SQLite slices, and the CPU it took per pair (of
// the server for protocol_only, of this process otherwise).
struct Reference {
  Summary pairs;
  double ratio = 0;
  double cpu_us_per_pair = 0;
};

struct LevelResult {
  size_t in_flight = 0;
  Summary pairs;
  Summary sqlite;                 // the serial SQLite slices interleaved with this level's
  double ratio = 0;               // pairs/s over those slices' tx/s
  double ratio_to_pooled = 0;     // pairs/s over every slice's tx/s together
  double server_cpu_us_per_pair = 0;
  double bench_cpu_us_per_pair = 0;
  double server_cores_busy = 0;   // server CPU time over wall time
  double busiest_thread_busy = 0;  // the same for its busiest thread: near 1 means that thread is the limit
  double runqueue_wait_us_per_pair = 0;  // server threads runnable but without a CPU
  double cpu_ceiling_pairs_per_second = 0;  // every CPU busy with server and bench work, nothing else
  std::map<std::string, double> server_cpu_us_per_pair_by_thread;  // threads of one name summed
  double decisions_per_transaction = 0;  // the server's group commit (fence_stats "batching")
  double disk_kib_per_pair = -1;         // what the server's writes sent towards the disk; -1: not known
  // What bounds serve, at the same in-flight count (see Reference):
  Reference protocol_only;  // pairs of `ping`s through serve: pipes, JSON-RPC, threads, no ledger
  Reference fence_only;     // the fence library in this process: the ledger as shipped, no protocol
  Reference bare_rows;      // raw SQLite writing only the rows a pair cannot do without
  Reference floor;          // effectfence_floor: the least a server of serve's shape does per pair
  bool floor_measured = false;
  double floor_cpu_ceiling_pairs_per_second = 0;  // the CPU ceiling, for the floor and its client
  double floor_decisions_per_transaction = 0;
  double floor_disk_kib_per_pair = -1;
};

struct Report {
  unsigned cpus = 0;
  std::string load_average;
  std::string directory;
  std::string filesystem;
  std::vector<std::string> server_command;
  std::vector<std::string> floor_command;  // empty when the floor was left out
  Summary fdatasync;
  Summary sqlite_pooled;
  double sqlite_cpu_us_per_tx = 0;  // this process's CPU per serial transaction
  std::vector<LevelResult> levels;
  Anomalies anomalies;
  int server_exit_status = -1;
};

// ---- options ---------------------------------------------------------------

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: effectfence_bench [options]\n\n"
               "Measures fence_prepare+fence_commit pairs per second through `effectfence serve` at several\n"
               "numbers of pairs in flight, and serial SQLite transactions (WAL, synchronous=FULL) on the\n"
               "same filesystem, and reports the ratio. Every answer is checked; any anomaly exits 1.\n\n"
               "options:\n"
               "  --bin PATH        the effectfence binary (default ./build/effectfence)\n"
               "  --floor PATH      the floor server measured alongside (default: effectfence_floor in\n"
               "                    this benchmark's directory); none to leave it out\n"
               "  --dir DIR         where to create the scratch directory (default: the current directory)\n"
               "  --seconds S       serve time per level, and serial SQLite time per level (default 3)\n"
               "  --rounds R        slices each level's SQLite and serve time is cut into, run\n"
               "                    alternately (default 3)\n"
               "  --warmup S        unrecorded load before the levels, 0 for none (default 1)\n"
               "  --levels LIST     pairs in flight, comma-separated (default 1,4,16,64)\n"
               "  --log-level L     passed to serve (default: serve's own default)\n"
               "  --db LEDGER       serve this ledger instead, e.g. a postgres:// URL; the baseline stays\n"
               "                    serial SQLite in the scratch directory\n"
               "  --intent-names N  ordered (default: each new name sorts after the last) or scattered\n"
               "                    (spread over the key space, as order ids or UUIDs are)\n"
               "  --json            print the results as JSON\n"
               "  --keep            keep the scratch directory (ledger, serve log)\n"
               "  --help            this text\n");
}

std::vector<size_t> parse_levels(const std::string& text) {
  std::vector<size_t> levels;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const long value = std::stol(item);
    if (value < 1) throw std::invalid_argument("levels must be >= 1");
    levels.push_back(static_cast<size_t>(value));
  }
  if (levels.empty()) throw std::invalid_argument("no levels");
  return levels;
}

double parse_seconds(const std::string& text, double minimum) {
  const double value = std::stod(text);
  if (!(value >= minimum)) throw std::invalid_argument("duration out of range: " + text);
  return value;
}

IntentNames parse_intent_names(const std::string& text) {
  if (text == "ordered") return IntentNames::ordered;
  if (text == "scattered") return IntentNames::scattered;
  throw std::invalid_argument("--intent-names must be ordered or scattered, not " + text);
}

int parse_rounds(const std::string& text) {
  const int value = std::stoi(text);
  if (value < 1) throw std::invalid_argument("rounds must be >= 1");
  return value;
}

// Returns an exit code when there is nothing to run, nullopt otherwise.
std::optional<int> parse_options(int argc, char** argv, Options* options) {
  for (int i = 0; i < argc; ++i) options->command_line += (i ? " " : "") + std::string(argv[i]);
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
        return argv[++i];
      };
      if (arg == "--help" || arg == "-h") {
        print_usage(stdout);
        return 0;
      } else if (arg == "--bin") options->bin = value();
      else if (arg == "--floor") options->floor_bin = value();
      else if (arg == "--dir") options->parent_dir = value();
      else if (arg == "--seconds") options->seconds = parse_seconds(value(), 0.001);
      else if (arg == "--warmup") options->warmup_seconds = parse_seconds(value(), 0);
      else if (arg == "--rounds") options->rounds = parse_rounds(value());
      else if (arg == "--levels") options->levels = parse_levels(value());
      else if (arg == "--log-level") options->log_level = value();
      else if (arg == "--db") options->db = value();
      else if (arg == "--intent-names") options->intent_names = parse_intent_names(value());
      else if (arg == "--json") options->json = true;
      else if (arg == "--keep") options->keep = true;
      else throw std::invalid_argument("unknown option " + arg);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "effectfence_bench: %s\n\n", e.what());
    print_usage(stderr);
    return 2;
  }
  return std::nullopt;
}

// A file in the directory this benchmark's binary is in.
std::string beside_this_program(const std::string& name) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return name;
  const std::string path(self, static_cast<size_t>(n));
  const size_t slash = path.rfind('/');
  return (slash == std::string::npos ? std::string(".") : path.substr(0, slash)) + "/" + name;
}

// ---- the machine -----------------------------------------------------------

std::string make_scratch_dir(const std::string& parent) {
  std::string pattern = parent + "/effectfence-bench-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot create a directory in " + parent);
  return pattern;
}

// fsync costs nothing on tmpfs, so the report says where the files were.
std::string filesystem_name(const std::string& path) {
  struct statfs fs {};
  if (::statfs(path.c_str(), &fs) != 0) return "unknown";
  switch (static_cast<unsigned long>(fs.f_type)) {
    case 0xEF53: return "ext2/3/4";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs";
    case 0x794C7630: return "overlayfs";
    case 0x2FC12FC1: return "zfs";
    case 0x6969: return "nfs";
    default: {
      char hex[32];
      std::snprintf(hex, sizeof hex, "0x%lx", static_cast<unsigned long>(fs.f_type));
      return hex;
    }
  }
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

void remove_scratch_dir(const std::string& dir) {
  for (const char* name : {"ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm", "in-process.sqlite",
                           "in-process.sqlite-wal", "in-process.sqlite-shm", "serve.log",
                           "floor.sqlite", "floor.sqlite-wal", "floor.sqlite-shm", "floor.sqlite.hashes",
                           "floor.sqlite.hashes-wal", "floor.sqlite.hashes-shm", "floor.log"}) {
    ::unlink((dir + "/" + name).c_str());
  }
  ::rmdir(dir.c_str());
}

// ---- the measurements ------------------------------------------------------

void progress(const Options& options, const std::string& what) {
  if (!options.json) std::fprintf(stderr, "... %s\n", what.c_str());
}

std::vector<std::string> server_command(const Options& options, const std::string& dir) {
  std::vector<std::string> argv = {options.bin, "serve", "--db",
                                   options.db.empty() ? dir + "/ledger.sqlite" : options.db};
  if (!options.log_level.empty()) {
    argv.push_back("--log-level");
    argv.push_back(options.log_level);
  }
  return argv;
}

// Time and CPU spent so far on one kind of work, over several slices.
struct Tally {
  Timings timings;
  double server_cpu_s = 0;
  double bench_cpu_s = 0;
  double busiest_thread_cpu_s = 0;
  double runqueue_wait_s = 0;
  std::map<std::string, double> cpu_s_by_thread;  // server threads, by name
  int64_t transactions = 0;  // the server's ledger transactions
  int64_t decisions = 0;     // and the decisions they carried
  double disk_bytes = 0;     // what the server's writes sent towards the disk
  bool disk_known = true;    // false once the kernel did not say
};

// Adds what each server thread did between two readings to the tally.
void add_thread_deltas(const std::map<pid_t, ThreadTimes>& before, const std::map<pid_t, ThreadTimes>& after,
                       Tally* tally) {
  double busiest = 0;
  for (const auto& [tid, now] : after) {
    const auto then = before.find(tid);
    const ThreadTimes start = then == before.end() ? ThreadTimes{} : then->second;
    busiest = std::max(busiest, now.cpu_s - start.cpu_s);
    tally->cpu_s_by_thread[now.name] += now.cpu_s - start.cpu_s;
    tally->runqueue_wait_s += now.runqueue_wait_s - start.runqueue_wait_s;
  }
  tally->busiest_thread_cpu_s += busiest;
}

// Work done by this process (the server is idle meanwhile).
template <typename Measure>
void measure_in_this_process(Measure measure, Tally* tally) {
  const double cpu_before = own_cpu_seconds();
  tally->timings.merge(measure());
  tally->bench_cpu_s += own_cpu_seconds() - cpu_before;
}

void measure_sqlite_slice(const std::string& dir, double seconds, Tally* tally) {
  measure_in_this_process([&] { return measure_sqlite_serial(dir + "/baseline.sqlite", seconds); }, tally);
}

// The batching counters are read just before and after the timed run.
void measure_serve_slice(PairDriver& driver, const ChildProcess& server, size_t in_flight, double seconds,
                         PairDriver::Work work, Tally* tally) {
  const PairDriver::Batching batching_before = driver.batching();
  const double server_cpu_before = server.cpu_seconds();
  const double bench_cpu_before = own_cpu_seconds();
  const auto threads_before = server.thread_times();
  const double disk_before = server.disk_write_bytes();
  tally->timings.merge(driver.run(in_flight, seconds, work));
  add_thread_deltas(threads_before, server.thread_times(), tally);
  const double disk_after = server.disk_write_bytes();
  if (disk_before < 0 || disk_after < 0) tally->disk_known = false;
  tally->disk_bytes += disk_after - disk_before;
  tally->server_cpu_s += server.cpu_seconds() - server_cpu_before;
  tally->bench_cpu_s += own_cpu_seconds() - bench_cpu_before;
  const PairDriver::Batching batching_after = driver.batching();
  tally->transactions += batching_after.transactions - batching_before.transactions;
  tally->decisions += batching_after.decisions - batching_before.decisions;
}

double per_item_us(double cpu_s, const Summary& s) {
  return cpu_s / static_cast<double>(std::max<size_t>(s.count, 1)) * 1e6;
}

double decisions_per_transaction(const Tally& tally) {
  return tally.transactions > 0 ? static_cast<double>(tally.decisions) / static_cast<double>(tally.transactions) : 0;
}

double disk_kib_per_pair(const Tally& tally, const Summary& pairs) {
  if (!tally.disk_known || pairs.count == 0) return -1;
  return tally.disk_bytes / 1024 / static_cast<double>(pairs.count);
}

Reference reference(const Tally& tally, double cpu_s, const Summary& sqlite) {
  Reference r;
  r.pairs = summarize(tally.timings);
  r.ratio = sqlite.per_second > 0 ? r.pairs.per_second / sqlite.per_second : 0;
  r.cpu_us_per_pair = per_item_us(cpu_s, r.pairs);
  return r;
}

// The slices of one level, each kind tallied over every round.
struct LevelTallies {
  Tally sqlite;
  Tally serve;
  Tally pings;
  Tally fence_only;
  Tally bare_rows;
  Tally floor;
};

LevelResult level_result(size_t in_flight, const LevelTallies& t, unsigned cpus) {
  const Tally& sqlite = t.sqlite;
  const Tally& serve = t.serve;
  LevelResult level;
  level.in_flight = in_flight;
  level.sqlite = summarize(sqlite.timings);
  level.pairs = summarize(serve.timings);
  level.ratio = level.pairs.per_second / level.sqlite.per_second;
  level.server_cpu_us_per_pair = per_item_us(serve.server_cpu_s, level.pairs);
  level.bench_cpu_us_per_pair = per_item_us(serve.bench_cpu_s, level.pairs);
  const double elapsed = serve.timings.elapsed_s;
  level.server_cores_busy = elapsed > 0 ? serve.server_cpu_s / elapsed : 0;
  level.busiest_thread_busy = elapsed > 0 ? serve.busiest_thread_cpu_s / elapsed : 0;
  level.runqueue_wait_us_per_pair = per_item_us(serve.runqueue_wait_s, level.pairs);
  for (const auto& [name, cpu_s] : serve.cpu_s_by_thread) {
    level.server_cpu_us_per_pair_by_thread[name] = per_item_us(cpu_s, level.pairs);
  }
  const double cpu_us_per_pair = level.server_cpu_us_per_pair + level.bench_cpu_us_per_pair;
  level.cpu_ceiling_pairs_per_second =
      cpu_us_per_pair > 0 ? cpus * 1e6 / cpu_us_per_pair : 0;
  level.decisions_per_transaction = decisions_per_transaction(serve);
  level.disk_kib_per_pair = disk_kib_per_pair(serve, level.pairs);
  level.protocol_only = reference(t.pings, t.pings.server_cpu_s, level.sqlite);
  level.fence_only = reference(t.fence_only, t.fence_only.bench_cpu_s, level.sqlite);
  level.bare_rows = reference(t.bare_rows, t.bare_rows.bench_cpu_s, level.sqlite);
  level.floor = reference(t.floor, t.floor.server_cpu_s, level.sqlite);
  const double floor_cpu_us_per_pair = per_item_us(t.floor.server_cpu_s + t.floor.bench_cpu_s, level.floor.pairs);
  level.floor_cpu_ceiling_pairs_per_second = floor_cpu_us_per_pair > 0 ? cpus * 1e6 / floor_cpu_us_per_pair : 0;
  level.floor_decisions_per_transaction = decisions_per_transaction(t.floor);
  level.floor_disk_kib_per_pair = disk_kib_per_pair(t.floor, level.floor.pairs);
  return level;
}

// A measurement that completed nothing says nothing, even with no wrong answer.
void note_empty_measurements(const LevelResult& level, Anomalies* anomalies) {
  const std::pair<const char*, const Summary*> measured[] = {{"serve", &level.pairs},
                                                             {"protocol only", &level.protocol_only.pairs},
                                                             {"fence only", &level.fence_only.pairs},
                                                             {"bare rows", &level.bare_rows.pairs},
                                                             {"floor server", &level.floor.pairs}};
  for (const auto& [name, summary] : measured) {
    if (summary->count == 0 && (summary != &level.floor.pairs || level.floor_measured)) {
      anomalies->note(std::string(name) + ": no pair completed",
                      "at " + std::to_string(level.in_flight) + " in flight");
    }
  }
}

// What fsync costs on a shared or virtual disk can change several-fold from
// one second to the next, so each level alternates short slices of serial
// SQLite (server idle) and of serve load on the same disk, and compares the
// two over the same stretch of time.
void measure_levels(const Options& options, const std::string& dir, Report* report) {
  report->server_command = server_command(options, dir);
  ChildProcess server(report->server_command, dir + "/serve.log");
  PairDriver driver(server, report->anomalies, options.intent_names);
  driver.handshake();
  FenceDriver in_process(dir + "/in-process.sqlite", report->anomalies, options.intent_names);
  std::unique_ptr<ChildProcess> floor_server;
  std::unique_ptr<PairDriver> floor_driver;
  if (!options.floor_bin.empty()) {
    report->floor_command = {options.floor_bin, "serve", "--db", dir + "/floor.sqlite"};
    floor_server = std::make_unique<ChildProcess>(report->floor_command, dir + "/floor.log");
    floor_driver = std::make_unique<PairDriver>(*floor_server, report->anomalies, options.intent_names);
    floor_driver->handshake();
  }
  if (options.warmup_seconds > 0) {
    progress(options, "warming up the server");
    driver.run(kWarmupInFlight, options.warmup_seconds);
    if (floor_driver) floor_driver->run(kWarmupInFlight, options.warmup_seconds);
  }
  const double slice = options.seconds / static_cast<double>(options.rounds);
  Tally all_sqlite;
  for (size_t in_flight : options.levels) {
    progress(options, std::to_string(in_flight) + " pair(s) in flight, alternating with serial SQLite");
    LevelTallies t;
    for (int round = 0; round < options.rounds; ++round) {
      measure_sqlite_slice(dir, slice, &t.sqlite);
      measure_serve_slice(driver, server, in_flight, slice, PairDriver::Work::fence, &t.serve);
      measure_serve_slice(driver, server, in_flight, slice, PairDriver::Work::ping, &t.pings);
      measure_in_this_process([&] { return in_process.run(in_flight, slice); }, &t.fence_only);
      measure_in_this_process([&] { return measure_sqlite_bare_pairs(dir + "/bare.sqlite", in_flight, slice, options.intent_names); },
                              &t.bare_rows);
      if (floor_driver) {
        measure_serve_slice(*floor_driver, *floor_server, in_flight, slice, PairDriver::Work::fence, &t.floor);
      }
    }
    report->levels.push_back(level_result(in_flight, t, report->cpus));
    report->levels.back().floor_measured = floor_driver != nullptr;
    note_empty_measurements(report->levels.back(), &report->anomalies);
    all_sqlite.timings.merge(t.sqlite.timings);
    all_sqlite.bench_cpu_s += t.sqlite.bench_cpu_s;
  }
  report->server_exit_status = server.finish();
  if (floor_server && floor_server->finish() != 0) {
    report->anomalies.note("floor server: exit status not 0", "see floor.log in the scratch directory");
  }
  report->sqlite_pooled = summarize(all_sqlite.timings);
  report->sqlite_cpu_us_per_tx = per_item_us(all_sqlite.bench_cpu_s, report->sqlite_pooled);
  for (LevelResult& level : report->levels) {
    level.ratio_to_pooled = level.pairs.per_second / report->sqlite_pooled.per_second;
  }
}

Report run_benchmark(const Options& options, const std::string& dir) {
  Report report;
  report.cpus = std::thread::hardware_concurrency();
  report.load_average = load_average();
  report.directory = dir;
  report.filesystem = filesystem_name(dir);
  progress(options, "fdatasync loop");
  report.fdatasync = summarize(measure_fdatasync(dir + "/fdatasync.probe", options.seconds));
  measure_levels(options, dir, &report);
  return report;
}

// ---- the report ------------------------------------------------------------

const LevelResult* target_level(const Report& report) {
  for (const LevelResult& level : report.levels) {
    if (level.in_flight == kTargetLevel) return &level;
  }
  return nullptr;
}

std::string joined(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& w : words) text += (text.empty() ? "" : " ") + w;
  return text;
}

void print_rate_line(const char* label, const char* unit, const Summary& s) {
  std::printf("%-34s %8.1f %-5s p50 %6.2f ms   p99 %6.2f ms   (%zu)\n", label, s.per_second, unit, s.p50_ms,
              s.p99_ms, s.count);
}

const char* intent_names_text(IntentNames names) {
  return names == IntentNames::ordered ? "ordered" : "scattered";
}

std::string kib_text(double kib) {
  char text[32];
  if (kib < 0) std::snprintf(text, sizeof text, "%16s", "not known");
  else std::snprintf(text, sizeof text, "%12.1f KiB/pair", kib);
  return text;
}

void print_text(const Options& options, const Report& r) {
  std::printf("effectfence serve benchmark\n");
  std::printf("  command:    %s\n", options.command_line.c_str());
  std::printf("  machine:    %u CPUs, load average %s at start\n", r.cpus, r.load_average.c_str());
  std::printf("  files in:   %s (%s)\n", r.directory.c_str(), r.filesystem.c_str());
  std::printf("  server:     %s\n", joined(r.server_command).c_str());
  std::printf("  each level: %d x (%.2f s serial SQLite, %.2f s serve); %.1f s warm-up at %zu in flight first\n",
              options.rounds, options.seconds / options.rounds, options.seconds / options.rounds,
              options.warmup_seconds, kWarmupInFlight);
  std::printf("  intents:    %s names\n\n", intent_names_text(options.intent_names));

  print_rate_line("fdatasync, 512 B overwrite", "/s", r.fdatasync);
  print_rate_line("SQLite serial tx, all slices", "tx/s", r.sqlite_pooled);
  std::printf("%-34s %8.0f us\n", "  CPU per SQLite tx", r.sqlite_cpu_us_per_tx);

  std::printf("\n%9s %10s %8s %8s   %13s %8s   %7s %7s\n", "in flight", "pairs/s", "p50 ms", "p99 ms",
              "SQLite tx/s", "p50 ms", "ratio", "pooled");
  std::printf("%9s %10s %8s %8s   %13s %8s   %7s %7s\n", "", "", "", "", "(alongside)", "", "", "ratio");
  for (const LevelResult& l : r.levels) {
    std::printf("%9zu %10.1f %8.2f %8.2f   %13.1f %8.2f   %6.2fx %6.2fx\n", l.in_flight, l.pairs.per_second,
                l.pairs.p50_ms, l.pairs.p99_ms, l.sqlite.per_second, l.sqlite.p50_ms, l.ratio, l.ratio_to_pooled);
  }
  std::printf("\n%9s %13s %13s %13s %15s %16s %13s\n", "in flight", "server CPU", "bench CPU", "server cores",
              "busiest server", "server waiting", "decisions");
  std::printf("%9s %13s %13s %13s %15s %16s %13s\n", "", "per pair", "per pair", "busy", "thread busy",
              "for CPU per pair", "per ledger tx");
  for (const LevelResult& l : r.levels) {
    std::printf("%9zu %10.0f us %10.0f us %13.2f %15.2f %13.0f us %13.1f\n", l.in_flight, l.server_cpu_us_per_pair,
                l.bench_cpu_us_per_pair, l.server_cores_busy, l.busiest_thread_busy, l.runqueue_wait_us_per_pair,
                l.decisions_per_transaction);
  }
  std::printf("\nserver CPU per pair, by thread (serve's main thread reads and parses the requests)\n");
  for (const LevelResult& l : r.levels) {
    std::printf("%9zu ", l.in_flight);
    for (const auto& [name, us] : l.server_cpu_us_per_pair_by_thread) std::printf("  %s %.0f us", name.c_str(), us);
    std::printf("\n");
  }
  std::printf("\nwhat bounds it: the same pairs with one part at a time, measured alongside (pairs/s, ratio)\n");
  std::printf("%9s %18s %20s %20s %20s %20s\n", "in flight", "serve", "protocol only", "fence only", "bare rows",
              "floor server");
  std::printf("%9s %18s %20s %20s %20s %20s\n", "", "(as above)", "(ping pairs)", "(in-process)", "(raw SQLite)",
              "(effectfence_floor)");
  for (const LevelResult& l : r.levels) {
    std::printf("%9zu %10.0f %6.2fx %12.0f %6.2fx %12.0f %6.2fx %12.0f %6.2fx", l.in_flight, l.pairs.per_second,
                l.ratio, l.protocol_only.pairs.per_second, l.protocol_only.ratio, l.fence_only.pairs.per_second,
                l.fence_only.ratio, l.bare_rows.pairs.per_second, l.bare_rows.ratio);
    if (l.floor_measured) std::printf(" %12.0f %6.2fx", l.floor.pairs.per_second, l.floor.ratio);
    else std::printf(" %20s", "not measured");
    std::printf("\n");
  }
  std::printf("%9s %18s %20s %20s %20s %20s\n", "CPU/pair", "", "(server)", "(this process)", "(this process)",
              "(server)");
  for (const LevelResult& l : r.levels) {
    std::printf("%9zu %15.0f us %17.0f us %17.0f us %17.0f us", l.in_flight, l.server_cpu_us_per_pair,
                l.protocol_only.cpu_us_per_pair, l.fence_only.cpu_us_per_pair, l.bare_rows.cpu_us_per_pair);
    if (l.floor_measured) std::printf(" %17.0f us\n", l.floor.cpu_us_per_pair);
    else std::printf(" %20s\n", "not measured");
  }
  std::printf("\nCPU ceiling: pairs/s if all %u CPUs did nothing but this server and this client, at the CPU\n"
              "per pair measured above (ratio to the serial SQLite slices); the same for the floor server\n",
              r.cpus);
  for (const LevelResult& l : r.levels) {
    const double to_sqlite = l.sqlite.per_second > 0 ? 1 / l.sqlite.per_second : 0;
    std::printf("%9zu %10.0f %6.2fx", l.in_flight, l.cpu_ceiling_pairs_per_second,
                l.cpu_ceiling_pairs_per_second * to_sqlite);
    if (l.floor_measured) {
      std::printf("   floor %10.0f %6.2fx", l.floor_cpu_ceiling_pairs_per_second,
                  l.floor_cpu_ceiling_pairs_per_second * to_sqlite);
    }
    std::printf("\n");
  }
  std::printf("\nthe ledger's writes: KiB sent towards the disk per pair (the log, and what checkpoints copy into\n"
              "the database file; /proc/PID/io write_bytes), and decisions per ledger transaction\n");
  std::printf("%9s %28s %28s\n", "in flight", "serve", "floor server");
  for (const LevelResult& l : r.levels) {
    std::printf("%9zu %s %11.1f per tx", l.in_flight, kib_text(l.disk_kib_per_pair).c_str(),
                l.decisions_per_transaction);
    if (l.floor_measured) {
      std::printf(" %s %11.1f per tx\n", kib_text(l.floor_disk_kib_per_pair).c_str(),
                  l.floor_decisions_per_transaction);
    } else {
      std::printf(" %28s\n", "not measured");
    }
  }
  if (const LevelResult* t = target_level(r)) {
    std::printf("\nat %zu in flight: %.2fx the serial SQLite rate measured alongside (target >= %.0fx: %s; aim "
                "%.0fx: %s)\n",
                kTargetLevel, t->ratio, kRequiredRatio, t->ratio >= kRequiredRatio ? "met" : "MISSED", kAimedRatio,
                t->ratio >= kAimedRatio ? "met" : "not reached");
    if (t->floor_measured && t->floor.pairs.per_second > 0) {
      std::printf("the floor server, alongside: %.2fx (serve does %.0f%% of its pairs/s); the target is %s what\n"
                  "the floor reaches on this machine\n",
                  t->floor.ratio, 100 * t->pairs.per_second / t->floor.pairs.per_second,
                  t->floor.ratio >= kRequiredRatio ? "within" : "ABOVE");
    }
  }
  std::printf("server exit status: %d\n", r.server_exit_status);
  std::printf("anomalies: %zu\n", r.anomalies.total());
  for (const auto& [kind, count] : r.anomalies.counts) std::printf("  %zu x %s\n", count, kind.c_str());
  for (const std::string& example : r.anomalies.examples) std::printf("  e.g. %s\n", example.c_str());
}

Json summary_json(const Summary& s) {
  return Json{{"count", s.count}, {"per_second", s.per_second}, {"p50_ms", s.p50_ms}, {"p99_ms", s.p99_ms},
              {"max_ms", s.max_ms}};
}

Json reference_json(const Reference& ref) {
  return Json{{"pairs", summary_json(ref.pairs)}, {"ratio_to_sqlite_serial", ref.ratio},
              {"cpu_us_per_pair", ref.cpu_us_per_pair}};
}

Json report_json(const Options& options, const Report& r) {
  Json levels = Json::array();
  for (const LevelResult& l : r.levels) {
    levels.push_back(Json{{"in_flight", l.in_flight},
                          {"pairs", l.pairs.count},
                          {"pairs_per_second", l.pairs.per_second},
                          {"p50_ms", l.pairs.p50_ms},
                          {"p99_ms", l.pairs.p99_ms},
                          {"max_ms", l.pairs.max_ms},
                          {"sqlite_serial_alongside", summary_json(l.sqlite)},
                          {"ratio_to_sqlite_serial", l.ratio},
                          {"ratio_to_sqlite_serial_pooled", l.ratio_to_pooled},
                          {"server_cpu_us_per_pair", l.server_cpu_us_per_pair},
                          {"bench_cpu_us_per_pair", l.bench_cpu_us_per_pair},
                          {"server_cores_busy", l.server_cores_busy},
                          {"busiest_server_thread_busy", l.busiest_thread_busy},
                          {"server_runqueue_wait_us_per_pair", l.runqueue_wait_us_per_pair},
                          {"server_cpu_us_per_pair_by_thread", l.server_cpu_us_per_pair_by_thread},
                          {"cpu_ceiling_pairs_per_second", l.cpu_ceiling_pairs_per_second},
                          {"decisions_per_transaction", l.decisions_per_transaction},
                          {"disk_kib_per_pair", l.disk_kib_per_pair >= 0 ? Json(l.disk_kib_per_pair) : Json()},
                          {"floor_decisions_per_transaction",
                           l.floor_measured ? Json(l.floor_decisions_per_transaction) : Json()},
                          {"floor_disk_kib_per_pair",
                           l.floor_measured && l.floor_disk_kib_per_pair >= 0 ? Json(l.floor_disk_kib_per_pair)
                                                                               : Json()},
                          {"protocol_only", reference_json(l.protocol_only)},
                          {"fence_only", reference_json(l.fence_only)},
                          {"bare_rows", reference_json(l.bare_rows)},
                          {"floor_server", l.floor_measured ? reference_json(l.floor) : Json()},
                          {"floor_cpu_ceiling_pairs_per_second",
                           l.floor_measured ? Json(l.floor_cpu_ceiling_pairs_per_second) : Json()}});
  }
  Json out = {{"command", options.command_line},
              {"machine", {{"cpus", r.cpus}, {"load_average_at_start", r.load_average}}},
              {"directory", r.directory},
              {"filesystem", r.filesystem},
              {"server_command", r.server_command},
              {"floor_command", r.floor_command.empty() ? Json() : Json(r.floor_command)},
              {"seconds_per_level", options.seconds},
              {"intent_names", intent_names_text(options.intent_names)},
              {"warmup_seconds", options.warmup_seconds},
              {"rounds", options.rounds},
              {"fdatasync", summary_json(r.fdatasync)},
              {"sqlite_serial_pooled", summary_json(r.sqlite_pooled)},
              {"sqlite_cpu_us_per_tx", r.sqlite_cpu_us_per_tx},
              {"levels", levels},
              {"server_exit_status", r.server_exit_status},
              {"anomalies",
               {{"total", r.anomalies.total()}, {"by_kind", r.anomalies.counts}, {"examples", r.anomalies.examples}}}};
  if (const LevelResult* t = target_level(r)) {
    out["target"] = {{"in_flight", kTargetLevel},
                     {"ratio", t->ratio},
                     {"required", kRequiredRatio},
                     {"aim", kAimedRatio},
                     {"met", t->ratio >= kRequiredRatio},
                     {"floor_ratio", t->floor_measured ? Json(t->floor.ratio) : Json()}};
  }
  return out;
}

bool succeeded(const Report& r) { return r.anomalies.total() == 0 && r.server_exit_status == 0; }

}  // namespace
}  // namespace effectfence::bench

int main(int argc, char** argv) {
  using namespace effectfence::bench;
  std::signal(SIGPIPE, SIG_IGN);  // a dead server is an error to report, not our death
  effectfence::configure_sqlite_for_process();  // the baseline and the in-process fence get what the server gets
  Options options;
  if (auto done = parse_options(argc, argv, &options)) return *done;
  if (options.floor_bin.empty()) options.floor_bin = beside_this_program("effectfence_floor");
  if (options.floor_bin == "none") options.floor_bin.clear();
  if (!options.floor_bin.empty() && ::access(options.floor_bin.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "effectfence_bench: %s is not an executable; build the effectfence_floor target, or pass "
                 "--floor none\n", options.floor_bin.c_str());
    return 1;
  }
  if (::access(options.bin.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "effectfence_bench: %s is not an executable; build it or pass --bin\n", options.bin.c_str());
    return 1;
  }

  std::string dir;
  try {
    dir = make_scratch_dir(options.parent_dir);
    const Report report = run_benchmark(options, dir);
    if (options.json) std::cout << report_json(options, report).dump(2) << "\n";
    else print_text(options, report);
    const bool ok = succeeded(report);
    if (!ok || options.keep) std::fprintf(stderr, "scratch directory kept: %s\n", dir.c_str());
    else remove_scratch_dir(dir);
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "effectfence_bench: %s\n", e.what());
    if (!dir.empty()) std::fprintf(stderr, "scratch directory kept (see serve.log and floor.log): %s\n", dir.c_str());
    return 1;
  }
}
