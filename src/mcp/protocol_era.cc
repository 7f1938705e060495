#include "mcp/protocol_era.h"

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
