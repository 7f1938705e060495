#include "mcp/client.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "mcp/jsonrpc.h"
#include "mcp/protocol_era.h"
#include "mcp/raw_json.h"

namespace effectfence::mcp {
namespace {

constexpr size_t kMaxToolPages = 1000;

std::string shorten(std::string text, size_t limit = 200) {
  if (text.size() > limit) {
    text.resize(limit);
    text += "...";
  }
  return text;
}

ClientReply closed_reply(std::string why) {
  ClientReply reply;
  reply.kind = ClientReply::Kind::closed;
  reply.why = std::move(why);
  return reply;
}

ClientReply unreadable_reply(std::string why) {
  ClientReply reply;
  reply.kind = ClientReply::Kind::unreadable;
  reply.why = std::move(why);
  return reply;
}

// params with _meta.progressToken set to token. A raw_json params keeps
// its text but for that member (in place, or added last).
// params with _meta[key] set to value; a raw node stays raw, edited in place.
Json with_meta_member(Json params, const std::string& key, const Json& value) {
  if (is_raw_json(params) && is_object_text(raw_json_text(params))) {
    const std::string text = raw_json_text(params);
    const auto meta = member_text(text, "_meta");
    const std::string value_text = jsonrpc::serialize(value);
    const std::string new_meta = meta && is_object_text(*meta)
                                     ? with_member_text(*meta, key, value_text)
                                     : "{" + jsonrpc::serialize(Json(key)) + ":" + value_text + "}";
    return raw_json(with_member_text(text, "_meta", new_meta));
  }
  if (!params.is_object()) params = Json::object();
  if (!params["_meta"].is_object()) params["_meta"] = Json::object();
  params["_meta"][key] = value;
  return params;
}

Json with_progress_token(Json params, const Json& token) { return with_meta_member(std::move(params), "progressToken", token); }

}  // namespace

std::optional<ClientReply> McpClient::Request::wait_for(std::chrono::milliseconds timeout) {
  MutexLock lock(&mutex_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!reply_.has_value() && !woken_) {
    if (!done_.WaitUntil(&mutex_, deadline)) break;
  }
  woken_ = false;
  return reply_;
}

void McpClient::Request::wake() {
  MutexLock lock(&mutex_);
  woken_ = true;
  done_.NotifyAll();
}

void McpClient::Request::complete(ClientReply reply) {
  MutexLock lock(&mutex_);
  if (reply_) return;
  reply_ = std::move(reply);
  done_.NotifyAll();
}

namespace {

std::array<int, 2> make_stop_pipe() {
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) return {-1, -1};
  return {ends[0], ends[1]};
}

}  // namespace

McpClient::McpClient(int in_fd, int out_fd, Logger& log, Handlers handlers, size_t max_message_bytes,
                     int server_exit_fd)
    : in_fd_(in_fd),
      server_exit_fd_(server_exit_fd),
      log_(log),
      handlers_(std::move(handlers)),
      max_message_bytes_(max_message_bytes),
      stop_pipe_(make_stop_pipe()),
      writer_(out_fd, stop_pipe_[0]),
      answers_(std::make_shared<Answers>()) {
  answers_->client = this;
  if (stop_pipe_[0] < 0) {
    log_.error("cannot create a pipe to stop the child's reader; it stops at the child's end of output");
  } else {
    // Our end of the server's input: writes wait in poll, where closing stops them.
    const int flags = ::fcntl(out_fd, F_GETFL);
    if (flags >= 0) (void)::fcntl(out_fd, F_SETFL, flags | O_NONBLOCK);
  }
  writer_thread_ = std::thread([this] { write_queued(); });
  reader_ = std::thread([this] { read_loop(); });
}

McpClient::~McpClient() {
  {
    // Waits for an answer being queued; later ones are dropped.
    MutexLock lock(&answers_->mutex);
    answers_->client = nullptr;
  }
  {
    MutexLock lock(&outbox_mutex_);
    outbox_stopping_ = true;  // what is still queued is dropped: the server is going away
  }
  // After the flag: a write this breaks must not be taken for the server's doing.
  if (stop_pipe_[1] >= 0) (void)!::write(stop_pipe_[1], "x", 1);
  outbox_ready_.NotifyAll();
  writer_thread_.join();
  for (Outgoing& dropped : outbox_) {
    if (dropped.written) dropped.written->set_value(false);
  }
  if (reader_.get_id() == std::this_thread::get_id()) {
    reader_.detach();  // destroyed from our own callback: cannot join ourselves
  } else if (reader_.joinable()) {
    reader_.join();
  }
  close_connection("the client was closed", /*report=*/false);
  for (int fd : stop_pipe_) {
    if (fd >= 0) ::close(fd);
  }
}

