#include "cli/subcommand.h"
#include "cli/serve_shared.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <variant>
#include <vector>

#include "cli/server_process.h"
#include "cli/signing_key.h"
#include "cli/version.h"
#include "core/heap_usage.h"
#include "core/random_token.h"
#include "ledger/holder.h"
#include "mcp/fence_tools.h"
#include "mcp/decision_metrics.h"
#include "mcp/line_io.h"
#include "mcp/prometheus.h"
#include "mcp/server.h"
#include "mcp/session_admissions.h"
#include "shared_server/bridge.h"
#include "shared_server/election.h"
#include "shared_server/http_transport.h"
#include "shared_server/lease.h"

namespace effectfence::cli {
namespace {

using Clock = std::chrono::steady_clock;

void read_ms(const char* name, int64_t* value) {
  const char* text = std::getenv(name);
  if (!text || !*text) return;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end && *end == '\0' && v > 0) *value = v;
}

std::string lease_path_of(const SharedOptions& options, const Settings& settings) {
  return options.lease_path.empty() ? shared::default_lease_path(settings.ledger_path) : options.lease_path;
}

// The server's log file beside its lease: L.server.json -> L.server.log.
std::string log_path_of(const std::string& lease_path) {
  const std::string suffix = ".json";
  if (lease_path.size() > suffix.size() && lease_path.compare(lease_path.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return lease_path.substr(0, lease_path.size() - suffix.size()) + ".log";
  }
  return lease_path + ".log";
}

std::string self_executable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

// Reads one report line from fd until deadline.
shared::CandidateReport read_report(int fd, Clock::time_point deadline, const std::string& log_path) {
  std::string text;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return {shared::CandidateReport::Outcome::failed, "the shared server did not report within the election deadline (its log: " + log_path + ")"};
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char buf[512];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) text.append(buf, static_cast<size_t>(n));
    const auto newline = text.find('\n');
    if (newline != std::string::npos || n <= 0) {
      const std::string line = text.substr(0, newline);
      const auto space = line.find(' ');
      const std::string word = line.substr(0, space);
      const std::string detail = space == std::string::npos ? "" : line.substr(space + 1);
      if (word == "ready") return {shared::CandidateReport::Outcome::ready, detail};
      if (word == "lost") return {shared::CandidateReport::Outcome::lost, detail};
      if (word == "failed") return {shared::CandidateReport::Outcome::failed, detail};
      return {shared::CandidateReport::Outcome::failed, "the shared server exited while starting (its log: " + log_path + ")"};
    }
  }
}

// Starts `effectfence serve --shared-server-report-fd N ...` detached (its
// own session, stdio on /dev/null, stderr to the log file) and waits for its
// report. Between fork and exec only async-signal-safe calls: a bridge that
// reconnects does this from a multi-threaded process.
shared::CandidateReport launch_server(const SharedOptions& options, const Settings& settings,
                                      Clock::time_point deadline) {
  const std::string exe = self_executable();
  if (exe.empty()) return {shared::CandidateReport::Outcome::failed, "cannot find this program's executable (/proc/self/exe)"};
  const std::string lease_path = lease_path_of(options, settings);
  const std::string log_path = log_path_of(lease_path);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {shared::CandidateReport::Outcome::failed, std::string("pipe: ") + std::strerror(errno)};

  std::vector<std::string> args = {exe, "serve", "--db", settings.ledger_path, "--lease", lease_path,
                                   "--port", std::to_string(options.port), "--bind", options.bind,
                                   "--log-level", mcp::log_level_name(options.log_level),
                                   "--shared-server-report-fd", std::to_string(fds[1])};
  if (options.allow_non_loopback) args.push_back("--allow-non-loopback");
  if (!options.signing_key_path.empty()) {  // the path, never the key
    args.push_back("--signing-key");
    args.push_back(options.signing_key_path);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int report_fd = fds[1];

  const pid_t child = ::fork();
  if (child < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return {shared::CandidateReport::Outcome::failed, std::string("fork: ") + std::strerror(err)};
  }
  if (child == 0) {
    ::setsid();
    const pid_t server = ::fork();  // the server is nobody's child: no zombie waits for a reaper
    if (server != 0) ::_exit(server < 0 ? 1 : 0);
    const int devnull = ::open("/dev/null", O_RDWR);
    // Not through a symlink, nor into a file another user owns or can
    // write: one planted there would be written to with this user's rights.
    int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK, 0600);
    if (log_fd >= 0 && !shared::why_untrusted(log_fd).ok()) {
      ::close(log_fd);
      log_fd = -1;
    }
    if (log_fd < 0) log_fd = devnull;
    ::dup2(devnull, 0);
    ::dup2(devnull, 1);
    ::dup2(log_fd, 2);
    ::fcntl(report_fd, F_SETFD, 0);
    if (report_fd > 3) ::close_range(3, static_cast<unsigned>(report_fd) - 1, 0);
    ::close_range(static_cast<unsigned>(report_fd) + 1, ~0U, 0);
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  shared::CandidateReport report = read_report(fds[0], deadline, log_path);
  ::close(fds[0]);
  return report;
}

// Every request in flight holds a connection: the server may hold more
// descriptors than the usual soft limit of 1024, up to the hard limit.
void allow_many_connections(mcp::Logger& log) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    log.warn(std::string("could not raise the open file limit: ") + std::strerror(errno));
  }
}

