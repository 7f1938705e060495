#include "peers.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include <libpq-fe.h>

#include "child_process.h"

namespace effectfence::bench {
namespace {

constexpr auto kStartLimit = std::chrono::seconds(60);
// Far beyond any healthy answer: a peer this silent is stuck or gone.
constexpr auto kSilenceLimit = std::chrono::seconds(30);

std::string errno_text() { return std::strerror(errno); }

// ---- processes -------------------------------------------------------------

// REQUIRES: called in a freshly forked child. Drops to `user` if root.
void become(const std::string& user) {
  if (user.empty() || ::getuid() != 0) return;
  const passwd* pw = ::getpwnam(user.c_str());
  if (pw == nullptr || ::initgroups(pw->pw_name, pw->pw_gid) != 0 || ::setgid(pw->pw_gid) != 0 ||
      ::setuid(pw->pw_uid) != 0) {
    std::fprintf(stderr, "cannot become user %s\n", user.c_str());
    ::_exit(127);
  }
}

pid_t spawn(const std::vector<std::string>& argv, const std::string& log_path, const std::string& run_as) {
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) throw std::runtime_error("open " + log_path + ": " + errno_text());
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log);
    throw std::runtime_error("fork: " + errno_text());
  }
  if (pid == 0) {
    const int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::setpgid(0, 0);  // a Ctrl-C at the terminal is ours to pass on, not theirs
    become(run_as);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(log);
  return pid;
}

// Runs a command to its end; returns its exit status (128 + signal if killed).
int run_command(const std::vector<std::string>& argv, const std::string& log_path, const std::string& run_as) {
  const pid_t pid = spawn(argv, log_path, run_as);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// A loopback port nothing listens on at the moment of asking.
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("cannot find a free loopback port: " + errno_text());
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// /proc/PID/stat fields after the parenthesised name: 4 is the parent,
// 14 and 15 the user and system CPU time in clock ticks.
struct ProcStat {
  pid_t parent = -1;
  double cpu_s = 0;
};

bool read_stat(pid_t pid, ProcStat* out) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t name_end = stat.rfind(')');
  if (name_end == std::string::npos) return false;
  std::istringstream fields(stat.substr(name_end + 2));
  std::string field;
  double ticks = 0;
  for (int number = 3; number <= 15 && fields >> field; ++number) {
    if (number == 4) out->parent = static_cast<pid_t>(std::stol(field));
    if (number == 14 || number == 15) ticks += std::stod(field);
  }
  out->cpu_s = ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
  return true;
}

double write_bytes_of(pid_t pid) { return proc_io_field("/proc/" + std::to_string(pid) + "/io", "write_bytes:"); }

double file_bytes_under(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return 0;
  if (S_ISREG(st.st_mode)) return static_cast<double>(st.st_size);
  if (!S_ISDIR(st.st_mode)) return 0;
  double total = 0;
  if (DIR* dir = ::opendir(path.c_str())) {
    while (const dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") total += file_bytes_under(path + "/" + name);
    }
    ::closedir(dir);
  }
  return total;
}

// A pair's data, about the size serve's prepare and commit carry.
std::string payload_of(int64_t pair, size_t slot) {
  const std::string s = std::to_string(slot);
  return R"({"state":"in_flight","domain":"bench-account-)" + s + R"(","tool":"charge_card","args":{"order":)" +
         std::to_string(pair) + R"(,"amount_cents":1299},"agent":"bench-agent-)" + s + "\"}";
}

std::string result_of(int64_t pair) {
  return R"({"state":"done","result":{"charged":true,"receipt":"r-)" + std::to_string(pair) + "\"}}";
}

// The slots of one run: which pair each has in flight and since when.
struct Slot {
  int64_t pair = 0;
  int step = 0;  // 0: the first call is out, 1: the second
  Clock::time_point started;
  bool active = false;
};

// ---- Redis -----------------------------------------------------------------

std::string resp_command(const std::vector<std::string>& words) {
  std::string out = "*" + std::to_string(words.size()) + "\r\n";
  for (const std::string& w : words) out += "$" + std::to_string(w.size()) + "\r\n" + w + "\r\n";
  return out;
}

