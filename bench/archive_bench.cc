// effectfence_archive_bench: does archiving keep a busy ledger bounded?
//
// Drives one `effectfence serve` (results replay for --ttl seconds, then
// its own sweeps forget them) with fence_prepare + fence_commit pairs, and
// every --every pairs runs `effectfence archive --before <ttl + 1 s>` as a
// separate process while the server keeps running. Prints, after each
// archive, the live rows and the ledger's size, and at the end what
// `effectfence verify --archive` says of the whole history.
//   effectfence_archive_bench [--bin PATH] [--pairs N] [--every K]
//                             [--in-flight F] [--ttl S] [--dir DIR] [--json]
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include "child_process.h"
#include "pair_driver.h"

namespace {

using effectfence::bench::Anomalies;
using effectfence::bench::ChildProcess;
using effectfence::bench::PairDriver;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string bin = "./build/effectfence";
  int64_t pairs = 1000000;
  int64_t every = 100000;
  size_t in_flight = 16;
  double ttl_s = 1;
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
    else if (a == "--pairs") o.pairs = std::stoll(value());
    else if (a == "--every") o.every = std::stoll(value());
    else if (a == "--in-flight") o.in_flight = std::stoul(value());
    else if (a == "--ttl") o.ttl_s = std::stod(value());
    else if (a == "--dir") o.dir = value();
    else if (a == "--json") o.json = true;
    else throw std::runtime_error("unknown option " + a);
  }
  if (o.pairs <= 0 || o.every <= 0 || o.in_flight == 0 || o.ttl_s <= 0) {
    throw std::runtime_error("--pairs, --every, --in-flight and --ttl must be positive");
  }
  return o;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int64_t file_bytes(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

// Runs a shell command, returns its stdout; throws if it fails.
std::string run(const std::string& command) {
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) throw std::runtime_error("cannot run " + command);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  if (status != 0) throw std::runtime_error(command + " failed (status " + std::to_string(status) + "): " + out);
  return out;
}

