#include "mcp/server.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <variant>

#include "mcp/json_text.h"
#include "mcp/jsonrpc.h"
#include "mcp/raw_json.h"

namespace effectfence::mcp {

const char* const kSupportedProtocolVersions[4] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

std::string negotiate_protocol_version(const std::string& requested) {
  for (const char* version : kSupportedProtocolVersions) {
    if (requested == version) return requested;
  }
  return kSupportedProtocolVersions[0];
}

std::string already_initialized_message(const std::string& version) {
  return "invalid request: this session is already initialized (protocol " + version +
         "); initialize is sent once. For a new session, start a new server process";
}

std::string invalid_arguments_line(const Json& id, const Tool& tool, const std::string& why, bool modern) {
  const std::string message = "invalid arguments for " + tool.name + ": " + why +
                              "; nothing was done: fix the arguments and call again";
  if (tool.invalid_arguments) return tool_result_line(id, tool.invalid_arguments(message), modern);
  // Text only: a structuredContent would have to match the tool's outputSchema.
  Json result = {{"content", Json::array({Json{{"type", "text"}, {"text", message}}})}, {"isError", true}};
  if (modern) result["resultType"] = "complete";
  return jsonrpc::serialize(jsonrpc::result_response(id, result));
}

std::string CallContext::request_state() const {
  const auto state = retry_.find("requestState");
  return state != retry_.end() && state->is_string() ? state->get<std::string>() : std::string();
}

Json CallContext::input_responses() const {
  const auto responses = retry_.find("inputResponses");
  return responses != retry_.end() && responses->is_object() ? *responses : Json::object();
}

bool CallContext::cancelled() const {
  MutexLock lock(&mutex_);
  return cancelled_;
}

void CallContext::on_cancel(std::function<void()> fn) {
  {
    MutexLock lock(&mutex_);
    if (!cancelled_) {
      on_cancel_ = std::move(fn);
      return;
    }
  }
  if (fn) fn();
}

void CallContext::cancel() {
  std::function<void()> fn;
  {
    MutexLock lock(&mutex_);
    if (cancelled_) return;
    cancelled_ = true;
    fn = std::move(on_cancel_);
  }
  if (fn) fn();
}

ToolResult ToolResult::of_text(std::string structured_text, bool is_error) {
  ToolResult result;
  result.structured_text = std::move(structured_text);
  result.is_error = is_error;
  return result;
}

Json ToolResult::structured_json() const {
  return structured_text.empty() ? structured : Json::parse(structured_text);
}

Reply Reply::of(Json result) {
  Reply reply;
  reply.result = std::move(result);
  return reply;
}

Reply Reply::failure(int code, std::string message, Json data) {
  Reply reply;
  reply.error = RpcError{code, std::move(message), std::move(data)};
  return reply;
}

Json Tool::listing() const {
  if (!listing_entry.is_null()) return listing_entry;
  Json entry = {{"name", name}, {"description", description}, {"inputSchema", input_schema}};
  if (!title.empty()) entry["title"] = title;
  if (!output_schema.is_null()) entry["outputSchema"] = output_schema;
  if (!annotations.empty()) entry["annotations"] = annotations;
  return entry;
}

struct Server::Call {
  Json id;
  std::string key;
  std::string label;  // the tool's name or the method, for logs
  std::shared_ptr<const ToolSet> tools;  // keeps *tool alive while the list changes
  const Tool* tool = nullptr;            // null for a request passed to extensions_.on_request
  std::string method;
  Json params;     // a request passed to extensions_.on_request
  Json arguments;  // a tool call
  bool modern = false;  // a 2026-07-28 request: its result is stamped so
  std::unique_ptr<CallContext> context;
};

namespace {

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

// params[key] when it is a string, else fallback: client-supplied extras
// must not turn a valid message into an error.
std::string string_field(const Json& object, const char* key, std::string fallback) {
  if (!object.is_object()) return fallback;
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : fallback;
}

std::string shorten(std::string text, size_t limit = 300) {
  if (text.size() > limit) {
    text.resize(limit);
    text += "...";
  }
  return text;
}

}  // namespace

Json response_for(const Json& id, Reply reply) {
  if (reply.error) {
    return jsonrpc::error_response(id, reply.error->code, std::move(reply.error->message),
                                   std::move(reply.error->data));
  }
  return jsonrpc::result_response(id, std::move(reply.result));
}

RpcError rpc_error_from(const Json& error) {
  RpcError e;
  e.code = jsonrpc::kInternalError;
  if (!error.is_object()) {
    e.message = "a malformed error object: " + shorten(jsonrpc::serialize(error));
    return e;
  }
  const auto code = error.find("code");
  bool odd_code = code != error.end();
  if (code != error.end() && code->is_number_integer()) {
    // Read wide, then range-checked: cut to 32 bits, a code could pass for a
    // protocol refusal (-32602) that releases a call which may have run.
    const bool fits = code->is_number_unsigned()
                          ? code->get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int>::max())
                          : code->get<int64_t>() >= std::numeric_limits<int>::min() &&
                                code->get<int64_t>() <= std::numeric_limits<int>::max();
    if (fits) {
      e.code = static_cast<int>(code->get<int64_t>());
      odd_code = false;
    }
  }
  e.message = string_field(error, "message", "(no message)");
  if (odd_code) e.message += " (the error code " + shorten(jsonrpc::serialize(*code)) + " is not a JSON-RPC code)";
  if (auto data = error.find("data"); data != error.end()) e.data = *data;
  return e;
}