class RedisPeer : public Peer {
 public:
  RedisPeer(std::string host, int port, std::string data_dir, Anomalies& anomalies, IntentNames names)
      : host_(std::move(host)),
        port_(port),
        data_dir_(std::move(data_dir)),
        anomalies_(anomalies),
        names_(names),
        prefix_("effectfence-bench:" + std::to_string(::getpid()) + ":") {}
  ~RedisPeer() override {
    for (const Connection& c : connections_) ::close(c.fd);
    if (server_) server_->stop(SIGTERM);
  }

  void adopt(std::unique_ptr<ServerProcess> server) { server_ = std::move(server); }

  const char* name() const override { return "redis fence"; }
  std::string endpoint() const override { return host_ + ":" + std::to_string(port_); }

  // A first connection that answers PING; throws naming the endpoint.
  void check() {
    open_connections(1);
    const std::string reply = call(connections_[0], resp_command({"PING"}));
    if (reply != "+PONG") throw std::runtime_error(std::string(name()) + ": PING answered " + reply);
  }

  Timings run(size_t in_flight, double seconds) override {
    open_connections(in_flight);
    std::vector<Slot> slots(in_flight);
    Timings timings;
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    size_t active = 0;
    for (size_t i = 0; i < in_flight; ++i) {
      start_pair(i, &slots[i]);
      ++active;
    }
    std::vector<pollfd> fds(in_flight);
    while (active > 0) {
      for (size_t i = 0; i < in_flight; ++i) fds[i] = pollfd{connections_[i].fd, POLLIN, 0};
      const int ready = ::poll(fds.data(), in_flight, static_cast<int>(kSilenceLimit.count() * 1000));
      if (ready == 0) throw std::runtime_error(std::string(name()) + ": no answer from " + endpoint() + " in 30 s");
      if (ready < 0 && errno != EINTR) throw std::runtime_error(std::string(name()) + ": poll: " + errno_text());
      for (size_t i = 0; i < in_flight; ++i) {
        if (fds[i].revents == 0 || !slots[i].active) continue;
        for (const std::string& reply : receive(connections_[i])) {
          if (!on_reply(i, &slots[i], reply, deadline, &timings)) --active;
        }
      }
    }
    timings.elapsed_s = seconds_between(start, Clock::now());
    return timings;
  }

  double ledger_bytes() override { return data_dir_.empty() ? -1 : file_bytes_under(data_dir_); }

 private:
  struct Connection {
    int fd = -1;
    std::string incoming;
  };

