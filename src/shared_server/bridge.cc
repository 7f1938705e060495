#include "shared_server/bridge.h"

#include <httplib.h>

#include <cctype>
#include <chrono>
#include <sstream>
#include <variant>

#include "core/random_token.h"
#include "mcp/jsonrpc.h"
#include "mcp/protocol_era.h"
#include "shared_server/http_transport.h"

namespace effectfence::shared {
namespace {

constexpr int kServerLost = -32603;

std::vector<std::string> event_stream_messages(const std::string& body) {
  std::vector<std::string> messages;
  std::istringstream in(body);
  std::string line, data;
  auto flush = [&] {
    if (!data.empty()) messages.push_back(data);
    data.clear();
  };
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) {
      flush();
    } else if (line.compare(0, 5, "data:") == 0) {
      std::string part = line.substr(5);
      if (!part.empty() && part[0] == ' ') part.erase(0, 1);
      data += (data.empty() ? "" : "\n") + part;
    }
  }
  flush();
  return messages;
}

httplib::Client client_for(const Endpoint& endpoint) {
  httplib::Client client(endpoint.host, endpoint.port);
  client.set_connection_timeout(2, 0);
  client.set_read_timeout(600, 0);  // a fence call is bounded by the ledger's busy timeout, far below this
  client.set_write_timeout(10, 0);
  client.set_keep_alive(false);
  return client;
}

httplib::Headers auth_headers(const Endpoint& endpoint) {
  return {{"Authorization", "Bearer " + endpoint.token}, {"Accept", "application/json, text/event-stream"}};
}

bool is_tool_call(const std::string& line, Json* id, bool* gets_no_answer) {
  const mcp::jsonrpc::Message message = mcp::jsonrpc::classify(line);
  // A notification, a response, or a malformed one of those: answered by
  // nobody. A malformed request is answered (to its id if it can be read).
  const auto* invalid = std::get_if<mcp::jsonrpc::Invalid>(&message);
  *gets_no_answer = std::holds_alternative<mcp::jsonrpc::Notification>(message) ||
                    std::holds_alternative<mcp::jsonrpc::Response>(message) || (invalid && !invalid->answer);
  const auto* request = std::get_if<mcp::jsonrpc::Request>(&message);
  if (!request) return false;
  *id = request->id;
  return request->method == "tools/call";
}

// Returns true iff one of the exchange's messages is the answer to id.
bool answers(const HttpExchange& exchange, const Json& id) {
  for (const std::string& m : exchange.messages) {
    const Json message = Json::parse(m, nullptr, false);
    if (message.is_object() && message.contains("id") && message["id"] == id) return true;
  }
  return false;
}

std::string error_message_of(const HttpExchange& exchange) {
  for (const std::string& m : exchange.messages) {
    const Json message = Json::parse(m, nullptr, false);
    if (message.is_object() && message.contains("error") && message["error"].is_object()) {
      return message["error"].value("message", "no message");
    }
  }
  return "no message";
}

}  // namespace

