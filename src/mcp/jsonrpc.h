// JSON-RPC 2.0 messages as MCP uses them: one object per line, string or
// integer ids, no batches. Shared by the server and (later) the proxy's
// client side.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "effectfence/json.h"

namespace effectfence::mcp::jsonrpc {

enum ErrorCode : int {
  kParseError = -32700,
  kInvalidRequest = -32600,
  kMethodNotFound = -32601,
  kInvalidParams = -32602,
  kInternalError = -32603,
  // From the range JSON-RPC leaves to servers: no room for another call now.
  kServerBusy = -32000,
};

struct Request {
  Json id;  // a string or an integer
  std::string method;
  Json params = Json::object();  // an object; {} when absent
};

struct Notification {
  std::string method;
  Json params = Json::object();
};

struct Response {
  Json id;  // null only on an error about an unreadable request
  std::optional<Json> result;
  std::optional<Json> error;
};

// A line that is not a usable message. Answer it with
// error_response(id, code, message).
struct Invalid {
  Json id;  // the request's id when it can be told unambiguously, else null
  int code;
  std::string message;
  bool answer = true;  // false for a malformed response or notification: neither is ever answered
  // A response (no method, a result or an error) that could not be read: it
  // fails the request of ours it answers (`id`, when readable) instead.
  bool response = false;
};

using Message = std::variant<Request, Notification, Response, Invalid>;

// Parses one line with effectfence::parse_strict (duplicate keys, unsafe
// integers, lone surrogates and invalid UTF-8 are refused, never merged) and
// checks the JSON-RPC envelope. A client reading a server's messages keeps
// 64-bit integers (WideIntegers::keep): they are its data, not arguments.
Message classify(std::string_view line, WideIntegers wide = WideIntegers::refuse);
// Classifies a parsed document (the envelope checks of classify()); the
// message takes its params (or result, error) from it without a copy.
Message classify_document(Json document);
// The answer to a line longer than limit, of which prefix is the start and
// tail the end: to the id in prefix, else to an id that closes the line.
Invalid oversized(std::string_view prefix, std::string_view tail, size_t limit);
// The top-level "id" a JSON object text ends with ('"id": 7}' or
// '"id":"x"}', the id the last member), or null: for the end of a line too
// long to read whole. Only a string without escapes or an integer counts.
Json trailing_id(std::string_view tail);
// For an oversized line (its start and end, as Line keeps them) whose start
// says it is a response (a top-level "result" or "error", no "method"): its
// id, from the start or else the end, null if neither shows one. nullopt
// when the line does not say it is a response.
std::optional<Json> oversized_response_id(std::string_view prefix, std::string_view tail);

// Returns the top-level "id" of text when it is a valid id, appears once and
// comes before anything that makes text unreadable; otherwise null. Lets an
// error about a refused or truncated request reach the caller that is
// waiting for it.
Json recover_id(std::string_view text);
// recover_id for what claims to be a response: null unless a top-level
// "result" or "error" key comes before the damage, and no "method" (a
// broken request of the other side must not pass for an answer to ours).
Json recover_response_id(std::string_view text);
// For a whole line from the other side that is not a clean message: the id
// of the answer to one of our requests it may be: one with a "result" or
// "error" (a "method" too), or with nothing but "jsonrpc" and "id", must not
// leave our request waiting; anything else may be a broken request.
Json recover_answer_id(std::string_view text);
// Returns true iff id is a string or an integer that a double keeps exactly.
bool is_valid_id(const Json& id);
// Returns the offset of the first byte that breaks UTF-8, if any.
std::optional<size_t> first_invalid_utf8(std::string_view text);

Json result_response(const Json& id, Json result);
Json error_response(const Json& id, int code, std::string message, Json data = nullptr);
Json request(const Json& id, std::string method, Json params);
Json notification(std::string method, Json params);
// One line of JSON; never throws (invalid UTF-8 in strings is replaced).
std::string serialize(const Json& message);

}  // namespace effectfence::mcp::jsonrpc