bool McpClient::post(const Json& message) {
  if (closed()) return false;
  Outgoing out{jsonrpc::serialize(message), nullptr};
  {
    MutexLock lock(&outbox_mutex_);
    if (outbox_stopping_ || outbox_failed_) return false;
    outbox_.push_back(std::move(out));
  }
  outbox_ready_.NotifyOne();
  return true;
}

bool McpClient::write(const Json& message) {
  Outgoing out{jsonrpc::serialize(message), std::make_shared<std::promise<bool>>()};
  std::future<bool> written = out.written->get_future();
  {
    MutexLock lock(&outbox_mutex_);
    if (outbox_stopping_ || outbox_failed_) return false;
    outbox_.push_back(std::move(out));
  }
  outbox_ready_.NotifyOne();
  return written.get();
}

void McpClient::write_queued() {
  for (;;) {
    Outgoing out;
    {
      MutexLock lock(&outbox_mutex_);
      while (!outbox_stopping_ && outbox_.empty()) outbox_ready_.Wait(&outbox_mutex_);
      if (outbox_stopping_) return;
      out = std::move(outbox_.front());
      outbox_.pop_front();
    }
    const bool ok = writer_.write_line(out.line);
    if (out.written) out.written->set_value(ok);
    if (!ok) {
      // What was queued behind it was never sent, and nothing queued from
      // now on will be: their senders learn so now, not never.
      std::deque<Outgoing> unsent;
      {
        MutexLock lock(&outbox_mutex_);
        if (outbox_stopping_) return;  // we broke it, to stop; the destructor fails the rest
        outbox_failed_ = true;
        unsent.swap(outbox_);
      }
      for (Outgoing& dropped : unsent) {
        if (dropped.written) dropped.written->set_value(false);
      }
      // It reads no more requests, whatever it still writes: as good as gone.
      log_.debug("could not write to the server: its input is closed");
      close_connection("the server closed its input (it reads no more requests)");
      return;
    }
  }
}

void McpClient::read_loop() {
  FdLineReader reader(in_fd_, stop_pipe_[0], max_message_bytes_, server_exit_fd_);
  Line line;
  for (;;) {
    const ReadEvent event = reader.next(&line);
    if (event == ReadEvent::stopped) return;  // the destructor closes the connection
    if (event == ReadEvent::eof) {
      close_connection(reader.writer_exited()
                           ? "the server exited (a process it started still holds its output open)"
                           : "the server closed its output (it exited or crashed)");
      return;
    }
    try {
      handle_line(line);
    } catch (const std::exception& e) {
      log_.error(std::string("internal error while reading from the server: ") + e.what());
    }
  }
}

void McpClient::handle_line(const Line& line) {
  if (line.too_long) {
    const Json id = jsonrpc::oversized_response_id(line.text, line.tail).value_or(Json());
    log_.error("the server sent a message longer than " + std::to_string(max_message_bytes_) +
               " bytes (id " + id.dump() + "); it was skipped");
    if (!id.is_null()) {
      handle_response(id, unreadable_reply("the server's answer was longer than " +
                                           std::to_string(max_message_bytes_) + " bytes"));
    }
    return;
  }
  if (line.text.find_first_not_of(" \t\r") == std::string::npos) return;
  // A server's results may carry 64-bit ids: kept, and forwarded exactly.
  jsonrpc::Message message = jsonrpc::classify(line.text, WideIntegers::keep);
  if (auto* response = std::get_if<jsonrpc::Response>(&message)) {
    if (response->error) {
      ClientReply reply;
      reply.kind = ClientReply::Kind::error;
      reply.error = rpc_error_from(*response->error);
      handle_response(response->id, std::move(reply));
    } else if (!response->result->is_object()) {
      handle_response(response->id, unreadable_reply("the server answered with a result that is not an object: " +
                                                     shorten(jsonrpc::serialize(*response->result))));
    } else {
      ClientReply reply;
      reply.kind = ClientReply::Kind::result;
      reply.result = std::move(*response->result);
      reply.sent_result = sent_member(line.text, "result");
      handle_response(response->id, std::move(reply));
    }
  } else if (auto* request = std::get_if<jsonrpc::Request>(&message)) {
    handle_request(request->id, request->method, request->params, sent_member(line.text, "params"));
  } else if (auto* note = std::get_if<jsonrpc::Notification>(&message)) {
    handle_notification(note->method, note->params, sent_member(line.text, "params"));
  } else {
    const auto& invalid = std::get<jsonrpc::Invalid>(message);
    log_.warn("the server wrote something that is not a JSON-RPC message (" + invalid.message +
              "): " + shorten(line.text));
    // An answer we cannot parse unambiguously must not pass for a result,
    // nor leave its request waiting: the id is read from what is readable.
    // A whole document (only its envelope is wrong) that is no request is
    // taken for a broken answer; of damaged text, only what says so.
    const bool whole = invalid.code == jsonrpc::kInvalidRequest;
    const Json id = whole ? jsonrpc::recover_answer_id(line.text) : jsonrpc::recover_response_id(line.text);
    if (!id.is_null()) handle_response(id, unreadable_reply(invalid.message));
  }
}