void report(int fd, const std::string& line) {
  if (fd < 0) return;
  const std::string text = line + "\n";
  [[maybe_unused]] ssize_t ignored = ::write(fd, text.data(), text.size());
  ::close(fd);
}

// The ledger a bridge opens for itself when no shared server can be used
// any more in the middle of its session.
class AloneFallback {
 public:
  AloneFallback(const Settings& settings, mcp::Logger& log) : settings_(settings), log_(log) {}
  ~AloneFallback() {
    if (fence_) {
      report_what_was_left(maintenance_->stop(), log_);
      maintenance_.reset();
      log_group_commit(*fence_, log_);
    }
  }
  AloneFallback(const AloneFallback&) = delete;
  AloneFallback& operator=(const AloneFallback&) = delete;

  std::unique_ptr<mcp::Server> server(mcp::Server::Sink sink) {
    auto opened = Fence::open(settings_);
    if (auto* error = std::get_if<OpenError>(&opened)) {
      log_.error("cannot open ledger: " + open_error_text(*error));
      return nullptr;
    }
    fence_ = std::move(std::get<std::unique_ptr<Fence>>(opened));
    maintenance_ = std::make_unique<Maintenance>(
        *fence_, maintenance_options(server_exit_reason("effectfence serve --shared"), log_));
    return fence_server(*fence_, std::move(sink), log_);
  }

 private:
  const Settings& settings_;
  mcp::Logger& log_;
  std::unique_ptr<Fence> fence_;
  std::unique_ptr<Maintenance> maintenance_;
};

// One client's session on the shared server. When it ends, the admissions
// it still holds are fenced, as a plain serve process fences its own when
// its client goes: nobody is left to commit them, and the effect may have run.
shared::HttpTransport::SessionServer fence_session(const std::shared_ptr<mcp::AdmissionOwners>& owners,
                                                   const std::shared_ptr<mcp::DecisionMetrics>& metrics,
                                                   Fence& fence, mcp::Server::Sink sink, mcp::Logger& log) {
  auto admissions = std::make_shared<mcp::SessionAdmissions>(owners);
  shared::HttpTransport::SessionServer session;
  session.server = fence_server(fence, std::move(sink), log, admissions, metrics);
  session.ended = [admissions, &log] {
    const int64_t fenced = admissions->fence_all(
        "its client's session on the shared effectfence server (pid " + std::to_string(::getpid()) +
        ") ended before the admission was committed or aborted");
    if (fenced > 0) {
      log.warn("fenced " + std::to_string(fenced) + " admission(s) of an ended session as unknown");
    }
  };
  return session;
}

}  // namespace