// The structured result is serialized once and used twice: as the text
// content (escaped into a string) and, verbatim, as structuredContent. The
// bytes are those jsonrpc::serialize gives the equivalent Json (keys in
// sorted order), without building that tree or serializing the result twice.
std::string tool_result_line(const Json& id, const ToolResult& result, bool modern) {
  const bool written = !result.structured_text.empty();
  const std::string serialized = written ? std::string() : jsonrpc::serialize(result.structured);
  const std::string& structured = written ? result.structured_text : serialized;
  std::string line;
  line.reserve(2 * structured.size() + 160);
  line += "{\"id\":";
  line += jsonrpc::serialize(id);
  line += ",\"jsonrpc\":\"2.0\",\"result\":{\"content\":[{\"text\":";
  append_serialized_as_string(line, structured);
  line += ",\"type\":\"text\"}],\"isError\":";
  line += result.is_error ? "true" : "false";
  if (modern) line += ",\"resultType\":\"complete\"";  // sorted between isError and structuredContent
  line += ",\"structuredContent\":";
  line += structured;
  line += "}}";
  return line;
}

Server::Server(ServerInfo info, std::vector<Tool> tools, Sink sink, Logger& log, size_t max_concurrent_calls,
               ServerExtensions extensions)
    : extensions_(std::move(extensions)),
      info_(std::move(info)),
      capabilities_(extensions_.capabilities),
      sink_(std::move(sink)),
      log_(log),
      max_concurrent_calls_(max_concurrent_calls),
      pool_(max_concurrent_calls, kQueuedPerRunningCall * max_concurrent_calls) {
  set_tools(std::move(tools));
}

Server::~Server() { drain(); }

void Server::set_tools(std::vector<Tool> tools) {
  auto set = std::make_shared<ToolSet>();
  set->tools = std::move(tools);
  for (size_t i = 0; i < set->tools.size(); ++i) {
    const Tool& tool = set->tools[i];
    set->index[tool.name] = i;
    set->input_checks.emplace_back();
    if (tool.check_arguments) set->input_checks.back().emplace(tool.input_schema);
  }
  MutexLock lock(&tools_mutex_);
  tools_ = std::move(set);
}

std::shared_ptr<const Server::ToolSet> Server::tool_set() const {
  MutexLock lock(&tools_mutex_);
  return tools_;
}

void Server::set_info(ServerInfo info, Json capabilities) {
  MutexLock lock(&info_mutex_);
  info_ = std::move(info);
  capabilities_ = std::move(capabilities);
}

void Server::send(const Json& message) {
  deliver(jsonrpc::serialize(message), [] { return std::string("a message"); });
}

bool Server::deliver(const std::string& line, const std::function<std::string()>& what) {
  try {
    sink_(line);
  } catch (const OutputClosed& e) {
    log_.warn("could not send " + what() + ": " + e.what());
    return false;
  } catch (const std::exception& e) {
    // It may have gone out in part: as far as anyone can tell, it was sent.
    log_.error("could not send " + what() + ": " + e.what());
  }
  return true;
}