void McpClient::handle_response(const Json& id, ClientReply reply) {
  std::shared_ptr<Request> request = take_pending(id);
  if (!request) {
    log_.warn("the server answered id " + id.dump() +
              ", which is not a request in flight (never sent, already answered or abandoned); dropped");
    return;
  }
  if (reply.kind == ClientReply::Kind::unreadable) {
    log_.error("the server's answer to " + id.dump() + " is unreadable: " + reply.why);
  }
  request->complete(std::move(reply));
}

void McpClient::handle_request(const Json& id, const std::string& method, const Json& params,
                               const Json& sent_params) {
  if (method == "ping") {
    post(jsonrpc::result_response(id, Json::object()));
    return;
  }
  if (handlers_.on_request) {
    auto answered = std::make_shared<std::atomic<bool>>(false);
    auto respond = [answers = answers_, answered, id, method](Reply reply) {
      if (answered->exchange(true)) return;
      const Json response = response_for(id, std::move(reply));
      MutexLock lock(&answers->mutex);
      if (!answers->client) return;  // the connection is gone; so is the request
      if (!answers->client->post(response)) {
        answers->client->log_.debug("could not answer the server's " + method + ": the connection has ended");
      }
    };
    try {
      handlers_.on_request(id, method, params, sent_params, respond);
    } catch (const std::exception& e) {
      log_.error("handling the server's " + method + " failed: " + e.what());
      respond(Reply::failure(jsonrpc::kInternalError, "internal error while handling " + method));
    }
    return;
  }
  log_.info("the server asked for " + method + ", which this client does not offer; answered -32601");
  post(jsonrpc::error_response(id, jsonrpc::kMethodNotFound,
                                "method not found: this client offers no " + method));
}

void McpClient::handle_notification(const std::string& method, const Json& params, const Json& sent_params) {
  if (method == "notifications/progress") {
    const Json token = params.value("progressToken", Json());
    ProgressSink sink;
    {
      MutexLock lock(&mutex_);
      if (auto it = pending_.find(token.dump()); it != pending_.end()) sink = it->second->on_progress_;
    }
    if (sink) {
      sink(params, sent_params);
      return;
    }
    log_.debug("progress for token " + token.dump() + ", which no request in flight asked for; dropped");
    return;
  }
  if (handlers_.on_notification) handlers_.on_notification(method, params, sent_params);
}

std::shared_ptr<McpClient::Request> McpClient::take_pending(const Json& id) {
  MutexLock lock(&mutex_);
  auto it = pending_.find(id.dump());
  if (it == pending_.end()) return nullptr;
  std::shared_ptr<Request> request = std::move(it->second);
  pending_.erase(it);
  return request;
}

void McpClient::set_envelope(Json meta) {
  MutexLock lock(&mutex_);
  envelope_ = std::move(meta);
}

bool McpClient::stateless() const {
  MutexLock lock(&mutex_);
  return envelope_.is_object();
}

