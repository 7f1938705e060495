#include "shared_server/http_transport.h"

#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <optional>
#include <variant>

#include "core/random_token.h"
#include "mcp/jsonrpc.h"
#include "mcp/line_io.h"
#include "mcp/prometheus.h"
#include "mcp/protocol_era.h"
#include "shared_server/deliveries.h"
#include "shared_server/lease.h"

namespace effectfence::shared {
namespace {

constexpr const char* kSessionHeader = "Mcp-Session-Id";
constexpr const char* kVersionHeader = "MCP-Protocol-Version";
// httplib listens with a backlog of 5 (compiled into Debian's library): a
// burst of connections beyond it waits for SYN retransmits, seconds apart,
// or is dropped. The kernel's own cap (somaxconn) still applies.
constexpr int kListenBacklog = 1024;
constexpr auto kDrainGrace = std::chrono::seconds(15);
// A 503: the request was never processed, so it may be sent to the next server.
constexpr const char* kStopping = "the server is stopping; find the next one through the lease file";

// True on the thread that answers the connections beyond ConnectionThreads' bound.
thread_local bool t_over_capacity = false;

// Threads beyond the tool calls' (CallGate): for requests that decide
// nothing, and connections kept open between requests.
constexpr size_t kThreadsBeyondCalls = 64;

// httplib hands each accepted connection to this queue. Each is served at
// once, on a thread started when none is idle: a tool call waits for its
// turn and its decision in the CallGate, holding its thread, and a scrape of
// /metrics or a ping must not wait behind it. Beyond max_threads a
// connection is not left waiting (nor its file descriptor held): it is
// read and answered at once, on a thread of its own, with kTooBusy for a
// request (nothing decided) and as usual for anything that decides nothing.
class ConnectionThreads final : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(size_t max_threads) : max_threads_(std::max<size_t>(1, max_threads)) {
    MutexLock lock(&mutex_);
    workers_.emplace_back([this] { work(true); });
  }
  ~ConnectionThreads() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    {
      MutexLock lock(&mutex_);
      if (stopping_) {  // not expected of httplib; served here rather than never
        lock.Unlock();
        fn();
        return;
      }
      // workers_ holds the overflow thread and the threads serving jobs_.
      if (idle_ > jobs_.size() || workers_.size() - 1 < max_threads_) {
        jobs_.push_back(std::move(fn));
        if (idle_ < jobs_.size()) workers_.emplace_back([this] { work(false); });
      } else {
        overflow_.push_back(std::move(fn));
        over_capacity_wake_.NotifyOne();
        return;
      }
    }
    wake_.NotifyOne();  // one idle thread, not all of them: there may be hundreds
  }

  void shutdown() override {
    std::vector<std::thread> workers;
    {
      MutexLock lock(&mutex_);
      stopping_ = true;
      workers.swap(workers_);
    }
    wake_.NotifyAll();
    over_capacity_wake_.NotifyAll();
    for (auto& t : workers) t.join();
  }

 private:
  // Serves overflow_ if over_capacity, else jobs_.
  void work(bool over_capacity) {
    t_over_capacity = over_capacity;
    for (;;) {
      std::function<void()> fn;
      {
        MutexLock lock(&mutex_);
        std::deque<std::function<void()>>& jobs = over_capacity ? overflow_ : jobs_;
        if (!over_capacity) ++idle_;
        CondVar& wake = over_capacity ? over_capacity_wake_ : wake_;
        while (!stopping_ && jobs.empty()) wake.Wait(&mutex_);
        if (!over_capacity) --idle_;
        if (jobs.empty()) return;  // stopping, and every connection taken was served
        fn = std::move(jobs.front());
        jobs.pop_front();
      }
      fn();
    }
  }