Json Server::request(const std::string& method, const Json& params, ReplyHandler on_reply) {
  if (!on_reply) on_reply = [](Reply) {};
  Json sent_id;
  std::string line;
  bool send_now = false;
  std::string refused;
  {
    MutexLock lock(&requests_mutex_);
    if (!requests_closed_.empty()) {
      refused = requests_closed_;
    } else if (stateless_client_ && !initialized_) {
      refused = "the client speaks protocol revision 2026-07-28, which has no requests from server to client";
    } else {
      // Ids of our own, apart from the client's: a response is told from a
      // request by its shape, so the two sequences never meet.
      const Json id = "effectfence-" + std::to_string(next_request_id_++);
      sent_id = id;
      Json message = jsonrpc::request(id, method, params);
      if (params.is_null()) message.erase("params");  // none given (a relayed request that had none): none added
      line = jsonrpc::serialize(message);
      requests_[id.dump()] = std::move(on_reply);
      if (client_ready_) send_now = true;
      else queued_.emplace_back(id.dump(), line);
    }
  }
  if (!refused.empty()) {
    log_.info("not sending " + method + " to the client: " + refused);
    on_reply(Reply::failure(jsonrpc::kInternalError, method + " was not sent to the client: " + refused));
    return nullptr;
  }
  if (!send_now) {
    log_.debug("holding " + method + " until the client is initialized");
    return sent_id;
  }
  deliver(line, [&] { return "request " + method; });
  return sent_id;
}

void Server::cancel_request(const Json& id, const std::string& reason) {
  bool sent = false;
  {
    MutexLock lock(&requests_mutex_);
    if (requests_.erase(id.dump()) == 0) return;  // answered or failed already
    const auto queued = std::find_if(queued_.begin(), queued_.end(),
                                     [&](const auto& entry) { return entry.first == id.dump(); });
    if (queued != queued_.end()) {
      queued_.erase(queued);  // never sent: nothing to tell the client
    } else {
      sent = true;
    }
  }
  if (sent) notify("notifications/cancelled", {{"requestId", id}, {"reason", reason}});
}

size_t Server::requests_in_flight() const {
  MutexLock lock(&requests_mutex_);
  return requests_.size();
}

void Server::client_ready() {
  // Sent under the lock, so a request made meanwhile cannot overtake them.
  MutexLock lock(&requests_mutex_);
  if (client_ready_) return;
  client_ready_ = true;
  for (const auto& queued : queued_) deliver(queued.second, [] { return std::string("a queued request"); });
  queued_.clear();
}

void Server::on_response(const Json& id, const std::optional<Json>& result, const std::optional<Json>& error) {
  ReplyHandler on_reply;
  {
    MutexLock lock(&requests_mutex_);
    auto it = requests_.find(id.dump());
    if (it != requests_.end()) {
      on_reply = std::move(it->second);
      requests_.erase(it);
    }
  }
  if (!on_reply) {
    log_.warn("the client answered id " + id.dump() + ", which is no request of ours in flight; dropped");
    return;
  }
  if (!error) {
    on_reply(Reply::of(result ? *result : Json::object()));
    return;
  }
  RpcError e = rpc_error_from(*error);
  on_reply(Reply::failure(e.code, std::move(e.message), std::move(e.data)));
}

void Server::fail_requests(const std::string& why) {
  std::map<std::string, ReplyHandler> pending;
  {
    MutexLock lock(&requests_mutex_);
    if (requests_closed_.empty()) requests_closed_ = why;
    pending.swap(requests_);
    queued_.clear();
  }
  for (auto& [id, on_reply] : pending) {
    log_.info("request " + id + " to the client failed: " + why);
    try {
      on_reply(Reply::failure(jsonrpc::kInternalError, "the client did not answer: " + why));
    } catch (const std::exception& e) {
      log_.error("handling the failure of request " + id + " failed: " + e.what());
    }
  }
}