  void open_connections(size_t count) {
    while (connections_.size() < count) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port_));
      if (fd < 0 || ::inet_pton(AF_INET, host_.c_str(), &addr.sin_addr) != 1) {
        if (fd >= 0) ::close(fd);
        throw std::runtime_error(std::string(name()) + ": bad address " + endpoint() + " (an IPv4 address:port)");
      }
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        const std::string why = errno_text();
        ::close(fd);
        throw std::runtime_error(std::string(name()) + ": cannot connect to " + endpoint() + ": " + why);
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      connections_.push_back(Connection{fd, {}});
    }
  }

  // Requests are a few hundred bytes: a blocking send of one never waits
  // on a socket buffer the server is draining.
  void send_all(const Connection& c, const std::string& data) {
    for (size_t sent = 0; sent < data.size();) {
      const ssize_t n = ::send(c.fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw std::runtime_error(std::string(name()) + ": send to " + endpoint() + ": " + errno_text());
      sent += static_cast<size_t>(n);
    }
  }

  // The complete replies received so far. SET answers with one line
  // ("+OK", "$-1" for a refused NX, "-ERR ..."), so a reply is a line.
  std::vector<std::string> receive(Connection& c) {
    char buffer[4096];
    const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
    if (n == 0) throw std::runtime_error(std::string(name()) + ": " + endpoint() + " closed the connection");
    if (n < 0 && errno != EINTR && errno != EAGAIN) {
      throw std::runtime_error(std::string(name()) + ": recv from " + endpoint() + ": " + errno_text());
    }
    if (n > 0) c.incoming.append(buffer, static_cast<size_t>(n));
    std::vector<std::string> replies;
    for (size_t end; (end = c.incoming.find("\r\n")) != std::string::npos;) {
      replies.push_back(c.incoming.substr(0, end));
      c.incoming.erase(0, end + 2);
    }
    return replies;
  }

  std::string call(Connection& c, const std::string& request) {
    send_all(c, request);
    for (;;) {
      pollfd fd{c.fd, POLLIN, 0};
      if (::poll(&fd, 1, static_cast<int>(kSilenceLimit.count() * 1000)) == 0) {
        throw std::runtime_error(std::string(name()) + ": no answer from " + endpoint() + " in 30 s");
      }
      const std::vector<std::string> replies = receive(c);
      if (!replies.empty()) return replies.front();
    }
  }

  std::string key_of(int64_t pair) const { return intent_name(prefix_, pair, names_); }

  void start_pair(size_t i, Slot* slot) {
    slot->pair = next_pair_++;
    slot->step = 0;
    slot->started = Clock::now();
    slot->active = true;
    send_all(connections_[i], resp_command({"SET", key_of(slot->pair), payload_of(slot->pair, i), "NX"}));
  }

  // Returns false once the slot has retired.
  bool on_reply(size_t i, Slot* slot, const std::string& reply, Clock::time_point deadline, Timings* timings) {
    const bool ok = reply == "+OK";
    if (!ok) {
      anomalies_.note(std::string(name()) + (slot->step == 0 ? ": prepare not fresh" : ": commit not stored"),
                      key_of(slot->pair) + " answered " + reply);
    }
    if (ok && slot->step == 0) {
      slot->step = 1;
      send_all(connections_[i], resp_command({"SET", key_of(slot->pair), result_of(slot->pair), "XX"}));
      return true;
    }
    const auto now = Clock::now();
    if (ok) timings->samples.push_back(seconds_between(slot->started, now));
    if (ok && now < deadline) {
      start_pair(i, slot);
      return true;
    }
    slot->active = false;
    return false;
  }

  std::string host_;
  int port_;
  std::string data_dir_;  // empty: not ours to measure
  Anomalies& anomalies_;
  IntentNames names_;
  std::string prefix_;
  std::vector<Connection> connections_;
  int64_t next_pair_ = 0;
};

// ---- PostgreSQL ------------------------------------------------------------

constexpr const char* kTable = "effectfence_bench_fence";

class PostgresPeer : public Peer {
 public:
  PostgresPeer(std::string conninfo, Anomalies& anomalies, IntentNames names)
      : conninfo_(std::move(conninfo)),
        anomalies_(anomalies),
        names_(names),
        prefix_("bench-" + std::to_string(::getpid()) + "-") {}
  ~PostgresPeer() override {
    for (PGconn* c : connections_) PQfinish(c);
    if (server_) server_->stop(SIGINT);  // fast shutdown
  }

  void adopt(std::unique_ptr<ServerProcess> server) { server_ = std::move(server); }

  const char* name() const override { return "postgresql fence"; }
  std::string endpoint() const override { return conninfo_; }

  // The table, made anew: intent is the key, as in a fence.
  // REQUIRES: no connection is open yet (each prepares its statements on the table).
  void create_table() {
    PGconn* c = connect();
    try {
      exec(c, std::string("DROP TABLE IF EXISTS ") + kTable);
      exec(c, std::string("CREATE TABLE ") + kTable +
                  " (intent text PRIMARY KEY, state text NOT NULL, payload text NOT NULL, result text)");
    } catch (...) {
      PQfinish(c);
      throw;
    }
    PQfinish(c);
  }

  Timings run(size_t in_flight, double seconds) override {
    open_connections(in_flight);
    std::vector<Slot> slots(in_flight);
    Timings timings;
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    size_t active = 0;
    for (size_t i = 0; i < in_flight; ++i) {
      start_pair(i, &slots[i]);
      ++active;
    }
    std::vector<pollfd> fds(in_flight);
    std::vector<std::string> affected(in_flight);
    while (active > 0) {
      for (size_t i = 0; i < in_flight; ++i) fds[i] = pollfd{PQsocket(connections_[i]), POLLIN, 0};
      const int ready = ::poll(fds.data(), in_flight, static_cast<int>(kSilenceLimit.count() * 1000));
      if (ready == 0) throw std::runtime_error(std::string(name()) + ": no answer in 30 s");
      if (ready < 0 && errno != EINTR) throw std::runtime_error(std::string(name()) + ": poll: " + errno_text());
      for (size_t i = 0; i < in_flight; ++i) {
        if (fds[i].revents == 0 || !slots[i].active) continue;
        PGconn* c = connections_[i];
        if (!PQconsumeInput(c)) fail("connection lost", c);
        while (!PQisBusy(c)) {
          PGresult* result = PQgetResult(c);
          if (result == nullptr) {  // the call is over
            if (!on_answer(i, &slots[i], affected[i], deadline, &timings)) --active;
            break;
          }
          affected[i] = PQresultStatus(result) == PGRES_COMMAND_OK
                            ? std::string(PQcmdTuples(result))
                            : std::string("error: ") + PQresultErrorMessage(result);
          PQclear(result);
        }
      }
    }
    timings.elapsed_s = seconds_between(start, Clock::now());
    return timings;
  }

