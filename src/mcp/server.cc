#include "mcp/server.h"

#include <variant>

#include "mcp/jsonrpc.h"
#include "mcp/schema_check.h"

namespace effectfence::mcp {

const char* const kSupportedProtocolVersions[4] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

std::string negotiate_protocol_version(const std::string& requested) {
  for (const char* version : kSupportedProtocolVersions) {
    if (requested == version) return requested;
  }
  return kSupportedProtocolVersions[0];
}

Json Tool::listing() const {
  Json entry = {{"name", name}, {"description", description}, {"inputSchema", input_schema}};
  if (!title.empty()) entry["title"] = title;
  if (!output_schema.is_null()) entry["outputSchema"] = output_schema;
  if (!annotations.empty()) entry["annotations"] = annotations;
  return entry;
}

struct Server::Call {
  Json id;
  std::string key;
  const Tool* tool = nullptr;
  Json arguments;
  std::atomic<bool> cancelled{false};
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

Server::Server(ServerInfo info, std::vector<Tool> tools, Sink sink, Logger& log, size_t max_concurrent_calls)
    : info_(std::move(info)),
      tools_(std::move(tools)),
      sink_(std::move(sink)),
      log_(log),
      pool_(max_concurrent_calls, 4 * max_concurrent_calls) {
  for (size_t i = 0; i < tools_.size(); ++i) tool_index_[tools_[i].name] = i;
}

Server::~Server() { drain(); }

void Server::send(const Json& message) { sink_(jsonrpc::serialize(message)); }

void Server::send_error(const Json& id, int code, std::string message) {
  log_.debug("answering " + (id.is_null() ? std::string("null") : id.dump()) + " with " + std::to_string(code) +
             ": " + shorten(message));
  send(jsonrpc::error_response(id, code, std::move(message)));
}

void Server::handle_line(std::string_view line) {
  if (is_blank(line)) return;
  Json id;
  try {
    jsonrpc::Message message = jsonrpc::classify(line);
    if (auto* request = std::get_if<jsonrpc::Request>(&message)) {
      id = request->id;
      dispatch(request->id, request->method, request->params);
    } else if (auto* note = std::get_if<jsonrpc::Notification>(&message)) {
      on_notification(note->method, note->params);
    } else if (auto* invalid = std::get_if<jsonrpc::Invalid>(&message)) {
      log_.warn("refused a message: " + invalid->message);
      send_error(invalid->id, invalid->code, invalid->message);
    } else {
      log_.debug("ignored a response: this server sends no requests");
    }
  } catch (const std::exception& e) {
    log_.error(std::string("internal error while handling a message: ") + e.what());
    send_error(id, jsonrpc::kInternalError, std::string("internal error: ") + e.what());
  }
}

void Server::handle_oversized(std::string_view prefix) {
  jsonrpc::Invalid invalid = jsonrpc::oversized(prefix, kMaxMessageBytes);
  log_.warn("refused a message: " + invalid.message);
  send_error(invalid.id, invalid.code, invalid.message);
}

ReadEvent Server::pump(FdLineReader& reader) {
  Line line;
  for (;;) {
    const ReadEvent event = reader.next(&line);
    if (event != ReadEvent::line) return event;
    if (line.too_long) handle_oversized(line.text);
    else handle_line(line.text);
  }
}

void Server::dispatch(const Json& id, const std::string& method, const Json& params) {
  if (method == "initialize") {
    if (!params.contains("protocolVersion") || !params["protocolVersion"].is_string()) {
      send_error(id, jsonrpc::kInvalidParams, "invalid params: initialize needs \"protocolVersion\" (a string)");
      return;
    }
    send(jsonrpc::result_response(id, initialize(params)));
  } else if (method == "ping") {
    send(jsonrpc::result_response(id, Json::object()));
  } else if (method == "tools/list") {
    send(jsonrpc::result_response(id, list_tools()));
  } else if (method == "tools/call") {
    start_tool_call(id, params);
  } else {
    send_error(id, jsonrpc::kMethodNotFound, "method not found: " + method);
  }
}

Json Server::initialize(const Json& params) {
  const std::string requested = params["protocolVersion"].get<std::string>();
  const std::string version = negotiate_protocol_version(requested);
  std::string client = "unknown client";
  if (auto info = params.find("clientInfo"); info != params.end()) {
    client = string_field(*info, "name", client) + " " + string_field(*info, "version", "");
  }
  log_.info("initialize from " + client + ": protocol " + requested +
            (version == requested ? "" : " not supported, answering " + version));

  Json server_info = {{"name", info_.name}, {"version", info_.version}};
  if (!info_.title.empty()) server_info["title"] = info_.title;
  Json result = {{"protocolVersion", version},
                 {"capabilities", {{"tools", {{"listChanged", false}}}}},
                 {"serverInfo", server_info}};
  if (!info_.instructions.empty()) result["instructions"] = info_.instructions;
  return result;
}

Json Server::list_tools() const {
  Json tools = Json::array();
  for (const auto& tool : tools_) tools.push_back(tool.listing());
  return Json{{"tools", tools}};
}

void Server::on_notification(const std::string& method, const Json& params) {
  if (method == "notifications/initialized") {
    initialized_ = true;
    log_.debug("client initialized");
  } else if (method == "notifications/cancelled") {
    const Json request_id = params.value("requestId", Json());
    std::lock_guard<std::mutex> lock(calls_mutex_);
    auto it = calls_.find(request_id.dump());
    if (it == calls_.end()) {
      log_.debug("cancellation of " + request_id.dump() + " ignored: no such call in flight");
      return;
    }
    it->second->cancelled = true;
    log_.info("call " + request_id.dump() + " (" + it->second->tool->name +
              ") cancelled by the client (" + string_field(params, "reason", "no reason given") +
              "); it completes, but its result is not sent");
  } else {
    log_.debug("ignored notification " + method);
  }
}

void Server::start_tool_call(const Json& id, const Json& params) {
  const auto name = params.find("name");
  if (name == params.end() || !name->is_string()) {
    send_error(id, jsonrpc::kInvalidParams, "invalid params: tools/call needs \"name\" (a string)");
    return;
  }
  const auto tool_it = tool_index_.find(name->get<std::string>());
  if (tool_it == tool_index_.end()) {
    std::string names;
    for (const auto& tool : tools_) names += (names.empty() ? "" : ", ") + tool.name;
    send_error(id, jsonrpc::kInvalidParams, "unknown tool \"" + name->get<std::string>() + "\"; this server has: " + names);
    return;
  }
  const Tool& tool = tools_[tool_it->second];
  Json arguments = Json::object();
  if (auto a = params.find("arguments"); a != params.end() && !a->is_null()) {
    if (!a->is_object()) {
      send_error(id, jsonrpc::kInvalidParams, "invalid params: \"arguments\" must be an object");
      return;
    }
    arguments = *a;
  }
  if (std::string why = schema_violation(tool.input_schema, arguments); !why.empty()) {
    send_error(id, jsonrpc::kInvalidParams, "invalid arguments for " + tool.name + ": " + why);
    return;
  }

  auto call = std::make_shared<Call>();
  call->id = id;
  call->key = id.dump();
  call->tool = &tool;
  call->arguments = std::move(arguments);
  {
    std::lock_guard<std::mutex> lock(calls_mutex_);
    if (!calls_.emplace(call->key, call).second) {
      send_error(id, jsonrpc::kInvalidRequest, "invalid request: id " + call->key + " is already used by a call in flight");
      return;
    }
  }
  pool_.submit([this, call] { run_tool_call(call); });
}

void Server::run_tool_call(const std::shared_ptr<Call>& call) {
  const Tool& tool = *call->tool;
  Json response;
  try {
    ToolResult result = tool.handler(call->arguments);
    Json content = Json::array({Json{{"type", "text"}, {"text", jsonrpc::serialize(result.structured)}}});
    response = jsonrpc::result_response(
        call->id, Json{{"content", std::move(content)}, {"structuredContent", std::move(result.structured)},
                       {"isError", result.is_error}});
  } catch (const InvalidArguments& e) {
    response = jsonrpc::error_response(call->id, jsonrpc::kInvalidParams,
                                       "invalid arguments for " + tool.name + ": " + e.what());
  } catch (const std::exception& e) {
    log_.error("tool " + tool.name + " failed: " + e.what());
    response = jsonrpc::error_response(call->id, jsonrpc::kInternalError,
                                       "internal error in " + tool.name + ": " + e.what());
  } catch (...) {
    log_.error("tool " + tool.name + " failed with an unknown exception");
    response = jsonrpc::error_response(call->id, jsonrpc::kInternalError, "internal error in " + tool.name);
  }
  finish_call(call, response);
}

void Server::finish_call(const std::shared_ptr<Call>& call, const Json& response) {
  {
    std::lock_guard<std::mutex> lock(calls_mutex_);
    calls_.erase(call->key);
  }
  if (call->cancelled) {
    log_.info("not sending the result of cancelled call " + call->key + " (" + call->tool->name +
              "): " + shorten(jsonrpc::serialize(response.value("result", response.value("error", Json())))));
    return;
  }
  try {
    send(response);
  } catch (const std::exception& e) {
    log_.error(std::string("could not send a response: ") + e.what());
  }
}

void Server::drain() { pool_.wait_idle(); }

size_t Server::calls_in_flight() const {
  std::lock_guard<std::mutex> lock(calls_mutex_);
  return calls_.size();
}

}  // namespace effectfence::mcp