void Server::notify(const std::string& method, const Json& params) {
  if (method == "notifications/tools/list_changed") {
    std::vector<Json> wanting;
    {
      MutexLock lock(&listeners_mutex_);
      for (const auto& [key, listener] : listeners_) {
        if (listener.second) wanting.push_back(listener.first);
      }
    }
    for (const Json& listen_id : wanting) {
      Json stamped = params.is_object() ? params : Json::object();
      stamped["_meta"]["io.modelcontextprotocol/subscriptionId"] = listen_id;
      try {
        send(jsonrpc::notification(method, stamped));
      } catch (const std::exception& e) {
        log_.error("could not send notification " + method + ": " + e.what());
      }
    }
    // A 2026-07-28 client hears of changes only on its subscriptions.
    if (stateless_client_ && !initialized_) return;
  }
  try {
    send(jsonrpc::notification(method, params));
  } catch (const std::exception& e) {
    log_.error("could not send notification " + method + ": " + e.what());
  }
}

void Server::send_error(const Json& id, int code, std::string message) {
  if (log_.enabled(LogLevel::debug)) {
    log_.debug("answering " + (id.is_null() ? std::string("null") : id.dump()) + " with " + std::to_string(code) +
               ": " + shorten(message));
  }
  send(jsonrpc::error_response(id, code, std::move(message)));
}

void Server::handle_line(std::string_view line) {
  if (is_blank(line)) return;
  Json id;
  try {
    jsonrpc::Message message = jsonrpc::classify(line);
    if (auto* request = std::get_if<jsonrpc::Request>(&message)) {
      id = request->id;
      // Checked before anything can answer it, an error included: a second
      // answer to an id still in flight would be taken for the first.
      if (extensions_.keep_sent_text) sent_params_ = sent_member(line, "params");
      if (id_in_flight(request->id)) refuse_reused_id(request->id);
      else dispatch(request->id, request->method, std::move(request->params));
      if (extensions_.keep_sent_text) sent_params_ = nullptr;
    } else if (auto* note = std::get_if<jsonrpc::Notification>(&message)) {
      if (extensions_.keep_sent_text) sent_params_ = sent_member(line, "params");
      on_notification(note->method, note->params);
      if (extensions_.keep_sent_text) sent_params_ = nullptr;
    } else if (auto* invalid = std::get_if<jsonrpc::Invalid>(&message)) {
      log_.warn("refused a message: " + invalid->message + (invalid->answer ? "" : " (not answered)"));
      if (invalid->response && !invalid->id.is_null()) {
        // The request of ours it answers fails, rather than waiting for an
        // answer that came and could not be read.
        on_response(invalid->id, std::nullopt,
                    Json{{"code", jsonrpc::kInternalError},
                         {"message", "the client's answer could not be read: " + invalid->message}});
      } else if (invalid->answer) {
        answer_invalid(*invalid);
      }
    } else {
      const auto& response = std::get<jsonrpc::Response>(message);
      if (extensions_.keep_sent_text && response.result) {
        on_response(response.id, sent_member(line, "result"), response.error);
      } else {
        on_response(response.id, response.result, response.error);
      }
    }
  } catch (const std::exception& e) {
    log_.error(std::string("internal error while handling a message: ") + e.what());
    send_error(id, jsonrpc::kInternalError, std::string("internal error: ") + e.what());
  }
}

void Server::handle_oversized(std::string_view prefix, std::string_view tail) {
  // A response is never answered: it fails the request of ours it answers.
  if (const std::optional<Json> response_id = jsonrpc::oversized_response_id(prefix, tail)) {
    const Json& answered = *response_id;
    const std::string why = "the client's answer was larger than " + std::to_string(kMaxMessageBytes) + " bytes";
    if (answered.is_null()) {
      log_.warn("dropped a response without a readable id: " + why);
      return;
    }
    log_.warn("refused a response to id " + answered.dump() + ": " + why);
    on_response(answered, std::nullopt,
                Json{{"code", jsonrpc::kInternalError}, {"message", why + "; it was not read"}});
    return;
  }
  jsonrpc::Invalid invalid = jsonrpc::oversized(prefix, tail, kMaxMessageBytes);
  log_.warn("refused a message: " + invalid.message + (invalid.answer ? "" : " (not answered)"));
  if (invalid.answer) answer_invalid(invalid);
}

void Server::answer_invalid(const jsonrpc::Invalid& invalid) {
  if (!invalid.id.is_null() && id_in_flight(invalid.id)) refuse_reused_id(invalid.id);
  else send_error(invalid.id, invalid.code, invalid.message);
}

bool Server::id_in_flight(const Json& id) const {
  MutexLock lock(&calls_mutex_);
  return calls_.count(id.dump()) > 0;
}