  const size_t max_threads_;
  Mutex mutex_;
  CondVar wake_;
  CondVar over_capacity_wake_;
  std::deque<std::function<void()>> jobs_ GUARDED_BY(mutex_);
  std::deque<std::function<void()>> overflow_ GUARDED_BY(mutex_);
  size_t idle_ GUARDED_BY(mutex_) = 0;  // threads serving jobs_ that wait for a connection
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::vector<std::thread> workers_ GUARDED_BY(mutex_);
};

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// Compares without an early exit, so the token cannot be guessed byte by byte from timings.
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// "host:port", "[::1]:port" or "host" -> {host, port or -1}. Returns false on garbage.
bool split_host_port(const std::string& text, std::string* host, int* port) {
  std::string rest;
  if (!text.empty() && text[0] == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos) return false;
    *host = text.substr(1, close - 1);
    rest = text.substr(close + 1);
  } else {
    const auto colon = text.rfind(':');
    *host = text.substr(0, colon);
    rest = colon == std::string::npos ? "" : text.substr(colon);
  }
  *port = -1;
  if (rest.empty()) return !host->empty();
  if (rest[0] != ':' || rest.size() < 2 || rest.size() > 6) return false;
  for (size_t i = 1; i < rest.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(rest[i]))) return false;
  }
  *port = std::stoi(rest.substr(1));
  return !host->empty();
}

void send_json(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(mcp::jsonrpc::serialize(body), "application/json");
}

// A plain HTTP refusal with a JSON-RPC error body a client can show.
void refuse(httplib::Response& res, int status, const std::string& message) {
  send_json(res, status, mcp::jsonrpc::error_response(nullptr, mcp::jsonrpc::kInvalidRequest, message));
}

// The answer to a message reusing the id of a call in flight, whatever else
// is wrong with it: the same words as a stdio server's (mcp::Server).
Json already_used(const Json& id) {
  return mcp::jsonrpc::error_response(id, mcp::jsonrpc::kInvalidRequest,
                                      "invalid request: id " + id.dump() + " is already used by a call in flight");
}

// How the client wants a request answered. nullopt: neither JSON nor SSE.
std::optional<bool> wants_event_stream(const httplib::Request& req) {
  if (!req.has_header("Accept")) return false;
  const std::string accept = lower(req.get_header_value("Accept"));
  const auto json = accept.find("application/json");
  const auto sse = accept.find("text/event-stream");
  const bool any = accept.find("*/*") != std::string::npos || accept.find("application/*") != std::string::npos;
  if (sse != std::string::npos && (json == std::string::npos || sse < json)) return true;
  if (json != std::string::npos || any) return false;
  return std::nullopt;
}

void answer(httplib::Response& res, const std::string& line, bool event_stream) {
  res.status = 200;
  if (event_stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_content("event: message\ndata: " + line + "\n\n", "text/event-stream");
  } else {
    res.set_content(line, "application/json");
  }
}

bool supported_version(const std::string& version) {
  for (const char* v : mcp::kSupportedProtocolVersions) {
    if (version == v) return true;
  }
  for (const char* v : mcp::kModernProtocolVersions) {
    if (version == v) return true;
  }
  return false;
}

int socket_port(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  return -1;
}

// The socket of the connection req came on: httplib (0.11) does not hand it
// to handlers, so it is found among our descriptors by its two ports (the
// pair names one TCP connection on this host). -1 when not found.
int connection_fd(const httplib::Request& req) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_size = sizeof local, peer_size = sizeof peer;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_size) != 0) continue;
    if (socket_port(local) != req.local_port) continue;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_size) != 0) continue;
    if (socket_port(peer) != req.remote_port) continue;
    found = static_cast<int>(fd);
    break;
  }
  closedir(dir);
  return found;
}

// Returns false iff the peer of fd closed its end (FIN or RST seen).
bool peer_connected(int fd) {
  if (fd < 0) return true;
  pollfd p{fd, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return true;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) == 0;
}

}  // namespace

struct HttpTransport::Session {
  std::string id;
  Mutex mutex;
  CondVar answered;
  std::map<std::string, std::optional<std::string>> waiting GUARDED_BY(mutex);  // request id.dump() -> its answer
  bool closed GUARDED_BY(mutex) = false;
  int active_requests GUARDED_BY(mutex) = 0;
  int64_t last_active_ms GUARDED_BY(mutex) = 0;
  Deliveries deliveries GUARDED_BY(mutex);  // by Idempotency-Key: resends get the first answer
  std::function<void()> ended;          // runs after the server's calls finished
  std::unique_ptr<mcp::Server> server;  // last: its destructor still delivers into the members above

  ~Session() {
    server.reset();
    if (ended) ended();
  }