  double ledger_bytes() override {
    if (connections_.empty()) return -1;
    PGresult* r = PQexec(connections_[0], (std::string("SELECT pg_total_relation_size('") + kTable + "')").c_str());
    const double bytes = PQresultStatus(r) == PGRES_TUPLES_OK ? std::atof(PQgetvalue(r, 0, 0)) : -1;
    PQclear(r);
    return bytes;
  }

 private:
  [[noreturn]] void fail(const std::string& what, PGconn* c) {
    std::string message = c ? PQerrorMessage(c) : "";
    while (!message.empty() && message.back() == '\n') message.pop_back();
    throw std::runtime_error(std::string(name()) + ": " + what + ": " + message);
  }

  void exec(PGconn* c, const std::string& sql) {
    PGresult* r = PQexec(c, sql.c_str());
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok) fail(sql, c);
  }

  PGconn* connect() {
    PGconn* c = PQconnectdb(conninfo_.c_str());
    if (PQstatus(c) != CONNECTION_OK) {
      std::string message = PQerrorMessage(c);
      PQfinish(c);
      while (!message.empty() && message.back() == '\n') message.pop_back();
      throw std::runtime_error(std::string(name()) + ": cannot connect to " + conninfo_ + ": " + message);
    }
    PQsetNoticeProcessor(c, [](void*, const char*) {}, nullptr);  // "table does not exist, skipping"
    return c;
  }

  void open_connections(size_t count) {
    while (connections_.size() < count) {
      PGconn* c = connect();
      connections_.push_back(c);
      // Whatever the server's default, each commit waits for its WAL flush.
      exec(c, "SET synchronous_commit = on");
      prepare(c, "prepare", std::string("INSERT INTO ") + kTable +
                                " (intent, state, payload) VALUES ($1, 'in_flight', $2) ON CONFLICT DO NOTHING");
      prepare(c, "commit", std::string("UPDATE ") + kTable +
                               " SET state = 'done', result = $2 WHERE intent = $1 AND state = 'in_flight'");
    }
  }

  void prepare(PGconn* c, const char* statement, const std::string& sql) {
    PGresult* r = PQprepare(c, statement, sql.c_str(), 2, nullptr);
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok) fail(std::string("prepare ") + statement, c);
  }

  void send(size_t i, const char* statement, const std::string& intent, const std::string& text) {
    const char* values[2] = {intent.c_str(), text.c_str()};
    if (!PQsendQueryPrepared(connections_[i], statement, 2, values, nullptr, nullptr, 0)) {
      fail(std::string("send ") + statement, connections_[i]);
    }
  }

  std::string intent_of(int64_t pair) const { return intent_name(prefix_, pair, names_); }

  void start_pair(size_t i, Slot* slot) {
    slot->pair = next_pair_++;
    slot->step = 0;
    slot->started = Clock::now();
    slot->active = true;
    send(i, "prepare", intent_of(slot->pair), payload_of(slot->pair, i));
  }

  // One row changed is the answer a fresh intent gets; returns false once
  // the slot has retired.
  bool on_answer(size_t i, Slot* slot, const std::string& affected, Clock::time_point deadline, Timings* timings) {
    const bool ok = affected == "1";
    if (!ok) {
      anomalies_.note(std::string(name()) + (slot->step == 0 ? ": prepare not fresh" : ": commit not stored"),
                      intent_of(slot->pair) + " changed " + affected + " rows");
    }
    if (ok && slot->step == 0) {
      slot->step = 1;
      send(i, "commit", intent_of(slot->pair), result_of(slot->pair));
      return true;
    }
    const auto now = Clock::now();
    if (ok) timings->samples.push_back(seconds_between(slot->started, now));
    if (ok && now < deadline) {
      start_pair(i, slot);
      return true;
    }
    slot->active = false;
    return false;
  }

  std::string conninfo_;
  Anomalies& anomalies_;
  IntentNames names_;
  std::string prefix_;
  std::vector<PGconn*> connections_;
  int64_t next_pair_ = 0;
};