ReadEvent Server::pump(FdLineReader& reader, const std::function<bool()>& keep_reading) {
  Line line;
  for (;;) {
    const ReadEvent event = reader.next(&line);
    if (event != ReadEvent::line) return event;
    if (line.too_long) handle_oversized(line.text, line.tail);
    else handle_line(line.text);
    if (keep_reading && !keep_reading()) return ReadEvent::eof;
  }
}

void Server::dispatch(const Json& id, const std::string& method, Json params) {
  Envelope envelope;
  if (std::optional<EnvelopeError> bad = read_envelope(params, &envelope)) {
    log_.info("refused " + method + " " + id.dump() + ": " + bad->message);
    send(jsonrpc::error_response(id, bad->code, bad->message, bad->data));
    return;
  }
  const bool modern = envelope.modern() || method == "server/discover";
  if (envelope.modern()) {
    if (!stateless_client_.exchange(true)) {
      log_.info("a client speaking protocol " + envelope.version + " (" +
                (envelope.client_info.is_object() ? envelope.client_info.value("name", std::string("unnamed"))
                                                  : std::string("unnamed")) +
                "): served statelessly, without initialize");
    }
    if (extensions_.on_stateless && !stateless_accepted_) {
      if (std::optional<RpcError> refused = extensions_.on_stateless(envelope)) {
        send(jsonrpc::error_response(id, refused->code, refused->message, refused->data));
        return;
      }
      stateless_accepted_ = true;
    }
  }
  if (method == "server/discover") {
    send_result(id, discover(), method, true);
  } else if (method == "subscriptions/listen" && envelope.modern()) {
    listen(id, params);
  } else if (method == "initialize") {
    if (!params.contains("protocolVersion") || !params["protocolVersion"].is_string()) {
      send_error(id, jsonrpc::kInvalidParams, "invalid params: initialize needs \"protocolVersion\" (a string)");
      return;
    }
    // A session is initialized once: a second handshake would change what
    // was negotiated (and, in wrap, what the child was offered) under
    // calls already made.
    if (!negotiated_version_.empty()) {
      send_error(id, jsonrpc::kInvalidRequest, already_initialized_message(negotiated_version_));
      return;
    }
    Reply reply = initialize(params);
    if (!reply.error) negotiated_version_ = reply.result.value("protocolVersion", "");
    send(response_for(id, std::move(reply)));
  } else if (method == "ping") {
    send_result(id, Json::object(), method, modern);
  } else if (method == "tools/list") {
    // Every tool is on one page, so no cursor was ever handed out.
    if (params.is_object() && params.contains("cursor") && !params["cursor"].is_null()) {
      send_error(id, jsonrpc::kInvalidParams,
                 "invalid params: unknown cursor (every tool is listed on one page; call tools/list without one)");
      return;
    }
    send_result(id, list_tools(), method, modern);
  } else if (method == "tools/call") {
    start_tool_call(id, std::move(params), modern);
  } else if (extensions_.on_request) {
    start_other_request(id, method, params, modern);
  } else if (method.rfind("notifications/", 0) == 0) {
    send_error(id, jsonrpc::kMethodNotFound,
               "method not found: " + method + " is a notification, which has no id and gets no answer; send it "
               "without an \"id\"");
  } else {
    send_error(id, jsonrpc::kMethodNotFound, "method not found: " + method);
  }
}

Json Server::passed_on(const Json& params) const {
  return extensions_.keep_sent_text ? sent_params_ : params;
}

Json Server::server_info_json() const {
  MutexLock lock(&info_mutex_);
  Json server_info = {{"name", info_.name}, {"version", info_.version}};
  if (!info_.title.empty()) server_info["title"] = info_.title;
  return server_info;
}

void Server::send_result(const Json& id, Json result, const std::string& method, bool modern) {
  if (modern) stamp_modern_result(result, method, server_info_json());
  send(jsonrpc::result_response(id, std::move(result)));
}

Json Server::discover() {
  MutexLock lock(&info_mutex_);
  Json capabilities = capabilities_.is_null() ? Json{{"tools", {{"listChanged", false}}}} : capabilities_;
  Json result = {{"supportedVersions", supported_versions_json()}, {"capabilities", std::move(capabilities)}};
  if (!info_.instructions.empty()) result["instructions"] = info_.instructions;
  return result;
}