  // Routes one outgoing line to the HTTP request waiting for it.
  void deliver(const std::string& line) {
    const Json message = Json::parse(line, nullptr, false);
    if (!message.is_object() || !message.contains("id")) return;  // a notification: nobody waits for it
    MutexLock lock(&mutex);
    auto it = waiting.find(message["id"].dump());
    if (it == waiting.end() || it->second) return;
    it->second = line;
    answered.NotifyAll();
  }
};

HttpTransport::HttpTransport(HttpOptions options, ServerFactory factory, mcp::Logger& log)
    : options_(std::move(options)),
      factory_(std::move(factory)),
      log_(log),
      http_(std::make_unique<httplib::Server>()),
      calls_(options_.max_running_calls, options_.max_waiting_calls),
      empty_since_ms_(wall_clock_ms()) {
  stateless_ = std::make_unique<StatelessRequests>(
      [this](mcp::Server::Sink sink) {
        SessionServer built = factory_(std::move(sink));
        stateless_ended_ = std::move(built.ended);
        return std::move(built.server);
      },
      log_);
  http_->new_task_queue = [this] {
    return new ConnectionThreads(options_.max_running_calls + options_.max_waiting_calls + kThreadsBeyondCalls);
  };
  http_->set_socket_options([this](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_fd_ = sock;  // bind() widens its backlog once it listens
  });
  http_->set_payload_max_length(mcp::kMaxMessageBytes);
  http_->set_keep_alive_timeout(2);
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return admit(req, res) ? httplib::Server::HandlerResponse::Unhandled : httplib::Server::HandlerResponse::Handled;
  });
  http_->Post("/mcp", [this](const httplib::Request& req, httplib::Response& res) { handle_post(req, res); });
  http_->Delete("/mcp", [this](const httplib::Request& req, httplib::Response& res) { handle_delete(req, res); });
  if (options_.metrics) {
    // Behind the same token and Host/Origin checks as /mcp (admit), as a
    // scraper with the lease's token sends them.
    http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      mcp::PrometheusText transport;
      transport.family("effectfence_http_requests_in_progress", mcp::PrometheusText::Type::gauge,
                       "Requests to /mcp this server has read and not yet answered (calls waiting for the ledger "
                       "among them)");
      transport.sample("effectfence_http_requests_in_progress", {}, static_cast<uint64_t>(requests_in_progress()));
      transport.family("effectfence_http_calls_waiting", mcp::PrometheusText::Type::gauge,
                       "Tool calls waiting for a turn: the server runs " + std::to_string(options_.max_running_calls) +
                           " at once");
      transport.sample("effectfence_http_calls_waiting", {}, static_cast<uint64_t>(calls_.waiting()));
      res.set_content(options_.metrics() + transport.take(), mcp::kPrometheusContentType);
    });
  }
  http_->Get("/mcp", [](const httplib::Request&, httplib::Response& res) { handle_get(res); });
  http_->set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    log_.error("HTTP handler failed: " + what);
    send_json(res, 500, mcp::jsonrpc::error_response(nullptr, mcp::jsonrpc::kInternalError, "internal error: " + what));
  });
}

HttpTransport::~HttpTransport() {
  stop();
  std::map<std::string, std::shared_ptr<Session>> sessions;
  {
    MutexLock lock(&sessions_mutex_);
    sessions.swap(sessions_);
  }
  sessions.clear();  // each Server finishes its calls in flight here
  stateless_.reset();
  if (stateless_ended_) stateless_ended_();
}

Status HttpTransport::bind() {
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.bind_host);
    if (port_ <= 0) return Status::Error("cannot bind " + options_.bind_host + " to any port");
  } else {
    if (!http_->bind_to_port(options_.bind_host, options_.port)) {
      return Status::Error("cannot bind " + options_.bind_host + ":" + std::to_string(options_.port) +
                           " (in use, or not an address of this host)");
    }
    port_ = options_.port;
  }
  // listen() again on a listening socket sets its backlog anew.
  if (listen_fd_ >= 0 && ::listen(listen_fd_, kListenBacklog) != 0) {
    log_.warn(std::string("could not widen the listen backlog: ") + std::strerror(errno));
  }
  return Status::Ok();
}

void HttpTransport::start() {
  listener_ = std::thread([this] { http_->listen_after_bind(); });
}