void SharedOptions::read_environment() {
  read_ms("EFFECTFENCE_SHARED_IDLE_MS", &idle_ms);
  read_ms("EFFECTFENCE_SHARED_SESSION_TTL_MS", &session_ttl_ms);
  read_ms("EFFECTFENCE_SHARED_KEEPALIVE_MS", &keepalive_ms);
  read_ms("EFFECTFENCE_SHARED_ELECTION_MS", &election_ms);
  read_ms("EFFECTFENCE_SHARED_BIND_DEADLINE_MS", &bind_deadline_ms);
  read_ms("EFFECTFENCE_SHARED_UNRESPONSIVE_MS", &unresponsive_ms);
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

std::optional<int> serve_through_shared_server(const SharedOptions& options, const Settings& settings,
                                               int protocol_fd, mcp::StopSignals& stop, mcp::Logger& log) {
  if (settings.ledger_path == "memory") {
    log.warn("cannot use the shared server: the ledger is in memory, there is nothing to share; serving this client alone");
    return std::nullopt;
  }
  shared::ElectionOptions election{lease_path_of(options, settings), shared::absolute_ledger_path(settings.ledger_path),
                                   options.election_ms, options.bind_deadline_ms, settings.lease_ttl_ms,
                                   settings.result_ttl_ms};
  auto start = [&](Clock::time_point deadline) { return launch_server(options, settings, deadline); };

  shared::Election first = shared::elect(election, start, log);
  if (auto* alone = std::get_if<shared::Standalone>(&first)) {
    log.warn("cannot use the shared server: " + alone->reason + "; serving this client alone");
    return std::nullopt;
  }
  const shared::Endpoint endpoint = std::get<shared::Joined>(first).endpoint;
  log.info("bridging this client to the shared server at " + endpoint.url + " (pid " + std::to_string(::getpid()) + ")");

  auto reconnect = [&]() -> StatusOr<shared::Endpoint> {
    shared::Election again = shared::elect(election, start, log);
    if (auto* joined = std::get_if<shared::Joined>(&again)) return joined->endpoint;
    return Status::Error(std::get<shared::Standalone>(again).reason);
  };
  mcp::LineWriter out(protocol_fd, stop.fd(), kStopWriteGrace);
  mcp::ReadEvent stopped_by;
  AloneFallback alone(settings, log);  // outlives the bridge, whose alone server uses its fence
  {
    shared::BridgeOptions bridge_options;
    bridge_options.keepalive_ms = options.keepalive_ms;
    bridge_options.unresponsive_ms = options.unresponsive_ms;
    bridge_options.server_alive = [&election](const shared::Endpoint& server) {
      return shared::still_serves(election.lease_path, server, election.bind_deadline_ms);
    };
    bridge_options.serve_alone = [&alone](mcp::Server::Sink sink) { return alone.server(std::move(sink)); };
    shared::Bridge bridge(endpoint, reconnect, out, log, bridge_options);
    mcp::FdLineReader reader(0, stop.fd());
    stopped_by = bridge.run(reader);
  }
  if (stopped_by == mcp::ReadEvent::stopped) {
    log.info(std::string("received ") + mcp::signal_name(stop.received()) + ": bridge stopped; bye");
  } else {
    log.info("stdin closed: bridge stopped; bye");
  }
  return 0;
}

int run_shared_server(const SharedOptions& options, const Settings& settings, mcp::StopSignals& stop) {
  std::signal(SIGPIPE, SIG_IGN);
  mcp::Logger log("effectfence shared server", options.log_level);
  allow_many_connections(log);
  const std::string lease_path = lease_path_of(options, settings);
  int report_fd = options.host_report_fd;

  shared::Lease lease;
  lease.owner = this_process();
  lease.token = random_token_hex(32);
  lease.created_at_ms = shared::wall_clock_ms();
  lease.ledger = shared::absolute_ledger_path(settings.ledger_path);
  lease.lease_ttl_ms = settings.lease_ttl_ms;
  lease.result_ttl_ms = settings.result_ttl_ms;
  if (lease.token.empty()) {
    report(report_fd, "failed the system random number generator is unavailable for the bearer token");
    return 1;
  }
  if (const Status claimed = shared::claim_lease(lease_path, lease, options.bind_deadline_ms); !claimed.ok()) {
    if (claimed.message().rfind("lost", 0) == 0) {
      report(report_fd, "lost " + claimed.message());
      return 0;
    }
    log.error("cannot use the lease: " + claimed.message());
    report(report_fd, "failed " + claimed.message());
    return 1;
  }
  auto give_up = [&](const std::string& why) {
    (void)shared::remove_lease_if_ours(lease_path, lease.token);  // what failed is told below
    log.error(why);
    report(report_fd, "failed " + why);
    return 1;
  };

  auto opened = Fence::open(settings);
  if (auto* error = std::get_if<OpenError>(&opened)) {
    return give_up("cannot open ledger: " + open_error_text(*error));
  }
  std::unique_ptr<Fence> fence = std::move(std::get<std::unique_ptr<Fence>>(opened));
  // Started once the server serves; stopped once every session has ended.
  std::optional<Maintenance> maintenance;

  {
    shared::HttpOptions http_options{options.bind, options.port, lease.token, options.session_ttl_ms};
    Fence& f = *fence;
    auto owners = std::make_shared<mcp::AdmissionOwners>(f);
    // Every session's decisions, for GET /metrics.
    auto metrics = std::make_shared<mcp::DecisionMetrics>();
    http_options.metrics = [metrics, &f] {
      mcp::PrometheusText out;
      metrics->write(out, f.ledger_metrics());
      const HeapUsage heap = heap_usage();
      out.family("effectfence_heap_bytes", mcp::PrometheusText::Type::gauge,
                 "Bytes the server's allocator has handed out and not had back (what a leak grows; RSS also "
                 "holds freed pages and, under a sanitizer, its bookkeeping)");
      out.sample("effectfence_heap_bytes", {{"allocator", heap.allocator}}, static_cast<uint64_t>(heap.bytes_in_use));
      return out.take();
    };
    shared::HttpTransport http(
        http_options,
        [owners, metrics, &f, &log](mcp::Server::Sink sink) {
          return fence_session(owners, metrics, f, std::move(sink), log);
        },
        log);
    if (const Status bound = http.bind(); !bound.ok()) return give_up(bound.message());
    lease.url = http.url();
    if (const Status published = shared::publish_lease(lease_path, lease); !published.ok()) {
      if (published.message().rfind("lost", 0) == 0) {
        report(report_fd, "lost " + published.message());
        return 0;
      }
      return give_up("cannot publish the lease: " + published.message());
    }
    http.start();
    maintenance.emplace(*fence, maintenance_options(server_exit_reason("the shared effectfence server"), log));
    log.info("serving " + fence->describe_ledger() + " at " + lease.url + " (pid " + std::to_string(::getpid()) +
             ", lease " + lease_path + ", exits " + std::to_string(options.idle_ms) + " ms after its last session" +
             signing_note(settings) + ")");
    report(report_fd, "ready " + lease.url);
    report_fd = -1;

    for (;;) {
      pollfd p{stop.fd(), POLLIN, 0};
      if (::poll(&p, 1, 100) > 0) {
        log.info(std::string("received ") + mcp::signal_name(stop.received()) + ": removing the lease and stopping");
        break;
      }
      http.expire_idle_sessions();
      // Before its first session the server waits at least an election's length: the client that
      // started it may be slow to come (a loaded machine), and must not find it gone.
      const int64_t idle_limit = http.had_session() ? options.idle_ms : std::max(options.idle_ms, options.election_ms);
      if (http.ms_without_sessions() > idle_limit) {
        log.info("no session for " + std::to_string(idle_limit) + " ms: removing the lease and stopping");
        break;
      }
    }
    // The lease goes first, so no new client joins a server that is leaving.
    if (const Status removed = shared::remove_lease_if_ours(lease_path, lease.token); !removed.ok()) {
      log.warn("did not remove the lease " + lease_path + ": " + removed.message());
    }
    http.stop();
  }  // every session's calls finish here

  const bool all_fenced = report_what_was_left(maintenance->stop(), log);
  maintenance.reset();
  log_group_commit(*fence, log);
  fence.reset();
  log.info("ledger closed; bye");
  return all_fenced ? 0 : 1;  // 1: stopped, but admissions were left in flight (logged)
}

}  // namespace effectfence::cli