std::optional<Endpoint> Endpoint::parse(const std::string& url, const std::string& token) {
  const std::string scheme = "http://";
  if (url.compare(0, scheme.size(), scheme) != 0) return std::nullopt;
  std::string rest = url.substr(scheme.size());
  Endpoint e;
  e.url = url;
  e.token = token;
  const auto slash = rest.find('/');
  e.path = slash == std::string::npos ? "/" : rest.substr(slash);
  std::string authority = rest.substr(0, slash);
  std::string port;
  if (!authority.empty() && authority[0] == '[') {
    const auto close = authority.find(']');
    if (close == std::string::npos || close + 1 >= authority.size() || authority[close + 1] != ':') return std::nullopt;
    e.host = authority.substr(1, close - 1);
    port = authority.substr(close + 2);
  } else {
    const auto colon = authority.rfind(':');
    if (colon == std::string::npos) return std::nullopt;
    e.host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (e.host.empty() || port.empty() || port.size() > 5) return std::nullopt;
  for (char c : port) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  e.port = std::stoi(port);
  if (e.port <= 0 || e.port > 65535) return std::nullopt;
  return e;
}

void PostAbort::fire() {
  MutexLock lock(&mutex_);
  fired_ = true;
  if (client_ != nullptr) client_->stop();  // shuts the socket of the request in flight
}

bool PostAbort::fired() const {
  MutexLock lock(&mutex_);
  return fired_;
}

void PostAbort::arm(httplib::Client* client) {
  MutexLock lock(&mutex_);
  client_ = client;
}

void PostAbort::disarm() {
  MutexLock lock(&mutex_);
  client_ = nullptr;
}

HttpExchange post_message(const Endpoint& endpoint, const std::string& session, const std::string& protocol_version,
                          const std::string& body, const std::string& idempotency_key, PostAbort* abort,
                          const mcp::HttpHeaders& headers) {
  HttpExchange exchange;
  try {
    httplib::Client client = client_for(endpoint);
    struct Armed {
      PostAbort* abort;
      ~Armed() {
        if (abort != nullptr) abort->disarm();
      }
    } armed{abort};
    if (abort != nullptr) {
      abort->arm(&client);
      if (abort->fired()) {
        exchange.transport_error = "cancelled by the client before it was sent";
        exchange.maybe_received = false;
        return exchange;
      }
    }
    httplib::Headers sent = auth_headers(endpoint);
    if (!session.empty()) sent.emplace("Mcp-Session-Id", session);
    if (!idempotency_key.empty()) sent.emplace(kIdempotencyHeader, idempotency_key);
    if (!protocol_version.empty()) sent.emplace("MCP-Protocol-Version", protocol_version);
    for (const auto& [name, value] : headers) sent.emplace(name, value);
    auto res = client.Post(endpoint.path, sent, body, "application/json");
    if (!res) {
      exchange.transport_error = httplib::to_string(res.error());
      exchange.maybe_received = res.error() != httplib::Error::Connection;
      return exchange;
    }
    exchange.delivered = true;
    exchange.status = res->status;
    exchange.session = res->get_header_value("Mcp-Session-Id");
    if (res->body.empty()) return exchange;
    if (res->get_header_value("Content-Type").find("text/event-stream") != std::string::npos) {
      exchange.messages = event_stream_messages(res->body);
    } else {
      exchange.messages.push_back(res->body);
    }
  } catch (const std::exception& e) {
    exchange.delivered = false;
    exchange.transport_error = e.what();
  }
  return exchange;
}

int end_session(const Endpoint& endpoint, const std::string& session) {
  try {
    httplib::Client client = client_for(endpoint);
    httplib::Headers headers = auth_headers(endpoint);
    headers.emplace("Mcp-Session-Id", session);
    auto res = client.Delete(endpoint.path, headers);
    return res ? res->status : 0;
  } catch (const std::exception&) {
    return 0;
  }
}

Status probe_server(const Endpoint& endpoint) {
  try {
    httplib::Client client = client_for(endpoint);
    client.set_read_timeout(2, 0);
    auto res = client.Get(endpoint.path, auth_headers(endpoint));
    if (!res) return Status::Error("no answer from " + endpoint.url + ": " + httplib::to_string(res.error()));
    if (res->status != 405) {
      return Status::Error(endpoint.url + " answered HTTP " + std::to_string(res->status) +
                           ", not as an effectfence server");
    }
    return Status::Ok();
  } catch (const std::exception& e) {
    return Status::Error(e.what());
  }
}

Bridge::Bridge(Endpoint endpoint, Reconnect reconnect, mcp::LineWriter& out, mcp::Logger& log, BridgeOptions options)
    : out_(out), log_(log), reconnect_(std::move(reconnect)), options_(options), pool_(128, 512) {
  state_.endpoint = std::move(endpoint);
  keepalive_thread_ = std::thread([this] { keepalive(); });
}

Bridge::~Bridge() {
  {
    MutexLock lock(&keepalive_mutex_);
    stopping_ = true;
  }
  keepalive_wake_.NotifyAll();
  keepalive_thread_.join();
  pool_.wait_idle();
}

Bridge::State Bridge::snapshot() const {
  MutexLock lock(&mutex_);
  return state_;
}

HttpExchange Bridge::post_while_alive(const Endpoint& endpoint, const std::string& session,
                                      const std::string& protocol_version, const std::string& line,
                                      PostAbort* abort, const mcp::HttpHeaders& headers) {
  const std::string key = random_token_hex(16);
  std::optional<std::chrono::steady_clock::time_point> first_failure;
  bool maybe_received = false;
  auto pause = std::chrono::milliseconds(10);
  for (int attempt = 0;; ++attempt) {
    HttpExchange exchange = post_message(endpoint, session, protocol_version, line, key, abort, headers);
    maybe_received = maybe_received || exchange.maybe_received;
    exchange.maybe_received = maybe_received;
    if (exchange.delivered || (abort != nullptr && abort->fired())) return exchange;
    // A busy server drops a connection now and then (a full accept queue,
    // a client descheduled past the server's read timeout): not a death.
    if (!options_.server_alive || !options_.server_alive(endpoint)) return exchange;
    if (!first_failure) first_failure = std::chrono::steady_clock::now();
    if (std::chrono::steady_clock::now() - *first_failure >= std::chrono::milliseconds(options_.unresponsive_ms)) {
      exchange.transport_error += "; its process runs, but nothing it was sent has been answered for " +
                                  std::to_string(options_.unresponsive_ms) + " ms";
      return exchange;
    }
    if (attempt == 0) {
      log_.info("an exchange with the shared server at " + endpoint.url + " failed (" + exchange.transport_error +
                "); the server still runs, so the message is sent again");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
}

void Bridge::write_error(const Json& id, const std::string& message, const std::string& reason) {
  out_.write_line(mcp::jsonrpc::serialize(mcp::jsonrpc::error_response(id, kServerLost, message, Json{{"reason", reason}})));
}

mcp::ReadEvent Bridge::run(mcp::FdLineReader& in) {
  mcp::Line line;
  mcp::ReadEvent event;
  while ((event = in.next(&line)) == mcp::ReadEvent::line) {
    if (line.too_long) {
      // A response (to a request the server relayed) is never answered: its
      // id is the server's, and an error under it could pass for the answer
      // to one of the client's own requests.
      if (mcp::jsonrpc::oversized_response_id(line.text, line.tail)) {
        log_.warn("dropped a response from the client larger than " + std::to_string(mcp::kMaxMessageBytes) +
                  " bytes");
        continue;
      }
      const mcp::jsonrpc::Invalid invalid = mcp::jsonrpc::oversized(line.text, line.tail, mcp::kMaxMessageBytes);
      if (!invalid.answer) {
        log_.warn("dropped a notification from the client: " + invalid.message);
        continue;
      }
      out_.write_line(mcp::jsonrpc::serialize(mcp::jsonrpc::error_response(invalid.id, invalid.code, invalid.message)));
      continue;
    }
    const mcp::jsonrpc::Message message = mcp::jsonrpc::classify(line.text);
    if (const auto* request = std::get_if<mcp::jsonrpc::Request>(&message); request && request->method == "initialize") {
      // A client's session is initialized once, as on a server of its own;
      // a second handshake would open another session and leave this one.
      if (const std::string negotiated = snapshot().protocol_version; !negotiated.empty()) {
        out_.write_line(mcp::jsonrpc::serialize(mcp::jsonrpc::error_response(
            request->id, mcp::jsonrpc::kInvalidRequest, mcp::already_initialized_message(negotiated))));
        continue;
      }
      open_session(line.text);  // in order: the client waits for it before anything else
      continue;
    }
    if (!alone_server_.load() && snapshot().session.empty() && !std::holds_alternative<mcp::jsonrpc::Response>(message)) {
      const Json document = Json::parse(line.text, nullptr, false);
      if (mcp::is_stateless_message(document)) {
        // A stateless client's requests open no session, so nothing would
        // tell the shared server that it has a client: a session of the
        // bridge's own (kept alive by the pings, ended when the client
        // leaves) does, as a 2025 client's session would.
        const Json meta = document.contains("params") && document["params"].is_object()
                              ? document["params"].value("_meta", Json::object())
                              : Json::object();
        Json info = meta.is_object() ? meta.value(mcp::kClientInfoMetaKey, Json::object()) : Json::object();
        if (!info.is_object() || !info.contains("name")) info = Json{{"name", "stateless client"}, {"version", ""}};
        open_session(mcp::jsonrpc::serialize(mcp::jsonrpc::request(
                         "effectfence-bridge-presence", "initialize",
                         {{"protocolVersion", mcp::kSupportedProtocolVersions[0]},
                          {"capabilities", Json::object()},
                          {"clientInfo", info}})),
                     false);
      }
    }
    if (const auto* request = std::get_if<mcp::jsonrpc::Request>(&message);
        request && request->method == "ping" && !alone_server_.load() && snapshot().session.empty()) {
      // Before initialize there is no session to carry it, and a ping is
      // allowed then: answered here, as a server of its own would.
      out_.write_line(mcp::jsonrpc::serialize(mcp::jsonrpc::result_response(request->id, Json::object())));
      continue;
    }
    if (const auto* note = std::get_if<mcp::jsonrpc::Notification>(&message);
        note && note->method == "notifications/initialized") {
      MutexLock lock(&mutex_);
      initialized_line_ = line.text;
    }
    pool_.submit([this, text = line.text] { relay(text); });
  }
  pool_.wait_idle();
  const State state = snapshot();
  if (!state.session.empty() && !alone_server_.load()) {
    const int status = end_session(state.endpoint, state.session);
    log_.debug("ended session at " + state.endpoint.url + ": HTTP " + std::to_string(status));
  }
  return event;
}

void Bridge::open_session(const std::string& initialize_line, bool answer_client) {
  Json id;
  const mcp::jsonrpc::Message message = mcp::jsonrpc::classify(initialize_line);
  if (const auto* request = std::get_if<mcp::jsonrpc::Request>(&message)) id = request->id;
  // Kept for recoveries once a server (or this process's own) answered it;
  // until then a recovery only finds a server, and this opens the session.
  auto keep_initialize = [&] {
    MutexLock lock(&mutex_);
    initialize_line_ = initialize_line;
  };
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (mcp::Server* alone = alone_server_.load()) {
      if (!answer_client) return;  // served alone: nothing to keep alive
      keep_initialize();
      alone->handle_line(initialize_line);  // answered to the client like any call served alone
      return;
    }
    const State state = snapshot();
    HttpExchange exchange = post_while_alive(state.endpoint, "", "", initialize_line);
    if (!exchange.delivered) {
      log_.warn("the shared server at " + state.endpoint.url + " did not answer initialize: " + exchange.transport_error);
      if (attempt == 0 && recover(state.generation, true)) continue;
      if (answer_client) write_error(id, "no effectfence server is reachable: " + exchange.transport_error, "server_unreachable");
      return;
    }
    // A server that is stopping (503) or lost the session (404) never processed it.
    if ((exchange.status == 503 || exchange.status == 404) && attempt == 0 &&
        recover(state.generation, exchange.status == 503)) {
      continue;
    }
    if (exchange.status != 200 && !answers(exchange, id)) {
      const std::string why = "the shared server refused initialize with HTTP " + std::to_string(exchange.status) +
                              ": " + error_message_of(exchange);
      if (answer_client) write_error(id, why, "http_" + std::to_string(exchange.status));
      else log_.warn(why);
      return;
    }
    keep_initialize();
    for (const std::string& m : exchange.messages) {
      const Json answer = Json::parse(m, nullptr, false);
      if (answer.is_object() && answer.contains("result")) {
        MutexLock lock(&mutex_);
        state_.protocol_version = answer["result"].value("protocolVersion", "");
      }
      if (answer_client) out_.write_line(m);
    }
    MutexLock lock(&mutex_);
    state_.session = exchange.session;
    ++state_.generation;
    return;
  }
}

void Bridge::write_server_lost(const Json& id, bool recovered) {
  write_error(id,
              "the shared fence server stopped while this call was in flight, so it is unknown whether the "
              "ledger recorded it. Do not run the effect now: if this was fence_prepare, the intent is fenced "
              "as unknown once the server's death is noticed (check fence_status); if it was fence_commit, "
              "check fence_status before anything else. " +
                  std::string(recovered ? "This session goes on." : "No server is reachable now."),
              "server_lost");
}

bool Bridge::cancel_stateless(const Json& request_id) {
  std::shared_ptr<PostAbort> abort;
  {
    MutexLock lock(&stateless_mutex_);
    auto it = stateless_in_flight_.find(request_id.dump());
    if (it == stateless_in_flight_.end()) return false;
    abort = it->second;
  }
  abort->fire();
  return true;
}

void Bridge::relay(const std::string& line) {
  Json id;
  bool gets_no_answer = false;
  const bool tool_call = is_tool_call(line, &id, &gets_no_answer);
  const bool is_request = !id.is_null();
  // A stateless (2026-07-28) request is cancelled over HTTP by closing its
  // connection: the server then withdraws what its answer would have carried.
  const Json document = Json::parse(line, nullptr, false);
  const bool stateless = mcp::is_stateless_message(document);
  if (stateless && !is_request && document.value("method", std::string()) == "notifications/cancelled" &&
      document.contains("params") && document["params"].is_object() &&
      cancel_stateless(document["params"].value("requestId", Json()))) {
    log_.info("the client cancelled " + document["params"].value("requestId", Json()).dump() +
              ": its connection to the shared server is closed");
    return;
  }
  // A stateless message repeats parts of its body in headers, on every resend.
  const mcp::HttpHeaders standard_headers = stateless ? mcp::standard_request_headers(document) : mcp::HttpHeaders{};
  std::shared_ptr<PostAbort> abort;
  if (stateless && is_request) {
    abort = std::make_shared<PostAbort>();
    MutexLock lock(&stateless_mutex_);
    stateless_in_flight_[id.dump()] = abort;
  }
  struct Forget {
    Bridge* bridge;
    const std::shared_ptr<PostAbort>& abort;
    const Json& id;
    ~Forget() {
      if (!abort) return;
      MutexLock lock(&bridge->stateless_mutex_);
      auto it = bridge->stateless_in_flight_.find(id.dump());
      if (it != bridge->stateless_in_flight_.end() && it->second == abort) bridge->stateless_in_flight_.erase(it);
    }
  } forget{this, abort, id};
  // A recovery opens the new session with the client's initialize and
  // initialized; a line it sent there is not sent a second time.
  std::string replayed;
  const auto sent_by_recovery = [&] { return !replayed.empty() && line == replayed; };
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (mcp::Server* alone = alone_server_.load()) {
      alone->handle_line(line);
      return;
    }
    const State state = snapshot();
    HttpExchange exchange = post_while_alive(state.endpoint, stateless ? "" : state.session,
                                             stateless ? "" : state.protocol_version, line, abort.get(),
                                             standard_headers);
    if (abort && abort->fired()) {
      log_.info("request " + id.dump() + " was cancelled by the client; it gets no answer");
      return;
    }
    if (!exchange.delivered) {
      log_.warn("the shared server at " + state.endpoint.url + " went away: " + exchange.transport_error);
      const bool recovered = recover(state.generation, true, &replayed);
      if (tool_call && exchange.maybe_received) {
        write_server_lost(id, recovered);
        return;
      }
      if (recovered && sent_by_recovery()) return;
      if (recovered && attempt == 0) continue;
      if (is_request) write_error(id, "no effectfence server is reachable: " + exchange.transport_error, "server_unreachable");
      return;
    }
    // 404 (session unknown) and 503 (server stopping) mean it was never processed: safe to resend.
    if (exchange.status == 404 && attempt == 0 && recover(state.generation, false, &replayed)) {
      if (sent_by_recovery()) return;
      continue;
    }
    if (exchange.status == 503 && attempt == 0 && recover(state.generation, true, &replayed)) {
      if (sent_by_recovery()) return;
      continue;
    }
    // A notification or a response is never answered, not even with the
    // server's refusal of it (which names no id).
    if (gets_no_answer && exchange.status >= 300) {
      log_.warn("the shared server refused a notification or response of the client (not answered) with HTTP " +
                std::to_string(exchange.status) + ": " + error_message_of(exchange));
      return;
    }
    // Decided, and its answer lost on the way and no longer kept: never sent again.
    if (tool_call && exchange.status == kAnswerGone) {
      write_error(id,
                  "the shared fence server decided this call, but its answer was lost on the way and is no longer "
                  "kept. Do not run the effect now: check fence_status for the intent first.",
                  "answer_lost");
      return;
    }
    // Taken, perhaps decided, and not answered: never sent again.
    if (tool_call && exchange.status == kAnswerLost) {
      log_.warn("the shared server took a call and stopped before answering it: " + error_message_of(exchange));
      write_server_lost(id, true);  // the next message finds the next server, as after any stop
      return;
    }
    if (is_request && exchange.status != 200 && !answers(exchange, id)) {
      write_error(id, "the shared server refused the request with HTTP " + std::to_string(exchange.status) + ": " +
                          error_message_of(exchange), "http_" + std::to_string(exchange.status));
      return;
    }
    for (const std::string& m : exchange.messages) out_.write_line(m);
    return;
  }
}

bool Bridge::recover(uint64_t seen, bool server_lost, std::string* replayed_initialized) {
  MutexLock recovering(&recover_mutex_);
  State state;
  std::string initialize_line, initialized_line;
  {
    MutexLock lock(&mutex_);
    if (state_.generation != seen) return true;  // another thread already did
    state = state_;
    initialize_line = initialize_line_;
    initialized_line = initialized_line_;
  }
  if (server_lost) {
    StatusOr<Endpoint> endpoint = reconnect_();
    if (!endpoint.ok()) {
      const bool alone = serve_alone(endpoint.status().message());
      if (alone && replayed_initialized) *replayed_initialized = initialized_line;
      return alone;
    }
    state.endpoint = *endpoint;
  }
  if (initialize_line.empty()) {
    MutexLock lock(&mutex_);
    state_.endpoint = state.endpoint;
    ++state_.generation;
    return true;
  }
  HttpExchange opened = post_while_alive(state.endpoint, "", "", initialize_line);
  if (!opened.delivered || opened.session.empty()) {
    log_.error("could not open a session at " + state.endpoint.url + ": " +
               (opened.delivered ? "HTTP " + std::to_string(opened.status) : opened.transport_error));
    return false;
  }
  if (!initialized_line.empty()) {
    post_while_alive(state.endpoint, opened.session, state.protocol_version, initialized_line);
    if (replayed_initialized) *replayed_initialized = initialized_line;
  }
  log_.info("continuing on " + state.endpoint.url + " with a new session");
  MutexLock lock(&mutex_);
  state_.endpoint = state.endpoint;
  state_.session = opened.session;
  ++state_.generation;
  return true;
}

bool Bridge::serve_alone(const std::string& why) {
  if (!options_.serve_alone) {
    log_.error("no shared server to reconnect to: " + why);
    return false;
  }
  std::string initialize_line, initialized_line;
  {
    MutexLock lock(&mutex_);
    initialize_line = initialize_line_;
    initialized_line = initialized_line_;
    const mcp::jsonrpc::Message message = mcp::jsonrpc::classify(initialize_line);
    if (const auto* request = std::get_if<mcp::jsonrpc::Request>(&message)) suppressed_answer_ = request->id.dump();
  }
  std::unique_ptr<mcp::Server> server = options_.serve_alone([this](const std::string& line) { deliver_alone(line); });
  if (!server) {
    log_.error("no shared server to reconnect to (" + why + "), and this client cannot be served alone either");
    return false;
  }
  log_.warn("cannot use the shared server: " + why + "; serving this client alone");
  // The client initialized once; the new server hears the same handshake, and its answer is not repeated.
  if (!initialize_line.empty()) server->handle_line(initialize_line);
  if (!initialized_line.empty()) server->handle_line(initialized_line);
  alone_ = std::move(server);
  alone_server_ = alone_.get();
  MutexLock lock(&mutex_);
  ++state_.generation;
  return true;
}

void Bridge::deliver_alone(const std::string& line) {
  {
    MutexLock lock(&mutex_);
    if (!suppressed_answer_.empty()) {
      const Json message = Json::parse(line, nullptr, false);
      if (message.is_object() && message.contains("id") && message["id"].dump() == suppressed_answer_) {
        suppressed_answer_.clear();
        return;
      }
    }
  }
  out_.write_line(line);
}

void Bridge::keepalive() {
  uint64_t pings = 0;
  MutexLock lock(&keepalive_mutex_);
  for (;;) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.keepalive_ms);
    while (!stopping_) {
      if (!keepalive_wake_.WaitUntil(&keepalive_mutex_, deadline)) break;
    }
    if (stopping_) break;
    lock.Unlock();
    const State state = snapshot();
    if (!state.session.empty() && !alone_server_.load()) {
      const std::string ping = mcp::jsonrpc::serialize(
          mcp::jsonrpc::request("effectfence-bridge-keepalive-" + std::to_string(++pings), "ping", Json::object()));
      HttpExchange exchange = post_while_alive(state.endpoint, state.session, state.protocol_version, ping);
      if (!exchange.delivered) {
        log_.warn("the shared server at " + state.endpoint.url + " went away: " + exchange.transport_error);
        recover(state.generation, true);
      } else if (exchange.status == 404) {
        recover(state.generation, false);
      } else if (exchange.status == 503) {
        recover(state.generation, true);
      }
    }
    lock.Lock();
  }
}

}  // namespace effectfence::shared