void HttpTransport::stop() {
  if (draining_.exchange(true)) return;
  calls_.close();  // calls waiting for a turn are turned away, 503: never started
  // Requests already taken get their answers (fence calls are bounded by the
  // ledger's busy timeout); new ones are turned away with 503.
  const auto grace_ends = std::chrono::steady_clock::now() + kDrainGrace;
  while (std::chrono::steady_clock::now() < grace_ends && requests_in_progress() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stopping_ = true;
  {
    MutexLock lock(&sessions_mutex_);
    for (auto& [id, session] : sessions_) {
      MutexLock session_lock(&session->mutex);
      session->answered.NotifyAll();
    }
  }
  http_->stop();
  if (listener_.joinable()) listener_.join();
}

std::string HttpTransport::url() const {
  const std::string host = options_.bind_host.find(':') != std::string::npos ? "[" + options_.bind_host + "]"
                                                                             : options_.bind_host;
  return "http://" + host + ":" + std::to_string(port_) + "/mcp";
}

size_t HttpTransport::requests_in_progress() const {
  size_t n = stateless_->in_progress();
  MutexLock lock(&sessions_mutex_);
  for (const auto& [id, session] : sessions_) {
    MutexLock session_lock(&session->mutex);
    n += static_cast<size_t>(session->active_requests);
  }
  return n;
}

bool HttpTransport::had_session() const {
  if (stateless_->last_active_ms() > 0) return true;
  MutexLock lock(&sessions_mutex_);
  return had_session_;
}

size_t HttpTransport::session_count() const {
  MutexLock lock(&sessions_mutex_);
  return sessions_.size();
}

int64_t HttpTransport::ms_without_sessions() const {
  // A stateless client holds no session: its requests count as one while
  // they run, and the last one's end as the last session's.
  if (stateless_->in_progress() > 0) return 0;
  const int64_t stateless_since = stateless_->last_active_ms();
  MutexLock lock(&sessions_mutex_);
  if (!sessions_.empty()) return 0;
  return wall_clock_ms() - std::max(empty_since_ms_, stateless_since);
}

bool HttpTransport::host_allowed(const std::string& host_header) const {
  std::string host;
  int port = -1;
  if (!split_host_port(lower(host_header), &host, &port)) return false;
  if (port == -1) port = 80;  // http's default: a page on port 80 is another origin than this server
  if (port != port_) return false;
  if (host == "127.0.0.1" || host == "localhost" || host == "::1") return true;
  if (options_.bind_host == "0.0.0.0" || options_.bind_host == "::") return true;  // the operator asked for any address
  return host == lower(options_.bind_host);
}

bool HttpTransport::origin_allowed(const std::string& origin) const {
  const std::string o = lower(origin);
  const std::string scheme = "http://";
  if (o.compare(0, scheme.size(), scheme) != 0) return false;
  std::string authority = o.substr(scheme.size());
  if (const auto slash = authority.find('/'); slash != std::string::npos) authority.resize(slash);
  return host_allowed(authority);
}

bool HttpTransport::admit(const httplib::Request& req, httplib::Response& res) const {
  if (!host_allowed(req.get_header_value("Host"))) {
    log_.warn("refused a request for Host \"" + req.get_header_value("Host") + "\" from " + req.remote_addr);
    refuse(res, 403, "forbidden: Host \"" + req.get_header_value("Host") + "\" is not this server");
    return false;
  }
  if (req.has_header("Origin") && !origin_allowed(req.get_header_value("Origin"))) {
    log_.warn("refused a request from Origin \"" + req.get_header_value("Origin") + "\"");
    refuse(res, 403, "forbidden: Origin \"" + req.get_header_value("Origin") + "\" may not use this server");
    return false;
  }
  const std::string auth = req.get_header_value("Authorization");
  const std::string bearer = "Bearer ";
  if (auth.compare(0, bearer.size(), bearer) != 0 || !same_secret(auth.substr(bearer.size()), options_.token)) {
    res.set_header("WWW-Authenticate", "Bearer realm=\"effectfence\"");
    refuse(res, 401, "unauthorized: send \"Authorization: Bearer <token>\" with the token from the server's lease file");
    return false;
  }
  return true;
}

std::shared_ptr<HttpTransport::Session> HttpTransport::find_session(const std::string& id) const {
  MutexLock lock(&sessions_mutex_);
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

bool HttpTransport::id_in_flight(const httplib::Request& req, const Json& id) const {
  if (id.is_null() || !req.has_header(kSessionHeader)) return false;
  const std::shared_ptr<Session> session = find_session(req.get_header_value(kSessionHeader));
  if (!session) return false;
  MutexLock lock(&session->mutex);
  return session->waiting.count(id.dump()) > 0;
}

std::shared_ptr<HttpTransport::Session> HttpTransport::open_session() {
  auto session = std::make_shared<Session>();
  session->id = random_token_hex(16);
  {
    MutexLock lock(&session->mutex);  // not shared yet; taken so every write is under it
    session->last_active_ms = wall_clock_ms();
  }
  Session* raw = session.get();
  SessionServer built = factory_([raw](const std::string& line) { raw->deliver(line); });
  session->ended = std::move(built.ended);
  session->server = std::move(built.server);
  return session;
}

void HttpTransport::forget_session(const std::string& id) {
  MutexLock lock(&sessions_mutex_);
  if (sessions_.erase(id) > 0 && sessions_.empty()) empty_since_ms_ = wall_clock_ms();
}

void HttpTransport::close_session(const std::shared_ptr<Session>& session, const char* why) {
  forget_session(session->id);
  {
    MutexLock lock(&session->mutex);
    session->closed = true;
    session->answered.NotifyAll();
  }
  log_.info(std::string("session ") + session->id.substr(0, 8) + " closed: " + why);
}

size_t HttpTransport::expire_idle_sessions() {
  std::vector<std::shared_ptr<Session>> idle;
  const int64_t now = wall_clock_ms();
  {
    MutexLock lock(&sessions_mutex_);
    for (auto& [id, session] : sessions_) {
      MutexLock session_lock(&session->mutex);
      if (session->active_requests == 0 && now - session->last_active_ms > options_.session_ttl_ms) {
        // Closed under the lock the check was made under: a request that
        // comes in between is refused 404 (never processed, safe to send
        // again), not taken and then cut off.
        session->closed = true;
        idle.push_back(session);
      }
    }
  }
  for (auto& session : idle) close_session(session, "no request within the session TTL");
  return idle.size();
}

void HttpTransport::handle_post(const httplib::Request& req, httplib::Response& res) {
  if (draining_) {
    refuse(res, 503, kStopping);
    return;
  }
  if (lower(req.get_header_value("Content-Type")).find("application/json") == std::string::npos) {
    refuse(res, 415, "unsupported media type: POST one JSON-RPC message as application/json");
    return;
  }
  const std::optional<bool> event_stream = wants_event_stream(req);
  if (!event_stream) {
    refuse(res, 406, "not acceptable: the Accept header must allow application/json or text/event-stream");
    return;
  }
  if (req.has_header(kVersionHeader) && !supported_version(req.get_header_value(kVersionHeader))) {
    refuse(res, 400, std::string("unsupported ") + kVersionHeader + " \"" + req.get_header_value(kVersionHeader) + "\"");
    return;
  }

  mcp::jsonrpc::Message message = mcp::jsonrpc::classify(req.body);
  if (auto* invalid = std::get_if<mcp::jsonrpc::Invalid>(&message)) {
    if (id_in_flight(req, invalid->id)) {
      send_json(res, 400, already_used(invalid->id));
    } else {
      send_json(res, 400, mcp::jsonrpc::error_response(invalid->id, invalid->code, invalid->message));
    }
    return;
  }
  const auto* request = std::get_if<mcp::jsonrpc::Request>(&message);
  std::optional<CallTurn> turn;
  if (request && request->method == "tools/call" && !t_over_capacity) turn.emplace(&calls_);
  if (request && (t_over_capacity || (turn && turn->entry() == CallGate::Entry::busy))) {
    const std::string running = std::to_string(options_.max_running_calls);
    const std::string waiting = std::to_string(options_.max_waiting_calls);
    log_.warn("refused " + request->method + " " + request->id.dump() + ": " + running + " calls run and " +
              waiting + " wait already");
    send_json(res, kTooBusy,
              mcp::jsonrpc::error_response(
                  request->id, mcp::jsonrpc::kServerBusy,
                  "server busy: the shared server already runs " + running + " calls and " + waiting +
                      " more wait. This call was not started, nothing was decided; retry it shortly."));
    return;
  }
  if (turn && turn->entry() == CallGate::Entry::closed) {
    refuse(res, 503, kStopping);
    return;
  }

  if (!req.has_header(kSessionHeader) && !std::holds_alternative<mcp::jsonrpc::Response>(message)) {
    Json document = Json::parse(req.body, nullptr, false);
    if (mcp::is_stateless_message(document)) {
      handle_stateless(req, res, document, request != nullptr, *event_stream);
      return;
    }
  }

  std::shared_ptr<Session> session;
  const bool opening = request && request->method == "initialize";
  if (opening) {
    if (req.has_header(kSessionHeader)) {
      refuse(res, 400, std::string("initialize opens a new session: send it without ") + kSessionHeader);
      return;
    }
    session = open_session();
  } else {
    if (!req.has_header(kSessionHeader)) {
      refuse(res, 400, std::string("missing ") + kSessionHeader + ": initialize first");
      return;
    }
    session = find_session(req.get_header_value(kSessionHeader));
    if (!session) {
      refuse(res, 404, "unknown session: it ended or expired; initialize a new one");
      return;
    }
  }

  const std::string key = request ? request->id.dump() : "";
  // initialize opens a new session each time, so it has no earlier delivery.
  const std::string delivery = opening ? "" : req.get_header_value(kIdempotencyHeader);
  {
    MutexLock lock(&session->mutex);
    if (session->closed) {
      // Closed since it was found (its TTL ran out): nothing may run in it now, or an
      // admission would be made only to be fenced when the session's end is handled.
      refuse(res, 404, "unknown session: it ended or expired; initialize a new one");
      return;
    }
    if (!delivery.empty()) {
      std::optional<std::string> earlier;
      Deliveries::Seen seen = session->deliveries.deliver(delivery, req.body, wall_clock_ms(), &earlier);
      if (seen == Deliveries::Seen::pending) {
        // A resend while the first delivery is still being handled: its answer serves both.
        ++session->active_requests;
        while (session->deliveries.pending(delivery) && !session->closed && !stopping_) {
          session->answered.Wait(&session->mutex);
        }
        --session->active_requests;
        seen = session->deliveries.deliver(delivery, req.body, wall_clock_ms(), &earlier);
      }
      if (seen != Deliveries::Seen::first) {
        lock.Unlock();
        answer_resend(res, seen, request, earlier, *event_stream);
        return;
      }
    }
    if (request) {
      if (session->waiting.count(key) > 0) {
        const Json refusal = already_used(request->id);
        // Settled, so a resend of this delivery gets the same refusal instead of waiting.
        if (!delivery.empty()) session->deliveries.finish(delivery, mcp::jsonrpc::serialize(refusal), wall_clock_ms());
        send_json(res, 400, refusal);
        return;
      }
      session->waiting.emplace(key, std::nullopt);
    }
    ++session->active_requests;
    session->last_active_ms = wall_clock_ms();
  }

  session->server->handle_line(req.body);

  std::optional<std::string> reply;
  {
    MutexLock lock(&session->mutex);
    if (request) {
      while (!session->waiting[key].has_value() && !session->closed && !stopping_) {
        session->answered.Wait(&session->mutex);
      }
      reply = session->waiting[key];
      session->waiting.erase(key);
    }
    --session->active_requests;
    session->last_active_ms = wall_clock_ms();
    if (!delivery.empty()) {
      session->deliveries.finish(delivery, reply, session->last_active_ms);
      session->answered.NotifyAll();  // resends waiting for this answer
    }
  }
  if (const auto* note = std::get_if<mcp::jsonrpc::Notification>(&message);
      note && note->method == "notifications/cancelled") {
    // The cancelled call's answer is never sent; release whoever waits for it.
    MutexLock lock(&session->mutex);
    if (auto it = session->waiting.find(note->params.value("requestId", Json()).dump());
        it != session->waiting.end() && !it->second) {
      it->second = mcp::jsonrpc::serialize(
          mcp::jsonrpc::error_response(note->params["requestId"], -32800, "request cancelled by the client"));
      session->answered.NotifyAll();
    }
  }

  if (!request) {
    res.status = 202;
    return;
  }
  if (!reply) {
    // Taken and handled, so perhaps decided: not 503, which says it was
    // never processed and may be sent again.
    send_json(res, kAnswerLost,
              mcp::jsonrpc::error_response(request->id, mcp::jsonrpc::kInternalError,
                                           "the server stopped, or the session ended, after it took this request "
                                           "and before its answer: it may have been decided"));
    return;
  }
  if (opening) {
    const Json answer_json = Json::parse(*reply, nullptr, false);
    if (!answer_json.is_object() || !answer_json.contains("result")) {
      send_json(res, 200, answer_json);  // a refused initialize opens no session
      return;
    }
    {
      MutexLock lock(&sessions_mutex_);
      sessions_.emplace(session->id, session);
      had_session_ = true;
    }
    res.set_header(kSessionHeader, session->id);
    log_.info("session " + session->id.substr(0, 8) + " opened from " + req.remote_addr);
  }
  answer(res, *reply, *event_stream);
}

void HttpTransport::handle(const httplib::Request& req, httplib::Response& res) {
  if (!admit(req, res)) return;
  if (req.path == "/mcp" && req.method == "POST") return handle_post(req, res);
  if (req.path == "/mcp" && req.method == "DELETE") return handle_delete(req, res);
  if (req.path == "/mcp" && req.method == "GET") return handle_get(res);
  res.status = 404;
}

void HttpTransport::handle_get(httplib::Response& res) {
  res.set_header("Allow", "POST, DELETE");
  refuse(res, 405, "this server offers no stream of its own; POST requests to /mcp");
}

void HttpTransport::handle_stateless(const httplib::Request& req, httplib::Response& res, const Json& document,
                                     bool request, bool event_stream) {
  const auto mismatch = mcp::check_standard_headers(document, [&req](const std::string& name) {
    return req.has_header(name) ? std::optional<std::string>(req.get_header_value(name)) : std::nullopt;
  });
  if (mismatch) {
    send_json(res, 400, mcp::jsonrpc::error_response(request ? document["id"] : Json(), mismatch->code, mismatch->message));
    return;
  }
  if (!request) {
    stateless_->notify(document);
    res.status = 202;
    return;
  }
  const int fd = connection_fd(req);
  if (fd < 0) log_.warn("could not find the connection of a stateless request: a disconnect will not cancel it");
  const std::string reply = stateless_->handle(document, [fd] { return peer_connected(fd); }, stopping_);
  if (reply.empty()) {
    // Nobody reads this when the client left; a stop is answered as for a session.
    send_json(res, kAnswerLost,
              mcp::jsonrpc::error_response(document["id"], mcp::jsonrpc::kInternalError,
                                           "the server stopped, or the client closed its connection, after it took "
                                           "this request and before its answer: it may have been decided"));
    return;
  }
  answer(res, reply, event_stream);
}

void HttpTransport::answer_resend(httplib::Response& res, Deliveries::Seen seen,
                                  const mcp::jsonrpc::Request* request, const std::optional<std::string>& earlier,
                                  bool event_stream) {
  switch (seen) {
    case Deliveries::Seen::conflicting:
      refuse(res, 422, std::string(kIdempotencyHeader) + " reused for another message: send each message under a key of its own");
      return;
    case Deliveries::Seen::forgotten:
      if (!request) break;
      send_json(res, kAnswerGone,
                mcp::jsonrpc::error_response(request->id, mcp::jsonrpc::kInternalError,
                                             "this request was handled when first delivered; its answer is no longer "
                                             "kept, and it is not handled again"));
      return;
    case Deliveries::Seen::first:
    case Deliveries::Seen::pending:  // the session ended or the server stopped while it waited
    case Deliveries::Seen::answered:
      if (!request) break;
      if (earlier) {
        answer(res, *earlier, event_stream);
        return;
      }
      send_json(res, kAnswerLost,
                mcp::jsonrpc::error_response(request->id, mcp::jsonrpc::kInternalError,
                                             "the server stopped, or the session ended, after it took this request "
                                             "and before its answer: it may have been decided"));
      return;
  }
  res.status = 202;  // a notification or response, handled once already
}

void HttpTransport::handle_delete(const httplib::Request& req, httplib::Response& res) {
  if (!req.has_header(kSessionHeader)) {
    refuse(res, 400, std::string("missing ") + kSessionHeader);
    return;
  }
  auto session = find_session(req.get_header_value(kSessionHeader));
  if (!session) {
    refuse(res, 404, "unknown session");
    return;
  }
  close_session(session, "ended by the client");
  res.status = 200;
}

}  // namespace effectfence::shared