void Server::listen(const Json& id, const Json& params) {
  const Json filter = params.value("notifications", Json::object());
  const bool tools = filter.is_object() && filter.value("toolsListChanged", false) == true;
  {
    MutexLock lock(&listeners_mutex_);
    listeners_[id.dump()] = {id, tools};
  }
  // Only tool list changes are ever sent: we offer no prompts or resources.
  Json agreed = Json::object();
  if (tools) agreed["toolsListChanged"] = true;
  send(jsonrpc::notification("notifications/subscriptions/acknowledged",
                             {{"notifications", agreed}, {"_meta", {{"io.modelcontextprotocol/subscriptionId", id}}}}));
}

Reply Server::initialize(const Json& params) {
  const std::string requested = params["protocolVersion"].get<std::string>();
  const std::string version = negotiate_protocol_version(requested);
  std::string client = "unknown client";
  if (auto info = params.find("clientInfo"); info != params.end()) {
    client = string_field(*info, "name", client) + " " + string_field(*info, "version", "");
  }
  log_.info("initialize from " + client + ": protocol " + requested +
            (version == requested ? "" : " not supported, answering " + version));
  if (extensions_.on_initialize) {
    if (std::optional<RpcError> refused = extensions_.on_initialize(params)) {
      return Reply::failure(refused->code, std::move(refused->message), std::move(refused->data));
    }
  }

  MutexLock lock(&info_mutex_);
  Json server_info = {{"name", info_.name}, {"version", info_.version}};
  if (!info_.title.empty()) server_info["title"] = info_.title;
  Json capabilities = capabilities_.is_null() ? Json{{"tools", {{"listChanged", false}}}} : capabilities_;
  Json result = {{"protocolVersion", version},
                 {"capabilities", std::move(capabilities)},
                 {"serverInfo", server_info}};
  if (!info_.instructions.empty()) result["instructions"] = info_.instructions;
  return Reply::of(std::move(result));
}

Json Server::list_tools() const {
  Json tools = Json::array();
  for (const auto& tool : tool_set()->tools) tools.push_back(tool.listing());
  return Json{{"tools", tools}};
}

void Server::on_notification(const std::string& method, const Json& params) {
  if (method == "notifications/initialized") {
    initialized_ = true;
    log_.debug("client initialized");
    client_ready();
  } else if (method == "notifications/cancelled") {
    const Json request_id = params.value("requestId", Json());
    {
      MutexLock lock(&listeners_mutex_);
      if (listeners_.erase(request_id.dump()) > 0) {
        log_.debug("subscription " + request_id.dump() + " ended by the client");
        return;
      }
    }
    std::shared_ptr<Call> call;
    {
      MutexLock lock(&calls_mutex_);
      auto it = calls_.find(request_id.dump());
      if (it != calls_.end()) call = it->second;
    }
    if (!call) {
      log_.debug("cancellation of " + request_id.dump() + " ignored: no such call in flight");
    } else {
      log_.info("call " + request_id.dump() + " (" + call->label + ") cancelled by the client (" +
                string_field(params, "reason", "no reason given") + "); its result is not sent");
      call->context->cancel();
    }
    if (extensions_.on_notification) extensions_.on_notification(method, passed_on(params));
  } else if (extensions_.on_notification) {
    extensions_.on_notification(method, passed_on(params));
  } else {
    log_.debug("ignored notification " + method);
  }
}

