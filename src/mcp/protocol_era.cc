#include "mcp/protocol_era.h"

#include <botan/base64.h>

#include "mcp/jsonrpc.h"
#include "mcp/raw_json.h"
#include "mcp/server.h"

namespace effectfence::mcp {

const char* const kModernProtocolVersions[1] = {"2026-07-28"};
const char* const kProtocolVersionMetaKey = "io.modelcontextprotocol/protocolVersion";
const char* const kClientInfoMetaKey = "io.modelcontextprotocol/clientInfo";
const char* const kClientCapabilitiesMetaKey = "io.modelcontextprotocol/clientCapabilities";
const char* const kServerInfoMetaKey = "io.modelcontextprotocol/serverInfo";

namespace {

constexpr const char* kFirstModern = "2026-07-28";

bool speaks_modern(const std::string& version) {
  for (const char* v : kModernProtocolVersions) {
    if (version == v) return true;
  }
  return false;
}

}  // namespace

bool is_modern_version(const std::string& version) { return version >= kFirstModern; }

namespace {

constexpr const char* kBase64Open = "=?base64?";
constexpr const char* kBase64Close = "?=";

// The headers message is sent with, their values as in the body.
HttpHeaders header_values(const Json& message) {
  HttpHeaders headers;
  if (!message.is_object()) return headers;
  const std::string method = message.value("method", std::string());
  const Json params = message.value("params", Json::object());
  const Json meta = params.is_object() ? params.value("_meta", Json::object()) : Json::object();
  if (meta.is_object()) {
    const auto version = meta.find(kProtocolVersionMetaKey);
    if (version != meta.end() && version->is_string()) headers.emplace_back("MCP-Protocol-Version", *version);
  }
  if (!method.empty()) headers.emplace_back("Mcp-Method", method);
  const char* field = method == "tools/call" || method == "prompts/get" ? "name"
                      : method == "resources/read"                     ? "uri"
                                                                       : nullptr;
  if (field != nullptr && params.is_object()) {
    const auto value = params.find(field);
    if (value != params.end() && value->is_string()) headers.emplace_back("Mcp-Name", *value);
  }
  return headers;
}

bool header_safe(const std::string& value) {
  if (value.empty() || value.front() == ' ' || value.back() == ' ' || value.front() == '\t' || value.back() == '\t') {
    return false;
  }
  if (value.rfind(kBase64Open, 0) == 0) return false;
  for (unsigned char c : value) {
    if (c != '\t' && (c < 32 || c > 126)) return false;
  }
  return true;
}

// The header's value as the body has it; nullopt for a malformed base64 form.
std::optional<std::string> decoded(const std::string& header) {
  const size_t open = std::char_traits<char>::length(kBase64Open), close = std::char_traits<char>::length(kBase64Close);
  if (header.size() < open + close || header.rfind(kBase64Open, 0) != 0 ||
      header.compare(header.size() - close, close, kBase64Close) != 0) {
    return header;
  }
  try {
    const Botan::secure_vector<uint8_t> bytes = Botan::base64_decode(header.substr(open, header.size() - open - close));
    return std::string(bytes.begin(), bytes.end());
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

HttpHeaders standard_request_headers(const Json& message) {
  HttpHeaders headers = header_values(message);
  for (auto& [name, value] : headers) {
    if (!header_safe(value)) {
      value = kBase64Open + Botan::base64_encode(reinterpret_cast<const uint8_t*>(value.data()), value.size()) +
              kBase64Close;
    }
  }
  return headers;
}

std::optional<EnvelopeError> check_standard_headers(
    const Json& message, const std::function<std::optional<std::string>(const std::string&)>& header) {
  const bool request = message.is_object() && message.contains("id");
  for (const auto& [name, body_value] : header_values(message)) {
    const std::optional<std::string> given = header(name);
    if (!given) {
      if (!request) continue;
      return EnvelopeError{kHeaderMismatch,
                           "missing " + name + " header: a 2026-07-28 request over HTTP repeats it from its body (\"" +
                               body_value + "\")",
                           nullptr};
    }
    if (decoded(*given) != body_value) {
      return EnvelopeError{kHeaderMismatch,
                           "header mismatch: " + name + " says \"" + *given + "\" but the body says \"" + body_value + "\"",
                           nullptr};
    }
  }
  return std::nullopt;
}

bool is_stateless_message(const Json& message) {
  if (!message.is_object()) return false;
  if (message.value("method", std::string()) == "server/discover") return true;
  const auto params = message.find("params");
  if (params == message.end() || !params->is_object()) return false;
  const auto meta = params->find("_meta");
  if (meta == params->end() || !meta->is_object()) return false;
  const auto version = meta->find(kProtocolVersionMetaKey);
  return version != meta->end() && version->is_string() && is_modern_version(version->get<std::string>());
}

Json supported_versions_json() {
  Json versions = Json::array();
  for (const char* v : kModernProtocolVersions) versions.push_back(v);
  for (const char* v : kSupportedProtocolVersions) versions.push_back(v);
  return versions;
}

std::optional<EnvelopeError> read_envelope(const Json& params, Envelope* out) {
  *out = Envelope{};
  if (!params.is_object()) return std::nullopt;
  const auto meta = params.find("_meta");
  if (meta == params.end() || !meta->is_object()) return std::nullopt;
  const auto version = meta->find(kProtocolVersionMetaKey);
  if (version == meta->end()) return std::nullopt;
  if (!version->is_string()) {
    return EnvelopeError{jsonrpc::kInvalidParams, std::string("invalid _meta envelope: ") + kProtocolVersionMetaKey +
                                                       " must be a string naming a protocol revision",
                         nullptr};
  }
  const std::string requested = version->get<std::string>();
  // A 2025 revision named in _meta is still a 2025 request: a session (or
  // none, as this server has always allowed) serves it as before.
  if (!is_modern_version(requested)) return std::nullopt;
  if (!speaks_modern(requested)) {
    return EnvelopeError{kUnsupportedProtocolVersion,
                         "unsupported protocol version \"" + requested + "\"; this server speaks " +
                             supported_versions_json().dump(),
                         Json{{"supported", supported_versions_json()}, {"requested", requested}}};
  }
  const auto capabilities = meta->find(kClientCapabilitiesMetaKey);
  if (capabilities == meta->end() || !capabilities->is_object()) {
    return EnvelopeError{jsonrpc::kInvalidParams,
                         std::string("invalid _meta envelope for protocol revision ") + requested + ": " +
                             kClientCapabilitiesMetaKey + " (an object) is required on every request",
                         nullptr};
  }
  out->version = requested;
  out->client_capabilities = *capabilities;
  if (const auto info = meta->find(kClientInfoMetaKey); info != meta->end()) out->client_info = *info;
  return std::nullopt;
}

namespace {

bool cacheable(const std::string& method) {
  return method == "tools/list" || method == "prompts/list" || method == "resources/list" ||
         method == "resources/templates/list" || method == "resources/read" || method == "server/discover";
}

// A result relayed as it was written (wrap): the members the revision
// requires are added where missing, every other byte left as it was.
void stamp_raw(Json& result, const std::string& method) {
  std::string text = raw_json_text(result);
  if (!is_object_text(text)) return;
  if (!member_text(text, "resultType")) text = with_member_text(text, "resultType", "\"complete\"");
  const auto type = member_text(text, "resultType");
  if (cacheable(method) && type && *type == "\"complete\"") {
    if (!member_text(text, "ttlMs")) text = with_member_text(text, "ttlMs", "0");
    if (!member_text(text, "cacheScope")) text = with_member_text(text, "cacheScope", "\"private\"");
  }
  result = raw_json(text);
}

}  // namespace

void stamp_modern_result(Json& result, const std::string& method, const Json& server_info) {
  if (is_raw_json(result)) {
    stamp_raw(result, method);
    return;
  }
  if (!result.is_object()) return;
  if (!result.contains("resultType")) result["resultType"] = "complete";
  // Cacheable results must say for how long: 0, since a wrapped server's
  // tool list may change at any moment, and private, since nothing here is
  // known to be the same for every client.
  if (result["resultType"] == "complete" && cacheable(method)) {
    if (!result.contains("ttlMs")) result["ttlMs"] = 0;
    if (!result.contains("cacheScope")) result["cacheScope"] = "private";
  }
  if (server_info.is_object()) {
    Json& meta = result["_meta"];
    if (meta.is_null()) meta = Json::object();
    if (meta.is_object() && !meta.contains(kServerInfoMetaKey)) meta[kServerInfoMetaKey] = server_info;
  }
}

}  // namespace effectfence::mcp