// The newest installed PostgreSQL server binaries, or "".
std::string postgres_bindir() {
  std::vector<std::string> found;
  if (DIR* dir = ::opendir("/usr/lib/postgresql")) {
    while (const dirent* entry = ::readdir(dir)) {
      const std::string bin = std::string("/usr/lib/postgresql/") + entry->d_name + "/bin";
      if (entry->d_name[0] != '.' && ::access((bin + "/postgres").c_str(), X_OK) == 0 &&
          ::access((bin + "/initdb").c_str(), X_OK) == 0) {
        found.push_back(bin);
      }
    }
    ::closedir(dir);
  }
  std::sort(found.begin(), found.end(), [](const std::string& a, const std::string& b) {
    return std::atoi(a.c_str() + 20) < std::atoi(b.c_str() + 20);  // after "/usr/lib/postgresql/"
  });
  return found.empty() ? "" : found.back();
}

// initdb refuses to run as root; the server then runs as 'postgres' (or 'nobody').
std::string postgres_user() {
  if (::getuid() != 0) return "";
  return ::getpwnam("postgres") ? "postgres" : "nobody";
}

// The server's own user must pass through every directory above its data.
void require_searchable_by_others(const std::string& dir) {
  char resolved[PATH_MAX];
  if (::realpath(dir.c_str(), resolved) == nullptr) throw std::runtime_error("realpath " + dir + ": " + errno_text());
  for (std::string path = resolved; path.size() > 1; path = path.substr(0, std::max<size_t>(path.rfind('/'), 1))) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && (st.st_mode & S_IXOTH) == 0) {
      throw std::runtime_error("postgresql fence: the server runs as user " + postgres_user() + ", who cannot enter " +
                               path + " (chmod o+x it, or pass --dir elsewhere)");
    }
  }
}

void wait_until(const std::function<bool()>& ready, ServerProcess& server, const std::string& what,
                const std::string& log) {
  const auto give_up = Clock::now() + kStartLimit;
  while (!ready()) {
    if (!server.running()) throw std::runtime_error(what + " exited at start; see " + log);
    if (Clock::now() > give_up) throw std::runtime_error(what + " did not start in 60 s; see " + log);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

bool can_connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  if (fd >= 0) ::close(fd);
  return ok;
}

}  // namespace

// ---- ServerProcess ---------------------------------------------------------

ServerProcess::ServerProcess(const std::vector<std::string>& argv, const std::string& log_path,
                             const std::string& run_as)
    : pid_(spawn(argv, log_path, run_as)) {}

ServerProcess::~ServerProcess() { stop(SIGTERM); }