void Server::start_tool_call(const Json& id, Json params, bool modern) {
  const auto name = params.find("name");
  if (name == params.end() || !name->is_string()) {
    send_error(id, jsonrpc::kInvalidParams, "invalid params: tools/call needs \"name\" (a string)");
    return;
  }
  std::shared_ptr<const ToolSet> tools = tool_set();
  const auto tool_it = tools->index.find(name->get<std::string>());
  if (tool_it == tools->index.end()) {
    std::string names;
    for (const auto& tool : tools->tools) names += (names.empty() ? "" : ", ") + tool.name;
    send_error(id, jsonrpc::kInvalidParams, "unknown tool \"" + name->get<std::string>() + "\"; this server has: " + names);
    return;
  }
  const Tool& tool = tools->tools[tool_it->second];
  const std::optional<CompiledSchema>& input_check = tools->input_checks[tool_it->second];
  Json arguments = Json::object();
  if (auto a = params.find("arguments"); a != params.end() && !a->is_null()) {
    if (!a->is_object()) {
      send_error(id, jsonrpc::kInvalidParams, "invalid params: \"arguments\" must be an object");
      return;
    }
    arguments = std::move(*a);  // params keep their _meta, which register_call reads
  }
  if (input_check) {
    if (std::string why = input_check->violation(arguments); !why.empty()) {
      // A line already: not serialized again.
      deliver(invalid_arguments_line(id, tool, why, modern), [] { return std::string("a refusal"); });
      return;
    }
  }

  auto call = std::make_shared<Call>();
  call->id = id;
  call->key = id.dump();
  call->label = tool.name;
  call->modern = modern;
  call->tool = &tool;
  call->tools = std::move(tools);
  call->arguments = std::move(arguments);
  if (!register_call(call, params)) return;
  if (tool.async_handler) start_async_tool_call(call);
  else if (!pool_.try_submit([this, call] { run_tool_call(call); })) refuse_busy(call);
}

// The reader never waits for room: the calls it would wait for may
// themselves wait for a line only the reader can take in (a relayed
// sampling answer, a cancellation), so a full server refuses instead.
void Server::refuse_busy(const std::shared_ptr<Call>& call) {
  const std::string taken = std::to_string(max_concurrent_calls_) + " running and " +
                            std::to_string(kQueuedPerRunningCall * max_concurrent_calls_) + " waiting";
  log_.warn("refused " + call->label + " call " + call->key + ": no room (" + taken + ")");
  finish_call(call, jsonrpc::serialize(jsonrpc::error_response(
                        call->id, jsonrpc::kServerBusy,
                        "server busy: it already has as many calls in flight as it takes at once (" + taken +
                            "). This call was not started; retry it once some of them have been answered.")));
}

bool Server::register_call(const std::shared_ptr<Call>& call, const Json& params) {
  const auto meta = params.find("_meta");
  Json retry = Json::object();
  if (call->modern) {
    for (const char* key : {"requestState", "inputResponses"}) {
      if (auto it = params.find(key); it != params.end()) retry[key] = *it;
    }
  }
  call->context = std::make_unique<CallContext>(
      call->id, meta != params.end() && meta->is_object() ? *meta : Json::object(),
      extensions_.keep_sent_text ? sent_params_ : Json(), std::move(retry));
  {
    MutexLock lock(&calls_mutex_);
    if (calls_.emplace(call->key, call).second) return true;
  }
  refuse_reused_id(call->id);
  return false;
}

void Server::refuse_reused_id(const Json& id) {
  send_error(id, jsonrpc::kInvalidRequest, "invalid request: id " + id.dump() + " is already used by a call in flight");
}

void Server::start_other_request(const Json& id, const std::string& method, const Json& params, bool modern) {
  auto call = std::make_shared<Call>();
  call->id = id;
  call->key = id.dump();
  call->label = method;
  call->method = method;
  call->params = passed_on(params);
  call->modern = modern;
  if (!register_call(call, params)) return;
  const bool started = pool_.try_submit([this, call] {
    Json response;
    try {
      Reply reply = extensions_.on_request(call->method, call->params);
      if (call->modern && !reply.error) {
        stamp_modern_result(reply.result, call->method, server_info_json());
      }
      response = response_for(call->id, std::move(reply));
    } catch (const std::exception& e) {
      log_.error(call->method + " failed: " + e.what());
      response = jsonrpc::error_response(call->id, jsonrpc::kInternalError,
                                         "internal error in " + call->method + ": " + e.what());
    } catch (...) {
      log_.error(call->method + " failed with an unknown exception");
      response = jsonrpc::error_response(call->id, jsonrpc::kInternalError, "internal error in " + call->method);
    }
    finish_call(call, jsonrpc::serialize(response));
  });
  if (!started) refuse_busy(call);
}

namespace {

// Runs handler, turning what it throws into the error response the client
// gets. Returns the response line.
std::string guarded_response(const Json& id, const Tool& tool, Logger& log,
                             const std::function<std::string()>& handler, bool modern) {
  try {
    return handler();
  } catch (const InvalidArguments& e) {
    return invalid_arguments_line(id, tool, e.what(), modern);
  } catch (const std::exception& e) {
    log.error("tool " + tool.name + " failed: " + e.what());
    return jsonrpc::serialize(jsonrpc::error_response(id, jsonrpc::kInternalError,
                                                      "internal error in " + tool.name + ": " + e.what()));
  } catch (...) {
    log.error("tool " + tool.name + " failed with an unknown exception");
    return jsonrpc::serialize(
        jsonrpc::error_response(id, jsonrpc::kInternalError, "internal error in " + tool.name));
  }
}

}  // namespace