std::shared_ptr<McpClient::Request> McpClient::send(const std::string& method, Json params, ProgressSink on_progress) {
  Json envelope;
  std::shared_ptr<Request> request;
  {
    MutexLock lock(&mutex_);
    request.reset(new Request(Json(next_id_++)));
    if (closed_) {
      request->delivered_ = false;
      request->complete(closed_reply(closed_why_));
      return request;
    }
    request->on_progress_ = std::move(on_progress);
    pending_[request->id().dump()] = request;
    envelope = envelope_;
  }
  if (request->on_progress_) params = with_progress_token(std::move(params), request->id());
  if (envelope.is_object()) {
    for (const auto& [key, value] : envelope.items()) params = with_meta_member(std::move(params), key, value);
  }
  Json message = jsonrpc::request(request->id(), method, std::move(params));
  if (message["params"].is_null()) message.erase("params");  // none given: none added
  if (!write(message)) {
    request->delivered_ = false;
    if (take_pending(request->id())) request->complete(closed_reply("could not write to the server: its input is closed"));
  }
  return request;
}

void McpClient::cancel(const Request& request, const std::string& reason) {
  if (!notify("notifications/cancelled", Json{{"requestId", request.id()}, {"reason", reason}})) {
    log_.debug("could not tell the server to cancel " + request.id().dump() + ": its input is closed");
  }
}

void McpClient::abandon(const Request& request) { take_pending(request.id()); }

bool McpClient::notify(const std::string& method, const Json& params) {
  return post(jsonrpc::notification(method, params));
}

ClientReply McpClient::call(const std::string& method, Json params, std::chrono::milliseconds timeout) {
  std::shared_ptr<Request> request = send(method, std::move(params));
  if (auto reply = request->wait_for(timeout)) return *reply;
  abandon(*request);
  return closed_reply(method + " got no answer within " + std::to_string(timeout.count()) + " ms");
}

bool McpClient::closed() const {
  MutexLock lock(&mutex_);
  return closed_;
}

void McpClient::give_up(const std::string& why) { close_connection(why, /*report=*/false); }

void McpClient::close_connection(const std::string& why, bool report) {
  std::map<std::string, std::shared_ptr<Request>> pending;
  {
    MutexLock lock(&mutex_);
    if (closed_) return;
    closed_ = true;
    closed_why_ = why;
    pending.swap(pending_);
  }
  for (auto& [key, request] : pending) request->complete(closed_reply(why));
  if (report && handlers_.on_closed) handlers_.on_closed(why);
}

StatusOr<Json> initialize_client(McpClient& client, const Json& client_info, std::chrono::milliseconds timeout,
                                 const ClientOffer& offer) {
  const Json params = {{"protocolVersion", offer.protocol_version.empty() ? std::string(kSupportedProtocolVersions[0])
                                                                          : offer.protocol_version},
                       {"capabilities", offer.capabilities},
                       {"clientInfo", client_info}};
  const ClientReply reply = client.call("initialize", params, timeout);
  if (reply.kind != ClientReply::Kind::result) {
    return Status::Error("initialize failed: " + describe_reply(reply));
  }
  const Json& result = reply.result;
  const auto version = result.find("protocolVersion");
  if (version == result.end() || !version->is_string()) {
    return Status::Error("initialize failed: the server's answer has no protocolVersion: " +
                         shorten(jsonrpc::serialize(result)));
  }
  if (negotiate_protocol_version(version->get<std::string>()) != version->get<std::string>()) {
    return Status::Error("the server speaks MCP " + version->get<std::string>() + ", which effectfence does not");
  }
  const auto capabilities = result.find("capabilities");
  if (capabilities == result.end() || !capabilities->is_object()) {
    return Status::Error("initialize failed: the server's answer has no capabilities object");
  }
  if (!client.notify("notifications/initialized", Json::object())) {
    return Status::Error("the server closed its input right after initialize");
  }
  return result;
}