// Rows the ledger holds now, read with a connection of our own.
struct LiveRows {
  int64_t certificates = 0, events = 0, intents = 0, pages_used_bytes = 0;
};
LiveRows live_rows(const std::string& ledger) {
  sqlite3* db = nullptr;
  LiveRows r;
  if (sqlite3_open_v2(ledger.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    throw std::runtime_error("cannot open " + ledger);
  }
  sqlite3_busy_timeout(db, 10000);
  auto one = [&](const char* sql) {
    sqlite3_stmt* q = nullptr;
    int64_t v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &q, nullptr) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW) {
      v = sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
    return v;
  };
  r.certificates = one("SELECT count(*) FROM certificates");
  r.events = one("SELECT count(*) FROM events");
  r.intents = one("SELECT count(*) FROM intents");
  r.pages_used_bytes = (one("PRAGMA page_count") - one("PRAGMA freelist_count")) * one("PRAGMA page_size");
  sqlite3_close(db);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    std::string tmpl = o.dir + "/effectfence-archive-bench-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("cannot create a scratch directory in " + o.dir);
    const std::string dir = tmpl;
    const std::string ledger = dir + "/ledger.sqlite";
    const std::string archive = dir + "/archive";
    // The server forgets results ttl after they are committed, sweeping
    // every quarter of it; the archive takes what is older than ttl + 1 s.
    const std::string ttl = std::to_string(o.ttl_s);
    ::setenv("EFFECTFENCE_RESULT_TTL_SECS", ttl.c_str(), 1);
    ::setenv("EFFECTFENCE_SWEEP_INTERVAL_SECS", std::to_string(o.ttl_s / 4).c_str(), 1);
    const std::string before = std::to_string(static_cast<int64_t>(o.ttl_s) + 1) + "s";

    ChildProcess server({o.bin, "serve", "--db", ledger}, dir + "/serve.log");
    Anomalies anomalies;
    PairDriver driver(server, anomalies);
    driver.handshake();
    Json rounds = Json::array();
    int64_t done = 0;
    int64_t peak_live_bytes = 0, peak_file_bytes = 0;
    const auto started = Clock::now();
    if (!o.json) {
      std::printf("%10s %9s %12s %10s %8s %12s %12s %10s %10s\n", "pairs", "pairs/s", "archived", "live certs",
                  "live ev.", "used MB", "file+wal MB", "archive s", "segments");
    }
    while (done < o.pairs) {
      const int64_t chunk = std::min(o.every, o.pairs - done);
      const auto t0 = Clock::now();
      const auto timings = driver.run(o.in_flight, 1e9, PairDriver::Work::fence, chunk);
      const double pair_s = seconds_since(t0);
      done += static_cast<int64_t>(timings.samples.size());
      // Past the TTL and a sweep, the chunk's results no longer replay.
      std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(o.ttl_s * 1000) + 1500));
      const auto a0 = Clock::now();
      const Json result = Json::parse(run(o.bin + " archive --db " + ledger + " --before " + before + " --out " +
                                          archive + " --json"));
      const double archive_s = seconds_since(a0);
      const LiveRows live = live_rows(ledger);
      const int64_t file = file_bytes(ledger) + file_bytes(ledger + "-wal");
      peak_live_bytes = std::max(peak_live_bytes, live.pages_used_bytes);
      peak_file_bytes = std::max(peak_file_bytes, file);
      Json round = {{"pairs", done},
                    {"pairs_per_second", timings.samples.size() / pair_s},
                    {"archived_certificates", result["certificates"]},
                    {"archived_events", result["events"]},
                    {"segments", result["segments"]},
                    {"archive_seconds", archive_s},
                    {"live_certificates", live.certificates},
                    {"live_events", live.events},
                    {"live_intents", live.intents},
                    {"used_bytes", live.pages_used_bytes},
                    {"file_bytes", file}};
      rounds.push_back(round);
      if (!o.json) {
        std::printf("%10lld %9.0f %12lld %10lld %8lld %12.1f %12.1f %10.1f %10lld\n", static_cast<long long>(done),
                    timings.samples.size() / pair_s, static_cast<long long>(result["certificates"].get<int64_t>()),
                    static_cast<long long>(live.certificates), static_cast<long long>(live.events),
                    live.pages_used_bytes / 1e6, file / 1e6, archive_s,
                    static_cast<long long>(result["segments"].get<int64_t>()));
        std::fflush(stdout);
      }
    }
    const int server_status = server.finish();
    const auto v0 = Clock::now();
    const std::string verify_command = o.bin + " verify --db " + ledger + " --archive " + archive + " --json";
    FILE* p = ::popen(verify_command.c_str(), "r");
    std::string verify_out;
    char buf[4096];
    size_t n;
    while (p && (n = std::fread(buf, 1, sizeof buf, p)) > 0) verify_out.append(buf, n);
    const int verify_status = p ? ::pclose(p) : -1;
    const double verify_s = seconds_since(v0);
    const Json verified = Json::parse(verify_out);
    int64_t archive_bytes = 0, segments = 0;
    for (int64_t i = 1;; ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "/segment-%06lld.jsonl", static_cast<long long>(i));
      const int64_t b = file_bytes(archive + name);
      if (b == 0) break;
      archive_bytes += b;
      segments = i;
    }
    Json report = {{"command", Json::array()},
                   {"pairs", done},
                   {"anomalies", anomalies.total()},
                   {"seconds", seconds_since(started)},
                   {"rounds", rounds},
                   {"peak_used_bytes", peak_live_bytes},
                   {"peak_file_bytes", peak_file_bytes},
                   {"segments", segments},
                   {"archive_bytes", archive_bytes},
                   {"server_exit", server_status},
                   {"verify_ok", verify_status == 0 && verified.value("ok", false)},
                   {"verify_seconds", verify_s},
                   {"verify", {{"certificates", verified["certificates"]},
                               {"events", verified["events"]},
                               {"archived", verified["archived"]},
                               {"problems_total", verified["problems_total"]}}}};
    for (int i = 0; i < argc; ++i) report["command"].push_back(argv[i]);
    if (o.json) {
      std::printf("%s\n", report.dump().c_str());
    } else {
      std::printf("\n%lld pairs in %.0f s, %zu anomalies; peak live ledger: %.1f MB in use, %.1f MB on disk "
                  "(file + WAL)\n",
                  static_cast<long long>(done), report["seconds"].get<double>(), anomalies.total(),
                  peak_live_bytes / 1e6, peak_file_bytes / 1e6);
      std::printf("archive: %lld segments, %.1f MB\n", static_cast<long long>(segments), archive_bytes / 1e6);
      std::printf("verify --archive over the whole history: %s in %.1f s (%s)\n",
                  report["verify_ok"].get<bool>() ? "ok" : "FAILED", verify_s,
                  report["verify"].dump().c_str());
    }
    return report["verify_ok"].get<bool>() && anomalies.total() == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "effectfence_archive_bench: %s\n", e.what());
    return 2;
  }
}
