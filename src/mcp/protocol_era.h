// The two eras of MCP a server meets: the 2025 revisions (a session opened
// by initialize) and 2026-07-28 (stateless: every request carries its
// protocol version, client info and client capabilities in params._meta;
// server/discover says what the server speaks). A request is told apart by
// its envelope alone, so one server serves both kinds of client at once.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "effectfence/json.h"

namespace effectfence::mcp {

// The stateless revisions we speak, newest first.
extern const char* const kModernProtocolVersions[1];
// Envelope keys of params._meta (2026-07-28).
extern const char* const kProtocolVersionMetaKey;
extern const char* const kClientInfoMetaKey;
extern const char* const kClientCapabilitiesMetaKey;
extern const char* const kServerInfoMetaKey;
// The 2026-07-28 error for a protocol version the server does not speak;
// its data is {"supported": [...], "requested": "<version>"}.
constexpr int kUnsupportedProtocolVersion = -32022;

// Returns true iff version names a stateless revision (2026-07-28 or later;
// revisions are ISO dates, so they order as strings).
bool is_modern_version(const std::string& version);

// What a request's params._meta says about its sender.
struct Envelope {
  std::string version;  // "" for a 2025-era request (no envelope)
  Json client_info;     // null when not given
  Json client_capabilities;
  bool modern() const { return !version.empty(); }
};

// An envelope problem, answered as a JSON-RPC error.
struct EnvelopeError {
  int code = 0;
  std::string message;
  Json data;
};

// Reads the envelope of params. A request without a protocol version in
// _meta, or naming a 2025 revision there, is 2025-era (Envelope::version
// empty): served as before. Returns the error to answer instead when the
// envelope names a revision we do not speak (kUnsupportedProtocolVersion)
// or lacks what 2026-07-28 requires (-32602).
std::optional<EnvelopeError> read_envelope(const Json& params, Envelope* out);

// Returns true iff message (a parsed JSON-RPC message) belongs to the
// stateless revision: server/discover, or a message whose _meta names a
// 2026-07-28-or-later protocol (one we do not speak included: answered
// kUnsupportedProtocolVersion by the server).
bool is_stateless_message(const Json& message);

// Every revision we speak, stateless ones first: server/discover's
// supportedVersions and the data of kUnsupportedProtocolVersion.
Json supported_versions_json();

// Over HTTP, a 2026-07-28 request repeats parts of its body in headers, so
// that proxies can route it without reading the body: MCP-Protocol-Version
// (the envelope's revision), Mcp-Method, and Mcp-Name (params.name of
// tools/call and prompts/get, params.uri of resources/read; a value that is
// not plain printable ASCII is sent as =?base64?<utf-8 in base64>?=).
constexpr int kHeaderMismatch = -32020;  // answered with HTTP 400
using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// The standard headers message (a stateless request or notification) is
// sent with. What the bridge sends, and what a server checks against.
HttpHeaders standard_request_headers(const Json& message);

// Checks the standard headers a stateless message came with; header(name)
// returns a header's value, or nullopt when absent. A request must carry
// each one standard_request_headers names; a notification need not, but
// what it carries must agree. Returns the kHeaderMismatch error to answer.
std::optional<EnvelopeError> check_standard_headers(
    const Json& message, const std::function<std::optional<std::string>(const std::string&)>& header);

// Adds what 2026-07-28 requires of a result of method: resultType
// "complete" (unless one is given), ttlMs and cacheScope on the cacheable
// results, and the server's identity in _meta. A relayed result (raw_json)
// keeps its bytes and gets only the members it lacks; anything but an
// object is left alone.
void stamp_modern_result(Json& result, const std::string& method, const Json& server_info);

}  // namespace effectfence::mcp