StatusOr<Json> discover_client(McpClient& client, const Json& client_info, std::chrono::milliseconds timeout,
                               const ClientOffer& offer) {
  const std::string version = kModernProtocolVersions[0];
  client.set_envelope(Json{{kProtocolVersionMetaKey, version},
                           {kClientInfoMetaKey, client_info},
                           {kClientCapabilitiesMetaKey, offer.capabilities}});
  const ClientReply reply = client.call("server/discover", Json::object(), timeout);
  const auto refuse = [&](const std::string& why) -> StatusOr<Json> {
    client.set_envelope(nullptr);
    return Status::Error(why);
  };
  if (reply.kind != ClientReply::Kind::result) return refuse("server/discover failed: " + describe_reply(reply));
  const Json& result = reply.result;
  const auto versions = result.find("supportedVersions");
  if (versions == result.end() || !versions->is_array()) {
    return refuse("server/discover answered without supportedVersions: " + shorten(jsonrpc::serialize(result)));
  }
  if (std::find(versions->begin(), versions->end(), Json(version)) == versions->end()) {
    return refuse("the server speaks MCP " + versions->dump() + ", none of which effectfence speaks");
  }
  const auto capabilities = result.find("capabilities");
  if (capabilities == result.end() || !capabilities->is_object()) {
    return refuse("server/discover answered without a capabilities object");
  }
  Json info = {{"protocolVersion", version}, {"capabilities", *capabilities}};
  // The server names itself in _meta (2026-07-28), or as initialize did.
  const Json meta = result.value("_meta", Json::object());
  if (meta.is_object() && meta.contains(kServerInfoMetaKey) && meta[kServerInfoMetaKey].is_object()) {
    info["serverInfo"] = meta[kServerInfoMetaKey];
  } else if (result.contains("serverInfo") && result["serverInfo"].is_object()) {
    info["serverInfo"] = result["serverInfo"];
  } else {
    info["serverInfo"] = Json{{"name", "unnamed"}, {"version", "0"}};
  }
  if (result.contains("instructions") && result["instructions"].is_string()) info["instructions"] = result["instructions"];
  return info;
}

StatusOr<std::vector<Json>> list_all_tools(McpClient& client, std::chrono::milliseconds timeout,
                                           std::vector<Json>* sent_tools) {
  std::vector<Json> tools;
  std::set<std::string> names;
  std::set<std::string> cursors;
  Json params = Json::object();
  for (size_t page = 0; page < kMaxToolPages; ++page) {
    const ClientReply reply = client.call("tools/list", params, timeout);
    if (reply.kind != ClientReply::Kind::result) {
      return Status::Error("tools/list failed: " + describe_reply(reply));
    }
    const auto listed = reply.result.find("tools");
    if (listed == reply.result.end() || !listed->is_array()) {
      return Status::Error("tools/list answered without a \"tools\" array: " +
                           shorten(jsonrpc::serialize(reply.result)));
    }
    // The entries as written, in the order parsed (both read one array).
    const std::string page_text = reply.sent_result.is_null() ? std::string() : raw_json_text(reply.sent_result);
    const std::vector<std::string_view> entries =
        page_text.empty() ? std::vector<std::string_view>()
                          : element_texts(member_text(page_text, "tools").value_or(""));
    size_t index = 0;
    for (const Json& tool : *listed) {
      if (!tool.is_object() || !tool.contains("name") || !tool["name"].is_string()) {
        return Status::Error("tools/list has an entry without a name: " + shorten(jsonrpc::serialize(tool)));
      }
      if (!names.insert(tool["name"].get<std::string>()).second) {
        return Status::Error("tools/list names the tool \"" + tool["name"].get<std::string>() + "\" twice");
      }
      tools.push_back(tool);
      if (sent_tools) {
        sent_tools->push_back(index < entries.size() ? raw_json(entries[index]) : tool);
      }
      ++index;
    }
    const auto next = reply.result.find("nextCursor");
    if (next == reply.result.end() || next->is_null()) return tools;
    if (!next->is_string()) {
      return Status::Error("tools/list answered with a nextCursor that is not a string");
    }
    if (!cursors.insert(next->get<std::string>()).second) {
      return Status::Error("tools/list repeats the cursor \"" + shorten(next->get<std::string>()) +
                           "\"; the listing would not end");
    }
    params = Json{{"cursor", *next}};
  }
  return Status::Error("tools/list did not end after " + std::to_string(kMaxToolPages) + " pages");
}

std::string describe_reply(const ClientReply& reply) {
  switch (reply.kind) {
    case ClientReply::Kind::result: return "a result";
    case ClientReply::Kind::error:
      return "error " + std::to_string(reply.error.code) + ": " + reply.error.message;
    case ClientReply::Kind::closed: return "no answer: " + reply.why;
    case ClientReply::Kind::unreadable: return "an unreadable answer: " + reply.why;
  }
  return "?";
}

}  // namespace effectfence::mcp