bool ServerProcess::running() {
  if (pid_ < 0) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

void ServerProcess::stop(int signal) {
  if (!running()) return;
  ::kill(pid_, signal);
  const auto give_up = Clock::now() + std::chrono::seconds(30);
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (Clock::now() > give_up) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  pid_ = -1;
}

ProcessUsage process_tree_usage(pid_t root) {
  ProcessUsage usage;
  ProcStat stat;
  if (root < 0 || !read_stat(root, &stat)) return usage;
  usage.cpu_s = stat.cpu_s;
  usage.write_bytes = write_bytes_of(root);
  if (DIR* proc = ::opendir("/proc")) {
    while (const dirent* entry = ::readdir(proc)) {
      if (entry->d_name[0] < '1' || entry->d_name[0] > '9') continue;
      const pid_t pid = static_cast<pid_t>(std::atol(entry->d_name));
      ProcStat child;
      if (pid == root || !read_stat(pid, &child) || child.parent != root) continue;
      usage.cpu_s += child.cpu_s;
      const double bytes = write_bytes_of(pid);
      if (bytes >= 0 && usage.write_bytes >= 0) usage.write_bytes += bytes;
    }
    ::closedir(proc);
  }
  return usage;
}

// ---- starting and reaching the peers ---------------------------------------

std::unique_ptr<Peer> start_redis(const std::string& dir, Anomalies& anomalies, IntentNames names) {
  const std::string binary = find_on_path("redis-server");
  if (binary.empty()) throw PeerUnavailable("redis-server is not on PATH (tools/install-deps --bench installs it)");
  const std::string data = dir + "/redis";
  if (::mkdir(data.c_str(), 0700) != 0) throw std::runtime_error("mkdir " + data + ": " + errno_text());
  const int port = free_loopback_port();
  const std::string log = dir + "/redis.log";
  auto server = std::make_unique<ServerProcess>(
      std::vector<std::string>{binary, "--bind", "127.0.0.1", "--port", std::to_string(port), "--dir", data,
                               "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no",
                               "--protected-mode", "no", "--logfile", ""},
      log, "");
  wait_until([&] { return can_connect(port); }, *server, "redis-server", log);
  auto peer = std::make_unique<RedisPeer>("127.0.0.1", port, data, anomalies, names);
  peer->adopt(std::move(server));
  peer->check();
  return peer;
}

std::unique_ptr<Peer> connect_redis(const std::string& host_port, Anomalies& anomalies, IntentNames names) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("--redis needs HOST:PORT, not " + host_port);
  const int port = std::atoi(host_port.c_str() + colon + 1);
  if (port <= 0 || port > 65535) throw std::invalid_argument("--redis: bad port in " + host_port);
  auto peer = std::make_unique<RedisPeer>(host_port.substr(0, colon), port, "", anomalies, names);
  peer->check();
  return peer;
}

std::unique_ptr<Peer> start_postgres(const std::string& dir, size_t max_connections, Anomalies& anomalies,
                                     IntentNames names) {
  const std::string bin = postgres_bindir();
  if (bin.empty()) throw PeerUnavailable("the PostgreSQL server is not installed (tools/install-deps --bench)");
  const std::string user = postgres_user();
  const std::string home = dir + "/postgres";
  if (::mkdir(home.c_str(), 0700) != 0) throw std::runtime_error("mkdir " + home + ": " + errno_text());
  if (!user.empty()) {
    const passwd* pw = ::getpwnam(user.c_str());
    // The server's user must reach its directory inside the scratch directory.
    if (pw == nullptr || ::chown(home.c_str(), pw->pw_uid, pw->pw_gid) != 0 || ::chmod(dir.c_str(), 0711) != 0) {
      throw std::runtime_error("cannot hand " + home + " to user " + user + ": " + errno_text());
    }
  }
  if (!user.empty()) require_searchable_by_others(dir);
  const std::string log = dir + "/postgres.log";
  const int status = run_command({bin + "/initdb", "-D", home + "/data", "-U", "bench", "--auth=trust",
                                  "--encoding=UTF8", "--locale=C", "--no-sync"},
                                 log, user);
  if (status != 0) throw std::runtime_error("postgresql fence: initdb failed; see " + log);
  const int port = free_loopback_port();
  // Loopback TCP only, as the clients reach it: a unix socket in a deep
  // scratch directory could pass the 107-byte limit on its path.
  auto server = std::make_unique<ServerProcess>(
      std::vector<std::string>{bin + "/postgres", "-D", home + "/data", "-p", std::to_string(port), "-c",
                               "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", "-c",
                               "fsync=on", "-c", "synchronous_commit=on", "-c",
                               "max_connections=" + std::to_string(max_connections + 10)},
      log, user);
  const std::string conninfo = "host=127.0.0.1 port=" + std::to_string(port) + " user=bench dbname=postgres";
  wait_until([&] { return PQping(conninfo.c_str()) == PQPING_OK; }, *server, "postgres", log);
  auto peer = std::make_unique<PostgresPeer>(conninfo, anomalies, names);
  peer->adopt(std::move(server));
  peer->create_table();
  return peer;
}

std::unique_ptr<Peer> connect_postgres(const std::string& conninfo, Anomalies& anomalies, IntentNames names) {
  auto peer = std::make_unique<PostgresPeer>(conninfo, anomalies, names);
  peer->create_table();
  return peer;
}

}  // namespace effectfence::bench
