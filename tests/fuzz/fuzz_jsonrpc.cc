// The JSON-RPC line reader (classify) and its id recovery on any line.
// Oracle: a request whose id is readable gets exactly one answer, under
// that id. "Readable" is decided here, independently of the code under
// test, by a recognizer of the JSON grammar (RFC 8259, numbers of any size):
// the line is one valid UTF-8 JSON object whose top-level keys are written
// without escapes, with one "id" (a string without escapes, or an integer
// literal within +/-2^53) and a "method". Such a line must classify as a
// Request or as an answered Invalid carrying that id, never as a
// notification, a response or an error under another id.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "json_grammar.h"
#include "mcp/jsonrpc.h"
#include "oracle.h"

using namespace effectfence;
using namespace effectfence::mcp::jsonrpc;
using effectfence::fuzz::Grammar;
using effectfence::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  Message message;
  try {
    message = classify(line);
    (void)recover_id(line);
    (void)recover_answer_id(line);
  } catch (const std::exception& e) {
    fuzz::oracle_failed(std::string("classify threw: ") + e.what());
  }
  std::optional<Json> expected = Grammar(line).readable_request_id();
  if (!expected) return 0;
  if (fuzz::planted()) expected = Json("planted " + expected->dump());
  const std::string shown = std::string(line.substr(0, 300));
  if (const auto* request = std::get_if<Request>(&message)) {
    require(request->id == *expected, "a request answered under " + request->id.dump() + ", not " +
                                          expected->dump() + ": " + shown);
  } else if (const auto* invalid = std::get_if<Invalid>(&message)) {
    require(invalid->answer && !invalid->response,
            "a request with readable id " + expected->dump() + " is left unanswered: " + shown);
    require(invalid->id == *expected, "a request with readable id " + expected->dump() + " answered under " +
                                          invalid->id.dump() + " (" + invalid->message + "): " + shown);
  } else {
    fuzz::oracle_failed("a request with readable id " + expected->dump() +
                        " classified as a notification or response: " + shown);
  }
  return 0;
}