void Server::run_tool_call(const std::shared_ptr<Call>& call) {
  const Tool& tool = *call->tool;
  finish_call(call, guarded_response(
                        call->id, tool, log_,
                        [&] {
                          if (!tool.contextual_handler) {
                            return tool_result_line(call->id, tool.handler(call->arguments), call->modern);
                          }
                          Reply reply = tool.contextual_handler(call->arguments, *call->context);
                          if (call->modern && !reply.error) {
                            stamp_modern_result(reply.result, "tools/call", Json());
                          }
                          return jsonrpc::serialize(response_for(call->id, std::move(reply)));
                        },
                        call->modern));
}

void Server::start_async_tool_call(const std::shared_ptr<Call>& call) {
  bool room = false;
  {
    MutexLock lock(&async_mutex_);
    // As many as the worker pool takes for other tools: running plus waiting.
    room = async_calls_ < (kQueuedPerRunningCall + 1) * max_concurrent_calls_;
    if (room) ++async_calls_;
  }
  if (!room) {
    refuse_busy(call);
    return;
  }
  const Tool& tool = *call->tool;
  // Whichever comes first answers: respond, or an exception before it.
  auto answered = std::make_shared<std::atomic<bool>>(false);
  // unsent runs when the response was not sent, and before the call counts
  // as finished: drain() must not return, and the process go on to fence
  // what it holds, before a withdrawal is queued.
  auto answer = [this, call, answered](const std::function<std::string()>& response,
                                       const std::function<void()>& unsent) {
    if (answered->exchange(true)) return;
    const bool sent = finish_call(call, guarded_response(call->id, *call->tool, log_, response, call->modern));
    if (!sent && unsent) {
      try {
        unsent();
      } catch (const std::exception& e) {
        log_.error("call " + call->key + " (" + call->label + ") was not delivered, and undoing it failed: " + e.what());
      }
    }
    async_call_finished();
  };
  const std::string failure = guarded_response(call->id, tool, log_, [&] {
    tool.async_handler(std::move(call->arguments), [call, answer](ToolResult result) {
      answer([&] { return tool_result_line(call->id, result, call->modern); },
             [&] {
               if (call->tool->on_undelivered) call->tool->on_undelivered(result);
             });
    });
    return std::string();
  }, call->modern);
  if (!failure.empty()) answer([&] { return failure; }, nullptr);
}

void Server::async_call_finished() {
  // Notified under the lock: the answering thread is not the server's, and
  // drain() may return and the server be destroyed as soon as it can see
  // the count reach zero; it must not see that before the notify is over.
  MutexLock lock(&async_mutex_);
  --async_calls_;
  async_changed_.NotifyAll();
}

bool Server::finish_call(const std::shared_ptr<Call>& call, const std::string& response) {
  // The id stays in flight until its answer is out: a message reusing it
  // meanwhile is refused "already used", never answered ahead of it.
  struct LeaveFlight {
    Server& server;
    const std::string& key;
    ~LeaveFlight() {
      MutexLock lock(&server.calls_mutex_);
      server.calls_.erase(key);
    }
  } leave{*this, call->key};
  if (call->context->cancelled()) {
    log_.info("not sending the result of cancelled call " + call->key + " (" + call->label + "): " +
              shorten(response));
    return false;
  }
  return deliver(response, [&] { return "the result of call " + call->key + " (" + call->label + ")"; });
}

void Server::drain() {
  // Calls may wait on requests of ours (a relayed sampling request); with
  // the client's input gone, no answer can come.
  fail_requests("the server stopped reading from the client");
  pool_.wait_idle();
  MutexLock lock(&async_mutex_);
  while (async_calls_ != 0) async_changed_.Wait(&async_mutex_);
}

size_t Server::calls_in_flight() const {
  MutexLock lock(&calls_mutex_);
  return calls_.size();
}

}  // namespace effectfence::mcp
